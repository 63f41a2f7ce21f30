//! Congestion control through the pair harness: the destination's FECN/ECN -> BECN
//! and CNP rules, the IBA CCA (CCTI arithmetic, inter-packet delay from the CCT) and DCQCN
//! (rate cut on a CNP, recovery, pacing). Expected numbers are computed here from the
//! formulas in docs/design/engine.md, "Congestion control".

mod common;
use std::cell::Cell;
use std::rc::Rc;

use common::*;
use softib_transport::cc::{
    CaCongestionEntry, CcAlgorithm, CcConfig, Cct, CctEntry, DcqcnConfig, IbaCcConfig, PortControl,
};
use softib_transport::harness::{Endpoint, Pair, QpOptions, Verdict};
use softib_transport::{
    AhAttr, AhHandle, DeviceConfig, GlobalRoute, Mtu, QpType, RxGrh, RxMeta, SendWr, Sge, UdDest,
    WrOpcode,
};
use softib_wire::{BthRepr, Opcode, PacketRepr};

const LINK_MBPS: u64 = 100_000;
const OVERHEAD: u64 = 14;

fn cct(entries: &[(u8, u16)]) -> Cct {
    Cct::new(
        entries
            .iter()
            .map(|&(s, m)| CctEntry::new(s, m).unwrap())
            .collect(),
    )
    .unwrap()
}

fn iba(port_control: PortControl, entry: CaCongestionEntry, table: Cct) -> CcConfig {
    let mut entries = [CaCongestionEntry::default(); 16];
    entries[0] = entry;
    entries[3] = entry;
    CcConfig {
        algorithm: CcAlgorithm::Iba(IbaCcConfig {
            port_control,
            entries,
            cct: table,
        }),
        notify: true,
        min_time_between_cnps: 0,
        ..CcConfig::default()
    }
}

fn pair_with(seed: u64, cc: CcConfig) -> Pair {
    Pair::with_config(
        seed,
        DeviceConfig {
            cc,
            ..DeviceConfig::default()
        },
    )
}

