//! "What stood out": the few facts of a run a fabric engineer should read first, each a
//! sentence with its numbers. Broken things first (error counters, drops), then what held
//! performance back (waiting ports, unequal flows, latency tails), then context (the
//! busiest link).

use super::summary::{Finding, PortSummary, Summary, ERROR_COUNTERS};

/// At most this many ports are named for one kind of finding.
const MAX_PORTS_NAMED: usize = 5;
/// A port that waited less than this share of the run is not worth a line.
const WAIT_WORTH_NOTING: f64 = 0.01;

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Why an error counter moves, for the sentence.
fn error_meaning(name: &str) -> &'static str {
    match name {
        "PortRcvErrors" => "packets received with a bad CRC or malformed, dropped",
        "PortRcvSwitchRelayErrors" => {
            "packets the switch could not forward (no route or VL), dropped"
        }
        "PortXmitDiscards" => "packets discarded at the output (link down or VL not operational)",
        "ExcessiveBufferOverrunErrors" => {
            "packets arrived with no buffer room: the credit rule was broken"
        }
        "VL15Dropped" => "management packets dropped for lack of VL15 buffer",
        "SymbolErrorCounter" => "symbol errors on the link",
        "LinkDownedCounter" => "times the link went down",
        "LinkErrorRecoveryCounter" => "link error recoveries",
        "LocalLinkIntegrityErrors" => "local link integrity errors",
        _ => "errors",
    }
}

fn wait_finding(p: &PortSummary, tick_ns: f64) -> Finding {
    let held = if p.xmit_utilisation < 0.9 {
        format!(
            "; the port sent at {:.2} of {:.2} Gb/s: held back by link credits from {} (its receive buffer stayed full, i.e. congestion or a short credit advertisement downstream)",
            p.xmit_gbps, p.link_gbps, p.peer
        )
    } else {
        format!(
            " while sending at {:.2} of {:.2} Gb/s",
            p.xmit_gbps, p.link_gbps
        )
    };
    let vls: Vec<String> = p
        .port_vl_xmit_wait
        .iter()
        .enumerate()
        .filter(|(_, &w)| w > 0)
        .map(|(vl, w)| format!("VL{vl} {w}"))
        .collect();
    let per_vl = if p.operational_vls > 1 && !vls.is_empty() {
        format!(" (PortVLXmitWait: {})", vls.join(", "))
    } else {
        String::new()
    };
    Finding {
        severity: "warning",
        kind: "xmit_wait",
        subject: p.port.clone(),
        message: format!(
            "{} had data queued and sent nothing for {} of the run (PortXmitWait {} ticks of {} ns){}{}",
            p.port,
            pct(p.xmit_wait_fraction),
            p.port_xmit_wait,
            tick_ns,
            per_vl,
            held
        ),
    }
}

