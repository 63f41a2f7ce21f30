//! Synchronous endpoints (librdmacm's `rdma_verbs.h` helpers): `rdma_create_ep`,
//! `rdma_destroy_ep`, `rdma_get_request`, and `rdma_migrate_id`, which moves an id between
//! channels (to or from synchronous).

use std::ffi::c_int;

use softib_wire::cm::RejectReason;

use super::channel::rdma_destroy_event_channel;
use super::id::{
    bind, create_id, destroy_id, rdma_destroy_id, rdma_resolve_addr, rdma_resolve_route,
};
use super::qp::{create_qp, rdma_destroy_qp};
use super::verbs::last_errno;
use super::{err, id_of, on_id};
use crate::abi::*;
use crate::ffi::guard;
use crate::rdmacm::abi::*;
use crate::rdmacm::addr::from_c;
use crate::rdmacm::dispatch::runtime;
use crate::rdmacm::objects::{ChannelObj, EventObj, IdObj};

/// Moves the id's queued events to `new` (kernel ucma_migrate_id moves them too).
fn migrate(o: &IdObj, new: *mut rdma_event_channel, sync: bool) {
    // SAFETY: the id's C view.
    let c = unsafe { &mut *o.c() };
    let old = c.channel;
    let was_sync = o.state().sync;
    if let Some(ch) = o.channel() {
        let moved = ch.take_events_of(o.c());
        // SAFETY: `new` is a ChannelObj of this module.
        let newch = unsafe { &*new.cast::<ChannelObj>() };
        for e in moved {
            newch.push(e);
        }
    }
    c.channel = new;
    o.state().sync = sync;
    o.librdmacm_private
        .sync
        .store(i32::from(sync), std::sync::atomic::Ordering::Relaxed);
    if was_sync && !old.is_null() && old != new {
        // SAFETY: the id's own former channel.
        unsafe { rdma_destroy_event_channel(old) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    on_id(id, |_, o| {
        let (target, sync) = if channel.is_null() {
            match ChannelObj::create() {
                Ok(c) => (c.cast::<rdma_event_channel>(), true),
                Err(e) => return err(e.raw_os_error().unwrap_or(libc::EMFILE)),
            }
        } else {
            (channel, false)
        };
        migrate(o, target, sync);
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    guard(-1, || {
        let (rt, l) = match id_of(listen) {
            Ok(v) => v,
            Err(r) => return r,
        };
        if id.is_null() || !l.state().sync {
            return err(libc::EINVAL);
        }
        let Some(ch) = l.channel() else {
            return err(libc::EINVAL);
        };
        loop {
            let ev = match ch.queue.pop() {
                Ok(e) => e as *mut EventObj,
                Err(e) => return err(e.raw_os_error().unwrap_or(libc::EAGAIN)),
            };
            // SAFETY: a live EventObj just taken off the queue.
            let (kind, status, new) = unsafe { ((*ev).ev.event, (*ev).ev.status, (*ev).ev.id) };
            if status != 0 {
                // SAFETY: ours, not handed out.
                drop(unsafe { Box::from_raw(ev) });
                return err(if status < 0 { -status } else { status });
            }
            if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
                // SAFETY: ours, not handed out.
                drop(unsafe { Box::from_raw(ev) });
                continue;
            }
            let Some(child) = rt.id(new) else {
                // SAFETY: ours.
                drop(unsafe { Box::from_raw(ev) });
                continue;
            };
            // The new id is synchronous too, with its own channel (librdmacm).
            match ChannelObj::create() {
                Ok(c) => migrate(child, c.cast(), true),
                Err(e) => return err(e.raw_os_error().unwrap_or(libc::EMFILE)),
            }
            // SAFETY: the child's C view.
            unsafe { (*child.c()).event = ev.cast() };
            let ep = l
                .state()
                .ep_qp_init
                .as_ref()
                .map(|(pd, a)| (*pd, copy_init(a)));
            if let Some((pd, mut attr)) = ep {
                let r = create_qp(rt, child, pd as *mut ibv_pd, &mut attr);
                if r != 0 {
                    let e = last_errno();
                    let _ = rt.shared.net.with_cm(|cm, _| {
                        child
                            .state()
                            .conn
                            .map(|c| cm.reject(c, RejectReason::NoQp, &[]))
                    });
                    destroy_id(rt, child);
                    return err(e);
                }
            }
            // SAFETY: the caller's out pointer.
            unsafe { *id = new };
            return 0;
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return err(e),
        };
        // SAFETY: the caller's rdma_getaddrinfo result (rdma_create_ep(3)).
        let (Some(res), false) = (unsafe { res.as_ref() }, id.is_null()) else {
            return err(libc::EINVAL);
        };
        let ps = if res.ai_port_space != 0 {
            res.ai_port_space as u32
        } else {
            RDMA_PS_TCP
        };
        let qp_type = if res.ai_qp_type != 0 {
            res.ai_qp_type as u32
        } else {
            IBV_QPT_RC
        };
        let o = match create_id(rt, std::ptr::null_mut(), std::ptr::null_mut(), ps, qp_type) {
            Ok(o) => o,
            Err(r) => return r,
        };
        let r = if res.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the result's source address.
            match unsafe { from_c(res.ai_src_addr) } {
                Some(a) => {
                    let r = bind(rt, o, a, "rdma_create_ep");
                    if r == 0 {
                        // SAFETY: NULL or the caller's attributes, copied for rdma_get_request.
                        if let Some(a) = unsafe { qp_init_attr.as_ref() } {
                            o.state().ep_qp_init = Some((pd as usize, copy_init(a)));
                        }
                    }
                    r
                }
                None => err(libc::EINVAL),
            }
        } else {
            // SAFETY: the result's addresses and the caller's attributes.
            unsafe {
                let mut r = rdma_resolve_addr(o.c(), res.ai_src_addr, res.ai_dst_addr, 2000);
                if r == 0 {
                    r = rdma_resolve_route(o.c(), 2000);
                }
                if r == 0 {
                    if let Some(a) = qp_init_attr.as_mut() {
                        r = create_qp(rt, o, pd, a);
                    }
                }
                r
            }
        };
        if r != 0 {
            let e = last_errno();
            destroy_id(rt, o);
            return err(e);
        }
        // SAFETY: the caller's out pointer.
        unsafe { *id = o.c() };
        0
    })
}

fn copy_init(a: &ibv_qp_init_attr) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    guard((), || {
        // SAFETY: an id from rdma_create_ep (or rdma_create_id).
        unsafe {
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
        }
    })
}
