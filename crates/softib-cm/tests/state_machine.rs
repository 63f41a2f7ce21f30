//! The CM state machine (IBA vol. 1 12.9) between two `Cm`s on a virtual clock: MADs move
//! through an in-memory link that can lose them, so every timer and retry rule is checked
//! at exact times.

use softib_cm::{
    exponent_ns, AcceptParams, Cm, CmConfig, CmEvent, CmState, ConnId, ConnectParams, Gid, Nanos,
    SidrParams, TimeoutPhase,
};
use softib_wire::cm::{attr, CmMessage, RejectReason, SidrStatus};

const A: Gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
const B: Gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2];
const SERVICE: u64 = 0x0106_4853;

struct Pair {
    a: Cm,
    b: Cm,
    now: Nanos,
    /// Attribute IDs sent so far, per side, in order.
    a_sent: Vec<u16>,
    b_sent: Vec<u16>,
}

fn attr_of(mad: &[u8]) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

impl Pair {
    fn new() -> Pair {
        let mut ca = CmConfig::new(A, 0x1111);
        ca.seed = 1;
        let mut cb = CmConfig::new(B, 0x2222);
        cb.seed = 2;
        Pair {
            a: Cm::new(ca),
            b: Cm::new(cb),
            now: 0,
            a_sent: Vec::new(),
            b_sent: Vec::new(),
        }
    }