/// A CNP for `dest_qp` as a peer would send it (BECN set, PSN 0, 16 reserved bytes).
fn cnp_bytes(dest_qp: u32) -> Vec<u8> {
    let repr = PacketRepr::new(BthRepr {
        opcode: Opcode::CNP,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: true,
        dest_qp,
        ack_req: false,
        psn: 0,
    });
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// Delivers a CNP to `side` as its peer (the other side) sends it: a connected QP takes
/// packets from its peer's address only.
fn inject_cnp(pair: &mut Pair, side: usize, qpn: u32, now: u64) {
    let bytes = cnp_bytes(qpn);
    let meta = RxMeta {
        grh: Some(RxGrh {
            sgid: pair.device(1 - side).config().gid,
            dgid: pair.device(side).config().gid,
            ..RxGrh::default()
        }),
        ..RxMeta::default()
    };
    pair.dev(side).handle_packet(now, &meta, &bytes);
}

/// Packet time of a transport packet of `len` bytes: ceil((len + overhead) x 8 / rate).
fn packet_time(len: usize) -> u64 {
    ((len as u64 + OVERHEAD) * 8 * 1_000).div_ceil(LINK_MBPS)
}

fn counters(pair: &Pair, side: usize, qpn: u32) -> softib_transport::QpCounters {
    *pair.device(side).qp_counters(qpn).unwrap()
}

#[test]
fn ccti_rises_by_the_increase_caps_at_the_limit_and_decays_to_the_floor() {
    // CCTI_Timer 10 (10.24 us), CCTI_Increase 3, Trigger_Threshold 6, CCTI_Min 1; an
    // 8-entry CCT gives CCTI_Limit 7.
    let entry = CaCongestionEntry {
        ccti_timer: 10,
        ccti_increase: 3,
        trigger_threshold: 6,
        ccti_min: 1,
    };
    let table = cct(&[(0, 0); 8]);
    let mut pair = pair_with(1, iba(PortControl::Sl, entry, table));
    let (a, _b) = pair.connect(&QpOptions::default());
    let (a2, _b2) = pair.connect(&QpOptions::default());
    assert_eq!(pair.device(0).sl_ccti(0, 0), Some(1), "starts at CCTI_Min");
    let t0 = 1_000;
    inject_cnp(&mut pair, 0, a.qpn, t0);
    assert_eq!(pair.device(0).sl_ccti(t0, 0), Some(1 + 3));
    inject_cnp(&mut pair, 0, a.qpn, t0);
    assert_eq!(pair.device(0).sl_ccti(t0, 0), Some(7));
    inject_cnp(&mut pair, 0, a.qpn, t0);
    assert_eq!(
        pair.device(0).sl_ccti(t0, 0),
        Some(7),
        "capped at CCTI_Limit"
    );
    let c = counters(&pair, 0, a.qpn);
    assert_eq!((c.cnps_received, c.becn_received), (3, 3));
    // Per SL: the other QP on SL 0 sees the same index.
    let st = pair.device(0).cc_status(t0, a2.qpn).unwrap();
    assert_eq!(st.ccti, Some(7));
    assert!(st.above_trigger, "7 >= Trigger_Threshold 6");
    // One decrement per 10.24 us, never below CCTI_Min.
    let period = 10 * 1024;
    for (k, want) in [(0, 7), (1, 6), (3, 4), (5, 2), (6, 1), (100, 1)] {
        assert_eq!(
            pair.device(0).sl_ccti(t0 + k * period, 0),
            Some(want),
            "{k} periods"
        );
    }
    assert_eq!(pair.device(0).sl_ccti(t0 + period - 1, 0), Some(7));
    let st = pair.device(0).cc_status(t0 + 2 * period, a.qpn).unwrap();
    assert_eq!(st.ccti, Some(5));
    assert!(!st.above_trigger);
    // A BECN during the decay adds to the decayed value; the timer keeps its phase.
    let t1 = t0 + 3 * period + 77;
    inject_cnp(&mut pair, 0, a.qpn, t1);
    assert_eq!(pair.device(0).sl_ccti(t1, 0), Some(4 + 3));
    assert_eq!(pair.device(0).sl_ccti(t0 + 4 * period - 1, 0), Some(7));
    assert_eq!(pair.device(0).sl_ccti(t0 + 4 * period, 0), Some(6));
}

#[test]
fn per_qp_cca_keeps_one_index_per_qp() {
    let entry = CaCongestionEntry {
        ccti_timer: 0,
        ccti_increase: 2,
        trigger_threshold: 0,
        ccti_min: 0,
    };
    let mut pair = pair_with(2, iba(PortControl::Qp, entry, cct(&[(0, 0); 16])));
    let (a, _) = pair.connect(&QpOptions::default());
    let (a2, _) = pair.connect(&QpOptions::default());
    for _ in 0..5 {
        inject_cnp(&mut pair, 0, a.qpn, 10);
    }
    let ccti = |pair: &Pair, q| pair.device(0).cc_status(1 << 40, q).unwrap().ccti;
    assert_eq!(ccti(&pair, a.qpn), Some(10));
    assert_eq!(ccti(&pair, a2.qpn), Some(0), "another QP is not slowed");
    for _ in 0..10 {
        inject_cnp(&mut pair, 0, a.qpn, 10);
    }
    assert_eq!(ccti(&pair, a.qpn), Some(15), "CCTI_Limit of a 16-entry CCT");
    assert_eq!(
        pair.device(0).sl_ccti(10, 0),
        Some(0),
        "the SL state is unused"
    );
}

/// Drives a UC RDMA WRITE of `len` bytes at MTU 1024 and returns (time, length) of every
/// packet side 0 sent.
fn uc_stream(
    pair: &mut Pair,
    a: &Endpoint,
    b: &Endpoint,
    start: u64,
    len: u32,
) -> Vec<(u64, usize)> {
    pair.trace = true;
    pair.now = start;
    pair.dev(0)
        .post_send(start, a.qpn, &wr(WrOpcode::RdmaWrite, 1, a, 0, b, 0, len))
        .unwrap();
    pair.drive(start + SEC);
    pair.trace_log
        .iter()
        .filter(|e| e.from == 0)
        .map(|e| (e.time, e.len))
        .collect()
}

#[test]
fn inter_packet_delay_comes_from_the_cct_entry_at_the_ccti() {
    // CCTI_Min 2 keeps the QP at CCT entry 2 = shift 1, multiplier 3:
    // gap = packet time + (packet time >> 1) x 3.
    let entry = CaCongestionEntry {
        ccti_timer: 0,
        ccti_increase: 1,
        trigger_threshold: 0,
        ccti_min: 2,
    };
    let mut pair = pair_with(
        3,
        iba(PortControl::Qp, entry, cct(&[(0, 0), (0, 1), (1, 3)])),
    );
    let (a, b) = pair.connect(&QpOptions {
        qp_type: QpType::Uc,
        mtu: Mtu::M1024,
        ..Default::default()
    });
    let sent = uc_stream(&mut pair, &a, &b, 5_000, 8 * 1024);
    assert_eq!(sent.len(), 8);
    assert_eq!(
        sent[0],
        (5_000, 12 + 16 + 1024),
        "WRITE FIRST: BTH + RETH + payload"
    );
    let mut expected_throttle = 0;
    for w in sent.windows(2) {
        let pt = packet_time(w[0].1);
        let gap = pt + (pt >> 1) * 3;
        assert_eq!(w[1].0 - w[0].0, gap, "{w:?}");
        expected_throttle += gap;
    }
    // Every gate but the one after the last packet held a waiting packet.
    assert_eq!(counters(&pair, 0, a.qpn).throttled_ns, expected_throttle);

    // CCTI_Min 0 with entry 0 = 0:0: no delay, all packets leave at once.
    let entry0 = CaCongestionEntry {
        ccti_min: 0,
        ..entry
    };
    let mut pair = pair_with(
        3,
        iba(PortControl::Qp, entry0, cct(&[(0, 0), (0, 1), (1, 3)])),
    );
    let (a, b) = pair.connect(&QpOptions {
        qp_type: QpType::Uc,
        mtu: Mtu::M1024,
        ..Default::default()
    });
    let sent = uc_stream(&mut pair, &a, &b, 5_000, 8 * 1024);
    assert!(sent.iter().all(|&(t, _)| t == 5_000), "{sent:?}");
    assert_eq!(counters(&pair, 0, a.qpn).throttled_ns, 0);
}

#[test]
fn rc_answers_fecn_with_becn_in_the_ack_and_never_with_a_cnp() {
    let entry = CaCongestionEntry {
        ccti_timer: 0,
        ccti_increase: 1,
        trigger_threshold: 0,
        ccti_min: 0,
    };
    let mut pair = pair_with(4, iba(PortControl::Qp, entry, cct(&[(0, 0); 64])));
    pair.faults.fecn_mark = 1.0; // every packet, ACKs included
    let becn_acks = Rc::new(Cell::new(0u64));
    let seen = becn_acks.clone();
    pair.filter = Some(Box::new(move |from, _, bytes| {
        if from == 1 && bytes[0] == 0x11 && bytes[4] & 0x40 != 0 {
            seen.set(seen.get() + 1);
        }
        Verdict::Pass
    }));
    let (a, b) = pair.connect(&QpOptions {
        mtu: Mtu::M1024,
        ..Default::default()
    });
    for i in 0..4u64 {
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, i, &a, 0, &b, 0, 4096))
            .unwrap();
    }
    assert_eq!(wait_send(&mut pair, &a, 4, SEC).len(), 4);
    pair.drive(SEC);
    let req = counters(&pair, 0, a.qpn);
    let resp = counters(&pair, 1, b.qpn);
    assert_eq!(resp.fecn_received, 16, "16 FECN-marked requests");
    assert!(resp.becns_sent >= 1);
    assert_eq!(becn_acks.get(), resp.becns_sent, "the BECNs rode in ACKs");
    assert_eq!(req.becn_received, resp.becns_sent);
    assert_eq!(
        resp.cnps_sent, 0,
        "RC answers FECN in the ACK, not with a CNP"
    );
    assert_eq!(
        req.fecn_received, req.packets_received,
        "the ACKs were marked too"
    );
    assert_eq!(req.cnps_sent, 0, "ACKs never trigger CNPs");
    // Each BECN raised the requester's CCTI by CCTI_Increase = 1.
    let st = pair.device(0).cc_status(pair.now, a.qpn).unwrap();
    assert_eq!(st.ccti, Some(req.becn_received as u16));
}

