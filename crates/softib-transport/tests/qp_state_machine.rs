//! modify_qp attribute rules (ibv_modify_qp(3) / IBA 11.2.5.2), flush on ERR, SQD drain,
//! CQ overflow and notification.

mod common;
use common::*;
use softib_transport::harness::{Pair, QpOptions};
use softib_transport::{
    AccessFlags, AsyncEvent, Device, DeviceConfig, Mtu, QpAttr, QpAttrMask as M, QpCap, QpInitAttr,
    QpState, QpType, VerbsError, WcStatus, WrOpcode,
};

fn fresh(qp_type: QpType) -> (Device, u32) {
    let mut d = Device::new(DeviceConfig::default(), 1);
    let pd = d.alloc_pd();
    let cq = d.create_cq(16).unwrap();
    let qpn = d
        .create_qp(
            pd,
            QpInitAttr {
                qp_type,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: false,
            },
        )
        .unwrap();
    (d, qpn)
}

fn init(d: &mut Device, qpn: u32) {
    let a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        ..Default::default()
    };
    d.modify_qp(
        0,
        qpn,
        &a,
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    )
    .unwrap();
}

#[test]
fn reset_to_init_names_the_missing_attribute() {
    let (mut d, qpn) = fresh(QpType::Rc);
    let a = QpAttr {
        qp_state: QpState::Init,
        ..Default::default()
    };
    let e = d
        .modify_qp(0, qpn, &a, M::STATE | M::PKEY_INDEX | M::PORT)
        .unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::MissingAttribute {
                attr: "ACCESS_FLAGS",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("ACCESS_FLAGS"));
    let (mut u, uqpn) = fresh(QpType::Ud);
    let e = u
        .modify_qp(
            0,
            uqpn,
            &a,
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        )
        .unwrap_err();
    assert!(
        matches!(e, VerbsError::MissingAttribute { attr: "QKEY", .. }),
        "{e}"
    );
    assert_eq!(d.qp_state(qpn), Some(QpState::Reset), "nothing changed");
}

#[test]
fn init_to_rtr_rejects_unexpected_and_invalid_attributes() {
    let (mut d, qpn) = fresh(QpType::Rc);
    init(&mut d, qpn);
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::M1024,
        dest_qp_num: 0x22,
        ..Default::default()
    };
    let rtr = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    let e = d.modify_qp(0, qpn, &a, rtr | M::SQ_PSN).unwrap_err();
    assert!(
        matches!(e, VerbsError::UnexpectedAttribute { attr: "SQ_PSN", .. }),
        "{e}"
    );
    let e = d
        .modify_qp(0, qpn, &a, rtr.difference(M::MIN_RNR_TIMER))
        .unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::MissingAttribute {
                attr: "MIN_RNR_TIMER",
                ..
            }
        ),
        "{e}"
    );
    a.rq_psn = 1 << 24;
    let e = d.modify_qp(0, qpn, &a, rtr).unwrap_err();
    assert!(
        matches!(e, VerbsError::InvalidAttribute { attr: "rq_psn", .. }),
        "{e}"
    );
    a.rq_psn = 5;
    d.modify_qp(0, qpn, &a, rtr).unwrap();
    assert_eq!(d.qp_state(qpn), Some(QpState::Rtr));
    let e = d
        .modify_qp(
            0,
            qpn,
            &QpAttr {
                qp_state: QpState::Init,
                ..Default::default()
            },
            M::STATE,
        )
        .unwrap_err();
    assert!(matches!(e, VerbsError::InvalidTransition { .. }), "{e}");
}

#[test]
fn uc_rtr_to_rts_needs_only_sq_psn() {
    let (mut d, qpn) = fresh(QpType::Uc);
    init(&mut d, qpn);
    let a = QpAttr {
        qp_state: QpState::Rtr,
        ..Default::default()
    };
    d.modify_qp(
        0,
        qpn,
        &a,
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
    )
    .unwrap();
    let a = QpAttr {
        qp_state: QpState::Rts,
        ..Default::default()
    };
    let e = d
        .modify_qp(0, qpn, &a, M::STATE | M::SQ_PSN | M::TIMEOUT)
        .unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::UnexpectedAttribute {
                attr: "TIMEOUT",
                ..
            }
        ),
        "{e}"
    );
    d.modify_qp(0, qpn, &a, M::STATE | M::SQ_PSN).unwrap();
    assert_eq!(d.qp_state(qpn), Some(QpState::Rts));
}

