//! The responder's protection table, row by row, at the wire: each row hands hand-built
//! request packets to a live responder (device 1 of a connected pair) and checks
//! - the answer on the wire (NAK code, RNR NAK, re-ACK, or nothing),
//! - exactly which counters moved (and by how much),
//! - every registered byte on the device (the QP's buffer, a read-only, a write-only and a
//!   no-atomic region) against what the row allows to change: zero bytes for every
//!   violation,
//! - the QP state afterwards (ERR for class C errors, IBA 9.9.3; RTS for drops and for
//!   PSN-sequence NAKs).
//!
//! `protection.rs` drives similar violations from a real requester and checks completion
//! statuses; this file pins the responder's per-packet decisions and their counters.

use softib_transport::harness::{Endpoint, Pair, QpOptions};
use softib_transport::{
    AccessFlags, DeviceCounters, MrKeys, QpAttr, QpAttrMask, QpCounters, QpState, QpType, RecvWr,
    RxGrh, RxMeta, Sge, VecMemory,
};
use softib_wire::{
    AethRepr, AtomicEthRepr, BthRepr, DethRepr, NakCode, Opcode, PacketRepr, RethRepr, Syndrome,
};

/// What the responder must answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// No packet at all.
    Nothing,
    /// One NAK with this code.
    Nak(NakCode),
    /// One RNR NAK.
    Rnr,
    /// One positive ACK for ePSN - 1 (a duplicate is re-ACKed, IBA 9.7.5.1.4).
    AckBeforeEpsn,
}

/// Counters that may move in a row; everything else must stay put.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Moved {
    remote_access_errors: u64,
    invalid_requests: u64,
    seq_naks_sent: u64,
    rnr_naks_sent: u64,
    out_of_sequence_drops: u64,
    duplicates_received: u64,
    bad_pkey_drops: u64,
    bad_qkey_drops: u64,
    wrong_state_drops: u64,
    unknown_qp_drops: u64,
    wrong_service_drops: u64,
    malformed_drops: u64,
}

fn moved(before: &(DeviceCounters, QpCounters), after: &(DeviceCounters, QpCounters)) -> Moved {
    let (d0, q0) = before;
    let (d1, q1) = after;
    Moved {
        remote_access_errors: q1.remote_access_errors - q0.remote_access_errors,
        invalid_requests: q1.invalid_requests - q0.invalid_requests,
        seq_naks_sent: q1.seq_naks_sent - q0.seq_naks_sent,
        rnr_naks_sent: q1.rnr_naks_sent - q0.rnr_naks_sent,
        out_of_sequence_drops: q1.out_of_sequence_drops - q0.out_of_sequence_drops,
        duplicates_received: q1.duplicates_received - q0.duplicates_received,
        bad_pkey_drops: q1.bad_pkey_drops - q0.bad_pkey_drops,
        bad_qkey_drops: q1.bad_qkey_drops - q0.bad_qkey_drops,
        wrong_state_drops: q1.wrong_state_drops - q0.wrong_state_drops,
        unknown_qp_drops: d1.unknown_qp_drops - d0.unknown_qp_drops,
        wrong_service_drops: d1.wrong_service_drops - d0.wrong_service_drops,
        malformed_drops: d1.malformed_drops - d0.malformed_drops,
    }
}

/// The responder side under test.
struct Bench {
    pair: Pair,
    b: Endpoint,
    /// ePSN of b's receive side.
    epsn: u32,
    /// Extra regions of b's PD: read-only, write-only, no-atomic (read + write).
    ro: MrKeys,
    wo: MrKeys,
    no_atomic: MrKeys,
    /// Every region of device 1 with its initial bytes.
    regions: Vec<(u32, Vec<u8>)>,
}

const RO_VA: u64 = 0x9000_0000;
const WO_VA: u64 = 0x9100_0000;
const NA_VA: u64 = 0x9200_0000;
const REGION: usize = 4096;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) | 1)
        .collect()
}

