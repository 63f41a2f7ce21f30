//! Protection checks before any byte moves: each violation gives the right NAK / completion
//! status and leaves the target memory untouched.

mod common;
use common::*;
use softib_transport::harness::{Pair, QpOptions};
use softib_transport::{AccessFlags, QpState, RxGrh, RxMeta, WcStatus, WrOpcode};
use softib_wire::{BthRepr, Opcode, PacketRepr, RethRepr};

fn check_rejected(
    op: WrOpcode,
    tweak: impl Fn(&mut softib_transport::SendWr),
    opts: QpOptions,
    want: WcStatus,
) {
    let mut pair = Pair::new(50);
    let (a, b) = pair.connect(&opts);
    pair.fill(0, &a, 0, &pattern(4096, 1));
    let before = pair.read(1, &b, 0, b.len);
    let mut w = wr(op, 1, &a, 0, &b, 64, if op.is_atomic() { 8 } else { 4096 });
    tweak(&mut w);
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, want, "{op:?}");
    assert_eq!(
        pair.read(1, &b, 0, b.len),
        before,
        "{op:?}: zero bytes written"
    );
    assert_eq!(pair.device(0).qp_state(a.qpn), Some(QpState::Err));
    assert_eq!(
        pair.device(1).qp_state(b.qpn),
        Some(QpState::Err),
        "class C error at the responder"
    );
}

#[test]
fn bad_rkey_gives_remote_access_error() {
    check_rejected(
        WrOpcode::RdmaWrite,
        |w| w.rkey ^= 0x01,
        QpOptions::default(),
        WcStatus::RemAccessErr,
    );
    check_rejected(
        WrOpcode::RdmaRead,
        |w| w.rkey ^= 0x100,
        QpOptions::default(),
        WcStatus::RemAccessErr,
    );
}

#[test]
fn out_of_bounds_gives_remote_access_error() {
    check_rejected(
        WrOpcode::RdmaWrite,
        |w| w.remote_addr += (1 << 20) - 100,
        QpOptions::default(),
        WcStatus::RemAccessErr,
    );
    check_rejected(
        WrOpcode::AtomicFetchAndAdd,
        |w| w.remote_addr -= 0x1000,
        QpOptions::default(),
        WcStatus::RemAccessErr,
    );
}

#[test]
fn missing_access_flag_gives_remote_access_error() {
    // The QP allows writes, the region does not.
    let mut pair = Pair::new(51);
    let (a, b) = pair.connect(&QpOptions::default());
    let ro = pair
        .dev(1)
        .reg_mr(
            b.pd,
            Box::new(softib_transport::VecMemory::zeroed(4096)),
            0x9000_0000,
            AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let mut w = wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 100);
    w.remote_addr = 0x9000_0000;
    w.rkey = ro.rkey;
    pair.fill(0, &a, 0, &[0xAA; 100]);
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    let mut got = [0u8; 100];
    pair.device(1).memory(ro.lkey).unwrap().read(0, &mut got);
    assert_eq!(got, [0u8; 100]);
    assert_eq!(
        pair.device(1)
            .qp_counters(b.qpn)
            .unwrap()
            .remote_access_errors,
        1
    );
}

#[test]
fn misaligned_atomic_gives_invalid_request() {
    check_rejected(
        WrOpcode::AtomicCmpAndSwp,
        |w| w.remote_addr += 4,
        QpOptions::default(),
        WcStatus::RemInvReqErr,
    );
}

#[test]
fn qp_without_remote_read_rejects_reads_as_invalid_request() {
    let opts = QpOptions {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..Default::default()
    };
    check_rejected(WrOpcode::RdmaRead, |_| {}, opts, WcStatus::RemInvReqErr);
}

#[test]
fn send_larger_than_the_receive_buffer_is_a_length_error() {
    let mut pair = Pair::new(52);
    let (a, b) = pair.connect(&QpOptions::default());
    pair.dev(1).post_recv(b.qpn, &recv(9, &b, 0, 100)).unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 1, &a, 0, &b, 0, 2000))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::RemInvReqErr);
    let r = recv_wcs(&mut pair, &b);
    assert_eq!((r[0].wr_id, r[0].status), (9, WcStatus::LocLenErr));
    assert_eq!(pair.read(1, &b, 0, 100), vec![0; 100]);
}

#[test]
fn bad_local_lkey_completes_with_local_protection_error() {
    let mut pair = Pair::new(53);
    let (a, b) = pair.connect(&QpOptions::default());
    let mut w = wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 100);
    w.sg_list[0].lkey ^= 0xff;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::LocProtErr);
}

