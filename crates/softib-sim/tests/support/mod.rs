//! Test fixtures: the raw-packet source and counting sink of softib-fabric's own tests
//! (`crates/softib-fabric/tests/support/mod.rs`, included rather than copied: they exercise
//! the link layer with packets whose only meaningful header is the LRH), and the `engine`
//! module, which sets up the real transport engine for the end-to-end tests, and the
//! `scenario` module, which runs scenario text.
#![allow(dead_code)]

pub mod engine;
pub mod scenario;

#[path = "../../../softib-fabric/tests/support/mod.rs"]
mod link_layer;

// Not every test file uses the link-layer fixtures.
#[allow(unused_imports)]
pub use link_layer::*;