#[test]
fn roce_ecn_ce_is_answered_with_cnps_even_on_rc() {
    let cc = CcConfig {
        notify: true,
        min_time_between_cnps: 0,
        ..CcConfig::default()
    };
    let mut pair = pair_with(5, cc);
    pair.faults.ecn_mark = 1.0;
    let (a, b) = pair.connect(&QpOptions::default());
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 3000))
        .unwrap();
    assert_eq!(wait_send(&mut pair, &a, 1, SEC).len(), 1);
    pair.drive(SEC);
    let req = counters(&pair, 0, a.qpn);
    let resp = counters(&pair, 1, b.qpn);
    assert_eq!(resp.ecn_ce_received, 3);
    assert_eq!(
        resp.cnps_sent, 3,
        "one CNP per marked request (no rate limit set)"
    );
    assert_eq!(resp.becns_sent, 0);
    assert_eq!(req.cnps_received, 3);
    assert_eq!(
        req.cnps_sent, 0,
        "CE-marked ACKs and CNPs never trigger CNPs"
    );
}

fn ud_pair(seed: u64, cc: CcConfig) -> (Pair, Endpoint, Endpoint, AhHandle) {
    let mut pair = pair_with(seed, cc);
    let (a, b) = pair.connect(&QpOptions {
        qp_type: QpType::Ud,
        ..Default::default()
    });
    let mut dgid = [0u8; 16];
    dgid[10] = 0xff;
    dgid[11] = 0xff;
    dgid[12..].copy_from_slice(&[10, 0, 0, 2]);
    let ah = pair
        .dev(0)
        .create_ah(
            a.pd,
            AhAttr {
                dlid: 2,
                sl: 3,
                src_path_bits: 0,
                grh: Some(GlobalRoute {
                    dgid,
                    hop_limit: 64,
                    ..Default::default()
                }),
            },
        )
        .unwrap();
    (pair, a, b, ah)
}