#[test]
fn cur_state_mismatch_is_refused() {
    let (mut d, qpn) = fresh(QpType::Rc);
    let a = QpAttr {
        qp_state: QpState::Err,
        cur_qp_state: QpState::Rts,
        ..Default::default()
    };
    let e = d
        .modify_qp(0, qpn, &a, M::STATE | M::CUR_STATE)
        .unwrap_err();
    assert!(matches!(e, VerbsError::CurrentStateMismatch { .. }), "{e}");
}

#[test]
fn entering_err_flushes_outstanding_work_requests() {
    let mut pair = Pair::new(30);
    let (a, b) = pair.connect(&QpOptions::default());
    // Requests never reach the peer.
    pair.filter = Some(Box::new(|_, _, _| softib_transport::harness::Verdict::Drop));
    for i in 0..3 {
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, i, &a, 0, &b, 0, 10))
            .unwrap();
    }
    pair.dev(0).post_recv(a.qpn, &recv(50, &a, 0, 10)).unwrap();
    pair.step(1000);
    pair.dev(0)
        .modify_qp(
            0,
            a.qpn,
            &QpAttr {
                qp_state: QpState::Err,
                ..Default::default()
            },
            M::STATE,
        )
        .unwrap();
    let wcs = pair.completions(0, &a);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![
            (0, WcStatus::WrFlushErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr),
            (50, WcStatus::WrFlushErr),
        ]
    );
    // Posting in ERR completes at once with a flush status.
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 9, &a, 0, &b, 0, 10))
        .unwrap();
    assert_eq!(pair.completions(0, &a)[0].status, WcStatus::WrFlushErr);
    // ERR -> RESET -> INIT works again.
    pair.dev(0)
        .modify_qp(
            0,
            a.qpn,
            &QpAttr {
                qp_state: QpState::Reset,
                ..Default::default()
            },
            M::STATE,
        )
        .unwrap();
    assert_eq!(pair.device(0).qp_state(a.qpn), Some(QpState::Reset));
}

#[test]
fn sqd_drains_then_raises_sq_drained() {
    let mut pair = Pair::new(31);
    let (a, b) = pair.connect(&QpOptions::default());
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 5000))
        .unwrap();
    pair.flush_transmits();
    let attr = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..Default::default()
    };
    pair.dev(0)
        .modify_qp(0, a.qpn, &attr, M::STATE | M::EN_SQD_ASYNC_NOTIFY)
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 2, &a, 0, &b, 0, 10))
        .unwrap();
    assert!(pair.dev(0).query_qp(a.qpn).unwrap().sq_draining);
    pair.drive(SEC);
    let wcs = pair.completions(0, &a);
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![1],
        "WR 2 waits in SQD"
    );
    let mut events = Vec::new();
    while let Some(e) = pair.dev(0).poll_event() {
        events.push(e);
    }
    assert!(events.contains(&AsyncEvent::SqDrained(a.qpn)), "{events:?}");
    pair.dev(0)
        .modify_qp(
            0,
            a.qpn,
            &QpAttr {
                qp_state: QpState::Rts,
                ..Default::default()
            },
            M::STATE,
        )
        .unwrap();
    pair.drive(SEC);
    assert_eq!(pair.completions(0, &a)[0].wr_id, 2);
}

#[test]
fn cq_overflow_is_reported_never_silent() {
    let mut pair = Pair::new(32);
    let (a, b) = pair.connect(&QpOptions {
        cq_depth: 4,
        ..Default::default()
    });
    pair.dev(0).req_notify_cq(a.send_cq, false);
    for i in 0..6 {
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, i, &a, 0, &b, 0, 8))
            .unwrap();
    }
    pair.drive(SEC);
    let mut events = Vec::new();
    while let Some(e) = pair.dev(0).poll_event() {
        events.push(e);
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| **e == AsyncEvent::CqNotify(a.send_cq))
            .count(),
        1
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| **e == AsyncEvent::CqOverflow(a.send_cq))
            .count(),
        2
    );
    assert_eq!(pair.device(0).cq_overflows(a.send_cq), 2);
    assert_eq!(pair.device(0).counters().cq_overflows, 2);
    assert_eq!(pair.completions(0, &a).len(), 4);
}

