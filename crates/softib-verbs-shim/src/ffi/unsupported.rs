//! Public libibverbs entry points softib does not implement. Each fails the way verbs
//! report "not supported" (EOPNOTSUPP, as NULL + errno or as the return value), so an
//! application that calls one gets a clear error instead of libibverbs' own code running on
//! a context it did not create (which would crash). A few that need nothing from a device
//! (fork support) succeed.

use std::ffi::{c_char, c_int, c_void};

use crate::abi::*;
use crate::convert::wc_status_str;
use crate::sys::set_errno;

fn unsupported_null<T>() -> *mut T {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_wc_status_str(status: u32) -> *const c_char {
    wc_status_str(status).as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    unsupported_null()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut ibv_context {
    unsupported_null()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_import_pd(_ctx: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    unsupported_null()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    unsupported_null()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_import_dm(_ctx: *mut ibv_context, _handle: u32) -> *mut c_void {
    unsupported_null()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}

#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}

#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub unsafe extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// softib never needs to know the data placement order beyond what the transport
/// guarantees, so it reports nothing extra (0: no in-order guarantee claimed).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: u32,
    _flags: u32,
) -> c_int {
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _ctx: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    libc::EOPNOTSUPP
}

/// softib copies through the registered buffers instead of pinning pages, so fork() is
/// always safe: nothing to initialise.
#[no_mangle]
pub unsafe extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `IBV_FORK_UNNEEDED`.
#[no_mangle]
pub unsafe extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