fn ud_send(a: &Endpoint, ah: AhHandle, qpn: u32, id: u64) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::Send,
        sg_list: vec![Sge {
            addr: a.addr,
            length: 512,
            lkey: a.keys.lkey,
        }],
        ud: Some(UdDest {
            ah,
            remote_qpn: qpn,
            remote_qkey: 0x1111_1111,
        }),
        ..Default::default()
    }
}

#[test]
fn ud_answers_fecn_with_a_cnp_to_the_source_qp() {
    let entry = CaCongestionEntry {
        ccti_timer: 0,
        ccti_increase: 4,
        trigger_threshold: 0,
        ccti_min: 0,
    };
    let (mut pair, a, b, ah) = ud_pair(6, iba(PortControl::Sl, entry, cct(&[(0, 0); 32])));
    pair.faults.fecn_mark = 1.0; // the CNPs get FECN too
    pair.trace = true;
    for i in 0..3 {
        pair.dev(1).post_recv(b.qpn, &recv(i, &b, 0, 4096)).unwrap();
        pair.dev(0)
            .post_send(0, a.qpn, &ud_send(&a, ah, b.qpn, i))
            .unwrap();
    }
    pair.drive(SEC);
    let src = counters(&pair, 0, a.qpn);
    let dst = counters(&pair, 1, b.qpn);
    assert_eq!(dst.fecn_received, 3);
    assert_eq!(dst.cnps_sent, 3);
    assert_eq!(src.cnps_received, 3);
    assert_eq!(src.becn_received, 3);
    assert_eq!(src.cnps_sent, 0, "a FECN-marked CNP never triggers a CNP");
    let cnps: Vec<_> = pair.trace_log.iter().filter(|e| e.from == 1).collect();
    assert_eq!(cnps.len(), 3);
    for e in cnps {
        assert_eq!(
            (e.opcode, e.dest_qp, e.psn, e.len),
            (0x81, a.qpn, 0, 12 + 16)
        );
    }
    // The BECNs reached the source's per-SL state of the SL they came back on (3).
    assert_eq!(pair.device(0).sl_ccti(pair.now, 3), Some(12));
}

