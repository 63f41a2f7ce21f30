//! Extended QPs: `ibv_qp_to_qp_ex` and the `ibv_wr_*` post-send builder functions installed in
//! `struct ibv_qp_ex`. The builders collect WRs in the QP's [`WrBatch`]; `ibv_wr_complete`
//! posts them through the classic `ibv_post_send` conversion (`datapath::post_one_send`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use super::datapath::post_one_send;
use super::{guard, obj, report};
use crate::abi::*;
use crate::abi_ex::*;
use crate::objects::{PdObj, QpObj};
use crate::wr_batch::{atomic_wr, bind_mw_words, rdma_wr, BuildLimits, WrBatch};

/// The `verbs_qp` of a new QP: for `ibv_create_qp_ex` (`send_ops` given) with
/// `VERBS_QP_EX` and every builder function; for `ibv_create_qp` with none, so
/// `ibv_qp_to_qp_ex` returns NULL for it as libibverbs does.
pub(super) fn verbs_qp_of(qp: ibv_qp, send_ops: Option<u64>) -> verbs_qp {
    let ex = send_ops.is_some();
    verbs_qp {
        qp_ex: ibv_qp_ex {
            qp_base: qp,
            comp_mask: 0,
            wr_id: 0,
            wr_flags: 0,
            wr_atomic_cmp_swp: ex.then_some(wr_atomic_cmp_swp as _),
            wr_atomic_fetch_add: ex.then_some(wr_atomic_fetch_add as _),
            wr_bind_mw: ex.then_some(wr_bind_mw as _),
            wr_local_inv: ex.then_some(wr_local_inv as _),
            wr_rdma_read: ex.then_some(wr_rdma_read as _),
            wr_rdma_write: ex.then_some(wr_rdma_write as _),
            wr_rdma_write_imm: ex.then_some(wr_rdma_write_imm as _),
            wr_send: ex.then_some(wr_send as _),
            wr_send_imm: ex.then_some(wr_send_imm as _),
            wr_send_inv: ex.then_some(wr_send_inv as _),
            wr_send_tso: ex.then_some(wr_send_tso as _),
            wr_set_ud_addr: ex.then_some(wr_set_ud_addr as _),
            wr_set_xrc_srqn: ex.then_some(wr_set_xrc_srqn as _),
            wr_set_inline_data: ex.then_some(wr_set_inline_data as _),
            wr_set_inline_data_list: ex.then_some(wr_set_inline_data_list as _),
            wr_set_sge: ex.then_some(wr_set_sge as _),
            wr_set_sge_list: ex.then_some(wr_set_sge_list as _),
            wr_start: ex.then_some(wr_start as _),
            wr_complete: ex.then_some(wr_complete as _),
            wr_abort: ex.then_some(wr_abort as _),
            wr_atomic_write: ex.then_some(wr_atomic_write as _),
        },
        comp_mask: if ex { VERBS_QP_EX } else { 0 },
        xrcd: std::ptr::null_mut(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a QP of this library (ibv_qp_to_qp_ex(3)); `comp_mask` never changes.
        let Some(q) = (unsafe { obj::<_, QpObj>(qp) }) else {
            return std::ptr::null_mut();
        };
        // SAFETY: the verbs_qp lives in the QP object's UnsafeCell.
        if unsafe { (*q.qp.get()).comp_mask } & VERBS_QP_EX != 0 {
            qp.cast()
        } else {
            std::ptr::null_mut()
        }
    })
}

