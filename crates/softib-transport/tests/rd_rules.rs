//! Reliable Datagram, rule by rule (IBA vol. 1 §9.7, §10.2.7): QPs sharing EE contexts,
//! every operation, domain and Q_Key checks, unknown EE contexts, one message in
//! progress per EEC, RNR, and RESYNC.

mod rd_common;

use rd_common::*;
use softib_transport::{SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};

fn send(f: &RdFabric, k: usize, to_q: usize, wr_id: u64, offset: usize, len: usize) -> SendWr {
    SendWr {
        wr_id,
        opcode: WrOpcode::Send,
        sg_list: vec![f.sge(0, offset, len)],
        flags: SendFlags::SIGNALED,
        rd: Some(f.dest(0, k, to_q)),
        ..SendWr::default()
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

#[test]
fn qps_sharing_one_eec_send_to_each_other_with_the_right_qp_numbers() {
    let mut f = RdFabric::new(
        1,
        RdOptions {
            qps: 3,
            ..RdOptions::default()
        },
    );
    // Every QP of side 0 sends one 3000-byte message (3 packets at MTU 1024) to every QP of
    // side 1, all over EEC 0.
    let mut expected = Vec::new();
    for from in 0..3 {
        for to in 0..3 {
            let id = (from * 3 + to) as u64;
            let data = pattern(id as u8, 3000);
            f.fill(0, id as usize * 4096, &data);
            f.post_recv(1, to, id, id as usize * 4096, 4096);
            let wr = send(&f, 0, to, id, id as usize * 4096, 3000);
            f.post(0, from, wr);
            expected.push((id, from, to, data));
        }
    }
    assert!(f.drive(), "the link goes idle");
    let sends = f.send_completions(0);
    assert_eq!(sends.len(), 9);
    for wc in &sends {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        let (_, from, _, _) = &expected[wc.wr_id as usize];
        assert_eq!(
            wc.qp_num, f.sides[0].qps[*from],
            "completes at the posting RD QP"
        );
        assert_eq!(wc.opcode, WcOpcode::Send);
    }
    // One EEC: the sends complete in the order they were posted to it.
    let order: Vec<u64> = sends.iter().map(|w| w.wr_id).collect();
    let mut want: Vec<u64> = Vec::new();
    for from in 0..3u64 {
        for to in 0..3u64 {
            want.push(from * 3 + to);
        }
    }
    assert_eq!(order, want, "one EEC: completions in the order posted");
    let recvs = f.recv_completions(1);
    assert_eq!(recvs.len(), 9);
    for wc in &recvs {
        let (id, from, to, data) = &expected[wc.wr_id as usize];
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.byte_len, 3000);
        assert_eq!(
            wc.qp_num, f.sides[1].qps[*to],
            "delivered to the QP the BTH names"
        );
        assert_eq!(wc.src_qp, f.sides[0].qps[*from], "source QP from the DETH");
        assert_eq!(&f.read(1, *id as usize * 4096, 3000), data, "message {id}");
    }
}

#[test]
fn write_read_and_atomics_run_over_an_eec() {
    let mut f = RdFabric::new(2, RdOptions::default());
    let data = pattern(7, 5000);
    f.fill(0, 0, &data);
    let va = f.va(1, 0x8000);
    let rkey1 = f.sides[1].keys.rkey;
    let d = f.dest(0, 0, 1);
    f.post(
        0,
        0,
        SendWr {
            wr_id: 1,
            opcode: WrOpcode::RdmaWrite,
            sg_list: vec![f.sge(0, 0, 5000)],
            flags: SendFlags::SIGNALED,
            remote_addr: va,
            rkey: rkey1,
            rd: Some(d),
            ..SendWr::default()
        },
    );
    // Read it back into another place, then add to a counter twice and swap it.
    f.post(
        0,
        1,
        SendWr {
            wr_id: 2,
            opcode: WrOpcode::RdmaRead,
            sg_list: vec![f.sge(0, 0x4000, 5000)],
            flags: SendFlags::SIGNALED,
            remote_addr: va,
            rkey: rkey1,
            rd: Some(d),
            ..SendWr::default()
        },
    );
    f.fill(1, 0x20000, &100u64.to_le_bytes());
    let counter = f.va(1, 0x20000);
    for (id, op, add, swap) in [
        (3, WrOpcode::AtomicFetchAndAdd, 5u64, 0u64),
        (4, WrOpcode::AtomicFetchAndAdd, 7, 0),
        (5, WrOpcode::AtomicCmpAndSwp, 112, 999),
    ] {
        f.post(
            0,
            0,
            SendWr {
                wr_id: id,
                opcode: op,
                sg_list: vec![f.sge(0, 0x10000 + id as usize * 8, 8)],
                flags: SendFlags::SIGNALED,
                remote_addr: counter,
                rkey: rkey1,
                compare_add: add,
                swap,
                rd: Some(d),
                ..SendWr::default()
            },
        );
    }
    assert!(f.drive());
    let wcs = f.send_completions(0);
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(
        f.read(1, 0x8000, 5000),
        data,
        "RDMA WRITE placed every byte"
    );
    assert_eq!(
        f.read(0, 0x4000, 5000),
        data,
        "RDMA READ brought every byte back"
    );
    let old = |f: &RdFabric, id: usize| {
        u64::from_le_bytes(f.read(0, 0x10000 + id * 8, 8).try_into().unwrap())
    };
    assert_eq!((old(&f, 3), old(&f, 4), old(&f, 5)), (100, 105, 112));
    assert_eq!(
        f.read(1, 0x20000, 8),
        999u64.to_le_bytes(),
        "CMP_AND_SWP swapped"
    );
}

#[test]
fn a_qp_of_another_domain_is_refused_with_invalid_rd_request_then_the_eec_resyncs() {
    let mut f = RdFabric::new(3, RdOptions::default());
    // Move side 1's QP 1 into another domain: destroy it and create it in RDD 2.
    let dev = f.pair.dev(1);
    let other = dev.alloc_rdd();
    dev.destroy_qp(f.sides[1].qps[1]).unwrap();
    let init = softib_transport::QpInitAttr {
        qp_type: softib_transport::QpType::Rd,
        send_cq: f.sides[1].send_cq,
        recv_cq: f.sides[1].recv_cq,
        srq: None,
        cap: softib_transport::QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    let q = dev.create_rd_qp(f.sides[1].pd, other, init).unwrap();
    let attr = softib_transport::QpAttr {
        qkey: f.o.qkey,
        port_num: 1,
        ..softib_transport::QpAttr::default()
    };
    dev.bring_up_qp(
        0,
        q,
        softib_transport::QpType::Rd,
        &attr,
        softib_transport::QpState::Rts,
    )
    .unwrap();
    f.sides[1].qps[1] = q;
    f.post_recv(1, 1, 10, 0, 4096);
    f.post_recv(1, 0, 11, 4096, 4096);
    f.fill(0, 0, &pattern(1, 2000));
    let wr = send(&f, 0, 1, 1, 0, 2000);
    f.post(0, 0, wr);
    let wr = send(&f, 0, 0, 2, 0, 2000);
    f.post(0, 0, wr);
    assert!(f.drive());
    let wcs = f.send_completions(0);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::RemInvRdReqErr));
    assert_eq!(wcs[0].status.as_str(), "remote invalid RD request");
    assert_eq!(
        (wcs[1].wr_id, wcs[1].status),
        (2, WcStatus::Success),
        "the EEC carries on"
    );
    let eec1 = f.sides[1].eecs[0];
    let c1 = *f.pair.device(1).qp_counters(eec1).unwrap();
    assert_eq!(c1.rd_bad_rdd, 1);
    assert_eq!(c1.resyncs_applied, 1);
    let c0 = *f.pair.device(0).qp_counters(f.sides[0].eecs[0]).unwrap();
    assert_eq!(c0.resyncs_sent, 1);
    let recvs = f.recv_completions(1);
    assert_eq!(
        recvs.len(),
        1,
        "only the QP of the EEC's domain received: {recvs:?}"
    );
    assert_eq!(recvs[0].wr_id, 11);
    assert_eq!(f.read(1, 4096, 2000), pattern(1, 2000));
    assert_eq!(
        f.read(1, 0, 2000),
        vec![0; 2000],
        "nothing reached the other domain's QP"
    );
}

