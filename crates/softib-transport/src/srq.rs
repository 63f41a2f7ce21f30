//! Shared receive queues (IBA 10.2.9) with the limit event.

use crate::qp::recv_queue::{RecvQueue, RecvWqe};
use crate::verbs::{CqHandle, PdHandle, XrcdHandle};

/// What makes an SRQ an XRC SRQ (IBA Annex A14): its domain, and the CQ its receive
/// completions go to (an XRC SRQ, not the target QP, owns the completion queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct XrcSrq {
    pub xrcd: XrcdHandle,
    pub cq: CqHandle,
}

/// A shared receive queue.
pub(crate) struct SharedRecvQueue {
    pub pd: PdHandle,
    pub max_sge: u32,
    pub queue: RecvQueue,
    /// Armed limit (0 = disarmed). Firing disarms it (IBA 10.2.9.3).
    pub limit: u32,
    /// QPs attached.
    pub users: u32,
    /// Set for XRC SRQs.
    pub xrc: Option<XrcSrq>,
}

impl SharedRecvQueue {
    pub fn new(pd: PdHandle, max_wr: u32, max_sge: u32, limit: u32) -> Self {
        SharedRecvQueue {
            pd,
            max_sge,
            queue: RecvQueue::new(max_wr),
            limit,
            users: 0,
            xrc: None,
        }
    }

    /// Takes the oldest WR. Returns it and whether the limit event fires now.
    pub fn take(&mut self) -> Option<(RecvWqe, bool)> {
        let wqe = self.queue.pop()?;
        let fire = self.limit > 0 && (self.queue.len() as u32) < self.limit;
        if fire {
            self.limit = 0;
        }
        Some((wqe, fire))
    }
}
