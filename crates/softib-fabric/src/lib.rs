//! softib-fabric: a deterministic discrete-event simulator of a native InfiniBand fabric.
//!
//! Simulated HCAs drive the real transport engine; links, switches, link-level credit flow
//! control, VL arbitration and port counters follow the InfiniBand Architecture
//! Specification vol. 1 (chapter 7, link layer). See `docs/design/fabric.md` for the model.
//!
//! This crate is the model alone; the experiment around it (TOML scenarios, traffic
//! applications, reports, the field-case library) is `softib-sim`. The surface: build a
//! [`fabric::Fabric`] from a [`topology::Topology`] and a [`fabric::FabricConfig`], attach an
//! [`hca::Endpoint`] per HCA port (e.g. [`engine_hca::EngineHca`], the real engine), run it
//! until a time ([`fabric::Fabric::run_until`]), read its ports and counters.
//!
//! Determinism: time is simulated ([`time::Picos`]), events run in (time, entity, that
//! entity's count) order ([`event::EventQueue`], [`event::Tie`]), and every random stream is
//! derived from the scenario seed ([`rng::SeedTree`]). Nothing here reads a clock. A fabric
//! split into partitions on threads ([`parallel`]) computes exactly what one fabric does.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agents;
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
