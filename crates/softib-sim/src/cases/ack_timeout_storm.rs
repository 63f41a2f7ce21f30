//! Case 2: retransmission storm from a too-short local ACK timeout. The requester
//! retransmits when no acknowledgement came within 4.096 us x 2^local_ack_timeout (IBA
//! 9.7.6.1.3), lost or not; against a responder that takes 10-15 ms to process what it
//! receives, a 4.19 ms timeout resends windows that were never lost. The responder sees
//! them as duplicates (IBA 9.7.5.1.3: re-executed or re-acknowledged, work either way),
//! falls further behind, and after retry_cnt timeouts without progress the QP fails. No link
//! counter shows anything. A timeout above the responder's worst case fixes it.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome, Plot};
use super::measure::{
    error_completions, flow, flow_index, flow_series, gbps, link_errors_and_drops, plot, ratio,
    xmit_rate_series,
};
use crate::report::summary::FlowSummary;

/// The case.
pub const CASE: Case = Case {
    slug: "02-ack-timeout-storm",
    title: "Retransmission storm from a too-short local ACK timeout",
    runs: &[
        CaseRun {
            role: "problem",
            label: "timeout 4.19 ms",
            text: include_str!("../../../../scenarios/cases/02-ack-timeout-storm/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "timeout 268 ms, 512 receives",
            text: include_str!("../../../../scenarios/cases/02-ack-timeout-storm/fix.toml"),
        },
        CaseRun {
            role: "timeout-only",
            label: "timeout 268 ms, 16 receives",
            text: include_str!(
                "../../../../scenarios/cases/02-ack-timeout-storm/timeout-only.toml"
            ),
        },
    ],
    // The full size runs in a fraction of a second (the traffic is slow); a shorter run
    // would end before the problem's QP fails.
    quick: &[],
    evaluate,
};

fn qp(f: &FlowSummary) -> (u64, u64, u64) {
    f.qp.as_ref().map_or((0, 0, 0), |q| {
        (
            q.retransmitted_packets,
            q.local_ack_timeouts,
            q.duplicates_received,
        )
    })
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let reports = o.reports_in_order(&CASE)?;
    let flows: Vec<&FlowSummary> = reports
        .iter()
        .map(|r| flow(r, "h0", "h1"))
        .collect::<Result<_, _>>()?;
    let n = reports.len();
    let row = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>();
    e.row("goodput, Gb/s (whole run)", row(&|i| gbps(flows[i].gbps)));
    e.row(
        "messages completed",
        row(&|i| flows[i].messages.to_string()),
    );
    e.row(
        "message latency p50, us",
        row(&|i| format!("{:.0}", flows[i].latency.p50_us)),
    );
    e.row(
        "local ACK timeouts (requester)",
        row(&|i| qp(flows[i]).1.to_string()),
    );
    e.row(
        "retransmitted packets (requester)",
        row(&|i| qp(flows[i]).0.to_string()),
    );
    e.row(
        "duplicates received (responder)",
        row(&|i| qp(flows[i]).2.to_string()),
    );
    e.row(
        "h0:1 PortXmitPkts (originals + resends)",
        row(&|i| {
            super::measure::port(reports[i], "h0:1")
                .map_or(0, |p| p.port_xmit_pkts)
                .to_string()
        }),
    );
    e.row(
        "link error counters + drops",
        row(&|i| link_errors_and_drops(reports[i]).to_string()),
    );
    e.row("error completions", row(&|i| error_completions(flows[i])));
    e.row(
        "limited by (--explain)",
        row(&|i| flows[i].limited_by.to_string()),
    );

    let (p, f, t) = (flows[0], flows[1], flows[2]);
    let (retx, timeouts, dups) = qp(p);
    let link_errors = reports[0].summary.totals.errors + reports[0].summary.totals.drops;
    e.check(
        "problem: retransmissions and duplicates with zero link errors",
        format!(
            "{retx} packets resent after {timeouts} timeouts, {dups} duplicates at the responder, {link_errors} link errors"
        ),
        retx > 0 && dups > 0 && link_errors == 0,
    );
    let (fr, _, fd) = qp(f);
    e.check(
        "fix: zero retransmissions (and no duplicate)",
        format!("{fr} resent, {fd} duplicates"),
        fr == 0 && fd == 0,
    );
    // The simulated HCAs resend their whole window after each timeout, as hardware on a
    // lossless fabric does (`ResendPolicy::WholeWindow`), so the storm collapses goodput.
    let r = f.gbps / p.gbps.max(1e-12);
    e.check(
        "goodput fix / problem >= 2",
        format!("{} / {} Gb/s = {}", gbps(f.gbps), gbps(p.gbps), ratio(r)),
        r >= 2.0,
    );
    let (tr, _, _) = qp(t);
    e.check(
        "the longer timeout alone removes the retransmissions",
        format!("{tr} resent with the problem's receive queue"),
        tr == 0,
    );
    e.check(
        "the summary blames retransmissions (or the QP error they end in), not the link",
        format!("limited_by = {}: {}", p.limited_by, p.evidence),
        p.limited_by == "retransmissions" || p.limited_by == "errors",
    );

    let (ip, i_f) = (
        flow_index(reports[0], "h0", "h1")?,
        flow_index(reports[1], "h0", "h1")?,
    );
    e.plots.push(Plot {
        name: "goodput",
        caption: "goodput of h0 -> h1 (completed messages per bin) with the short and the long timeout, and what h0:1 put on the wire in the problem (originals and resends)".into(),
        svg: plot(
            "Case 2: goodput and wire rate",
            "Gb/s",
            vec![
                ("problem goodput (timeout 4.19 ms)".into(), flow_series(reports[0], ip)),
                ("problem h0:1 transmit (PortXmitData)".into(), xmit_rate_series(reports[0], "h0:1")?),
                ("fix goodput (timeout 268 ms)".into(), flow_series(reports[1], i_f)),
            ],
            "RC SEND 64 KiB, 16 in flight; responder 10-15 ms late, 24 us per packet",
        ),
    });
    Ok(e)
}
