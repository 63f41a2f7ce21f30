//! Case 7: atomic hotspot. An HCA executes atomics on one address one after the other (the
//! responder must complete each read-modify-write before the next, IBA 9.4.5 and 10.7.2.3),
//! so many hosts FetchAdding one counter share the responder's atomic rate: the aggregate
//! saturates and adding requesters only adds latency. Aggregating locally and writing the
//! updates in batches takes the atomic unit out of the path.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome, Plot};
use super::measure::{gbps, plot};
use crate::report::Report;
use softib_fabric::time::{Picos, PS_PER_US};

/// The case.
pub const CASE: Case = Case {
    slug: "07-atomic-hotspot",
    title: "Atomic hotspot",
    runs: &[
        CaseRun {
            role: "problem",
            label: "8 hosts FetchAdd",
            text: include_str!("../../../../scenarios/cases/07-atomic-hotspot/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "8 hosts, batches of 64",
            text: include_str!("../../../../scenarios/cases/07-atomic-hotspot/fix.toml"),
        },
        CaseRun {
            role: "two-hosts",
            label: "2 hosts FetchAdd",
            text: include_str!("../../../../scenarios/cases/07-atomic-hotspot/two-hosts.toml"),
        },
    ],
    quick: &[("duration_us", "500")],
    evaluate,
};

/// h0's atomic unit: 500 ns per atomic (`atomic_service_ns` in the scenarios).
const ATOMIC_NS: f64 = 500.0;
/// Bytes per counter update (an 8-byte FetchAdd operand, or an 8-byte delta in a batch).
const UPDATE_BYTES: f64 = 8.0;

/// Counter updates per second over the run: payload bytes of completed messages / 8.
fn updates_per_s(r: &Report) -> f64 {
    let bytes: u64 = r.summary.flows.iter().map(|f| f.payload_bytes).sum();
    bytes as f64 / UPDATE_BYTES / (r.duration_ps as f64 / 1e12)
}

fn messages_per_s(r: &Report) -> f64 {
    let n: u64 = r.summary.flows.iter().map(|f| f.messages).sum();
    n as f64 / (r.duration_ps as f64 / 1e12)
}

fn p50(r: &Report) -> f64 {
    r.summary
        .flow_totals
        .as_ref()
        .map_or(0.0, |t| t.latency.p50_us)
}

/// Million updates a second in each flow bin, summed over the flows.
fn update_series(r: &Report) -> Vec<(f64, f64)> {
    let n = r.duration_ps.div_ceil(r.bin_ps.max(1)) as usize;
    (0..n)
        .map(|k| {
            let start = k as Picos * r.bin_ps;
            let end = (start + r.bin_ps).min(r.duration_ps.max(start + 1));
            let bytes: u64 = r
                .flow_bins
                .iter()
                .map(|b| b.get(k).copied().unwrap_or(0))
                .sum();
            (
                end as f64 / PS_PER_US as f64,
                bytes as f64 / UPDATE_BYTES / ((end - start) as f64 / 1e12) / 1e6,
            )
        })
        .collect()
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let reports = o.reports_in_order(&CASE)?;
    let n = reports.len();
    let row = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>();
    e.row(
        "counter updates, million/s",
        row(&|i| format!("{:.3}", updates_per_s(reports[i]) / 1e6)),
    );
    e.row(
        "messages (atomics or WRITEs), million/s",
        row(&|i| format!("{:.3}", messages_per_s(reports[i]) / 1e6)),
    );
    e.row(
        "per host, million messages/s",
        row(&|i| {
            format!(
                "{:.3}",
                messages_per_s(reports[i]) / reports[i].summary.flows.len().max(1) as f64 / 1e6
            )
        }),
    );
    e.row(
        "message latency p50, us",
        row(&|i| format!("{:.3}", p50(reports[i]))),
    );
    e.row(
        "payload into h0, Gb/s",
        row(&|i| {
            gbps(
                reports[i]
                    .summary
                    .flow_totals
                    .as_ref()
                    .map_or(0.0, |t| t.aggregate_gbps),
            )
        }),
    );
    e.row(
        "max PortXmitWait of any port, ticks",
        row(&|i| {
            reports[i]
                .summary
                .ports
                .iter()
                .map(|p| p.port_xmit_wait)
                .max()
                .unwrap_or(0)
                .to_string()
        }),
    );
    e.row(
        "errors + drops + error completions",
        row(&|i| {
            let s = &reports[i].summary;
            (s.totals.errors
                + s.totals.drops
                + s.flows.iter().map(|f| f.error_completions).sum::<u64>())
            .to_string()
        }),
    );

    let (p, f, two) = (reports[0], reports[1], reports[2]);
    let (a8, a2) = (messages_per_s(p), messages_per_s(two));
    let unit = 1e9 / ATOMIC_NS;
    e.check(
        "saturation: 8 requesters get the same aggregate atomic rate as 2 (within 5%), the atomic unit's 1 / 500 ns (within 5%)",
        format!(
            "{:.3} M/s with 8, {:.3} M/s with 2, unit {:.3} M/s",
            a8 / 1e6,
            a2 / 1e6,
            unit / 1e6
        ),
        (a8 - a2).abs() / a2 <= 0.05 && (a8 - unit).abs() / unit <= 0.05,
    );
    e.check(
        "adding requesters adds latency: p50 with 8 at least 3x the p50 with 2",
        format!("{:.3} vs {:.3} us", p50(p), p50(two)),
        p50(p) >= 3.0 * p50(two),
    );
    let (up, uf) = (updates_per_s(p), updates_per_s(f));
    e.check(
        "fix: batched writes carry at least 10x the counter updates",
        format!(
            "{:.3} vs {:.3} million/s ({:.0}x)",
            uf / 1e6,
            up / 1e6,
            uf / up.max(1e-9)
        ),
        uf >= 10.0 * up,
    );
    let bad: u64 = reports
        .iter()
        .map(|r| {
            r.summary.totals.errors
                + r.summary.totals.drops
                + r.summary
                    .flows
                    .iter()
                    .map(|f| f.error_completions)
                    .sum::<u64>()
        })
        .sum();
    e.check(
        "no error, drop or failed completion in any run",
        format!("{bad}"),
        bad == 0,
    );

    e.plots.push(Plot {
        name: "updates",
        caption: "counter updates per second reaching h0 (all hosts), with 8 and with 2 FetchAdd requesters: the same ceiling".into(),
        svg: plot(
            "Case 7: atomic rate into the hotspot",
            "million updates/s",
            vec![
                ("8 hosts FetchAdd".into(), update_series(p)),
                ("2 hosts FetchAdd".into(), update_series(two)),
            ],
            "h0 atomic unit: 500 ns per atomic; batched writes (fix) in the table",
        ),
    });
    Ok(e)
}
