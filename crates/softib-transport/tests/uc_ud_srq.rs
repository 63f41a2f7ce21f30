//! UC (no ACKs, gap drops the message), UD (Q_Key, GRH area, src_qp), SRQ (limit event,
//! unlimited credits).

mod common;
use common::*;
use softib_transport::harness::{Pair, QpOptions, Verdict};
use softib_transport::{
    AhAttr, AsyncEvent, GlobalRoute, Mtu, QpState, QpType, SendWr, Sge, UdDest, WcFlags, WcOpcode,
    WcStatus, WrOpcode,
};

#[test]
fn uc_write_and_send_need_no_acks() {
    let mut pair = Pair::new(40);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        qp_type: QpType::Uc,
        mtu: Mtu::M1024,
        ..Default::default()
    });
    let data = pattern(5000, 4);
    pair.fill(0, &a, 0, &data);
    pair.dev(1)
        .post_recv(b.qpn, &recv(1, &b, 0x10000, 8192))
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 5000))
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::SendWithImm, 2, &a, 0, &b, 0, 5000))
        .unwrap();
    pair.drive(SEC);
    let wcs = pair.completions(0, &a);
    assert_eq!(wcs.len(), 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(pair.read(1, &b, 0, 5000), data);
    assert_eq!(pair.read(1, &b, 0x10000, 5000), data);
    let r = recv_wcs(&mut pair, &b);
    assert_eq!((r[0].byte_len, r[0].imm_data), (5000, Some(0xabcd)));
    assert_eq!(
        pair.trace_log.iter().filter(|e| e.from == 1).count(),
        0,
        "UC sends no ACKs"
    );
}

#[test]
fn uc_gap_drops_the_rest_of_the_message_and_resumes_at_the_next_first() {
    let mut pair = Pair::new(41);
    let (a, b) = pair.connect(&QpOptions {
        qp_type: QpType::Uc,
        mtu: Mtu::M1024,
        ..Default::default()
    });
    let data = pattern(3000, 5);
    pair.fill(0, &a, 0, &data);
    pair.dev(1).post_recv(b.qpn, &recv(1, &b, 0, 4096)).unwrap();
    let mut n = 0;
    pair.filter = Some(Box::new(move |from, _, _| {
        n += 1;
        if from == 0 && n == 2 {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 1, &a, 0, &b, 0, 3000))
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 2, &a, 0, &b, 0, 2500))
        .unwrap();
    pair.drive(SEC);
    let r = recv_wcs(&mut pair, &b);
    assert_eq!(
        r.len(),
        1,
        "the first message is lost, its WQE reused by the second"
    );
    assert_eq!((r[0].wr_id, r[0].byte_len), (1, 2500));
    assert_eq!(pair.read(1, &b, 0, 2500), data[..2500]);
    assert!(
        pair.device(1)
            .qp_counters(b.qpn)
            .unwrap()
            .out_of_sequence_drops
            >= 1
    );
}

fn ud_pair(
    seed: u64,
) -> (
    Pair,
    softib_transport::harness::Endpoint,
    softib_transport::harness::Endpoint,
    softib_transport::AhHandle,
) {
    let mut pair = Pair::new(seed);
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

fn ud_send(
    a: &softib_transport::harness::Endpoint,
    ah: softib_transport::AhHandle,
    qpn: u32,
    qkey: u32,
    len: u32,
) -> SendWr {
    SendWr {
        wr_id: 3,
        opcode: WrOpcode::SendWithImm,
        imm_data: Some(0x77),
        sg_list: vec![Sge {
            addr: a.addr,
            length: len,
            lkey: a.keys.lkey,
        }],
        flags: softib_transport::SendFlags::SIGNALED,
        ud: Some(UdDest {
            ah,
            remote_qpn: qpn,
            remote_qkey: qkey,
        }),
        ..Default::default()
    }
}

#[test]
fn ud_send_delivers_grh_area_payload_and_source_qp() {
    let (mut pair, a, b, ah) = ud_pair(42);
    let data = pattern(1000, 6);
    pair.fill(0, &a, 0, &data);
    pair.dev(1).post_recv(b.qpn, &recv(8, &b, 0, 2048)).unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &ud_send(&a, ah, b.qpn, 0x1111_1111, 1000))
        .unwrap();
    pair.drive(SEC);
    assert_eq!(pair.completions(0, &a)[0].status, WcStatus::Success);
    let r = recv_wcs(&mut pair, &b);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].byte_len, 1040, "40-byte GRH area + payload");
    assert_eq!(r[0].src_qp, a.qpn);
    assert_eq!(r[0].imm_data, Some(0x77));
    assert_eq!(r[0].sl, 3);
    assert!(r[0].wc_flags.contains(WcFlags::GRH));
    assert_eq!(r[0].opcode, WcOpcode::Recv);
    // RoCEv2 over IPv4 (the harness uses IPv4-mapped GIDs): 20 zero bytes, then the IPv4
    // header, as Linux's rdma_network_hdr.
    let grh = pair.read(1, &b, 0, 40);
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(grh[20], 0x45, "IPv4, IHL 5");
    assert_eq!(grh[29], 17, "UDP");
    assert_eq!(&grh[32..36], &[10, 0, 0, 1], "source address");
    assert_eq!(&grh[36..40], &[10, 0, 0, 2], "destination address");
    assert_eq!(pair.read(1, &b, 40, 1000), data);
}

