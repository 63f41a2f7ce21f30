//! Memory windows through two engines (IBA vol. 1 §10.6.7): binds run as local send-queue
//! operations and complete in order; remote access through a window is checked against
//! the window's range, rights, state and QP association before a byte moves; LOCAL_INV
//! and SEND with Invalidate free type 2 windows; regions with bound windows stay put.

mod common;
use common::*;
use softib_transport::harness::{Endpoint, Pair, QpOptions};
use softib_transport::{
    AccessFlags, MwBind, MwType, QpState, SendWr, VerbsError, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

/// Region rights the window tests register with: local write and MW_BIND only, so every
/// remote access below is granted by a window, never by the region itself (as in
/// pyverbs' `tests.test_mr` MW tests).
fn options() -> QpOptions {
    QpOptions {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        ..QpOptions::default()
    }
}

/// QP access rights: remote write/read/atomic allowed at the QP level.
fn allow_remote(pair: &mut Pair, ep: &Endpoint) {
    let attr = softib_transport::QpAttr {
        qp_access_flags: AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
        ..Default::default()
    };
    pair.dev(ep.side)
        .modify_qp(0, ep.qpn, &attr, softib_transport::QpAttrMask::ACCESS_FLAGS)
        .expect("RTS->RTS access flags");
}

fn connect(pair: &mut Pair, o: &QpOptions) -> (Endpoint, Endpoint) {
    let (a, b) = pair.connect(o);
    allow_remote(pair, &a);
    allow_remote(pair, &b);
    (a, b)
}

fn window_over(
    ep: &Endpoint,
    mw: u32,
    new_rkey: u32,
    off: u64,
    len: u64,
    access: AccessFlags,
) -> MwBind {
    MwBind {
        mw_rkey: mw,
        new_rkey,
        mr_lkey: ep.keys.lkey,
        addr: ep.addr + off,
        length: len,
        access,
    }
}

fn bind_wr(id: u64, bind: MwBind) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::BindMw,
        flags: softib_transport::SendFlags::SIGNALED,
        bind_mw: Some(bind),
        ..Default::default()
    }
}

/// A WRITE of `len` bytes from `a` at `va` under `rkey`; returns its completion status.
fn write_through(
    pair: &mut Pair,
    a: &Endpoint,
    b: &Endpoint,
    rkey: u32,
    va: u64,
    len: u32,
    id: u64,
) -> WcStatus {
    let mut w = wr(WrOpcode::RdmaWrite, id, a, 0, b, 0, len);
    w.rkey = rkey;
    w.remote_addr = va;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    wait_send(pair, a, 1, SEC)[0].status
}

#[test]
fn type1_window_grants_access_to_its_range_only_and_completes_as_bind_mw() {
    let mut pair = Pair::new(400);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type1).unwrap();
    let bind = window_over(&b, mw, 0, 256, 256, AccessFlags::REMOTE_WRITE);
    let rkey = pair
        .dev(1)
        .bind_mw(0, b.qpn, 77, softib_transport::SendFlags::SIGNALED, bind)
        .unwrap();
    assert_eq!(rkey >> 8, mw >> 8, "same window index");
    assert_eq!(rkey & 0xFF, (mw + 1) & 0xFF, "key part moved on by one");
    let wcs = wait_send(&mut pair, &b, 1, SEC);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (77, WcStatus::Success, WcOpcode::BindMw)
    );
    let data = pattern(64, 5);
    pair.fill(0, &a, 0, &data);
    assert_eq!(
        write_through(&mut pair, &a, &b, rkey, b.addr + 300, 64, 1),
        WcStatus::Success
    );
    assert_eq!(pair.read(1, &b, 300, 64), data);
    // One byte past the window's end: remote access error, nothing written.
    let before = pair.read(1, &b, 448, 64);
    assert_eq!(
        write_through(&mut pair, &a, &b, rkey, b.addr + 448, 65, 2),
        WcStatus::RemAccessErr
    );
    assert_eq!(pair.read(1, &b, 448, 64), before);
}

#[test]
fn window_rights_are_checked_read_through_a_write_only_window_is_refused() {
    let mut pair = Pair::new(401);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type1).unwrap();
    let bind = window_over(&b, mw, 0, 0, 4096, AccessFlags::REMOTE_WRITE);
    let rkey = pair
        .dev(1)
        .bind_mw(0, b.qpn, 1, softib_transport::SendFlags::SIGNALED, bind)
        .unwrap();
    wait_send(&mut pair, &b, 1, SEC);
    let mut r = wr(WrOpcode::RdmaRead, 9, &a, 0, &b, 0, 64);
    r.rkey = rkey;
    pair.dev(0).post_send(0, a.qpn, &r).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    assert_eq!(
        pair.dev(1).qp_state(b.qpn),
        Some(QpState::Err),
        "class C error"
    );
}