#[test]
fn cnps_are_rate_limited_per_qp() {
    let cc = CcConfig {
        notify: true,
        min_time_between_cnps: 50,
        ..CcConfig::default()
    };
    let (mut pair, a, b, ah) = ud_pair(7, cc);
    pair.faults.fecn_mark = 1.0;
    for i in 0..4 {
        pair.dev(1).post_recv(b.qpn, &recv(i, &b, 0, 4096)).unwrap();
    }
    for i in 0..3 {
        pair.dev(0)
            .post_send(0, a.qpn, &ud_send(&a, ah, b.qpn, i))
            .unwrap();
    }
    pair.drive(SEC);
    assert_eq!(
        counters(&pair, 1, b.qpn).cnps_sent,
        1,
        "three marks within 50 us"
    );
    let later = pair.now + 50_000;
    pair.now = later;
    pair.dev(0)
        .post_send(later, a.qpn, &ud_send(&a, ah, b.qpn, 9))
        .unwrap();
    pair.drive(later + SEC);
    assert_eq!(counters(&pair, 1, b.qpn).cnps_sent, 2);
    assert_eq!(counters(&pair, 1, b.qpn).fecn_received, 4);
}

#[test]
fn dcqcn_cuts_the_rate_on_a_cnp_recovers_over_time_and_paces_to_it() {
    let dcqcn = DcqcnConfig::default();
    let cc = CcConfig {
        algorithm: CcAlgorithm::Dcqcn(dcqcn),
        ..CcConfig::default()
    };
    let mut pair = pair_with(8, cc);
    let (a, b) = pair.connect(&QpOptions {
        qp_type: QpType::Uc,
        mtu: Mtu::M1024,
        ..Default::default()
    });
    let line: u64 = LINK_MBPS * 1_000_000;
    let rate = |pair: &Pair, t| pair.device(0).cc_status(t, a.qpn).unwrap().rate_bps;
    assert_eq!(rate(&pair, 0), None, "no rate limiter before the first CNP");
    // First CNP: alpha = initial 1, Rc = line x (1 - 1/2); alpha = (1 - g) + g = 1.
    let t0 = 1_000;
    inject_cnp(&mut pair, 0, a.qpn, t0);
    assert_eq!(rate(&pair, t0), Some(line / 2));
    // Second CNP 10 us later (alpha has not decayed, K = 55 us): Rt = Rc, Rc halves again.
    let t1 = t0 + 10_000;
    inject_cnp(&mut pair, 0, a.qpn, t1);
    let (mut rc, mut rt) = (line / 4, line / 2);
    assert_eq!(rate(&pair, t1), Some(rc));
    // Recovery on the 55 us timer: stages 1..4 fast recovery, then additive (R_AI 40 Mb/s).
    let t_reset = dcqcn.rpg_time_reset as u64 * 1_000;
    for k in 1..=8u64 {
        if k >= dcqcn.rpg_threshold as u64 {
            rt += dcqcn.rpg_ai_rate as u64 * 1_000_000;
        }
        rc = (rt + rc).div_ceil(2);
        assert_eq!(rate(&pair, t1 + k * t_reset), Some(rc), "timer stage {k}");
        assert_eq!(
            rate(&pair, t1 + k * t_reset - 1),
            rate(&pair, t1 + (k - 1) * t_reset)
        );
    }
    // Packets sent right after t1 are paced at Rc = line / 4: gap = ceil(bits / Rc).
    let sent = uc_stream(&mut pair, &a, &b, t1, 8 * 1024);
    assert_eq!(sent.len(), 8);
    for w in sent.windows(2) {
        let bits = (w[0].1 as u64 + OVERHEAD) * 8;
        assert_eq!(
            w[1].0 - w[0].0,
            (bits * 1_000_000_000).div_ceil(line / 4),
            "{w:?}"
        );
    }
    let c = counters(&pair, 0, a.qpn);
    assert_eq!(c.throttled_ns, sent[7].0 - sent[0].0);
    assert_eq!(c.cnps_received, 2);
}