/// Runs a builder step on the QP's batch, with the `wr_id` and `wr_flags` the application
/// has set in the `ibv_qp_ex` now.
///
/// # Safety
/// `qp` is an `ibv_qp_ex` of this library (from `ibv_qp_to_qp_ex`).
unsafe fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut WrBatch, &BuildLimits, u64, u32)) {
    guard((), || {
        // SAFETY: function contract: the ibv_qp_ex is the first field of a live QpObj.
        let Some(q) = (unsafe { obj::<_, QpObj>(qp) }) else {
            return;
        };
        // SAFETY: the application writes these two fields between builder calls on one
        // thread (ibv_wr_post(3): a QP's builders are not called concurrently).
        let (wr_id, wr_flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
        let limits = BuildLimits {
            send_ops: q.send_ops,
            max_send_sge: q.cap.max_send_sge,
            max_inline_data: q.cap.max_inline_data,
        };
        let mut b = q.batch.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut b, &limits, wr_id, wr_flags);
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: `qp` comes from ibv_qp_to_qp_ex (verbs.h inline contract).
    unsafe { with_batch(qp, |b, _, _, _| b.start()) }
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: as in wr_start.
    unsafe { with_batch(qp, |b, _, _, _| b.start()) }
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: as in wr_start.
        let Some(q) = (unsafe { obj::<_, QpObj>(qp) }) else {
            return libc::EINVAL;
        };
        let wrs = q.batch.lock().unwrap_or_else(|p| p.into_inner()).finish();
        let wrs = match wrs {
            Ok(w) => w,
            Err((errno, why)) => return report(&q.shared, "ibv_wr_complete", errno, &why),
        };
        // SAFETY: the QP's PD is one of ours and outlives the QP.
        let bounce = q.staging.map_or_else(
            || {
                unsafe { obj::<_, PdObj>(q.pd) }
                    .map_or(0, |p| p.bounce_lkey.load(Ordering::Acquire))
            },
            |st| st.lkey,
        );
        let mut sges = Vec::new();
        let r = q.shared.net.with_engine(|e, now| {
            for w in &wrs {
                let c = w.to_send_wr(&mut sges);
                // SAFETY: `c` points at `sges` (alive here) and its inline bytes at `w`;
                // the SGE addresses of non-inline WRs are checked by the engine's lkey
                // lookup, never dereferenced here.
                unsafe { post_one_send(q, bounce, e, now, &c) }?;
            }
            Ok(())
        });
        match r {
            Ok(()) => 0,
            Err((errno, why)) => report(&q.shared, "ibv_wr_complete", errno, &why),
        }
    })
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            b.begin(l, id, fl, IBV_WR_SEND, 0, Default::default())
        })
    }
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: u32) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            b.begin(
                l,
                id,
                fl,
                IBV_WR_SEND_WITH_IMM,
                imm_data,
                Default::default(),
            )
        })
    }
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            b.begin(
                l,
                id,
                fl,
                IBV_WR_SEND_WITH_INV,
                invalidate_rkey,
                Default::default(),
            )
        })
    }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            b.begin(l, id, fl, IBV_WR_RDMA_WRITE, 0, rdma_wr(rkey, remote_addr))
        })
    }
}

unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: u32,
) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            b.begin(
                l,
                id,
                fl,
                IBV_WR_RDMA_WRITE_WITH_IMM,
                imm_data,
                rdma_wr(rkey, remote_addr),
            )
        })
    }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            b.begin(l, id, fl, IBV_WR_RDMA_READ, 0, rdma_wr(rkey, remote_addr))
        })
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            let w = atomic_wr(rkey, remote_addr, compare, swap);
            b.begin(l, id, fl, IBV_WR_ATOMIC_CMP_AND_SWP, 0, w)
        })
    }
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            let w = atomic_wr(rkey, remote_addr, add, 0);
            b.begin(l, id, fl, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, w)
        })
    }
}

