//! A PSN mismatch at connection set-up (field case 10): side 0 moves its RC QP to RTS with
//! an `sq_psn` that is not the `rq_psn` side 1 moved to RTR with. The responder's PSN checks
//! (IBA 9.7.5.1.x; PSNs compared modulo 2^24 over a half window of 2^23) decide what
//! happens: ahead of the expected PSN, one PSN-sequence NAK and silence (IBA 9.7.5.2.2);
//! behind it, duplicates, dropped and re-acknowledged (IBA 9.7.5.1.4). The requester ignores
//! both (they name PSNs it never sent or has not sent yet), times out retry_cnt + 1 times
//! and fails with IBV_WC_RETRY_EXC_ERR. Behind by less than the send window, the later ACKs
//! cover the first messages, which complete successfully without ever being delivered.

mod common;
use common::*;
use softib_transport::harness::{Endpoint, Pair, QpOptions};
use softib_transport::{QpAttr, QpAttrMask, QpState, WcStatus, WorkCompletion, WrOpcode};

/// AETH syndrome of a PSN-sequence NAK (IBA 9.7.5.2.2): 011 00000.
const NAK_PSN_SEQ: u8 = 0x60;
/// Opcode of an RC ACKNOWLEDGE.
const RC_ACK: u8 = 0x11;
/// Side 1's rq_psn, as the harness agrees it (its `psn` option, side 0's send PSN).
const AGREED_PSN: u32 = 0x100;
const RETRY_CNT: u8 = 7;
const MESSAGES: u64 = 4;

/// Connects a pair as the harness does, then moves side 0's QP through RESET again and back
/// to RTS with `sq_psn = AGREED_PSN + offset` (mod 2^24): the mistake of an application
/// that did not use the PSN its peer expects.
fn mismatched(offset: i64) -> (Pair, Endpoint, Endpoint) {
    let mut pair = Pair::new(10);
    pair.trace = true;
    let o = QpOptions {
        psn: AGREED_PSN,
        timeout: 10,
        retry_cnt: RETRY_CNT,
        ..Default::default()
    };
    let (a, b) = pair.connect(&o);
    let wrong = (AGREED_PSN as i64 + offset).rem_euclid(1 << 24) as u32;
    let agreed = pair.dev(0).query_qp(a.qpn).unwrap();
    let dev = pair.dev(0);
    let mut attr = QpAttr {
        qp_state: QpState::Reset,
        ..agreed
    };
    dev.modify_qp(0, a.qpn, &attr, QpAttrMask::STATE).unwrap();
    attr.qp_state = QpState::Init;
    dev.modify_qp(
        0,
        a.qpn,
        &attr,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    attr.qp_state = QpState::Rtr;
    dev.modify_qp(
        0,
        a.qpn,
        &attr,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    attr.qp_state = QpState::Rts;
    attr.sq_psn = wrong;
    dev.modify_qp(
        0,
        a.qpn,
        &attr,
        QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
    assert_eq!(pair.device(0).query_qp(a.qpn).unwrap().sq_psn, wrong);
    assert_eq!(pair.device(1).query_qp(b.qpn).unwrap().rq_psn, AGREED_PSN);
    (pair, a, b)
}

/// Posts `MESSAGES` one-packet SENDs from side 0 (and as many receives at side 1) and runs
/// until they all completed; returns the send and receive completions.
fn run_sends(
    pair: &mut Pair,
    a: &Endpoint,
    b: &Endpoint,
) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
    for i in 0..MESSAGES {
        pair.dev(1)
            .post_recv(b.qpn, &recv(100 + i, b, i * 1024, 1024))
            .unwrap();
    }
    for i in 0..MESSAGES {
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::Send, i, a, i * 1024, b, 0, 1024))
            .unwrap();
    }
    let sends = wait_send(pair, a, MESSAGES as usize, 60 * SEC);
    pair.drive(pair.now + SEC);
    let recvs = recv_wcs(pair, b);
    (sends, recvs)
}

/// The PSN-sequence NAKs side 1 put on the wire.
fn seq_naks(pair: &Pair) -> usize {
    pair.trace_log
        .iter()
        .filter(|t| t.from == 1 && t.opcode == RC_ACK && t.syndrome == Some(NAK_PSN_SEQ))
        .count()
}

fn assert_retry_exceeded(sends: &[WorkCompletion]) {
    assert_eq!(sends.len(), MESSAGES as usize);
    assert_eq!(sends[0].status, WcStatus::RetryExcErr, "{sends:?}");
    assert!(
        sends[1..].iter().all(|w| w.status == WcStatus::WrFlushErr),
        "{sends:?}"
    );
}

