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