fn bench(qp_type: QpType) -> Bench {
    let mut pair = Pair::new(77);
    let opts = QpOptions {
        qp_type,
        buf_len: 64 * 1024,
        ..QpOptions::default()
    };
    let (_a, b) = pair.connect(&opts);
    let reg = |pair: &mut Pair, va: u64, access: AccessFlags, seed: u8| {
        pair.dev(1)
            .reg_mr(b.pd, Box::new(VecMemory(pattern(REGION, seed))), va, access)
            .expect("MR")
    };
    let ro = reg(&mut pair, RO_VA, AccessFlags::REMOTE_READ, 3);
    let wo = reg(
        &mut pair,
        WO_VA,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        5,
    );
    let no_atomic = reg(
        &mut pair,
        NA_VA,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        7,
    );
    pair.fill(1, &b, 0, &pattern(b.len, 11));
    let mut regions = Vec::new();
    for lkey in [b.keys.lkey, ro.lkey, wo.lkey, no_atomic.lkey] {
        regions.push((lkey, snapshot(&pair, lkey)));
    }
    Bench {
        pair,
        b,
        epsn: opts.psn,
        ro,
        wo,
        no_atomic,
        regions,
    }
}

fn snapshot(pair: &Pair, lkey: u32) -> Vec<u8> {
    let m = pair.device(1).memory(lkey).expect("registered");
    let mut out = vec![0u8; m.len()];
    m.read(0, &mut out);
    out
}

/// A request packet: BTH with AckReq, the extension headers given, payload.
#[derive(Clone)]
struct Req {
    opcode: Opcode,
    pkey: u16,
    dest_qp: u32,
    psn: u32,
    reth: Option<RethRepr>,
    atomic: Option<AtomicEthRepr>,
    deth: Option<DethRepr>,
    imm: Option<u32>,
    payload: Vec<u8>,
    ack_req: bool,
}

impl Req {
    fn new(b: &Bench, opcode: Opcode) -> Req {
        Req {
            opcode,
            pkey: 0xFFFF,
            dest_qp: b.b.qpn,
            psn: b.epsn,
            reth: None,
            atomic: None,
            deth: None,
            imm: None,
            payload: Vec::new(),
            ack_req: true,
        }
    }
    fn write(b: &Bench, va: u64, rkey: u32, len: usize) -> Req {
        Req {
            reth: Some(RethRepr {
                va,
                rkey,
                dma_len: len as u32,
            }),
            payload: vec![0xEE; len],
            ..Req::new(b, Opcode::RC_RDMA_WRITE_ONLY)
        }
    }
    fn read(b: &Bench, va: u64, rkey: u32, len: u32) -> Req {
        Req {
            reth: Some(RethRepr {
                va,
                rkey,
                dma_len: len,
            }),
            ..Req::new(b, Opcode::RC_RDMA_READ_REQUEST)
        }
    }
    fn fetch_add(b: &Bench, va: u64, rkey: u32) -> Req {
        Req {
            atomic: Some(AtomicEthRepr {
                va,
                rkey,
                swap_or_add: 1,
                compare: 0,
            }),
            ..Req::new(b, Opcode::RC_FETCH_ADD)
        }
    }
    fn bytes(&self) -> Vec<u8> {
        let mut p = PacketRepr::new(BthRepr {
            opcode: self.opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: self.pkey,
            fecn: false,
            becn: false,
            dest_qp: self.dest_qp,
            ack_req: self.ack_req,
            psn: self.psn,
        });
        p.reth = self.reth;
        p.atomic_eth = self.atomic;
        p.deth = self.deth;
        p.immdt = self.imm;
        p.payload = &self.payload;
        let mut buf = vec![0u8; p.buffer_len()];
        p.emit(&mut buf).expect("a well-formed request");
        buf
    }
}

fn meta() -> RxMeta {
    let mut sgid = [0u8; 16];
    sgid[10] = 0xff;
    sgid[11] = 0xff;
    sgid[12..].copy_from_slice(&[10, 0, 0, 1]);
    let mut dgid = sgid;
    dgid[15] = 2;
    RxMeta {
        slid: 1,
        sl: 0,
        grh: Some(RxGrh {
            sgid,
            dgid,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }),
        ecn_ce: false,
    }
}

/// One row: `prepare` may change the bench first (post receives, modify the QP), then
/// `packets` are handed to the responder in order.
struct Row {
    name: &'static str,
    qp_type: QpType,
    prepare: fn(&mut Bench),
    packets: fn(&Bench) -> Vec<Req>,
    answer: Answer,
    moved: Moved,
    state: QpState,
    /// Bytes of b's buffer the row's *valid* packets may change: (offset, bytes).
    changes: fn(&Bench) -> Changes,
}