#[test]
fn sq_psn_ahead_of_the_peers_rq_psn_gets_one_nak_then_retry_exhaustion() {
    let (mut pair, a, b) = mismatched(1000);
    let (sends, recvs) = run_sends(&mut pair, &a, &b);
    assert_retry_exceeded(&sends);
    assert!(recvs.is_empty(), "nothing was delivered: {recvs:?}");
    let req = *pair.device(0).qp_counters(a.qpn).unwrap();
    let resp = *pair.device(1).qp_counters(b.qpn).unwrap();
    // One NAK for the whole failure: the responder stays silent until the expected PSN,
    // which never comes.
    assert_eq!(resp.seq_naks_sent, 1);
    assert_eq!(seq_naks(&pair), 1);
    // The NAK names PSN 0x100, before anything the requester sent: ignored.
    assert_eq!(req.seq_naks_received, 0);
    assert_eq!(req.stale_responses, 1);
    // retry_cnt retries, each after a timeout, and the timeout that finds none left.
    assert_eq!(req.local_ack_timeouts, RETRY_CNT as u64 + 1);
    assert_eq!(req.retransmitted_packets, RETRY_CNT as u64 * MESSAGES);
    assert_eq!(
        resp.out_of_sequence_drops,
        (RETRY_CNT as u64 + 1) * MESSAGES
    );
    assert_eq!(resp.duplicates_received, 0);
    assert_eq!(
        pair.device(0).query_qp(a.qpn).unwrap().qp_state,
        QpState::Err
    );
}

#[test]
fn sq_psn_behind_by_more_than_the_window_is_all_duplicates_then_retry_exhaustion() {
    let (mut pair, a, b) = mismatched(-1000);
    let (sends, recvs) = run_sends(&mut pair, &a, &b);
    assert_retry_exceeded(&sends);
    assert!(recvs.is_empty(), "nothing was delivered: {recvs:?}");
    let req = *pair.device(0).qp_counters(a.qpn).unwrap();
    let resp = *pair.device(1).qp_counters(b.qpn).unwrap();
    assert_eq!(resp.seq_naks_sent, 0);
    assert_eq!(seq_naks(&pair), 0);
    assert_eq!(resp.duplicates_received, (RETRY_CNT as u64 + 1) * MESSAGES);
    // Each duplicate SEND is re-acknowledged with the last PSN received (0x100 - 1), a PSN
    // the requester never sent: every ACK is ignored.
    let acks = pair
        .trace_log
        .iter()
        .filter(|t| t.from == 1 && t.opcode == RC_ACK && t.syndrome.is_some_and(|s| s < 0x20))
        .count() as u64;
    // (The requester asks for an acknowledgement once per pass over its window.)
    assert!(acks > 0);
    assert_eq!(req.stale_responses, acks);
    assert_eq!(req.local_ack_timeouts, RETRY_CNT as u64 + 1);
}

#[test]
fn sq_psn_behind_within_the_window_completes_messages_that_were_never_delivered() {
    let (mut pair, a, b) = mismatched(-2);
    let (sends, recvs) = run_sends(&mut pair, &a, &b);
    assert!(
        sends.iter().all(|w| w.status == WcStatus::Success),
        "{sends:?}"
    );
    // Two of the four SENDs landed on PSNs the responder had "already" received.
    assert_eq!(recvs.len(), MESSAGES as usize - 2, "{recvs:?}");
    assert!(recvs.iter().all(|w| w.status == WcStatus::Success));
    let req = *pair.device(0).qp_counters(a.qpn).unwrap();
    let resp = *pair.device(1).qp_counters(b.qpn).unwrap();
    assert_eq!(resp.duplicates_received, 2);
    assert_eq!(resp.seq_naks_sent, 0);
    assert_eq!(req.local_ack_timeouts, 0);
    assert_eq!(req.retransmitted_packets, 0);
    // The bytes that did arrive are those of messages 0 and 1 (the first receives): the
    // responder took PSN 0x100 onward, which the requester gave to messages 2 and 3.
    let got = pair.read(1, &b, 0, 1024);
    let want = pair.read(0, &a, 2 * 1024, 1024);
    assert_eq!(got, want);
}

#[test]
fn the_half_window_rule_decides_ahead_or_behind() {
    // Up to 2^23 - 1 ahead is ahead (a NAK); 2^23 "ahead" is 2^23 behind (duplicates). The
    // last of the four messages' PSNs is 2^23 - 1 ahead.
    let (mut pair, a, b) = mismatched((1 << 23) - MESSAGES as i64);
    let (sends, _) = run_sends(&mut pair, &a, &b);
    assert_retry_exceeded(&sends);
    let resp = *pair.device(1).qp_counters(b.qpn).unwrap();
    assert_eq!((resp.seq_naks_sent, resp.duplicates_received), (1, 0));

    let (mut pair, a, b) = mismatched(1 << 23);
    let (sends, _) = run_sends(&mut pair, &a, &b);
    assert_retry_exceeded(&sends);
    let resp = *pair.device(1).qp_counters(b.qpn).unwrap();
    assert_eq!(resp.seq_naks_sent, 0);
    assert!(resp.duplicates_received > 0);
}
