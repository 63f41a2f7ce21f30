//! RC ATOMIC WRITE (IBA vol. 1 release 1.5; opcode 0x1D, Linux's IB_OPCODE_RC_ATOMIC_WRITE),
//! one test per rule: the 8 bytes land as one store, the request takes a responder resource
//! and completes on an RDMA READ response Only without payload, REMOTE_WRITE is the right
//! it needs (on the QP and the region), misalignment and wrong lengths are invalid requests,
//! and a duplicate is answered without being applied again.

mod common;
use common::*;
use softib_transport::harness::{Faults, Pair, QpOptions, TraceEntry, Verdict};
use softib_transport::{
    AccessFlags, QpState, QpType, RxGrh, RxMeta, SendFlags, SendWr, Sge, VerbsError, WcOpcode,
    WcStatus, WrOpcode,
};
use softib_wire::{BthRepr, Opcode, Operation, PacketRepr, RethRepr};

/// An ATOMIC WRITE of the 8 bytes at `local_off` of `a` to `remote_off` of `b`.
fn atomic_write(
    id: u64,
    a: &softib_transport::harness::Endpoint,
    local_off: u64,
    b: &softib_transport::harness::Endpoint,
    remote_off: u64,
) -> SendWr {
    wr(WrOpcode::AtomicWrite, id, a, local_off, b, remote_off, 8)
}

fn op_of(e: &TraceEntry) -> Operation {
    Opcode::from_u8(e.opcode).unwrap().operation()
}

#[test]
fn atomic_write_stores_the_8_bytes_and_completes_on_a_zero_length_read_response() {
    let mut pair = Pair::new(1);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions::default());
    let value = 0x1122_3344_5566_7788u64.to_le_bytes();
    pair.fill(0, &a, 0, &value);
    pair.fill(1, &b, 56, &[0xEE; 24]);
    pair.dev(0)
        .post_send(0, a.qpn, &atomic_write(7, &a, 0, &b, 64))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id, 7);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].opcode, WcOpcode::AtomicWrite);
    assert_eq!(pair.read(1, &b, 64, 8), value, "the 8 bytes as posted");
    assert_eq!(pair.read(1, &b, 56, 8), [0xEE; 8], "nothing before");
    assert_eq!(pair.read(1, &b, 72, 8), [0xEE; 8], "nothing after");
    // On the wire: BTH + RETH + 8 bytes, AckReq; answered by READ response Only with an
    // ACK syndrome and no payload (BTH + AETH).
    let req: Vec<_> = pair.trace_log.iter().filter(|e| e.from == 0).collect();
    let resp: Vec<_> = pair.trace_log.iter().filter(|e| e.from == 1).collect();
    assert_eq!(req.len(), 1);
    assert_eq!(req[0].opcode, 0x1D);
    assert!(req[0].ack_req);
    assert_eq!(req[0].len, 12 + 16 + 8);
    assert_eq!(resp.len(), 1);
    assert_eq!(op_of(resp[0]), Operation::ReadResponseOnly);
    assert_eq!(resp[0].psn, req[0].psn);
    assert_eq!(resp[0].len, 12 + 4);
    assert_eq!(resp[0].syndrome.map(|s| s >> 5), Some(0), "an ACK");
}

