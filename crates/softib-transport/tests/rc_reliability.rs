//! RC reliability mechanisms with the exact numbers of IBA 9.7.5 / 9.7.6: retries, timeouts,
//! RNR NAKs, duplicates and sequence errors. Every test drives real packets through the pair harness.

mod common;
use common::*;
use softib_transport::harness::{Pair, QpOptions, TraceEntry, Verdict};
use softib_transport::{Mtu, QpState, WcStatus, WrOpcode};
use softib_wire::{Opcode, Operation};

fn op_of(e: &TraceEntry) -> Operation {
    Opcode::from_u8(e.opcode).unwrap().operation()
}

fn requests(pair: &Pair) -> Vec<TraceEntry> {
    pair.trace_log
        .iter()
        .filter(|e| e.from == 0)
        .cloned()
        .collect()
}

/// Drops the first `n` packets side 0 sends.
fn drop_first_from_requester(pair: &mut Pair, n: usize) {
    let mut seen = 0;
    pair.filter = Some(Box::new(move |from, _, _| {
        if from == 0 && seen < n {
            seen += 1;
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
}

fn first_retransmission_time(timeout: u8) -> u64 {
    let mut pair = Pair::new(10);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        timeout,
        ..Default::default()
    });
    drop_first_from_requester(&mut pair, 1);
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 64))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, 10 * SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let reqs = requests(&pair);
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0].psn, reqs[1].psn);
    assert!(!reqs[0].delivered && reqs[1].delivered);
    assert_eq!(pair.qp_counters(0, a.qpn).local_ack_timeouts, 1);
    assert_eq!(pair.qp_counters(0, a.qpn).retransmitted_packets, 1);
    reqs[1].time - reqs[0].time
}

trait Counters {
    fn qp_counters(&self, side: usize, qpn: u32) -> softib_transport::QpCounters;
}
impl Counters for Pair {
    fn qp_counters(&self, side: usize, qpn: u32) -> softib_transport::QpCounters {
        *self.device(side).qp_counters(qpn).unwrap()
    }
}

#[test]
fn local_ack_timeout_10_retransmits_after_4_194304_ms() {
    assert_eq!(first_retransmission_time(10), 4_194_304);
}

#[test]
fn local_ack_timeout_16_retransmits_after_268_435456_ms() {
    assert_eq!(first_retransmission_time(16), 268_435_456);
}

#[test]
fn retry_cnt_exhaustion_fails_after_retry_cnt_plus_one_attempts() {
    for retry_cnt in [0u8, 3, 7] {
        let mut pair = Pair::new(11);
        pair.trace = true;
        let (a, b) = pair.connect(&QpOptions {
            timeout: 10,
            retry_cnt,
            ..Default::default()
        });
        drop_first_from_requester(&mut pair, usize::MAX);
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 64))
            .unwrap();
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::Send, 2, &a, 0, &b, 0, 64))
            .unwrap();
        let wcs = wait_send(&mut pair, &a, 2, 100 * SEC);
        assert_eq!(wcs[0].wr_id, 1);
        assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
        assert_eq!(wcs[0].status.as_str(), "transport retry counter exceeded");
        assert_eq!(wcs[1].status, WcStatus::WrFlushErr);
        assert_eq!(pair.device(0).qp_state(a.qpn), Some(QpState::Err));
        let first_psn: Vec<_> = requests(&pair)
            .into_iter()
            .filter(|e| e.psn == 0x100)
            .collect();
        assert_eq!(
            first_psn.len(),
            retry_cnt as usize + 1,
            "retry_cnt {retry_cnt}"
        );
        for (k, e) in first_psn.iter().enumerate() {
            assert_eq!(e.time, k as u64 * 4_194_304);
        }
        assert_eq!(
            pair.qp_counters(0, a.qpn).local_ack_timeouts,
            retry_cnt as u64 + 1
        );
    }
}

#[test]
fn rnr_nak_waits_the_min_rnr_timer_table_value() {
    // min_rnr_timer 14 = 1.28 ms (IBA 9.7.5.2.8 table).
    let mut pair = Pair::new(12);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        min_rnr_timer: 14,
        ..Default::default()
    });
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 1, &a, 0, &b, 0, 100))
        .unwrap();
    // Let the first attempt bounce, then post the receive.
    pair.drive_until(SEC, |p| {
        p.device(0).qp_counters(a.qpn).unwrap().rnr_naks_received == 1
    });
    pair.dev(1).post_recv(b.qpn, &recv(9, &b, 0, 100)).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let reqs = requests(&pair);
    assert_eq!(reqs.len(), 2);
    let nak = pair.trace_log.iter().find(|e| e.from == 1).unwrap();
    assert_eq!(
        nak.syndrome,
        Some(0x20 | 14),
        "RNR NAK carries min_rnr_timer"
    );
    let nak_arrival = nak.time + pair.latency;
    assert_eq!(reqs[1].time - nak_arrival, 1_280_000);
    assert_eq!(pair.qp_counters(1, b.qpn).rnr_naks_sent, 1);
}

