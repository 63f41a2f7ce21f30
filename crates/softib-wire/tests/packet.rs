//! Whole transport packets: byte literals both ways, emit→parse identity for every opcode,
//! and malformed input that must be an error (never a panic).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use softib_wire::{
    pad_for, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CreditCode, DethRepr, Error,
    NakCode, Opcode, PacketRepr, RdethRepr, RethRepr, Syndrome, XrcethRepr, BTH_LEN,
};

fn bth(opcode: Opcode) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: false,
        dest_qp: 0x11,
        ack_req: false,
        psn: 0x2A,
    }
}

fn emit(repr: &PacketRepr) -> Vec<u8> {
    let mut buf = vec![0xA5u8; repr.buffer_len()];
    assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
    buf
}

/// Parses `bytes`, checks it equals `repr`, and that `repr` emits exactly `bytes`.
fn both_ways(bytes: &[u8], repr: PacketRepr) {
    assert_eq!(PacketRepr::parse(bytes), Ok(repr));
    assert_eq!(emit(&repr), bytes);
}

#[test]
fn rxe_ack_both_ways() {
    // The first Acknowledge of testdata/captures/rxe-write_bw.pcap, ICRC removed.
    let bytes = [
        0x11, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x13, 0x00, 0xA4, 0x2F, 0xF1, // BTH
        0x1F, 0x00, 0x00, 0x01, // AETH: ACK, credit 31, MSN 1
    ];
    let mut repr = PacketRepr::new(BthRepr {
        dest_qp: 0x13,
        psn: 10_760_177,
        ..bth(Opcode::RC_ACKNOWLEDGE)
    });
    repr.aeth = Some(AethRepr {
        syndrome: Syndrome::Ack {
            credit: CreditCode::UNLIMITED,
        },
        msn: 1,
    });
    both_ways(&bytes, repr);
}

#[test]
fn send_only_imm_with_pad_both_ways() {
    let bytes = [
        0x05, 0xB0, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00,
        0x2A, // BTH, SE, pad 3
        0xDE, 0xAD, 0xBE, 0xEF, // ImmDt
        1, 2, 3, 4, 5, // payload
        0, 0, 0, // pad
    ];
    let mut repr = PacketRepr::new(BthRepr {
        solicited: true,
        ack_req: true,
        pad_count: 3,
        ..bth(Opcode::RC_SEND_ONLY_IMM)
    });
    repr.immdt = Some(0xDEAD_BEEF);
    repr.payload = &[1, 2, 3, 4, 5];
    both_ways(&bytes, repr);
    assert_eq!(repr.header_len(), 16);
    assert_eq!(repr.buffer_len(), 24);
}

#[test]
fn rd_send_only_carries_rdeth_then_deth() {
    let bytes = [
        0x44, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x2A, // BTH
        0x00, 0x00, 0x00, 0x07, // RDETH: EE context 7
        0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x22, // DETH: Q_Key, SrcQP 0x22
        9, 9, 9, 9, // payload
    ];
    let mut repr = PacketRepr::new(bth(Opcode::RD_SEND_ONLY));
    repr.rdeth = Some(RdethRepr { ee_context: 7 });
    repr.deth = Some(DethRepr {
        qkey: 0x8001_0000,
        src_qp: 0x22,
    });
    repr.payload = &[9, 9, 9, 9];
    both_ways(&bytes, repr);
}

#[test]
fn xrc_compare_swap_carries_xrceth_then_atomic_eth() {
    let bytes = [
        0xB3, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x2A, // BTH
        0x00, 0x00, 0x00, 0x05, // XRCETH: SRQ 5
        0, 0, 0, 0, 0, 0, 0x10, 0, // VA
        0, 0, 0x01, 0x00, // R_Key
        0, 0, 0, 0, 0, 0, 0, 2, // swap
        0, 0, 0, 0, 0, 0, 0, 1, // compare
    ];
    let mut repr = PacketRepr::new(BthRepr {
        ack_req: true,
        ..bth(Opcode::XRC_COMPARE_SWAP)
    });
    repr.xrceth = Some(XrcethRepr { xrc_srq: 5 });
    repr.atomic_eth = Some(AtomicEthRepr {
        va: 0x1000,
        rkey: 0x100,
        swap_or_add: 2,
        compare: 1,
    });
    both_ways(&bytes, repr);
}

