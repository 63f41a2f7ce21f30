//! XRC (IBA vol. 1 Annex A14): the `open_xrcd`, `close_xrcd`, `get_srq_num` slots of
//! `verbs_context`, XRC SRQs through `ibv_create_srq_ex`, and XRC target QPs through
//! `ibv_create_qp_ex` (initiator QPs are ordinary QPs of type `IBV_QPT_XRC_SEND`,
//! `ibv_create_qp`'s path). The engine's rules are in softib-transport's `rc/xrc.rs`.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use softib_transport::{CqHandle, QpType, SrqAttr};

use super::{ctx_obj, guard, null_reporter, obj, report};
use crate::abi::*;
use crate::abi_ex::*;
use crate::convert::errno_of;
use crate::objects::{ContextObj, CqObj, InitCopy, PdObj, QpObj, SrqObj, XrcdObj};
use crate::sys::set_errno;

/// `struct ibv_xrcd_init_attr` of verbs.h.
#[repr(C)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

const IBV_XRCD_INIT_ATTR_FD: u32 = 1;
const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 2;

pub(super) unsafe extern "C" fn open_xrcd(
    ctx: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the inline ibv_open_xrcd passes our context and the caller's attributes.
        let (Some(c), Some(a)) = (unsafe { ctx_obj(ctx) }, unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &c.shared;
        let fail = null_reporter(s, "ibv_open_xrcd");
        let both = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & !both != 0 {
            return fail(libc::EOPNOTSUPP, &format!("comp_mask {:#x}", a.comp_mask));
        }
        // libibverbs' ibv_cmd_open_xrcd needs both fields.
        if a.comp_mask & both != both {
            return fail(libc::EINVAL, &"comp_mask needs FD and OFLAGS");
        }
        if a.fd == -1 {
            // The kernel (ib_uverbs_open_xrcd): without a file, only O_CREAT makes sense.
            if a.oflags & libc::O_CREAT == 0 {
                return fail(libc::EINVAL, &"fd -1 without O_CREAT");
            }
            let handle = s.net.open_xrcd();
            return Box::into_raw(Box::new(XrcdObj {
                xrcd: ctx,
                handle,
                file: None,
                shared: s.clone(),
            }))
            .cast();
        }
        // A domain named by a file (ib_uverbs_open_xrcd): the file's inode finds the domain;
        // O_CREAT creates it when there is none, O_EXCL refuses an existing one. The domain
        // is shared by the opens of this process (each process has its own softib device,
        // so other processes get their own domain for the same file).
        let key = match crate::sys::file_identity(a.fd) {
            Ok(k) => k,
            Err(e) => return fail(e.raw_os_error().unwrap_or(libc::EBADF), &e),
        };
        let mut files = s.xrcd_files.lock().unwrap_or_else(|p| p.into_inner());
        let handle = match files.get_mut(&key) {
            Some(_) if a.oflags & libc::O_EXCL != 0 => {
                return fail(libc::EEXIST, &"O_EXCL and the file has a domain");
            }
            Some((h, n)) => {
                *n += 1;
                *h
            }
            None if a.oflags & libc::O_CREAT == 0 => {
                return fail(libc::ENOENT, &"no domain for this file and no O_CREAT");
            }
            None => {
                let h = s.net.open_xrcd();
                files.insert(key, (h, 1));
                h
            }
        };
        Box::into_raw(Box::new(XrcdObj {
            xrcd: ctx,
            handle,
            file: Some(key),
            shared: s.clone(),
        }))
        .cast()
    })
}

pub(super) unsafe extern "C" fn close_xrcd(xrcd: *mut c_void) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: an XRCD from open_xrcd (ibv_close_xrcd(3)).
        let Some(x) = (unsafe { obj::<_, XrcdObj>(xrcd) }) else {
            return libc::EINVAL;
        };
        let s = &x.shared;
        if let Some(key) = x.file {
            let mut files = s.xrcd_files.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, n)) = files.get_mut(&key) {
                if *n > 1 {
                    // Other opens of the file still hold the domain.
                    *n -= 1;
                    drop(files);
                    // SAFETY: boxed by open_xrcd; the application no longer uses it.
                    drop(unsafe { Box::from_raw(xrcd.cast::<XrcdObj>()) });
                    return 0;
                }
            }
            if let Err(e) = s.net.close_xrcd(x.handle) {
                return report(s, "ibv_close_xrcd", errno_of(&e), &e);
            }
            files.remove(&key);
        } else if let Err(e) = s.net.close_xrcd(x.handle) {
            return report(s, "ibv_close_xrcd", errno_of(&e), &e);
        }
        // SAFETY: boxed by open_xrcd; the application no longer uses it.
        drop(unsafe { Box::from_raw(xrcd.cast::<XrcdObj>()) });
        0
    })
}

