//! Protection domains, memory regions, completion channels and queues, SRQs and address
//! handles.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use softib_transport::{AccessFlags, SrqAttr, VecMemory};

use super::{ctx_obj, fail, guard, null_reporter, obj, report};
use crate::abi::*;
use crate::abi_ex::*;
use crate::convert::{access_from_c, ah_attr_from_c, errno_of, source_gid_of_grh_area};
use crate::cq_ex::{CqExState, SUPPORTED_CQ_FLAGS, SUPPORTED_WC_FLAGS};
use crate::events::{CqTarget, EventQueue};
use crate::objects::{AhObj, ChannelObj, CqObj, MrObj, PdObj, Shared, SrqObj};
use crate::process_memory::ProcessMemory;
use crate::sys::set_errno;
use softib_net::raw_memory::RawMemory;

/// Returns NULL with `errno` set: the failure convention of the object-creating verbs.
fn null_with<T>(errno: i32) -> *mut T {
    set_errno(errno);
    std::ptr::null_mut()
}

/// Registers a PD's inline staging region.
fn bounce_region(
    s: &Shared,
    pd: softib_transport::PdHandle,
) -> Result<u32, softib_transport::VerbsError> {
    let len = s.limits.max_inline_data.max(1) as usize;
    s.net
        .with_engine(|e, _| {
            e.reg_mr(
                pd,
                Box::new(VecMemory::zeroed(len)),
                0,
                AccessFlags::LOCAL_WRITE,
            )
        })
        .map(|k| k.lkey)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a context from ibv_open_device (ibv_alloc_pd(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            return null_with(libc::EINVAL);
        };
        let s = &c.shared;
        let handle = s.net.alloc_pd();
        let bounce = match bounce_region(s, handle) {
            Ok(k) => k,
            Err(e) => {
                let _ = s.net.with_engine(|en, _| en.dealloc_pd(handle));
                return null_with(report(s, "ibv_alloc_pd", errno_of(&e), &e));
            }
        };
        let o = Box::new(PdObj {
            pd: ibv_pd {
                context: ctx,
                handle: handle.0,
            },
            handle,
            bounce_lkey: bounce.into(),
            parent: None,
            children: 0.into(),
            shared: s.clone(),
        });
        Box::into_raw(o).cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a PD from ibv_alloc_pd (ibv_dealloc_pd(3)).
        let Some(p) = (unsafe { obj::<_, PdObj>(pd) }) else {
            return fail(libc::EINVAL);
        };
        let s = &p.shared;
        if let Some(parent) = &p.parent {
            // SAFETY: a parent domain the application gives up (ibv_dealloc_pd(3)).
            return unsafe { super::domain::dealloc_parent_domain(pd, parent) };
        }
        if p.children.load(Ordering::Acquire) > 0 {
            return report(s, "ibv_dealloc_pd", libc::EBUSY, &"parent domains use it");
        }
        let bounce = p.bounce_lkey.load(Ordering::Acquire);
        let r = s.net.with_engine(|e, _| {
            e.dereg_mr(bounce)?;
            e.dealloc_pd(p.handle)
        });
        if let Err(e) = r {
            // Still in use: give the PD its staging region back so inline sends keep working.
            if let Ok(k) = bounce_region(s, p.handle) {
                p.bounce_lkey.store(k, Ordering::Release);
            }
            return report(s, "ibv_dealloc_pd", errno_of(&e), &e);
        }
        // SAFETY: boxed by ibv_alloc_pd; the application no longer uses it.
        drop(unsafe { Box::from_raw(pd.cast::<PdObj>()) });
        0
    })
}

