//! What held each flow back, from the counters: the engine's (error completions, RNR NAKs,
//! retransmissions, congestion-control throttling and BECNs) and the sending port's
//! (PortXmitWait, utilisation). The first cause that applies wins, in that order: a broken
//! or retrying QP explains everything after it, and congestion control acts before the
//! link (a throttled QP queues nothing, so its port does not wait).
//!
//! This is how a fabric engineer tells "held back by link credits" (PortXmitWait rising,
//! no FECN/BECN) from "held back by congestion control" (BECNs, CC throttling, and a port
//! that does not wait): the two look alike from the application's side.

use super::summary::{HostTransport, PortSummary, Summary};
use std::collections::BTreeMap;

/// A share of the run above which a cause counts.
const SIGNIFICANT: f64 = 0.05;
/// Mean receive processing wait at a responder that counts as slow, microseconds.
const SLOW_RESPONDER_US: f64 = 1.0;
/// Utilisation at which a port is considered full.
const FULL: f64 = 0.9;

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Sets `limited_by` and `evidence` of every flow of `s`; `data_from[i]` is the host whose
/// port carries flow i's data.
pub fn diagnose(s: &mut Summary, data_from: &[String]) {
    let duration_us = s.scenario.duration_us.max(1e-9);
    let ports: BTreeMap<&str, &PortSummary> =
        s.ports.iter().map(|p| (p.port.as_str(), p)).collect();
    let transport: BTreeMap<&str, &HostTransport> =
        s.transport.iter().map(|t| (t.host.as_str(), t)).collect();
    // The port that feeds each host (its switch port, or the peer HCA back to back).
    let feeding: BTreeMap<&str, &PortSummary> = s
        .ports
        .iter()
        .filter_map(|p| p.peer.strip_suffix(":1").map(|h| (h, p)))
        .collect();
    let vl15_dropped: u64 = s.ports.iter().map(|p| p.vl15_dropped).sum();
    let mut out = Vec::with_capacity(s.flows.len());
    for (i, f) in s.flows.iter().enumerate() {
        if f.management {
            // VL15 has no credits to wait for and wins every arbitration (IBA 7.6.9): its
            // sender's port waits say nothing about it.
            out.push((
                if vl15_dropped > 0 { "errors" } else { "sender" },
                format!(
                    "subnet management on VL15, not flow-controlled and served before every data VL: it runs at its sender's pace; {vl15_dropped} VL15Dropped in the fabric"
                ),
            ));
            continue;
        }
        // Unreliable messages lost count when they are a noticeable share: nothing retries
        // them, and the engine does not say why (a receiver without posted receives drops
        // silently, IBA 9.8.3 / 9.8.2; link errors drop them on the way).
        if f.error_completions == 0
            && f.messages_lost as f64 > SIGNIFICANT * (f.messages + f.messages_lost) as f64
        {
            out.push((
                "lost_messages",
                format!(
                    "{} of {} messages never arrived ({} delivered): an unreliable service drops what finds no posted receive or a link error, and nothing retries",
                    f.messages_lost,
                    f.messages + f.messages_lost,
                    f.messages
                ),
            ));
            continue;
        }
        let sender = data_from.get(i).map_or(f.src.as_str(), String::as_str);
        // The flow's own QP, when known, speaks for it rather than its host's sums.
        let own = f.qp.as_ref().map(|q| {
            let mut t = transport
                .get(f.src.as_str())
                .map_or_else(HostTransport::default, |t| (*t).clone());
            t.host = f.src.clone();
            t.rnr_naks_received = q.rnr_naks_received;
            t.retransmitted_packets = q.retransmitted_packets;
            t.local_ack_timeouts = q.local_ack_timeouts;
            t.seq_naks_received = q.seq_naks_received;
            t
        });
        let requester = own.as_ref().or(transport.get(f.src.as_str()).copied());
        let port = ports.get(format!("{sender}:1").as_str());
        let receiver = if sender == f.src { &f.dst } else { &f.src };
        let statuses = f
            .error_statuses
            .iter()
            .map(|(k, v)| format!("{k} x{v}"))
            .collect::<Vec<_>>()
            .join(", ");
        // The host that processes the flow's requests (a READ's responder sends the data).
        let responder = transport.get(f.dst.as_str()).copied();
        out.push(diagnose_one(
            (f.error_completions, statuses),
            (requester, responder),
            port.copied(),
            feeding.get(receiver.as_str()).copied(),
            duration_us,
        ));
    }
    for (f, (kind, why)) in s.flows.iter_mut().zip(out) {
        f.limited_by = kind;
        f.evidence = why;
    }
}

