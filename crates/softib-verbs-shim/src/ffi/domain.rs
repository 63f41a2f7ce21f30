//! Thread domains and parent domains: the `alloc_td`, `dealloc_td` and
//! `alloc_parent_domain` slots of `verbs_context` (see `crate::domain`).

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::{ctx_obj, guard, null_reporter, obj, report};
use crate::abi::*;
use crate::abi_ex::*;
use crate::domain::{AllocatedStaging, ParentDomain, SOFTIB_RES_TYPE_QP_SQ, STAGING_ALIGN};
use crate::objects::{PdObj, Shared};
use crate::sys::set_errno;
use softib_net::raw_memory::RawMemory;

/// A thread domain.
#[repr(C)]
pub struct TdObj {
    /// C view.
    pub td: ibv_td,
    /// Parent domains using it (it cannot be deallocated under them).
    pub users: AtomicU32,
    /// The device.
    pub shared: Arc<Shared>,
}

/// Handles of parent domains (distinct from engine PD numbers, which the C `handle` of a
/// plain PD shows).
static NEXT_DOMAIN_HANDLE: AtomicU64 = AtomicU64::new(1 << 20);

pub(super) unsafe extern "C" fn alloc_td(
    ctx: *mut ibv_context,
    attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the inline ibv_alloc_td passes our context and the caller's attributes.
        let (Some(c), Some(a)) = (unsafe { ctx_obj(ctx) }, unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        if a.comp_mask != 0 {
            set_errno(report(
                &c.shared,
                "ibv_alloc_td",
                libc::EINVAL,
                &format!("comp_mask {:#x}", a.comp_mask),
            ));
            return std::ptr::null_mut();
        }
        Box::into_raw(Box::new(TdObj {
            td: ibv_td { context: ctx },
            users: AtomicU32::new(0),
            shared: c.shared.clone(),
        }))
        .cast()
    })
}

pub(super) unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a TD from alloc_td (ibv_dealloc_td(3)).
        let Some(t) = (unsafe { obj::<_, TdObj>(td) }) else {
            return libc::EINVAL;
        };
        if t.users.load(Ordering::Acquire) > 0 {
            return report(
                &t.shared,
                "ibv_dealloc_td",
                libc::EBUSY,
                &"parent domains still use it",
            );
        }
        // SAFETY: boxed by alloc_td; the application no longer uses it.
        drop(unsafe { Box::from_raw(td.cast::<TdObj>()) });
        0
    })
}

pub(super) unsafe extern "C" fn alloc_parent_domain(
    ctx: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the inline ibv_alloc_parent_domain passes our context and the caller's
        // attributes.
        let (Some(c), Some(a)) = (unsafe { ctx_obj(ctx) }, unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &c.shared;
        let fail = null_reporter(s, "ibv_alloc_parent_domain");
        let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0 {
            return fail(libc::EINVAL, &format!("comp_mask {:#x}", a.comp_mask));
        }
        // SAFETY: NULL or a PD of this library (ibv_alloc_parent_domain(3)).
        let Some(base) = (unsafe { obj::<_, PdObj>(a.pd) }) else {
            return fail(libc::EINVAL, &"pd is required");
        };
        if base.parent.is_some() {
            return fail(libc::EINVAL, &"pd is itself a parent domain");
        }
        // SAFETY: NULL or a TD of this library.
        let td = unsafe { obj::<_, TdObj>(a.td) };
        if !a.td.is_null() && td.is_none() {
            return fail(libc::EINVAL, &"td");
        }
        let with_alloc = a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0;
        if with_alloc && (a.alloc.is_none() || a.free.is_none()) {
            return fail(
                libc::EINVAL,
                &"IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS without alloc and free",
            );
        }
        if let Some(t) = td {
            t.users.fetch_add(1, Ordering::AcqRel);
        }
        base.children.fetch_add(1, Ordering::AcqRel);
        let handle = NEXT_DOMAIN_HANDLE.fetch_add(1, Ordering::Relaxed) as u32;
        Box::into_raw(Box::new(PdObj {
            pd: ibv_pd {
                context: ctx,
                handle,
            },
            handle: base.handle,
            bounce_lkey: base.bounce_lkey.load(Ordering::Acquire).into(),
            parent: Some(ParentDomain {
                base_pd: a.pd as usize,
                td: a.td as usize,
                pd_context: if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT != 0 {
                    a.pd_context as usize
                } else {
                    0
                },
                alloc: if with_alloc { a.alloc } else { None },
                free: if with_alloc { a.free } else { None },
            }),
            children: AtomicU32::new(0),
            shared: s.clone(),
        }))
        .cast()
    })
}