#[test]
fn atomic_acknowledge_carries_aeth_then_atomic_ack_eth() {
    let bytes = [
        0x12, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x2A, // BTH
        0x00, 0x00, 0x00, 0x09, // AETH: ACK credit 0, MSN 9
        0, 0, 0, 0, 0, 0, 0, 1, // original remote data
    ];
    let mut repr = PacketRepr::new(bth(Opcode::RC_ATOMIC_ACKNOWLEDGE));
    repr.aeth = Some(AethRepr {
        syndrome: Syndrome::Ack {
            credit: CreditCode(0),
        },
        msn: 9,
    });
    repr.atomic_ack_eth = Some(AtomicAckEthRepr {
        orig_remote_data: 1,
    });
    both_ways(&bytes, repr);
}

#[test]
fn rocev2_cnp_both_ways() {
    let mut bytes = vec![
        0x81, 0x00, 0xFF, 0xFF, 0x40, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x00, // BTH, BECN
    ];
    bytes.extend_from_slice(&[0u8; 16]);
    let repr = PacketRepr::new(BthRepr {
        becn: true,
        psn: 0,
        ..bth(Opcode::CNP)
    });
    both_ways(&bytes, repr);
    assert_eq!(repr.header_len(), 28);
}

#[test]
fn read_request_both_ways() {
    let bytes = [
        0x0C, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x2A, // BTH
        0, 0, 0x56, 0x42, 0x8B, 0x5A, 0xB0, 0x00, 0, 0, 0x03, 0x6C, 0, 0, 0x10, 0, // RETH
    ];
    let mut repr = PacketRepr::new(BthRepr {
        ack_req: true,
        ..bth(Opcode::RC_RDMA_READ_REQUEST)
    });
    repr.reth = Some(RethRepr {
        va: 0x5642_8B5A_B000,
        rkey: 0x36C,
        dma_len: 4096,
    });
    both_ways(&bytes, repr);
}

#[test]
fn every_truncation_of_a_packet_is_an_error_naming_the_header() {
    let mut repr = PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_ONLY_IMM));
    repr.reth = Some(RethRepr {
        va: 1,
        rkey: 2,
        dma_len: 3,
    });
    repr.immdt = Some(4);
    repr.payload = &[7, 7, 7];
    let bytes = emit(&repr);
    for n in 0..bytes.len() {
        let err = PacketRepr::parse(&bytes[..n]).unwrap_err();
        let expected_header = match n {
            0..=11 => "BTH",
            12..=27 => "RETH",
            28..=31 => "ImmDt",
            _ => "",
        };
        match err {
            Error::Truncated { header, .. } => assert_eq!(header, expected_header, "len {n}"),
            Error::Malformed { .. } | Error::BadPad { .. } => assert!(n >= 32, "len {n}: {err}"),
            other => panic!("len {n}: unexpected {other}"),
        }
    }
}

#[test]
fn length_not_a_multiple_of_4_is_malformed() {
    let mut repr = PacketRepr::new(bth(Opcode::RC_SEND_ONLY));
    repr.payload = &[1, 2, 3, 4];
    let mut bytes = emit(&repr);
    bytes.push(0);
    assert!(matches!(
        PacketRepr::parse(&bytes),
        Err(Error::Malformed {
            header: "transport packet",
            ..
        })
    ));
}

#[test]
fn bytes_after_an_opcode_without_payload_are_a_bad_length() {
    let mut repr = PacketRepr::new(bth(Opcode::RC_ACKNOWLEDGE));
    repr.aeth = Some(AethRepr {
        syndrome: Syndrome::Nak(NakCode::InvalidRequest),
        msn: 0,
    });
    let mut bytes = emit(&repr);
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(
        PacketRepr::parse(&bytes),
        Err(Error::BadLength {
            header: "RC ACKNOWLEDGE",
            claimed: 16,
            available: 20
        })
    );
}

