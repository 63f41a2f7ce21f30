//! Device memory: the `alloc_dm`, `free_dm` and `reg_dm_mr` slots of `verbs_context` and
//! the `memcpy_to_dm`/`memcpy_from_dm` functions of `struct ibv_dm` (see
//! `crate::device_memory`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{ctx_obj, guard, null_reporter, obj, report};
use crate::abi::*;
use crate::abi_ex::*;
use crate::convert::{access_from_c, errno_of};
use crate::device_memory::{DmBuffer, MAX_DM_SIZE};
use crate::objects::{DmObj, MrObj, PdObj};
use crate::sys::set_errno;

pub(super) unsafe extern "C" fn alloc_dm(
    ctx: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the inline ibv_alloc_dm passes our context and the caller's attributes.
        let (Some(c), Some(a)) = (unsafe { ctx_obj(ctx) }, unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &c.shared;
        let fail = null_reporter(s, "ibv_alloc_dm");
        if a.comp_mask != 0 {
            return fail(libc::EINVAL, &format!("comp_mask {:#x}", a.comp_mask));
        }
        if a.length == 0 || a.length > MAX_DM_SIZE {
            return fail(
                libc::EINVAL,
                &format!("length {} (max_dm_size {MAX_DM_SIZE})", a.length),
            );
        }
        // Reserve the bytes against the device's total first (another thread may race).
        let reserved = s
            .dm_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + a.length <= MAX_DM_SIZE).then_some(used + a.length)
            });
        if reserved.is_err() {
            return fail(
                libc::ENOMEM,
                &format!(
                    "{} bytes: {} of max_dm_size {MAX_DM_SIZE} are allocated",
                    a.length,
                    s.dm_used.load(Ordering::Acquire)
                ),
            );
        }
        let Some(buf) = DmBuffer::new(a.length, a.log_align_req) else {
            s.dm_used.fetch_sub(a.length, Ordering::AcqRel);
            return fail(libc::EINVAL, &format!("log_align_req {}", a.log_align_req));
        };
        static NEXT_HANDLE: AtomicU32 = AtomicU32::new(1);
        let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        Box::into_raw(Box::new(DmObj {
            dm: ibv_dm {
                context: ctx,
                memcpy_to_dm: Some(memcpy_to_dm),
                memcpy_from_dm: Some(memcpy_from_dm),
                comp_mask: 0,
                handle,
            },
            buf,
            mrs: AtomicU32::new(0),
            shared: s.clone(),
        }))
        .cast()
    })
}

pub(super) unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a DM from alloc_dm (ibv_free_dm(3)).
        let Some(d) = (unsafe { obj::<_, DmObj>(dm) }) else {
            return libc::EINVAL;
        };
        if d.mrs.load(Ordering::Acquire) > 0 {
            return report(
                &d.shared,
                "ibv_free_dm",
                libc::EBUSY,
                &"MRs are registered on it",
            );
        }
        d.shared.dm_used.fetch_sub(d.buf.len(), Ordering::AcqRel);
        // SAFETY: boxed by alloc_dm; the application no longer uses it.
        drop(unsafe { Box::from_raw(dm.cast::<DmObj>()) });
        0
    })
}

unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    offset: u64,
    host: *const c_void,
    length: usize,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the inline ibv_memcpy_to_dm passes our DM.
        let Some(d) = (unsafe { obj::<_, DmObj>(dm) }) else {
            return libc::EINVAL;
        };
        if length == 0 {
            return 0;
        }
        if host.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: ibv_memcpy_to_dm(3): `host` holds `length` readable bytes.
        let src = unsafe { std::slice::from_raw_parts(host.cast::<u8>(), length) };
        match d.buf.copy_in(offset, src) {
            Ok(()) => 0,
            Err(e) => report(
                &d.shared,
                "ibv_memcpy_to_dm",
                e.errno(),
                &format!(
                    "{e:?}: {length} bytes at offset {offset} of {}",
                    d.buf.len()
                ),
            ),
        }
    })
}

unsafe extern "C" fn memcpy_from_dm(
    host: *mut c_void,
    dm: *mut ibv_dm,
    offset: u64,
    length: usize,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the inline ibv_memcpy_from_dm passes our DM.
        let Some(d) = (unsafe { obj::<_, DmObj>(dm) }) else {
            return libc::EINVAL;
        };
        if length == 0 {
            return 0;
        }
        if host.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: ibv_memcpy_from_dm(3): `host` holds `length` writable bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(host.cast::<u8>(), length) };
        match d.buf.copy_out(offset, dst) {
            Ok(()) => 0,
            Err(e) => report(
                &d.shared,
                "ibv_memcpy_from_dm",
                e.errno(),
                &format!(
                    "{e:?}: {length} bytes at offset {offset} of {}",
                    d.buf.len()
                ),
            ),
        }
    })
}

/// The access bits a device-memory MR may have (mlx5's set; ZERO_BASED is required, as the
/// kernel's `UVERBS_METHOD_DM_MR_REG` demands).
const DM_MR_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_ZERO_BASED;

pub(super) unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    offset: u64,
    length: usize,
    access: u32,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a PD and a DM of this library (ibv_reg_dm_mr(3)).
        let (Some(p), Some(d)) = (unsafe { obj::<_, PdObj>(pd) }, unsafe {
            obj::<_, DmObj>(dm)
        }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        let s = &p.shared;
        let fail = null_reporter(s, "ibv_reg_dm_mr");
        if access & !DM_MR_ACCESS != 0 || access & IBV_ACCESS_ZERO_BASED == 0 {
            return fail(
                libc::EINVAL,
                &format!("access {access:#x} (IBV_ACCESS_ZERO_BASED is required; allowed {DM_MR_ACCESS:#x})"),
            );
        }
        let Some(memory) = d.buf.region(offset, length) else {
            return fail(
                libc::EINVAL,
                &format!(
                    "{length} bytes at offset {offset} of a {}-byte DM",
                    d.buf.len()
                ),
            );
        };
        // Zero-based: the region's first byte is address 0 for its keys.
        let r = s
            .net
            .with_engine(|e, _| e.reg_mr(p.handle, Box::new(memory), 0, access_from_c(access)));
        let keys = match r {
            Ok(k) => k,
            Err(e) => return fail(errno_of(&e), &e),
        };
        d.mrs.fetch_add(1, Ordering::AcqRel);
        Box::into_raw(Box::new(MrObj {
            mr: ibv_mr {
                context: p.pd.context,
                pd,
                addr: offset as usize as *mut c_void,
                length,
                handle: keys.lkey,
                lkey: keys.lkey,
                rkey: keys.rkey,
            },
            dm: std::ptr::from_ref(d),
            access,
            iova: 0,
            shared: s.clone(),
        }))
        .cast()
    })
}
