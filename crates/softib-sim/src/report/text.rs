//! The human summary of a run, as printed by `softib sim`: the scenario in one line, the
//! flows, the busiest ports with their counters, and what stood out.

use super::summary::{PortSummary, Summary};
use std::fmt::Write;

/// Flows listed at most (the rest are counted).
pub const MAX_FLOWS: usize = 16;
/// Ports listed at most besides those with errors.
pub const MAX_PORTS: usize = 10;

/// Renders `s` for a terminal.
pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    let sc = &s.scenario;
    let _ = writeln!(o, "scenario {} (seed {})", sc.name, sc.seed);
    let _ = writeln!(
        o,
        "  topology {}: {} hosts, {} switches, {} links, default link {} ({:.2} Gb/s)",
        sc.topology, sc.hosts, sc.switches, sc.links, sc.link, sc.link_gbps
    );
    let _ = writeln!(
        o,
        "  simulated {:.3} us: {} events, {} packets delivered",
        sc.duration_us, s.run.events, s.run.packets_delivered
    );

    if let Some(t) = &s.flow_totals {
        let _ = writeln!(o);
        let _ = writeln!(o, "flows ({}, latency per {}):", t.flows, t.latency.level);
        let _ = writeln!(
            o,
            "  {:<28} {:>9} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9}  limited by",
            "flow", "Gb/s", "active Gb/s", "delivered", "Mmsg/s", "p50 us", "p99 us", "max us"
        );
        let mut order: Vec<usize> = (0..s.flows.len()).collect();
        if s.flows.len() > MAX_FLOWS {
            order.sort_by(|&a, &b| s.flows[b].gbps.total_cmp(&s.flows[a].gbps).then(a.cmp(&b)));
        }
        for &i in order.iter().take(MAX_FLOWS) {
            let f = &s.flows[i];
            let n = if f.messages > 0 {
                f.messages
            } else {
                f.packets
            };
            let _ = writeln!(
                o,
                "  {:<28} {:>9.3} {:>11.3} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3}  {}",
                f.name,
                f.gbps,
                f.active_gbps,
                n,
                f.msg_rate_mpps,
                f.latency.p50_us,
                f.latency.p99_us,
                f.latency.max_us,
                f.limited_by
            );
        }
        if s.flows.len() > MAX_FLOWS {
            let _ = writeln!(
                o,
                "  ... {} more flows in summary.json",
                s.flows.len() - MAX_FLOWS
            );
        }
        for f in s.flows.iter().filter(|f| f.messages_lost > 0) {
            let _ = writeln!(
                o,
                "  {} lost {} messages (unreliable service, never retried)",
                f.name, f.messages_lost
            );
        }
        for f in s.flows.iter().filter(|f| !f.error_statuses.is_empty()) {
            let list: Vec<String> = f
                .error_statuses
                .iter()
                .map(|(k, v)| format!("{k} x{v}"))
                .collect();
            let _ = writeln!(o, "  {} failed: {}", f.name, list.join(", "));
        }
        let _ = writeln!(
            o,
            "  aggregate {:.3} Gb/s; per flow min {:.3} / mean {:.3} / max {:.3}; Jain's fairness {:.3}; p50 {:.3} us, p99 {:.3} us",
            t.aggregate_gbps, t.min_gbps, t.mean_gbps, t.max_gbps, t.jain_fairness, t.latency.p50_us, t.latency.p99_us
        );
    }

    let _ = writeln!(o);
    let mut shown: Vec<&PortSummary> = s.ports.iter().collect();
    shown.sort_by(|a, b| {
        b.port_xmit_data
            .cmp(&a.port_xmit_data)
            .then(a.port.cmp(&b.port))
    });
    let mut list: Vec<&PortSummary> = shown.iter().copied().take(MAX_PORTS).collect();
    for p in s.ports.iter().filter(|p| p.error_total() > 0) {
        if !list.iter().any(|q| q.port == p.port) {
            list.push(p);
        }
    }
    let _ = writeln!(
        o,
        "ports ({} busiest of {} by PortXmitData{}; data in 4-byte words, PortXmitWait in {} ns ticks):",
        list.len().min(MAX_PORTS),
        s.ports.len(),
        if list.len() > MAX_PORTS { ", plus every port with errors" } else { "" },
        s.scenario.xmit_wait_tick_ns
    );
    let _ = writeln!(
        o,
        "  {:<10} {:<10} {:>14} {:>14} {:>12} {:>12} {:>13} {:>7} {:>6} {:>6}",
        "port",
        "peer",
        "PortXmitData",
        "PortRcvData",
        "PortXmitPkts",
        "PortRcvPkts",
        "PortXmitWait",
        "errors",
        "util",
        "wait"
    );
    for p in list {
        let _ = writeln!(
            o,
            "  {:<10} {:<10} {:>14} {:>14} {:>12} {:>12} {:>13} {:>7} {:>5.1}% {:>5.1}%",
            p.port,
            p.peer,
            p.port_xmit_data,
            p.port_rcv_data,
            p.port_xmit_pkts,
            p.port_rcv_pkts,
            p.port_xmit_wait,
            p.error_total(),
            p.xmit_utilisation * 100.0,
            p.xmit_wait_fraction * 100.0
        );
    }
    let _ = writeln!(
        o,
        "  all ports: {} packets sent, {} errors, {} dropped",
        s.totals.port_xmit_pkts, s.totals.errors, s.totals.drops
    );

    if !s.transport.is_empty() {
        let _ = writeln!(o);
        let mut hosts: Vec<_> = s.transport.iter().collect();
        hosts.sort_by(|a, b| {
            b.retransmitted_packets
                .cmp(&a.retransmitted_packets)
                .then(b.packets_sent.cmp(&a.packets_sent))
                .then(a.host.cmp(&b.host))
        });
        let _ = writeln!(
            o,
            "transport engines ({} of {} hosts, most retransmissions first):",
            hosts.len().min(MAX_PORTS),
            hosts.len()
        );
        let _ = writeln!(
            o,
            "  {:<10} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8}",
            "host",
            "pkts sent",
            "pkts rcvd",
            "retrans",
            "timeouts",
            "seq NAK",
            "RNR NAK",
            "dup rcvd",
            "FECN",
            "BECN"
        );
        for t in hosts.iter().take(MAX_PORTS) {
            let _ = writeln!(
                o,
                "  {:<10} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8}",
                t.host,
                t.packets_sent,
                t.packets_received,
                t.retransmitted_packets,
                t.local_ack_timeouts,
                t.seq_naks_received,
                t.rnr_naks_received,
                t.duplicates_received,
                t.fecn_received,
                t.becn_received
            );
        }
    }

    if let Some(cc) = &s.congestion_control {
        let _ = writeln!(o);
        let mut marking: Vec<(&str, u64)> = cc
            .ports
            .iter()
            .map(|p| (p.port.as_str(), p.fecn_marked.last().copied().unwrap_or(0)))
            .filter(|p| p.1 > 0)
            .collect();
        marking.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let marks: Vec<String> = marking
            .iter()
            .take(4)
            .map(|(p, n)| format!("{p} {n}"))
            .collect();
        let _ = writeln!(
            o,
            "congestion control (IBA Annex A10; series in cc.csv, ccti.svg, fecn_becn.svg): \
             FECN marked at {}",
            if marks.is_empty() {
                "no port".to_string()
            } else {
                marks.join(", ")
            }
        );
        let mut sources: Vec<_> = cc.sources.iter().collect();
        sources.sort_by(|a, b| {
            b.mean_ccti
                .total_cmp(&a.mean_ccti)
                .then(a.flow.cmp(&b.flow))
                .then(a.qpn.cmp(&b.qpn))
        });
        let _ = writeln!(
            o,
            "  {:<32} {:>10} {:>10} {:>10}",
            "source (requester QP)", "mean CCTI", "max CCTI", "last CCTI"
        );
        for c in sources.iter().take(MAX_PORTS) {
            let _ = writeln!(
                o,
                "  {:<32} {:>10.1} {:>10} {:>10}",
                c.name,
                c.mean_ccti,
                c.max_ccti,
                c.ccti.last().copied().unwrap_or(0)
            );
        }
    }

    let _ = writeln!(o);
    let _ = writeln!(o, "what stood out:");
    if s.stood_out.is_empty() {
        let _ = writeln!(o, "  nothing: no errors, no drops, no port waited");
    }
    for f in &s.stood_out {
        let mark = match f.severity {
            "error" => "ERROR",
            "warning" => "WARN ",
            _ => "info ",
        };
        let _ = writeln!(o, "  {mark} {}", f.message);
    }
    o
}

