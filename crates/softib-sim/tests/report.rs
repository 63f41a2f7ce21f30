//! The report layer on real runs: figures in the summary agree with the fabric's counters
//! and with what the link rate allows, the time series add up, files are deterministic.

use softib_sim::scenario::Scenario;

mod support;
use support::scenario::run_text;

const B2B: &str = r#"
duration_us = 500
[fabric]
link_speed = "EDR"
cable_m = 2.0
sample_interval_us = 10
[topology]
kind = "back-to-back"
[[stream]]
pattern = "one-to-one"
src = "h0"
dst = "h1"
payload_bytes = 4096
"#;

#[test]
fn back_to_back_stream_runs_at_the_rate_headers_and_flow_control_allow() {
    let r = run_text(B2B);
    let s = &r.summary;
    let f = &s.flows[0];
    assert_eq!(f.name, "s0 h0->h1");
    // Each packet: LRH 8 + BTH 12 + DETH 8 + 4096 + ICRC 4 + VCRC 2 = 4130 bytes on the
    // wire. A flow-control packet (6 bytes) per 65,536 symbol times (4 lanes: 262,144 byte
    // times) takes the rest. Payload rate = 100 x 4096/4130 x (1 - 6/262144).
    let expected = 100.0 * 4096.0 / 4130.0 * (1.0 - 6.0 / 262_144.0);
    assert!(
        (f.active_gbps - expected).abs() / expected < 0.001,
        "{} vs {expected}",
        f.active_gbps
    );
    // The flow's messages are the receiving port's packets, its wire bytes the port's
    // words plus the VCRC the counters leave out.
    let rx = s.ports.iter().find(|p| p.port == "h1:1").unwrap();
    let tx = s.ports.iter().find(|p| p.port == "h0:1").unwrap();
    assert_eq!(f.messages, rx.port_rcv_pkts);
    assert_eq!(f.packets, rx.port_rcv_pkts);
    assert_eq!(f.wire_bytes, rx.port_rcv_data * 4 + 2 * rx.port_rcv_pkts);
    assert_eq!(f.payload_bytes, 4096 * f.messages);
    assert_eq!(rx.port_rcv_data, rx.port_rcv_pkts * (4130 - 2) / 4);
    assert!(tx.port_xmit_pkts >= rx.port_rcv_pkts);
    assert!(
        tx.port_xmit_pkts - rx.port_rcv_pkts <= 2,
        "one packet on the wire at most"
    );
    assert_eq!(s.totals.errors, 0);
    assert!(s.stood_out.iter().all(|x| x.severity != "error"));
    // 50 samples of both ports, cumulative, ending at or below the final counters.
    assert_eq!(r.series[0].len(), 50);
    let last = r
        .series
        .iter()
        .map(|v| v.last().unwrap())
        .collect::<Vec<_>>();
    let i = s.ports.iter().position(|p| p.port == "h1:1").unwrap();
    assert_eq!(last[i].time_ps, 500_000_000);
    assert_eq!(last[i].rcv_pkts, rx.port_rcv_pkts);
    for w in r.series[i].windows(2) {
        assert!(w[1].rcv_data >= w[0].rcv_data);
    }
    // Flow bins add up to the flow's bytes.
    assert_eq!(r.flow_bins[0].iter().sum::<u64>(), f.payload_bytes);
}