/// `ibv_dealloc_pd` of a parent domain: releases the wrapper only (the PD and the thread
/// domain it was built from stay).
///
/// # Safety
/// `pd` is a parent domain of this library the application no longer uses.
pub(super) unsafe fn dealloc_parent_domain(pd: *mut ibv_pd, parent: &ParentDomain) -> c_int {
    // SAFETY: function contract.
    if let Some(p) = unsafe { obj::<_, PdObj>(pd) } {
        if p.children.load(Ordering::Acquire) > 0 {
            return report(
                &p.shared,
                "ibv_dealloc_pd",
                libc::EBUSY,
                &"QPs use the parent domain",
            );
        }
    }
    // SAFETY: the base PD cannot be deallocated while this domain exists (children > 0).
    if let Some(base) = unsafe { obj::<_, PdObj>(parent.base_pd as *mut ibv_pd) } {
        base.children.fetch_sub(1, Ordering::AcqRel);
    }
    // SAFETY: the TD cannot be deallocated while this domain exists (users > 0).
    if let Some(t) = unsafe { obj::<_, TdObj>(parent.td as *mut ibv_td) } {
        t.users.fetch_sub(1, Ordering::AcqRel);
    }
    // SAFETY: boxed by alloc_parent_domain (function contract).
    drop(unsafe { Box::from_raw(pd.cast::<PdObj>()) });
    0
}

/// The send staging region of a new QP in `p` (`pd` its handle): from the parent domain's
/// allocator when it has one, else None (the PD's region serves). Errors: the allocator
/// returned NULL (ENOMEM, as mlx5), or the engine refused the registration.
pub(super) fn alloc_staging(
    p: &PdObj,
    pd: *mut ibv_pd,
    max_inline_data: u32,
) -> Result<Option<AllocatedStaging>, (i32, String)> {
    let Some(parent) = &p.parent else {
        return Ok(None);
    };
    let Some(alloc) = parent.alloc else {
        return Ok(None);
    };
    let size = (max_inline_data as usize).max(1);
    let ctx = parent.pd_context as *mut std::ffi::c_void;
    // SAFETY: the application's allocator, called as rdma-core's providers call it
    // (ibv_alloc_parent_domain(3)): its parent domain, context, size, alignment and type.
    let ptr = unsafe { alloc(pd, ctx, size, STAGING_ALIGN, SOFTIB_RES_TYPE_QP_SQ) };
    if ptr as usize == IBV_ALLOCATOR_USE_DEFAULT {
        return Ok(None);
    }
    if ptr.is_null() {
        return Err((
            libc::ENOMEM,
            "the parent domain's allocator returned NULL".into(),
        ));
    }
    // SAFETY: the allocator gave us `size` bytes, ours until we pass them to `free`.
    let memory = unsafe { RawMemory::new(ptr.cast(), size) };
    let r = p.shared.net.with_engine(|e, _| {
        e.reg_mr(
            p.handle,
            Box::new(memory),
            0,
            softib_transport::AccessFlags::LOCAL_WRITE,
        )
    });
    let st = AllocatedStaging {
        lkey: 0,
        ptr: ptr as usize,
        pd: pd as usize,
        pd_context: parent.pd_context,
        free: parent.free,
    };
    match r {
        Ok(keys) => Ok(Some(AllocatedStaging {
            lkey: keys.lkey,
            ..st
        })),
        Err(e) => {
            // SAFETY: not registered, so only the allocator's owner knows the buffer.
            unsafe { give_back(&st) };
            Err((crate::convert::errno_of(&e), e.to_string()))
        }
    }
}

/// Deregisters a QP's staging region and hands it to the parent domain's `free`.
///
/// # Safety
/// The QP using the region is destroyed (nothing reads it any more).
pub(super) unsafe fn free_staging(s: &Shared, st: &AllocatedStaging) {
    let _ = s.net.with_engine(|e, _| e.dereg_mr(st.lkey));
    // SAFETY: forwarded contract.
    unsafe { give_back(st) };
}

/// Calls the parent domain's `free` for the region.
///
/// # Safety
/// Nothing uses the region any more.
unsafe fn give_back(st: &AllocatedStaging) {
    if let Some(free) = st.free {
        // SAFETY: the application's free function, with what its allocator returned
        // (ibv_alloc_parent_domain(3)).
        unsafe {
            free(
                st.pd as *mut ibv_pd,
                st.pd_context as *mut std::ffi::c_void,
                st.ptr as *mut std::ffi::c_void,
                SOFTIB_RES_TYPE_QP_SQ,
            )
        };
    }
}