/// The order in which `--explain` lists causes.
const CAUSES: [&str; 9] = [
    "errors",
    "lost_messages",
    "receiver_not_ready",
    "retransmissions",
    "congestion_control",
    "link_credits",
    "responder",
    "sender",
    "line_rate",
];

/// Flows named per cause at most.
const EXPLAIN_EXAMPLES: usize = 3;

/// What limited the flows, grouped by cause, with the counters that show it
/// (`softib sim --explain`).
pub fn render_explain(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "what limited the flows:");
    if s.flows.is_empty() {
        let _ = writeln!(o, "  no flows in this run");
        return o;
    }
    for cause in CAUSES {
        let flows: Vec<_> = s.flows.iter().filter(|f| f.limited_by == cause).collect();
        if flows.is_empty() {
            continue;
        }
        let _ = writeln!(o, "  {cause}: {} of {} flows", flows.len(), s.flows.len());
        for f in flows.iter().take(EXPLAIN_EXAMPLES) {
            let _ = writeln!(o, "    {} ({:.3} Gb/s): {}", f.name, f.gbps, f.evidence);
        }
        if flows.len() > EXPLAIN_EXAMPLES {
            let _ = writeln!(o, "    ... and {} more", flows.len() - EXPLAIN_EXAMPLES);
        }
    }
    o
}
