//! `[[flow]]` traffic on the real engine beyond WRITE and READ: two-sided SENDs with a
//! receiving application (receive queue depth, SRQ, re-posting delay, RNR), atomics, the UC
//! and UD services, the ring all-reduce pattern; per-flow QP counters and error statuses in
//! the summary.

use softib_fabric::time::PS_PER_US;
use softib_sim::apps::flow::Ledger;
use softib_sim::report::flows::FlowRecorder;
use softib_sim::report::Report;
use softib_sim::scenario::Scenario;
use softib_sim::setup::{atomic_counter, attach_flows};

mod support;
use support::scenario::{flow, run_text};

const B2B: &str =
    "duration_us = 200\n[fabric]\ncable_m = 2.0\n[topology]\nkind = \"back-to-back\"\n";

#[test]
fn an_rc_send_flow_delivers_its_messages_at_the_rate_headers_allow() {
    let r = run_text(&format!(
        "{B2B}[[flow]]\nop = \"send\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 65536\ntx_depth = 16\n"
    ));
    let f = flow(&r, "f0 send h0->h1");
    // 5.3 us per 64 KiB message at 100 Gb/s: about 37 in 200 us.
    assert!(f.messages > 30, "{f:?}");
    assert_eq!(f.payload_bytes, 65536 * f.messages);
    assert_eq!(f.error_completions, 0);
    assert_eq!(f.latency.level, "message");
    // 16 packets of LRH + BTH + 4096 + ICRC + VCRC (no RETH on a SEND): 65952 bytes.
    let expected = 100.0 * 65536.0 / 65952.0;
    assert!(
        (f.active_gbps / expected - 1.0).abs() < 0.01,
        "{} vs {expected}",
        f.active_gbps
    );
    let qp = f.qp.as_ref().expect("engine flows report their QPs");
    assert_eq!(qp.rnr_naks_received + qp.retransmitted_packets, 0);
    assert_eq!(qp.duplicates_received, 0);
    // Every packet the requester sent was accepted by the responder QP, but those still
    // on the way at the end (less than one message: 16 packets).
    let on_the_way = qp.requester_packets_sent - qp.responder_packets_received;
    assert!(on_the_way <= 16, "{qp:?}");
    assert_eq!(f.limited_by, "line_rate", "{}", f.evidence);
}

#[test]
fn uc_and_ud_flows_count_what_arrives() {
    let r = run_text(
        r#"
duration_us = 100
[topology]
kind = "single-switch"
hosts = 6
switch_ports = 8
[[flow]]
op = "send"
service = "uc"
pattern = "one-to-one"
src = "h0"
dst = "h1"
size = 16384
tx_depth = 8
[[flow]]
op = "write"
service = "uc"
pattern = "one-to-one"
src = "h2"
dst = "h3"
size = 16384
tx_depth = 8
[[flow]]
op = "send"
service = "ud"
pattern = "one-to-one"
src = "h4"
dst = "h5"
tx_depth = 32
"#,
    );
    for name in [
        "f0 uc-send h0->h1",
        "f1 uc-write h2->h3",
        "f2 ud-send h4->h5",
    ] {
        let f = flow(&r, name);
        assert!(f.messages > 50, "{name}: {f:?}");
        assert_eq!(f.error_completions, 0, "{name}");
        // Unreliable services never retransmit.
        assert_eq!(f.qp.as_ref().unwrap().retransmitted_packets, 0, "{name}");
    }
    // UD: one MTU-sized packet per message, payload without the 40-byte GRH area.
    let ud = flow(&r, "f2 ud-send h4->h5");
    assert_eq!(ud.payload_bytes, 4096 * ud.messages);
    // Each SEND carries its sequence number as immediate data (LRH, BTH, DETH, ImmDt,
    // 4096, ICRC, VCRC = 4134 bytes), the whole link for one flow.
    let expected = 100.0 * 4096.0 / 4134.0;
    assert!(
        (ud.active_gbps / expected - 1.0).abs() < 0.02,
        "{} vs {expected}",
        ud.active_gbps
    );
}

