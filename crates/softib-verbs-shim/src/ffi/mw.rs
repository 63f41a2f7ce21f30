//! Memory windows (IBA vol. 1 §10.6.7): the `alloc_mw`, `bind_mw` and `dealloc_mw` slots of
//! `context->ops`, which the inline `ibv_alloc_mw`, `ibv_bind_mw` and `ibv_dealloc_mw` of
//! verbs.h call, and the translation of a BIND_MW send WR. The rules live in the engine
//! (softib-transport `mw.rs`); here are the C objects and the rxe provider's conventions:
//! `ibv_bind_mw` posts a BIND_MW WR with the key part of `mw->rkey` moved on by one
//! (`ibv_inc_rkey`) and updates `mw->rkey` at once (the application undoes it on an error
//! completion); a type 2 window's `mw->rkey` is left to the application.

use std::ffi::c_int;

use softib_transport::{MwBind, MwType, SendFlags};

use super::{guard, obj, report};
use crate::abi::*;
use crate::convert::{errno_of, mw_access_from_c};
use crate::objects::{MwObj, PdObj, QpObj};
use crate::sys::set_errno;

/// `ops.alloc_mw`: a window of `type_` in `pd`.
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: u32) -> *mut ibv_mw {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a PD from ibv_alloc_pd (ibv_alloc_mw(3)).
        let Some(p) = (unsafe { obj::<_, PdObj>(pd) }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &p.shared;
        let kind = match type_ {
            IBV_MW_TYPE_1 => MwType::Type1,
            IBV_MW_TYPE_2 => MwType::Type2,
            other => {
                set_errno(report(
                    s,
                    "ibv_alloc_mw",
                    libc::EINVAL,
                    &format!("memory window type {other} is neither 1 nor 2"),
                ));
                return std::ptr::null_mut();
            }
        };
        match s.net.alloc_mw(p.handle, kind) {
            Ok(rkey) => Box::into_raw(Box::new(MwObj {
                mw: ibv_mw {
                    context: p.pd.context,
                    pd,
                    rkey,
                    handle: rkey >> 8,
                    type_,
                },
                alloc_rkey: rkey,
                shared: s.clone(),
            }))
            .cast(),
            Err(e) => {
                set_errno(report(s, "ibv_alloc_mw", errno_of(&e), &e));
                std::ptr::null_mut()
            }
        }
    })
}

/// `ops.dealloc_mw`: a bound window is unbound first; its R_Key stops working at once.
pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a window from ibv_alloc_mw (ibv_dealloc_mw(3)).
        let Some(m) = (unsafe { obj::<_, MwObj>(mw) }) else {
            return libc::EINVAL;
        };
        let s = &m.shared;
        if let Err(e) = s.net.dealloc_mw(m.alloc_rkey) {
            return report(s, "ibv_dealloc_mw", errno_of(&e), &e);
        }
        // SAFETY: boxed by alloc_mw; the application no longer uses it.
        drop(unsafe { Box::from_raw(mw.cast::<MwObj>()) });
        0
    })
}

/// `ops.bind_mw` (type 1; the inline `ibv_bind_mw` already refused other types, a range
/// without a region and a region of another PD). Returns an errno, as `ibv_bind_mw` does.
pub unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP from ibv_create_qp, a window from ibv_alloc_mw and the caller's
        // bind description (ibv_bind_mw(3)).
        let (Some(q), Some(m), Some(b)) = (
            unsafe { obj::<_, QpObj>(qp) },
            unsafe { mw.as_mut() },
            unsafe { bind.as_ref() },
        ) else {
            return libc::EINVAL;
        };
        // SAFETY: as above: bind_info.mr is NULL or an MR from ibv_reg_mr.
        let info = match unsafe { bind_from_c(m.rkey, 0, &b.bind_info) } {
            Ok(i) => i,
            Err(errno) => return errno,
        };
        let flags = SendFlags(b.send_flags & (IBV_SEND_SIGNALED | IBV_SEND_FENCE));
        match q.shared.net.bind_mw(q.qpn, b.wr_id, flags, info) {
            Ok(rkey) => {
                m.rkey = rkey;
                0
            }
            Err(e) => report(&q.shared, "ibv_bind_mw", errno_of(&e), &e),
        }
    })
}

/// The engine's bind description from `bind_info` for a window whose current R_Key is
/// `mw_rkey`, to be `new_rkey` after the bind.
///
/// # Safety
/// `info.mr` is NULL or an MR this library registered and not yet deregistered.
pub(crate) unsafe fn bind_from_c(
    mw_rkey: u32,
    new_rkey: u32,
    info: &ibv_mw_bind_info,
) -> Result<MwBind, i32> {
    // SAFETY: function contract.
    let mr_lkey = match unsafe { info.mr.as_ref() } {
        Some(mr) => mr.lkey,
        None if info.length == 0 => 0,
        None => return Err(libc::EINVAL),
    };
    Ok(MwBind {
        mw_rkey,
        new_rkey,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access: mw_access_from_c(info.mw_access_flags),
    })
}

/// The engine's bind description of a BIND_MW send WR (`wr->bind_mw`).
///
/// # Safety
/// `w` is a valid send WR whose `bind_mw.mw` is NULL or a window from ibv_alloc_mw and
/// whose `bind_mw.bind_info.mr` is NULL or a registered MR.
pub(crate) unsafe fn bind_of_wr(w: &ibv_send_wr) -> Result<MwBind, (i32, String)> {
    // SAFETY: function contract.
    let mw = unsafe { w.bind_mw_mw().as_ref() }.ok_or((
        libc::EINVAL,
        "BIND_MW without a window (bind_mw.mw is NULL)".to_string(),
    ))?;
    let info = w.bind_mw_info();
    // SAFETY: function contract.
    unsafe { bind_from_c(mw.rkey, w.bind_mw_rkey(), &info) }.map_err(|e| {
        (
            e,
            "BIND_MW with a length but no region (bind_info.mr is NULL)".to_string(),
        )
    })
}