#[test]
fn an_incast_shows_waiting_senders_and_a_saturated_switch_port() {
    let r = run_text(
        r#"
duration_us = 300
[fabric]
link_speed = "EDR"
sample_interval_us = 10
[topology]
kind = "single-switch"
hosts = 5
switch_ports = 8
[[stream]]
pattern = "incast"
dst = "h0"
"#,
    );
    let s = &r.summary;
    assert_eq!(s.flows.len(), 4);
    let t = s.flow_totals.as_ref().unwrap();
    // Four senders share one 100 Gb/s port: each gets a quarter, fairly.
    assert!(t.aggregate_gbps > 95.0 && t.aggregate_gbps < 100.0, "{t:?}");
    assert!(t.jain_fairness > 0.99, "{t:?}");
    for f in &s.flows {
        assert!((f.gbps - t.aggregate_gbps / 4.0).abs() < 1.0, "{f:?}");
    }
    // Senders wait about three quarters of the time; the switch's port to h0 does not.
    for h in ["h1:1", "h2:1", "h3:1", "h4:1"] {
        let p = s.ports.iter().find(|p| p.port == h).unwrap();
        assert!(p.xmit_wait_fraction > 0.6, "{h}: {}", p.xmit_wait_fraction);
        assert_eq!(
            p.port_xmit_wait, p.port_vl_xmit_wait[0],
            "one data VL: the port's wait is VL0's"
        );
    }
    let down = s.ports.iter().find(|p| p.peer == "h0:1").unwrap();
    assert!(down.xmit_utilisation > 0.97, "{down:?}");
    assert!(down.xmit_wait_fraction < 0.01, "{down:?}");
    assert_eq!(s.totals.drops, 0);
    // What stood out names a waiting sender first.
    let first = &s.stood_out[0];
    assert_eq!(first.kind, "xmit_wait");
    assert!(first.subject.starts_with('h') && first.message.contains("PortXmitWait"));
    assert!(s
        .stood_out
        .iter()
        .any(|x| x.kind == "hot_link" && x.subject == down.port));
    // Every flow is held back by link credits, and the congestion point is named.
    for f in &s.flows {
        assert_eq!(f.limited_by, "link_credits", "{f:?}");
        assert!(
            f.evidence.contains("the congestion point is sw0:1 -> h0:1"),
            "{}",
            f.evidence
        );
    }
}

