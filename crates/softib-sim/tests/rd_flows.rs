//! `[[flow]] service = "rd"`: Reliable Datagram flows on the real engine. RD QPs per host
//! and table, EE contexts per host pair shared by them, bytes moved by SEND, WRITE and
//! READ and checked in the destination's memory, atomics, one message in progress per EEC,
//! losses recovered where UD loses them, and the scenario keys' errors.

use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::Fabric;
use softib_fabric::time::PS_PER_US;
use softib_sim::apps::flow::Ledger;
use softib_sim::report::flows::FlowRecorder;
use softib_sim::report::summary::HostTransport;
use softib_sim::report::Report;
use softib_sim::scenario::Scenario;
use softib_sim::setup::{atomic_counter, attach_flows, flow_buffers};

mod support;
use support::scenario::{flow, run_text};

fn host<'a>(r: &'a Report, h: &str) -> &'a HostTransport {
    r.summary
        .transport
        .iter()
        .find(|t| t.host == h)
        .unwrap_or_else(|| panic!("no transport for {h}"))
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(37).wrapping_add((i % 251) as u8) | 1)
        .collect()
}

/// The single buffer flow table `table` uses on `h`.
fn buffer(f: &mut Fabric, h: &str, table: usize) -> u32 {
    let b = flow_buffers(f, h, table);
    assert_eq!(b.len(), 1, "{h} table {table}: one shared buffer, {b:?}");
    b[0]
}

fn fill(f: &mut Fabric, h: &str, lkey: u32, data: &[u8]) {
    let hca = f.endpoint_mut::<EngineHca>(h, 1).unwrap();
    hca.device_mut().memory_mut(lkey).unwrap().write(0, data);
}

fn read(f: &mut Fabric, h: &str, lkey: u32, len: usize) -> Vec<u8> {
    let hca = f.endpoint_mut::<EngineHca>(h, 1).unwrap();
    let mut out = vec![0; len];
    hca.device().memory(lkey).unwrap().read(0, &mut out);
    out
}

const SWITCH6: &str = "[topology]\nkind = \"single-switch\"\nhosts = 6\nswitch_ports = 8\n";

#[test]
fn rd_send_write_read_and_atomics_move_the_bytes_over_shared_eecs() {
    let text = format!(
        r#"
duration_us = 400
{SWITCH6}
[[flow]]
op = "write"
service = "rd"
pattern = "one-to-one"
src = "h1"
dst = "h0"
size = 10000
tx_depth = 2
iterations = 12
qps = 3
mtu = 1024
[[flow]]
op = "read"
service = "rd"
pattern = "one-to-one"
src = "h2"
dst = "h3"
size = 6000
tx_depth = 2
iterations = 10
qps = 2
eecs = 2
[[flow]]
op = "send"
service = "rd"
pattern = "one-to-one"
src = "h4"
dst = "h5"
size = 3000
tx_depth = 4
iterations = 16
qps = 2
mtu = 1024
rq_depth = 8
[[flow]]
op = "atomic"
service = "rd"
pattern = "one-to-one"
src = "h5"
dst = "h4"
add = 3
tx_depth = 2
iterations = 25
qps = 2
"#
    );
    let s = Scenario::parse(&text).unwrap();
    let mut fabric = s.build().unwrap();
    let plans = s.flow_plan(0).unwrap();
    let rec = FlowRecorder::shared(10 * PS_PER_US);
    attach_flows(
        &mut fabric,
        &plans,
        &rec,
        &Ledger::default(),
        s.seed,
        &mut |_, e| e,
    )
    .unwrap();
    let (w_src, r_src, s_src) = (
        buffer(&mut fabric, "h1", 0),
        buffer(&mut fabric, "h3", 1),
        buffer(&mut fabric, "h4", 2),
    );
    let (a, b, c) = (pattern(1, 10000), pattern(2, 6000), pattern(3, 3000));
    fill(&mut fabric, "h1", w_src, &a);
    fill(&mut fabric, "h3", r_src, &b);
    fill(&mut fabric, "h4", s_src, &c);
    fabric.run_until(400 * PS_PER_US);
    // The bytes arrived where each operation puts them: the WRITE's at h0, the READ's
    // back at h2, the SEND's in h5's receive buffer.
    let w_dst = buffer(&mut fabric, "h0", 0);
    assert_eq!(
        read(&mut fabric, "h0", w_dst, 10000),
        a,
        "RD WRITE h1 -> h0"
    );
    let r_dst = buffer(&mut fabric, "h2", 1);
    assert_eq!(read(&mut fabric, "h2", r_dst, 6000), b, "RD READ h2 <- h3");
    let s_dst = buffer(&mut fabric, "h5", 2);
    assert_eq!(read(&mut fabric, "h5", s_dst, 3000), c, "RD SEND h4 -> h5");
    // Two RD QPs adding 3, 25 times each: exactly once each, whatever the EEC order.
    assert_eq!(atomic_counter(&mut fabric, "h4", 3), Some(2 * 25 * 3));
    let rec = rec.borrow();
    let want = |table: usize| [12, 10, 16, 25][table];
    for f in rec.flows().values() {
        let table: usize = f.info.name[1..2].parse().unwrap();
        assert_eq!(f.messages, want(table), "{}", f.info.name);
        assert_eq!(f.errors, 0, "{}", f.info.name);
    }
    assert_eq!(rec.flows().len(), 3 + 2 + 2 + 2);
    for h in ["h0", "h1"] {
        let hca = fabric.endpoint_mut::<EngineHca>(h, 1).unwrap();
        let fp = hca.device().footprint();
        // Three RD QPs on each end, one EEC between them (eecs default 1).
        assert_eq!((fp.qps, fp.eecs), (3, 1), "{h}");
    }
    let hca = fabric.endpoint_mut::<EngineHca>("h2", 1).unwrap();
    assert_eq!(hca.device().footprint().eecs, 2, "eecs = 2");
}