#[test]
fn local_checks_fail_the_wr_with_libibverbs_statuses() {
    let mut f = RdFabric::new(
        4,
        RdOptions {
            eecs: 2,
            ..RdOptions::default()
        },
    );
    // An EEC of another domain on side 0.
    let dev = f.pair.dev(0);
    let other = dev.alloc_rdd();
    let foreign = dev.create_eec(other, 4).unwrap();
    // EEC 1 back to RESET: not able to send.
    let eec1 = f.sides[0].eecs[1];
    let reset = softib_transport::QpAttr {
        qp_state: softib_transport::QpState::Reset,
        ..softib_transport::QpAttr::default()
    };
    dev.modify_eec(0, eec1, &reset, softib_transport::QpAttrMask::STATE)
        .unwrap();
    let mut wr = send(&f, 0, 0, 1, 0, 8);
    wr.rd.as_mut().unwrap().eec = foreign;
    f.post(0, 0, wr);
    let mut wr = send(&f, 0, 0, 2, 0, 8);
    wr.rd.as_mut().unwrap().eec = 0x00ab_cdef;
    f.post(0, 0, wr);
    let wr = send(&f, 1, 0, 3, 0, 8);
    f.post(0, 0, wr);
    // A WR without a destination is refused at post time.
    let mut wr = send(&f, 0, 0, 4, 0, 8);
    wr.rd = None;
    let qpn = f.sides[0].qps[0];
    assert!(f.pair.dev(0).post_send(0, qpn, &wr).is_err());
    // ATOMIC WRITE is not an RD operation (IBA table 38).
    let mut wr = send(&f, 0, 0, 5, 0, 8);
    wr.opcode = WrOpcode::AtomicWrite;
    assert!(f.pair.dev(0).post_send(0, qpn, &wr).is_err());
    let wcs = f.send_completions(0);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::LocRddViolErr),
            (2, WcStatus::InvEecnErr),
            (3, WcStatus::InvEecStateErr)
        ]
    );
    assert_eq!(wcs[0].status.as_str(), "local RDD violation error");
    assert_eq!(wcs[1].status.as_str(), "invalid EE context number");
    assert_eq!(wcs[2].status.as_str(), "invalid EE context state");
    // Nothing went on the wire.
    assert!(f.drive());
    assert_eq!(f.pair.stats.sent, [0, 0]);
}