    /// Moves every queued MAD across; `lose` says which to drop (by sender and attribute).
    fn deliver(&mut self, mut lose: impl FnMut(bool, u16) -> bool) {
        loop {
            let mut moved = false;
            while let Some(t) = self.a.poll_transmit() {
                moved = true;
                let at = attr_of(&t.mad[..]);
                self.a_sent.push(at);
                assert_eq!(t.dest_gid, B);
                if !lose(true, at) {
                    self.b.handle_mad(self.now, A, t.pkey, &t.mad[..]);
                }
            }
            while let Some(t) = self.b.poll_transmit() {
                moved = true;
                let at = attr_of(&t.mad[..]);
                self.b_sent.push(at);
                assert_eq!(t.dest_gid, A);
                if !lose(false, at) {
                    self.a.handle_mad(self.now, B, t.pkey, &t.mad[..]);
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Advances the clock to the earliest timer of either side and fires it.
    fn next_timer(&mut self) -> Nanos {
        let t = [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .expect("a timer runs");
        self.now = t;
        self.a.handle_timeout(t);
        self.b.handle_timeout(t);
        t
    }
}

fn params(qpn: u32) -> ConnectParams {
    let mut p = ConnectParams::rdma_cm_rc(B, SERVICE, qpn, 0x123456);
    p.private_data[..5].copy_from_slice(b"hello");
    p
}

fn accept_params(qpn: u32) -> AcceptParams {
    let mut private_data = [0u8; 196];
    private_data[..3].copy_from_slice(b"yes");
    AcceptParams {
        qpn,
        starting_psn: 0x654321,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data,
    }
}

/// REQ waits: 4.096 us x 2^20 + 2 x 4.096 us x 2^18.
fn req_wait() -> Nanos {
    exponent_ns(20) + 2 * exponent_ns(18)
}

fn expect_request(cm: &mut Cm) -> (ConnId, Box<softib_wire::cm::CmReq>) {
    match cm.poll_event() {
        Some(CmEvent::ConnectRequest {
            conn, req, peer, ..
        }) => {
            assert_eq!(peer, A);
            (conn, req)
        }
        e => panic!("expected ConnectRequest, got {e:?}"),
    }
}

/// Runs a full establishment; returns (active id, passive id).
fn establish(p: &mut Pair) -> (ConnId, ConnId) {
    p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(p.now, &params(0x11)).unwrap();
    p.deliver(|_, _| false);
    let (b, _) = expect_request(&mut p.b);
    p.b.accept(p.now, b, &accept_params(0x22)).unwrap();
    p.deliver(|_, _| false);
    match p.a.poll_event() {
        Some(CmEvent::ConnectReply { conn, .. }) => assert_eq!(conn, a),
        e => panic!("{e:?}"),
    }
    p.a.ready_to_use(a, b"").unwrap();
    p.deliver(|_, _| false);
    assert!(matches!(p.b.poll_event(), Some(CmEvent::Established { conn, .. }) if conn == b));
    (a, b)
}

#[test]
fn connect_accept_rtu_establishes_both_sides_with_each_others_qp_and_psn() {
    let mut p = Pair::new();
    let l = p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    assert_eq!(p.a.state(a), Some(CmState::ReqSent));
    p.deliver(|_, _| false);
    let (b, req) = match p.b.poll_event() {
        Some(CmEvent::ConnectRequest {
            conn,
            listener,
            req,
            ..
        }) => {
            assert_eq!(listener, l);
            (conn, req)
        }
        e => panic!("{e:?}"),
    };
    assert_eq!(req.local_qpn, 0x11);
    assert_eq!(req.starting_psn, 0x123456);
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(req.primary_path.local_gid, A);
    assert_eq!(req.primary_path.remote_gid, B);
    assert_eq!(p.b.state(b), Some(CmState::ReqRcvd));
    assert_eq!(p.b.half_open_count(), 1);
    p.b.accept(0, b, &accept_params(0x22)).unwrap();
    assert_eq!(p.b.state(b), Some(CmState::RepSent));
    p.deliver(|_, _| false);
    let rep = match p.a.poll_event() {
        Some(CmEvent::ConnectReply { conn, rep }) => {
            assert_eq!(conn, a);
            rep
        }
        e => panic!("{e:?}"),
    };
    assert_eq!((rep.local_qpn, rep.starting_psn), (0x22, 0x654321));
    assert_eq!(&rep.private_data[..3], b"yes");
    assert_eq!(rep.remote_comm_id, a.0);
    assert_eq!(p.a.state(a), Some(CmState::RepRcvd));
    p.a.ready_to_use(a, b"rtu").unwrap();
    p.deliver(|_, _| false);
    match p.b.poll_event() {
        Some(CmEvent::Established { conn, private_data }) => {
            assert_eq!(conn, b);
            assert_eq!(&private_data[..3], b"rtu");
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(p.a.state(a), Some(CmState::Established));
    assert_eq!(p.b.state(b), Some(CmState::Established));
    assert_eq!(p.b.half_open_count(), 0);
    assert_eq!(p.a.info(a).unwrap().remote_qpn, 0x22);
    assert_eq!(p.b.info(b).unwrap().remote_qpn, 0x11);
    assert_eq!(p.a_sent, [attr::REQ, attr::RTU]);
    assert_eq!(p.b_sent, [attr::REP]);
    // Nothing waits on a timer once established.
    assert_eq!(p.a.poll_timeout(), None);
    assert_eq!(p.b.poll_timeout(), None);
}

#[test]
fn consumer_reject_reaches_the_active_side_as_reason_28_with_private_data() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    p.deliver(|_, _| false);
    let (b, _) = expect_request(&mut p.b);
    p.b.reject(b, RejectReason::ConsumerReject, b"go away")
        .unwrap();
    assert_eq!(p.b.state(b), None);
    p.deliver(|_, _| false);
    match p.a.poll_event() {
        Some(CmEvent::Rejected {
            conn,
            reason,
            private_data,
            ..
        }) => {
            assert_eq!(conn, a);
            assert_eq!(reason, RejectReason::ConsumerReject);
            assert_eq!(reason.code(), 28);
            assert_eq!(&private_data[..7], b"go away");
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(p.a.state(a), None);
    assert_eq!(p.a.poll_timeout(), None, "no REQ retry after a REJ");
}

#[test]
fn req_to_an_unbound_service_is_rejected_with_invalid_service_id() {
    let mut p = Pair::new();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    p.deliver(|_, _| false);
    assert_eq!(p.b.poll_event(), None);
    assert_eq!(p.b.connection_count(), 0, "no state for an unbound service");
    assert_eq!(p.b.counters().rejected_no_listener, 1);
    match p.a.poll_event() {
        Some(CmEvent::Rejected { conn, reason, .. }) => {
            assert_eq!(conn, a);
            assert_eq!(reason, RejectReason::InvalidServiceId);
            assert_eq!(reason.code(), 8);
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn lost_req_is_resent_after_the_response_timeout_and_then_connects() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    p.deliver(|from_a, at| from_a && at == attr::REQ);
    assert_eq!(p.b.poll_event(), None);
    assert_eq!(p.a.poll_timeout(), Some(req_wait()));
    assert_eq!(p.next_timer(), req_wait());
    p.deliver(|_, _| false);
    assert_eq!(p.a.counters().retransmits, 1);
    let (b, _) = expect_request(&mut p.b);
    p.b.accept(p.now, b, &accept_params(0x22)).unwrap();
    p.deliver(|_, _| false);
    assert!(matches!(
        p.a.poll_event(),
        Some(CmEvent::ConnectReply { .. })
    ));
    assert_eq!(p.a.state(a), Some(CmState::RepRcvd));
}

#[test]
fn lost_rep_is_resent_when_the_req_is_retried_and_a_duplicate_req_makes_no_new_connection() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    p.deliver(|_, _| false);
    let (b, _) = expect_request(&mut p.b);
    p.b.accept(0, b, &accept_params(0x22)).unwrap();
    p.deliver(|from_a, at| !from_a && at == attr::REP);
    assert_eq!(p.a.poll_event(), None);
    // The active side's REQ timer (4.3 s + 2.1 s) runs out before the passive side's REP
    // timer (the REQ's local CM response timeout 20 plus 2 x 2^18): both wait the same
    // here, so the first timer of either fires. Whichever it is, a REP gets through.
    p.next_timer();
    p.deliver(|_, _| false);
    assert_eq!(
        p.b.connection_count(),
        1,
        "the duplicate REQ made no second connection"
    );
    assert!(p.b.counters().duplicate_reqs + p.b.counters().retransmits >= 1);
    assert!(matches!(p.a.poll_event(), Some(CmEvent::ConnectReply { conn, .. }) if conn == a));
    assert_eq!(p.b.poll_event(), None, "no second ConnectRequest");
    // The REP timer and the REQ timer fire together here: one REP from the timer, one
    // for the duplicate REQ.
    assert!(p.b_sent.iter().filter(|&&x| x == attr::REP).count() >= 2);
}

#[test]
fn duplicate_req_while_rep_sent_gets_the_rep_again() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    p.a.connect(0, &params(0x11)).unwrap();
    // Capture the REQ so it can be replayed.
    let req = p.a.poll_transmit().unwrap();
    p.b.handle_mad(0, A, 0xffff, &req.mad[..]);
    let (b, _) = expect_request(&mut p.b);
    p.b.accept(0, b, &accept_params(0x22)).unwrap();
    let rep1 = p.b.poll_transmit().unwrap();
    p.b.handle_mad(1, A, 0xffff, &req.mad[..]);
    let rep2 = p.b.poll_transmit().expect("REP resent on a duplicate REQ");
    assert_eq!(rep1.mad, rep2.mad);
    assert_eq!(p.b.counters().duplicate_reqs, 1);
    assert_eq!(p.b.poll_event(), None);
}

#[test]
fn retries_exhausted_give_an_unreachable_event_after_exactly_max_cm_retries_resends() {
    let mut p = Pair::new();
    let mut params = params(0x11);
    params.max_cm_retries = 3;
    let a = p.a.connect(0, &params).unwrap();
    p.deliver(|_, _| true); // the peer is gone
    for _ in 0..3 {
        p.next_timer();
        p.deliver(|_, _| true);
    }
    assert_eq!(p.a.poll_event(), None);
    assert_eq!(p.next_timer(), 4 * req_wait());
    match p.a.poll_event() {
        Some(CmEvent::Unreachable { conn, phase }) => {
            assert_eq!(conn, a);
            assert_eq!(phase, TimeoutPhase::Request);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(p.a_sent, [attr::REQ; 4]);
    assert_eq!(p.a.counters().timeouts, 1);
    assert_eq!(p.a.state(a), None);
    assert_eq!(p.a.poll_timeout(), None);
}

#[test]
fn mra_extends_the_wait_for_the_rep_beyond_the_response_timeout() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    p.deliver(|_, _| false);
    let (b, _) = expect_request(&mut p.b);
    p.b.send_mra(b, 24).unwrap(); // ~68.7 s
    p.deliver(|_, _| false);
    assert_eq!(p.a.state(a), Some(CmState::MraReqRcvd));
    assert_eq!(p.b.state(b), Some(CmState::MraReqSent));
    let extended = exponent_ns(24) + exponent_ns(18);
    assert_eq!(p.a.poll_timeout(), Some(extended));
    assert!(extended > req_wait());
    // Well past the normal REQ timeout, the consumer accepts: no REQ was resent.
    p.now = 3 * req_wait();
    p.a.handle_timeout(p.now);
    p.b.accept(p.now, b, &accept_params(0x22)).unwrap();
    p.deliver(|_, _| false);
    assert_eq!(p.a_sent, [attr::REQ]);
    assert!(matches!(
        p.a.poll_event(),
        Some(CmEvent::ConnectReply { .. })
    ));
}

#[test]
fn duplicate_req_after_mra_gets_the_mra_again() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    p.a.connect(0, &params(0x11)).unwrap();
    let req = p.a.poll_transmit().unwrap();
    p.b.handle_mad(0, A, 0xffff, &req.mad[..]);
    let (b, _) = expect_request(&mut p.b);
    p.b.send_mra(b, 20).unwrap();
    let mra = p.b.poll_transmit().unwrap();
    assert_eq!(attr_of(&mra.mad[..]), attr::MRA);
    p.b.handle_mad(1, A, 0xffff, &req.mad[..]);
    assert_eq!(p.b.poll_transmit().unwrap().mad, mra.mad);
}

#[test]
fn lost_rtu_is_resent_when_the_rep_is_retried() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    p.deliver(|_, _| false);
    let (b, _) = expect_request(&mut p.b);
    p.b.accept(0, b, &accept_params(0x22)).unwrap();
    p.deliver(|_, _| false);
    p.a.poll_event();
    p.a.ready_to_use(a, b"").unwrap();
    p.deliver(|from_a, at| from_a && at == attr::RTU);
    assert_eq!(p.b.state(b), Some(CmState::RepSent));
    p.next_timer(); // the passive REP timer
    p.deliver(|_, _| false);
    assert_eq!(p.b_sent, [attr::REP, attr::REP]);
    assert_eq!(p.a_sent, [attr::REQ, attr::RTU, attr::RTU]);
    assert!(matches!(
        p.b.poll_event(),
        Some(CmEvent::Established { .. })
    ));
}

#[test]
fn passive_side_gives_up_on_a_missing_rtu_and_rejects_with_timeout() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    let mut params = params(0x11);
    params.max_cm_retries = 2;
    p.a.connect(0, &params).unwrap();
    p.deliver(|_, _| false);
    let (b, _) = expect_request(&mut p.b);
    p.b.accept(0, b, &accept_params(0x22)).unwrap();
    p.deliver(|_, _| false);
    // A's consumer dies before moving its QP: no RTU ever comes.
    assert!(matches!(
        p.a.poll_event(),
        Some(CmEvent::ConnectReply { .. })
    ));
    for _ in 0..3 {
        p.next_timer();
        p.deliver(|_, _| false);
    }
    match p.b.poll_event() {
        Some(CmEvent::Unreachable { conn, phase }) => {
            assert_eq!(conn, b);
            assert_eq!(phase, TimeoutPhase::Reply);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(p.b_sent, [attr::REP, attr::REP, attr::REP, attr::REJ]);
    assert_eq!(p.b.half_open_count(), 0);
    // The REJ (reason timeout) ends the active side too.
    assert!(matches!(
        p.a.poll_event(),
        Some(CmEvent::Rejected {
            reason: RejectReason::Timeout,
            ..
        })
    ));
}

fn disconnect_from(active_disconnects: bool) {
    let mut p = Pair::new();
    let (a, b) = establish(&mut p);
    let (first_id, second_id) = if active_disconnects { (a, b) } else { (b, a) };
    if active_disconnects {
        p.a.disconnect(p.now, a, b"bye").unwrap();
    } else {
        p.b.disconnect(p.now, b, b"bye").unwrap();
    }
    p.deliver(|_, _| false);
    let (initiator, responder) = if active_disconnects {
        (&mut p.a, &mut p.b)
    } else {
        (&mut p.b, &mut p.a)
    };
    match responder.poll_event() {
        Some(CmEvent::Disconnected {
            conn,
            by_peer,
            private_data,
        }) => {
            assert_eq!(conn, second_id);
            assert!(by_peer);
            assert_eq!(&private_data[..3], b"bye");
        }
        e => panic!("{e:?}"),
    }
    match initiator.poll_event() {
        Some(CmEvent::Disconnected { conn, by_peer, .. }) => {
            assert_eq!(conn, first_id);
            assert!(!by_peer);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(initiator.state(first_id), Some(CmState::TimeWait));
    assert_eq!(responder.state(second_id), Some(CmState::TimeWait));
    // TIMEWAIT ends on its timer on both sides.
    while p.a.poll_timeout().is_some() || p.b.poll_timeout().is_some() {
        p.next_timer();
    }
    let mut exits = 0;
    for cm in [&mut p.a, &mut p.b] {
        while let Some(e) = cm.poll_event() {
            assert!(matches!(e, CmEvent::TimewaitExit { .. }), "{e:?}");
            exits += 1;
        }
        assert_eq!(cm.connection_count(), 0);
    }
    assert_eq!(exits, 2);
}

#[test]
fn dreq_from_the_active_side_disconnects_both() {
    disconnect_from(true);
}

#[test]
fn dreq_from_the_passive_side_disconnects_both() {
    disconnect_from(false);
}

#[test]
fn lost_drep_is_resent_when_the_dreq_is_retried_in_timewait() {
    let mut p = Pair::new();
    let (a, _b) = establish(&mut p);
    p.a.disconnect(p.now, a, b"").unwrap();
    p.deliver(|from_a, at| !from_a && at == attr::DREP);
    assert_eq!(p.a.state(a), Some(CmState::DreqSent));
    // B leaves TIMEWAIT before A's DREQ timer fires; B answers the resent DREQ with a DREP
    // either way (from TIMEWAIT, or as a DREQ for a connection it no longer knows).
    while p.a.state(a) == Some(CmState::DreqSent) {
        p.next_timer();
        p.deliver(|_, _| false);
    }
    assert_eq!(p.b_sent, [attr::REP, attr::DREP, attr::DREP]);
    assert_eq!(p.a.state(a), Some(CmState::TimeWait));
}

#[test]
fn peer_dies_mid_connection_so_the_dreq_times_out_and_the_connection_still_closes() {
    let mut p = Pair::new();
    let (a, _) = establish(&mut p);
    p.a.disconnect(p.now, a, b"").unwrap();
    for _ in 0..=15 {
        p.deliver(|_, _| true);
        assert_eq!(p.a.state(a), Some(CmState::DreqSent));
        p.next_timer();
    }
    match p.a.poll_event() {
        Some(CmEvent::Disconnected { conn, by_peer, .. }) => {
            assert_eq!(conn, a);
            assert!(!by_peer);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(p.a.state(a), Some(CmState::TimeWait));
    p.next_timer();
    assert!(matches!(
        p.a.poll_event(),
        Some(CmEvent::TimewaitExit { .. })
    ));
    assert_eq!(p.a.connection_count(), 0);
}

#[test]
fn peer_dies_before_answering_so_the_connect_fails_unreachable() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    p.deliver(|_, _| false);
    let _ = expect_request(&mut p.b);
    // B's process dies: it never accepts and sends nothing more.
    for _ in 0..16 {
        p.a.poll_transmit();
        let t = p.a.poll_timeout().unwrap();
        p.now = t;
        p.a.handle_timeout(t);
    }
    assert!(matches!(p.a.poll_event(), Some(CmEvent::Unreachable { conn, .. }) if conn == a));
}

#[test]
fn req_flood_is_bounded_by_max_half_open_and_rejected_with_no_resources() {
    let mut cfg = CmConfig::new(B, 0x2222);
    cfg.max_half_open = 16;
    let mut b = Cm::new(cfg);
    b.listen(SERVICE).unwrap();
    let mut a = Cm::new(CmConfig::new(A, 0x1111));
    for _ in 0..10_000 {
        a.connect(0, &params(0x11)).unwrap();
        let t = a.poll_transmit().unwrap();
        b.handle_mad(0, A, 0xffff, &t.mad[..]);
    }
    assert_eq!(b.connection_count(), 16);
    assert_eq!(b.half_open_count(), 16);
    assert_eq!(b.counters().rejected_no_resources, 10_000 - 16);
    let mut requests = 0;
    while let Some(e) = b.poll_event() {
        assert!(matches!(e, CmEvent::ConnectRequest { .. }));
        requests += 1;
    }
    assert_eq!(requests, 16);
    let mut rejects = 0;
    while let Some(t) = b.poll_transmit() {
        let (_, m) = CmMessage::parse(&t.mad[..]).unwrap();
        match m {
            CmMessage::Rej(r) => assert_eq!(r.reason, RejectReason::NoResources),
            m => panic!("{m:?}"),
        }
        rejects += 1;
    }
    // The send queue is bounded too (4096 by default); the rest were counted.
    assert_eq!(rejects + b.counters().tx_queue_drops, 10_000 - 16);
    assert!(rejects <= 4096);
}

#[test]
fn malformed_and_stray_mads_are_dropped_and_counted_without_state() {
    let mut p = Pair::new();
    let (a, _) = establish(&mut p);
    let before = p.b.counters();
    let mut req =
        p.a.connect(p.now, &params(0x33))
            .map(|_| p.a.poll_transmit().unwrap())
            .unwrap();
    // Truncated, wrong class, wrong class version, wrong method, unknown attribute.
    p.b.handle_mad(0, A, 0xffff, &req.mad[..100]);
    let mut bad = *req.mad;
    bad[1] = 0x04;
    p.b.handle_mad(0, A, 0xffff, &bad);
    let mut bad = *req.mad;
    bad[2] = 1;
    p.b.handle_mad(0, A, 0xffff, &bad);
    let mut bad = *req.mad;
    bad[3] = 0x81;
    p.b.handle_mad(0, A, 0xffff, &bad);
    let mut bad = *req.mad;
    bad[17] = 0x42;
    p.b.handle_mad(0, A, 0xffff, &bad);
    // Reserved transport type in a REQ.
    req.mad[24 + 43] |= 0b110;
    p.b.handle_mad(0, A, 0xffff, &req.mad[..]);
    let c = p.b.counters();
    assert_eq!(c.malformed_drops - before.malformed_drops, 6);
    assert_eq!(c.rx_mads - before.rx_mads, 6);
    assert_eq!(p.b.connection_count(), 1);
    assert_eq!(p.b.poll_event(), None);
    assert!(
        p.b.poll_transmit().is_none(),
        "nothing answers a malformed MAD"
    );
    // An RTU for a connection that does not exist, and one from the wrong peer.
    let rtu = CmMessage::Rtu(softib_wire::cm::CmRtu {
        local_comm_id: 5,
        remote_comm_id: 0xdead_beef,
        private_data: [0; 224],
    });
    p.b.handle_mad(0, A, 0xffff, &rtu.to_mad(1));
    let info = p.a.info(a).unwrap();
    let rtu = CmMessage::Rtu(softib_wire::cm::CmRtu {
        local_comm_id: a.0,
        remote_comm_id: info.remote_comm_id,
        private_data: [0; 224],
    });
    p.b.handle_mad(0, [9; 16], 0xffff, &rtu.to_mad(1));
    assert_eq!(p.b.counters().stale_drops - before.stale_drops, 2);
    // A DREQ for an unknown connection still gets a DREP (so the peer stops resending).
    let dreq = CmMessage::Dreq(softib_wire::cm::CmDreq {
        local_comm_id: 77,
        remote_comm_id: 0x1234_5678,
        remote_qpn: 1,
        private_data: [0; 220],
    });
    p.b.handle_mad(0, A, 0xffff, &dreq.to_mad(9));
    let t = p.b.poll_transmit().unwrap();
    match CmMessage::parse(&t.mad[..]).unwrap().1 {
        CmMessage::Drep(d) => {
            assert_eq!((d.local_comm_id, d.remote_comm_id), (0x1234_5678, 77));
        }
        m => panic!("{m:?}"),
    }
}

#[test]
fn listening_twice_on_one_service_id_fails() {
    let mut p = Pair::new();
    let l = p.b.listen(SERVICE).unwrap();
    assert!(p.b.listen(SERVICE).is_err());
    p.b.stop_listening(l).unwrap();
    p.b.listen(SERVICE).unwrap();
}

#[test]
fn destroying_a_pending_request_rejects_it_as_consumer_reject() {
    let mut p = Pair::new();
    p.b.listen(SERVICE).unwrap();
    let a = p.a.connect(0, &params(0x11)).unwrap();
    p.deliver(|_, _| false);
    let (b, _) = expect_request(&mut p.b);
    p.b.destroy(0, b).unwrap();
    p.deliver(|_, _| false);
    assert!(matches!(
        p.a.poll_event(),
        Some(CmEvent::Rejected { conn, reason: RejectReason::ConsumerReject, .. }) if conn == a
    ));
    assert_eq!(p.b.half_open_count(), 0);
}

#[test]
fn sidr_resolves_a_ud_service_and_unbound_services_say_not_supported() {
    let mut p = Pair::new();
    let udp_service = 0x0111_1234;
    p.b.listen(udp_service).unwrap();
    let sidr = |service_id| SidrParams {
        remote_gid: B,
        service_id,
        pkey: 0xffff,
        timeout: 20,
        max_retries: 3,
        private_data: [0; 216],
    };
    let id = p.a.sidr_request(0, &sidr(udp_service));
    p.deliver(|_, _| false);
    let rid = match p.b.poll_event() {
        Some(CmEvent::SidrRequest { id, req, .. }) => {
            assert_eq!(req.service_id, udp_service);
            id
        }
        e => panic!("{e:?}"),
    };
    p.b.sidr_reply(rid, SidrStatus::Valid, 0x42, 0x1111_2222, b"ud")
        .unwrap();
    p.deliver(|_, _| false);
    match p.a.poll_event() {
        Some(CmEvent::SidrReply { id: got, rep }) => {
            assert_eq!(got, id);
            assert_eq!(
                (rep.status, rep.qpn, rep.qkey),
                (SidrStatus::Valid, 0x42, 0x1111_2222)
            );
            assert_eq!(&rep.private_data[..2], b"ud");
        }
        e => panic!("{e:?}"),
    }
    p.a.sidr_request(p.now, &sidr(0x0111_9999));
    p.deliver(|_, _| false);
    assert!(matches!(
        p.a.poll_event(),
        Some(CmEvent::SidrReply { rep, .. }) if rep.status == SidrStatus::ServiceIdNotSupported
    ));
    assert_eq!(p.a.poll_timeout(), None);
}

#[test]
fn comm_ids_carry_the_configured_prefix_and_still_connect() {
    // softib-net puts the slot of a process sharing an address into the top bits.
    let mut p = Pair::new();
    let mut ca = CmConfig::new(A, 0x1111);
    ca.seed = 1;
    ca.comm_id_prefix = Some((6, 37));
    let mut cb = CmConfig::new(B, 0x2222);
    cb.seed = 2;
    cb.comm_id_prefix = Some((6, 5));
    p.a = Cm::new(ca);
    p.b = Cm::new(cb);
    let (a, b) = establish(&mut p);
    assert_eq!(a.0 >> 26, 37, "{:#x}", a.0);
    assert_eq!(b.0 >> 26, 5, "{:#x}", b.0);
    let mut ids: Vec<u32> = (0..200)
        .map(|i| p.a.connect(p.now, &params(0x100 + i)).unwrap().0)
        .collect();
    assert!(ids.iter().all(|id| id >> 26 == 37), "{ids:x?}");
    ids.push(a.0);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 201, "distinct IDs under one prefix");
    let s = p.a.sidr_request(
        p.now,
        &SidrParams {
            remote_gid: B,
            service_id: SERVICE,
            pkey: 0xffff,
            timeout: 20,
            max_retries: 3,
            private_data: [0; 216],
        },
    );
    assert_eq!(s.0 >> 26, 37, "SIDR request IDs carry it too");
}