#[test]
fn inline_atomic_write_takes_its_bytes_at_post_time_beyond_max_inline_data() {
    let mut pair = Pair::new(2);
    let (a, b) = pair.connect(&QpOptions::default());
    pair.fill(0, &a, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let mut w = atomic_write(1, &a, 0, &b, 0);
    w.flags |= SendFlags::INLINE;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    // Changing the buffer after the post changes nothing: the WQE holds the bytes.
    pair.fill(0, &a, 0, &[9; 8]);
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(pair.read(1, &b, 0, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn atomic_write_needs_remote_write_on_the_region_not_remote_atomic() {
    let mut pair = Pair::new(3);
    let (a, b) = pair.connect(&QpOptions::default());
    pair.fill(0, &a, 0, &[0x5A; 8]);
    let write_only = pair
        .dev(1)
        .reg_mr(
            b.pd,
            Box::new(softib_transport::VecMemory::zeroed(64)),
            0x9000_0000,
            // REMOTE_WRITE needs LOCAL_WRITE (ibv_reg_mr(3)); no REMOTE_ATOMIC.
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let mut w = atomic_write(1, &a, 0, &b, 0);
    w.remote_addr = 0x9000_0008;
    w.rkey = write_only.rkey;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let mut got = [0u8; 16];
    pair.device(1)
        .memory(write_only.lkey)
        .unwrap()
        .read(0, &mut got);
    assert_eq!(got[8..], [0x5A; 8]);

    // A region with every remote right but REMOTE_WRITE refuses it: remote access error.
    let mut pair = Pair::new(4);
    let (a, b) = pair.connect(&QpOptions::default());
    let no_write = pair
        .dev(1)
        .reg_mr(
            b.pd,
            Box::new(softib_transport::VecMemory::zeroed(64)),
            0x9000_0000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        )
        .unwrap();
    let mut w = atomic_write(1, &a, 0, &b, 0);
    w.remote_addr = 0x9000_0000;
    w.rkey = no_write.rkey;
    pair.fill(0, &a, 0, &[0x5A; 8]);
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    let mut got = [0u8; 8];
    pair.device(1)
        .memory(no_write.lkey)
        .unwrap()
        .read(0, &mut got);
    assert_eq!(got, [0; 8], "zero bytes written");
    assert_eq!(pair.device(1).qp_state(b.qpn), Some(QpState::Err));
}

/// Posts one ATOMIC WRITE changed by `tweak` and checks it fails with `want`, with the
/// responder's memory untouched and both QPs in ERR (a class C responder error).
fn check_rejected(opts: QpOptions, tweak: impl Fn(&mut SendWr), want: WcStatus) {
    let mut pair = Pair::new(5);
    let (a, b) = pair.connect(&opts);
    pair.fill(0, &a, 0, &[0xA5; 8]);
    let before = pair.read(1, &b, 0, b.len);
    let mut w = atomic_write(1, &a, 0, &b, 64);
    tweak(&mut w);
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, want);
    assert_eq!(wcs[0].opcode, WcOpcode::AtomicWrite);
    assert_eq!(pair.read(1, &b, 0, b.len), before, "zero bytes written");
    assert_eq!(pair.device(0).qp_state(a.qpn), Some(QpState::Err));
    assert_eq!(pair.device(1).qp_state(b.qpn), Some(QpState::Err));
}

#[test]
fn misaligned_atomic_write_is_an_invalid_request() {
    check_rejected(
        QpOptions::default(),
        |w| w.remote_addr += 4,
        WcStatus::RemInvReqErr,
    );
}

#[test]
fn atomic_write_outside_the_region_or_with_a_bad_rkey_is_a_remote_access_error() {
    check_rejected(
        QpOptions::default(),
        |w| w.remote_addr += (1 << 20) - 64, // the 8 bytes just past the end
        WcStatus::RemAccessErr,
    );
    check_rejected(
        QpOptions::default(),
        |w| w.rkey ^= 0x100,
        WcStatus::RemAccessErr,
    );
}

#[test]
fn qp_without_remote_write_rejects_atomic_write_as_invalid_request() {
    // rxe's check_op_valid: ATOMIC WRITE needs the QP's REMOTE_WRITE, even with
    // REMOTE_ATOMIC granted.
    let opts = QpOptions {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        ..Default::default()
    };
    check_rejected(opts, |_| {}, WcStatus::RemInvReqErr);
}

#[test]
fn duplicated_atomic_write_is_answered_and_not_applied_again() {
    let mut pair = Pair::new(6);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        timeout: 10,
        ..Default::default()
    });
    pair.fill(0, &a, 0, &7u64.to_le_bytes());
    // Lose the first response: the requester times out and sends the request again.
    let mut dropped = false;
    pair.filter = Some(Box::new(move |from, _, _| {
        if from == 1 && !dropped {
            dropped = true;
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    pair.dev(0)
        .post_send(0, a.qpn, &atomic_write(1, &a, 0, &b, 0))
        .unwrap();
    // Wait until the first copy has been applied, then let the responder's host overwrite
    // the word, as a CPU would: a second application would bring the 7 back.
    let bb = b;
    pair.drive_until(SEC, |p| p.read(1, &bb, 0, 8) == 7u64.to_le_bytes());
    pair.fill(1, &b, 0, &99u64.to_le_bytes());
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let requests: Vec<_> = pair.trace_log.iter().filter(|e| e.from == 0).collect();
    assert_eq!(requests.len(), 2, "the request went out twice");
    assert!(requests
        .iter()
        .all(|e| e.opcode == 0x1D && e.psn == requests[0].psn));
    assert_eq!(
        pair.device(1)
            .qp_counters(b.qpn)
            .unwrap()
            .duplicates_received,
        1
    );
    assert_eq!(pair.read(1, &b, 0, 8), 99u64.to_le_bytes(), "applied once");
}

#[test]
fn atomic_writes_count_against_max_rd_atomic() {
    let mut pair = Pair::new(7);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..Default::default()
    });
    for i in 0..3u64 {
        pair.fill(0, &a, 8 * i as usize, &(100 + i).to_le_bytes());
        pair.dev(0)
            .post_send(0, a.qpn, &atomic_write(i, &a, 8 * i, &b, 8 * i))
            .unwrap();
    }
    let wcs = wait_send(&mut pair, &a, 3, SEC);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success)
        ]
    );
    for i in 0..3u64 {
        assert_eq!(pair.read(1, &b, 8 * i as usize, 8), (100 + i).to_le_bytes());
    }
    // One outstanding at a time: each request follows the previous one's response.
    let order: Vec<usize> = pair.trace_log.iter().map(|e| e.from).collect();
    assert_eq!(order, vec![0, 1, 0, 1, 0, 1]);
}

#[test]
fn an_ack_past_an_atomic_write_without_its_response_makes_the_requester_ask_again() {
    // The response is lost but the SEND after it is acknowledged: the requester must not
    // complete the ATOMIC WRITE on that ACK (its response is the completion) and goes back.
    let mut pair = Pair::new(8);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        timeout: 10,
        ..Default::default()
    });
    pair.fill(0, &a, 0, &0xABCDu64.to_le_bytes());
    pair.dev(1).post_recv(b.qpn, &recv(1, &b, 512, 64)).unwrap();
    pair.dev(1).post_recv(b.qpn, &recv(2, &b, 512, 64)).unwrap();
    let mut dropped = false;
    pair.filter = Some(Box::new(move |from, _, bytes| {
        if from == 1 && !dropped && bytes[0] == Opcode::RC_RDMA_READ_RESPONSE_ONLY.value() {
            dropped = true;
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    pair.dev(0)
        .post_send(0, a.qpn, &atomic_write(1, &a, 0, &b, 0))
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 2, &a, 8, &b, 0, 16))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 2, SEC);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::Send)
        ]
    );
    assert_eq!(pair.read(1, &b, 0, 8), 0xABCDu64.to_le_bytes());
    assert!(
        pair.device(1)
            .qp_counters(b.qpn)
            .unwrap()
            .duplicates_received
            >= 1
    );
}