#[test]
fn fenced_write_waits_for_the_prior_read() {
    let mut pair = Pair::new(33);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions::default());
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaRead, 1, &a, 0, &b, 0, 4096))
        .unwrap();
    let mut w = wr(WrOpcode::RdmaWrite, 2, &a, 8192, &b, 8192, 16);
    w.flags |= softib_transport::SendFlags::FENCE;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let wcs = wait_send(&mut pair, &a, 2, SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let write_time = pair
        .trace_log
        .iter()
        .find(|e| e.from == 0 && e.opcode == 0x0A)
        .unwrap()
        .time;
    let last_resp = pair
        .trace_log
        .iter()
        .filter(|e| e.from == 1 && e.opcode == 0x0F)
        .map(|e| e.time)
        .max()
        .unwrap();
    assert!(
        write_time >= last_resp + pair.latency,
        "write at {write_time}, read done at {}",
        last_resp + pair.latency
    );
}

#[test]
fn max_rd_atomic_bounds_outstanding_reads() {
    let mut pair = Pair::new(34);
    pair.trace = true;
    let (a, b) = pair.connect(&QpOptions {
        max_rd_atomic: 1,
        ..Default::default()
    });
    for i in 0..3 {
        pair.dev(0)
            .post_send(
                0,
                a.qpn,
                &wr(WrOpcode::RdmaRead, i, &a, i * 4096, &b, 0, 100),
            )
            .unwrap();
    }
    let wcs = wait_send(&mut pair, &a, 3, SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let times: Vec<u64> = pair
        .trace_log
        .iter()
        .filter(|e| e.from == 0)
        .map(|e| e.time)
        .collect();
    assert_eq!(
        times,
        vec![0, 2 * pair.latency, 4 * pair.latency],
        "one read at a time"
    );
}

#[test]
fn fixture_reaches_every_state() {
    let (dev, qps) = softib_transport::harness::fixture_all_states(1);
    assert_eq!(qps.len(), 20);
    for q in qps {
        assert_eq!(dev.qp_state(q.qpn), Some(q.state), "{:?}", q.qp_type);
    }
}

#[test]
fn resources_are_released_in_dependency_order() {
    use softib_transport::{AhAttr, SrqAttr, VecMemory};
    let mut d = Device::new(DeviceConfig::default(), 3);
    let pd = d.alloc_pd();
    let cq = d.create_cq(8).unwrap();
    let srq = d
        .create_srq(
            pd,
            SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let ah = d.create_ah(pd, AhAttr::default()).unwrap();
    let mr = d
        .reg_mr(
            pd,
            Box::new(VecMemory::zeroed(64)),
            0,
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
    let qpn = d
        .create_qp(
            pd,
            QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                srq: Some(srq),
                cap: QpCap::default(),
                sq_sig_all: false,
            },
        )
        .unwrap();
    assert!(matches!(d.dealloc_pd(pd), Err(VerbsError::InUse { .. })));
    assert!(matches!(d.destroy_srq(srq), Err(VerbsError::InUse { .. })));
    assert!(matches!(d.destroy_cq(cq), Err(VerbsError::InUse { .. })));
    d.destroy_qp(qpn).unwrap();
    d.destroy_srq(srq).unwrap();
    d.destroy_cq(cq).unwrap();
    d.destroy_ah(ah).unwrap();
    assert!(
        matches!(d.dealloc_pd(pd), Err(VerbsError::InUse { .. })),
        "the MR still uses it"
    );
    d.dereg_mr(mr.lkey).unwrap();
    d.dealloc_pd(pd).unwrap();
    assert!(matches!(
        d.create_cq(8)
            .map(|_| ())
            .and_then(|_| d.create_ah(pd, AhAttr::default()).map(|_| ())),
        Err(VerbsError::UnknownHandle { kind: "PD", .. })
    ));
}
