//! The object verbs API (`softib_net::verbs`) between two devices on loopback: owned and raw
//! memory regions, builders, batched posting, SRQs, completion channels.

use std::time::Duration;

use softib_net::driver::NetConfig;
use softib_net::oob::endpoint::Endpoint;
use softib_net::verbs::{
    CompletionQueue, Hca, ProtectionDomain, QueuePair, RecvRequest, SendRequest,
};
use softib_transport::harness::empty_wc;
use softib_transport::{
    AccessFlags, AsyncEvent, QpState, QpType, WcOpcode, WcStatus, WorkCompletion,
};

fn hca(addr: &str) -> Hca {
    let mut c = NetConfig::new(addr.parse().unwrap());
    c.seed = 0x5eed;
    Hca::open(c).unwrap()
}

/// Waits for `n` completions on `cq`, all successful.
fn wait_n(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let out = wait_n_any(cq, n);
    for wc in &out {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    out
}

/// Waits for `n` completions on `cq`, whatever their status.
fn wait_n_any(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wcs = [empty_wc(); 16];
    while out.len() < n {
        let got = cq.wait(&mut wcs, Duration::from_secs(20));
        assert!(
            !got.is_empty(),
            "{} of {n} completions within 20 s",
            out.len()
        );
        out.extend_from_slice(got);
    }
    out
}

struct Side {
    hca: Hca,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

fn side(addr: &str) -> Side {
    let hca = hca(addr);
    let pd = hca.alloc_pd();
    let cq = hca.create_cq().set_entries(64).build().unwrap();
    Side { hca, pd, cq }
}

/// Connects a QP of each side (RC unless told), exposing `expose` of each.
fn connect(
    a: &Side,
    b: &Side,
    qp_type: QpType,
    a_regions: &[softib_net::oob::endpoint::RemoteRegion],
    b_regions: &[softib_net::oob::endpoint::RemoteRegion],
) -> (QueuePair, QueuePair, Endpoint, Endpoint) {
    let pa = a.pd.create_qp(&a.cq, &a.cq, qp_type).build().unwrap();
    let pb = b.pd.create_qp(&b.cq, &b.cq, qp_type).build().unwrap();
    let (ea, eb) = (pa.endpoint(a_regions), pb.endpoint(b_regions));
    (
        pa.handshake(&eb).unwrap(),
        pb.handshake(&ea).unwrap(),
        ea,
        eb,
    )
}

#[test]
fn owned_regions_carry_write_read_and_atomics_and_give_their_buffer_back() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let la = a.pd.register(vec![0u8; 8192]).unwrap();
    let rb = b.pd.register(Box::new([0u8; 4096]) as Box<[u8]>).unwrap();
    let (qa, _qb, _, eb) = connect(&a, &b, QpType::Rc, &[], &[rb.remote()]);
    let remote = eb.regions[0];
    assert_eq!(remote, rb.remote());
    for (i, x) in la.write()[..1000].iter_mut().enumerate() {
        *x = i as u8 ^ 0x5a;
    }
    rb.write()[3000..3008].copy_from_slice(&40u64.to_le_bytes());
    qa.post_send(&[
        SendRequest::write(1, la.slice(..1000), remote.slice(100..1100)),
        SendRequest::read(2, la.slice(4096..5096), remote.slice(100..1100)),
        SendRequest::fetch_add(3, la.slice(6000..6008), remote.slice(3000..3008), 2),
    ])
    .unwrap();
    let wcs = wait_n(&a.cq, 3);
    assert_eq!(
        wcs.iter().map(|w| w.opcode).collect::<Vec<_>>(),
        [WcOpcode::RdmaWrite, WcOpcode::RdmaRead, WcOpcode::FetchAdd]
    );
    assert_eq!(rb.read()[100..1100], la.read()[..1000]);
    assert_eq!(la.read()[4096..5096], la.read()[..1000]);
    assert_eq!(la.read()[6000..6008], 40u64.to_le_bytes());
    assert_eq!(rb.read()[3000..3008], 42u64.to_le_bytes());
    drop(qa);
    let back: Box<[u8]> = rb.deregister().unwrap();
    assert_eq!(&back[3000..3008], &42u64.to_le_bytes());
    assert_eq!(back[100], 0x5a);
}

#[test]
fn atomic_write_stores_8_bytes_at_the_peer_over_udp() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let la = a.pd.register(vec![0u8; 64]).unwrap();
    // REMOTE_WRITE is the right ATOMIC WRITE needs (no REMOTE_ATOMIC on this region).
    let rb =
        b.pd.register_with_access(
            vec![0xEEu8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let (qa, _qb, _, eb) = connect(&a, &b, QpType::Rc, &[], &[rb.remote()]);
    let remote = eb.regions[0];
    la.write()[..8].copy_from_slice(b"softib!!");
    la.write()[8..16].copy_from_slice(&[7; 8]);
    qa.post_send(&[
        SendRequest::atomic_write(1, la.slice(..8), remote.slice(8..16)),
        SendRequest::atomic_write(2, la.slice(8..16), remote.slice(16..24)).inline(),
    ])
    .unwrap();
    // The inline one took its bytes at the post.
    la.write()[8..16].copy_from_slice(&[0; 8]);
    let wcs = wait_n(&a.cq, 2);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
        [(1, WcOpcode::AtomicWrite), (2, WcOpcode::AtomicWrite)]
    );
    let got = rb.read();
    assert_eq!(&got[8..16], b"softib!!");
    assert_eq!(got[16..24], [7; 8]);
    assert_eq!(got[..8], [0xEE; 8]);
    assert_eq!(got[24..32], [0xEE; 8]);
}

#[test]
fn slices_outside_a_region_are_refused_without_posting() {
    let a = side("127.0.0.1:0");
    let mr = a.pd.allocate(100).unwrap();
    assert!(mr.get(0..101).is_none());
    assert!(mr.get(100..).is_some_and(|s| s.is_empty()));
    assert!(mr.remote().get(50..=100).is_none());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mr.slice(90..110)));
    assert!(r.is_err());
}

