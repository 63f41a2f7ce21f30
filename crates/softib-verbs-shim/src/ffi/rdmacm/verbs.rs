//! The verbs librdmacm calls on the shim's own device: opening it, its shared state, a PD
//! and QP transitions for an id. The lower `rdmacm` modules reach the verbs through these
//! (never through the entry points of `ffi::rdmacm`), so the librdmacm layer sits above
//! both.

use std::ffi::c_int;
use std::sync::Arc;

use crate::abi::*;
use crate::objects::Shared;

/// Opens the shim's device as librdmacm opens each device once (`ucma_init_device`).
///
/// # Safety
/// None beyond the shim's own: it calls this library's verbs on its own objects.
pub(crate) unsafe fn open_for_rdmacm() -> Result<*mut ibv_context, i32> {
    let mut n = 0;
    // SAFETY: our own device list and open.
    unsafe {
        let list = crate::ffi::device::ibv_get_device_list(&mut n);
        if list.is_null() || n < 1 {
            return Err(libc::ENODEV);
        }
        let ctx = crate::ffi::device::ibv_open_device(*list);
        crate::ffi::device::ibv_free_device_list(list);
        if ctx.is_null() {
            return Err(last_errno().max(libc::ENODEV));
        }
        Ok(ctx)
    }
}

/// The shared device of a context of this library.
///
/// # Safety
/// `ctx` is a context of this library.
pub(crate) unsafe fn shared_of(ctx: *mut ibv_context) -> Option<Arc<Shared>> {
    // SAFETY: function contract.
    unsafe { crate::ffi::ctx_obj(ctx) }.map(|c| c.shared.clone())
}

/// `ibv_alloc_pd` on our context.
///
/// # Safety
/// `ctx` is a context of this library.
pub(crate) unsafe fn alloc_pd_for_rdmacm(ctx: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: function contract.
    unsafe { crate::ffi::resources::ibv_alloc_pd(ctx) }
}

/// `ibv_modify_qp` on one of our QPs.
///
/// # Safety
/// `qp` is a QP of this library.
pub(crate) unsafe fn modify_qp_for_rdmacm(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: function contract.
    unsafe { crate::ffi::qp::ibv_modify_qp(qp, attr, mask) }
}

/// The calling thread's errno (left by the verb that just failed).
pub(super) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}
