//! softib-net: the softib transport engine on real UDP sockets (RoCEv2, IBA Annex A17).
//!
//! Layers, bottom up (see `docs/design/net.md`):
//! - [`socket`]: the RoCEv2 UDP socket with batched I/O (recvmmsg/GRO, sendmmsg/GSO), ECN
//!   and DF. The crate's `unsafe` code lives in four named modules: the private `sys` (the
//!   socket calls under it), [`raw_memory`] (caller memory by raw pointer) and [`eventfd`]
//!   (the readiness counter and semaphore descriptors), which the verbs shim uses too, and
//!   the private `raw_registration` (the `unsafe` registration verbs).
//! - [`inject`]: seeded fault injection on the send path (drop, duplicate, reorder, corrupt).
//! - [`cc`]: congestion control on RoCEv2 (ECN marks, CNPs, DCQCN / IBA CCA settings).
//! - [`context`]: the handle-based verbs API over a device and its thread; [`verbs`]: the
//!   object API on top of it (builders, owned memory regions, safe posting), as rust-ibverbs
//!   users know it; [`channel`]: completion channels behind a file descriptor.
//! - [`oob`]: out-of-band connection exchange over TCP: perftest's and ibv_rc_pingpong's
//!   formats byte for byte, and softib's own serde endpoint.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod sys;

mod ack_hold;

pub mod cc;
pub mod channel;
pub mod context;
pub mod counters;
pub mod driver;
pub mod eventfd;
pub mod group;
pub mod gsi;
pub mod inject;
mod mcast;
mod memory_windows;
pub mod oob;
pub mod raw_memory;
mod raw_registration;
mod rd;
mod region_guard;
pub mod roce;
pub mod socket;
pub mod tap;
pub mod verbs;
mod xrc;