pub(super) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: an SRQ of this library and the caller's out pointer (ibv_get_srq_num(3)).
        let (Some(q), Some(out)) = (unsafe { obj::<_, SrqObj>(srq) }, unsafe { num.as_mut() })
        else {
            return libc::EINVAL;
        };
        match q.shared.net.srq_num(q.handle) {
            Some(n) => {
                *out = n;
                0
            }
            None => report(
                &q.shared,
                "ibv_get_srq_num",
                libc::EINVAL,
                &"not an XRC SRQ",
            ),
        }
    })
}

/// `ibv_create_srq_ex` with `IBV_SRQT_XRC` (`comp_mask` TYPE, XRCD, CQ and PD).
pub(super) fn create_xrc_srq(c: &ContextObj, a: &ibv_srq_init_attr_ex) -> *mut ibv_srq {
    let s = &c.shared;
    let fail = null_reporter(s, "ibv_create_srq_ex");
    let need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    if a.comp_mask & need != need {
        return fail(libc::EINVAL, &"an XRC SRQ needs XRCD, CQ and PD");
    }
    // SAFETY: NULL or objects of this library (ibv_create_srq_ex(3)).
    let (x, cq, p) = unsafe {
        (
            obj::<_, XrcdObj>(a.xrcd),
            obj::<_, CqObj>(a.cq),
            obj::<_, PdObj>(a.pd),
        )
    };
    let (Some(x), Some(cq), Some(p)) = (x, cq, p) else {
        return fail(
            libc::EINVAL,
            &"xrcd, cq and pd must be objects of this device",
        );
    };
    let max_sge = match crate::validate::create_srq(&a.attr, s.limits.max_qp_wr, s.limits.max_sge) {
        Ok(n) => n,
        Err(r) => return fail(r.errno, &r.why),
    };
    let attr = SrqAttr {
        max_wr: a.attr.max_wr,
        max_sge,
        srq_limit: a.attr.srq_limit,
    };
    let handle = match s
        .net
        .create_xrc_srq(p.handle, x.handle, CqHandle(cq.handle.0), attr)
    {
        Ok(h) => h,
        Err(e) => return fail(errno_of(&e), &e),
    };
    let mut granted = a.attr;
    granted.max_sge = max_sge;
    let o = Box::into_raw(Box::new(SrqObj {
        srq: ibv_srq {
            context: p.pd.context,
            srq_context: a.srq_context,
            pd: a.pd,
            handle: handle.0,
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            cond: libc::PTHREAD_COND_INITIALIZER,
            events_completed: 0,
        },
        handle,
        attr: Mutex::new(granted),
        shared: s.clone(),
    }));
    s.registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .srqs
        .insert(handle.0, o as usize);
    o.cast()
}

/// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV` (`comp_mask` XRCD): a target QP of the
/// domain, with no PD, CQ or queues of its own.
pub(super) fn create_xrc_target_qp(
    c: &ContextObj,
    ctx: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let s = &c.shared;
    let fail = null_reporter(s, "ibv_create_qp_ex");
    // SAFETY: NULL or an XRCD of this library.
    let Some(x) = (unsafe { obj::<_, XrcdObj>(a.xrcd) }) else {
        return fail(libc::EINVAL, &"an XRC_RECV QP needs IBV_QP_INIT_ATTR_XRCD");
    };
    let qpn = match s.net.create_xrc_target_qp(x.handle) {
        Ok(q) => q,
        Err(e) => return fail(errno_of(&e), &e),
    };
    // The kernel reports no queues for a target QP.
    a.cap = ibv_qp_cap::default();
    let o = Box::into_raw(Box::new(QpObj {
        qp: UnsafeCell::new(super::qp_ex::verbs_qp_of(
            ibv_qp {
                context: ctx,
                qp_context: a.qp_context,
                pd: std::ptr::null_mut(),
                send_cq: std::ptr::null_mut(),
                recv_cq: std::ptr::null_mut(),
                srq: std::ptr::null_mut(),
                handle: qpn,
                qp_num: qpn,
                state: 0,
                qp_type: IBV_QPT_XRC_RECV,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            None,
        )),
        batch: Default::default(),
        send_ops: 0,
        staging: None,
        qpn,
        pd: std::ptr::null_mut(),
        init: InitCopy {
            qp_context: a.qp_context,
            send_cq: std::ptr::null_mut(),
            recv_cq: std::ptr::null_mut(),
            srq: std::ptr::null_mut(),
        },
        qp_type: QpType::XrcRecv,
        cap: ibv_qp_cap::default(),
        sq_sig_all: false,
        shared: s.clone(),
    }));
    // SAFETY: `o` is the new object; record its domain as libibverbs' verbs_qp does.
    unsafe { (*(*o).qp.get()).xrcd = a.xrcd };
    s.registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .qps
        .insert(qpn, o as usize);
    o.cast()
}
