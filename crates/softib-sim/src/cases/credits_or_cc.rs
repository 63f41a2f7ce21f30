//! Case 5: credits or congestion control? Two runs of the same 8 -> 1 incast in which every
//! sender is held back to a share of the bottleneck: once by link credits (IBA 7.9: the
//! switch's input buffers fill, the senders wait; no FECN/BECN), once by congestion control
//! (Annex A10: the switch marks FECN, the destination returns BECN, the senders raise their
//! CCTI and pace themselves; their ports hardly wait). From the application's side they look
//! alike; `softib sim --explain` must name the mechanism and cite the counters.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome, Plot};
use super::measure::{gbps, link_errors_and_drops, pct, plot, port, xmit_rate_series};
use crate::report::summary::FlowSummary;
use crate::report::Report;

/// The case.
pub const CASE: Case = Case {
    slug: "05-credits-or-cc",
    title: "Credits or congestion control?",
    runs: &[
        CaseRun {
            role: "credits",
            label: "CC off",
            text: include_str!("../../../../scenarios/cases/05-credits-or-cc/credits.toml"),
        },
        CaseRun {
            role: "cc",
            label: "CC on",
            text: include_str!("../../../../scenarios/cases/05-credits-or-cc/cc.toml"),
        },
    ],
    quick: &[("duration_us", "1000")],
    evaluate,
};

const SENDERS: [&str; 8] = ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"];
/// The switch port towards h0: the congestion point.
const ROOT: &str = "sw0:1";

fn incast(r: &Report) -> Vec<&FlowSummary> {
    r.summary.flows.iter().filter(|f| f.dst == "h0").collect()
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn fecn_marked(r: &Report) -> u64 {
    r.summary.congestion_control.as_ref().map_or(0, |c| {
        c.ports.iter().filter_map(|p| p.fecn_marked.last()).sum()
    })
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let (a, b) = (o.report("credits")?, o.report("cc")?);
    let runs = [a, b];
    let link = port(a, ROOT)?.link_gbps;
    let wait = |r: &Report| -> Result<f64, CaseError> {
        let w: Vec<f64> = SENDERS
            .iter()
            .map(|h| port(r, &format!("{h}:1")).map(|p| p.xmit_wait_fraction))
            .collect::<Result<_, _>>()?;
        Ok(mean(w.into_iter()))
    };
    let (wa, wb) = (wait(a)?, wait(b)?);
    let becns = |r: &Report| -> u64 {
        r.summary
            .transport
            .iter()
            .filter(|t| SENDERS.contains(&t.host.as_str()))
            .map(|t| t.becn_received)
            .sum()
    };
    let throttled = |r: &Report| -> f64 {
        mean(
            r.summary
                .transport
                .iter()
                .filter(|t| SENDERS.contains(&t.host.as_str()))
                .map(|t| t.cc_throttled_us / r.summary.scenario.duration_us),
        )
    };
    let ccti = |r: &Report| -> (f64, u16) {
        r.summary.congestion_control.as_ref().map_or((0.0, 0), |c| {
            (
                mean(c.sources.iter().map(|s| s.mean_ccti)),
                c.sources.iter().map(|s| s.max_ccti).max().unwrap_or(0),
            )
        })
    };
    let per_flow = |r: &Report| mean(incast(r).iter().map(|f| f.gbps));
    let diagnosis = |r: &Report| -> String {
        let mut kinds: Vec<&str> = incast(r).iter().map(|f| f.limited_by).collect();
        kinds.dedup();
        kinds.join(", ")
    };
    e.row(
        "per sender, Gb/s (mean)",
        runs.iter().map(|r| gbps(per_flow(r))).collect(),
    );
    e.row(
        "into h0, Gb/s (all senders)",
        runs.iter()
            .map(|r| gbps(incast(r).iter().map(|f| f.gbps).sum()))
            .collect(),
    );
    e.row(
        "senders' PortXmitWait, share of the run (mean)",
        vec![pct(wa), pct(wb)],
    );
    e.row(
        "FECN marked by switch ports",
        runs.iter().map(|r| fecn_marked(r).to_string()).collect(),
    );
    e.row(
        "BECNs received by the senders",
        runs.iter().map(|r| becns(r).to_string()).collect(),
    );
    e.row(
        "senders throttled by CC, share of the run (mean)",
        runs.iter().map(|r| pct(throttled(r))).collect(),
    );
    e.row(
        "CCTI mean / highest over the senders",
        runs.iter()
            .map(|r| {
                let (m, x) = ccti(r);
                format!("{m:.1} / {x}")
            })
            .collect(),
    );
    e.row(
        "--explain: limited by",
        runs.iter().map(|r| diagnosis(r)).collect(),
    );

    let held = per_flow(a) < 0.2 * link && per_flow(b) < 0.2 * link;
    e.check(
        "both runs look alike from the application: every sender held to a fraction of its link",
        format!(
            "{} and {} Gb/s per sender of {link:.2}",
            gbps(per_flow(a)),
            gbps(per_flow(b))
        ),
        held,
    );
    let a_ok = incast(a).len() == SENDERS.len()
        && incast(a).iter().all(|f| {
            f.limited_by == "link_credits"
                && f.evidence.contains("PortXmitWait")
                && f.evidence.contains("no FECN/BECN")
        });
    e.check(
        "CC off: --explain says link_credits for every sender and cites PortXmitWait, no FECN/BECN",
        format!(
            "{}: {}",
            diagnosis(a),
            incast(a).first().map_or("", |f| f.evidence.as_str())
        ),
        a_ok && becns(a) == 0 && fecn_marked(a) == 0 && wa > 0.5,
    );
    let b_ok = incast(b).len() == SENDERS.len()
        && incast(b)
            .iter()
            .all(|f| f.limited_by == "congestion_control" && f.evidence.contains("BECN"));
    let (cm, cx) = ccti(b);
    e.check(
        "CC on: --explain says congestion_control for every sender and cites the BECNs; FECN/BECN counts up, CCTI raised, ports hardly waiting",
        format!(
            "{}: {} ({} FECN marked, CCTI mean {cm:.1}, senders waiting {})",
            diagnosis(b),
            incast(b).first().map_or("", |f| f.evidence.as_str()),
            fecn_marked(b),
            pct(wb)
        ),
        b_ok && becns(b) > 0 && fecn_marked(b) > 0 && cx > 0 && wb < 0.2,
    );
    let bad: u64 = runs.iter().map(|r| link_errors_and_drops(r)).sum();
    e.check("no error or drop in either run", format!("{bad}"), bad == 0);

    e.plots.push(Plot {
        name: "senders",
        caption: "h1:1 transmit rate (PortXmitData per interval) held to about an eighth of the link in both runs: the look-alike".into(),
        svg: plot(
            "Case 5: one sender's transmit rate",
            "Gb/s (PortXmitData per interval)",
            vec![
                ("CC off (credits)".into(), xmit_rate_series(a, "h1:1")?),
                ("CC on (BECN pacing)".into(), xmit_rate_series(b, "h1:1")?),
            ],
            "8 -> 1 incast of RC WRITEs, 4 KiB, 32 in flight; 4x EDR",
        ),
    });
    Ok(e)
}
