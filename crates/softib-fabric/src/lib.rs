//! softib-fabric: a deterministic discrete-event simulator of a native InfiniBand fabric.
//!
//! Simulated HCAs drive the real transport engine; links, switches, link-level credit flow
//! control, VL arbitration and port counters follow the InfiniBand Architecture
//! Specification vol. 1 (chapter 7, link layer). See `docs/design/fabric.md` for the model.
//!
//! This crate is the model alone; the experiment around it (TOML scenarios, traffic
//! applications, reports, the field-case library) is `softib-sim`.
//!
//! # The surface
//!
//! Build a [`Fabric`] from a [`Topology`] and a [`FabricConfig`] ([`Fabric::new`], which
//! fails with a [`BuildError`]); attach an [`Endpoint`] per HCA port ([`Fabric::attach`],
//! e.g. an [`EngineHca`], the real transport engine driven by a [`HostApp`]); run it until a
//! time ([`Fabric::run_until`], in [`Picos`]); read its ports and counters
//! ([`Fabric::port_counters`], [`Fabric::total_counters`], [`Fabric::samples`] with
//! [`FabricConfig::sample_interval_ps`], as [`PortCounters`]). These names are re-exported
//! here; the modules below define them.
//!
//! # The mechanisms
//!
//! Each link-layer mechanism is a module of its own, public so that the experiment crate can
//! configure it and its tests and benches can drive it alone: [`link`] (rates, propagation),
//! [`credits`] (IBA 7.9.4 credit flow control), [`vlarb`] (IBA 7.6.9 VL arbitration), [`qos`]
//! (IBA 7.6.6 SL2VL and the QoS tables), [`routing`] (IBA 18.2.4.3.2 LFTs), [`congestion`]
//! and [`cc_switch`] (IBA Annex A10 switch marking), [`packet`], [`crc`], [`tap`] (the wire
//! capture), [`counters`] (PMA port counters), [`agents`] (SMA, PMA and CCA on the fabric's
//! nodes), [`event`], [`rng`], [`time`]. The port state (`port`) and the fabric's
//! own jobs (construction, the event loop, transmit, crossbar, link state) are private.
//!
//! Determinism: time is simulated ([`time::Picos`]), events run in (time, entity, that
//! entity's count) order ([`event::EventQueue`], [`event::Tie`]), and every random stream is
//! derived from the scenario seed ([`rng::SeedTree`]). Nothing here reads a clock. A fabric
//! split into partitions on threads ([`parallel`]) computes exactly what one fabric does.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agents;
pub mod cc_state;
pub mod cc_switch;
pub mod congestion;
pub mod counters;
pub mod crc;
pub mod credits;
pub mod engine_hca;
pub mod event;
pub mod fabric;
pub mod hca;
pub mod link;
pub mod packet;
pub mod parallel;
mod port;
pub mod qos;
pub mod rng;
pub mod routing;
pub mod tap;
pub mod time;
pub mod topology;
pub mod vlarb;

pub use counters::PortCounters;
pub use engine_hca::{EngineHca, HostApp};
pub use fabric::{BuildError, CounterSample, Fabric, FabricConfig, Forwarding};
pub use hca::{Endpoint, HcaTx};
pub use time::Picos;
pub use topology::{NodeKind, PortAddr, Topology, TopologyError};
