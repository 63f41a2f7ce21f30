//! The output layer of a simulation run: a [`Report`] ([`output`]) built from a finished
//! fabric and the [`flows::FlowRecorder`] of its traffic, written ([`files`]) as
//! `summary.json` ([`summary::Summary`]), `counters.csv` and `flows.csv` time series
//! ([`csv`]), SVG plots ([`plots`], [`cc_plots`]), and rendered as text for a terminal
//! ([`text`]). [`standout`] picks what a
//! reader should look at first; [`compare`] sets two reports side by side.
//!
//! Determinism: a report is a function of the run. Ports come in node then port order,
//! flows by tag, no clock is read, floats are rounded to fixed decimals and written with
//! fixed formats, so the same scenario and seed give the same files byte for byte.

pub mod capture;
pub mod cc;
pub mod cc_plots;
pub mod compare;
pub mod csv;
pub mod decimals;
pub mod diagnose;
pub mod files;
pub mod flows;
pub mod histogram;
pub mod output;
pub mod plots;
pub mod run;
pub mod standout;
pub mod summary;
pub mod text;

pub use self::output::{Report, RunMeta, SamplePoint};