#[test]
fn an_rd_incast_server_holds_its_qps_once_and_one_eec_per_client() {
    let text = format!(
        r#"
duration_us = 300
{SWITCH6}
[[flow]]
op = "send"
service = "rd"
pattern = "incast"
dst = "h0"
size = 2048
tx_depth = 2
iterations = 20
qps = 4
rq_depth = 64
"#
    );
    let r = run_text(&text);
    assert_eq!(r.summary.flows.len(), 5 * 4);
    for f in &r.summary.flows {
        assert_eq!(f.messages, 20, "{}", f.name);
        assert_eq!(f.payload_bytes, 20 * 2048, "{}", f.name);
        assert_eq!(f.error_completions, 0, "{}", f.name);
        assert!(f.name.contains("rd-send"), "{}", f.name);
    }
    let server = host(&r, "h0");
    // RC would hold 5 x 4 = 20 QPs; RD holds the 4 RD QPs and an EEC per client.
    assert_eq!((server.qps, server.eecs), (4, 5), "{server:?}");
    assert!(server.eec_state_bytes > 0 && server.eec_state_bytes < server.qp_state_bytes);
    let client = host(&r, "h3");
    assert_eq!((client.qps, client.eecs), (4, 1), "{client:?}");
    // The EECs carried the packets: the flow's QP counters are its EEC's.
    let qp = flow(&r, "f0 rd-send h1->h0 q2").qp.as_ref().unwrap();
    assert!(qp.requester_packets_sent >= 20, "{qp:?}");
    // The JSON names the EECs.
    let json = serde_json::to_string(&r.summary).unwrap();
    assert!(json.contains("\"eecs\":5"), "{json}");
}

/// h0 writes 4096-byte messages to h1 from 4 RD QPs over `eecs` EECs (or 4 RC QPs), over
/// 100 m cables (a round trip of about 2 us, six times a message's 0.33 us on the wire);
/// returns when the last one completed, microseconds.
fn serialised(service: &str, eecs: Option<u32>) -> f64 {
    let eecs = eecs.map_or(String::new(), |e| format!("eecs = {e}\n"));
    let r = run_text(&format!(
        "duration_us = 3000\n[fabric]\ncable_m = 100.0\n{SWITCH6}[[flow]]\nop = \"write\"\nservice = \"{service}\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 4096\ntx_depth = 4\niterations = 100\nqps = 4\n{eecs}"
    ));
    let mut last = 0.0f64;
    for f in &r.summary.flows {
        assert_eq!(f.messages, 100, "{}", f.name);
        last = last.max(f.last_us);
    }
    last
}

#[test]
fn an_eec_serialises_the_messages_of_the_qps_sharing_it() {
    // One EEC: one message in progress (IBA 9.7.1), so each waits for the previous one's
    // ACK; four EECs let four go at once, as four RC QPs (or more) do.
    // RC's 4 QPs keep 4 x tx_depth = 16 messages in flight and fill the link.
    let one = serialised("rd", Some(1));
    let four = serialised("rd", Some(4));
    let rc = serialised("rc", None);
    eprintln!("last completion: RD 1 EEC {one} us, RD 4 EECs {four} us, RC {rc} us");
    assert!(one > 3.0 * four, "1 EEC {one} us vs 4 EECs {four} us");
    assert!(
        rc <= four && one > 4.0 * rc,
        "RC {rc} us, 4 EECs {four}, 1 EEC {one}"
    );
}

