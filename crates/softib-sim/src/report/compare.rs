//! Two runs side by side (`softib sim --compare A B`): flow bandwidth and latency, port
//! totals, and every port counter that differs, ranked by how far it moved, so that the
//! counter that explains a difference is at the top.

use super::summary::Summary;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One quantity in both runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Delta {
    /// What (`h0:1 PortXmitWait`, `aggregate Gb/s`).
    pub what: String,
    /// Value in run A.
    pub a: f64,
    /// Value in run B.
    pub b: f64,
}

impl Delta {
    /// B relative to A: (b - a) / max(|a|, |b|), in -1..=1 (0 when both are 0). Symmetric
    /// and bounded, so a counter going from 0 to anything ranks as a full move.
    pub fn moved(&self) -> f64 {
        let m = self.a.abs().max(self.b.abs());
        if m == 0.0 {
            0.0
        } else {
            (self.b - self.a) / m
        }
    }

    fn ratio(&self) -> String {
        if self.a == 0.0 && self.b == 0.0 {
            "=".into()
        } else if self.a == 0.0 {
            "new".into()
        } else {
            format!("x{:.3}", self.b / self.a)
        }
    }
}

/// The comparison of two runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Name of run A.
    pub a_name: String,
    /// Name of run B.
    pub b_name: String,
    /// Run-level figures: aggregate bandwidth, latency, totals.
    pub overall: Vec<Delta>,
    /// Flows present in both runs (by name), Gb/s.
    pub flows: Vec<Delta>,
    /// Every (port, counter) that differs, largest move first.
    pub counters: Vec<Delta>,
    /// Ports present in only one run.
    pub unmatched_ports: usize,
}

/// Compares two summaries.
pub fn compare(a: &Summary, b: &Summary) -> Comparison {
    let mut overall = Vec::new();
    let mut d = |what: &str, x: f64, y: f64| {
        overall.push(Delta {
            what: what.to_string(),
            a: x,
            b: y,
        })
    };
    if a.flow_totals.is_some() || b.flow_totals.is_some() {
        let fa = a.flow_totals.as_ref();
        let fb = b.flow_totals.as_ref();
        let g = |f: Option<&super::summary::FlowTotals>,
                 k: fn(&super::summary::FlowTotals) -> f64| f.map_or(0.0, k);
        d(
            "aggregate Gb/s",
            g(fa, |t| t.aggregate_gbps),
            g(fb, |t| t.aggregate_gbps),
        );
        d(
            "slowest flow Gb/s",
            g(fa, |t| t.min_gbps),
            g(fb, |t| t.min_gbps),
        );
        d(
            "Jain's fairness",
            g(fa, |t| t.jain_fairness),
            g(fb, |t| t.jain_fairness),
        );
        d(
            "latency p50 us",
            g(fa, |t| t.latency.p50_us),
            g(fb, |t| t.latency.p50_us),
        );
        d(
            "latency p99 us",
            g(fa, |t| t.latency.p99_us),
            g(fb, |t| t.latency.p99_us),
        );
    }
    d(
        "PortXmitPkts (all ports)",
        a.totals.port_xmit_pkts as f64,
        b.totals.port_xmit_pkts as f64,
    );
    d(
        "PortXmitWait (all ports)",
        a.totals.port_xmit_wait as f64,
        b.totals.port_xmit_wait as f64,
    );
    d(
        "errors (all ports)",
        a.totals.errors as f64,
        b.totals.errors as f64,
    );
    d("drops", a.totals.drops as f64, b.totals.drops as f64);

    let fb: BTreeMap<&str, f64> = b.flows.iter().map(|f| (f.name.as_str(), f.gbps)).collect();
    let flows = a
        .flows
        .iter()
        .filter_map(|f| {
            fb.get(f.name.as_str()).map(|&y| Delta {
                what: f.name.clone(),
                a: f.gbps,
                b: y,
            })
        })
        .collect();

    let pb: BTreeMap<&str, &super::summary::PortSummary> =
        b.ports.iter().map(|p| (p.port.as_str(), p)).collect();
    let mut counters = Vec::new();
    let mut matched = 0;
    for p in &a.ports {
        let Some(q) = pb.get(p.port.as_str()) else {
            continue;
        };
        matched += 1;
        for ((name, x), (_, y)) in p.metrics().into_iter().zip(q.metrics()) {
            if x != y {
                counters.push(Delta {
                    what: format!("{} {name}", p.port),
                    a: x as f64,
                    b: y as f64,
                });
            }
        }
    }
    let tb: BTreeMap<&str, &super::summary::HostTransport> =
        b.transport.iter().map(|t| (t.host.as_str(), t)).collect();
    for t in &a.transport {
        let Some(u) = tb.get(t.host.as_str()) else {
            continue;
        };
        for ((name, x), (_, y)) in t.metrics().into_iter().zip(u.metrics()) {
            if x != y {
                counters.push(Delta {
                    what: format!("{} {name}", t.host),
                    a: x as f64,
                    b: y as f64,
                });
            }
        }
    }
    // Largest relative move first; among equal moves the larger absolute change; then name.
    counters.sort_by(|x, y| {
        y.moved()
            .abs()
            .total_cmp(&x.moved().abs())
            .then((y.b - y.a).abs().total_cmp(&(x.b - x.a).abs()))
            .then(x.what.cmp(&y.what))
    });
    Comparison {
        a_name: a.scenario.name.clone(),
        b_name: b.scenario.name.clone(),
        overall,
        flows,
        counters,
        unmatched_ports: a.ports.len() + b.ports.len() - 2 * matched,
    }
}