#[test]
fn pad_count_larger_than_the_payload_is_bad_pad() {
    let mut bytes = vec![0x04, 0x30, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0, 0, 1]; // SEND_ONLY, pad 3
    assert_eq!(
        PacketRepr::parse(&bytes),
        Err(Error::BadPad {
            pad_count: 3,
            available: 0
        })
    );
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(PacketRepr::parse(&bytes).unwrap().payload, &[0u8]);
    // An acknowledge has no payload, so any PadCnt is too large.
    let ack = [0x11, 0x10, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
    assert_eq!(
        PacketRepr::parse(&ack),
        Err(Error::BadPad {
            pad_count: 1,
            available: 0
        })
    );
}

#[test]
fn emit_refuses_headers_that_disagree_with_the_opcode() {
    let mut repr = PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_FIRST));
    let mut buf = [0u8; 64];
    assert_eq!(
        repr.emit(&mut buf),
        Err(Error::Malformed {
            header: "RETH",
            reason: "the opcode requires this header but the packet has none"
        })
    );
    repr.reth = Some(RethRepr {
        va: 0,
        rkey: 0,
        dma_len: 0,
    });
    repr.aeth = Some(AethRepr {
        syndrome: Syndrome::from_u8(0),
        msn: 0,
    });
    assert!(matches!(
        repr.emit(&mut buf),
        Err(Error::Malformed { header: "AETH", .. })
    ));
    let mut ack = PacketRepr::new(bth(Opcode::RC_ACKNOWLEDGE));
    ack.aeth = repr.aeth;
    ack.payload = &[1];
    assert!(matches!(
        ack.emit(&mut buf),
        Err(Error::Malformed {
            header: "payload",
            ..
        })
    ));
}

#[test]
fn emit_into_a_short_buffer_is_an_error() {
    let mut repr = PacketRepr::new(bth(Opcode::UC_SEND_FIRST));
    repr.payload = &[1; 10];
    for n in 0..repr.buffer_len() {
        let mut buf = vec![0u8; n];
        assert_eq!(
            repr.emit(&mut buf),
            Err(Error::BufferTooSmall {
                needed: repr.buffer_len(),
                available: n
            })
        );
    }
    assert!(matches!(
        repr.emit_headers(&mut [0u8; BTH_LEN - 1]),
        Err(Error::BufferTooSmall { .. })
    ));
}

#[test]
fn emit_headers_then_placing_the_payload_equals_emit() {
    let payload = [0xC3u8; 1001];
    let mut repr = PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_FIRST));
    repr.reth = Some(RethRepr {
        va: 0x1000,
        rkey: 0x22,
        dma_len: 4096,
    });
    repr.payload = &payload;
    let whole = emit(&repr);

    let mut buf = vec![0xEEu8; repr.buffer_len()];
    let at = repr.emit_headers(&mut buf).unwrap();
    assert_eq!(at, repr.header_len());
    buf[at..at + payload.len()].copy_from_slice(&payload);
    buf[at + payload.len()..].fill(0);
    assert_eq!(buf, whole);

    let headers_only = PacketRepr {
        payload: &[],
        ..repr
    };
    let mut buf2 = vec![0xEEu8; repr.buffer_len()];
    let at = headers_only
        .emit_headers_for_payload_len(payload.len(), &mut buf2)
        .unwrap();
    buf2[at..at + payload.len()].copy_from_slice(&payload);
    buf2[at + payload.len()..].fill(0);
    assert_eq!(buf2, whole);
}

#[test]
fn pad_for_rounds_up_to_4_bytes() {
    let pads: Vec<usize> = (0..9).map(pad_for).collect();
    assert_eq!(pads, [0, 3, 2, 1, 0, 3, 2, 1, 0]);
}

/// An owned packet description proptest can generate; `as_repr` borrows it.
#[derive(Debug, Clone)]
struct OwnedPacket {
    bth: BthRepr,
    rdeth: RdethRepr,
    deth: DethRepr,
    xrceth: XrcethRepr,
    reth: RethRepr,
    atomic_eth: AtomicEthRepr,
    aeth: AethRepr,
    atomic_ack_eth: AtomicAckEthRepr,
    immdt: u32,
    ieth: u32,
    payload: Vec<u8>,
}

impl OwnedPacket {
    fn as_repr(&self) -> PacketRepr<'_> {
        let op = self.bth.opcode;
        PacketRepr {
            bth: BthRepr {
                pad_count: pad_for(self.payload.len()) as u8,
                ..self.bth
            },
            rdeth: op.has_rdeth().then_some(self.rdeth),
            deth: op.has_deth().then_some(self.deth),
            xrceth: op.has_xrceth().then_some(self.xrceth),
            reth: op.has_reth().then_some(self.reth),
            atomic_eth: op.has_atomic_eth().then_some(self.atomic_eth),
            aeth: op.has_aeth().then_some(self.aeth),
            atomic_ack_eth: op.has_atomic_ack_eth().then_some(self.atomic_ack_eth),
            immdt: op.has_immdt().then_some(self.immdt),
            ieth: op.has_ieth().then_some(self.ieth),
            payload: &self.payload,
        }
    }
}

