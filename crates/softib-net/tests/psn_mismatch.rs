//! A PSN mismatch at connection set-up over real sockets (field case 10): two devices on
//! loopback exchange endpoints, but the responder is given a wrong PSN for the requester, so
//! the requester's sq_psn at RTS is not the responder's rq_psn at RTR. The responder's PSN
//! checks (IBA 9.7.5.1.x) answer with one PSN-sequence NAK (requester ahead) or with
//! re-acknowledged duplicates (requester behind); the requester ignores both, times out
//! retry_cnt + 1 times and completes with IBV_WC_RETRY_EXC_ERR. The same as the engine
//! (`softib-transport/tests/psn_mismatch.rs`) and the simulator (`softib cases 10`) show.

use std::time::Duration;

use softib_net::driver::NetConfig;
use softib_net::verbs::{
    CompletionQueue, Hca, ProtectionDomain, QueuePair, RecvRequest, SendRequest,
};
use softib_transport::harness::empty_wc;
use softib_transport::{QpCounters, QpState, QpType, WcStatus, WorkCompletion};

/// local_ack_timeout 10: 4.096 us x 2^10 = 4.2 ms (IBA 9.7.6.1.3).
const TIMEOUT: u8 = 10;
const RETRY_CNT: u8 = 3;
const MESSAGES: usize = 4;

struct Side {
    _hca: Hca,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

fn side(addr: &str) -> Side {
    let mut c = NetConfig::new(addr.parse().unwrap());
    c.seed = 0x5eed;
    let hca = Hca::open(c).unwrap();
    let pd = hca.alloc_pd();
    let cq = hca.create_cq().set_entries(64).build().unwrap();
    Side { _hca: hca, pd, cq }
}

/// Connects RC QPs of `a` (requester) and `b`, telling `b` that `a`'s first PSN is
/// `offset` away from the one `a` really starts at: a requester `-offset` ahead of (or
/// behind) the responder's expected PSN.
fn connect_with_wrong_psn(a: &Side, b: &Side, offset: i64) -> (QueuePair, QueuePair) {
    let build = |s: &Side| {
        s.pd.create_qp(&s.cq, &s.cq, QpType::Rc)
            .set_timeout(TIMEOUT)
            .set_retry_count(RETRY_CNT)
            .build()
            .unwrap()
    };
    let (pa, pb) = (build(a), build(b));
    let (ea, eb) = (pa.endpoint(&[]), pb.endpoint(&[]));
    let mut wrong = ea.clone();
    wrong.psn = (ea.psn as i64 + offset).rem_euclid(1 << 24) as u32;
    let qa = pa.handshake(&eb).unwrap();
    let qb = pb.handshake(&wrong).unwrap();
    assert_eq!(qa.query().unwrap().sq_psn, ea.psn);
    assert_eq!(qb.query().unwrap().rq_psn, wrong.psn);
    (qa, qb)
}

/// Posts `MESSAGES` SENDs (and receives for them) and waits for every send completion.
fn run(a: &Side, b: &Side, qa: &QueuePair, qb: &QueuePair) -> Vec<WorkCompletion> {
    let rb = b.pd.allocate(MESSAGES * 1024).unwrap();
    let la = a.pd.allocate(MESSAGES * 1024).unwrap();
    for i in 0..MESSAGES {
        qb.post_recv(&[RecvRequest::new(
            100 + i as u64,
            rb.slice(i * 1024..(i + 1) * 1024),
        )])
        .unwrap();
    }
    let sends: Vec<SendRequest<'_>> = (0..MESSAGES)
        .map(|i| SendRequest::send(i as u64, la.slice(i * 1024..(i + 1) * 1024)))
        .collect();
    qa.post_send(&sends).unwrap();
    let mut out = Vec::new();
    let mut wcs = [empty_wc(); 16];
    // (RETRY_CNT + 1) timeouts of 4.2 ms, with room for a loaded machine.
    while out.len() < MESSAGES {
        let got = a.cq.wait(&mut wcs, Duration::from_secs(20));
        assert!(
            !got.is_empty(),
            "{} of {MESSAGES} completions within 20 s",
            out.len()
        );
        out.extend(got.iter().filter(|w| w.qp_num == qa.qpn()).copied());
    }
    out
}

fn counters(q: &QueuePair) -> QpCounters {
    q.counters().expect("the QP exists")
}

fn assert_retry_exceeded(wcs: &[WorkCompletion], qa: &QueuePair) {
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr, "{wcs:?}");
    assert!(
        wcs[1..].iter().all(|w| w.status == WcStatus::WrFlushErr),
        "{wcs:?}"
    );
    let c = counters(qa);
    assert_eq!(c.local_ack_timeouts, RETRY_CNT as u64 + 1, "{c:?}");
    assert_eq!(c.seq_naks_received, 0, "{c:?}");
    assert_eq!(qa.state(), Some(QpState::Err));
}

#[test]
fn a_requester_ahead_gets_one_nak_then_retry_exceeded_over_loopback() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    // b expects a PSN 1000 before a's first: a is 1000 ahead.
    let (qa, qb) = connect_with_wrong_psn(&a, &b, -1000);
    let wcs = run(&a, &b, &qa, &qb);
    assert_retry_exceeded(&wcs, &qa);
    let r = counters(&qb);
    assert_eq!(r.seq_naks_sent, 1, "{r:?}");
    assert!(r.out_of_sequence_drops >= MESSAGES as u64, "{r:?}");
    assert_eq!(r.duplicates_received, 0, "{r:?}");
    // The NAK reached the requester and was set aside: it names a PSN never sent.
    assert!(counters(&qa).stale_responses >= 1);
}

#[test]
fn a_requester_behind_sends_only_duplicates_then_retry_exceeded_over_loopback() {
    let (a, b) = (side("127.0.0.3:0"), side("127.0.0.4:0"));
    // b expects a PSN 1000 after a's first: a is 1000 behind.
    let (qa, qb) = connect_with_wrong_psn(&a, &b, 1000);
    let wcs = run(&a, &b, &qa, &qb);
    assert_retry_exceeded(&wcs, &qa);
    let r = counters(&qb);
    assert_eq!(r.seq_naks_sent, 0, "{r:?}");
    assert!(r.duplicates_received >= MESSAGES as u64, "{r:?}");
    // Nothing reached b's application.
    let mut wcs = [empty_wc(); 16];
    let got = b.cq.wait(&mut wcs, Duration::from_millis(50));
    assert!(
        got.iter()
            .all(|w| w.qp_num != qb.qpn() || w.status == WcStatus::WrFlushErr),
        "{got:?}"
    );
}
