//! softib-sim: experiments on the simulated InfiniBand fabric of `softib-fabric`.
//!
//! A TOML scenario goes in ([`scenario`]), a report comes out ([`report`]): the scenario
//! names a topology, fabric settings and traffic; [`setup`] attaches the traffic
//! applications of [`apps`] to the fabric's HCAs; [`report::run`] runs it and gathers
//! counters, flows, the congestion-control time series ([`cc_trace`]) and plots. [`cases`]
//! is the field-case library that `softib cases` runs. See `docs/design/sim.md`.
//!
//! The fabric model itself (time, links, credits, switches, HCAs) is `softib-fabric`; this
//! crate only reads it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apps;
pub mod cases;
pub mod cc_trace;
#[cfg(feature = "mpi")]
pub mod mpi_exchange;
pub mod report;
pub mod scenario;
pub mod serve;
pub mod setup;
