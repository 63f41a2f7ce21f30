//! The real transport engine on simulated HCAs: the library's perftest helpers.
#![allow(unused_imports)]

pub use softib_sim::apps::perftest::*;
