//! Case 8: a lane starved by VL arbitration. An output port serves VL15 first, then the
//! high-priority table until it has sent its Limit of High Priority, then the low-priority
//! table (IBA 7.6.9); with the limit at 255 (unbounded) a data VL in the low table gets
//! nothing while a high-priority VL has a packet ready. Management on VL15 is never held
//! back by data VLs, which the management stream in every run shows. The fixed table shares
//! the link by weights.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome, Plot};
use super::measure::{flow, gbps, link_errors_and_drops, pct, plot, port, ratio, xmit_rate_series};
use crate::report::summary::FlowSummary;
use crate::report::Report;

/// The case.
pub const CASE: Case = Case {
    slug: "08-vl-starvation",
    title: "A data VL (or management) starved by VL arbitration",
    runs: &[
        CaseRun {
            role: "problem",
            label: "VL0 high, limit 255",
            text: include_str!("../../../../scenarios/cases/08-vl-starvation/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "low table 0:32,1:32",
            text: include_str!("../../../../scenarios/cases/08-vl-starvation/fix.toml"),
        },
        CaseRun {
            role: "bounded-limit",
            label: "VL0 high, limit 16",
            text: include_str!("../../../../scenarios/cases/08-vl-starvation/bounded-limit.toml"),
        },
    ],
    quick: &[("duration_us", "300")],
    evaluate,
};

/// The switch port towards h2, where compute (VL0), storage (VL1) and management meet.
const EGRESS: &str = "sw0:3";
/// Management stream interval (`interval_ns` in the scenarios).
const SMP_INTERVAL_US: f64 = 1.0;

fn vl_wait(r: &Report, vl: usize) -> u64 {
    port(r, EGRESS)
        .ok()
        .and_then(|p| p.port_vl_xmit_wait.get(vl).copied())
        .unwrap_or(0)
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let reports = o.reports_in_order(&CASE)?;
    let get = |src: &str| -> Result<Vec<&FlowSummary>, CaseError> {
        reports.iter().map(|r| flow(r, src, "h2")).collect()
    };
    let (compute, storage, mgmt) = (get("h0")?, get("h1")?, get("h3")?);
    let link = port(reports[0], EGRESS)?.link_gbps;
    let n = reports.len();
    let row = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>();
    e.row(
        "compute h0 -> h2 (VL0), Gb/s",
        row(&|i| gbps(compute[i].gbps)),
    );
    e.row(
        "storage h1 -> h2 (VL1), Gb/s",
        row(&|i| gbps(storage[i].gbps)),
    );
    e.row(
        "storage packet latency p50, us",
        row(&|i| {
            if storage[i].latency.count == 0 {
                "none delivered".into()
            } else {
                format!("{:.3}", storage[i].latency.p50_us)
            }
        }),
    );
    e.row(
        "sw0:3 PortVLXmitWait VL0, ticks",
        row(&|i| vl_wait(reports[i], 0).to_string()),
    );
    e.row(
        "sw0:3 PortVLXmitWait VL1, ticks",
        row(&|i| vl_wait(reports[i], 1).to_string()),
    );
    e.row(
        "h1:1 share of the run waiting (PortXmitWait)",
        row(&|i| port(reports[i], "h1:1").map_or("-".into(), |p| pct(p.xmit_wait_fraction))),
    );
    e.row(
        "management (VL15) SMPs delivered",
        row(&|i| mgmt[i].packets.to_string()),
    );
    e.row(
        "management latency p99, us",
        row(&|i| format!("{:.3}", mgmt[i].latency.p99_us)),
    );
    e.row(
        "VL15Dropped + errors + drops",
        row(&|i| {
            let t = &reports[i].summary.totals;
            (t.errors + t.drops).to_string()
        }),
    );
    e.row(
        "storage limited by (--explain)",
        row(&|i| storage[i].limited_by.to_string()),
    );

    let (p_st, f_st, b_st) = (storage[0].gbps, storage[1].gbps, storage[2].gbps);
    let duration_us = reports[0].duration_ps as f64 / 1e6;
    e.check(
        "problem: the low-priority VL is starved (< 1% of the link) while VL0 runs at >= 0.9",
        format!(
            "VL1 {} Gb/s, VL0 {} of the link; VL1 waited {} of {} ticks at {EGRESS}",
            gbps(p_st),
            ratio(compute[0].gbps / link),
            vl_wait(reports[0], 1),
            (duration_us * 1000.0) as u64
        ),
        p_st < 0.01 * link && compute[0].gbps >= 0.9 * link,
    );
    let share = (f_st - compute[1].gbps).abs() / compute[1].gbps.max(1e-9);
    e.check(
        "fix: the weighted low table restores VL1 to an even share (>= 0.4 of the link, within 10% of VL0)",
        format!(
            "VL1 {} vs VL0 {} Gb/s ({} of the link)",
            gbps(f_st),
            gbps(compute[1].gbps),
            ratio(f_st / link)
        ),
        f_st >= 0.4 * link && share <= 0.1,
    );
    e.check(
        "a bounded Limit of High Priority lets VL1 through, but only a trickle",
        format!("VL1 {} Gb/s with limit 16", gbps(b_st)),
        b_st > 0.0 && b_st < 0.25 * f_st,
    );
    let expected = (duration_us / SMP_INTERVAL_US).floor() as u64;
    let all_mgmt = mgmt.iter().all(|m| m.packets + 1 >= expected);
    let worst_p99 = mgmt.iter().map(|m| m.latency.p99_us).fold(0.0, f64::max);
    let bad: u64 = reports.iter().map(|r| link_errors_and_drops(r)).sum();
    e.check(
        "management on VL15 is served in every run: all SMPs delivered, p99 < 2 us, nothing dropped",
        format!(
            "{} / {} / {} of {expected} delivered, worst p99 {worst_p99:.3} us, {bad} dropped or errors",
            mgmt[0].packets, mgmt[1].packets, mgmt[2].packets
        ),
        all_mgmt && worst_p99 < 2.0 && bad == 0,
    );

    e.plots.push(Plot {
        name: "bandwidth",
        caption: "transmit rate of the storage host h1 (PortXmitData per interval): nothing with the unbounded high-priority limit, half the link with the weighted table".into(),
        svg: plot(
            "Case 8: storage (VL1) transmit rate at h1:1",
            "Gb/s (PortXmitData per interval)",
            CASE.runs
                .iter()
                .zip(&reports)
                .map(|(run, r)| Ok((run.label.to_string(), xmit_rate_series(r, "h1:1")?)))
                .collect::<Result<Vec<_>, CaseError>>()?,
            "4 KiB raw packets on SL1 -> VL1; compute on VL0 at line rate to the same host",
        ),
    });
    Ok(e)
}