#[test]
fn an_operation_uc_does_not_carry_fails_at_the_head_and_errors_the_qp_as_rxe_does() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let la = a.pd.allocate(4096).unwrap();
    let rb = b.pd.allocate(4096).unwrap();
    let (qa, _qb, _, eb) = connect(&a, &b, QpType::Uc, &[], &[rb.remote()]);
    let remote = eb.regions[0];
    qa.post_send(&[
        SendRequest::write(1, la.slice(..64), remote.slice(..64)),
        // UC has no RDMA READ (IBA 9.8.2); the kernel accepts it and fails it later.
        SendRequest::read(2, la.slice(..64), remote.slice(..64)),
        SendRequest::write(3, la.slice(..64), remote.slice(64..128)),
    ])
    .unwrap();
    let wcs = wait_n_any(&a.cq, 3);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::LocQpOpErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(qa.state(), Some(QpState::Err));
}

#[test]
fn raw_registration_lets_the_peer_write_into_caller_memory() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let mut target = vec![0u8; 4096];
    // SAFETY (test): `target` outlives the region (dropped below first) and is not touched
    // through references until the write completed and the region is gone.
    let raw = unsafe {
        b.pd.register_raw(target.as_mut_ptr(), target.len(), AccessFlags::all())
    }
    .unwrap();
    assert_eq!(raw.info().addr, target.as_ptr() as u64);
    let la = a.pd.register(vec![7u8; 256]).unwrap();
    let (qa, _qb, _, eb) = connect(&a, &b, QpType::Rc, &[], &[raw.remote()]);
    qa.post_send(&[SendRequest::write(
        1,
        la.slice(..),
        eb.regions[0].slice(1000..1256),
    )])
    .unwrap();
    wait_n(&a.cq, 1);
    drop(raw);
    assert!(target[1000..1256].iter().all(|&x| x == 7));
    assert!(target[..1000]
        .iter()
        .chain(&target[1256..])
        .all(|&x| x == 0));
    let null = unsafe {
        b.pd.register_raw(std::ptr::null_mut(), 8, AccessFlags::all())
    };
    assert!(null.is_err());
}

#[test]
fn sends_land_through_a_shared_receive_queue() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let srq = b.pd.create_srq().set_max_wr(8).build().unwrap();
    let rx = b.pd.allocate(4 * 64).unwrap();
    srq.post_recv(
        &(0..4)
            .map(|i| RecvRequest::new(i, rx.slice(i as usize * 64..(i as usize + 1) * 64)))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let tx = a.pd.register(*b"ping-0ping-1").unwrap();
    let pa = a.pd.create_qp(&a.cq, &a.cq, QpType::Rc).build().unwrap();
    let pb =
        b.pd.create_qp(&b.cq, &b.cq, QpType::Rc)
            .set_srq(&srq)
            .build()
            .unwrap();
    let (ea, eb) = (pa.endpoint(&[]), pb.endpoint(&[]));
    let qa = pa.handshake(&eb).unwrap();
    let _qb = pb.handshake(&ea).unwrap();
    qa.post_send(&[
        SendRequest::send(1, tx.slice(..6)),
        SendRequest::send(2, tx.slice(6..)).with_imm(99),
    ])
    .unwrap();
    wait_n(&a.cq, 2);
    let got = wait_n(&b.cq, 2);
    assert_eq!(got[1].imm_data, Some(99));
    assert_eq!(&rx.read()[..6], b"ping-0");
    assert_eq!(&rx.read()[64..70], b"ping-1");
}

