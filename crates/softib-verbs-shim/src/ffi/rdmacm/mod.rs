//! librdmacm's public entry points (`<rdma/rdma_cma.h>`, rdma-core 44), on softib's CM.
//! As librdmacm, every function returns 0 or -1 with `errno` set (its `ERR()` macro), and
//! an id created without an event channel is synchronous: the call waits for its event and
//! fails with the event's status (librdmacm `ucma_complete`). One module per job:
//! [`channel`], [`id`], [`qp`], [`connect`], [`ep`] (the synchronous endpoints),
//! [`addrinfo`], [`options`], [`multicast`]; this module holds what they share (errors,
//! the id lookup, the wait of a synchronous id) and imports none of them.

mod addrinfo;
mod channel;
mod connect;
mod ep;
mod id;
mod multicast;
mod options;
mod qp;
pub(crate) mod verbs;

use std::ffi::c_int;

use softib_cm::rdma_cm::PortSpace;

use super::guard;
use crate::rdmacm::abi::*;
use crate::rdmacm::dispatch::runtime;
use crate::rdmacm::objects::{EventObj, IdObj, Runtime};
use crate::sys::set_errno;

/// librdmacm's `ERR(e)`: sets errno, returns -1.
fn err(e: i32) -> c_int {
    set_errno(e);
    -1
}

/// `ERR(e)` with a `SOFTIB_DEBUG` line saying why.
fn failed(rt: &Runtime, call: &str, e: i32, why: &dyn std::fmt::Display) -> c_int {
    if rt.shared.config.debug {
        eprintln!(
            "softib: {call} failed ({}): {why}",
            std::io::Error::from_raw_os_error(e)
        );
    }
    err(e)
}

fn port_space(ps: u32) -> Option<PortSpace> {
    match ps {
        RDMA_PS_TCP => Some(PortSpace::Tcp),
        RDMA_PS_UDP => Some(PortSpace::Udp),
        RDMA_PS_IB => Some(PortSpace::Ib),
        RDMA_PS_IPOIB => Some(PortSpace::Ipoib),
        _ => None,
    }
}

/// The live id behind a handle, with the runtime.
fn id_of(id: *mut rdma_cm_id) -> Result<(&'static Runtime, &'static IdObj), c_int> {
    let rt = runtime().map_err(err)?;
    rt.id(id).map(|o| (rt, o)).ok_or_else(|| err(libc::EINVAL))
}

/// Runs an entry point on a live id: `f` gets the runtime and the id behind `id`; a NULL or
/// unknown handle fails with EINVAL, and a panic (a bug in the shim) returns -1 with EIO
/// instead of unwinding into C.
fn on_id(id: *mut rdma_cm_id, f: impl FnOnce(&'static Runtime, &'static IdObj) -> c_int) -> c_int {
    guard(-1, || match id_of(id) {
        Ok((rt, o)) => f(rt, o),
        Err(r) => r,
    })
}

/// Waits for the event a synchronous id's operation produces (librdmacm `ucma_complete`).
fn complete(o: &IdObj) -> c_int {
    if !o.state().sync {
        return 0;
    }
    let Some(ch) = o.channel() else {
        return err(libc::EINVAL);
    };
    // SAFETY: the id's C view; `event` holds the previous synchronous event (ours).
    let c = unsafe { &mut *o.c() };
    if !c.event.is_null() {
        // SAFETY: an EventObj this library handed out.
        drop(unsafe { Box::from_raw(c.event.cast::<EventObj>()) });
        c.event = std::ptr::null_mut();
    }
    let ev = match ch.queue.pop() {
        Ok(e) => e as *mut EventObj,
        Err(e) => return err(e.raw_os_error().unwrap_or(libc::EAGAIN)),
    };
    c.event = ev.cast();
    // SAFETY: just taken off the queue: a live EventObj.
    let (kind, status) = unsafe { ((*ev).ev.event, (*ev).ev.status) };
    if status == 0 {
        0
    } else if kind == RDMA_CM_EVENT_REJECTED {
        err(libc::ECONNREFUSED)
    } else if status < 0 {
        err(-status)
    } else {
        err(status)
    }
}