#[test]
fn cc_off_by_default_changes_nothing() {
    let mut pair = Pair::new(9);
    pair.faults.fecn_mark = 1.0;
    pair.faults.ecn_mark = 1.0;
    let (a, b) = pair.connect(&QpOptions::default());
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 8192))
        .unwrap();
    assert_eq!(wait_send(&mut pair, &a, 1, SEC).len(), 1);
    pair.drive(SEC);
    let resp = counters(&pair, 1, b.qpn);
    assert_eq!(resp.fecn_received, 8);
    assert_eq!((resp.cnps_sent, resp.becns_sent), (0, 0));
    assert_eq!(counters(&pair, 0, a.qpn).throttled_ns, 0);
}

#[test]
fn read_responses_are_paced_but_acks_never_wait() {
    // The responder's QP is rate limited (DCQCN, one CNP: Rc = line / 2). Its READ
    // responses leave one gap apart; the ACK queued behind them leaves with the last one.
    let cc = CcConfig {
        algorithm: CcAlgorithm::Dcqcn(DcqcnConfig::default()),
        ..CcConfig::default()
    };
    let mut pair = pair_with(10, cc);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        mtu: Mtu::M1024,
        ..Default::default()
    });
    inject_cnp(&mut pair, 1, b.qpn, 0);
    let rate = pair
        .device(1)
        .cc_status(0, b.qpn)
        .unwrap()
        .rate_bps
        .unwrap();
    assert_eq!(rate, LINK_MBPS * 1_000_000 / 2);
    pair.dev(1).post_recv(b.qpn, &recv(1, &b, 0, 4096)).unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaRead, 1, &a, 0, &b, 0, 8 * 1024))
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 2, &a, 0, &b, 0, 100))
        .unwrap();
    assert_eq!(wait_send(&mut pair, &a, 2, SEC).len(), 2);
    let from_b: Vec<_> = pair.trace_log.iter().filter(|e| e.from == 1).collect();
    let reads: Vec<_> = from_b
        .iter()
        .filter(|e| (0x0D..=0x10).contains(&e.opcode))
        .collect();
    assert_eq!(reads.len(), 8);
    for w in reads.windows(2) {
        let bits = (w[0].len as u64 + OVERHEAD) * 8;
        assert_eq!(w[1].time - w[0].time, (bits * 1_000_000_000).div_ceil(rate));
    }
    let ack = from_b.iter().find(|e| e.opcode == 0x11).unwrap();
    assert_eq!(
        ack.time, reads[7].time,
        "the ACK does not wait for the pacing gate"
    );
}

#[test]
fn fecn_on_read_traffic_returns_becn_in_the_response_and_a_cnp_for_the_responses() {
    let cc = CcConfig {
        notify: true,
        min_time_between_cnps: 0,
        ..CcConfig::default()
    };
    let mut pair = pair_with(11, cc);
    pair.faults.fecn_mark = 1.0;
    let (a, b) = pair.connect(&QpOptions {
        mtu: Mtu::M1024,
        ..Default::default()
    });
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaRead, 1, &a, 0, &b, 0, 3 * 1024))
        .unwrap();
    assert_eq!(wait_send(&mut pair, &a, 1, SEC).len(), 1);
    pair.drive(SEC);
    let req = counters(&pair, 0, a.qpn);
    let resp = counters(&pair, 1, b.qpn);
    // The READ request had FECN: its first response carries the BECN.
    assert_eq!(resp.becns_sent, 1);
    assert_eq!(req.becn_received, 1 + resp.cnps_sent);
    // Three FECN-marked read responses, nobody ACKs them: three CNPs to the responder.
    assert_eq!(req.fecn_received, 3);
    assert_eq!(req.cnps_sent, 3);
    assert_eq!(resp.cnps_received, 3);
    assert_eq!(resp.cnps_sent, 0, "FECN-marked CNPs are not answered");
}