#[test]
fn region_rights_do_not_leak_the_old_rkey_stops_working_after_a_rebind() {
    let mut pair = Pair::new(402);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type1).unwrap();
    let flags = softib_transport::SendFlags::SIGNALED;
    let first = pair
        .dev(1)
        .bind_mw(
            0,
            b.qpn,
            1,
            flags,
            window_over(&b, mw, 0, 0, 1024, AccessFlags::REMOTE_WRITE),
        )
        .unwrap();
    let second = pair
        .dev(1)
        .bind_mw(
            0,
            b.qpn,
            2,
            flags,
            window_over(&b, first, 0, 0, 1024, AccessFlags::REMOTE_WRITE),
        )
        .unwrap();
    assert_eq!(wait_send(&mut pair, &b, 2, SEC).len(), 2);
    assert_ne!(first, second);
    // The region's own rkey grants nothing remote (registered without REMOTE_WRITE).
    assert_eq!(
        write_through(&mut pair, &a, &b, b.keys.rkey, b.addr, 8, 3),
        WcStatus::RemAccessErr
    );
    // That error moved both QPs to ERR; a type 1 window serves any QP of its PD.
    let (a2, b2) = connect(
        &mut pair,
        &QpOptions {
            pds: Some([a.pd, b.pd]),
            ..options()
        },
    );
    assert_eq!(
        write_through(&mut pair, &a2, &b2, first, b.addr, 8, 4),
        WcStatus::RemAccessErr,
        "the key part before the rebind is stale"
    );
    let (a3, b3) = connect(
        &mut pair,
        &QpOptions {
            pds: Some([a.pd, b.pd]),
            ..options()
        },
    );
    assert_eq!(
        write_through(&mut pair, &a3, &b3, second, b.addr, 8, 5),
        WcStatus::Success
    );
}

