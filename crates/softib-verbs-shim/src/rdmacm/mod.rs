//! The librdmacm layer: rdma_cm ids, event channels and their events, on softib's IB CM
//! (`softib-cm`, driven over QP1 by softib-net) instead of the kernel's ucma
//! (`/dev/infiniband/rdma_cm`). The exported C functions are in `ffi/rdmacm/`; this module
//! holds the objects behind them ([`objects`]), socket address conversions ([`addr`]), the
//! QP transitions rdma_cm makes for its users ([`qp`]), multicast joins ([`mcast`]), and the
//! process's runtime with the thread that turns CM events into rdma_cm events
//! ([`dispatch`]). None of them calls up into `ffi::rdmacm`: they reach the verbs through
//! `ffi::rdmacm::verbs`.
//!
//! Why in the verbs shim and not a second library: rdma_cm ids carry `ibv_context`, PD and
//! QP pointers that must be this shim's objects, and the CM runs on the shim's one device;
//! one preloaded `.so` gives users one thing to preload (docs/verbs-shim.md, "RDMA-CM").

pub mod abi;
pub(crate) mod addr;
pub(crate) mod dispatch;
pub(crate) mod mcast;
pub(crate) mod objects;
pub(crate) mod qp;
