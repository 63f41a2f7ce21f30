//! Completion queues: bounded, overflow reported as an event, and the notification arm.

use std::collections::VecDeque;

use crate::verbs::{WcFlags, WcStatus, WorkCompletion};

/// What pushing a completion caused, for the device to turn into events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct PushOutcome {
    /// The CQ was full; the completion was dropped (and counted).
    pub overflow: bool,
    /// An armed notification fired.
    pub notify: bool,
}

/// A completion queue of at most `depth` entries.
pub(crate) struct CompletionQueue {
    depth: usize,
    entries: VecDeque<WorkCompletion>,
    /// `Some(solicited_only)` while armed by `req_notify_cq`.
    armed: Option<bool>,
    /// Completions lost to overflow.
    pub overflows: u64,
    /// QPs using this CQ (so it cannot be destroyed under them).
    pub users: u32,
}

impl CompletionQueue {
    pub fn new(depth: u32) -> Self {
        CompletionQueue {
            depth: depth as usize,
            entries: VecDeque::with_capacity(depth as usize),
            armed: None,
            overflows: 0,
            users: 0,
        }
    }

    /// Adds a completion. A full CQ drops it and reports overflow: the caller raises
    /// `AsyncEvent::CqOverflow` so the loss is never silent (IBA 11.4.2.1 "CQ overrun").
    pub fn push(&mut self, wc: WorkCompletion) -> PushOutcome {
        let mut out = PushOutcome::default();
        if self.entries.len() >= self.depth {
            self.overflows += 1;
            out.overflow = true;
            return out;
        }
        // Notification rules (IBA 11.4.2.2): "next completion" fires on any completion,
        // "solicited" on a solicited receive or any error completion.
        if let Some(solicited_only) = self.armed {
            let matches = !solicited_only
                || wc.status != WcStatus::Success
                || wc.wc_flags.contains(WcFlags::SOLICITED);
            if matches {
                self.armed = None;
                out.notify = true;
            }
        }
        self.entries.push_back(wc);
        out
    }

    /// Moves up to `out.len()` completions, oldest first.
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        let n = out.len().min(self.entries.len());
        for (slot, wc) in out.iter_mut().zip(self.entries.drain(..n)) {
            *slot = wc;
        }
        n
    }

    /// Changes the capacity to `depth` entries (ibv_resize_cq(3)), keeping every waiting
    /// completion in order. Refused (false) when more completions wait than `depth` holds:
    /// shrinking must not lose one.
    pub fn resize(&mut self, depth: u32) -> bool {
        if (depth as usize) < self.entries.len() {
            return false;
        }
        self.depth = depth as usize;
        self.entries.shrink_to(self.depth);
        self.entries.reserve(self.depth - self.entries.len());
        true
    }

    /// Removes the completions of QP `qpn` (the QP went back to Reset).
    pub fn purge_qp(&mut self, qpn: u32) {
        self.entries.retain(|w| w.qp_num != qpn);
    }

    /// Arms the notification for the next (or next solicited) completion.
    pub fn arm(&mut self, solicited_only: bool) {
        // Arming "any" after "solicited" widens it; arming solicited never narrows an "any".
        self.armed = Some(match self.armed {
            Some(false) => false,
            _ => solicited_only,
        });
    }

    /// Completions waiting to be polled.
    /// Heap bytes: the reserved completion entries.
    pub fn heap_bytes(&self) -> usize {
        crate::footprint::slots::<WorkCompletion>(self.entries.capacity())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::WcOpcode;

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id: id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: 1,
            src_qp: 0,
            slid: 0,
            sl: 0,
            wc_flags: WcFlags(0),
            vendor_err: 0,
        }
    }

    #[test]
    fn resize_keeps_waiting_completions_and_refuses_to_drop_one() {
        let mut q = CompletionQueue::new(2);
        assert!(!q.push(wc(1)).overflow);
        assert!(!q.push(wc(2)).overflow);
        assert!(q.push(wc(3)).overflow);
        assert!(!q.resize(1), "two wait: shrinking to one would lose one");
        assert!(q.resize(4));
        assert!(!q.push(wc(3)).overflow);
        assert!(!q.push(wc(4)).overflow);
        assert!(q.push(wc(5)).overflow);
        let mut out = [wc(0), wc(0), wc(0), wc(0)];
        assert_eq!(q.poll(&mut out), 4);
        assert_eq!(out.map(|w| w.wr_id), [1, 2, 3, 4]);
        assert!(q.resize(1));
        assert!(!q.push(wc(6)).overflow);
        assert!(q.push(wc(7)).overflow);
    }

    #[test]
    fn purge_removes_only_that_qps_completions() {
        let mut q = CompletionQueue::new(4);
        let mut other = wc(2);
        other.qp_num = 9;
        q.push(wc(1));
        q.push(other);
        q.push(wc(3));
        q.purge_qp(1);
        let mut out = [wc(0), wc(0), wc(0)];
        assert_eq!(q.poll(&mut out), 1);
        assert_eq!((out[0].wr_id, out[0].qp_num), (2, 9));
    }
}
