//! The exported C functions (libibverbs' public entry points) and the data-path functions
//! installed in `context->ops`. Every pointer an application passes is one this library
//! handed out (the device list, contexts and objects are all ours while preloaded), so the
//! casts back to the owning objects below are sound under the verbs API contract; each
//! `unsafe` block says which contract it relies on.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

mod cq_ex;
mod datapath;
pub(crate) mod device;
mod dm;
mod domain;
mod mcast;
mod mw;
mod qp;
mod qp_ex;
mod rdmacm;
mod resources;
mod slots;
mod unsupported;
mod xrc;

pub(crate) use rdmacm::verbs::{
    alloc_pd_for_rdmacm, modify_qp_for_rdmacm, open_for_rdmacm, shared_of,
};

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::*;
use crate::objects::{ContextObj, Shared};
use crate::sys::set_errno;

/// Runs a verb; a panic (a bug in the shim) becomes EIO and `fail` instead of unwinding
/// into C, which would abort the application.
fn guard<T>(fail: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        eprintln!("softib verbs shim: internal error in a verb; it fails with EIO");
        set_errno(libc::EIO);
        fail
    })
}

/// Says why a verb failed when `SOFTIB_DEBUG=1`, sets `errno` and returns it: on the
/// kernel path every failing verb leaves the errno of its failed system call in `errno`,
/// also those that return the error (ibv_modify_qp, ibv_destroy_*), and programs print
/// `errno` (perror) after either kind.
fn report(shared: &Shared, verb: &str, errno: i32, why: &dyn std::fmt::Display) -> i32 {
    if shared.config.debug {
        eprintln!("softib: {verb} failed ({}): {why}", errno_name(errno));
    }
    set_errno(errno);
    errno
}

/// The `fail` of a verb that returns an object: says why (as `report`) and returns NULL,
/// with `errno` set.
fn null_reporter<'a, T>(
    shared: &'a Shared,
    verb: &'a str,
) -> impl Fn(i32, &dyn std::fmt::Display) -> *mut T + 'a {
    move |errno, why| {
        report(shared, verb, errno, why);
        std::ptr::null_mut()
    }
}

/// Sets `errno` and returns it: the failure of a verb that returns an errno, where no
/// device is at hand to report on (a NULL or foreign handle).
fn fail(errno: i32) -> i32 {
    set_errno(errno);
    errno
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EINVAL => "EINVAL",
        libc::ENOMEM => "ENOMEM",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::EINTR => "EINTR",
        libc::EAGAIN => "EAGAIN",
        libc::ENOSPC => "ENOSPC",
        libc::EFAULT => "EFAULT",
        libc::ENOENT => "ENOENT",
        _ => "errno",
    }
}

/// The context object of an `ibv_context` this library created.
///
/// # Safety
/// `ctx` is NULL or a context returned by this library's `ibv_open_device` and not closed.
unsafe fn ctx_obj<'a>(ctx: *mut ibv_context) -> Option<&'a ContextObj> {
    if ctx.is_null() {
        return None;
    }
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: per the function contract the context is the `context` field of the
    // `verbs_context` that starts a live `ContextObj` (repr(C), first field).
    unsafe { ctx.cast::<u8>().sub(off).cast::<ContextObj>().as_ref() }
}

/// The object behind a C handle whose structure is the object's first field.
///
/// # Safety
/// `p` is NULL or points at the first field of a live `O` created by this library.
unsafe fn obj<'a, C, O>(p: *mut C) -> Option<&'a O> {
    // SAFETY: repr(C) objects start with their C structure (function contract).
    unsafe { p.cast::<O>().as_ref() }
}
