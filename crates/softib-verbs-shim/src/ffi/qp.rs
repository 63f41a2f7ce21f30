//! Queue pairs: create (`ibv_create_qp` and the `create_qp_ex` slot of `verbs_context`),
//! modify, query, destroy.

use std::ffi::c_int;

use softib_transport::{CqHandle, QpAttrMask, QpCap, QpInitAttr, QpType, SrqHandle};

use super::{ctx_obj, fail, guard, null_reporter, obj, report};
use crate::abi::*;
use crate::abi_ex::*;
use crate::convert::{
    cap_to_c, errno_of, qp_attr_from_c, qp_attr_to_c, qp_state_to_c, qp_type_from_c, qp_type_to_c,
};
use crate::objects::{CqObj, InitCopy, PdObj, QpObj, SrqObj};
use crate::sys::set_errno;
use crate::wr_batch::supported_send_ops;
use std::cell::UnsafeCell;

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's attributes (ibv_create_qp(3)).
        unsafe { create_qp_in(pd, init, "ibv_create_qp", None) }
    })
}

/// Creates a QP for `ibv_create_qp`, and for `ibv_create_qp_ex` with `send_ops` (its
/// `IBV_QP_EX_WITH_*` flags, already checked): then the QP is a `verbs_qp` with
/// `VERBS_QP_EX` and the `ibv_wr_*` builder functions.
///
/// # Safety
/// `pd` is NULL or a PD of this library; `init` is NULL or the caller's attributes.
pub(super) unsafe fn create_qp_in(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
    verb: &str,
    send_ops: Option<u64>,
) -> *mut ibv_qp {
    {
        // SAFETY: a PD from ibv_alloc_pd and the caller's attributes (function contract).
        let (Some(p), Some(init)) = (unsafe { obj::<_, PdObj>(pd) }, unsafe { init.as_mut() })
        else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &p.shared;
        let fail = null_reporter(s, verb);
        let Some(qp_type) = qp_type_from_c(init.qp_type) else {
            return fail(
                libc::EOPNOTSUPP,
                &format!(
                    "QP type {} (softib has RC, UC, UD, XRC_SEND and XRC_RECV)",
                    init.qp_type
                ),
            );
        };
        // SAFETY: CQs and SRQ from this library, as ibv_create_qp(3) requires.
        let (send_cq, recv_cq, srq) = unsafe {
            (
                obj::<_, CqObj>(init.send_cq),
                obj::<_, CqObj>(init.recv_cq),
                obj::<_, SrqObj>(init.srq),
            )
        };
        // An XRC initiator has no receive side: its receive CQ may be NULL (the engine is
        // given the send CQ, which it never completes receives on for such a QP).
        let recv_cq = if qp_type == QpType::XrcSend {
            recv_cq.or(send_cq)
        } else {
            recv_cq
        };
        let (Some(send_cq), Some(recv_cq)) = (send_cq, recv_cq) else {
            return fail(libc::EINVAL, &"send_cq and recv_cq are required");
        };
        let cap = QpCap {
            max_send_wr: init.cap.max_send_wr,
            max_recv_wr: init.cap.max_recv_wr,
            max_send_sge: init.cap.max_send_sge.max(1),
            max_recv_sge: init.cap.max_recv_sge.max(1),
            max_inline_data: init.cap.max_inline_data,
        };
        let attr = QpInitAttr {
            qp_type,
            send_cq: CqHandle(send_cq.handle.0),
            recv_cq: CqHandle(recv_cq.handle.0),
            srq: srq.map(|q| SrqHandle(q.handle.0)),
            cap,
            sq_sig_all: init.sq_sig_all != 0,
        };
        let qpn = match s.net.create_qp(p.handle, attr) {
            Ok(q) => q,
            Err(e) => return fail(errno_of(&e), &e),
        };
        // A parent domain's allocator provides the send staging region (domain.rs).
        let staging = match super::domain::alloc_staging(p, pd, cap.max_inline_data) {
            Ok(st) => st,
            Err((errno, why)) => {
                let _ = s.net.destroy_qp(qpn);
                return fail(errno, &why);
            }
        };
        if p.parent.is_some() {
            // A parent domain with QPs cannot be deallocated (mlx5: EBUSY).
            p.children.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        // ibv_create_qp(3): the structure returns the capacities actually granted.
        init.cap = cap_to_c(&cap);
        let o = Box::into_raw(Box::new(QpObj {
            qpn,
            pd,
            init: InitCopy {
                qp_context: init.qp_context,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                srq: init.srq,
            },
            qp: UnsafeCell::new(super::qp_ex::verbs_qp_of(
                ibv_qp {
                    context: p.pd.context,
                    qp_context: init.qp_context,
                    pd,
                    send_cq: init.send_cq,
                    recv_cq: init.recv_cq,
                    srq: init.srq,
                    handle: qpn,
                    qp_num: qpn,
                    state: 0,
                    qp_type: init.qp_type,
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    cond: libc::PTHREAD_COND_INITIALIZER,
                    events_completed: 0,
                },
                send_ops,
            )),
            batch: Default::default(),
            send_ops: send_ops.unwrap_or(0),
            staging,
            qp_type,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all != 0,
            shared: s.clone(),
        }));
        s.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .qps
            .insert(qpn, o as usize);
        o.cast()
    }
}

/// `comp_mask` bits of `ibv_qp_init_attr_ex` softib implements (rxe's set).
const SUPPORTED_COMP_MASK: u32 =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

/// The `create_qp_ex` slot of `verbs_context`.
pub(super) unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the inline ibv_create_qp_ex passes our context and the caller's attributes.
        let (Some(c), Some(a)) = (unsafe { ctx_obj(ctx) }, unsafe { attr.as_mut() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &c.shared;
        let fail = null_reporter(s, "ibv_create_qp_ex");
        if a.qp_type == IBV_QPT_XRC_RECV {
            if a.comp_mask & !(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 {
                return fail(
                    libc::EINVAL,
                    &format!("comp_mask {:#x} for an XRC_RECV QP", a.comp_mask),
                );
            }
            if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
                return fail(
                    libc::EOPNOTSUPP,
                    &format!("create_flags {:#x}", a.create_flags),
                );
            }
            return super::xrc::create_xrc_target_qp(c, ctx, a);
        }
        if a.comp_mask & !SUPPORTED_COMP_MASK != 0 {
            return fail(
                libc::EOPNOTSUPP,
                &format!(
                    "comp_mask bits {:#x} (softib has PD, CREATE_FLAGS, SEND_OPS_FLAGS)",
                    a.comp_mask & !SUPPORTED_COMP_MASK
                ),
            );
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return fail(
                libc::EOPNOTSUPP,
                &format!("create_flags {:#x}", a.create_flags),
            );
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            return fail(libc::EINVAL, &"a PD is required (IBV_QP_INIT_ATTR_PD)");
        }
        let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            let supported = supported_send_ops(a.qp_type);
            if a.send_ops_flags & !supported != 0 {
                return fail(
                    libc::EOPNOTSUPP,
                    &format!(
                        "send_ops_flags {:#x} on QP type {} (supported: {supported:#x}; TSO \
                         is not implemented, ATOMIC WRITE is RC only)",
                        a.send_ops_flags & !supported,
                        a.qp_type
                    ),
                );
            }
            Some(a.send_ops_flags)
        } else {
            None
        };
        // SAFETY: `ibv_qp_init_attr_ex` starts with the fields of `ibv_qp_init_attr` (the
        // header's own ibv_create_qp_ex fallback relies on it); the PD is the caller's.
        unsafe { create_qp_in(a.pd, attr.cast(), "ibv_create_qp_ex", send_ops) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP from ibv_create_qp and the caller's attributes (ibv_modify_qp(3));
        // the application does not use the QP concurrently with this verb.
        let (Some(q), Some(a)) = (unsafe { obj::<_, QpObj>(qp) }, unsafe { attr.as_ref() }) else {
            return fail(libc::EINVAL);
        };
        let s = q.shared.clone();
        if let Err(r) = crate::validate::modify_qp_av(a, mask as u32, crate::validate::gid_table())
        {
            return report(&s, "ibv_modify_qp", r.errno, &r.why);
        }
        let (eattr, emask) = match qp_attr_from_c(a, mask as u32) {
            Ok(v) => v,
            Err(errno) => {
                return report(
                    &s,
                    "ibv_modify_qp",
                    errno,
                    &format!("attribute mask {mask:#x}"),
                )
            }
        };
        if emask.contains(QpAttrMask::AV) && a.ah_attr.is_global != 0 {
            super::resources::note_peer(&s, a.ah_attr.grh.dgid.raw);
        }
        if let Err(e) = s.net.modify_qp(q.qpn, &eattr, emask) {
            return report(&s, "ibv_modify_qp", errno_of(&e), &e);
        }
        if let Some(st) = s.net.qp_state(q.qpn) {
            // SAFETY: the C structure lives in an UnsafeCell; applications read `state`
            // without synchronisation with libibverbs too.
            unsafe { (*q.qp.get()).qp_ex.qp_base.state = qp_state_to_c(st) };
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP from ibv_create_qp and the caller's outputs (ibv_query_qp(3)).
        let (Some(q), false, false) = (
            unsafe { obj::<_, QpObj>(qp) },
            attr.is_null(),
            init.is_null(),
        ) else {
            return fail(libc::EINVAL);
        };
        let s = q.shared.clone();
        let a = match s.net.query_qp(q.qpn) {
            Ok(a) => a,
            Err(e) => return report(&s, "ibv_query_qp", errno_of(&e), &e),
        };
        let mut c = qp_attr_to_c(&a);
        c.cap = q.cap;
        // SAFETY: as in ibv_modify_qp.
        unsafe { (*q.qp.get()).qp_ex.qp_base.state = c.qp_state };
        // SAFETY: both outputs are non-NULL structures of the caller.
        unsafe {
            attr.write(c);
            init.write(ibv_qp_init_attr {
                qp_context: q.init.qp_context,
                send_cq: q.init.send_cq,
                recv_cq: q.init.recv_cq,
                srq: q.init.srq,
                cap: q.cap,
                qp_type: qp_type_to_c(q.qp_type),
                sq_sig_all: c_int::from(q.sq_sig_all),
            });
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP from ibv_create_qp (ibv_destroy_qp(3)).
        let Some(q) = (unsafe { obj::<_, QpObj>(qp) }) else {
            return fail(libc::EINVAL);
        };
        let s = q.shared.clone();
        if let Err(e) = s.net.destroy_qp(q.qpn) {
            return report(&s, "ibv_destroy_qp", errno_of(&e), &e);
        }
        s.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .qps
            .remove(&q.qpn);
        // Out of the registry, the QP gets no new events; those already queued go too.
        let addr = qp as usize;
        s.async_events.discard(|&(a, _)| a == addr);
        if let Some(st) = q.staging {
            // SAFETY: the QP is gone from the engine, so nothing reads the region now.
            unsafe { super::domain::free_staging(&s, &st) };
        }
        // SAFETY: the QP's PD outlives it (a parent domain refuses to go while it has QPs).
        if let Some(p) = unsafe { obj::<_, PdObj>(q.pd) }.filter(|p| p.parent.is_some()) {
            p.children.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
        // SAFETY: boxed by ibv_create_qp; the application no longer uses it.
        drop(unsafe { Box::from_raw(qp.cast::<QpObj>()) });
        0
    })
}