#[test]
fn an_armed_cq_on_a_channel_raises_one_event_there_and_not_on_the_context() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let channel = b.hca.create_comp_channel().unwrap();
    let rcq = b.hca.create_cq().set_channel(&channel).build().unwrap();
    let pa = a.pd.create_qp(&a.cq, &a.cq, QpType::Rc).build().unwrap();
    let pb = b.pd.create_qp(&b.cq, &rcq, QpType::Rc).build().unwrap();
    let (ea, eb) = (pa.endpoint(&[]), pb.endpoint(&[]));
    let qa = pa.handshake(&eb).unwrap();
    let qb = pb.handshake(&ea).unwrap();
    let rx = b.pd.allocate(64).unwrap();
    qb.post_recv(&[
        RecvRequest::new(1, rx.slice(..)),
        RecvRequest::new(2, rx.slice(..)),
        RecvRequest::new(3, rx.slice(..)),
    ])
    .unwrap();
    let tx = a.pd.register(vec![1u8; 16]).unwrap();

    // Not armed: a completion raises nothing.
    qa.post_send(&[SendRequest::send(1, tx.slice(..))]).unwrap();
    wait_n(&a.cq, 1);
    let mut wcs = [empty_wc(); 4];
    while rcq.poll(&mut wcs).is_empty() {
        std::thread::yield_now();
    }
    assert_eq!(
        channel.get_event(Some(Duration::from_millis(50))).unwrap(),
        None
    );

    // Armed: exactly one event, on the channel, for this CQ.
    rcq.req_notify(false);
    qa.post_send(&[SendRequest::send(2, tx.slice(..))]).unwrap();
    let ev = channel.get_event(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(ev, Some(rcq.handle()));
    assert_eq!(channel.unacked_events(rcq.handle()), 1);
    rcq.ack_events(1);
    assert_eq!(channel.unacked_events(rcq.handle()), 0);
    assert_eq!(rcq.poll(&mut wcs).len(), 1);
    assert_eq!(channel.try_get_event(), None);

    // The context's event queue never saw it; an armed CQ without a channel goes there.
    let ctx = b.hca.context();
    assert!(!std::iter::from_fn(|| ctx.poll_event()).any(|e| matches!(e, AsyncEvent::CqNotify(_))));
    // Send 2's completion may still be on its way: take it first, so the event below can
    // only come from send 3.
    wait_n(&a.cq, 1);
    a.cq.req_notify(false);
    qa.post_send(&[SendRequest::send(3, tx.slice(..))]).unwrap();
    let ev = a.hca.context().wait_event(Duration::from_secs(20));
    assert_eq!(ev, Some(AsyncEvent::CqNotify(a.cq.handle())));
}

#[test]
fn a_verb_called_while_holding_a_region_guard_panics_instead_of_deadlocking() {
    let a = side("127.0.0.1:0");
    let mr = a.pd.allocate(64).unwrap();
    let guard = mr.read();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.pd.allocate(8)));
    assert!(r.is_err());
    drop(guard);
    assert!(a.pd.allocate(8).is_ok());
}

#[test]
fn objects_can_be_dropped_in_any_order() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let mr = a.pd.allocate(64).unwrap();
    let (qa, qb, _, _) = connect(&a, &b, QpType::Rc, &[], &[]);
    let Side { hca, pd, cq } = a;
    drop(hca);
    drop(pd);
    drop(cq);
    // The QP still holds its CQ, PD and device: it still works.
    assert!(qa.state().is_some());
    drop(mr);
    drop(qb);
    drop(qa);
}

#[test]
fn a_region_dropped_under_a_posted_request_fails_that_request_only() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let big = a.pd.allocate(4 << 20).unwrap();
    let keep = a.pd.register(vec![3u8; 64]).unwrap();
    let rb = b.pd.allocate(4 << 20).unwrap();
    let (qa, _qb, _, eb) = connect(&a, &b, QpType::Rc, &[], &[rb.remote()]);
    let remote = eb.regions[0];
    qa.post_send(&[SendRequest::write(1, big.slice(..), remote.slice(..))])
        .unwrap();
    // The device reads the source as it sends, packet by packet: most of 4 MiB is still to
    // be read when the region goes.
    drop(big);
    let mut wcs = [empty_wc(); 4];
    let got = a.cq.wait(&mut wcs, Duration::from_secs(20)).to_vec();
    assert_eq!(got.len(), 1, "the WRITE completes, one way or the other");
    assert_eq!(got[0].wr_id, 1);
    if got[0].status != WcStatus::Success {
        // Its L_Key is gone: a local protection error (what this machine shows every time),
        // the QP goes to the error state, and the other region is untouched.
        assert_eq!(got[0].status, WcStatus::LocProtErr);
        assert!(keep.read().iter().all(|&x| x == 3));
        return;
    }
    // The whole 4 MiB went out before the drop took effect: also fine, and then the QP
    // carries on.
    qa.post_send(&[SendRequest::write(2, keep.slice(..), remote.slice(..64))])
        .unwrap();
    assert_eq!(wait_n(&a.cq, 1)[0].wr_id, 2);
}