#[test]
fn fetch_add_from_many_hosts_adds_up_exactly_and_cmp_swap_swaps_once() {
    let text = r#"
duration_us = 200
[topology]
kind = "single-switch"
hosts = 5
switch_ports = 8
[[flow]]
op = "atomic"
atomic = "fetch_add"
add = 3
pattern = "incast"
srcs = ["h1", "h2", "h3"]
dst = "h0"
tx_depth = 4
iterations = 50
[[flow]]
op = "atomic"
atomic = "cmp_swap"
compare = 0
swap = 7
pattern = "one-to-one"
src = "h4"
dst = "h0"
tx_depth = 2
iterations = 10
"#;
    let s = Scenario::parse(text).unwrap();
    let mut fabric = s.build().unwrap();
    let plans = s.flow_plan(0).unwrap();
    let rec = FlowRecorder::shared(10 * PS_PER_US);
    let log = Ledger::default();
    attach_flows(&mut fabric, &plans, &rec, &log, s.seed, &mut |_, e| e).unwrap();
    fabric.run_until(200 * PS_PER_US);
    log.borrow().settle(&mut rec.borrow_mut());
    assert_eq!(atomic_counter(&mut fabric, "h0", 0), Some(3 * 50 * 3));
    assert_eq!(atomic_counter(&mut fabric, "h0", 1), Some(7));
    let rec = rec.borrow();
    for (id, f) in rec.flows() {
        let want = if *id == 3 { 10 } else { 50 };
        assert_eq!(f.messages, want, "{}", f.info.name);
        assert_eq!(f.payload_bytes, 8 * want);
        assert_eq!(f.errors, 0);
    }
    // The same through the report.
    let r = run_text(text);
    assert_eq!(flow(&r, "f0 atomic h1->h0").messages, 50);
    assert!(flow(&r, "f1 atomic h4->h0").latency.count == 10);
}

fn rnr_case(extra: &str) -> Report {
    // 64 KiB SENDs at line rate to a receiver that keeps 2 receives posted and takes
    // 100 us to post each one again: 20,000 messages a second at most, against about 190,000
    // the link carries.
    run_text(&format!(
        "{B2B}[[flow]]\nop = \"send\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 65536\ntx_depth = 16\nrecv_post_delay_ns = 100000\nrnr_timer = 1\n{extra}"
    ))
}

#[test]
fn a_slow_receiver_causes_rnr_naks_and_exhausted_rnr_retries_fail_the_flow() {
    // rnr_retry 7 retries forever: RNR NAKs, throughput set by the re-posting.
    let r = rnr_case("rq_depth = 2\n");
    let f = flow(&r, "f0 send h0->h1");
    let qp = f.qp.as_ref().unwrap();
    assert!(qp.rnr_naks_received > 0, "{qp:?}");
    assert_eq!(qp.rnr_naks_sent, qp.rnr_naks_received);
    assert_eq!(f.error_completions, 0);
    // 2 receives per 100 us over 200 us: at most 2 + 2 x 2 messages (the first two are
    // posted at time 0).
    assert!(f.messages >= 2 && f.messages <= 6, "{}", f.messages);
    assert_eq!(f.limited_by, "receiver_not_ready", "{}", f.evidence);

    // rnr_retry 1: the second RNR NAK in a row ends the flow with the error status.
    let r = rnr_case("rq_depth = 2\nrnr_retry = 1\n");
    let f = flow(&r, "f0 send h0->h1");
    assert_eq!(
        f.error_statuses.get("IBV_WC_RNR_RETRY_EXC_ERR"),
        Some(&1),
        "{f:?}"
    );
    assert!(f.error_completions >= 1);
    assert_eq!(f.limited_by, "errors");
    assert!(
        f.evidence.contains("IBV_WC_RNR_RETRY_EXC_ERR x1"),
        "{}",
        f.evidence
    );

    // A receive queue deep enough for the window: no RNR NAK at all.
    let r = rnr_case("rq_depth = 4096\nrnr_retry = 1\n");
    let f = flow(&r, "f0 send h0->h1");
    let qp = f.qp.as_ref().unwrap();
    assert_eq!(qp.rnr_naks_received, 0);
    assert_eq!(f.error_completions, 0);
    assert!(f.messages > 30, "{}", f.messages);

    // An SRQ shared by two senders: its depth serves both.
    let r = run_text(
        "duration_us = 200\n[topology]\nkind = \"single-switch\"\nhosts = 3\n[[flow]]\nop = \"send\"\npattern = \"incast\"\ndst = \"h0\"\nsize = 4096\ntx_depth = 8\nsrq = true\nrq_depth = 16\nrecv_post_delay_ns = 1000\n",
    );
    let total: u64 = r.summary.flows.iter().map(|f| f.messages).sum();
    // 16 receives re-posted 1 us after use: up to 16 messages a microsecond, more than the
    // link into h0 carries (3 a microsecond, 4 KiB at 100 Gb/s): the SRQ never runs dry
    // and the two senders share the link.
    for f in &r.summary.flows {
        assert_eq!(f.qp.as_ref().unwrap().rnr_naks_received, 0, "{f:?}");
    }
    assert!(total > 550, "{total}");
}