#[test]
fn rnr_retry_exhaustion_fails_with_rnr_retry_exceeded() {
    let mut pair = Pair::new(13);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        min_rnr_timer: 1,
        rnr_retry: 3,
        ..Default::default()
    });
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 1, &a, 0, &b, 0, 100))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(wcs[0].status.as_str(), "RNR retry counter exceeded");
    assert_eq!(requests(&pair).len(), 4, "rnr_retry 3 allows 4 attempts");
    assert_eq!(pair.qp_counters(0, a.qpn).rnr_naks_received, 4);
    assert_eq!(pair.device(0).qp_state(a.qpn), Some(QpState::Err));
}

#[test]
fn rnr_retry_7_never_gives_up() {
    let mut pair = Pair::new(14);
    let (a, b) = pair.connect(&QpOptions {
        min_rnr_timer: 1,
        rnr_retry: 7,
        ..Default::default()
    });
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 1, &a, 0, &b, 0, 100))
        .unwrap();
    pair.drive_until(10 * SEC, |p| {
        p.device(0).qp_counters(a.qpn).unwrap().rnr_naks_received >= 500
    });
    assert_eq!(pair.device(0).qp_state(a.qpn), Some(QpState::Rts));
    assert_eq!(
        pair.dev(0)
            .poll_cq(a.send_cq, &mut [softib_transport::harness::empty_wc(); 1]),
        0
    );
    pair.dev(1).post_recv(b.qpn, &recv(9, &b, 0, 100)).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, 10 * SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
}

#[test]
fn psn_gap_gets_exactly_one_nak_and_go_back_n() {
    let mut pair = Pair::new(15);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        mtu: Mtu::M1024,
        ..Default::default()
    });
    let data = pattern(10 * 1024, 7);
    pair.fill(0, &a, 0, &data);
    // Drop the first transmission of the 3rd packet.
    let mut n = 0;
    pair.filter = Some(Box::new(move |from, _, _| {
        if from == 0 {
            n += 1;
            if n == 3 {
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    }));
    pair.dev(0)
        .post_send(
            0,
            a.qpn,
            &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 10 * 1024),
        )
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(pair.read(1, &b, 0, 10 * 1024), data);
    let rc = pair.qp_counters(1, b.qpn);
    let qc = pair.qp_counters(0, a.qpn);
    assert_eq!(rc.seq_naks_sent, 1);
    assert_eq!(qc.seq_naks_received, 1);
    assert_eq!(rc.out_of_sequence_drops, 7);
    // Go-back-N: packets 3..=10 again, nothing before.
    assert_eq!(qc.retransmitted_packets, 8);
    assert_eq!(qc.local_ack_timeouts, 0);
    let naks: Vec<_> = pair
        .trace_log
        .iter()
        .filter(|e| e.from == 1 && e.syndrome == Some(0x60))
        .collect();
    assert_eq!(naks.len(), 1);
    assert_eq!(naks[0].psn, 0x100 + 2, "NAK carries the expected PSN");
}

#[test]
fn duplicated_atomic_is_answered_from_the_saved_value() {
    let mut pair = Pair::new(16);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        timeout: 10,
        ..Default::default()
    });
    pair.fill(1, &b, 0, &41u64.to_le_bytes());
    // Lose the first ATOMIC ACKNOWLEDGE: the requester times out and sends the atomic again.
    let mut dropped = false;
    pair.filter = Some(Box::new(move |from, _, _| {
        if from == 1 && !dropped {
            dropped = true;
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    let mut w = wr(WrOpcode::AtomicFetchAndAdd, 1, &a, 0, &b, 0, 8);
    w.compare_add = 1;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(requests(&pair).len(), 2, "the atomic went out twice");
    assert_eq!(
        pair.read(1, &b, 0, 8),
        42u64.to_le_bytes(),
        "incremented once"
    );
    assert_eq!(pair.read(0, &a, 0, 8), 41u64.to_le_bytes());
    assert_eq!(pair.qp_counters(1, b.qpn).duplicates_received, 1);
}

#[test]
fn duplicated_read_is_replayed() {
    let mut pair = Pair::new(17);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        timeout: 10,
        mtu: Mtu::M1024,
        ..Default::default()
    });
    let data = pattern(8 * 1024, 11);
    pair.fill(1, &b, 0, &data);
    // Lose every response of the first attempt: the whole read is requested again.
    let mut responses = 0;
    pair.filter = Some(Box::new(move |from, _, _| {
        if from == 1 {
            responses += 1;
            if responses <= 8 {
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    }));
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaRead, 1, &a, 0, &b, 0, 8 * 1024))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(pair.read(0, &a, 0, 8 * 1024), data);
    assert_eq!(pair.qp_counters(1, b.qpn).duplicates_received, 1);
    assert_eq!(requests(&pair).len(), 2);
}

#[test]
fn lost_read_response_in_the_middle_resumes_from_the_missing_psn() {
    let mut pair = Pair::new(18);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        mtu: Mtu::M1024,
        ..Default::default()
    });
    let data = pattern(8 * 1024, 12);
    pair.fill(1, &b, 0, &data);
    let mut responses = 0;
    pair.filter = Some(Box::new(move |from, _, _| {
        if from == 1 {
            responses += 1;
            if responses == 4 {
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    }));
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaRead, 1, &a, 0, &b, 0, 8 * 1024))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(pair.read(0, &a, 0, 8 * 1024), data);
    let reqs = requests(&pair);
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].psn,
        reqs[0].psn + 3,
        "re-requested from the 4th response PSN"
    );
    // The re-request asks for the remaining 5 KiB at the advanced address.
    let resp_after: Vec<_> = pair
        .trace_log
        .iter()
        .filter(|e| e.from == 1 && e.time > reqs[1].time)
        .collect();
    assert_eq!(resp_after.len(), 5);
    assert!(matches!(op_of(resp_after[0]), Operation::ReadResponseFirst));
}