#[test]
fn atomic_writes_survive_loss_duplication_and_reordering() {
    for seed in 0..6 {
        let mut pair = Pair::new(100 + seed);
        let (a, b) = pair.connect(&QpOptions {
            timeout: 10,
            ..Default::default()
        });
        pair.faults = Faults {
            drop: 0.1,
            duplicate: 0.1,
            reorder: 0.1,
            reorder_window: 50_000,
            ..Faults::default()
        };
        // Atomic writes to word i interleaved with RDMA WRITEs of the neighbouring word,
        // and a second atomic write to the same word after the first.
        let mut id = 0;
        for i in 0..20u64 {
            let v = (i << 32 | 0xC0DE).to_le_bytes();
            pair.fill(0, &a, 16 * i as usize, &v);
            pair.fill(0, &a, 16 * i as usize + 8, &[i as u8; 8]);
            pair.dev(0)
                .post_send(0, a.qpn, &atomic_write(id, &a, 16 * i, &b, 16 * i))
                .unwrap();
            id += 1;
            pair.dev(0)
                .post_send(
                    0,
                    a.qpn,
                    &wr(WrOpcode::RdmaWrite, id, &a, 16 * i + 8, &b, 16 * i + 8, 8),
                )
                .unwrap();
            id += 1;
        }
        let wcs = wait_send(&mut pair, &a, id as usize, 10 * SEC);
        assert_eq!(wcs.len(), id as usize, "seed {seed}");
        assert!(
            wcs.iter()
                .enumerate()
                .all(|(k, w)| w.wr_id == k as u64 && w.status == WcStatus::Success),
            "seed {seed}: {wcs:?}"
        );
        assert_eq!(
            pair.read(1, &b, 0, 320),
            pair.read(0, &a, 0, 320),
            "seed {seed}"
        );
    }
}

