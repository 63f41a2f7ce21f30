//! A QP's send queue: posted send WRs with their execution progress.
//!
//! WQEs stay in the queue from `post_send` until their completion is generated (for RC,
//! until acknowledged), so a lost packet can always be regenerated from the WQE and the
//! source memory (go-back-N needs no copy of sent packets).

use std::collections::VecDeque;

use crate::shared::PathInfo;
use crate::verbs::{MwBind, Sge, WrOpcode};

/// Where a UD WQE goes, resolved from its address handle at post time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UdTarget {
    pub path: PathInfo,
    pub qpn: u32,
    pub qkey: u32,
}

/// One posted send WR and its progress.
#[derive(Clone, Debug)]
pub(crate) struct SendWqe {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub sges: Vec<Sge>,
    /// Inline data copied at post time (`SendFlags::INLINE`).
    pub inline: Option<Vec<u8>>,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
    pub imm: Option<u32>,
    pub inv_rkey: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    pub ud: Option<UdTarget>,
    /// BIND_MW: what to bind.
    pub bind: Option<MwBind>,
    /// XRC initiator: the remote XRC SRQ (XRCETH).
    pub xrc_srqn: u32,
    /// RD: the posting QP and the destination, for a WQE queued on an EEC.
    pub rd: Option<crate::rd::state::RdWqe>,
    /// Message length in bytes.
    pub length: u64,
    /// First PSN, assigned when the WQE starts.
    pub first_psn: u32,
    /// PSNs the message consumes: packets for SEND/WRITE, response packets for READ, 1 for atomics.
    pub npsn: u32,
    /// READ: response packets placed so far (the resume point of a partial read).
    pub read_done: u32,
}

impl SendWqe {
    /// The PD its local buffers belong to: the posting RD QP's for a WQE on an EEC, else
    /// the QP's own (`own`).
    pub fn pd_or(&self, own: crate::verbs::PdHandle) -> crate::verbs::PdHandle {
        self.rd.map_or(own, |r| r.pd)
    }

    /// Last PSN of the message.
    pub fn last_psn(&self) -> u32 {
        crate::psn::add(self.first_psn, self.npsn.saturating_sub(1))
    }
}

/// Bounded FIFO of send WQEs; `[0, started)` have PSNs assigned.
pub(crate) struct SendQueue {
    depth: u32,
    pub wqes: VecDeque<SendWqe>,
    pub started: usize,
    /// SGE lists of completed WQEs, reused by the next posts (no allocation per WR once warm).
    spare: Vec<Vec<Sge>>,
}

impl SendQueue {
    pub fn new(depth: u32) -> Self {
        SendQueue {
            depth,
            wqes: VecDeque::with_capacity(depth.min(4096) as usize),
            started: 0,
            spare: Vec::new(),
        }
    }

    /// Heap bytes: the reserved WQE slots, the scatter/gather lists and inline data of the
    /// WQEs present, and the spare lists kept for reuse.
    pub fn heap_bytes(&self) -> usize {
        use crate::footprint::slots;
        slots::<SendWqe>(self.wqes.capacity())
            + self
                .wqes
                .iter()
                .map(|w| {
                    slots::<Sge>(w.sges.capacity()) + w.inline.as_ref().map_or(0, |v| v.capacity())
                })
                .sum::<usize>()
            + slots::<Vec<Sge>>(self.spare.capacity())
            + self
                .spare
                .iter()
                .map(|v| slots::<Sge>(v.capacity()))
                .sum::<usize>()
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    pub fn is_full(&self) -> bool {
        self.wqes.len() as u32 >= self.depth
    }

    /// True when a posted WQE has not started yet.
    pub fn has_unstarted(&self) -> bool {
        self.started < self.wqes.len()
    }

    /// Removes the oldest WQE (it completed). Its SGE list goes back to the pool, so the
    /// returned WQE has none.
    pub fn pop_head(&mut self) -> Option<SendWqe> {
        let mut w = self.wqes.pop_front()?;
        self.started = self.started.saturating_sub(1);
        let mut sges = std::mem::take(&mut w.sges);
        if self.spare.len() < self.depth as usize {
            sges.clear();
            self.spare.push(sges);
        }
        Some(w)
    }

    /// An empty SGE list with capacity, from the pool when possible.
    pub fn take_sge_list(&mut self) -> Vec<Sge> {
        self.spare.pop().unwrap_or_default()
    }

    /// Removes everything (flush or reset).
    pub fn clear(&mut self) -> impl Iterator<Item = SendWqe> + '_ {
        self.started = 0;
        self.wqes.drain(..)
    }
}