#[test]
fn type2_window_is_usable_only_through_the_qp_that_bound_it() {
    let mut pair = Pair::new(403);
    let (a1, b1) = connect(&mut pair, &options());
    let shared = QpOptions {
        pds: Some([a1.pd, b1.pd]),
        ..options()
    };
    let (a2, b2) = connect(&mut pair, &shared);
    let mw = pair.dev(1).alloc_mw(b1.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let bind = window_over(&b1, mw, rkey, 0, 4096, AccessFlags::REMOTE_WRITE);
    pair.dev(1).post_send(0, b1.qpn, &bind_wr(5, bind)).unwrap();
    let wcs = wait_send(&mut pair, &b1, 1, SEC);
    assert_eq!(
        (wcs[0].status, wcs[0].opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(
        write_through(&mut pair, &a1, &b1, rkey, b1.addr, 32, 1),
        WcStatus::Success
    );
    // Same PD, same region, another QP: refused (IBA 10.6.7.3 QP association).
    assert_eq!(
        write_through(&mut pair, &a2, &b2, rkey, b1.addr, 32, 2),
        WcStatus::RemAccessErr
    );
}

#[test]
fn type2_bind_rules_fail_with_mw_bind_err_and_the_qp_enters_err() {
    // A type 2 window cannot be bound twice without an invalidation (o10-37.2.30).
    let mut pair = Pair::new(404);
    let (_a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type2).unwrap();
    let k1 = softib_transport::next_rkey(mw);
    let bind = window_over(&b, mw, k1, 0, 64, AccessFlags::REMOTE_READ);
    pair.dev(1).post_send(0, b.qpn, &bind_wr(1, bind)).unwrap();
    let again = window_over(
        &b,
        k1,
        softib_transport::next_rkey(k1),
        0,
        64,
        AccessFlags::REMOTE_READ,
    );
    pair.dev(1).post_send(0, b.qpn, &bind_wr(2, again)).unwrap();
    let wcs = wait_send(&mut pair, &b, 2, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, WcStatus::MwBindErr));
    assert_eq!(pair.dev(1).qp_state(b.qpn), Some(QpState::Err));
}

#[test]
fn bind_needs_the_regions_mw_bind_right() {
    let mut pair = Pair::new(405);
    let (_a, b) = connect(&mut pair, &QpOptions::default()); // no MW_BIND on the region
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type1).unwrap();
    let bind = window_over(&b, mw, 0, 0, 64, AccessFlags::REMOTE_READ);
    pair.dev(1)
        .bind_mw(0, b.qpn, 1, softib_transport::SendFlags::SIGNALED, bind)
        .unwrap();
    let wcs = wait_send(&mut pair, &b, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::MwBindErr);
}

#[test]
fn local_inv_frees_a_type2_window_and_remote_access_then_fails() {
    let mut pair = Pair::new(406);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let bind = window_over(&b, mw, rkey, 0, 4096, AccessFlags::REMOTE_WRITE);
    pair.dev(1).post_send(0, b.qpn, &bind_wr(1, bind)).unwrap();
    let inv = SendWr {
        wr_id: 2,
        opcode: WrOpcode::LocalInv,
        flags: softib_transport::SendFlags::SIGNALED,
        invalidate_rkey: rkey,
        ..Default::default()
    };
    pair.dev(1).post_send(0, b.qpn, &inv).unwrap();
    let wcs = wait_send(&mut pair, &b, 2, SEC);
    assert_eq!(
        wcs.iter().map(|w| (w.opcode, w.status)).collect::<Vec<_>>(),
        vec![
            (WcOpcode::BindMw, WcStatus::Success),
            (WcOpcode::LocalInv, WcStatus::Success)
        ]
    );
    assert_eq!(
        write_through(&mut pair, &a, &b, rkey, b.addr, 8, 3),
        WcStatus::RemAccessErr
    );
}

#[test]
fn local_inv_of_a_type1_window_fails_with_loc_qp_op_err() {
    let mut pair = Pair::new(407);
    let (_a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type1).unwrap();
    let inv = SendWr {
        wr_id: 2,
        opcode: WrOpcode::LocalInv,
        flags: softib_transport::SendFlags::SIGNALED,
        invalidate_rkey: mw,
        ..Default::default()
    };
    pair.dev(1).post_send(0, b.qpn, &inv).unwrap();
    let wcs = wait_send(&mut pair, &b, 1, SEC);
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::LocalInv, WcStatus::LocQpOpErr)
    );
}

