//! Case 6: receiver not ready. A SEND that finds no receive posted is answered with an RNR
//! NAK carrying the responder's RNR timer, and the requester waits that long before trying
//! again (IBA 9.7.5.2.8); after `rnr_retry` RNR NAKs in a row the send completes in error
//! (IBV_WC_RNR_RETRY_EXC_ERR) unless the count is 7, infinite. A receiver that posts
//! receives too slowly therefore runs at a pace set by the RNR timer; a deeper receive queue
//! fixes it.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome, Plot};
use super::measure::{
    error_completions, flow, gbps, link_errors_and_drops, pct, plot, port, ratio, xmit_rate_series,
};
use crate::report::summary::FlowSummary;

/// The case.
pub const CASE: Case = Case {
    slug: "06-receiver-not-ready",
    title: "Receiver not ready (RNR NAKs)",
    runs: &[
        CaseRun {
            role: "problem",
            label: "4 receives, RNR timer 0.64 ms",
            text: include_str!("../../../../scenarios/cases/06-receiver-not-ready/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "512 receives",
            text: include_str!("../../../../scenarios/cases/06-receiver-not-ready/fix.toml"),
        },
        CaseRun {
            role: "short-timer",
            label: "4 receives, RNR timer 0.01 ms",
            text: include_str!(
                "../../../../scenarios/cases/06-receiver-not-ready/short-timer.toml"
            ),
        },
        CaseRun {
            role: "exhausted",
            label: "0.01 ms, rnr_retry 2",
            text: include_str!("../../../../scenarios/cases/06-receiver-not-ready/exhausted.toml"),
        },
    ],
    quick: &[("duration_us", "3000")],
    evaluate,
};

/// Receives the problem's application keeps posted, and the size of a message.
const RQ_DEPTH: f64 = 4.0;
const MESSAGE_BYTES: f64 = 65536.0;
/// The problem's RNR timer: min_rnr_timer code 12, 0.64 ms (IBA 9.7.5.2.8).
const RNR_TIMER_US: f64 = 640.0;
const EXHAUSTED: &str = "IBV_WC_RNR_RETRY_EXC_ERR";

fn qp_counts(f: &FlowSummary) -> (u64, u64) {
    f.qp.as_ref()
        .map_or((0, 0), |q| (q.rnr_naks_sent, q.rnr_naks_received))
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
    let link = port(reports[0], "h0:1")?.link_gbps;
    let n = reports.len();
    let row = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>();
    e.row("goodput, Gb/s (whole run)", row(&|i| gbps(flows[i].gbps)));
    e.row(
        "goodput / link data rate",
        row(&|i| ratio(flows[i].gbps / link)),
    );
    e.row(
        "messages completed",
        row(&|i| flows[i].messages.to_string()),
    );
    e.row(
        "RNR NAKs sent (responder QP)",
        row(&|i| qp_counts(flows[i]).0.to_string()),
    );
    e.row(
        "RNR NAKs received (requester QP)",
        row(&|i| qp_counts(flows[i]).1.to_string()),
    );
    e.row(
        "packets sent again after RNR NAKs",
        row(&|i| {
            flows[i]
                .qp
                .as_ref()
                .map_or(0, |q| q.retransmitted_packets)
                .to_string()
        }),
    );
    e.row("error completions", row(&|i| error_completions(flows[i])));
    e.row(
        "link error counters + drops",
        row(&|i| link_errors_and_drops(reports[i]).to_string()),
    );
    e.row(
        "limited by (--explain)",
        row(&|i| flows[i].limited_by.to_string()),
    );

    let (problem, fix, short, exhausted) = (flows[0], flows[1], flows[2], flows[3]);
    let (sent, received) = qp_counts(problem);
    let link_errors: u64 = reports.iter().map(|r| link_errors_and_drops(r)).sum();
    e.check(
        "problem: RNR NAKs appear (responder sent = requester received > 0), no link error, no error completion",
        format!(
            "{sent} sent, {received} received, {link_errors} link errors in all runs, {} error completions",
            problem.error_completions
        ),
        sent > 0 && sent == received && link_errors == 0 && problem.error_completions == 0,
    );
    // One RNR cycle delivers the receives the application had re-posted (rq_depth) and then
    // waits the RNR timer: throughput ~ rq_depth x size per timer period.
    let paced = RQ_DEPTH * MESSAGE_BYTES * 8.0 / (RNR_TIMER_US * 1000.0);
    let off = (problem.gbps - paced).abs() / paced;
    e.check(
        "problem: throughput follows the RNR timer (within 20% of 4 receives x 64 KiB per 0.64 ms)",
        format!(
            "{} Gb/s measured, {} Gb/s from the timer ({} off)",
            gbps(problem.gbps),
            gbps(paced),
            pct(off)
        ),
        off <= 0.2,
    );
    e.check(
        "a shorter RNR timer (0.01 ms) with the same receiver raises throughput at least 5x",
        format!("{} vs {} Gb/s", gbps(short.gbps), gbps(problem.gbps)),
        short.gbps >= 5.0 * problem.gbps,
    );
    let exc = exhausted
        .error_statuses
        .get(EXHAUSTED)
        .copied()
        .unwrap_or(0);
    e.check(
        "rnr_retry exhausted: the send completes with IBV_WC_RNR_RETRY_EXC_ERR and the flow stops",
        format!(
            "{EXHAUSTED} x{exc}, {} error completions, limited_by = {}",
            exhausted.error_completions, exhausted.limited_by
        ),
        exc >= 1 && exhausted.limited_by == "errors",
    );
    let (fs, fr) = qp_counts(fix);
    e.check(
        "fix: no RNR NAK, >= 0.9 of the link",
        format!(
            "{fs} / {fr} RNR NAKs, {} of the link",
            ratio(fix.gbps / link)
        ),
        fs + fr == 0 && fix.gbps / link >= 0.9,
    );
    e.check(
        "the summary names the receiver as the limit in the problem",
        format!("limited_by = {}", problem.limited_by),
        problem.limited_by == "receiver_not_ready",
    );

    let lines = CASE.runs[..3]
        .iter()
        .zip(&reports)
        .map(|(run, r)| Ok((run.label.to_string(), xmit_rate_series(r, "h0:1")?)))
        .collect::<Result<Vec<_>, CaseError>>()?;
    e.plots.push(Plot {
        name: "bandwidth",
        caption: "h0:1 transmit rate per sample interval (PortXmitData): bursts of four messages between RNR waits, a faster cadence with the short timer, the link's rate with the deep queue".into(),
        svg: plot(
            "Case 6: h0:1 transmit rate",
            "Gb/s (PortXmitData per interval)",
            lines,
            "RC SEND 64 KiB, 16 in flight; receiver re-posts each receive after 50 us",
        ),
    });
    Ok(e)
}