/// Counter rows printed at most.
pub const MAX_COUNTER_ROWS: usize = 20;

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x:.3}")
    }
}

/// Renders a comparison for a terminal; `!!` marks what moved by half or more.
pub fn render(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A = {}    B = {}", c.a_name, c.b_name);
    let row = |o: &mut String, d: &Delta| {
        let flag = if d.moved().abs() >= 0.5 { "!!" } else { "  " };
        let _ = writeln!(
            o,
            "  {flag} {:<36} {:>16} {:>16} {:>10}",
            d.what,
            num(d.a),
            num(d.b),
            d.ratio()
        );
    };
    let _ = writeln!(
        o,
        "\n  {:<39} {:>16} {:>16} {:>10}",
        "overall", "A", "B", "B/A"
    );
    for d in &c.overall {
        row(&mut o, d);
    }
    if !c.flows.is_empty() {
        let _ = writeln!(
            o,
            "\n  {:<39} {:>16} {:>16} {:>10}",
            "flows (Gb/s)", "A", "B", "B/A"
        );
        for d in c.flows.iter().take(super::text::MAX_FLOWS) {
            row(&mut o, d);
        }
        if c.flows.len() > super::text::MAX_FLOWS {
            let _ = writeln!(
                o,
                "     ... {} more flows",
                c.flows.len() - super::text::MAX_FLOWS
            );
        }
    }
    let _ = writeln!(
        o,
        "\n  {:<39} {:>16} {:>16} {:>10}",
        "counters that moved most", "A", "B", "B/A"
    );
    if c.counters.is_empty() {
        let _ = writeln!(o, "     no port counter differs");
    }
    for d in c.counters.iter().take(MAX_COUNTER_ROWS) {
        row(&mut o, d);
    }
    if c.counters.len() > MAX_COUNTER_ROWS {
        let _ = writeln!(
            o,
            "     ... {} more counters differ",
            c.counters.len() - MAX_COUNTER_ROWS
        );
    }
    if c.unmatched_ports > 0 {
        let _ = writeln!(
            o,
            "  ({} ports exist in only one of the runs)",
            c.unmatched_ports
        );
    }
    o
}
