//! Completion channels and the async event queue: an eventfd the application waits on
//! (or polls, in event mode) plus the queue of what each signal stands for, and the
//! dispatch that turns one engine event into a signal on them (the device's notifier
//! thread, in `objects.rs`, calls it for every event).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use softib_net::eventfd::EventFd;
use softib_transport::AsyncEvent;

use crate::abi::*;

/// An eventfd and the items its signals announce, one per signal.
#[derive(Debug)]
pub struct EventQueue<T> {
    fd: EventFd,
    items: Mutex<Pending<T>>,
}

/// The queued items and the signals left without one.
#[derive(Debug)]
struct Pending<T> {
    items: VecDeque<T>,
    /// Signals whose item was discarded ([`EventQueue::discard`]): a wait that takes one
    /// finds no item and waits for the next signal.
    orphaned: usize,
}

impl<T> EventQueue<T> {
    /// An empty queue with a fresh eventfd.
    pub fn new() -> io::Result<EventQueue<T>> {
        Ok(EventQueue {
            fd: EventFd::semaphore()?,
            items: Mutex::new(Pending {
                items: VecDeque::new(),
                orphaned: 0,
            }),
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending<T>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item` and signals the descriptor.
    pub fn push(&self, item: T) {
        self.pending().items.push_back(item);
        self.fd.signal();
    }

    /// Waits for a signal (or fails with `WouldBlock` on a non-blocking descriptor) and
    /// takes its item; a signal whose item was discarded is passed over.
    pub fn pop(&self) -> io::Result<T> {
        loop {
            self.fd.take()?;
            let mut p = self.pending();
            if let Some(item) = p.items.pop_front() {
                return Ok(item);
            }
            if p.orphaned == 0 {
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
            p.orphaned -= 1;
        }
    }

    /// Drops the queued items `gone` selects: the events of an object being destroyed,
    /// which the kernel takes off the event file too (uverbs releases a destroyed
    /// object's pending events), so no later wait returns a pointer to a freed object.
    pub fn discard(&self, mut gone: impl FnMut(&T) -> bool) {
        let mut p = self.pending();
        let before = p.items.len();
        p.items.retain(|i| !gone(i));
        p.orphaned += before - p.items.len();
    }

    /// The descriptor.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// Where the completion events of a CQ go: its channel's queue, carrying the CQ's address.
#[derive(Clone, Debug)]
pub struct CqTarget {
    /// The channel's queue.
    pub queue: Arc<EventQueue<usize>>,
    /// The `ibv_cq` the application gets back from `ibv_get_cq_event`.
    pub cq_addr: usize,
}

/// Addresses of the C objects an engine event names.
#[derive(Debug, Default)]
pub struct Registry {
    /// CQ handle -> channel target (CQs created with a channel).
    pub cqs: HashMap<u32, CqTarget>,
    /// CQ handle -> `ibv_cq` address (every CQ, for CQ errors).
    pub cq_addrs: HashMap<u32, usize>,
    /// QPN -> `ibv_qp` address.
    pub qps: HashMap<u32, usize>,
    /// SRQ handle -> `ibv_srq` address.
    pub srqs: HashMap<u32, usize>,
}

/// Hands one engine event to whoever waits for it: a CQ notification to the CQ's
/// completion channel, any other event to the device's async event queue, by the C
/// address `registry` maps its object to.
pub fn dispatch(
    registry: &Mutex<Registry>,
    async_events: &EventQueue<(usize, u32)>,
    ev: AsyncEvent,
) {
    let reg = registry.lock().unwrap_or_else(|p| p.into_inner());
    let (addr, ty) = match ev {
        AsyncEvent::CqNotify(cq) => {
            if let Some(t) = reg.cqs.get(&cq.0) {
                t.queue.push(t.cq_addr);
            }
            return;
        }
        AsyncEvent::CqOverflow(cq) => (reg.cq_addrs.get(&cq.0), IBV_EVENT_CQ_ERR),
        AsyncEvent::SrqLimitReached(srq) => (reg.srqs.get(&srq.0), IBV_EVENT_SRQ_LIMIT_REACHED),
        AsyncEvent::QpFatal(q) => (reg.qps.get(&q), IBV_EVENT_QP_FATAL),
        AsyncEvent::CommEstablished(q) => (reg.qps.get(&q), IBV_EVENT_COMM_EST),
        AsyncEvent::SqDrained(q) => (reg.qps.get(&q), IBV_EVENT_SQ_DRAINED),
        AsyncEvent::LastWqeReached(q) => (reg.qps.get(&q), IBV_EVENT_QP_LAST_WQE_REACHED),
    };
    // An event for an object already destroyed has nobody to tell.
    if let Some(&addr) = addr {
        async_events.push((addr, ty));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn discarded_items_never_come_back_and_their_signals_are_skipped() {
        let q = Arc::new(EventQueue::new().unwrap());
        q.push(1);
        q.push(2);
        q.push(1);
        q.discard(|&i| i == 1);
        assert_eq!(q.pop().unwrap(), 2);
        // Two signals are left without items: a wait passes over them and takes the next
        // real item.
        let pusher = {
            let q = q.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                q.push(3);
            })
        };
        assert_eq!(q.pop().unwrap(), 3);
        pusher.join().unwrap();
    }
}