#[test]
fn a_wrong_q_key_is_refused_and_the_high_bit_means_the_qps_own() {
    let mut f = RdFabric::new(5, RdOptions::default());
    f.post_recv(1, 0, 1, 0, 64);
    f.post_recv(1, 0, 2, 64, 64);
    f.fill(0, 0, b"hello, reliable datagram");
    let mut wr = send(&f, 0, 0, 1, 0, 24);
    wr.rd.as_mut().unwrap().remote_qkey = 0x0bad_0bad;
    f.post(0, 0, wr);
    // High bit: the sending QP's own Q_Key (the same on both sides here).
    let mut wr = send(&f, 0, 0, 2, 0, 24);
    wr.rd.as_mut().unwrap().remote_qkey = 0x8000_0000;
    f.post(0, 0, wr);
    assert!(f.drive());
    let wcs = f.send_completions(0);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::RemInvRdReqErr), (2, WcStatus::Success)]);
    let c = *f.pair.device(1).qp_counters(f.sides[1].eecs[0]).unwrap();
    assert_eq!(c.rd_bad_qkey, 1);
    let recvs = f.recv_completions(1);
    assert_eq!(recvs.len(), 1);
    assert_eq!(
        recvs[0].wr_id, 1,
        "the refused message consumed no receive WQE"
    );
    assert_eq!(&f.read(1, 0, 24), b"hello, reliable datagram");
}