fn arb_packet(opcode: Opcode) -> impl Strategy<Value = OwnedPacket> {
    let u24 = 0u32..1 << 24;
    let bth = (
        any::<(bool, bool, bool, bool, bool)>(),
        any::<u16>(),
        u24.clone(),
        u24.clone(),
    )
        .prop_map(
            move |((solicited, mig_req, fecn, becn, ack_req), pkey, dest_qp, psn)| BthRepr {
                opcode,
                solicited,
                mig_req,
                pad_count: 0,
                tver: 0,
                pkey,
                fecn,
                becn,
                dest_qp,
                ack_req,
                psn,
            },
        );
    let headers = (
        u24.clone(),
        (any::<u32>(), u24.clone()),
        u24.clone(),
        any::<(u64, u32, u32)>(),
        any::<(u64, u32, u64, u64)>(),
        (any::<u8>(), u24),
        any::<(u64, u32, u32)>(),
    );
    let max_payload = if opcode.has_payload() { 4096 } else { 0 };
    let payload = proptest::collection::vec(any::<u8>(), 0..=max_payload);
    (bth, headers, payload).prop_map(
        |(bth, (ee, (qkey, src_qp), srq, reth, atomic, (syn, msn), (orig, imm, ieth)), payload)| {
            OwnedPacket {
                bth,
                rdeth: RdethRepr { ee_context: ee },
                deth: DethRepr { qkey, src_qp },
                xrceth: XrcethRepr { xrc_srq: srq },
                reth: RethRepr {
                    va: reth.0,
                    rkey: reth.1,
                    dma_len: reth.2,
                },
                atomic_eth: AtomicEthRepr {
                    va: atomic.0,
                    rkey: atomic.1,
                    swap_or_add: atomic.2,
                    compare: atomic.3,
                },
                aeth: AethRepr {
                    syndrome: Syndrome::from_u8(syn),
                    msn,
                },
                atomic_ack_eth: AtomicAckEthRepr {
                    orig_remote_data: orig,
                },
                immdt: imm,
                ieth,
                payload,
            }
        },
    )
}

/// For every opcode (not just the ones a random pick happens to hit), random header fields
/// and payload lengths 0..=4096 survive emit→parse unchanged.
#[test]
fn emit_then_parse_is_identity_for_every_opcode() {
    for &opcode in Opcode::ALL {
        let mut runner = TestRunner::new(Config {
            cases: 48,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&arb_packet(opcode), |owned| {
                let repr = owned.as_repr();
                let mut buf = vec![0u8; repr.buffer_len()];
                prop_assert_eq!(repr.emit(&mut buf), Ok(buf.len()));
                prop_assert_eq!(buf.len() % 4, 0);
                prop_assert_eq!(PacketRepr::parse(&buf), Ok(repr));
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{opcode:?}: {e}"));
    }
}

proptest! {
    /// Arbitrary bytes never panic the parser; whatever parses re-emits to bytes that parse
    /// to the same packet and have the same length.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(repr) = PacketRepr::parse(&bytes) {
            prop_assert_eq!(repr.buffer_len(), bytes.len());
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf).unwrap();
            prop_assert_eq!(PacketRepr::parse(&buf), Ok(repr));
        }
    }

    /// Arbitrary bytes behind a valid opcode and version byte reach the extension-header
    /// and pad checks (plain random bytes mostly stop at the opcode).
    #[test]
    fn arbitrary_bytes_after_a_known_opcode_never_panic(
        opcode in proptest::sample::select(Opcode::ALL),
        flags in 0u8..0x40,
        rest in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        let mut bytes = vec![opcode.value(), flags & 0xF0];
        bytes.extend_from_slice(&rest);
        if let Ok(repr) = PacketRepr::parse(&bytes) {
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf).unwrap();
            prop_assert_eq!(buf.len(), bytes.len());
            prop_assert_eq!(PacketRepr::parse(&buf), Ok(repr));
        }
    }
}