fn diagnose_one(
    (error_completions, statuses): (u64, String),
    (t, responder): (Option<&HostTransport>, Option<&HostTransport>),
    port: Option<&PortSummary>,
    into_receiver: Option<&PortSummary>,
    duration_us: f64,
) -> (&'static str, String) {
    if error_completions > 0 {
        return (
            "errors",
            if statuses.is_empty() {
                format!("{error_completions} completions failed: the QP went to the error state")
            } else {
                format!(
                    "{error_completions} completions failed ({statuses}): the QP went to the error state"
                )
            },
        );
    }
    if let Some(t) = t {
        if t.rnr_naks_received > 0 {
            return (
                "receiver_not_ready",
                format!(
                    "{} received {} RNR NAKs: the responder had no receive posted",
                    t.host, t.rnr_naks_received
                ),
            );
        }
        if t.retransmitted_packets > 0 {
            return (
                "retransmissions",
                format!(
                    "{} retransmitted {} packets after {} local ACK timeouts and {} sequence NAKs",
                    t.host, t.retransmitted_packets, t.local_ack_timeouts, t.seq_naks_received
                ),
            );
        }
        let throttled = t.cc_throttled_us / duration_us;
        if throttled > SIGNIFICANT || t.becn_received > 0 {
            let wait = port.map_or(0.0, |p| p.xmit_wait_fraction);
            return (
                "congestion_control",
                format!(
                    "congestion control held {}'s QPs back for {} of the run after {} BECNs ({} CNPs); its port waited for credits only {} (PortXmitWait)",
                    t.host,
                    pct(throttled),
                    t.becn_received,
                    t.cnps_received,
                    pct(wait)
                ),
            );
        }
    }
    let Some(p) = port else {
        return ("sender", "no port counters for the sender".into());
    };
    // A responder slow to process what it receives holds the requester's window (its
    // ACKs, responses and completions come late) while the link idles.
    if let Some(r) = responder.filter(|r| r.rx_wait_mean_us >= SLOW_RESPONDER_US) {
        if p.xmit_utilisation <= FULL && p.xmit_wait_fraction <= SIGNIFICANT {
            return (
                "responder",
                format!(
                    "{}'s engine processed what it received {:.3} us after arrival on average (up to {} packets waiting): the responder is slow, {} sent at {} of its link",
                    r.host,
                    r.rx_wait_mean_us,
                    r.rx_backlog_peak,
                    p.port,
                    pct(p.xmit_utilisation)
                ),
            );
        }
    }
    if p.xmit_wait_fraction > SIGNIFICANT {
        let hot = into_receiver
            .filter(|q| q.xmit_utilisation > FULL)
            .map(|q| {
                format!(
                    "; the congestion point is {} -> {} at {} of its link",
                    q.port,
                    q.peer,
                    pct(q.xmit_utilisation)
                )
            })
            .unwrap_or_default();
        return (
            "link_credits",
            format!(
                "{} waited for link credits {} of the run (PortXmitWait {}) and sent at {} of its link, with no FECN/BECN{}",
                p.port,
                pct(p.xmit_wait_fraction),
                p.port_xmit_wait,
                pct(p.xmit_utilisation),
                hot
            ),
        );
    }
    if p.xmit_utilisation > FULL {
        return (
            "line_rate",
            format!(
                "{} sent at {} of its {} link and hardly waited ({}): the link is the limit",
                p.port,
                pct(p.xmit_utilisation),
                p.link,
                pct(p.xmit_wait_fraction)
            ),
        );
    }
    (
        "sender",
        format!(
            "{} sent at {} of its link without waiting for credits ({}): the sender had nothing queued (its window of messages in flight, its start time, or the end of its messages)",
            p.port,
            pct(p.xmit_utilisation),
            pct(p.xmit_wait_fraction)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(wait: f64, util: f64) -> PortSummary {
        let mut p = blank_port();
        p.xmit_wait_fraction = wait;
        p.xmit_utilisation = util;
        p
    }

    fn blank_port() -> PortSummary {
        PortSummary {
            port: "h1:1".into(),
            peer: "sw0:2".into(),
            link: "4x EDR".into(),
            link_gbps: 100.0,
            operational_vls: 1,
            port_vl_xmit_wait: vec![0],
            ..PortSummary::default()
        }
    }

    #[test]
    fn credits_and_congestion_control_are_told_apart() {
        // Held back by credits: the port waits, no BECN, no throttling.
        let quiet = HostTransport {
            host: "h1".into(),
            ..HostTransport::default()
        };
        let (k, why) = diagnose_one(
            (0, String::new()),
            (Some(&quiet), None),
            Some(&port(0.6, 0.3)),
            None,
            100.0,
        );
        assert_eq!(k, "link_credits");
        assert!(
            why.contains("60.0%") && why.contains("no FECN/BECN"),
            "{why}"
        );
        // Held back by congestion control: BECNs and throttling; the port barely waits.
        let cc = HostTransport {
            host: "h1".into(),
            becn_received: 40,
            cnps_received: 0,
            cc_throttled_us: 55.0,
            ..HostTransport::default()
        };
        let (k, why) = diagnose_one(
            (0, String::new()),
            (Some(&cc), None),
            Some(&port(0.01, 0.3)),
            None,
            100.0,
        );
        assert_eq!(k, "congestion_control");
        assert!(why.contains("55.0%") && why.contains("40 BECNs"), "{why}");
        // Neither: a full link, or an idle sender.
        assert_eq!(
            diagnose_one(
                (0, String::new()),
                (Some(&quiet), None),
                Some(&port(0.0, 0.99)),
                None,
                100.0
            )
            .0,
            "line_rate"
        );
        assert_eq!(
            diagnose_one(
                (0, String::new()),
                (Some(&quiet), None),
                Some(&port(0.0, 0.2)),
                None,
                100.0
            )
            .0,
            "sender"
        );
    }

    #[test]
    fn a_failing_or_retrying_qp_explains_before_the_link() {
        let retry = HostTransport {
            host: "h1".into(),
            retransmitted_packets: 12,
            local_ack_timeouts: 3,
            becn_received: 5,
            ..HostTransport::default()
        };
        assert_eq!(
            diagnose_one(
                (0, String::new()),
                (Some(&retry), None),
                Some(&port(0.6, 0.3)),
                None,
                100.0
            )
            .0,
            "retransmissions"
        );
        assert_eq!(
            diagnose_one(
                (2, String::new()),
                (Some(&retry), None),
                Some(&port(0.6, 0.3)),
                None,
                100.0
            )
            .0,
            "errors"
        );
        let rnr = HostTransport {
            rnr_naks_received: 1,
            ..retry
        };
        assert_eq!(
            diagnose_one((0, String::new()), (Some(&rnr), None), None, None, 100.0).0,
            "receiver_not_ready"
        );
    }

    #[test]
    fn a_slow_responder_is_named_when_the_link_idles() {
        let quiet = HostTransport::default();
        let slow = HostTransport {
            host: "h1".into(),
            rx_wait_mean_us: 125.0,
            rx_backlog_peak: 4,
            ..HostTransport::default()
        };
        let (k, why) = diagnose_one(
            (0, String::new()),
            (Some(&quiet), Some(&slow)),
            Some(&port(0.0, 0.1)),
            None,
            100.0,
        );
        assert_eq!(k, "responder");
        assert!(why.contains("h1") && why.contains("125.000 us"), "{why}");
        // A full link is the link's doing, a responder delay notwithstanding.
        let (k, _) = diagnose_one(
            (0, String::new()),
            (Some(&quiet), Some(&slow)),
            Some(&port(0.0, 0.99)),
            None,
            100.0,
        );
        assert_eq!(k, "line_rate");
    }
}
