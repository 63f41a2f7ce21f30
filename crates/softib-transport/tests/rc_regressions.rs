//! Regression tests for requester/responder bugs the property tests found. Each test is
//! named for the behaviour it pins down.

mod common;
use common::*;
use softib_transport::harness::{Pair, QpOptions, Verdict};
use softib_transport::{Mtu, WcStatus, WrOpcode};

fn psn_of(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[9], b[10], b[11]])
}

/// An atomic whose response is lost, then an atomic whose response arrives (an implicit
/// NAK for the first: recovery starts), then a multi-packet WRITE with a lost packet: the
/// PSN-sequence NAK names a PSN past both atomics. go-back-N must restart at the atomic
/// (re-requesting its response, which the responder answers from its saved result) rather
/// than at the NAK's PSN, which would leave the atomic unanswered until the ACK timer
/// fires and, under more losses, exhaust retry_cnt while the responder makes progress.
#[test]
fn seq_nak_past_an_unanswered_atomic_resends_the_atomic() {
    let mut pair = Pair::new(7);
    let opts = QpOptions {
        mtu: Mtu::M256,
        timeout: 14,
        ..QpOptions::default()
    };
    let (a, b) = pair.connect(&opts);
    let first_psn = opts.psn;
    let mut dropped_ack = false;
    let mut dropped_req = false;
    pair.filter = Some(Box::new(move |from, _now, bytes| {
        if from == 1 && bytes[0] == 0x12 && psn_of(bytes) == first_psn && !dropped_ack {
            // RC ATOMIC ACKNOWLEDGE
            dropped_ack = true;
            return Verdict::Drop;
        }
        if from == 0 && psn_of(bytes) == first_psn + 7 && !dropped_req {
            dropped_req = true;
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    pair.fill(1, &b, 64, &100u64.to_le_bytes());
    pair.fill(0, &a, 4096, &pattern(3000, 5));
    let mut fadd = wr(WrOpcode::AtomicFetchAndAdd, 1, &a, 0, &b, 64, 8);
    fadd.compare_add = 5;
    pair.dev(0).post_send(0, a.qpn, &fadd).unwrap();
    pair.drive(200_000);
    fadd.wr_id = 3;
    fadd.sg_list[0].addr += 8;
    let now = pair.now;
    pair.dev(0).post_send(now, a.qpn, &fadd).unwrap();
    let write = wr(WrOpcode::RdmaWrite, 2, &a, 4096, &b, 8192, 3000);
    pair.dev(0).post_send(now, a.qpn, &write).unwrap();
    let wcs = wait_send(&mut pair, &a, 3, 10 * SEC);
    assert_eq!(wcs.len(), 3);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(
        pair.read(0, &a, 0, 8),
        100u64.to_le_bytes(),
        "original value"
    );
    assert_eq!(
        pair.read(0, &a, 8, 8),
        105u64.to_le_bytes(),
        "original value"
    );
    assert_eq!(
        pair.read(1, &b, 64, 8),
        110u64.to_le_bytes(),
        "added once each"
    );
    assert_eq!(pair.read(1, &b, 8192, 3000), pattern(3000, 5));
    let c = pair.device(0).qp_counters(a.qpn).unwrap();
    assert_eq!(c.seq_naks_received, 1);
    assert_eq!(
        c.local_ack_timeouts, 0,
        "the NAK-driven retry must re-request the atomic, not wait for the ACK timer"
    );
    let r = pair.device(1).qp_counters(b.qpn).unwrap();
    assert!(
        r.duplicates_received >= 1,
        "the atomic was answered as a duplicate"
    );
}