fn raw(
    opcode: Opcode,
    pkey: u16,
    dest_qp: u32,
    psn: u32,
    reth: Option<RethRepr>,
    payload: &[u8],
) -> Vec<u8> {
    let mut p = PacketRepr::new(BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: true,
        psn,
    });
    p.reth = reth;
    p.payload = payload;
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).unwrap();
    buf
}

/// What the driver reports for a packet from side 0 to side 1 (RoCEv2: the IP addresses as
/// GIDs).
fn from_side_0(pair: &Pair) -> RxMeta {
    RxMeta {
        grh: Some(RxGrh {
            sgid: pair.device(0).config().gid,
            dgid: pair.device(1).config().gid,
            ..RxGrh::default()
        }),
        ..RxMeta::default()
    }
}

#[test]
fn wrong_pkey_unknown_qpn_and_wrong_service_are_dropped_and_counted() {
    let mut pair = Pair::new(54);
    let (_a, b) = pair.connect(&QpOptions::default());
    let meta = from_side_0(&pair);
    let reth = Some(RethRepr {
        va: b.addr,
        rkey: b.keys.rkey,
        dma_len: 4,
    });
    let dev = pair.dev(1);
    dev.handle_packet(
        0,
        &meta,
        &raw(
            Opcode::RC_RDMA_WRITE_ONLY,
            0x1234,
            b.qpn,
            0x100,
            reth,
            &[1, 2, 3, 4],
        ),
    );
    dev.handle_packet(
        0,
        &meta,
        &raw(
            Opcode::RC_RDMA_WRITE_ONLY,
            0xFFFF,
            0x999,
            0x100,
            reth,
            &[1, 2, 3, 4],
        ),
    );
    dev.handle_packet(
        0,
        &meta,
        &raw(
            Opcode::UC_RDMA_WRITE_ONLY,
            0xFFFF,
            b.qpn,
            0x100,
            reth,
            &[1, 2, 3, 4],
        ),
    );
    dev.handle_packet(0, &meta, &[0xff; 7]);
    let c = pair.device(1).counters();
    assert_eq!(
        (
            c.bad_pkey_drops,
            c.unknown_qp_drops,
            c.wrong_service_drops,
            c.malformed_drops
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(pair.read(1, &b, 0, 4), vec![0; 4]);
    // The same packet with the right P_Key is accepted.
    pair.dev(1).handle_packet(
        0,
        &meta,
        &raw(
            Opcode::RC_RDMA_WRITE_ONLY,
            0xFFFF,
            b.qpn,
            0x100,
            reth,
            &[1, 2, 3, 4],
        ),
    );
    assert_eq!(pair.read(1, &b, 0, 4), vec![1, 2, 3, 4]);
}

#[test]
fn wrong_opcode_sequence_gives_invalid_request_nak() {
    let mut pair = Pair::new(55);
    pair.trace = true;
    let (_a, b) = pair.connect(&QpOptions::default());
    let meta = from_side_0(&pair);
    // A WRITE MIDDLE with no WRITE FIRST before it.
    pair.dev(1).handle_packet(
        0,
        &meta,
        &raw(
            Opcode::RC_RDMA_WRITE_MIDDLE,
            0xFFFF,
            b.qpn,
            0x100,
            None,
            &[0u8; 1024],
        ),
    );
    pair.flush_transmits();
    let nak = pair.trace_log.iter().find(|e| e.from == 1).unwrap();
    assert_eq!(nak.syndrome, Some(0x61), "NAK invalid request");
    assert_eq!(pair.device(1).qp_state(b.qpn), Some(QpState::Err));
    assert_eq!(pair.read(1, &b, 0, 1024), vec![0; 1024]);
}

#[test]
fn psn_ahead_of_the_window_is_naked_once_and_not_executed() {
    let mut pair = Pair::new(56);
    pair.trace = true;
    let (_a, b) = pair.connect(&QpOptions::default());
    let reth = Some(RethRepr {
        va: b.addr,
        rkey: b.keys.rkey,
        dma_len: 4,
    });
    let meta = from_side_0(&pair);
    for psn in [0x5000, 0x5001, 0x5002] {
        pair.dev(1).handle_packet(
            0,
            &meta,
            &raw(
                Opcode::RC_RDMA_WRITE_ONLY,
                0xFFFF,
                b.qpn,
                psn,
                reth,
                &[9, 9, 9, 9],
            ),
        );
    }
    pair.flush_transmits();
    let naks: Vec<_> = pair.trace_log.iter().filter(|e| e.from == 1).collect();
    assert_eq!(naks.len(), 1);
    assert_eq!((naks[0].syndrome, naks[0].psn), (Some(0x60), 0x100));
    assert_eq!(pair.read(1, &b, 0, 4), vec![0; 4]);
}

#[test]
fn sge_addresses_near_the_top_of_the_address_space_are_refused_not_wrapped() {
    let mut pair = Pair::new(57);
    let (a, b) = pair.connect(&QpOptions {
        addr: 0,
        ..Default::default()
    });
    let mut w = wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 64);
    w.sg_list = vec![
        softib_transport::Sge {
            addr: 0,
            length: 8,
            lkey: a.keys.lkey,
        },
        softib_transport::Sge {
            addr: u64::MAX - 3,
            length: 64,
            lkey: a.keys.lkey,
        },
    ];
    w.sg_list[1].length = 56;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    assert_eq!(
        wait_send(&mut pair, &a, 1, SEC)[0].status,
        WcStatus::LocProtErr
    );
    // Inline data from such an SGE is refused at post time.
    let mut i = wr(WrOpcode::RdmaWrite, 2, &a, 0, &b, 0, 8);
    i.sg_list[0].addr = u64::MAX - 3;
    i.flags = softib_transport::SendFlags::INLINE;
    assert!(pair.dev(0).post_send(0, a.qpn, &i).is_err());
    // A receive buffer at the top of the address space.
    pair.dev(0)
        .modify_qp(
            0,
            a.qpn,
            &softib_transport::QpAttr {
                qp_state: QpState::Err,
                ..Default::default()
            },
            softib_transport::QpAttrMask::STATE,
        )
        .unwrap();
    let (c, d) = pair.connect(&QpOptions {
        addr: 0,
        ..Default::default()
    });
    let mut r = recv(5, &d, 0, 64);
    r.sg_list[0].addr = u64::MAX - 10;
    pair.dev(1).post_recv(d.qpn, &r).unwrap();
    pair.dev(0)
        .post_send(0, c.qpn, &wr(WrOpcode::Send, 3, &c, 0, &d, 0, 32))
        .unwrap();
    assert_eq!(
        wait_send(&mut pair, &c, 1, SEC)[0].status,
        WcStatus::RemOpErr
    );
}

#[test]
fn a_connected_qp_drops_packets_from_anyone_but_its_peer_and_keeps_no_trace() {
    for qp_type in [softib_transport::QpType::Rc, softib_transport::QpType::Uc] {
        let mut pair = Pair::new(57);
        let opts = QpOptions {
            qp_type,
            ..QpOptions::default()
        };
        let (_a, b) = pair.connect(&opts);
        let reth = Some(RethRepr {
            va: b.addr,
            rkey: b.keys.rkey,
            dma_len: 4,
        });
        let opcode = if qp_type == softib_transport::QpType::Rc {
            Opcode::RC_RDMA_WRITE_ONLY
        } else {
            Opcode::UC_RDMA_WRITE_ONLY
        };
        let write = raw(opcode, 0xFFFF, b.qpn, 0x100, reth, &[7, 7, 7, 7]);
        let peer = from_side_0(&pair);
        let mut third_host = peer;
        third_host.grh.as_mut().unwrap().sgid[15] ^= 0x40;
        let mut elsewhere = peer;
        elsewhere.grh.as_mut().unwrap().dgid[15] ^= 0x40;
        let before = *pair.device(1).qp_counters(b.qpn).unwrap();
        for meta in [third_host, elsewhere, RxMeta::default()] {
            pair.dev(1).handle_packet(0, &meta, &write);
        }
        assert_eq!(
            pair.device(1).counters().foreign_source_drops,
            3,
            "{qp_type:?}"
        );
        assert_eq!(
            *pair.device(1).qp_counters(b.qpn).unwrap(),
            before,
            "{qp_type:?}: the QP's counters show no trace of the foreign packets"
        );
        assert_eq!(
            pair.read(1, &b, 0, 4),
            vec![0; 4],
            "{qp_type:?}: nothing written"
        );
        assert_eq!(pair.device(1).qp_state(b.qpn), Some(QpState::Rts));
        // The same packet from the peer is taken.
        pair.dev(1).handle_packet(0, &peer, &write);
        assert_eq!(
            pair.read(1, &b, 0, 4),
            vec![7; 4],
            "{qp_type:?}: the peer's write lands"
        );
    }
}