#[test]
fn atomic_write_fails_off_rc_and_is_refused_at_post_without_exactly_8_bytes() {
    let mut pair = Pair::new(9);
    let (a, b) = pair.connect(&QpOptions {
        qp_type: QpType::Uc,
        ..Default::default()
    });
    // UC does not carry ATOMIC WRITE: accepted, then failed at the head (as rxe does).
    pair.dev(0)
        .post_send(0, a.qpn, &atomic_write(1, &a, 0, &b, 0))
        .unwrap();
    pair.drive(1_000_000);
    let wcs = pair.completions(0, &a);
    assert_eq!(wcs.len(), 1, "UC: {wcs:?}");
    assert_eq!(wcs[0].status, WcStatus::LocQpOpErr, "UC: {wcs:?}");
    let mut pair = Pair::new(10);
    let (a, b) = pair.connect(&QpOptions::default());
    for len in [0u32, 4, 16] {
        let mut w = atomic_write(1, &a, 0, &b, 0);
        w.sg_list = vec![Sge {
            addr: a.addr,
            length: len,
            lkey: a.keys.lkey,
        }];
        let e = pair.dev(0).post_send(0, a.qpn, &w).unwrap_err();
        assert!(
            matches!(e, VerbsError::InvalidWr { .. }),
            "{len} bytes: {e:?}"
        );
    }
}

/// An ATOMIC WRITE packet built by hand (the requester never sends a bad one).
fn raw_atomic_write(dest_qp: u32, psn: u32, reth: RethRepr, payload: &[u8]) -> Vec<u8> {
    let mut p = PacketRepr::new(BthRepr {
        opcode: Opcode::RC_ATOMIC_WRITE,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: true,
        psn,
    });
    p.reth = Some(reth);
    p.payload = payload;
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).unwrap();
    buf
}

#[test]
fn atomic_write_whose_length_is_not_8_bytes_is_an_invalid_request() {
    // IBA 1.5: the RETH names exactly the 8 bytes the packet carries (rxe's check_rkey:
    // payload length must equal the DMA length; anything else is a length error, NAKed as
    // an invalid request).
    for (dma_len, payload) in [
        (8u32, &[1u8; 4][..]),
        (16, &[1u8; 16][..]),
        (4, &[1u8; 4][..]),
    ] {
        let mut pair = Pair::new(11);
        pair.trace = true;
        let (_a, b) = pair.connect(&QpOptions::default());
        let meta = RxMeta {
            grh: Some(RxGrh {
                sgid: pair.device(0).config().gid,
                dgid: pair.device(1).config().gid,
                ..RxGrh::default()
            }),
            ..RxMeta::default()
        };
        let reth = RethRepr {
            va: b.addr,
            rkey: b.keys.rkey,
            dma_len,
        };
        pair.dev(1)
            .handle_packet(0, &meta, &raw_atomic_write(b.qpn, 0x100, reth, payload));
        pair.flush_transmits();
        let nak = pair.trace_log.iter().find(|e| e.from == 1).unwrap();
        assert_eq!(
            nak.syndrome,
            Some(0x61),
            "{dma_len}/{}: NAK invalid request",
            payload.len()
        );
        assert_eq!(pair.device(1).qp_state(b.qpn), Some(QpState::Err));
        assert_eq!(pair.read(1, &b, 0, 16), vec![0; 16]);
    }
}
