//! The plots of the congestion-control loop: the CCTI of each source and the FECN marks
//! and BECNs over time (`ccti.svg`, `fecn_becn.svg`).

use super::cc::{CcSourceSeries, CcSummary, MAX_SOURCE_LINES};
use super::output::Report;
use super::plots::{chart, Line};
use softib_fabric::time::PS_PER_US;

/// `ccti.svg`: the CCTI of the requesters that reached the highest index.
pub fn ccti_plot(r: &Report, cc: &CcSummary) -> String {
    let mut order: Vec<&CcSourceSeries> = cc.sources.iter().collect();
    order.sort_by(|a, b| {
        b.max_ccti
            .cmp(&a.max_ccti)
            .then(b.mean_ccti.total_cmp(&a.mean_ccti))
            .then(a.flow.cmp(&b.flow))
    });
    let lines: Vec<Line> = order
        .iter()
        .take(MAX_SOURCE_LINES)
        .map(|s| Line {
            label: format!("{} (QP {})", s.name, s.qpn),
            points: cc
                .times_us
                .iter()
                .zip(&s.ccti)
                .map(|(&t, &c)| (t, c as f64))
                .collect(),
        })
        .collect();
    let note = if order.len() > MAX_SOURCE_LINES {
        format!(
            "{MAX_SOURCE_LINES} highest of {} requesters; every one is in cc.csv",
            order.len()
        )
    } else {
        "CCTI of each flow's requester QP, and of paced responders (IBA Annex A10)".to_string()
    };
    chart(
        &format!("CCTI per source: {}", r.summary.scenario.name),
        "CCTI",
        r.duration_ps as f64 / PS_PER_US as f64,
        &lines,
        &note,
    )
}

/// `fecn_becn.svg`: per sample interval, the FECNs each switch port marked and the BECNs
/// each HCA port received, per microsecond (the ports with the most first).
pub fn marks_plot(r: &Report, cc: &CcSummary) -> String {
    let mut series: Vec<(String, &Vec<u64>)> = Vec::new();
    for p in &cc.ports {
        if p.fecn_marked.last().copied().unwrap_or(0) > 0 {
            series.push((format!("{} FECN marked", p.port), &p.fecn_marked));
        }
        if p.becn_received.last().copied().unwrap_or(0) > 0 {
            series.push((format!("{} BECN received", p.port), &p.becn_received));
        }
    }
    let all = series.len();
    series.sort_by(|a, b| b.1.last().cmp(&a.1.last()).then_with(|| a.0.cmp(&b.0)));
    let lines: Vec<Line> = series
        .iter()
        .take(super::plots::MAX_PORT_LINES)
        .map(|(label, v)| {
            let mut prev = (0.0f64, 0u64);
            Line {
                label: label.clone(),
                points: cc
                    .times_us
                    .iter()
                    .zip(v.iter())
                    .map(|(&t, &x)| {
                        let dt = (t - prev.0).max(1e-6);
                        let rate = x.saturating_sub(prev.1) as f64 / dt;
                        prev = (t, x);
                        (t, rate)
                    })
                    .collect(),
            }
        })
        .collect();
    let note = if all == 0 {
        "no port marked or received a FECN/BECN".to_string()
    } else {
        format!(
            "{} of {all} series (largest totals first); counts in cc.csv",
            lines.len()
        )
    };
    chart(
        &format!("FECN marks and BECNs: {}", r.summary.scenario.name),
        "per microsecond",
        r.duration_ps as f64 / PS_PER_US as f64,
        &lines,
        &note,
    )
}
