//! Thread domains and parent domains (ibv_alloc_td(3), ibv_alloc_parent_domain(3)).
//!
//! A thread domain promises that the objects in it are used by one thread at a time, so a
//! hardware provider may skip locks; softib's engine takes its device lock either way, so
//! the promise costs nothing and gains nothing. A parent domain is a PD for every verb
//! that takes one (QPs, CQs through `IBV_CQ_INIT_ATTR_MASK_PD`, SRQs, MRs, AHs): it
//! carries the engine PD of the PD it was built from, plus the thread domain, the
//! application's context pointer and its optional allocators.
//!
//! The allocators: rdma-core's hardware providers call them for the queue buffers they map
//! to the device (work queues, CQ rings, doorbell records). softib's queues live inside
//! the engine, not in memory the application provides, so there is no such buffer and the
//! allocators are stored (and returned by nothing) but never called. A program that relies
//! on its allocator being called to place queues (e.g. on huge pages) still works; its
//! queues are simply elsewhere.

use crate::abi_ex::{PdAllocFn, PdFreeFn};

/// What a parent domain was built from.
#[derive(Clone, Copy, Debug)]
pub struct ParentDomain {
    /// The `ibv_pd` it was built on (an address: the object is the PD's `PdObj`).
    pub base_pd: usize,
    /// The thread domain (0: none).
    pub td: usize,
    /// `pd_context` (with `IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT`).
    pub pd_context: usize,
    /// The custom allocator (with `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`).
    pub alloc: Option<PdAllocFn>,
    /// The custom free function.
    pub free: Option<PdFreeFn>,
}