#[test]
fn send_with_invalidate_frees_the_peers_type2_window() {
    let mut pair = Pair::new(408);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let bind = window_over(&b, mw, rkey, 0, 4096, AccessFlags::REMOTE_WRITE);
    pair.dev(1).post_send(0, b.qpn, &bind_wr(1, bind)).unwrap();
    wait_send(&mut pair, &b, 1, SEC);
    pair.dev(1)
        .post_recv(b.qpn, &recv(1, &b, 8192, 64))
        .unwrap();
    let mut w = wr(WrOpcode::SendWithInv, 2, &a, 0, &b, 0, 16);
    w.invalidate_rkey = rkey;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    assert_eq!(
        wait_send(&mut pair, &a, 1, SEC)[0].status,
        WcStatus::Success
    );
    let r = recv_wcs(&mut pair, &b);
    assert_eq!(r[0].invalidated_rkey, Some(rkey));
    assert!(r[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(
        write_through(&mut pair, &a, &b, rkey, b.addr, 8, 3),
        WcStatus::RemAccessErr
    );
}

#[test]
fn send_with_invalidate_of_a_window_bound_to_another_qp_is_refused() {
    let mut pair = Pair::new(409);
    let (a1, b1) = connect(&mut pair, &options());
    let (a2, b2) = connect(
        &mut pair,
        &QpOptions {
            pds: Some([a1.pd, b1.pd]),
            ..options()
        },
    );
    let mw = pair.dev(1).alloc_mw(b1.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let bind = window_over(&b1, mw, rkey, 0, 4096, AccessFlags::REMOTE_WRITE);
    pair.dev(1).post_send(0, b1.qpn, &bind_wr(1, bind)).unwrap();
    wait_send(&mut pair, &b1, 1, SEC);
    pair.dev(1).post_recv(b2.qpn, &recv(1, &b2, 0, 64)).unwrap();
    let mut w = wr(WrOpcode::SendWithInv, 2, &a2, 0, &b2, 0, 16);
    w.invalidate_rkey = rkey;
    pair.dev(0).post_send(0, a2.qpn, &w).unwrap();
    assert_eq!(
        wait_send(&mut pair, &a2, 1, SEC)[0].status,
        WcStatus::RemInvReqErr
    );
    let r = recv_wcs(&mut pair, &b2);
    assert_eq!(
        (r[0].wr_id, r[0].status),
        (1, WcStatus::RemInvReqErr),
        "the receive completes in error (rxe class J)"
    );
    // The window still works through its own QP.
    assert_eq!(
        write_through(&mut pair, &a1, &b1, rkey, b1.addr, 8, 3),
        WcStatus::Success
    );
}

#[test]
fn zero_based_type2_window_takes_offsets_as_addresses() {
    let mut pair = Pair::new(410);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::ZERO_BASED;
    let bind = window_over(&b, mw, rkey, 1024, 512, access);
    pair.dev(1).post_send(0, b.qpn, &bind_wr(1, bind)).unwrap();
    wait_send(&mut pair, &b, 1, SEC);
    let data = pattern(32, 9);
    pair.fill(0, &a, 0, &data);
    assert_eq!(
        write_through(&mut pair, &a, &b, rkey, 100, 32, 2),
        WcStatus::Success
    );
    assert_eq!(pair.read(1, &b, 1124, 32), data);
}

#[test]
fn dereg_mr_with_a_bound_window_is_refused_until_the_window_is_deallocated() {
    let mut pair = Pair::new(411);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type1).unwrap();
    let bind = window_over(&b, mw, 0, 0, 64, AccessFlags::REMOTE_WRITE);
    let rkey = pair
        .dev(1)
        .bind_mw(0, b.qpn, 1, softib_transport::SendFlags::SIGNALED, bind)
        .unwrap();
    wait_send(&mut pair, &b, 1, SEC);
    assert!(matches!(
        pair.dev(1).dereg_mr(b.keys.lkey),
        Err(VerbsError::InUse { kind: "MR", .. })
    ));
    assert!(matches!(
        pair.dev(1).dealloc_pd(b.pd),
        Err(VerbsError::InUse { kind: "PD", .. })
    ));
    // Deallocating the bound window revokes its R_Key at once.
    pair.dev(1).dealloc_mw(rkey).unwrap();
    assert_eq!(
        write_through(&mut pair, &a, &b, rkey, b.addr, 8, 2),
        WcStatus::RemAccessErr
    );
    assert!(pair.dev(1).dereg_mr(b.keys.lkey).is_ok());
}

#[test]
fn bind_waits_for_earlier_wrs_and_completions_stay_in_order() {
    let mut pair = Pair::new(412);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(0).alloc_mw(a.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    // A's own window, bound on A's QP after two WRITEs to B that need ACKs first.
    let win = pair.dev(1).alloc_mw(b.pd, MwType::Type1).unwrap();
    let flags = softib_transport::SendFlags::SIGNALED;
    let brkey = pair
        .dev(1)
        .bind_mw(
            0,
            b.qpn,
            1,
            flags,
            window_over(&b, win, 0, 0, 65536, AccessFlags::REMOTE_WRITE),
        )
        .unwrap();
    wait_send(&mut pair, &b, 1, SEC);
    for id in 0..2 {
        let mut w = wr(WrOpcode::RdmaWrite, id, &a, 0, &b, 0, 8000);
        w.rkey = brkey;
        pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    }
    let bind = window_over(&a, mw, rkey, 0, 64, AccessFlags::REMOTE_READ);
    pair.dev(0).post_send(0, a.qpn, &bind_wr(2, bind)).unwrap();
    let wcs = wait_send(&mut pair, &a, 3, SEC);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.opcode, w.status))
            .collect::<Vec<_>>(),
        vec![
            (0, WcOpcode::RdmaWrite, WcStatus::Success),
            (1, WcOpcode::RdmaWrite, WcStatus::Success),
            (2, WcOpcode::BindMw, WcStatus::Success),
        ]
    );
}

