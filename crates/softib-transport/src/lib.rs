//! softib-transport: the sans-IO InfiniBand transport engine (RC, UC, UD), driven by
//! `softib-net` over UDP (RoCEv2) or by the `softib-fabric` simulator.
//!
//! The engine is a plain struct, [`Device`]: the driver passes time in, feeds received
//! packets to [`Device::handle_packet`], takes packets from [`Device::poll_transmit`] and
//! calls [`Device::handle_timeout`] when [`Device::poll_timeout`] says. It never reads a
//! clock, opens a socket, spawns a thread or uses randomness it was not given. See
//! `docs/design/engine-api.md` (the binding API) and `docs/design/engine.md` (the design).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod flags;
pub mod footprint;

pub mod bring_up;
pub mod cc;
mod config;
pub mod counters;
mod cq;
pub mod device;
mod dma;
mod emit;
pub mod error;
pub mod events;
pub mod harness;
pub mod mcast;
pub mod memory;
pub mod psn;
mod qp;
pub mod qpn;
mod rc;
mod rd;
mod shared;
mod srq;
pub mod time;
mod uc;
pub mod ud;
pub mod verbs;
mod wqe_pool;

pub use bring_up::{bring_up_steps, BRING_UP_ATTRS};
pub use config::{DeviceConfig, LinkLayer, ResendPolicy};
pub use counters::{DeviceCounters, DriverDrop, QpCounters};
pub use device::{Device, FIRST_QPN};
pub use error::VerbsError;
pub use events::AsyncEvent;
pub use memory::{mw, Memory, VecMemory};
pub use mw::{next_rkey, InvalidateFault, MwBindFault};
pub use shared::{PathInfo, RxGrh, RxMeta, Transmit, ZeroPayload};
pub use time::{local_ack_timeout, Nanos};
pub use verbs::*;
