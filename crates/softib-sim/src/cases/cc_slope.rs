//! Case 3: congestion-control slope too shallow. With IBA CC (Annex A10) a source's delay
//! between packets is the CCT entry at its CCTI; each BECN raises the CCTI by
//! CCTI_Increase and every CCTI_Timer lowers it by one. A table whose steps add little delay
//! needs many BECNs before a source slows enough, and a long timer then keeps it slow long
//! after the congestion has gone: the loop overshoots both ways, rates and CCTIs swing and
//! the message latency tail grows. A steeper table and a shorter timer settle. The measures
//! are those of the congestion-control acceptance test (`tests/cc_loop.rs`): the coefficient
//! of variation of each sender's rate and of its CCTI, and the 99th-percentile latency.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome, Plot};
use super::measure::{flow_index, flow_series, gbps, link_errors_and_drops, plot};
use crate::report::Report;

/// The case.
pub const CASE: Case = Case {
    slug: "03-cc-slope",
    title: "Congestion-control slope too shallow",
    runs: &[
        CaseRun {
            role: "problem",
            label: "shallow, CCTI_Timer 307 us",
            text: include_str!("../../../../scenarios/cases/03-cc-slope/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "steep, CCTI_Timer 41 us",
            text: include_str!("../../../../scenarios/cases/03-cc-slope/fix.toml"),
        },
    ],
    // A fraction of a second at full size; the measures need the 5 ms after the first.
    quick: &[],
    evaluate,
};

/// Measures start after the loop's first millisecond (its start-up).
const FROM_US: f64 = 1000.0;
/// Rate windows: this many flow bins (of 120 us in the bundled runs) each, so a window holds
/// about 20 messages per sender and counting whole messages does not drown the swings.
const BINS_PER_WINDOW: usize = 2;
const SENDERS: [&str; 8] = ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"];

fn cov(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    if m <= 0.0 {
        return 0.0;
    }
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64;
    var.sqrt() / m
}

/// Mean over senders of the CoV of the sender's rate in windows after `FROM_US`.
fn rate_cov(r: &Report) -> Result<f64, CaseError> {
    let mut sum = 0.0;
    for s in SENDERS {
        let i = flow_index(r, s, "d")?;
        let bins: Vec<f64> = flow_series(r, i)
            .into_iter()
            .filter(|(end, _)| *end - r.bin_ps as f64 / 1e6 >= FROM_US)
            .map(|(_, g)| g)
            .collect();
        let windows: Vec<f64> = bins
            .chunks_exact(BINS_PER_WINDOW)
            .map(|c| c.iter().sum::<f64>())
            .collect();
        sum += cov(&windows);
    }
    Ok(sum / SENDERS.len() as f64)
}

/// Mean over senders of the CoV of the sampled CCTI after `FROM_US`, and the mean CCTI.
fn ccti_cov(r: &Report) -> (f64, f64) {
    let Some(cc) = &r.summary.congestion_control else {
        return (0.0, 0.0);
    };
    let per: Vec<(f64, f64)> = cc
        .sources
        .iter()
        .filter(|s| s.role == "requester")
        .map(|s| {
            let v: Vec<f64> = cc
                .times_us
                .iter()
                .zip(&s.ccti)
                .filter(|(t, _)| **t >= FROM_US)
                .map(|(_, &c)| c as f64)
                .collect();
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            (cov(&v), mean)
        })
        .collect();
    let n = per.len().max(1) as f64;
    (
        per.iter().map(|p| p.0).sum::<f64>() / n,
        per.iter().map(|p| p.1).sum::<f64>() / n,
    )
}

fn becns(r: &Report) -> u64 {
    r.summary.transport.iter().map(|t| t.becn_received).sum()
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let (p, f) = (o.report("problem")?, o.report("fix")?);
    let runs = [p, f];
    let (rp, rf) = (rate_cov(p)?, rate_cov(f)?);
    let ((cp, mp), (cf, mf)) = (ccti_cov(p), ccti_cov(f));
    let p99 = |r: &Report| {
        r.summary
            .flow_totals
            .as_ref()
            .map_or(0.0, |t| t.latency.p99_us)
    };
    let p50 = |r: &Report| {
        r.summary
            .flow_totals
            .as_ref()
            .map_or(0.0, |t| t.latency.p50_us)
    };
    let agg = |r: &Report| {
        r.summary
            .flow_totals
            .as_ref()
            .map_or(0.0, |t| t.aggregate_gbps)
    };
    let jain = |r: &Report| {
        r.summary
            .flow_totals
            .as_ref()
            .map_or(0.0, |t| t.jain_fairness)
    };
    e.row(
        "sender rate CoV (240 us windows after 1 ms, mean)",
        vec![format!("{rp:.3}"), format!("{rf:.3}")],
    );
    e.row(
        "sender CCTI CoV (after 1 ms, mean)",
        vec![format!("{cp:.3}"), format!("{cf:.3}")],
    );
    e.row("CCTI mean", vec![format!("{mp:.1}"), format!("{mf:.1}")]);
    e.row(
        "message latency p50 / p99, us",
        runs.iter()
            .map(|r| format!("{:.1} / {:.1}", p50(r), p99(r)))
            .collect(),
    );
    e.row("into d, Gb/s", runs.iter().map(|r| gbps(agg(r))).collect());
    e.row(
        "Jain's fairness over senders",
        runs.iter().map(|r| format!("{:.3}", jain(r))).collect(),
    );
    e.row(
        "BECNs received by the senders",
        runs.iter().map(|r| becns(r).to_string()).collect(),
    );

    e.check(
        "the shallow table with the long timer oscillates: rate CoV > 1.5x the steep table's",
        format!("{rp:.3} vs {rf:.3}"),
        rp > 1.5 * rf,
    );
    e.check(
        "and its CCTIs swing more: CCTI CoV > 1.5x",
        format!("{cp:.3} vs {cf:.3}"),
        cp > 1.5 * cf,
    );
    e.check(
        "the tail: p99 message latency > 1.5x the steep table's",
        format!("{:.1} vs {:.1} us", p99(p), p99(f)),
        p99(p) > 1.5 * p99(f),
    );
    let bad: u64 = runs.iter().map(|r| link_errors_and_drops(r)).sum();
    e.check("no error or drop", format!("{bad}"), bad == 0);

    let ccti_line = |r: &Report, host: &str| -> Vec<(f64, f64)> {
        r.summary
            .congestion_control
            .as_ref()
            .map_or(Vec::new(), |cc| {
                cc.sources
                    .iter()
                    .find(|s| s.host == host && s.role == "requester")
                    .map_or(Vec::new(), |s| {
                        cc.times_us
                            .iter()
                            .zip(&s.ccti)
                            .map(|(&t, &c)| (t, c as f64))
                            .collect()
                    })
            })
    };
    e.plots.push(Plot {
        name: "ccti",
        caption: "CCTI of two senders (h0 behind the inter-switch link, h4 on the root's switch) with the shallow table and long timer, and with the steep table and short timer".into(),
        svg: plot(
            "Case 3: CCTI over time",
            "CCTI",
            vec![
                ("shallow: h0".into(), ccti_line(p, "h0")),
                ("shallow: h4".into(), ccti_line(p, "h4")),
                ("steep: h0".into(), ccti_line(f, "h0")),
                ("steep: h4".into(), ccti_line(f, "h4")),
            ],
            "CCTI sampled every 10 us; linear CCTs, CCTI_Increase 1",
        ),
    });
    let (ip, i_f) = (flow_index(p, "h4", "d")?, flow_index(f, "h4", "d")?);
    e.plots.push(Plot {
        name: "rate",
        caption: "goodput of one sender (h4 -> d) per 120 us bin: swings with the shallow table, steadier with the steep one".into(),
        svg: plot(
            "Case 3: one sender's rate",
            "Gb/s",
            vec![
                ("shallow, timer 307 us".into(), flow_series(p, ip)),
                ("steep, timer 41 us".into(), flow_series(f, i_f)),
            ],
            "RC WRITE 16 KiB, 4 in flight, 8 -> 1",
        ),
    });
    Ok(e)
}