#[test]
fn a_ring_all_reduce_steps_on_received_chunks() {
    let r = run_text(
        r#"
duration_us = 200
[topology]
kind = "single-switch"
hosts = 4
[[flow]]
op = "send"
pattern = "ring"
size = 65536
"#,
    );
    assert_eq!(r.summary.flows.len(), 4);
    // 2 x (4 - 1) steps each, and a step needs the predecessor's chunk: each step costs at
    // least one 64 KiB transfer (5.3 us), so the last completion is at least 6 of them in.
    let per_chunk_us = 65952.0 * 8.0 / 100e3;
    for f in &r.summary.flows {
        assert_eq!(f.messages, 6, "{}", f.name);
        assert!(f.last_us > 6.0 * per_chunk_us, "{} {}", f.name, f.last_us);
        assert!(
            f.last_us < 6.0 * per_chunk_us + 10.0,
            "{} {}",
            f.name,
            f.last_us
        );
    }
    assert_eq!(r.summary.flows[0].name, "f0 send h0->h1");
    assert_eq!(r.summary.flows[3].name, "f0 send h3->h0");

    // The same ring with RDMA WRITE with immediate: the immediate consumes a receive at the
    // successor, which is the step signal. 6 WRITEs each, each needing the previous chunk.
    let r = run_text(
        "duration_us = 200\n[topology]\nkind = \"single-switch\"\nhosts = 4\n[[flow]]\nop = \"write\"\npattern = \"ring\"\nsize = 65536\n",
    );
    for f in &r.summary.flows {
        assert_eq!(f.messages, 6, "{}", f.name);
        assert!(f.last_us > 6.0 * per_chunk_us, "{} {}", f.name, f.last_us);
    }
    assert_eq!(r.summary.flows[1].name, "f0 write h1->h2");
}