#[test]
fn packets_for_an_unknown_eec_are_dropped_and_the_requester_times_out() {
    let mut f = RdFabric::new(
        6,
        RdOptions {
            retry_cnt: 1,
            timeout: 8,
            ..RdOptions::default()
        },
    );
    // Point side 0's EEC at an EEC number side 1 does not have.
    let mut attr = f.eec_attr(0, 0, 0x100, 0x200);
    attr.dest_qp_num = 0x00ab_cdef;
    let eec = f.sides[0].eecs[0];
    let dev = f.pair.dev(0);
    let reset = softib_transport::QpAttr {
        qp_state: softib_transport::QpState::Reset,
        ..softib_transport::QpAttr::default()
    };
    dev.modify_eec(0, eec, &reset, softib_transport::QpAttrMask::STATE)
        .unwrap();
    dev.bring_up_qp(
        0,
        eec,
        softib_transport::QpType::Rc,
        &attr,
        softib_transport::QpState::Rts,
    )
    .unwrap();
    f.post_recv(1, 0, 1, 0, 64);
    let wr = send(&f, 0, 0, 1, 0, 16);
    f.post(0, 0, wr);
    assert!(f.drive());
    let wcs = f.send_completions(0);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    assert_eq!(
        f.pair.device(0).qp_state(eec),
        Some(softib_transport::QpState::Err)
    );
    assert_eq!(
        f.pair.device(1).counters().unknown_eec_drops,
        2,
        "retry_cnt 1: two tries"
    );
    assert!(f.recv_completions(1).is_empty());
}

#[test]
fn an_eec_has_one_message_in_progress() {
    // Four 4 KiB SENDs (4 packets each at MTU 1024) from two QPs over one EEC: no packet
    // of a message leaves before the previous message was acknowledged in full.
    let mut f = RdFabric::new(7, RdOptions::default());
    f.pair.trace = true;
    for id in 0..4u64 {
        f.post_recv(1, (id % 2) as usize, id, id as usize * 4096, 4096);
    }
    for id in 0..4u64 {
        let wr = send(&f, 0, (id % 2) as usize, id, 0, 4096);
        f.post(0, (id % 2) as usize, wr);
    }
    assert!(f.drive());
    assert_eq!(f.send_completions(0).len(), 4);
    let log = f.pair.trace_log.clone();
    let starts: Vec<_> = log
        .iter()
        .filter(|e| e.from == 0 && matches!(e.opcode, 0x40 | 0x44))
        .collect();
    assert_eq!(starts.len(), 4, "one first packet per message");
    for s in &starts[1..] {
        let acked_before = log.iter().any(|e| {
            e.from == 1
                && e.opcode == 0x51
                && e.time <= s.time
                && softib_transport::psn::diff(e.psn, s.psn) == -1
        });
        assert!(
            acked_before,
            "message at PSN {:#x} started before the last was ACKed",
            s.psn
        );
    }
    // The same traffic over two EECs overlaps: a message starts while another is open.
    let mut g = RdFabric::new(
        7,
        RdOptions {
            eecs: 2,
            ..RdOptions::default()
        },
    );
    g.pair.trace = true;
    for id in 0..4u64 {
        g.post_recv(1, (id % 2) as usize, id, id as usize * 4096, 4096);
        let wr = send(&g, (id % 2) as usize, (id % 2) as usize, id, 0, 4096);
        g.post(0, (id % 2) as usize, wr);
    }
    assert!(g.drive());
    let log = &g.pair.trace_log;
    let first_two: Vec<_> = log
        .iter()
        .filter(|e| e.from == 0 && matches!(e.opcode, 0x40 | 0x44))
        .take(2)
        .collect();
    let first_ack = log.iter().find(|e| e.from == 1).map(|e| e.time).unwrap();
    assert!(
        first_two[1].time < first_ack,
        "two EECs carry two messages at once"
    );
}

