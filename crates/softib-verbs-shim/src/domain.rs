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
//! to the device (mlx5: a QP's work queue, which holds its inline data, a CQ's ring, the
//! doorbell records). The one queue memory softib keeps in the application's address space
//! is a QP's send staging region, where inline data waits for the engine (the part of a
//! work queue that holds it on mlx5): a QP created in a parent domain with allocators gets
//! that region from `alloc(pd, pd_context, size, 64, SOFTIB_RES_TYPE_QP_SQ)` and gives it
//! back with `free` when it is destroyed. `IBV_ALLOCATOR_USE_DEFAULT` takes the PD's own
//! region; NULL fails the QP with ENOMEM, as mlx5 does. CQs and SRQs live entirely inside
//! the engine, so their allocations are never asked for.

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

/// The `resource_type` softib passes to a parent domain's allocator for a QP's send staging
/// region. Resource types are per driver in rdma-core (mlx5: `MLX5DV_RES_TYPE_QP` =
/// driver id << 32 | 1); softib has no driver id, so its types are the bare numbers, which
/// an allocator that does not know them answers with `IBV_ALLOCATOR_USE_DEFAULT`.
pub const SOFTIB_RES_TYPE_QP_SQ: u64 = 1;

/// Alignment asked of the allocator (a cache line, as mlx5 asks for its queues).
pub const STAGING_ALIGN: usize = 64;

/// A QP's send staging region from a parent domain's allocator, to give back at destroy.
#[derive(Clone, Copy, Debug)]
pub struct AllocatedStaging {
    /// lkey of its registration in the engine.
    pub lkey: u32,
    /// The buffer the allocator returned.
    pub ptr: usize,
    /// The parent domain (`free`'s first argument).
    pub pd: usize,
    /// `pd_context`.
    pub pd_context: usize,
    /// The free function.
    pub free: Option<PdFreeFn>,
}
