//! How much memory the engine's own state occupies, measured from the live structures: the
//! inline size of each structure (`size_of`) plus what its containers hold on the heap
//! (their capacity, not their length: a send queue reserves its `max_send_wr` slots when
//! the QP is created, as an HCA reserves its WQE buffers). Registered memory (the
//! application's buffers behind memory regions) is not engine state and is not counted.
//!
//! This is what a user compares when deciding between many connected QPs and one datagram
//! QP (RC vs UD at scale): the figures are read off the engine, not estimated.

/// One QP's state, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpFootprint {
    /// The QP structure itself: attributes, requester and responder progress, timers,
    /// counters and congestion-control state.
    pub fixed: usize,
    /// The send queue: its reserved WQE slots and their scatter/gather lists.
    pub send_queue: usize,
    /// The receive queue (0 on an SRQ, whose WQEs the SRQ holds).
    pub recv_queue: usize,
    /// Responder resources: responses waiting to leave and saved READ/atomic results.
    pub responder: usize,
    /// Congestion notifications waiting to leave.
    pub congestion: usize,
}

impl QpFootprint {
    /// Everything.
    pub fn total(&self) -> usize {
        self.fixed + self.send_queue + self.recv_queue + self.responder + self.congestion
    }
}

/// A device's state, bytes (QPs, CQs, SRQs, AHs, the region table and the scheduler).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceFootprint {
    /// Live QPs (EE contexts excluded: they are counted in `eecs`).
    pub qps: usize,
    /// Live EE contexts (RD, IBA 9.7): one per peer channel adapter and context, however
    /// many RD QPs share it.
    pub eecs: usize,
    /// Live address handles.
    pub address_handles: usize,
    /// The QPs and EE contexts: their table slots and each entry's heap parts.
    pub qp_bytes: usize,
    /// Of `qp_bytes`, the EE contexts (each a QP-table entry with RC's requester and
    /// responder state and its send queue, which holds the messages of every RD QP using it).
    pub eec_bytes: usize,
    /// Completion queues (reserved entries).
    pub cq_bytes: usize,
    /// Shared receive queues.
    pub srq_bytes: usize,
    /// The address-handle table.
    pub ah_bytes: usize,
    /// The memory-region table (not the registered memory).
    pub mr_table_bytes: usize,
    /// The transmit round-robin and the timer heap.
    pub scheduler_bytes: usize,
    /// The device structure itself and its event queue.
    pub device_bytes: usize,
}

impl DeviceFootprint {
    /// Everything.
    pub fn total(&self) -> usize {
        self.qp_bytes
            + self.cq_bytes
            + self.srq_bytes
            + self.ah_bytes
            + self.mr_table_bytes
            + self.scheduler_bytes
            + self.device_bytes
    }
}

/// Heap bytes of a container of `T` with `capacity`.
pub(crate) fn slots<T>(capacity: usize) -> usize {
    capacity * std::mem::size_of::<T>()
}
