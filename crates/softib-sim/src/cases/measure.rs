//! Reading a case's figures out of run reports: flows by their ends, ports by name, engine
//! counters by host, and time series for plots. A missing flow or port is a
//! [`CaseError::Missing`] naming what was looked for, never a panic.

use super::case::{CaseError, Evaluation};
use crate::report::plots::{chart, Line};
use crate::report::summary::{FlowSummary, HostTransport, PortSummary};
use crate::report::Report;
use softib_fabric::time::{Picos, PS_PER_US};

/// The index of the flow from `src` to `dst` (requester to responder) in `r`.
pub fn flow_index(r: &Report, src: &str, dst: &str) -> Result<usize, CaseError> {
    r.summary
        .flows
        .iter()
        .position(|f| f.src == src && f.dst == dst)
        .ok_or_else(|| {
            CaseError::Missing(format!(
                "{}: no flow {src} -> {dst}",
                r.summary.scenario.name
            ))
        })
}

/// The flow from `src` to `dst`.
pub fn flow<'a>(r: &'a Report, src: &str, dst: &str) -> Result<&'a FlowSummary, CaseError> {
    Ok(&r.summary.flows[flow_index(r, src, dst)?])
}

/// The port called `name` (`h0:1`, `sw0:3`).
pub fn port<'a>(r: &'a Report, name: &str) -> Result<&'a PortSummary, CaseError> {
    r.summary
        .ports
        .iter()
        .find(|p| p.port == name)
        .ok_or_else(|| CaseError::Missing(format!("{}: no port {name}", r.summary.scenario.name)))
}

/// The engine counters of `host`.
pub fn transport<'a>(r: &'a Report, host: &str) -> Result<&'a HostTransport, CaseError> {
    r.summary
        .transport
        .iter()
        .find(|t| t.host == host)
        .ok_or_else(|| {
            CaseError::Missing(format!(
                "{}: no transport counters for {host}",
                r.summary.scenario.name
            ))
        })
}

/// The engine counters of `host` in each of `reports`, in their order: a case comparing
/// runs reads the same host's state from every column.
pub fn transports<'a>(
    reports: &[&'a Report],
    host: &str,
) -> Result<Vec<&'a HostTransport>, CaseError> {
    reports.iter().map(|r| transport(r, host)).collect()
}

/// Bytes as KiB with one decimal.
pub fn kib(b: u64) -> String {
    format!("{:.1}", b as f64 / 1024.0)
}

/// Two rows of a host's engine state in every run, in KiB: all of it, and the part the
/// objects named by `of_which` (`QPs`, `QPs and EECs`) hold. `who` heads the rows
/// (`server h0`). The scale cases compare the state that grows with the peers this way.
pub fn engine_state_rows(e: &mut Evaluation, who: &str, t: &[&HostTransport], of_which: &str) {
    e.row(
        format!("{who}: engine state, KiB"),
        t.iter().map(|t| kib(t.engine_state_bytes)).collect(),
    );
    e.row(
        format!("{who}: of which {of_which}, KiB"),
        t.iter().map(|t| kib(t.qp_state_bytes)).collect(),
    );
}

/// Packets retransmitted by every engine of the run.
pub fn retransmissions(r: &Report) -> u64 {
    r.summary
        .transport
        .iter()
        .map(|t| t.retransmitted_packets)
        .sum()
}

/// Link error counters plus dropped packets over every port of the run: zero means the
/// fabric lost nothing, which is what tells a transport problem from a physical one.
pub fn link_errors_and_drops(r: &Report) -> u64 {
    r.summary.totals.errors + r.summary.totals.drops
}

/// A flow's error completions as `IBV_WC_... xN, ...`, or `0` when there were none.
pub fn error_completions(f: &FlowSummary) -> String {
    if f.error_statuses.is_empty() {
        "0".to_string()
    } else {
        f.error_statuses
            .iter()
            .map(|(k, v)| format!("{k} x{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Gb/s with three decimals.
pub fn gbps(x: f64) -> String {
    format!("{x:.3}")
}

/// A ratio with three decimals.
pub fn ratio(x: f64) -> String {
    format!("{x:.3}")
}

/// A share as a percentage with one decimal.
pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn to_us(t: Picos) -> f64 {
    t as f64 / PS_PER_US as f64
}

/// Gb/s of flow `i` of `r` per time bin, as (bin end in us, Gb/s).
pub fn flow_series(r: &Report, i: usize) -> Vec<(f64, f64)> {
    let bins = &r.flow_bins[i];
    let n = r.duration_ps.div_ceil(r.bin_ps.max(1));
    (0..n)
        .map(|k| {
            let start = k as Picos * r.bin_ps;
            let end = (start + r.bin_ps).min(r.duration_ps.max(start + 1));
            let b = bins.get(k as usize).copied().unwrap_or(0);
            (to_us(end), b as f64 * 8_000.0 / (end - start) as f64)
        })
        .collect()
}

/// The share of each sample interval (in %) that port `name` had data queued and sent
/// nothing (PortXmitWait), as (sample time in us, %).
pub fn wait_series(r: &Report, name: &str) -> Result<Vec<(f64, f64)>, CaseError> {
    let i = r
        .summary
        .ports
        .iter()
        .position(|p| p.port == name)
        .ok_or_else(|| CaseError::Missing(format!("no port {name}")))?;
    let tick_ps = (r.summary.scenario.xmit_wait_tick_ns * 1000.0)
        .round()
        .max(1.0);
    let mut prev = (0u64, 0u64);
    Ok(r.series[i]
        .iter()
        .map(|s| {
            let dt = s.time_ps.saturating_sub(prev.0).max(1);
            let dw = s.xmit_wait.saturating_sub(prev.1);
            prev = (s.time_ps, s.xmit_wait);
            (to_us(s.time_ps), 100.0 * dw as f64 * tick_ps / dt as f64)
        })
        .collect())
}

/// A chart of labelled series over simulated time (the x axis ends at the longest run).
pub fn plot(
    title: &str,
    y_label: &str,
    lines: Vec<(String, Vec<(f64, f64)>)>,
    note: &str,
) -> String {
    let x_max = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(0.0f64, f64::max);
    let lines: Vec<Line> = lines
        .into_iter()
        .map(|(label, points)| Line { label, points })
        .collect();
    chart(title, y_label, x_max, &lines, note)
}

/// The data rate port `name` transmitted in each sample interval (from PortXmitData, LRH
/// through ICRC), as (sample time in us, Gb/s): what `perfquery` deltas would show.
pub fn xmit_rate_series(r: &Report, name: &str) -> Result<Vec<(f64, f64)>, CaseError> {
    let i = r
        .summary
        .ports
        .iter()
        .position(|p| p.port == name)
        .ok_or_else(|| CaseError::Missing(format!("no port {name}")))?;
    let mut prev = (0u64, 0u64);
    Ok(r.series[i]
        .iter()
        .map(|s| {
            let dt = s.time_ps.saturating_sub(prev.0).max(1);
            let dw = s.xmit_data.saturating_sub(prev.1);
            prev = (s.time_ps, s.xmit_data);
            (to_us(s.time_ps), dw as f64 * 4.0 * 8_000.0 / dt as f64)
        })
        .collect())
}