#[test]
fn ud_wrong_qkey_is_dropped_and_high_bit_uses_the_qp_qkey() {
    let (mut pair, a, b, ah) = ud_pair(43);
    pair.dev(1).post_recv(b.qpn, &recv(8, &b, 0, 2048)).unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &ud_send(&a, ah, b.qpn, 0x2222, 10))
        .unwrap();
    pair.drive(SEC);
    assert_eq!(recv_wcs(&mut pair, &b).len(), 0);
    assert_eq!(pair.device(1).counters().bad_qkey_drops, 1);
    // High bit set: the sender's QP Q_Key (0x11111111, same as the receiver's) goes out.
    pair.dev(0)
        .post_send(0, a.qpn, &ud_send(&a, ah, b.qpn, 0x8000_0000, 10))
        .unwrap();
    pair.drive(SEC);
    assert_eq!(recv_wcs(&mut pair, &b).len(), 1);
}

#[test]
fn ud_message_larger_than_the_mtu_is_refused() {
    let (mut pair, a, b, ah) = ud_pair(44);
    let e = pair
        .dev(0)
        .post_send(0, a.qpn, &ud_send(&a, ah, b.qpn, 0x1111_1111, 5000))
        .unwrap_err();
    assert!(e.to_string().contains("MTU"), "{e}");
}

#[test]
fn an_rdma_write_on_ud_is_accepted_then_fails_with_loc_qp_op_err_as_on_rxe() {
    let (mut pair, a, b, ah) = ud_pair(44);
    let mut w = ud_send(&a, ah, b.qpn, 0x1111_1111, 8);
    w.opcode = WrOpcode::RdmaWrite;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    pair.drive(SEC);
    let wcs = pair.completions(0, &a);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(wcs[0].status, WcStatus::LocQpOpErr, "{wcs:?}");
    assert_eq!(
        pair.device(0).query_qp(a.qpn).unwrap().qp_state,
        QpState::Err
    );
    assert!(recv_wcs(&mut pair, &b).is_empty());
}

#[test]
fn srq_feeds_receives_advertises_unlimited_credits_and_fires_the_limit() {
    let mut pair = Pair::new(45);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        srq: true,
        rq_depth: 16,
        ..Default::default()
    });
    let srq = b.srq.unwrap();
    for i in 0..8 {
        pair.dev(1)
            .post_srq_recv(srq, &recv(i, &b, i * 4096, 4096))
            .unwrap();
    }
    pair.dev(1).modify_srq(srq, 6).unwrap();
    for i in 0..3 {
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::Send, i, &a, 0, &b, 0, 100))
            .unwrap();
    }
    let wcs = wait_send(&mut pair, &a, 3, SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        recv_wcs(&mut pair, &b)
            .iter()
            .map(|w| w.wr_id)
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let mut events = Vec::new();
    while let Some(e) = pair.dev(1).poll_event() {
        events.push(e);
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| **e == AsyncEvent::SrqLimitReached(srq))
            .count(),
        1,
        "{events:?}"
    );
    assert!(
        pair.trace_log
            .iter()
            .filter(|e| e.from == 1)
            .all(|e| e.syndrome == Some(31)),
        "credit code 31 with SRQ"
    );
}

#[test]
fn rc_ack_carries_the_receive_credit_count() {
    let mut pair = Pair::new(46);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions::default());
    for i in 0..7 {
        pair.dev(1)
            .post_recv(b.qpn, &recv(i, &b, i * 4096, 4096))
            .unwrap();
    }
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 1, &a, 0, &b, 0, 100))
        .unwrap();
    wait_send(&mut pair, &a, 1, SEC);
    // 6 WQEs left: the largest code whose count <= 6 is 5 (6 WQEs).
    let ack = pair.trace_log.iter().find(|e| e.from == 1).unwrap();
    assert_eq!(ack.syndrome, Some(5));
}

