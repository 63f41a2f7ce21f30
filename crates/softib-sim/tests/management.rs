//! Management traffic on VL15 and rate-paced data streams on chosen SLs: VL15 wins every
//! arbitration (IBA 7.6.9) however the data VLs are configured, while a low-priority data VL
//! behind a high-priority one with an unbounded Limit of High Priority gets nothing.

use softib_sim::report::Report;
use softib_sim::scenario::Scenario;

mod support;
use support::scenario::{flow, run_text};

/// h1 and h2 saturate the switch port to h0 on SL0/VL0; h3 sends h0 one 4 KiB packet per
/// microsecond on SL1/VL1 and one SMP per microsecond on VL15.
fn loaded(vlarb_high: &str) -> Report {
    run_text(&format!(
        r#"
duration_us = 100
[topology]
kind = "single-switch"
hosts = 4
switch_ports = 8
[qos]
qos_max_vls = 2
qos_high_limit = 255
qos_vlarb_high = "{vlarb_high}"
qos_vlarb_low = "1:255"
qos_sl2vl = "0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0"
[[stream]]
pattern = "incast"
srcs = ["h1", "h2"]
dst = "h0"
[[stream]]
pattern = "one-to-one"
src = "h3"
dst = "h0"
sl = 1
interval_ns = 1000
[[stream]]
kind = "management"
pattern = "one-to-one"
src = "h3"
dst = "h0"
interval_ns = 1000
"#
    ))
}

#[test]
fn vl15_is_served_first_and_a_bad_vlarb_table_starves_the_low_priority_vl() {
    // VL1 only in the low table, VL0 high with an unbounded limit: VL1 starves.
    let bad = loaded("0:255");
    let low = flow(&bad, "s1 h3->h0");
    let mgmt = flow(&bad, "s2 mgmt h3->h0");
    // 100 packets offered (about 33 Gb/s); at most the first one or two slip through
    // before the incast fills the switch.
    assert!(low.packets <= 2, "{low:?}");
    // VL15 goes first: every SMP arrives, each within a data packet's time (330 ns)
    // plus its own serialization twice and the switch.
    assert!(mgmt.packets >= 99, "{mgmt:?}");
    assert!(mgmt.latency.max_us < 0.6, "{:?}", mgmt.latency);
    assert_eq!(mgmt.latency.level, "message");
    assert!(
        (mgmt.msg_rate_mpps - 1.0).abs() < 0.02,
        "{}",
        mgmt.msg_rate_mpps
    );
    assert!(mgmt.management);
    assert_eq!(mgmt.limited_by, "sender", "{}", mgmt.evidence);
    // The starved stream's sender waits for VL1 credits the switch never frees.
    assert_eq!(low.limited_by, "link_credits", "{}", low.evidence);
    let port = bad
        .summary
        .ports
        .iter()
        .find(|p| p.port == "sw0:1")
        .unwrap();
    assert_eq!(port.vl15_dropped, 0);
    assert!(port.xmit_utilisation > 0.98, "{port:?}");
    // The starved VL waits the whole run at the switch port (PortVLXmitWait of VL1).
    assert!(
        port.port_vl_xmit_wait[1] > 90_000,
        "{:?}",
        port.port_vl_xmit_wait
    );

    // Both VLs in the high table with equal weights: VL1 gets its 33 Gb/s.
    let fixed = loaded("0:32,1:32");
    let low = flow(&fixed, "s1 h3->h0");
    assert!(low.packets >= 98, "{low:?}");
    let mgmt = flow(&fixed, "s2 mgmt h3->h0");
    assert!(mgmt.packets >= 99, "{mgmt:?}");
    let data = flow(&fixed, "s0 h1->h0").gbps + flow(&fixed, "s0 h2->h0").gbps;
    assert!(data > 60.0 && data < 70.0, "{data}");
}

#[test]
fn stream_kind_and_pacing_keys_are_checked() {
    let base = "[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n";
    let e = Scenario::parse(&format!("{base}kind = \"management\"\nsl = 2\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("line 8: stream[0].sl: management packets"),
        "{e}"
    );
    let e = Scenario::parse(&format!("{base}interval_ns = 0\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("line 7: stream[0].interval_ns"), "{e}");
    let e = Scenario::parse(&format!("{base}kind = \"smp\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("smp") && e.contains("line 7"), "{e}");
}

#[test]
fn counters_csv_carries_the_per_vl_waits_over_time() {
    let text = r#"
duration_us = 100
[fabric]
sample_interval_us = 10
[topology]
kind = "single-switch"
hosts = 4
switch_ports = 8
[qos]
qos_max_vls = 2
qos_high_limit = 255
qos_vlarb_high = "0:255"
qos_vlarb_low = "1:255"
qos_sl2vl = "0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0"
[[stream]]
pattern = "incast"
srcs = ["h1", "h2"]
dst = "h0"
[[stream]]
pattern = "one-to-one"
src = "h3"
dst = "h0"
sl = 1
interval_ns = 1000
"#;
    let r = run_text(text);
    assert_eq!(r.series_vls, 2);
    let csv = softib_sim::report::csv::counters(&r);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        header[header.len() - 2..],
        ["PortVLXmitWait.VL0", "PortVLXmitWait.VL1"]
    );
    // The switch port to h0: VL1, starved by VL0's unbounded high priority, waits the whole
    // time from its first packet; the series climbs and ends at the summary's figure.
    let port = r.summary.ports.iter().find(|p| p.port == "sw0:1").unwrap();
    let rows: Vec<Vec<u64>> = lines
        .filter(|l| l.split(',').nth(1) == Some("sw0:1"))
        .map(|l| l.split(',').skip(2).map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 10, "{csv}");
    let vl1: Vec<u64> = rows.iter().map(|r| r[r.len() - 1]).collect();
    let vl0: Vec<u64> = rows.iter().map(|r| r[r.len() - 2]).collect();
    assert!(vl1.windows(2).all(|w| w[1] >= w[0] + 9_900), "{vl1:?}");
    assert_eq!(*vl1.last().unwrap(), port.port_vl_xmit_wait[1]);
    assert_eq!(*vl0.last().unwrap(), port.port_vl_xmit_wait[0]);
    assert!(
        vl0.last().unwrap() * 100 < *vl1.last().unwrap(),
        "{vl0:?} {vl1:?}"
    );
    // With one data VL nothing is added (PortXmitWait is VL0's wait).
    let one = run_text(&text.replace("qos_max_vls = 2", "qos_max_vls = 1"));
    assert_eq!(one.series_vls, 0);
    assert!(softib_sim::report::csv::counters(&one)
        .starts_with(softib_sim::report::csv::COUNTERS_HEADER));
}