#[test]
fn the_same_scenario_writes_the_same_bytes() {
    let base = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-determinism");
    let _ = std::fs::remove_dir_all(&base);
    let text = B2B.replace(
        "pattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"",
        "pattern = \"all-to-all\"",
    );
    let mut outputs = Vec::new();
    for k in 0..2 {
        let dir = base.join(k.to_string());
        let files = run_text(&text).write(&dir).unwrap();
        assert_eq!(files.len(), 6, "{files:?}");
        outputs.push(
            files
                .iter()
                .map(|p| (p.file_name().unwrap().to_owned(), std::fs::read(p).unwrap()))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn stream_errors_name_key_and_line() {
    let e = Scenario::parse(
        "[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h7\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("line 6: stream[0].dst: no HCA called `h7`"),
        "{e}"
    );
    let e = Scenario::parse(
        "[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\npayload_bytes = 5000\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("line 7: stream[0].payload_bytes"), "{e}");
    let e = Scenario::parse(
        "[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nburst = 3\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("burst") && e.contains("line 7"), "{e}");
    let e = Scenario::parse(
        "[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"broadcast\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("broadcast") && e.contains("line 4"), "{e}");
}

#[test]
fn an_engine_write_flow_reaches_the_goodput_headers_allow_and_reports_its_engines() {
    let r = run_text(
        r#"
duration_us = 1000
[fabric]
link_speed = "EDR"
cable_m = 2.0
[topology]
kind = "back-to-back"
[[flow]]
op = "write"
pattern = "one-to-one"
src = "h0"
dst = "h1"
size = 65536
tx_depth = 16
"#,
    );
    let s = &r.summary;
    let f = &s.flows[0];
    assert_eq!(f.name, "f0 write h0->h1");
    assert_eq!(f.latency.level, "message");
    assert_eq!(f.payload_bytes, 65536 * f.messages);
    assert_eq!(f.error_completions, 0);
    // A 64 KiB WRITE at MTU 4096: WRITE_FIRST with a RETH (4138 bytes LRH through VCRC)
    // and 15 packets of 4122 bytes: 65968 bytes on the wire for 65536 of payload.
    let expected = 100.0 * 65536.0 / 65968.0;
    assert!(
        (f.active_gbps / expected - 1.0).abs() < 0.005,
        "{} vs {expected}",
        f.active_gbps
    );
    // 16 messages in flight at line rate: each waits for the 15 ahead of it.
    let per_msg_us = 65968.0 * 8.0 / 100e3;
    assert!(
        (f.latency.p50_us / (16.0 * per_msg_us) - 1.0).abs() < 0.02,
        "{:?}",
        f.latency
    );
    assert_eq!(s.transport.len(), 2);
    let h0 = s.transport.iter().find(|t| t.host == "h0").unwrap();
    let h1 = s.transport.iter().find(|t| t.host == "h1").unwrap();
    assert_eq!(h0.retransmitted_packets + h0.local_ack_timeouts, 0);
    assert_eq!(h1.duplicates_received + h1.device_drops, 0);
    // The responder accepted what the wire delivered to it.
    let rx = s.ports.iter().find(|p| p.port == "h1:1").unwrap();
    assert_eq!(h1.packets_received, rx.port_rcv_pkts);
    assert!(
        s.stood_out.iter().all(|x| x.severity == "info"),
        "{:?}",
        s.stood_out
    );
    assert_eq!(f.limited_by, "line_rate", "{}", f.evidence);
}

#[test]
fn a_window_of_one_small_write_is_limited_by_the_sender() {
    // One 4 KiB WRITE in flight on 50 m of cable: the link idles while each waits for
    // its ACK.
    let r = run_text(
        r#"
duration_us = 200
[fabric]
cable_m = 50.0
[topology]
kind = "back-to-back"
[[flow]]
op = "write"
pattern = "one-to-one"
src = "h0"
dst = "h1"
size = 4096
tx_depth = 1
"#,
    );
    let f = &r.summary.flows[0];
    assert_eq!(f.limited_by, "sender", "{}", f.evidence);
    // A round trip of 4 KiB (330 ns), 2 x 250 ns of cable and the ACK: about 40 Gb/s.
    assert!(f.gbps > 30.0 && f.gbps < 50.0, "{}", f.gbps);
    // Read flows carry their data from the responder: its port is the one judged.
    let r = run_text(
        r#"
duration_us = 300
[topology]
kind = "back-to-back"
[[flow]]
op = "read"
pattern = "one-to-one"
src = "h0"
dst = "h1"
size = 65536
tx_depth = 16
"#,
    );
    let f = &r.summary.flows[0];
    assert_eq!(f.name, "f0 read h0<-h1");
    assert_eq!(f.limited_by, "line_rate", "{}", f.evidence);
    assert!(f.evidence.starts_with("h1:1"), "{}", f.evidence);
}

#[test]
fn flow_errors_name_key_and_line() {
    let base = "[topology]\nkind = \"single-switch\"\nhosts = 3\n[[flow]]\nop = \"write\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n";
    let e = Scenario::parse(&format!("{base}mtu = 3000\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("line 9: flow[0].mtu: 3000"), "{e}");
    let e = Scenario::parse(&format!("{base}tx_depth = 0\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("line 9: flow[0].tx_depth"), "{e}");
    let e = Scenario::parse(&base.replace("\"write\"", "\"cas\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cas") && e.contains("line 5"), "{e}");
    let e = Scenario::parse(&format!(
        "{base}[[stream]]\npattern = \"one-to-one\"\nsrc = \"h2\"\ndst = \"h1\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("uses h1, which a [[stream]] also uses"), "{e}");
}

#[test]
fn an_engine_incast_writes_the_same_bytes_twice() {
    let text = r#"
seed = 5
duration_us = 200
[fabric]
rx_buffer_bytes = 16384
sample_interval_us = 10
[topology]
kind = "single-switch"
hosts = 4
switch_ports = 8
[[flow]]
op = "write"
pattern = "incast"
dst = "h0"
size = 16384
tx_depth = 8
"#;
    let base =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-engine-determinism");
    let _ = std::fs::remove_dir_all(&base);
    let mut outputs = Vec::new();
    for k in 0..2 {
        let report = run_text(text);
        assert_eq!(report.summary.flows.len(), 3);
        assert!(report.summary.flows.iter().all(|f| f.messages > 0));
        let files = report.write(&base.join(k.to_string())).unwrap();
        outputs.push(
            files
                .iter()
                .map(|p| (p.file_name().unwrap().to_owned(), std::fs::read(p).unwrap()))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(outputs[0].len(), 6);
    assert_eq!(outputs[0], outputs[1]);
}