#[test]
fn flow_keys_are_checked_with_key_and_line() {
    let base = "[topology]\nkind = \"single-switch\"\nhosts = 3\n[[flow]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n";
    let err = |extra: &str| {
        Scenario::parse(&format!("{base}{extra}"))
            .unwrap_err()
            .to_string()
    };
    let e = err("op = \"write\"\nservice = \"ud\"\n");
    assert!(
        e.starts_with("line 9: flow[0].service: Ud has no write"),
        "{e}"
    );
    let e = err("op = \"read\"\nservice = \"uc\"\n");
    assert!(e.starts_with("line 9: flow[0].service"), "{e}");
    let e = err("op = \"atomic\"\nsize = 16\n");
    assert!(
        e.starts_with("line 9: flow[0].size: 16 bytes: atomics"),
        "{e}"
    );
    let e = err("op = \"send\"\nservice = \"ud\"\nsize = 8192\n");
    assert!(e.starts_with("line 10: flow[0].size"), "{e}");
    let e = err("op = \"write\"\nrq_depth = 4\n");
    assert!(
        e.starts_with("line 9: flow[0].rq_depth: applies to send"),
        "{e}"
    );
    let e = err("op = \"send\"\nrnr_retry = 8\n");
    assert!(e.starts_with("line 9: flow[0].rnr_retry: 8"), "{e}");
    let e = err("op = \"send\"\nrnr_timer = 32\n");
    assert!(e.starts_with("line 9: flow[0].rnr_timer"), "{e}");
    let e = err("op = \"send\"\nswap = 3\n");
    assert!(
        e.starts_with("line 9: flow[0].swap: applies to atomic"),
        "{e}"
    );
    let e = err("op = \"write\"\nrecv_post_delay_ns = 3\n");
    assert!(e.starts_with("line 9: flow[0].recv_post_delay_ns"), "{e}");
    let e = err("op = \"write\"\natomic = \"fetch_add\"\n");
    assert!(e.starts_with("line 9: flow[0].atomic"), "{e}");
    let e = err("op = \"atomic\"\natomic = \"swap\"\n");
    assert!(e.contains("swap") && e.contains("line 9"), "{e}");
    let e = err("op = \"send\"\nmax_rd_atomic = 0\n");
    assert!(e.starts_with("line 9: flow[0].max_rd_atomic"), "{e}");
    let e = Scenario::parse(
        "[topology]\nkind = \"single-switch\"\nhosts = 3\n[[flow]]\nop = \"read\"\npattern = \"ring\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("line 6: flow[0].pattern"), "{e}");
}

#[test]
fn lead_fence_and_psn_keys_are_checked_with_key_and_line() {
    let base = "[topology]\nkind = \"single-switch\"\nhosts = 3\n[[flow]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n";
    let err = |extra: &str| {
        Scenario::parse(&format!("{base}{extra}"))
            .unwrap_err()
            .to_string()
    };
    let e = err("op = \"write\"\nservice = \"uc\"\nfence = true\n");
    assert!(
        e.starts_with("line 10: flow[0].fence: applies to RC"),
        "{e}"
    );
    let e = err("op = \"atomic\"\nlead_count = 4\n");
    assert!(
        e.starts_with("line 9: flow[0].lead_count: needs lead_op"),
        "{e}"
    );
    let e = err("op = \"atomic\"\nlead_op = \"read\"\nlead_count = 65\n");
    assert!(e.starts_with("line 10: flow[0].lead_count: 65"), "{e}");
    let e = err("op = \"atomic\"\nlead_op = \"atomic\"\nlead_size = 16\n");
    assert!(
        e.starts_with("line 10: flow[0].lead_size: atomic leads"),
        "{e}"
    );
    let e = err("op = \"atomic\"\nlead_op = \"write\"\n");
    assert!(e.contains("line 9") && e.contains("lead_op"), "{e}");
    let e = err("op = \"send\"\nsq_psn_offset = 16777216\n");
    assert!(
        e.starts_with("line 9: flow[0].sq_psn_offset: 16777216"),
        "{e}"
    );
    // Accepted: the whole PSN space either way, and leads before a fenced atomic.
    for ok in [
        "op = \"send\"\nsq_psn_offset = -16777215\n",
        "op = \"atomic\"\nlead_op = \"read\"\nlead_count = 64\nlead_size = 4096\nfence = true\n",
    ] {
        Scenario::parse(&format!("{base}{ok}")).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

/// A fenced FetchAdd behind 4 READs leaves only when their responses are back: about one
/// round trip (the FetchAdd alone) later than without the fence.
#[test]
fn a_fence_behind_reads_costs_one_round_trip() {
    let run = |extra: &str| {
        let r = run_text(&format!(
            "duration_us = 2000\n[topology]\nkind = \"single-switch\"\nhosts = 2\n[[flow]]\nop = \"atomic\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\ntx_depth = 1\niterations = 50\n{extra}"
        ));
        assert_eq!(r.summary.flows[0].messages, 50);
        assert_eq!(r.summary.flows[0].error_completions, 0);
        r.summary.flows[0].latency.p50_us
    };
    let alone = run("");
    let behind = run("lead_op = \"read\"\nlead_count = 4\n");
    let fenced = run("lead_op = \"read\"\nlead_count = 4\nfence = true\n");
    let cost = fenced - behind;
    assert!(
        (0.8 * alone..=1.2 * alone).contains(&cost),
        "alone {alone} us, behind 4 READs {behind} us, fenced {fenced} us"
    );
    // A fence with nothing outstanding costs nothing.
    let alone_fenced = run("fence = true\n");
    assert!(
        (alone_fenced - alone).abs() <= 0.02 * alone,
        "{alone} vs {alone_fenced}"
    );
}

fn slow_responder(timeout: u8, extra: &str) -> Report {
    // h1's engine sees each packet 100-150 us after it arrived; local_ack_timeout 4 is
    // 65.5 us, 10 is 4.19 ms.
    run_text(&format!(
        r#"
duration_us = 2000
[topology]
kind = "back-to-back"
[[flow]]
op = "write"
pattern = "one-to-one"
src = "h0"
dst = "h1"
size = 4096
tx_depth = 4
local_ack_timeout = {timeout}
[[host]]
name = "h1"
responder_delay_ns = 100000
responder_jitter_ns = 50000
{extra}"#
    ))
}

#[test]
fn a_responder_slower_than_the_ack_timeout_draws_retransmissions_and_duplicates() {
    let short = slow_responder(4, "");
    let f = flow(&short, "f0 write h0->h1");
    let qp = f.qp.as_ref().unwrap();
    assert_eq!(short.summary.totals.errors, 0, "no link errors");
    assert!(qp.retransmitted_packets > 0, "{qp:?}");
    assert!(qp.local_ack_timeouts > 0, "{qp:?}");
    assert!(qp.duplicates_received > 0, "{qp:?}");
    assert_eq!(f.limited_by, "retransmissions", "{}", f.evidence);

    let long = slow_responder(10, "");
    let g = flow(&long, "f0 write h0->h1");
    let qp = g.qp.as_ref().unwrap();
    assert_eq!(
        qp.retransmitted_packets + qp.duplicates_received,
        0,
        "{qp:?}"
    );
    assert_eq!(g.limited_by, "responder", "{}", g.evidence);
    let h1 = long
        .summary
        .transport
        .iter()
        .find(|t| t.host == "h1")
        .unwrap();
    // Every packet waits 100-150 us: 125 on average.
    assert!((h1.rx_wait_mean_us - 125.0).abs() < 10.0, "{h1:?}");
    // 4 messages per 100-150 us either way, but the short timeout adds duplicates the
    // responder has to process in turn.
    assert!(g.messages >= f.messages, "{} vs {}", g.messages, f.messages);
    assert!(g.messages > 40, "{}", g.messages);
}

#[test]
fn a_responder_stall_longer_than_the_retries_fails_the_flow() {
    // No delay outside the stall: h1 stops processing from 100 to 1100 us. With
    // local_ack_timeout 4 (65.5 us) and 7 retries the requester gives up after about
    // 8 x 65.5 = 524 us of silence.
    let stall = "[[fault]]\nkind = \"responder_stall\"\nnode = \"h1\"\nstart_us = 100\nduration_us = 1000\n";
    let r = run_text(&format!(
        "duration_us = 1500\n[topology]\nkind = \"back-to-back\"\n[[flow]]\nop = \"write\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 4096\ntx_depth = 4\nlocal_ack_timeout = 4\n{stall}"
    ));
    let f = flow(&r, "f0 write h0->h1");
    assert_eq!(
        f.error_statuses.get("IBV_WC_RETRY_EXC_ERR"),
        Some(&1),
        "{f:?}"
    );
    assert!(
        f.last_us < 100.0 + 1.0,
        "nothing completes after the stall began: {f:?}"
    );
    // A shorter stall is ridden out by the retries.
    let r = run_text(&format!(
        "duration_us = 1500\n[topology]\nkind = \"back-to-back\"\n[[flow]]\nop = \"write\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 4096\ntx_depth = 4\nlocal_ack_timeout = 4\n{}",
        stall.replace("1000", "200")
    ));
    let f = flow(&r, "f0 write h0->h1");
    assert_eq!(f.error_completions, 0, "{f:?}");
    assert!(f.qp.as_ref().unwrap().local_ack_timeouts > 0);
    assert!(f.last_us > 1400.0, "{f:?}");
}

#[test]
fn host_and_stall_keys_are_checked_with_key_and_line() {
    let base = "[topology]\nkind = \"single-switch\"\nhosts = 3\n[[flow]]\nop = \"write\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n";
    let err = |extra: &str| {
        Scenario::parse(&format!("{base}{extra}"))
            .unwrap_err()
            .to_string()
    };
    let e = err("[[host]]\nname = \"h2\"\nresponder_delay_ns = 5\n");
    assert!(
        e.starts_with("line 10: host[0].name: `h2` runs no [[flow]]"),
        "{e}"
    );
    let e = err("[[host]]\nname = \"h1\"\nresponder_delay = 5\n");
    assert!(
        e.contains("responder_delay") && e.contains("line 11"),
        "{e}"
    );
    let e = err("[[fault]]\nkind = \"responder_stall\"\nnode = \"h1\"\nstart_us = 1\n");
    assert!(
        e.starts_with("line 10: fault[0]: a responder_stall needs"),
        "{e}"
    );
    let e = err("[[fault]]\nkind = \"responder_stall\"\nnode = \"h1\"\nstart_us = 1\nduration_us = 1\ndown_us = 4\n");
    assert!(
        e.starts_with("line 14: fault[0].down_us: belongs to a link fault"),
        "{e}"
    );
    let e = err("[[fault]]\nlink = \"h1:1\"\ndown_us = 4\nnode = \"h1\"\n");
    assert!(
        e.starts_with("line 12: fault[0].node: belongs to a responder_stall"),
        "{e}"
    );
    let e = err("[[fault]]\nkind = \"stall\"\n");
    assert!(e.contains("stall") && e.contains("line 10"), "{e}");
}

#[test]
fn the_bundled_traffic_mix_runs_and_writes_the_same_bytes_twice() {
    let text = include_str!("../../../scenarios/traffic-mix.toml");
    let base = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("flows-determinism");
    let _ = std::fs::remove_dir_all(&base);
    let mut outputs = Vec::new();
    for k in 0..2 {
        let r = run_text(text);
        let f0 = flow(&r, "f0 send h1->h0");
        assert!(f0.qp.as_ref().unwrap().rnr_naks_received > 0, "{f0:?}");
        assert_eq!(f0.limited_by, "receiver_not_ready");
        assert!(flow(&r, "f1 atomic h2->h4").messages > 0);
        assert!(flow(&r, "f2 ud-send h5->h6").messages > 0);
        assert_eq!(flow(&r, "f3 send h9->h7").messages, 20);
        let mgmt = flow(&r, "s0 mgmt h10->h11");
        assert_eq!(mgmt.packets, 200);
        let files = r.write(&base.join(k.to_string())).unwrap();
        outputs.push(
            files
                .iter()
                .map(|p| std::fs::read(p).unwrap())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn an_atomic_hotspot_saturates_at_the_responders_atomic_unit() {
    let text = |extra: &str| {
        format!(
            r#"
duration_us = 100
[topology]
kind = "single-switch"
hosts = 5
[[flow]]
op = "atomic"
pattern = "incast"
dst = "h0"
tx_depth = 16
{extra}"#
        )
    };
    // 500 ns per atomic at h0: 2 per microsecond whatever the number of requesters.
    let s = Scenario::parse(&text("[[host]]\nname = \"h0\"\natomic_service_ns = 500\n")).unwrap();
    let mut fabric = s.build().unwrap();
    let plans = s.flow_plan(0).unwrap();
    let rec = FlowRecorder::shared(10 * PS_PER_US);
    let log = Ledger::default();
    attach_flows(&mut fabric, &plans, &rec, &log, s.seed, &mut |_, e| e).unwrap();
    s.apply_host_models(&mut fabric).unwrap();
    fabric.run_until(100 * PS_PER_US);
    log.borrow().settle(&mut rec.borrow_mut());
    let done: u64 = rec.borrow().flows().values().map(|f| f.messages).sum();
    assert!((180..=200).contains(&done), "{done}");
    // Every completed FetchAdd is in the counter; the others were executed or still queued.
    let counter = atomic_counter(&mut fabric, "h0", 0).unwrap();
    assert!(
        counter >= done && counter <= done + 4 * 16,
        "{counter} {done}"
    );
    // The four requesters share the unit about equally.
    for f in rec.borrow().flows().values() {
        assert!(
            (40..=52).contains(&f.messages),
            "{}: {}",
            f.info.name,
            f.messages
        );
    }
    // The report points at the responder's atomic unit.
    let r = run_text(&text("[[host]]\nname = \"h0\"\natomic_service_ns = 500\n"));
    for f in &r.summary.flows {
        assert_eq!(f.limited_by, "responder", "{}", f.evidence);
    }
    // Without the atomic unit's cost the same fabric runs over ten times as many.
    let r = run_text(&text(""));
    let free: u64 = r.summary.flows.iter().map(|f| f.messages).sum();
    assert!(free > 10 * done, "{free} vs {done}");
}

#[test]
fn an_engine_all_to_all_starts_its_pairs_as_staggered() {
    let r = run_text(
        r#"
duration_us = 60
[topology]
kind = "single-switch"
hosts = 4
[[flow]]
op = "write"
pattern = "all-to-all"
size = 4096
tx_depth = 4
start_us = 10
stagger_us = 2
"#,
    );
    // 4 hosts x 3 peers, one RC QP pair each, started 2 us apart from 10 us.
    assert_eq!(r.summary.flows.len(), 12);
    for (k, f) in r.summary.flows.iter().enumerate() {
        let start = 10.0 + 2.0 * k as f64;
        assert!(f.messages > 0, "{}", f.name);
        // Not before its start; soon after, though behind the packets its host's earlier
        // pairs keep queued at its port (the HCA's send queue).
        assert!(
            f.first_us > start && f.first_us < start + 10.0,
            "{}: first completion at {} us, started at {start}",
            f.name,
            f.first_us
        );
    }
    assert_eq!(r.summary.flows[0].name, "f0 write h0->h1");
    assert_eq!(r.summary.flows[2].name, "f0 write h0->h3");
}

#[test]
fn duplicates_cost_a_busy_responder_work_and_goodput_collapses() {
    // h1 processes one packet at a time, 8 us each, after 100-150 us of delay: a window of
    // 16 takes 128 us of work, twice the 65.5 us timeout of local_ack_timeout 4. Every
    // timeout resends the window (go-back-N) and the duplicates queue behind it, so the
    // next ACK comes later still, until retry_cnt is exhausted. With local_ack_timeout 10
    // (4.19 ms) the same responder is simply the bottleneck.
    let run = |timeout: u8| {
        run_text(&format!(
            r#"
duration_us = 5000
[topology]
kind = "back-to-back"
[[flow]]
op = "write"
pattern = "one-to-one"
src = "h0"
dst = "h1"
size = 4096
tx_depth = 16
local_ack_timeout = {timeout}
[[host]]
name = "h1"
responder_delay_ns = 100000
responder_jitter_ns = 50000
responder_service_ns = 8000
"#
        ))
    };
    let storm = run(4);
    let f = flow(&storm, "f0 write h0->h1");
    let qp = f.qp.as_ref().unwrap();
    assert_eq!(storm.summary.totals.errors, 0, "the links lost nothing");
    assert!(
        qp.retransmitted_packets > 100 && qp.duplicates_received > 100,
        "{qp:?}"
    );
    assert_eq!(
        f.error_statuses.get("IBV_WC_RETRY_EXC_ERR"),
        Some(&1),
        "{f:?}"
    );
    let calm = run(10);
    let g = flow(&calm, "f0 write h0->h1");
    let qp = g.qp.as_ref().unwrap();
    assert_eq!(
        qp.retransmitted_packets + qp.duplicates_received,
        0,
        "{qp:?}"
    );
    assert_eq!(g.error_completions, 0);
    // The responder's capacity, 1 packet per 8 us, minus the first delay: about 600.
    assert!(g.messages > 500, "{}", g.messages);
    assert!(
        g.messages >= 4 * f.messages,
        "{} vs {}",
        g.messages,
        f.messages
    );
}

#[test]
fn ud_flows_share_one_qp_per_host_where_rc_needs_one_per_peer() {
    let qps_at = |service: &str| {
        let s = Scenario::parse(&format!(
            r#"
[topology]
kind = "single-switch"
hosts = 5
[[flow]]
op = "send"
service = "{service}"
pattern = "incast"
dst = "h0"
size = 2048
tx_depth = 8
rq_depth = 64
"#
        ))
        .unwrap();
        let mut fabric = s.build().unwrap();
        let plans = s.flow_plan(0).unwrap();
        let rec = FlowRecorder::shared(10 * PS_PER_US);
        let log = Ledger::default();
        let hosts = attach_flows(&mut fabric, &plans, &rec, &log, s.seed, &mut |_, e| e).unwrap();
        fabric.run_until(50 * PS_PER_US);
        log.borrow().settle(&mut rec.borrow_mut());
        let rec = rec.borrow();
        for f in rec.flows().values() {
            // 4 senders share the link into h0: 25 Gb/s each, 76 messages of 2 KiB in 50 us.
            assert!(f.messages > 65, "{service} {}: {}", f.info.name, f.messages);
            assert_eq!(f.errors, 0);
        }
        let qps = fabric
            .endpoint_mut::<softib_fabric::engine_hca::EngineHca>("h0", 1)
            .unwrap()
            .device()
            .qpns()
            .count();
        assert_eq!(hosts.len(), 5);
        qps
    };
    assert_eq!(qps_at("ud"), 1);
    assert_eq!(qps_at("rc"), 4);
    // The summary reports the same per host.
    let r = run_text(
        "duration_us = 5\n[topology]\nkind = \"single-switch\"\nhosts = 5\n[[flow]]\nop = \"send\"\nservice = \"ud\"\npattern = \"all-to-all\"\n[[flow]]\nop = \"send\"\npattern = \"all-to-all\"\n",
    );
    for t in &r.summary.transport {
        // One UD QP, plus 4 RC requesters and 4 RC responders.
        assert_eq!(t.qps, 1 + 4 + 4, "{t:?}");
    }
}

#[test]
fn qps_split_a_pair_and_duration_stops_posting() {
    let r = run_text(
        r#"
duration_us = 100
[topology]
kind = "back-to-back"
[[flow]]
op = "write"
pattern = "one-to-one"
src = "h0"
dst = "h1"
size = 16384
tx_depth = 8
qps = 2
duration_us = 40
start_us = 10
"#,
    );
    assert_eq!(r.summary.flows.len(), 2);
    let (a, b) = (
        flow(&r, "f0 write h0->h1 q0"),
        flow(&r, "f0 write h0->h1 q1"),
    );
    // Two QPs share the link about equally while they run (10 to 50 us).
    let total = a.payload_bytes + b.payload_bytes;
    let share = a.payload_bytes as f64 / total as f64;
    assert!((share - 0.5).abs() < 0.05, "{share}");
    // 40 us at 100 Gb/s is about 500 KB, and the 2 x 8 messages (262 KB) in flight when
    // posting stops at 50 us still complete.
    assert!(
        total > 650_000 && total < 500_000 + 262_144 + 20_000,
        "{total}"
    );
    for f in [a, b] {
        assert!(f.first_us > 10.0, "{f:?}");
        // The last messages posted just before 50 us drain behind 8 in flight per QP.
        assert!(f.last_us < 50.0 + 25.0, "{f:?}");
    }
    let e = Scenario::parse(
        "[topology]\nkind = \"back-to-back\"\n[[flow]]\nop = \"send\"\nservice = \"ud\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nqps = 2\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("line 9: flow[0].qps"), "{e}");
}

#[test]
fn max_rd_atomic_bounds_the_reads_and_atomics_in_flight() {
    // 100 m of cable: a round trip is over 1 us, so one READ or atomic at a time runs
    // about one per round trip whatever tx_depth says.
    let run = |op: &str, depth: u8| {
        let r = run_text(&format!(
            "duration_us = 50\n[fabric]\ncable_m = 100.0\n[topology]\nkind = \"back-to-back\"\n[[flow]]\nop = \"{op}\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\ntx_depth = 16\nmax_rd_atomic = {depth}\n"
        ));
        r.summary.flows[0].messages
    };
    for op in ["atomic", "read"] {
        let (one, sixteen) = (run(op, 1), run(op, 16));
        // 50 us / (2 x 500 ns + packet times): under 50 with one in flight.
        assert!(one > 30 && one < 50, "{op}: {one}");
        assert!(sixteen > 12 * one, "{op}: {sixteen} vs {one}");
    }
}

#[test]
fn ud_messages_without_a_posted_receive_are_lost_and_counted() {
    // 2 receives, each posted again 10 us after use, against 3 messages a microsecond.
    let r = run_text(
        "duration_us = 50\n[topology]\nkind = \"back-to-back\"\n[[flow]]\nop = \"send\"\nservice = \"ud\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\ntx_depth = 16\nrq_depth = 2\nrecv_post_delay_ns = 10000\n",
    );
    let f = flow(&r, "f0 ud-send h0->h1");
    // At most 2 per 10 us arrive: 2 at once, then 2 every 10 us.
    assert!(f.messages >= 8 && f.messages <= 12, "{f:?}");
    // The rest were dropped by the receiving QP; those a later arrival revealed are counted
    // (not the last ones, after the last arrival).
    let rx = r.summary.ports.iter().find(|p| p.port == "h1:1").unwrap();
    assert!(f.messages_lost > 100, "{f:?}");
    assert!(f.messages + f.messages_lost <= rx.port_rcv_pkts, "{f:?}");
    assert!(
        f.messages + f.messages_lost + 16 * 2 >= rx.port_rcv_pkts,
        "{f:?}"
    );
    assert_eq!(f.error_completions, 0);
    assert_eq!(f.limited_by, "lost_messages", "{}", f.evidence);
}

#[test]
fn congestion_control_reaches_send_and_ud_flows() {
    // A 3 -> 1 incast of each kind through one switch with Annex A10 marking: the sources'
    // engines get BECNs (in ACKs for RC, in CNPs for UD) and throttle, whatever the op.
    // (Atomics are configured alike, the device being; their small packets do not
    // congest a link here.)
    let cc = r#"
[congestion_control]
congestion_control = true
cc_sw_cong_setting_control_map = "0x1f"
cc_sw_cong_setting_threshold = 15
cc_sw_cong_setting_packet_size = 0
cc_sw_cong_setting_marking_rate = 0
cc_ca_cong_setting_port_control = "0x0000"
cc_ca_cong_setting_control_map = "0x0001"
cc_ca_cong_setting_ccti_timer = ["0 100"]
cc_ca_cong_setting_ccti_increase = ["0 1"]
cc_cct = "0:0,0:4,0:8,0:16,0:32,0:64,0:128,0:256"
"#;
    for (op, extra) in [("send", ""), ("write", ""), ("send", "service = \"ud\"\n")] {
        let r = run_text(&format!(
            "duration_us = 100\n[topology]\nkind = \"single-switch\"\nhosts = 4\n[[flow]]\nop = \"{op}\"\n{extra}pattern = \"incast\"\ndst = \"h0\"\ntx_depth = 16\nsize = {}\n{cc}",
            4096
        ));
        for t in r.summary.transport.iter().filter(|t| t.host != "h0") {
            assert!(
                t.becn_received > 0 && t.cc_throttled_us > 0.0,
                "{op} {extra}: {t:?}"
            );
        }
    }
}

#[test]
fn a_ud_table_whose_windows_overflow_its_qp_is_refused() {
    // One UD QP per host carries the windows of all its destinations: 5 x 1000 fit in the
    // device's 16384 WRs, 20 x 1000 do not.
    let s = Scenario::parse(
        "[topology]\nkind = \"single-switch\"\nhosts = 6\n[[flow]]\nop = \"send\"\nservice = \"ud\"\npattern = \"all-to-all\"\ntx_depth = 1000\n",
    )
    .unwrap();
    let mut fabric = s.build().unwrap();
    let plans = s.flow_plan(0).unwrap();
    let rec = FlowRecorder::shared(PS_PER_US);
    let log = Ledger::default();
    assert!(attach_flows(&mut fabric, &plans, &rec, &log, 1, &mut |_, e| e).is_ok());
    let s = Scenario::parse(
        "[topology]\nkind = \"single-switch\"\nhosts = 21\n[[flow]]\nop = \"send\"\nservice = \"ud\"\npattern = \"all-to-all\"\ntx_depth = 1000\n",
    )
    .unwrap();
    let mut fabric = s.build().unwrap();
    let plans = s.flow_plan(0).unwrap();
    let e = attach_flows(&mut fabric, &plans, &rec, &log, 1, &mut |_, e| e)
        .expect_err("20 x 1000 WRs do not fit")
        .to_string();
    assert!(e.contains("lower tx_depth"), "{e}");
}