#[test]
fn atomics_and_reads_land_through_a_window_in_the_right_region_bytes() {
    let mut pair = Pair::new(413);
    let (a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type1).unwrap();
    let access = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let rkey = pair
        .dev(1)
        .bind_mw(
            0,
            b.qpn,
            1,
            softib_transport::SendFlags::SIGNALED,
            window_over(&b, mw, 0, 512, 64, access),
        )
        .unwrap();
    wait_send(&mut pair, &b, 1, SEC);
    pair.fill(1, &b, 512, &41u64.to_le_bytes());
    let mut f = wr(WrOpcode::AtomicFetchAndAdd, 1, &a, 0, &b, 512, 8);
    f.rkey = rkey;
    f.compare_add = 1;
    pair.dev(0).post_send(0, a.qpn, &f).unwrap();
    let mut r = wr(WrOpcode::RdmaRead, 2, &a, 64, &b, 512, 8);
    r.rkey = rkey;
    pair.dev(0).post_send(0, a.qpn, &r).unwrap();
    let wcs = wait_send(&mut pair, &a, 2, SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(pair.read(0, &a, 0, 8), 41u64.to_le_bytes());
    assert_eq!(pair.read(0, &a, 64, 8), 42u64.to_le_bytes());
}

#[test]
fn alloc_mw_stops_at_max_mw_and_dealloc_frees_a_slot() {
    let config = softib_transport::DeviceConfig {
        max_mw: 2,
        ..Default::default()
    };
    let mut pair = Pair::with_config(414, config);
    let (_a, b) = connect(&mut pair, &options());
    let d = pair.dev(1);
    let w1 = d.alloc_mw(b.pd, MwType::Type1).unwrap();
    let _w2 = d.alloc_mw(b.pd, MwType::Type2).unwrap();
    assert!(matches!(
        d.alloc_mw(b.pd, MwType::Type1),
        Err(VerbsError::LimitReached {
            limit: "max_mw",
            max: 2
        })
    ));
    d.dealloc_mw(w1).unwrap();
    assert!(d.dealloc_mw(w1).is_err(), "deallocated twice");
    assert!(d.alloc_mw(b.pd, MwType::Type1).is_ok());
    assert!(matches!(
        d.alloc_mw(softib_transport::PdHandle(99), MwType::Type1),
        Err(VerbsError::UnknownHandle { kind: "PD", .. })
    ));
}

#[test]
fn dealloc_names_the_window_by_its_current_or_allocation_key_only() {
    let mut pair = Pair::new(415);
    let (_a, b) = connect(&mut pair, &options());
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let bind = window_over(&b, mw, rkey, 0, 64, AccessFlags::REMOTE_WRITE);
    pair.dev(1).post_send(0, b.qpn, &bind_wr(1, bind)).unwrap();
    wait_send(&mut pair, &b, 1, SEC);
    let other = softib_transport::next_rkey(rkey);
    assert!(pair.dev(1).dealloc_mw(other).is_err(), "a key it never had");
    // The allocation key (what ibv_mw::rkey still holds for a type 2 window) names it.
    pair.dev(1).dealloc_mw(mw).unwrap();
    assert_eq!(pair.dev(1).mw_bound(rkey), None);
}

#[test]
fn uc_qps_bind_windows_too_and_a_uc_write_outside_the_window_is_dropped() {
    let mut pair = Pair::new(416);
    let o = QpOptions {
        qp_type: softib_transport::QpType::Uc,
        ..options()
    };
    let (a, b) = pair.connect(&o);
    let attr = softib_transport::QpAttr {
        qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..Default::default()
    };
    for ep in [&a, &b] {
        pair.dev(ep.side)
            .modify_qp(0, ep.qpn, &attr, softib_transport::QpAttrMask::ACCESS_FLAGS)
            .unwrap();
    }
    let mw = pair.dev(1).alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let bind = window_over(&b, mw, rkey, 1024, 1024, AccessFlags::REMOTE_WRITE);
    pair.dev(1).post_send(0, b.qpn, &bind_wr(1, bind)).unwrap();
    let wcs = wait_send(&mut pair, &b, 1, SEC);
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::BindMw, WcStatus::Success)
    );
    let data = pattern(512, 3);
    pair.fill(0, &a, 0, &data);
    // UC completes at the sender either way (IBA 9.8.2); the bytes tell.
    assert_eq!(
        write_through(&mut pair, &a, &b, rkey, b.addr + 1024, 512, 2),
        WcStatus::Success
    );
    assert_eq!(pair.read(1, &b, 1024, 512), data);
    let before = pair.read(1, &b, 1536, 1024);
    assert_eq!(
        write_through(&mut pair, &a, &b, rkey, b.addr + 1536, 1000, 3),
        WcStatus::Success
    );
    assert_eq!(
        pair.read(1, &b, 1536, 1024),
        before,
        "a WRITE leaving the window is dropped"
    );
    assert_eq!(
        pair.dev(1).qp_counters(b.qpn).unwrap().remote_access_errors,
        1
    );
}
