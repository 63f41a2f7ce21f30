//! A QP's receive queue (or the storage of an SRQ): posted receive WRs, oldest first.

use std::collections::VecDeque;

use crate::verbs::Sge;

/// One posted receive WR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
    /// Sum of the SGE lengths: the largest message it accepts.
    pub capacity: u64,
}

impl RecvWqe {
    /// A WQE owning `sges` (a list from the device's pool, `wqe_pool.rs`).
    pub fn with_sges(wr_id: u64, sges: Vec<Sge>) -> Self {
        RecvWqe {
            wr_id,
            capacity: sges.iter().map(|s| s.length as u64).sum(),
            sges,
        }
    }
}

/// Bounded FIFO of receive WRs.
pub(crate) struct RecvQueue {
    depth: u32,
    wqes: VecDeque<RecvWqe>,
}

impl RecvQueue {
    pub fn new(depth: u32) -> Self {
        RecvQueue {
            depth,
            wqes: VecDeque::with_capacity(depth.min(4096) as usize),
        }
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    pub fn is_full(&self) -> bool {
        self.wqes.len() as u32 >= self.depth
    }

    pub fn push(&mut self, wqe: RecvWqe) {
        self.wqes.push_back(wqe);
    }

    /// Puts a WQE back at the head (an abandoned UC message's WQE is reused).
    pub fn push_front(&mut self, wqe: RecvWqe) {
        self.wqes.push_front(wqe);
    }

    pub fn pop(&mut self) -> Option<RecvWqe> {
        self.wqes.pop_front()
    }

    /// Heap bytes: the reserved WQE slots and the scatter/gather lists of the WQEs present.
    pub fn heap_bytes(&self) -> usize {
        use crate::footprint::slots;
        slots::<RecvWqe>(self.wqes.capacity())
            + self
                .wqes
                .iter()
                .map(|w| slots::<Sge>(w.sges.capacity()))
                .sum::<usize>()
    }

    pub fn len(&self) -> usize {
        self.wqes.len()
    }

    /// Removes every WR (flush or reset), oldest first.
    pub fn drain(&mut self) -> impl Iterator<Item = RecvWqe> + '_ {
        self.wqes.drain(..)
    }
}
