//! Completion queues: the builder and the polled / waited / notified queue.

use std::sync::Arc;
use std::time::Duration;

use softib_transport::{CqHandle, VerbsError, WorkCompletion};

use super::{CompletionChannel, Hca};

impl Hca {
    /// Starts building a completion queue (default: 256 entries, no channel).
    pub fn create_cq(&self) -> CqBuilder {
        CqBuilder::new(self.clone())
    }
}

/// Builds a [`CompletionQueue`] (`ibv_create_cq`). Defaults: 256 entries, no channel.
#[derive(Debug)]
pub struct CqBuilder {
    hca: Hca,
    entries: u32,
    channel: Option<CompletionChannel>,
}

impl CqBuilder {
    pub(crate) fn new(hca: Hca) -> CqBuilder {
        CqBuilder {
            hca,
            entries: 256,
            channel: None,
        }
    }

    /// Capacity in completions (a full CQ reports `CqOverflow` and drops completions, so
    /// size it for every outstanding WR of the QPs that use it).
    pub fn set_entries(mut self, entries: u32) -> CqBuilder {
        self.entries = entries;
        self
    }

    /// Sends this CQ's notifications ([`CompletionQueue::req_notify`]) to `channel`.
    pub fn set_channel(mut self, channel: &CompletionChannel) -> CqBuilder {
        self.channel = Some(channel.clone());
        self
    }

    /// Creates the CQ.
    pub fn build(self) -> Result<CompletionQueue, VerbsError> {
        let ctx = self.hca.context();
        let handle = match &self.channel {
            Some(ch) => ctx.create_cq_with_channel(self.entries, ch)?,
            None => ctx.create_cq(self.entries)?,
        };
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                hca: self.hca,
                handle,
                channel: self.channel,
            }),
        })
    }
}

#[derive(Debug)]
struct CqInner {
    hca: Hca,
    handle: CqHandle,
    channel: Option<CompletionChannel>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if crate::region_guard::guard_held() {
            return; // see `region_guard::guard_held`
        }
        // QPs hold their CQs, so none uses this one any more (unless created through the
        // handle API, which then keeps it alive in the device).
        let _ = self.hca.context().destroy_cq(self.handle);
    }
}

/// A completion queue (`ibv_cq`). Cloning gives another handle to the same queue.
#[derive(Clone, Debug)]
pub struct CompletionQueue {
    inner: Arc<CqInner>,
}

impl CompletionQueue {
    /// The engine's handle (for the handle-based API, and to match channel events).
    pub fn handle(&self) -> CqHandle {
        self.inner.handle
    }

    /// The channel this CQ notifies, if any.
    pub fn channel(&self) -> Option<&CompletionChannel> {
        self.inner.channel.as_ref()
    }

    /// Takes up to `out.len()` completions and returns them (`ibv_poll_cq`). Makes progress
    /// first, so a polling application needs no other thread.
    pub fn poll<'a>(&self, out: &'a mut [WorkCompletion]) -> &'a mut [WorkCompletion] {
        let n = self.inner.hca.context().poll_cq(self.inner.handle, out);
        &mut out[..n]
    }

    /// Waits up to `timeout` for completions (an empty result means the time ran out);
    /// the calling thread sleeps while the device thread works.
    pub fn wait<'a>(
        &self,
        out: &'a mut [WorkCompletion],
        timeout: Duration,
    ) -> &'a mut [WorkCompletion] {
        let n = self
            .inner
            .hca
            .context()
            .wait_cq(self.inner.handle, out, timeout);
        &mut out[..n]
    }

    /// Arms the CQ (`ibv_req_notify_cq`): the next completion (the next solicited one with
    /// `solicited_only`) raises one event, on the CQ's channel if it has one, else through
    /// `Context::poll_event`. Poll the CQ after arming: a completion that arrived before
    /// raises nothing.
    pub fn req_notify(&self, solicited_only: bool) {
        self.inner
            .hca
            .context()
            .req_notify_cq(self.inner.handle, solicited_only);
    }

    /// Acknowledges `n` events taken from the channel for this CQ (`ibv_ack_cq_events`).
    pub fn ack_events(&self, n: u64) {
        if let Some(ch) = &self.inner.channel {
            ch.ack_events(self.inner.handle, n);
        }
    }

    /// Completions dropped because the queue was full.
    pub fn overflows(&self) -> u64 {
        self.inner
            .hca
            .context()
            .lock()
            .engine()
            .cq_overflows(self.inner.handle)
    }
}