/// The findings of a summary, most important first.
pub fn findings(s: &Summary) -> Vec<Finding> {
    let mut out = Vec::new();

    // Error counters, port by port.
    let bad: Vec<&PortSummary> = s.ports.iter().filter(|p| p.error_total() > 0).collect();
    for p in bad.iter().take(MAX_PORTS_NAMED) {
        for (name, v) in ERROR_COUNTERS.iter().zip(p.errors()) {
            if v > 0 {
                out.push(Finding {
                    severity: "error",
                    kind: "error_counter",
                    subject: p.port.clone(),
                    message: format!("{} {name} = {v}: {}", p.port, error_meaning(name)),
                });
            }
        }
    }
    if bad.len() > MAX_PORTS_NAMED {
        out.push(Finding {
            severity: "error",
            kind: "error_counter",
            subject: String::new(),
            message: format!(
                "{} more ports have non-zero error counters (see ports in summary.json)",
                bad.len() - MAX_PORTS_NAMED
            ),
        });
    }
    if s.totals.drops > 0 {
        out.push(Finding {
            severity: "error",
            kind: "drops",
            subject: String::new(),
            message: format!(
                "{} packets were dropped in the fabric ({} of {} data packets sent)",
                s.totals.drops,
                pct(s.totals.drops as f64 / s.totals.port_xmit_pkts.max(1) as f64),
                s.totals.port_xmit_pkts
            ),
        });
    }

    // Failed completions and what the transport engines had to repair.
    for f in s.flows.iter().filter(|f| f.error_completions > 0) {
        out.push(Finding {
            severity: "error",
            kind: "error_completions",
            subject: f.name.clone(),
            message: if f.error_statuses.is_empty() {
                format!(
                    "flow {} had {} completions with an error status (its QP went to the error state)",
                    f.name, f.error_completions
                )
            } else {
                let list: Vec<String> = f
                    .error_statuses
                    .iter()
                    .map(|(k, v)| format!("{k} x{v}"))
                    .collect();
                format!(
                    "flow {} had {} completions with an error status ({}; its QP went to the error state)",
                    f.name,
                    f.error_completions,
                    list.join(", ")
                )
            },
        });
    }
    for f in s.flows.iter().filter(|f| f.messages_lost > 0) {
        out.push(Finding {
            severity: "warning",
            kind: "lost_messages",
            subject: f.name.clone(),
            message: format!(
                "flow {} lost {} of {} messages (unreliable service: no posted receive or a link error, never retried)",
                f.name,
                f.messages_lost,
                f.messages + f.messages_lost
            ),
        });
    }
    transport_findings(s, &mut out);

    // Ports that waited, longest first (ties in port order).
    let mut waiting: Vec<&PortSummary> = s
        .ports
        .iter()
        .filter(|p| p.xmit_wait_fraction >= WAIT_WORTH_NOTING)
        .collect();
    waiting.sort_by_key(|p| std::cmp::Reverse(p.port_xmit_wait));
    for p in waiting.iter().take(3) {
        out.push(wait_finding(p, s.scenario.xmit_wait_tick_ns));
    }
    if waiting.len() > 3 {
        out.push(Finding {
            severity: "info",
            kind: "xmit_wait",
            subject: String::new(),
            message: format!(
                "{} ports in all waited for credits or arbitration for more than {} of the run",
                waiting.len(),
                pct(WAIT_WORTH_NOTING)
            ),
        });
    }

    // Flows.
    if let Some(t) = &s.flow_totals {
        if t.flows > 1 && t.jain_fairness < 0.9 && t.max_gbps > 0.0 {
            let slow = s
                .flows
                .iter()
                .min_by(|a, b| a.gbps.total_cmp(&b.gbps))
                .expect("flows exist");
            let fast = s
                .flows
                .iter()
                .max_by(|a, b| a.gbps.total_cmp(&b.gbps))
                .expect("flows exist");
            out.push(Finding {
                severity: "warning",
                kind: "unfair_flows",
                subject: String::new(),
                message: format!(
                    "flows got unequal shares (Jain's index {:.3}): slowest {} at {:.2} Gb/s, fastest {} at {:.2} Gb/s",
                    t.jain_fairness, slow.name, slow.gbps, fast.name, fast.gbps
                ),
            });
        }
        let l = &t.latency;
        if l.count > 100 && l.p50_us > 0.0 && l.p99_us > 10.0 * l.p50_us {
            out.push(Finding {
                severity: "warning",
                kind: "tail_latency",
                subject: String::new(),
                message: format!(
                    "{} latency has a long tail: p99 {:.3} us is {:.0}x the median {:.3} us",
                    l.level,
                    l.p99_us,
                    l.p99_us / l.p50_us,
                    l.p50_us
                ),
            });
        }
        let idle: Vec<_> = s
            .flows
            .iter()
            .filter(|f| f.packets == 0 && f.messages == 0)
            .collect();
        for f in idle.iter().take(MAX_PORTS_NAMED) {
            out.push(Finding {
                severity: "warning",
                kind: "idle_flow",
                subject: f.name.clone(),
                message: format!(
                    "flow {} delivered nothing (a run shorter than one message, a start after the end, or a stalled QP)",
                    f.name
                ),
            });
        }
        if idle.len() > MAX_PORTS_NAMED {
            out.push(Finding {
                severity: "warning",
                kind: "idle_flow",
                subject: String::new(),
                message: format!(
                    "{} more flows delivered nothing",
                    idle.len() - MAX_PORTS_NAMED
                ),
            });
        }
    }

    // The busiest link, for context.
    if let Some(p) = s
        .ports
        .iter()
        .filter(|p| p.xmit_utilisation > 0.0)
        .max_by(|a, b| {
            a.xmit_utilisation
                .total_cmp(&b.xmit_utilisation)
                .then(b.port.cmp(&a.port))
        })
    {
        out.push(Finding {
            severity: "info",
            kind: "hot_link",
            subject: p.port.clone(),
            message: format!(
                "busiest link: {} -> {} carried {:.2} Gb/s, {} of its {} data rate",
                p.port,
                p.peer,
                p.xmit_gbps,
                pct(p.xmit_utilisation),
                p.link
            ),
        });
    }
    if s.run.packets_in_flight > 0 {
        out.push(Finding {
            severity: "info",
            kind: "in_flight",
            subject: String::new(),
            message: format!(
                "{} packets were still inside the fabric when the run ended",
                s.run.packets_in_flight
            ),
        });
    }
    out
}