/// A builder whose operation softib does not implement: the batch fails with EOPNOTSUPP
/// (unreachable through a QP created with checked `send_ops_flags`, but an application may
/// call any function pointer).
///
/// # Safety
/// As [`with_batch`].
unsafe fn unsupported_builder(qp: *mut ibv_qp_ex, what: &'static str) {
    // SAFETY: forwarded contract.
    unsafe {
        with_batch(qp, |b, _, _, _| {
            b.refuse(
                libc::EOPNOTSUPP,
                format!("{what} is not implemented by softib"),
            )
        })
    }
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut c_void,
    rkey: u32,
    info: *const c_void,
) {
    // SAFETY: ibv_wr_bind_mw(3): `info` is the caller's bind description (NULL tolerated:
    // the classic conversion refuses the WR).
    let words = match unsafe { info.cast::<ibv_mw_bind_info>().as_ref() } {
        Some(i) => bind_mw_words(
            mw as usize,
            rkey,
            i.mr as usize,
            i.addr,
            i.length,
            i.mw_access_flags,
        ),
        None => bind_mw_words(mw as usize, rkey, 0, 0, 0, 0),
    };
    // SAFETY: as in wr_start; the window and region are checked when the batch is posted.
    unsafe { with_batch(qp, |b, l, id, fl| b.begin_bind(l, id, fl, words)) }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            b.begin(
                l,
                id,
                fl,
                IBV_WR_LOCAL_INV,
                invalidate_rkey,
                Default::default(),
            )
        })
    }
}

unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    // SAFETY: as in wr_start.
    unsafe { unsupported_builder(qp, "ibv_wr_send_tso") }
}

unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    if atomic_wr.is_null() {
        // SAFETY: as in wr_start.
        unsafe {
            with_batch(qp, |b, _, _, _| {
                b.refuse(libc::EINVAL, "ibv_wr_atomic_write with a NULL value".into())
            })
        };
        return;
    }
    // SAFETY: ibv_wr_atomic_write(3): `atomic_wr` points at the 8 bytes to write; read
    // unaligned, as the caller's buffer need not be.
    let value = unsafe { std::ptr::read_unaligned(atomic_wr.cast::<[u8; 8]>()) };
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, id, fl| {
            b.begin_atomic_write(l, id, fl, rkey, remote_addr, value)
        })
    }
}

unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, remote_srqn: u32) {
    // SAFETY: as in wr_start.
    unsafe { with_batch(qp, |b, _, _, _| b.set_xrc_srqn(remote_srqn)) }
}

unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: as in wr_start; `ah` is checked when the batch is posted.
    unsafe { with_batch(qp, |b, _, _, _| b.set_ud_addr(ah as usize, qpn, qkey)) }
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: as in wr_start.
    unsafe {
        with_batch(qp, |b, l, _, _| {
            b.set_sges(l, vec![ibv_sge { addr, length, lkey }])
        })
    }
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    let sges = if n == 0 || list.is_null() {
        Vec::new()
    } else {
        // SAFETY: ibv_wr_set_sge_list(3): `list` holds `n` SGEs.
        unsafe { std::slice::from_raw_parts(list, n) }.to_vec()
    };
    // SAFETY: as in wr_start.
    unsafe { with_batch(qp, |b, l, _, _| b.set_sges(l, sges)) }
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: one buffer, as the list variant takes.
    unsafe { wr_set_inline_data_list(qp, 1, &buf) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    let bufs = if n == 0 || list.is_null() {
        &[][..]
    } else {
        // SAFETY: ibv_wr_set_inline_data_list(3): `list` holds `n` buffers.
        unsafe { std::slice::from_raw_parts(list, n) }
    };
    // The payload is copied now: the application may reuse its buffers when the call
    // returns (ibv_wr_post(3)). The copy stops at a size no QP accepts (the builder then
    // fails with ENOSPC without reading further).
    let total: usize = bufs.iter().map(|b| b.length).fold(0, usize::saturating_add);
    // SAFETY: as in wr_start.
    let max = unsafe { obj::<_, QpObj>(qp) }.map_or(0, |q| q.cap.max_inline_data as usize);
    let bytes = if total > max {
        vec![0; max + 1]
    } else {
        let mut v = Vec::with_capacity(total);
        for b in bufs.iter().filter(|b| b.length > 0 && !b.addr.is_null()) {
            // SAFETY: each buffer holds `length` readable bytes (function contract).
            v.extend_from_slice(unsafe {
                std::slice::from_raw_parts(b.addr.cast::<u8>(), b.length)
            });
        }
        v
    };
    // SAFETY: as in wr_start.
    unsafe { with_batch(qp, |b, l, _, _| b.set_inline(l, bytes)) }
}