#[test]
fn rc_stays_correct_while_paced_with_marks_loss_and_reordering() {
    use softib_transport::harness::Faults;
    use softib_transport::WcStatus;
    let steep: Vec<(u8, u16)> = (0..32u16).map(|i| (2, i * 8)).collect();
    let entry = CaCongestionEntry {
        ccti_timer: 20,
        ccti_increase: 4,
        trigger_threshold: 0,
        ccti_min: 0,
    };
    let algorithms = [
        iba(PortControl::Qp, entry, cct(&steep)),
        iba(PortControl::Sl, entry, cct(&steep)),
        CcConfig {
            algorithm: CcAlgorithm::Dcqcn(DcqcnConfig {
                rpg_min_rate: 100,
                ..DcqcnConfig::default()
            }),
            notify: true,
            min_time_between_cnps: 5,
            ..CcConfig::default()
        },
    ];
    for (seed, cc) in algorithms.into_iter().enumerate() {
        let mut pair = pair_with(20 + seed as u64, cc);
        pair.faults = Faults {
            fecn_mark: 0.5,
            ecn_mark: 0.2,
            drop: 0.02,
            reorder: 0.05,
            reorder_window: 5_000,
            ..Default::default()
        };
        let (a, b) = pair.connect(&QpOptions {
            mtu: Mtu::M1024,
            timeout: 8,
            ..Default::default()
        });
        let data = pattern(64 * 1024, seed as u8);
        pair.fill(0, &a, 0, &data);
        for i in 0..16u64 {
            let off = i * 4096;
            let op = if i % 4 == 3 {
                WrOpcode::RdmaRead
            } else {
                WrOpcode::RdmaWrite
            };
            let (src, dst) = if op == WrOpcode::RdmaRead {
                (0x20000 + off, off)
            } else {
                (off, off)
            };
            pair.dev(0)
                .post_send(0, a.qpn, &wr(op, i, &a, src, &b, dst, 4096))
                .unwrap();
        }
        let wcs = wait_send(&mut pair, &a, 16, 10 * SEC);
        assert_eq!(wcs.len(), 16, "seed {seed}");
        assert!(
            wcs.iter().all(|w| w.status == WcStatus::Success),
            "seed {seed}"
        );
        for i in (0..16usize).filter(|i| i % 4 != 3) {
            let off = i * 4096;
            assert_eq!(
                pair.read(1, &b, off, 4096),
                data[off..off + 4096],
                "seed {seed}"
            );
        }
        let req = counters(&pair, 0, a.qpn);
        let resp = counters(&pair, 1, b.qpn);
        assert!(
            resp.becns_sent + resp.cnps_sent > 0,
            "seed {seed}: notified"
        );
        assert!(req.throttled_ns > 0, "seed {seed}: the requester was paced");
    }
}

#[test]
fn reset_clears_the_qp_congestion_state() {
    use softib_transport::{QpAttr, QpAttrMask, QpState};
    let cc = CcConfig {
        algorithm: CcAlgorithm::Dcqcn(DcqcnConfig::default()),
        ..CcConfig::default()
    };
    let mut pair = pair_with(12, cc);
    let (a, _b) = pair.connect(&QpOptions::default());
    inject_cnp(&mut pair, 0, a.qpn, 0);
    assert!(pair
        .device(0)
        .cc_status(0, a.qpn)
        .unwrap()
        .rate_bps
        .is_some());
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    pair.dev(0)
        .modify_qp(0, a.qpn, &reset, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(
        pair.device(0).cc_status(0, a.qpn).unwrap(),
        softib_transport::cc::CcStatus::default()
    );
}
