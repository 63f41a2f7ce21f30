//! Queue pairs: create, modify, query, destroy.

use std::ffi::c_int;

use softib_transport::{CqHandle, QpAttrMask, QpCap, QpInitAttr, SrqHandle};

use super::{fail, guard, obj, report};
use crate::abi::*;
use crate::convert::{
    cap_to_c, errno_of, qp_attr_from_c, qp_attr_to_c, qp_state_to_c, qp_type_from_c, qp_type_to_c,
};
use crate::objects::{CqObj, InitCopy, PdObj, QpObj, SrqObj};
use crate::sys::set_errno;
use std::cell::UnsafeCell;

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a PD from ibv_alloc_pd and the caller's attributes (ibv_create_qp(3)).
        let (Some(p), Some(init)) = (unsafe { obj::<_, PdObj>(pd) }, unsafe { init.as_mut() })
        else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &p.shared;
        let fail = |errno: i32, why: &dyn std::fmt::Display| {
            set_errno(report(s, "ibv_create_qp", errno, why));
            std::ptr::null_mut()
        };
        let Some(qp_type) = qp_type_from_c(init.qp_type) else {
            return fail(
                libc::EOPNOTSUPP,
                &format!("QP type {} (softib has RC, UC and UD)", init.qp_type),
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
            qp: UnsafeCell::new(ibv_qp {
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
            }),
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
        if let Err(r) = crate::validate::modify_qp_av(a, mask as u32, super::device::gid_table()) {
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
            unsafe { (*q.qp.get()).state = qp_state_to_c(st) };
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
        unsafe { (*q.qp.get()).state = c.qp_state };
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
        // SAFETY: boxed by ibv_create_qp; the application no longer uses it.
        drop(unsafe { Box::from_raw(qp.cast::<QpObj>()) });
        0
    })
}
