//! The field-case library: classic InfiniBand transport problems reproduced as
//! bundled scenario pairs under `scenarios/cases/<NN-name>/` (`problem.toml`, `fix.toml`,
//! sometimes a third run), each with the measurements that show the tell-tale counters and
//! the criteria that say the reproduction is right.
//!
//! A case runs every scenario of its directory through [`crate::report::run`] and
//! evaluates the reports: a table of figures (one column per run), checks that hold or
//! not, and plots. The same code serves three users: the test suite (`tests/field_cases.rs`
//! runs every case at [`Scale::Quick`], shrinking durations and counts, never fidelity),
//! `softib cases` (runs the full-size scenarios and prints the figures), and
//! `softib cases --doc docs/troubleshooting.md`, which regenerates every number, table and
//! plot of the troubleshooting guide ([`doc`]).

pub mod case;
pub mod doc;
pub mod measure;

mod ack_timeout_storm;
mod atomic_hotspot;
mod atomics_over_uc;
mod cc_slope;
mod credit_starvation;
mod credits_or_cc;
mod fence_atomics;
mod mtu_credits;
mod psn_mismatch;
mod rc_ud_rd;
mod rc_vs_ud;
mod receiver_not_ready;
mod vl_starvation;

pub use self::case::{
    render, Case, CaseError, CaseRun, Check, Evaluation, Outcome, Plot, Row, Scale,
};

/// Every case, in the guide's order.
pub fn all() -> &'static [Case] {
    CASES
}

static CASES: &[Case] = &[
    credit_starvation::CASE,
    ack_timeout_storm::CASE,
    cc_slope::CASE,
    mtu_credits::CASE,
    credits_or_cc::CASE,
    receiver_not_ready::CASE,
    atomic_hotspot::CASE,
    vl_starvation::CASE,
    rc_vs_ud::CASE,
    psn_mismatch::CASE,
    fence_atomics::CASE,
    atomics_over_uc::CASE,
    rc_ud_rd::CASE,
];

/// The case whose slug is `id`, starts with `id` (`01`, `01-credit`), or whose number is
/// `id` (`1`).
pub fn find(id: &str) -> Option<&'static Case> {
    let n: Option<u32> = id.parse().ok();
    CASES
        .iter()
        .find(|c| c.slug == id || c.slug.starts_with(id) || n.is_some_and(|n| c.number() == n))
}