#[test]
fn uc_under_loss_delivers_whole_messages_or_nothing() {
    use softib_transport::harness::Faults;
    for seed in 0..20u64 {
        let mut pair = Pair::new(70 + seed);
        pair.faults = Faults {
            drop: 0.05,
            duplicate: 0.03,
            ..Default::default()
        };
        let (a, b) = pair.connect(&QpOptions {
            qp_type: QpType::Uc,
            mtu: Mtu::M256,
            ..Default::default()
        });
        for i in 0..30u64 {
            pair.dev(1)
                .post_recv(b.qpn, &recv(i, &b, i * 2048, 2048))
                .unwrap();
        }
        for i in 0..30u64 {
            let len = 200 + (i as u32 * 61) % 1800;
            let data = pattern(len as usize, i as u8);
            pair.fill(0, &a, 0x40000 + i as usize * 2048, &data);
            pair.dev(0)
                .post_send(
                    0,
                    a.qpn,
                    &wr(WrOpcode::Send, i, &a, 0x40000 + i * 2048, &b, 0, len),
                )
                .unwrap();
        }
        pair.drive(SEC);
        let sent = pair.completions(0, &a);
        assert_eq!(sent.len(), 30, "UC send WRs complete when sent");
        // Each delivered message is complete and byte-exact, in its own receive buffer order.
        let r = recv_wcs(&mut pair, &b);
        assert!(r.len() < 30 || pair.stats.dropped == 0);
        for (k, wc) in r.iter().enumerate() {
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.wr_id, k as u64, "receive WQEs are consumed in order");
            let i = (0..30u64)
                .find(|i| 200 + (*i as u32 * 61) % 1800 == wc.byte_len)
                .unwrap();
            let got = pair.read(1, &b, k * 2048, wc.byte_len as usize);
            assert_eq!(got, pattern(wc.byte_len as usize, i as u8), "seed {seed}");
        }
    }
}

#[test]
fn ud_local_protection_error_enters_sqe_and_flushes_then_recovers() {
    let (mut pair, a, b, ah) = ud_pair(47);
    pair.dev(1).post_recv(b.qpn, &recv(8, &b, 0, 2048)).unwrap();
    let mut bad = ud_send(&a, ah, b.qpn, 0x1111_1111, 10);
    bad.sg_list[0].lkey ^= 0xFF;
    pair.dev(0).post_send(0, a.qpn, &bad).unwrap();
    pair.drive(SEC);
    assert_eq!(
        pair.device(0).qp_state(a.qpn),
        Some(softib_transport::QpState::Sqe)
    );
    assert_eq!(pair.completions(0, &a)[0].status, WcStatus::LocProtErr);
    pair.dev(0)
        .post_send(0, a.qpn, &ud_send(&a, ah, b.qpn, 0x1111_1111, 10))
        .unwrap();
    assert_eq!(pair.completions(0, &a)[0].status, WcStatus::WrFlushErr);
    let rts = softib_transport::QpAttr {
        qp_state: softib_transport::QpState::Rts,
        ..Default::default()
    };
    pair.dev(0)
        .modify_qp(0, a.qpn, &rts, softib_transport::QpAttrMask::STATE)
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &ud_send(&a, ah, b.qpn, 0x1111_1111, 10))
        .unwrap();
    pair.drive(SEC);
    assert_eq!(pair.completions(0, &a)[0].status, WcStatus::Success);
    assert_eq!(recv_wcs(&mut pair, &b).len(), 1);
}

#[test]
fn requester_honours_end_to_end_credits() {
    let mut pair = Pair::new(48);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        min_rnr_timer: 5,
        ..Default::default()
    });
    for i in 0..3 {
        pair.dev(1)
            .post_recv(b.qpn, &recv(i, &b, i * 4096, 4096))
            .unwrap();
    }
    // The first message teaches the requester the credits: MSN 1 + 2 WQEs left = LSN 3.
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 0, &a, 0, &b, 0, 64))
        .unwrap();
    assert_eq!(
        wait_send(&mut pair, &a, 1, SEC)[0].status,
        WcStatus::Success
    );
    pair.trace_log.clear();
    for i in 1..6 {
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::Send, i, &a, 0, &b, 0, 64))
            .unwrap();
    }
    pair.drive_until(SEC, |p| {
        p.device(0).qp_counters(a.qpn).unwrap().rnr_naks_received >= 1
    });
    // Two messages within the credits plus the one allowed beyond them (IBA 9.7.7.2);
    // the last two wait instead of being sent into an empty receive queue.
    let mut psns: Vec<u32> = pair
        .trace_log
        .iter()
        .filter(|e| e.from == 0)
        .map(|e| e.psn)
        .collect();
    psns.dedup();
    assert_eq!(psns, vec![0x101, 0x102, 0x103]);
    for i in 3..6 {
        pair.dev(1)
            .post_recv(b.qpn, &recv(i, &b, i * 4096, 4096))
            .unwrap();
    }
    let wcs = wait_send(&mut pair, &a, 5, 10 * SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(recv_wcs(&mut pair, &b).len(), 6);
}