/// (offset in b's buffer, the bytes there) pairs a row's valid packets may write.
type Changes = Vec<(usize, Vec<u8>)>;

fn nothing(_: &mut Bench) {}
fn no_changes(_: &Bench) -> Changes {
    Vec::new()
}

fn run(row: &Row) {
    let mut bench = bench(row.qp_type);
    (row.prepare)(&mut bench);
    let before = (
        bench.pair.device(1).counters(),
        *bench.pair.device(1).qp_counters(bench.b.qpn).unwrap(),
    );
    // Drain anything the preparation queued.
    let mut buf = vec![0u8; 4096 + 256];
    while bench.pair.dev(1).poll_transmit(0, &mut buf).is_some() {}
    let reqs = (row.packets)(&bench);
    for r in &reqs {
        bench.pair.dev(1).handle_packet(0, &meta(), &r.bytes());
    }
    let mut answers = Vec::new();
    while let Some(t) = bench.pair.dev(1).poll_transmit(0, &mut buf) {
        let p = PacketRepr::parse(&buf[..t.len]).expect("the engine emits valid packets");
        answers.push((p.bth.opcode, p.bth.psn, p.aeth));
    }
    let after = (
        bench.pair.device(1).counters(),
        *bench.pair.device(1).qp_counters(bench.b.qpn).unwrap(),
    );
    let name = row.name;
    match row.answer {
        Answer::Nothing => assert!(answers.is_empty(), "{name}: answered {answers:?}"),
        Answer::Nak(code) => {
            assert_eq!(answers.len(), 1, "{name}: {answers:?}");
            let (op, psn, aeth) = answers[0];
            assert_eq!(op, Opcode::RC_ACKNOWLEDGE, "{name}");
            assert_eq!(
                aeth.map(|a| a.syndrome),
                Some(Syndrome::Nak(code)),
                "{name}"
            );
            // The NAK names the offending (or, for a sequence error, the expected) PSN.
            let want_psn = reqs.last().map(|r| r.psn).unwrap_or(0);
            if code != NakCode::PsnSequenceError {
                assert_eq!(psn, want_psn, "{name}: NAK PSN");
            } else {
                assert_eq!(psn, bench.epsn, "{name}: sequence NAK carries the ePSN");
            }
        }
        Answer::Rnr => {
            assert_eq!(answers.len(), 1, "{name}: {answers:?}");
            assert!(
                matches!(
                    answers[0].2,
                    Some(AethRepr {
                        syndrome: Syndrome::RnrNak { .. },
                        ..
                    })
                ),
                "{name}: {answers:?}"
            );
        }
        Answer::AckBeforeEpsn => {
            let psn = (bench.epsn + 0xFF_FFFF) & 0xFF_FFFF;
            assert_eq!(answers.len(), 1, "{name}: {answers:?}");
            assert!(
                matches!(
                    answers[0].2,
                    Some(AethRepr {
                        syndrome: Syndrome::Ack { .. },
                        ..
                    })
                ),
                "{name}: {answers:?}"
            );
            assert_eq!(answers[0].1, psn, "{name}: ACK PSN");
        }
    }
    assert_eq!(moved(&before, &after), row.moved, "{name}: counters");
    assert_eq!(
        bench.pair.device(1).qp_state(bench.b.qpn),
        Some(row.state),
        "{name}: state"
    );
    // Memory: byte-exact, every region.
    let mut want_b = bench.regions[0].1.clone();
    for (off, bytes) in (row.changes)(&bench) {
        want_b[off..off + bytes.len()].copy_from_slice(&bytes);
    }
    assert!(
        snapshot(&bench.pair, bench.b.keys.lkey) == want_b,
        "{name}: the QP's buffer changed beyond what the row allows"
    );
    for (lkey, init) in &bench.regions[1..] {
        assert!(
            snapshot(&bench.pair, *lkey) == *init,
            "{name}: region {lkey:#x} changed"
        );
    }
}

fn rae() -> Moved {
    Moved {
        remote_access_errors: 1,
        ..Moved::default()
    }
}
fn inv() -> Moved {
    Moved {
        invalid_requests: 1,
        ..Moved::default()
    }
}