#[test]
fn objects_dropped_while_a_guard_is_held_stay_in_the_device_instead_of_blocking() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let mr = a.pd.allocate(64).unwrap();
    let (qa, qb, _, _) = connect(&a, &b, QpType::Rc, &[], &[]);
    let qpn = qa.qpn();
    let guard = mr.write();
    drop(qa);
    drop(guard);
    // Left in the device: still there, still usable through the handle API.
    assert!(a.hca.context().qp_state(qpn).is_some());
    drop(qb);
}

#[test]
fn the_objects_can_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Hca>();
    send_sync::<ProtectionDomain>();
    send_sync::<CompletionQueue>();
    send_sync::<QueuePair>();
    send_sync::<softib_net::verbs::MemoryRegion<Vec<u8>>>();
    send_sync::<softib_net::verbs::RawMemoryRegion>();
    send_sync::<softib_net::verbs::SharedReceiveQueue>();
    send_sync::<softib_net::verbs::AddressHandle>();
    send_sync::<softib_net::channel::CompletionChannel>();
}

#[test]
fn a_type2_window_bound_by_a_bind_window_request_serves_the_peer_until_local_invalidate() {
    let (a, b) = (side("127.0.0.1:0"), side("127.0.0.2:0"));
    let la = a.pd.register(vec![7u8; 4096]).unwrap();
    // The region grants nothing remote itself: only the window does.
    let rb =
        b.pd.register_with_access(
            vec![0u8; 8192],
            AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        )
        .unwrap();
    let (qa, qb, _, _) = connect(&a, &b, QpType::Rc, &[], &[]);
    let mw =
        b.pd.context()
            .alloc_mw(b.pd.handle(), softib_transport::MwType::Type2)
            .unwrap();
    let key = softib_transport::next_rkey(mw);
    qb.post_send(&[SendRequest::bind_window(
        1,
        mw,
        key,
        rb.slice(4096..8192),
        AccessFlags::REMOTE_WRITE,
    )])
    .unwrap();
    assert_eq!(wait_n(&b.cq, 1)[0].opcode, WcOpcode::BindMw);
    let through = softib_net::verbs::RemoteSlice {
        addr: rb.addr() + 4096,
        rkey: key,
        len: 100,
    };
    qa.post_send(&[SendRequest::write(2, la.slice(0..100), through)])
        .unwrap();
    wait_n(&a.cq, 1);
    assert_eq!(rb.read()[4096..4196], [7u8; 100]);
    assert_eq!(rb.read()[4000..4096], [0u8; 96], "outside the window");
    qb.post_send(&[SendRequest::local_invalidate(3, key)])
        .unwrap();
    assert_eq!(wait_n(&b.cq, 1)[0].opcode, WcOpcode::LocalInv);
    // Rebound (the window is free again), then freed by the peer's SEND with Invalidate.
    let key2 = softib_transport::next_rkey(key);
    qb.post_send(&[SendRequest::bind_window(
        5,
        key,
        key2,
        rb.slice(4096..8192),
        AccessFlags::REMOTE_WRITE,
    )])
    .unwrap();
    wait_n(&b.cq, 1);
    qb.post_recv(&[RecvRequest::new(6, rb.slice(0..64))])
        .unwrap();
    qa.post_send(&[SendRequest::send(7, la.slice(0..8)).with_invalidate(key2)])
        .unwrap();
    wait_n(&a.cq, 1);
    let r = wait_n(&b.cq, 1);
    assert_eq!((r[0].wr_id, r[0].invalidated_rkey), (6, Some(key2)));
    let through = softib_net::verbs::RemoteSlice {
        rkey: key2,
        ..through
    };
    qa.post_send(&[SendRequest::write(4, la.slice(0..100), through)])
        .unwrap();
    let mut wcs = [empty_wc(); 1];
    let got = a.cq.wait(&mut wcs, Duration::from_secs(20));
    assert_eq!(got[0].status, WcStatus::RemAccessErr);
    b.pd.context().dealloc_mw(mw).unwrap();
}