fn transport_findings(s: &Summary, out: &mut Vec<Finding>) {
    let mut retx: Vec<_> = s
        .transport
        .iter()
        .filter(|t| t.retransmitted_packets > 0)
        .collect();
    retx.sort_by_key(|t| std::cmp::Reverse(t.retransmitted_packets));
    for t in retx.iter().take(MAX_PORTS_NAMED) {
        let link_errors = s.totals.errors;
        out.push(Finding {
            severity: "warning",
            kind: "retransmissions",
            subject: t.host.clone(),
            message: format!(
                "{} retransmitted {} packets ({} local ACK timeouts, {} sequence NAKs and {} RNR NAKs received){}",
                t.host,
                t.retransmitted_packets,
                t.local_ack_timeouts,
                t.seq_naks_received,
                t.rnr_naks_received,
                if link_errors == 0 && t.local_ack_timeouts > 0 {
                    " with no error on any link: the local ACK timeout is shorter than the responder takes to answer"
                } else {
                    ""
                }
            ),
        });
    }
    for t in s
        .transport
        .iter()
        .filter(|t| t.duplicates_received > 0)
        .take(MAX_PORTS_NAMED)
    {
        out.push(Finding {
            severity: "warning",
            kind: "duplicates",
            subject: t.host.clone(),
            message: format!(
                "{} received {} duplicate requests: work the requester's retries added",
                t.host, t.duplicates_received
            ),
        });
    }
    for t in s
        .transport
        .iter()
        .filter(|t| t.rnr_naks_sent > 0)
        .take(MAX_PORTS_NAMED)
    {
        out.push(Finding {
            severity: "warning",
            kind: "rnr",
            subject: t.host.clone(),
            message: format!(
                "{} sent {} RNR NAKs: receives were not posted in time",
                t.host, t.rnr_naks_sent
            ),
        });
    }
    let (fecn, becn): (u64, u64) = s.transport.iter().fold((0, 0), |(f, b), t| {
        (f + t.fecn_received, b + t.becn_received)
    });
    if fecn + becn > 0 {
        out.push(Finding {
            severity: "info",
            kind: "congestion_marks",
            subject: String::new(),
            message: format!(
                "congestion marking was active: {fecn} packets arrived with FECN, {becn} with BECN"
            ),
        });
    }
    let drops: u64 = s.transport.iter().map(|t| t.device_drops).sum();
    if drops > 0 {
        out.push(Finding {
            severity: "error",
            kind: "device_drops",
            subject: String::new(),
            message: format!("the HCAs dropped {drops} packets before any QP saw them"),
        });
    }
}
