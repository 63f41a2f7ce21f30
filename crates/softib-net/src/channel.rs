//! Completion channels: CQ notifications behind a file descriptor (`ibv_comp_channel`).
//!
//! A CQ created on a channel and armed with `req_notify_cq` raises one event on the channel
//! when its next (solicited) completion arrives, as `ibv_get_cq_event` reports it. The
//! channel's descriptor is an `eventfd(2)` that is readable exactly while events wait, so an
//! application can put it in its own `epoll`/mio/tokio loop (`AsyncFd`) next to sockets and
//! timers, and call [`CompletionChannel::try_get_event`] when it becomes readable; or it
//! blocks in [`CompletionChannel::get_event`]. Each event taken must eventually be
//! acknowledged ([`CompletionChannel::ack_events`]), as `ibv_ack_cq_events` requires; the
//! unacknowledged count is kept per CQ so an application can check its bookkeeping.
//!
//! The usual loop (libibverbs' "Completion event" pattern): arm, poll the CQ empty (a
//! completion may have arrived before the arming), wait for an event, acknowledge it, arm
//! again, poll again.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use softib_transport::CqHandle;

use crate::eventfd::EventFd;

#[derive(Debug, Default)]
struct Pending {
    /// CQs whose notification fired and was not taken yet, in order.
    queue: VecDeque<CqHandle>,
    /// Events taken but not acknowledged, per CQ.
    unacked: HashMap<CqHandle, u64>,
}

#[derive(Debug)]
pub(crate) struct ChannelInner {
    /// Readiness counter: non-zero exactly while `queue` is not empty.
    fd: EventFd,
    pending: Mutex<Pending>,
}

impl ChannelInner {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a notification of `cq` and makes the descriptor readable.
    pub(crate) fn push(&self, cq: CqHandle) {
        let mut p = self.pending();
        p.queue.push_back(cq);
        if p.queue.len() == 1 {
            // Cannot fail: the counter is 0 here (reset whenever the queue empties), far
            // from the eventfd's limit.
            self.fd.signal();
        }
    }
}

/// A completion channel (`ibv_comp_channel`): CQ notification events behind a descriptor.
///
/// Cloning gives another handle to the same channel.
#[derive(Clone, Debug)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl CompletionChannel {
    /// A new channel with nothing pending. Bind CQs to it with
    /// `Context::create_cq_with_channel` or the CQ builder's `channel`.
    pub fn new() -> io::Result<CompletionChannel> {
        Ok(CompletionChannel {
            inner: Arc::new(ChannelInner {
                fd: EventFd::readiness()?,
                pending: Mutex::new(Pending::default()),
            }),
        })
    }

    /// Takes the next event without blocking: the CQ whose armed notification fired.
    pub fn try_get_event(&self) -> Option<CqHandle> {
        let mut p = self.inner.pending();
        let cq = p.queue.pop_front()?;
        *p.unacked.entry(cq).or_insert(0) += 1;
        if p.queue.is_empty() {
            // Reset the counter so the descriptor stops being readable (EAGAIN if it
            // already was 0, which cannot happen while the queue was non-empty).
            let _ = self.inner.fd.take();
        }
        Some(cq)
    }

    /// Waits up to `timeout` (`None`: forever) for the next event, as `ibv_get_cq_event`.
    /// `Ok(None)` means the time ran out.
    pub fn get_event(&self, timeout: Option<Duration>) -> io::Result<Option<CqHandle>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(cq) = self.try_get_event() {
                return Ok(Some(cq));
            }
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    Some(left)
                }
                None => None,
            };
            crate::sys::poll_two(self.as_raw_fd(), -1, left)?;
        }
    }

    /// Acknowledges `n` events taken for `cq` (`ibv_ack_cq_events`).
    pub fn ack_events(&self, cq: CqHandle, n: u64) {
        let mut p = self.inner.pending();
        if let Some(u) = p.unacked.get_mut(&cq) {
            *u = u.saturating_sub(n);
            if *u == 0 {
                p.unacked.remove(&cq);
            }
        }
    }

    /// Events taken for `cq` and not acknowledged yet.
    pub fn unacked_events(&self, cq: CqHandle) -> u64 {
        self.inner.pending().unacked.get(&cq).copied().unwrap_or(0)
    }

    /// Events waiting to be taken.
    pub fn pending_events(&self) -> usize {
        self.inner.pending().queue.len()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(ch: &CompletionChannel) -> bool {
        crate::sys::poll_two(ch.as_raw_fd(), -1, Some(Duration::ZERO))
            .unwrap()
            .0
    }

    #[test]
    fn descriptor_is_readable_exactly_while_events_wait() {
        let ch = CompletionChannel::new().unwrap();
        assert!(!readable(&ch));
        assert_eq!(ch.try_get_event(), None);
        ch.inner.push(CqHandle(3));
        ch.inner.push(CqHandle(5));
        assert!(readable(&ch));
        assert_eq!(ch.try_get_event(), Some(CqHandle(3)));
        assert!(readable(&ch), "one event still waits");
        assert_eq!(
            ch.get_event(Some(Duration::ZERO)).unwrap(),
            Some(CqHandle(5))
        );
        assert!(!readable(&ch));
        assert_eq!(ch.get_event(Some(Duration::from_millis(5))).unwrap(), None);
        assert_eq!(ch.unacked_events(CqHandle(3)), 1);
        ch.ack_events(CqHandle(3), 1);
        assert_eq!(ch.unacked_events(CqHandle(3)), 0);
        assert_eq!(ch.unacked_events(CqHandle(5)), 1);
    }

    #[test]
    fn a_blocked_waiter_is_woken_by_an_event_from_another_thread() {
        let ch = CompletionChannel::new().unwrap();
        let c2 = ch.clone();
        let t = std::thread::spawn(move || c2.get_event(Some(Duration::from_secs(30))));
        std::thread::sleep(Duration::from_millis(20));
        ch.inner.push(CqHandle(9));
        assert_eq!(t.join().unwrap().unwrap(), Some(CqHandle(9)));
    }
}