#[test]
fn rnr_on_rd_waits_for_a_receive_wqe_then_delivers() {
    let mut f = RdFabric::new(8, RdOptions::default());
    f.fill(0, 0, &pattern(3, 100));
    let wr = send(&f, 0, 0, 1, 0, 100);
    f.post(0, 0, wr);
    // No receive WQE yet: RNR NAKs; drive a little, then post one.
    let until = f.pair.now + 2_000_000;
    f.pair.drive(until);
    let eec0 = f.sides[0].eecs[0];
    assert!(
        f.pair
            .device(0)
            .qp_counters(eec0)
            .unwrap()
            .rnr_naks_received
            >= 1
    );
    assert!(f.send_completions(0).is_empty());
    f.post_recv(1, 0, 9, 0, 128);
    assert!(f.drive());
    let wcs = f.send_completions(0);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(f.read(1, 0, 100), pattern(3, 100));

    // rnr_retry 0: the first RNR NAK fails the WR and the EEC (RC's rule).
    let mut g = RdFabric::new(
        9,
        RdOptions {
            rnr_retry: 0,
            ..RdOptions::default()
        },
    );
    let wr = send(&g, 0, 0, 1, 0, 100);
    g.post(0, 0, wr);
    assert!(g.drive());
    let wcs = g.send_completions(0);
    assert_eq!(wcs[0].status, WcStatus::RnrRetryExcErr);
    let eec = g.sides[0].eecs[0];
    assert_eq!(
        g.pair.device(0).qp_state(eec),
        Some(softib_transport::QpState::Err)
    );
}

#[test]
fn resync_realigns_an_eec_reset_with_a_new_send_psn() {
    let mut f = RdFabric::new(
        10,
        RdOptions {
            retry_cnt: 2,
            timeout: 8,
            ..RdOptions::default()
        },
    );
    f.post_recv(1, 0, 1, 0, 64);
    f.post_recv(1, 0, 2, 64, 64);
    f.post_recv(1, 0, 3, 128, 64);
    f.fill(0, 0, b"first");
    let wr = send(&f, 0, 0, 1, 0, 5);
    f.post(0, 0, wr);
    assert!(f.drive());
    assert_eq!(f.send_completions(0)[0].status, WcStatus::Success);
    // Side 0 resets its EEC and comes back with a send PSN far from what side 1 expects.
    let reset = softib_transport::QpAttr {
        qp_state: softib_transport::QpState::Reset,
        ..softib_transport::QpAttr::default()
    };
    let eec = f.sides[0].eecs[0];
    f.pair
        .dev(0)
        .modify_eec(0, eec, &reset, softib_transport::QpAttrMask::STATE)
        .unwrap();
    f.bring_up_eec(0, 0, 0x40_0000);
    // Without RESYNC the responder never accepts the new PSNs: retries run out.
    let wr = send(&f, 0, 0, 2, 0, 5);
    f.post(0, 0, wr);
    assert!(f.drive());
    assert_eq!(f.send_completions(0)[0].status, WcStatus::RetryExcErr);
    // Again, now with a RESYNC first.
    f.pair
        .dev(0)
        .modify_eec(0, eec, &reset, softib_transport::QpAttrMask::STATE)
        .unwrap();
    f.bring_up_eec(0, 0, 0x50_0000);
    f.pair.dev(0).resync_eec(eec).unwrap();
    f.fill(0, 0, b"third");
    let wr = send(&f, 0, 0, 3, 0, 5);
    f.post(0, 0, wr);
    assert!(f.drive());
    let wcs = f.send_completions(0);
    assert_eq!(wcs.len(), 1, "the RESYNC itself completes nowhere: {wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].status), (3, WcStatus::Success));
    let c = *f.pair.device(1).qp_counters(f.sides[1].eecs[0]).unwrap();
    assert_eq!(c.resyncs_applied, 1);
    let recvs = f.recv_completions(1);
    assert_eq!(recvs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(&f.read(1, 64, 5), b"third");
}