#[test]
fn rd_recovers_the_losses_that_ud_loses() {
    let lossy = |service: &str| {
        let qps = if service == "ud" { "" } else { "qps = 2\n" };
        run_text(&format!(
            r#"
duration_us = 3000
[fabric]
bit_error_rate = 2e-6
{SWITCH6}
[[flow]]
op = "send"
service = "{service}"
pattern = "incast"
dst = "h0"
size = 4096
tx_depth = 2
iterations = 60
{qps}rq_depth = 256
local_ack_timeout = 1
"#
        ))
    };
    let rd = lossy("rd");
    let rd_sent = 5 * 2 * 60;
    let got: u64 = rd.summary.flows.iter().map(|f| f.messages).sum();
    assert_eq!(got, rd_sent, "RD delivers every message");
    assert!(rd.summary.flows.iter().all(|f| f.error_completions == 0));
    let server = host(&rd, "h0");
    let retrans: u64 = rd
        .summary
        .transport
        .iter()
        .map(|t| t.retransmitted_packets)
        .sum();
    assert!(retrans > 0, "losses were recovered by the EECs: {server:?}");
    assert!(
        rd.summary.totals.errors + rd.summary.totals.drops > 0,
        "the links corrupted packets"
    );
    let ud = lossy("ud");
    let ud_got: u64 = ud.summary.flows.iter().map(|f| f.messages).sum();
    let ud_lost: u64 = ud.summary.flows.iter().map(|f| f.messages_lost).sum();
    assert!(
        ud_got < 5 * 60 && ud_lost > 0,
        "UD loses: {ud_got} of 300, {ud_lost} lost"
    );
}

fn refused(extra: &str) -> String {
    let text = format!(
        "duration_us = 10\n{SWITCH6}[[flow]]\nop = \"send\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n{extra}"
    );
    match Scenario::parse(&text) {
        Ok(s) => match s.flow_plan(0) {
            Ok(_) => panic!("accepted: {extra}"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_rd_keys_are_refused_naming_the_key() {
    let e = refused("eecs = 2\nqps = 2\n");
    assert!(e.contains("flow[0].eecs") && e.contains("RD flows"), "{e}");
    let e = refused("service = \"rd\"\neecs = 0\n");
    assert!(e.contains("flow[0].eecs") && e.contains("1..=1"), "{e}");
    let e = refused("service = \"rd\"\nqps = 4\neecs = 5\n");
    assert!(e.contains("flow[0].eecs") && e.contains("1..=4"), "{e}");
    let e = refused("service = \"rd\"\nsrq = true\n");
    assert!(e.contains("flow[0].srq"), "{e}");
    let e = refused("service = \"rd\"\nlead_op = \"read\"\n");
    assert!(
        e.contains("flow[0].lead_op") && e.contains("EE contexts"),
        "{e}"
    );
    let e = refused("service = \"rd\"\nsq_psn_offset = 5\n");
    assert!(e.contains("flow[0].sq_psn_offset"), "{e}");
    let e = refused("service = \"rdx\"\n");
    assert!(e.contains("service"), "{e}");
}

#[test]
fn a_host_pair_shares_its_eecs_in_both_directions_and_a_ring_steps_over_them() {
    let three = "[topology]\nkind = \"single-switch\"\nhosts = 3\nswitch_ports = 4\n";
    let r = run_text(&format!(
        "duration_us = 300\n{three}[[flow]]\nop = \"write\"\nservice = \"rd\"\npattern = \"all-to-all\"\nsize = 4096\ntx_depth = 2\niterations = 10\nqps = 2\n"
    ));
    for h in ["h0", "h1", "h2"] {
        let t = host(&r, h);
        // Two peers, one EEC each, carrying both directions; two RD QPs for all of them.
        assert_eq!((t.qps, t.eecs), (2, 2), "{h}: {t:?}");
    }
    assert_eq!(r.summary.flows.len(), 3 * 2 * 2);
    let ring = run_text(&format!(
        "duration_us = 300\n{three}[[flow]]\nop = \"send\"\nservice = \"rd\"\npattern = \"ring\"\nsize = 8192\n"
    ));
    for h in ["h0", "h1", "h2"] {
        let t = host(&ring, h);
        // An EEC to the successor and one to the predecessor.
        assert_eq!((t.qps, t.eecs), (1, 2), "{h}: {t:?}");
    }
    assert_eq!(ring.summary.flows.len(), 3);
    for f in r.summary.flows.iter().chain(&ring.summary.flows) {
        // The ring: one all-reduce, 2 x (3 - 1) steps, each gated on the predecessor's.
        let want = if f.name.contains("write") { 10 } else { 4 };
        assert_eq!(f.messages, want, "{}", f.name);
        assert_eq!(f.error_completions, 0, "{}", f.name);
    }
}

#[test]
fn an_eec_that_cannot_hold_its_qps_windows_is_refused() {
    let s = Scenario::parse(&format!(
        "duration_us = 10\n{SWITCH6}[[flow]]\nop = \"write\"\nservice = \"rd\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nqps = 64\ntx_depth = 1024\n"
    ))
    .unwrap();
    let mut fabric = s.build().unwrap();
    let plans = s.flow_plan(0).unwrap();
    let rec = FlowRecorder::shared(10 * PS_PER_US);
    let e = attach_flows(
        &mut fabric,
        &plans,
        &rec,
        &Ledger::default(),
        s.seed,
        &mut |_, e| e,
    )
    .expect_err("refused");
    let e = e.to_string();
    assert!(
        e.contains("EE context 0") && e.contains("raise eecs"),
        "{e}"
    );
}