fn drop_qp_access(b: &mut Bench, keep: AccessFlags) {
    let attr = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: keep,
        ..QpAttr::default()
    };
    b.pair
        .dev(1)
        .modify_qp(
            0,
            b.b.qpn,
            &attr,
            QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS,
        )
        .expect("RTS->RTS may change the access flags");
}

fn post_recv(b: &mut Bench, len: u32) {
    let wr = RecvWr {
        wr_id: 1,
        sg_list: vec![Sge {
            addr: b.b.addr + 1024,
            length: len,
            lkey: b.b.keys.lkey,
        }],
    };
    b.pair.dev(1).post_recv(b.b.qpn, &wr).expect("post_recv");
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "WRITE with an R_Key whose key byte is wrong",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::write(b, b.b.addr, b.b.keys.rkey ^ 0x01, 64)],
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE with an R_Key naming no region",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::write(b, b.b.addr, 0x00ff_ff00, 64)],
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE one byte past the end of the region",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                vec![Req::write(
                    b,
                    b.b.addr + b.b.len as u64 - 63,
                    b.b.keys.rkey,
                    64,
                )]
            },
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE starting before the region",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::write(b, b.b.addr - 8, b.b.keys.rkey, 64)],
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE whose VA + length wraps around 2^64",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::write(b, u64::MAX - 15, b.b.keys.rkey, 64)],
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE to a region without REMOTE_WRITE",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::write(b, RO_VA, b.ro.rkey, 64)],
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "READ from a region without REMOTE_READ",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::read(b, WO_VA, b.wo.rkey, 64)],
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "READ past the end of the region",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::read(b, RO_VA + 4000, b.ro.rkey, 200)],
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "FETCH_ADD on a region without REMOTE_ATOMIC",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::fetch_add(b, NA_VA + 64, b.no_atomic.rkey)],
            answer: Answer::Nak(NakCode::RemoteAccessError),
            moved: rae(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "FETCH_ADD on the last 4 bytes of the region (out of bounds)",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                vec![Req::fetch_add(
                    b,
                    b.b.addr + b.b.len as u64 - 4,
                    b.b.keys.rkey,
                )]
            },
            // Misaligned as well as out of bounds: either check may fire first, both are
            // checked before any byte moves. IBA 9.4.5 and 9.7.5.2.x give invalid request
            // for misalignment; the engine checks alignment first.
            answer: Answer::Nak(NakCode::InvalidRequest),
            moved: inv(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "FETCH_ADD on an address that is not 8-byte aligned",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| vec![Req::fetch_add(b, b.b.addr + 64 + 4, b.b.keys.rkey)],
            answer: Answer::Nak(NakCode::InvalidRequest),
            moved: inv(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE to a QP whose access flags lack REMOTE_WRITE",
            qp_type: QpType::Rc,
            prepare: |b| drop_qp_access(b, AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC),
            packets: |b| vec![Req::write(b, b.b.addr, b.b.keys.rkey, 64)],
            answer: Answer::Nak(NakCode::InvalidRequest),
            moved: inv(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "FETCH_ADD to a QP whose access flags lack REMOTE_ATOMIC",
            qp_type: QpType::Rc,
            prepare: |b| drop_qp_access(b, AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE),
            packets: |b| vec![Req::fetch_add(b, b.b.addr + 64, b.b.keys.rkey)],
            answer: Answer::Nak(NakCode::InvalidRequest),
            moved: inv(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE whose payload is longer than the RETH DMA length",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                let mut r = Req::write(b, b.b.addr, b.b.keys.rkey, 64);
                r.reth.as_mut().unwrap().dma_len = 32;
                vec![r]
            },
            answer: Answer::Nak(NakCode::InvalidRequest),
            moved: inv(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE MIDDLE with no WRITE FIRST (opcode sequence)",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                vec![Req {
                    payload: vec![0xEE; 1024],
                    ..Req::new(b, Opcode::RC_RDMA_WRITE_MIDDLE)
                }]
            },
            answer: Answer::Nak(NakCode::InvalidRequest),
            moved: inv(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "WRITE FIRST then SEND LAST (a message switching kind)",
            qp_type: QpType::Rc,
            prepare: |b| post_recv(b, 4096),
            packets: |b| {
                let mut first = Req::write(b, b.b.addr + 8192, b.b.keys.rkey, 1024);
                first.opcode = Opcode::RC_RDMA_WRITE_FIRST;
                first.ack_req = false;
                first.reth.as_mut().unwrap().dma_len = 2048;
                let last = Req {
                    psn: b.epsn + 1,
                    payload: vec![0xDD; 1024],
                    ..Req::new(b, Opcode::RC_SEND_LAST)
                };
                vec![first, last]
            },
            answer: Answer::Nak(NakCode::InvalidRequest),
            moved: inv(),
            state: QpState::Err,
            // The valid WRITE FIRST placed its 1024 bytes; the SEND LAST placed nothing.
            changes: |_| vec![(8192, vec![0xEE; 1024])],
        },
        Row {
            name: "SEND ONLY larger than the receive buffer",
            qp_type: QpType::Rc,
            prepare: |b| post_recv(b, 100),
            packets: |b| {
                vec![Req {
                    payload: vec![0xDD; 200],
                    ..Req::new(b, Opcode::RC_SEND_ONLY)
                }]
            },
            answer: Answer::Nak(NakCode::InvalidRequest),
            moved: inv(),
            state: QpState::Err,
            changes: no_changes,
        },
        Row {
            name: "SEND with no receive posted (RNR NAK, nothing placed, QP stays up)",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                vec![Req {
                    payload: vec![0xDD; 100],
                    ..Req::new(b, Opcode::RC_SEND_ONLY)
                }]
            },
            answer: Answer::Rnr,
            moved: Moved {
                rnr_naks_sent: 1,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "P_Key not in the port's table",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                let mut r = Req::write(b, b.b.addr, b.b.keys.rkey, 64);
                r.pkey = 0x7123;
                vec![r]
            },
            answer: Answer::Nothing,
            moved: Moved {
                bad_pkey_drops: 1,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "unknown DestQP",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                let mut r = Req::write(b, b.b.addr, b.b.keys.rkey, 64);
                r.dest_qp = 0xAB_CDEF;
                vec![r]
            },
            answer: Answer::Nothing,
            moved: Moved {
                unknown_qp_drops: 1,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "UC opcode to an RC QP",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                let mut r = Req::write(b, b.b.addr, b.b.keys.rkey, 64);
                r.opcode = Opcode::UC_RDMA_WRITE_ONLY;
                vec![r]
            },
            answer: Answer::Nothing,
            moved: Moved {
                wrong_service_drops: 1,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "PSN ahead of the expected PSN: one sequence NAK per gap, nothing placed",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                let mut r1 = Req::write(b, b.b.addr, b.b.keys.rkey, 64);
                r1.psn = b.epsn + 3;
                let mut r2 = Req::write(b, b.b.addr + 64, b.b.keys.rkey, 64);
                r2.psn = b.epsn + 4;
                vec![r1, r2]
            },
            answer: Answer::Nak(NakCode::PsnSequenceError),
            moved: Moved {
                seq_naks_sent: 1,
                out_of_sequence_drops: 2,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "PSN half the PSN space ahead (outside the window): a gap, not executed",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                let mut r = Req::write(b, b.b.addr, b.b.keys.rkey, 64);
                r.psn = (b.epsn + (1 << 23) - 1) & 0xFF_FFFF;
                vec![r]
            },
            answer: Answer::Nak(NakCode::PsnSequenceError),
            moved: Moved {
                seq_naks_sent: 1,
                out_of_sequence_drops: 1,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "PSN behind the expected PSN: a duplicate, re-ACKed, never executed",
            qp_type: QpType::Rc,
            prepare: nothing,
            packets: |b| {
                let mut r = Req::write(b, b.b.addr, b.b.keys.rkey, 64);
                r.psn = (b.epsn + 0xFF_FFFF - 5) & 0xFF_FFFF;
                vec![r]
            },
            answer: Answer::AckBeforeEpsn,
            moved: Moved {
                duplicates_received: 1,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "UD SEND with the wrong Q_Key",
            qp_type: QpType::Ud,
            prepare: |b| post_recv(b, 4096),
            packets: |b| {
                vec![Req {
                    deth: Some(DethRepr {
                        qkey: QpOptions::default().qkey ^ 0x10,
                        src_qp: 0x11,
                    }),
                    payload: vec![0xDD; 100],
                    ..Req::new(b, Opcode::UD_SEND_ONLY)
                }]
            },
            answer: Answer::Nothing,
            moved: Moved {
                bad_qkey_drops: 1,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "UD SEND with the wrong P_Key",
            qp_type: QpType::Ud,
            prepare: |b| post_recv(b, 4096),
            packets: |b| {
                vec![Req {
                    pkey: 0x7123,
                    deth: Some(DethRepr {
                        qkey: QpOptions::default().qkey,
                        src_qp: 0x11,
                    }),
                    payload: vec![0xDD; 100],
                    ..Req::new(b, Opcode::UD_SEND_ONLY)
                }]
            },
            answer: Answer::Nothing,
            moved: Moved {
                bad_pkey_drops: 1,
                ..Moved::default()
            },
            state: QpState::Rts,
            changes: no_changes,
        },
        Row {
            name: "RC WRITE to a QP in INIT (wrong state)",
            qp_type: QpType::Rc,
            prepare: |b| {
                let q = b.b.qpn;
                let dev = b.pair.dev(1);
                dev.modify_qp(
                    0,
                    q,
                    &QpAttr {
                        qp_state: QpState::Reset,
                        ..QpAttr::default()
                    },
                    QpAttrMask::STATE,
                )
                .unwrap();
                dev.modify_qp(
                    0,
                    q,
                    &QpAttr {
                        qp_state: QpState::Init,
                        pkey_index: 0,
                        port_num: 1,
                        qp_access_flags: AccessFlags::REMOTE_WRITE,
                        ..QpAttr::default()
                    },
                    QpAttrMask::STATE
                        | QpAttrMask::PKEY_INDEX
                        | QpAttrMask::PORT
                        | QpAttrMask::ACCESS_FLAGS,
                )
                .unwrap();
            },
            packets: |b| vec![Req::write(b, b.b.addr, b.b.keys.rkey, 64)],
            answer: Answer::Nothing,
            moved: Moved {
                wrong_state_drops: 1,
                ..Moved::default()
            },
            state: QpState::Init,
            changes: no_changes,
        },
    ]
}

#[test]
fn protection_table() {
    for row in rows() {
        run(&row);
    }
}

/// The control rows: the same packets with every field right are accepted, so each
/// violation above is what made the difference.
#[test]
fn protection_table_controls_are_accepted() {
    let mut b = bench(QpType::Rc);
    let w = Req::write(&b, b.b.addr + 128, b.b.keys.rkey, 64);
    b.pair.dev(1).handle_packet(0, &meta(), &w.bytes());
    assert_eq!(
        snapshot(&b.pair, b.b.keys.lkey)[128..192],
        vec![0xEE; 64][..]
    );
    let mut w = Req::write(&b, WO_VA, b.wo.rkey, 64);
    w.psn += 1;
    b.pair.dev(1).handle_packet(0, &meta(), &w.bytes());
    assert_eq!(snapshot(&b.pair, b.wo.lkey)[..64], vec![0xEE; 64][..]);
    let mut f = Req::fetch_add(&b, b.b.addr + 64, b.b.keys.rkey);
    f.psn += 2;
    b.pair.dev(1).handle_packet(0, &meta(), &f.bytes());
    let mut r = Req::read(&b, RO_VA, b.ro.rkey, 64);
    r.psn += 3;
    b.pair.dev(1).handle_packet(0, &meta(), &r.bytes());
    let c = *b.pair.device(1).qp_counters(b.b.qpn).unwrap();
    assert_eq!(
        (
            c.remote_access_errors,
            c.invalid_requests,
            c.duplicates_received
        ),
        (0, 0, 0)
    );
    assert_eq!(b.pair.device(1).qp_state(b.b.qpn), Some(QpState::Rts));
    // The UD control: the right Q_Key is delivered.
    let mut u = bench(QpType::Ud);
    post_recv(&mut u, 4096);
    let s = Req {
        deth: Some(DethRepr {
            qkey: QpOptions::default().qkey,
            src_qp: 0x11,
        }),
        payload: vec![0xDD; 100],
        ..Req::new(&u, Opcode::UD_SEND_ONLY)
    };
    u.pair.dev(1).handle_packet(0, &meta(), &s.bytes());
    let wcs = u.pair.completions(1, &u.b);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].byte_len, 140);
}