fn reg_mr_common(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    // SAFETY: a PD from ibv_alloc_pd (ibv_reg_mr(3)).
    let Some(p) = (unsafe { obj::<_, PdObj>(pd) }) else {
        return null_with(libc::EINVAL);
    };
    let s = &p.shared;
    let checks = crate::validate::mr_access(access)
        .and_then(|()| crate::validate::mr_range(addr as u64, length, iova));
    if let Err(r) = checks {
        return null_with(report(s, "ibv_reg_mr", r.errno, &r.why));
    }
    let on_demand = access & IBV_ACCESS_ON_DEMAND != 0;
    // The implicit ODP region (ibv_reg_mr(3)): address NULL, length SIZE_MAX, the whole
    // address space at iova 0.
    let implicit = on_demand && addr.is_null() && length == usize::MAX;
    if addr.is_null() && !implicit {
        // The kernel cannot pin page 0 of the process: EFAULT.
        return null_with(report(s, "ibv_reg_mr", libc::EFAULT, &"NULL address"));
    }
    let (memory, iova): (Box<dyn softib_transport::Memory>, u64) = if implicit {
        (Box::new(ProcessMemory::new(0, usize::MAX)), 0)
    } else if on_demand {
        // Explicit ODP: the range may be (partly) unmapped now or later, so it is reached
        // only through system calls that cannot fault (process_memory.rs).
        (Box::new(ProcessMemory::new(addr as usize, length)), iova)
    } else {
        // SAFETY: ibv_reg_mr(3): the application keeps `addr..addr+length` mapped until
        // ibv_dereg_mr, which drops this RawMemory.
        (
            Box::new(unsafe { RawMemory::new(addr.cast(), length) }),
            iova,
        )
    };
    let r = s
        .net
        .with_engine(|e, _| e.reg_mr(p.handle, memory, iova, access_from_c(access)));
    match r {
        Ok(keys) => Box::into_raw(Box::new(MrObj {
            mr: ibv_mr {
                context: p.pd.context,
                pd,
                addr,
                length,
                handle: keys.lkey,
                lkey: keys.lkey,
                rkey: keys.rkey,
            },
            dm: std::ptr::null(),
            access,
            iova,
            shared: s.clone(),
        }))
        .cast(),
        Err(e) => null_with(report(s, "ibv_reg_mr", errno_of(&e), &e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        reg_mr_common(pd, addr, length, addr as u64, access as u32)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        reg_mr_common(pd, addr, length, iova, access as u32)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        reg_mr_common(pd, addr, length, iova, access)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: an MR from ibv_reg_mr (ibv_dereg_mr(3)).
        let Some(m) = (unsafe { obj::<_, MrObj>(mr) }) else {
            return fail(libc::EINVAL);
        };
        let s = &m.shared;
        if let Err(e) = s.net.with_engine(|e, _| e.dereg_mr(m.mr.lkey)) {
            // An MR with memory windows bound: rxe_dereg_mr fails with EINVAL, not EBUSY.
            let errno = match e {
                softib_transport::VerbsError::InUse { kind: "MR", .. } => libc::EINVAL,
                _ => errno_of(&e),
            };
            return report(s, "ibv_dereg_mr", errno, &e);
        }
        // SAFETY: a DM outlives its MRs (free_dm refuses while `mrs` > 0).
        if let Some(dm) = unsafe { m.dm.as_ref() } {
            dm.mrs.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: boxed by reg_mr_common; the application no longer uses it.
        drop(unsafe { Box::from_raw(mr.cast::<MrObj>()) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a context from ibv_open_device (ibv_create_comp_channel(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            return null_with(libc::EINVAL);
        };
        if let Err(errno) = c.shared.ensure_notifier() {
            return null_with(errno);
        }
        let queue = match EventQueue::new() {
            Ok(q) => Arc::new(q),
            Err(e) => return null_with(e.raw_os_error().unwrap_or(libc::EMFILE)),
        };
        Box::into_raw(Box::new(ChannelObj {
            ch: UnsafeCell::new(ibv_comp_channel {
                context: ctx,
                fd: queue.raw_fd(),
                refcnt: 0,
            }),
            refcnt: AtomicI32::new(0),
            queue,
        }))
        .cast()
    })
}

/// Counts a CQ attached to (+1) or detached from (-1) a channel, and shows the count in
/// the C structure's `refcnt`, as libibverbs does.
fn add_cq(chan: &ChannelObj, delta: i32) {
    let n = chan.refcnt.fetch_add(delta, Ordering::AcqRel) + delta;
    // SAFETY: the channel's C structure lives in an UnsafeCell; `refcnt` is informational
    // for the application.
    unsafe { (*chan.ch.get()).refcnt = n };
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a channel from ibv_create_comp_channel.
        let Some(c) = (unsafe { obj::<_, ChannelObj>(ch) }) else {
            return fail(libc::EINVAL);
        };
        if c.refcnt.load(Ordering::Acquire) > 0 {
            return libc::EBUSY;
        }
        // SAFETY: boxed by ibv_create_comp_channel; no CQ refers to it (refcnt 0).
        drop(unsafe { Box::from_raw(ch.cast::<ChannelObj>()) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(std::ptr::null_mut(), || {
        create_cq_in(
            ctx,
            cqe,
            cq_context,
            channel,
            comp_vector,
            None,
            "ibv_create_cq",
        )
        .cast()
    })
}

/// The `create_cq_ex` slot of `verbs_context`.
pub(super) unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the inline ibv_create_cq_ex passes our context and the caller's attributes.
        let (Some(c), Some(a)) = (unsafe { ctx_obj(ctx) }, unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &c.shared;
        let fail = null_reporter(s, "ibv_create_cq_ex");
        let known = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
        if a.comp_mask & !known != 0 {
            return fail(libc::EINVAL, &format!("comp_mask {:#x}", a.comp_mask));
        }
        if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 {
            return fail(
                libc::EOPNOTSUPP,
                &format!(
                    "wc_flags {:#x} (softib has no VLAN, flow tag or tag-matching fields)",
                    a.wc_flags & !SUPPORTED_WC_FLAGS
                ),
            );
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & !SUPPORTED_CQ_FLAGS != 0 {
            return fail(libc::EOPNOTSUPP, &format!("flags {:#x}", a.flags));
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            // A CQ "in" a parent domain (its thread domain and allocators apply): the
            // domain must be one of ours.
            // SAFETY: NULL or a PD / parent domain of this library.
            match unsafe { obj::<_, PdObj>(a.parent_domain) } {
                Some(p) if p.parent.is_some() => {}
                _ => return fail(libc::EINVAL, &"parent_domain is not a parent domain"),
            }
        }
        let Ok(cqe) = c_int::try_from(a.cqe) else {
            return fail(libc::EINVAL, &format!("cqe {}", a.cqe));
        };
        let Ok(vector) = c_int::try_from(a.comp_vector) else {
            return fail(libc::EINVAL, &format!("comp_vector {}", a.comp_vector));
        };
        create_cq_in(
            ctx,
            cqe,
            a.cq_context,
            a.channel,
            vector,
            Some(CqExState::new(a.wc_flags)),
            "ibv_create_cq_ex",
        )
    })
}

/// Creates a CQ for `ibv_create_cq`, and for `ibv_create_cq_ex` with `ex` (the extended
/// polling functions and their state, already checked).
pub(super) fn create_cq_in(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    ex: Option<crate::cq_ex::CqExState>,
    verb: &str,
) -> *mut ibv_cq_ex {
    {
        // SAFETY: a context from ibv_open_device (ibv_create_cq(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            return null_with(libc::EINVAL);
        };
        let s = &c.shared;
        if let Err(r) = crate::validate::create_cq(cqe, comp_vector, s.limits.max_cqe) {
            return null_with(report(s, verb, r.errno, &r.why));
        }
        let handle = match s.net.create_cq(cqe as u32) {
            Ok(h) => h,
            Err(e) => return null_with(report(s, verb, errno_of(&e), &e)),
        };
        let with_polling = ex.is_some();
        let o = Box::into_raw(Box::new(CqObj {
            channel,
            cq: UnsafeCell::new(super::cq_ex::cq_ex_of(
                ibv_cq {
                    context: ctx,
                    channel,
                    cq_context,
                    handle: handle.0,
                    cqe,
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    cond: libc::PTHREAD_COND_INITIALIZER,
                    comp_events_completed: 0,
                    async_events_completed: 0,
                },
                with_polling,
            )),
            ex,
            handle,
            shared: s.clone(),
        }));
        let mut reg = s.registry.lock().unwrap_or_else(|p| p.into_inner());
        reg.cq_addrs.insert(handle.0, o as usize);
        // SAFETY: `channel` is NULL or a channel from ibv_create_comp_channel.
        if let Some(chan) = unsafe { obj::<_, ChannelObj>(channel) } {
            add_cq(chan, 1);
            reg.cqs.insert(
                handle.0,
                CqTarget {
                    queue: chan.queue.clone(),
                    cq_addr: o as usize,
                },
            );
        }
        o.cast()
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a CQ from ibv_create_cq (ibv_destroy_cq(3)).
        let Some(q) = (unsafe { obj::<_, CqObj>(cq) }) else {
            return fail(libc::EINVAL);
        };
        let s = &q.shared;
        if let Err(e) = s.net.destroy_cq(q.handle) {
            return report(s, "ibv_destroy_cq", errno_of(&e), &e);
        }
        let mut reg = s.registry.lock().unwrap_or_else(|p| p.into_inner());
        reg.cq_addrs.remove(&q.handle.0);
        reg.cqs.remove(&q.handle.0);
        drop(reg);
        // Out of the registry, the CQ gets no new events; those already queued go too.
        let addr = cq as usize;
        s.async_events.discard(|&(a, _)| a == addr);
        // SAFETY: the channel, if any, outlives its CQs (destroy refuses while refcnt > 0).
        if let Some(chan) = unsafe { obj::<_, ChannelObj>(q.channel) } {
            chan.queue.discard(|&a| a == addr);
            add_cq(chan, -1);
        }
        // SAFETY: boxed by ibv_create_cq; the application no longer uses it.
        drop(unsafe { Box::from_raw(cq.cast::<CqObj>()) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    ctx_out: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        // SAFETY: a channel from ibv_create_comp_channel (ibv_get_cq_event(3)).
        let Some(c) = (unsafe { obj::<_, ChannelObj>(ch) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        match c.queue.pop() {
            Ok(addr) => {
                let cq = addr as *mut ibv_cq;
                // SAFETY: `addr` is a live CQ of this channel (its event was queued while it
                // existed, and verbs forbid destroying a CQ with unacknowledged events);
                // the out pointers are the caller's (ibv_get_cq_event(3)).
                unsafe {
                    if !cq_out.is_null() {
                        *cq_out = cq;
                    }
                    if !ctx_out.is_null() {
                        *ctx_out = (*cq).cq_context;
                    }
                }
                0
            }
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EAGAIN));
                -1
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    guard((), || {
        // SAFETY: a CQ from ibv_create_cq; the counter is the application-visible one
        // libibverbs keeps too.
        if !cq.is_null() {
            // SAFETY: `cq` is a CQ from ibv_create_cq; its C structure lives in an
            // UnsafeCell, so writing through the raw pointer aliases no Rust reference.
            unsafe {
                let p = std::ptr::addr_of_mut!((*cq).comp_events_completed);
                p.write(p.read().wrapping_add(nevents));
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a PD from ibv_alloc_pd and the caller's attributes (ibv_create_srq(3)).
        let (Some(p), Some(init)) = (unsafe { obj::<_, PdObj>(pd) }, unsafe { init.as_mut() })
        else {
            return null_with(libc::EINVAL);
        };
        let s = &p.shared;
        let max_sge =
            match crate::validate::create_srq(&init.attr, s.limits.max_qp_wr, s.limits.max_sge) {
                Ok(n) => n,
                Err(r) => return null_with(report(s, "ibv_create_srq", r.errno, &r.why)),
            };
        let attr = SrqAttr {
            max_wr: init.attr.max_wr,
            max_sge,
            srq_limit: init.attr.srq_limit,
        };
        let handle = match s.net.create_srq(p.handle, attr) {
            Ok(h) => h,
            Err(e) => return null_with(report(s, "ibv_create_srq", errno_of(&e), &e)),
        };
        // The kernel writes the granted sizes back (ibv_cmd_create_srq).
        init.attr.max_sge = max_sge;
        let o = Box::into_raw(Box::new(SrqObj {
            srq: ibv_srq {
                context: p.pd.context,
                srq_context: init.srq_context,
                pd,
                handle: handle.0,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            handle,
            attr: Mutex::new(init.attr),
            shared: s.clone(),
        }));
        s.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .srqs
            .insert(handle.0, o as usize);
        o.cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: an SRQ from ibv_create_srq (ibv_modify_srq(3)); exclusive use during the
        // call is the application's duty, as with any verb on one object.
        let (Some(q), Some(a)) = (unsafe { obj::<_, SrqObj>(srq) }, unsafe { attr.as_ref() })
        else {
            return fail(libc::EINVAL);
        };
        let mask = mask as u32;
        if mask & IBV_SRQ_MAX_WR != 0 {
            return report(
                &q.shared,
                "ibv_modify_srq",
                libc::EOPNOTSUPP,
                &"resizing an SRQ",
            );
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            if let Err(e) = q.shared.net.modify_srq(q.handle, a.srq_limit) {
                return report(&q.shared, "ibv_modify_srq", errno_of(&e), &e);
            }
            q.attr.lock().unwrap_or_else(|p| p.into_inner()).srq_limit = a.srq_limit;
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: an SRQ from ibv_create_srq and the caller's output structure.
        let (Some(q), false) = (unsafe { obj::<_, SrqObj>(srq) }, attr.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: non-NULL output structure (ibv_query_srq(3)).
        unsafe { attr.write(*q.attr.lock().unwrap_or_else(|p| p.into_inner())) };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: an SRQ from ibv_create_srq (ibv_destroy_srq(3)).
        let Some(q) = (unsafe { obj::<_, SrqObj>(srq) }) else {
            return fail(libc::EINVAL);
        };
        let s = &q.shared;
        if let Err(e) = s.net.with_engine(|e, _| e.destroy_srq(q.handle)) {
            return report(s, "ibv_destroy_srq", errno_of(&e), &e);
        }
        s.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .srqs
            .remove(&q.handle.0);
        let addr = srq as usize;
        s.async_events.discard(|&(a, _)| a == addr);
        // SAFETY: boxed by ibv_create_srq; the application no longer uses it.
        drop(unsafe { Box::from_raw(srq.cast::<SrqObj>()) });
        0
    })
}

/// Tells the device which UDP port a peer listens on when this device does not use 4791
/// (peers of a shim are assumed to share its port, see config.rs).
pub(crate) fn note_peer(s: &Shared, dgid: [u8; 16]) {
    if s.config.port != crate::config::DEFAULT_PORT {
        s.net
            .set_peer_port(softib_net::roce::ip_from_gid(dgid), s.config.port);
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a PD from ibv_alloc_pd and the caller's attributes (ibv_create_ah(3)).
        let (Some(p), Some(a)) = (unsafe { obj::<_, PdObj>(pd) }, unsafe { attr.as_ref() }) else {
            return null_with(libc::EINVAL);
        };
        let s = &p.shared;
        if let Err(r) = crate::validate::av(a, crate::validate::gid_table()) {
            return null_with(report(s, "ibv_create_ah", r.errno, &r.why));
        }
        let av = ah_attr_from_c(a);
        note_peer(s, a.grh.dgid.raw);
        match s.net.create_ah(p.handle, av) {
            Ok(handle) => Box::into_raw(Box::new(AhObj {
                ah: ibv_ah {
                    context: p.pd.context,
                    pd,
                    handle: handle.0,
                },
                handle,
                shared: s.clone(),
            }))
            .cast(),
            Err(e) => null_with(report(s, "ibv_create_ah", errno_of(&e), &e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: an AH from ibv_create_ah (ibv_destroy_ah(3)).
        let Some(a) = (unsafe { obj::<_, AhObj>(ah) }) else {
            return fail(libc::EINVAL);
        };
        if let Err(e) = a.shared.net.with_engine(|e, _| e.destroy_ah(a.handle)) {
            return report(&a.shared, "ibv_destroy_ah", errno_of(&e), &e);
        }
        // SAFETY: boxed by ibv_create_ah; the application no longer uses it.
        drop(unsafe { Box::from_raw(ah.cast::<AhObj>()) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    attr: *mut ibv_ah_attr,
) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's context, completion, received GRH area (40 bytes, in front
        // of the UD message) and output structure (ibv_init_ah_from_wc(3)).
        let (Some(_), Some(w), false, false) = (
            unsafe { ctx_obj(ctx) },
            unsafe { wc.as_ref() },
            grh.is_null(),
            attr.is_null(),
        ) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if w.wc_flags & IBV_WC_GRH == 0 {
            // RoCE needs the sender's address, which only the GRH area carries.
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: `grh` points at the 40-byte GRH area of a received UD message.
        let area = unsafe { &*grh.cast::<[u8; 40]>() };
        let a = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: source_gid_of_grh_area(area),
                },
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: w.slid,
            sl: w.sl,
            src_path_bits: w.dlid_path_bits,
            static_rate: 0,
            is_global: 1,
            port_num: port,
        };
        // SAFETY: non-NULL output structure.
        unsafe { attr.write(a) };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    port: u8,
) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a PD from ibv_alloc_pd.
        let Some(p) = (unsafe { obj::<_, PdObj>(pd) }) else {
            return null_with(libc::EINVAL);
        };
        let mut a = ibv_ah_attr::default();
        // SAFETY: arguments forwarded as received (ibv_create_ah_from_wc(3)).
        if unsafe { ibv_init_ah_from_wc(p.pd.context, port, wc, grh, &mut a) } != 0 {
            return std::ptr::null_mut();
        }
        // SAFETY: as above; `a` is a local structure.
        unsafe { ibv_create_ah(pd, &mut a) }
    })
}

/// `ibv_rereg_mr`'s return values (enum ibv_rereg_mr_err_code).
const IBV_REREG_MR_ERR_INPUT: c_int = -1;
const IBV_REREG_MR_ERR_CMD: c_int = -4;

/// What libibverbs checks before the kernel sees a rereg (libibverbs/verbs.c): the
/// failures return `IBV_REREG_MR_ERR_INPUT` with errno EINVAL.
fn rereg_input_ok(
    m: &MrObj,
    flags: c_int,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> bool {
    let flags = flags as u32;
    let all = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
    m.dm.is_null()
        && flags & !all == 0
        && !(flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 && (length == 0 || addr.is_null()))
        && !(access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0)
}

/// ibv_rereg_mr(3): changes the translation, PD and/or access of a region. The kernel's
/// rules apply (no flag is EINVAL, as are a foreign PD or invalid access bits; these return
/// `IBV_REREG_MR_ERR_CMD`). The region changes in place and keeps its lkey and rkey, so a
/// peer holding the rkey reaches the region under its new rules.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard(IBV_REREG_MR_ERR_CMD, || {
        // SAFETY: an MR of this library (ibv_rereg_mr(3)); the application does not use it
        // concurrently with this verb.
        let Some(m) = (unsafe { obj::<_, MrObj>(mr) }) else {
            set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        };
        let s = m.shared.clone();
        if !rereg_input_ok(m, flags, addr, length, access) {
            set_errno(report(
                &s,
                "ibv_rereg_mr",
                libc::EINVAL,
                &format!("flags {flags:#x}, access {access:#x}, addr {addr:p}, length {length}"),
            ));
            return IBV_REREG_MR_ERR_INPUT;
        }
        let cmd_fail = |errno: i32, why: &dyn std::fmt::Display| {
            set_errno(report(&s, "ibv_rereg_mr", errno, why));
            IBV_REREG_MR_ERR_CMD
        };
        let flags = flags as u32;
        if flags == 0 {
            return cmd_fail(libc::EINVAL, &"no IBV_REREG_MR_CHANGE_* flag");
        }
        let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            pd
        } else {
            m.mr.pd
        };
        // SAFETY: NULL or a PD of this library.
        let Some(p) = (unsafe { obj::<_, PdObj>(new_pd) }) else {
            return cmd_fail(libc::EINVAL, &"the new PD is not a PD of this device");
        };
        let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            access as u32
        } else {
            m.access
        };
        let (new_addr, new_len, new_iova) = if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            (addr, length, addr as u64)
        } else {
            (m.mr.addr, m.mr.length, m.iova)
        };
        let translation = (flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0).then(|| {
            // SAFETY: ibv_rereg_mr(3) with CHANGE_TRANSLATION: the application keeps the
            // new range mapped until ibv_dereg_mr, as for ibv_reg_mr.
            let m: Box<dyn softib_transport::Memory> =
                Box::new(unsafe { RawMemory::new(new_addr.cast(), new_len) });
            (m, new_iova)
        });
        let lkey = m.mr.lkey;
        let engine_pd = (flags & IBV_REREG_MR_CHANGE_PD != 0).then_some(p.handle);
        let engine_access =
            (flags & IBV_REREG_MR_CHANGE_ACCESS != 0).then(|| access_from_c(new_access));
        let r = s
            .net
            .with_engine(|e, _| e.rereg_mr(lkey, engine_pd, translation, engine_access));
        match r {
            // The replaced view of the old buffer goes here, outside the device lock.
            Ok(old) => drop(old),
            Err(e) => return cmd_fail(errno_of(&e), &e),
        }
        let o = mr.cast::<MrObj>();
        // SAFETY: the object is ours and not otherwise referenced now (`m` is not used
        // after this point); the application does not use the MR during the verb.
        unsafe {
            (*o).mr.pd = new_pd;
            (*o).mr.addr = new_addr;
            (*o).mr.length = new_len;
            (*o).access = new_access;
            (*o).iova = new_iova;
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a CQ of this library (ibv_resize_cq(3)).
        let Some(q) = (unsafe { obj::<_, CqObj>(cq) }) else {
            return libc::EINVAL;
        };
        let Ok(n) = u32::try_from(cqe) else {
            return report(
                &q.shared,
                "ibv_resize_cq",
                libc::EINVAL,
                &format!("cqe {cqe}"),
            );
        };
        if let Err(e) = q.shared.net.with_engine(|en, _| en.resize_cq(q.handle, n)) {
            return report(&q.shared, "ibv_resize_cq", errno_of(&e), &e);
        }
        // SAFETY: the C structure lives in an UnsafeCell; libibverbs' providers update
        // `cqe` the same way.
        unsafe { (*q.cq.get()).cqe = cqe };
        0
    })
}

/// The `create_srq_ex` slot: basic SRQs (the inline wrapper calls it for any comp_mask
/// beyond PD and TYPE); XRC and tag-matching SRQs are not implemented.
pub(super) unsafe extern "C" fn create_srq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the inline ibv_create_srq_ex passes our context and the caller's attributes.
        let (Some(c), Some(a)) = (unsafe { ctx_obj(ctx) }, unsafe { attr.as_ref() }) else {
            return null_with(libc::EINVAL);
        };
        let s = &c.shared;
        let ty = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
            a.srq_type
        } else {
            IBV_SRQT_BASIC
        };
        if ty == IBV_SRQT_XRC {
            return super::xrc::create_xrc_srq(c, a);
        }
        if ty != IBV_SRQT_BASIC || a.comp_mask & IBV_SRQ_INIT_ATTR_XRCD != 0 {
            return null_with(report(
                s,
                "ibv_create_srq_ex",
                libc::EOPNOTSUPP,
                &format!("SRQ type {ty} (softib has basic and XRC SRQs; tag matching is not implemented)"),
            ));
        }
        let known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
        if a.comp_mask & !known != 0 {
            return null_with(report(
                s,
                "ibv_create_srq_ex",
                libc::EOPNOTSUPP,
                &format!("comp_mask {:#x}", a.comp_mask),
            ));
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
            return null_with(report(
                s,
                "ibv_create_srq_ex",
                libc::EINVAL,
                &"a PD is required",
            ));
        }
        // SAFETY: `ibv_srq_init_attr_ex` starts with the fields of `ibv_srq_init_attr`
        // (verbs.h's own fallback relies on it).
        unsafe { ibv_create_srq(a.pd, attr.cast()) }
    })
}

/// The `advise_mr` slot (ibv_advise_mr(3)): prefetching ODP ranges. softib has no page
/// tables of its own to fill, so a prefetch is a probe: with `IBV_ADVISE_MR_FLAG_FLUSH`
/// (synchronous) every range must be accessible now (readable; writable for
/// `PREFETCH_WRITE`) or the verb fails with EFAULT, as a failed synchronous page fault
/// does; without it the advice is accepted as a hint. `PREFETCH_NO_FAULT` never faults, so
/// it always succeeds once the SGEs are valid.
pub(super) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: u32,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the inline ibv_advise_mr passes our PD.
        let Some(p) = (unsafe { obj::<_, PdObj>(pd) }) else {
            return libc::EINVAL;
        };
        let s = &p.shared;
        if advice > IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT || flags & !IBV_ADVISE_MR_FLAG_FLUSH != 0
        {
            return report(
                s,
                "ibv_advise_mr",
                libc::EOPNOTSUPP,
                &format!("advice {advice}, flags {flags:#x}"),
            );
        }
        if num_sge == 0 || sg_list.is_null() {
            return report(s, "ibv_advise_mr", libc::EINVAL, &"no SGE");
        }
        // SAFETY: ibv_advise_mr(3): `sg_list` holds `num_sge` SGEs.
        let sges = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
        let write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
        let probe = flags & IBV_ADVISE_MR_FLAG_FLUSH != 0
            && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
        let r = s.net.with_engine(|e, _| {
            for g in sges {
                let sge = softib_transport::Sge {
                    addr: g.addr,
                    length: g.length,
                    lkey: g.lkey,
                };
                // The SGE must name an ODP region of this PD (checked like a local SGE).
                let Some(off) = e.local_region_offset(p.handle, &sge) else {
                    return Err((
                        libc::EINVAL,
                        format!("SGE lkey {:#x} addr {:#x} len {}", g.lkey, g.addr, g.length),
                    ));
                };
                if probe {
                    let ok = e
                        .memory(g.lkey)
                        .is_some_and(|m| m.accessible(off, g.length as usize, write));
                    if !ok {
                        return Err((
                            libc::EFAULT,
                            format!(
                                "{:#x}+{} is not mapped{}",
                                g.addr,
                                g.length,
                                if write { " writable" } else { "" }
                            ),
                        ));
                    }
                }
            }
            Ok(())
        });
        match r {
            Ok(()) => 0,
            Err((errno, why)) => report(s, "ibv_advise_mr", errno, &why),
        }
    })
}