#[test]
fn acks_are_coalesced_for_a_long_write() {
    let mut pair = Pair::new(19);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        mtu: Mtu::M4096,
        ..Default::default()
    });
    let data = pattern(1 << 20, 13);
    pair.fill(0, &a, 0, &data);
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 1 << 20))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(pair.read(1, &b, 0, 1 << 20), data);
    let packets = requests(&pair).len();
    let acks = pair.trace_log.iter().filter(|e| e.from == 1).count();
    assert_eq!(packets, 256);
    assert!((1..=8).contains(&acks), "{acks} ACKs for {packets} packets");
    // AckReq on every 64th packet (ack_req_interval) and on the last.
    let ack_reqs: Vec<usize> = requests(&pair)
        .iter()
        .enumerate()
        .filter(|(_, e)| e.ack_req)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(ack_reqs, vec![63, 127, 191, 255]);
}

fn slow_responder(timeout: u8, delay: u64) -> (softib_transport::QpCounters, bool) {
    let mut pair = Pair::new(20);
    let (a, b) = pair.connect(&QpOptions {
        timeout,
        mtu: Mtu::M1024,
        ..Default::default()
    });
    pair.filter = Some(Box::new(move |from, _, _| {
        if from == 1 {
            Verdict::Delay(delay)
        } else {
            Verdict::Pass
        }
    }));
    let data = pattern(64 * 1024, 21);
    pair.fill(0, &a, 0, &data);
    pair.fill(1, &b, 0x80000, &data);
    for i in 0..8u64 {
        let op = if i % 2 == 0 {
            WrOpcode::RdmaWrite
        } else {
            WrOpcode::RdmaRead
        };
        let w = if op == WrOpcode::RdmaWrite {
            wr(op, i, &a, i * 8192, &b, i * 8192, 8192)
        } else {
            wr(op, i, &a, 0x80000 + i * 8192, &b, 0x80000 + i * 8192, 8192)
        };
        pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    }
    let wcs = wait_send(&mut pair, &a, 8, 100 * SEC);
    let ok = wcs.len() == 8
        && wcs.iter().all(|w| w.status == WcStatus::Success)
        && pair
            .read(1, &b, 0, 64 * 1024)
            .iter()
            .zip(&data)
            .enumerate()
            .all(|(i, (x, y))| (i / 8192) % 2 == 1 || x == y)
        && pair
            .read(0, &a, 0x80000, 64 * 1024)
            .iter()
            .zip(&data)
            .enumerate()
            .all(|(i, (x, y))| (i / 8192) % 2 == 0 || x == y);
    (pair.qp_counters(0, a.qpn), ok)
}

#[test]
fn slow_responder_beyond_timeout_causes_retransmissions_but_no_corruption() {
    // Responses arrive 6 ms late; timeout 10 = 4.19 ms.
    let (c, ok) = slow_responder(10, 6_000_000);
    assert!(ok, "all WRs complete and memory is exact");
    assert!(c.retransmitted_packets > 0);
    assert!(c.local_ack_timeouts > 0);
}

#[test]
fn timeout_longer_than_the_delay_causes_no_retransmission() {
    // Same 6 ms delay; timeout 14 = 67 ms.
    let (c, ok) = slow_responder(14, 6_000_000);
    assert!(ok);
    assert_eq!(c.retransmitted_packets, 0);
    assert_eq!(c.local_ack_timeouts, 0);
}

#[test]
fn trace_packets_parse() {
    // The harness's trace matches what a parser sees.
    let mut pair = Pair::new(22);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions::default());
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 10))
        .unwrap();
    pair.flush_transmits();
    let e = &pair.trace_log[0];
    assert_eq!(op_of(e), Operation::WriteOnly);
    assert!(e.ack_req);
}

#[test]
fn read_response_implicitly_acknowledges_an_earlier_write() {
    let mut pair = Pair::new(23);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        timeout: 16,
        ..Default::default()
    });
    // Lose every plain ACK: only the read response can complete the write.
    pair.filter = Some(Box::new(|from, _, bytes| {
        if from == 1 && bytes[0] == 0x11 {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 100))
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaRead, 2, &a, 4096, &b, 0, 100))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 2, SEC);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(pair.qp_counters(0, a.qpn).retransmitted_packets, 0);
    assert!(pair.now < 268_435_456, "no timeout was needed");
}
