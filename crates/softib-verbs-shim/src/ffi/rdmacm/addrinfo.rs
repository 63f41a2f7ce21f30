//! Address and device lookup: `rdma_getaddrinfo`, `rdma_freeaddrinfo`, `rdma_get_devices`,
//! `rdma_free_devices`.

use std::ffi::{c_char, c_int};

use super::err;
use crate::abi::*;
use crate::ffi::guard;
use crate::rdmacm::abi::*;
use crate::rdmacm::addr::{from_c, to_storage};
use crate::rdmacm::dispatch::runtime;
use crate::sys::set_errno;

/// One rdma_addrinfo with its addresses inline (freed as one box).
#[repr(C)]
struct AddrInfoObj {
    ai: rdma_addrinfo,
    src: libc::sockaddr_storage,
    dst: libc::sockaddr_storage,
}

#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard(-1, || {
        // SAFETY: NULL or the caller's hints (rdma_getaddrinfo(3)).
        let h = unsafe { hints.as_ref() };
        if res.is_null() {
            return err(libc::EINVAL);
        }
        if node.is_null() && service.is_null() {
            // librdmacm: without node and service, the result carries the hints' own
            // addresses (libfabric's verbs provider passes its endpoints' addresses so).
            return match h {
                // SAFETY: the caller's out pointer and hints.
                Some(h) if !h.ai_src_addr.is_null() || !h.ai_dst_addr.is_null() => unsafe {
                    addrinfo_from_hints(h, res)
                },
                _ => err(libc::EINVAL),
            };
        }
        let flags = h.map_or(0, |h| h.ai_flags);
        let ps = h.map_or(0, |h| h.ai_port_space) as u32;
        let qp_type = h.map_or(0, |h| h.ai_qp_type) as u32;
        let (ps, qp_type) = match (ps, qp_type) {
            (0, 0) => (RDMA_PS_TCP, IBV_QPT_RC),
            (0, IBV_QPT_UD) => (RDMA_PS_UDP, IBV_QPT_UD),
            (0, t) => (RDMA_PS_TCP, t),
            (RDMA_PS_UDP, 0) => (RDMA_PS_UDP, IBV_QPT_UD),
            (p, 0) => (p, IBV_QPT_RC),
            (p, t) => (p, t),
        };
        // SAFETY: zeroed addrinfo hints are valid.
        let mut gh: libc::addrinfo = unsafe { std::mem::zeroed() };
        gh.ai_family = h.map_or(0, |h| h.ai_family);
        gh.ai_socktype = if qp_type == IBV_QPT_UD {
            libc::SOCK_DGRAM
        } else {
            libc::SOCK_STREAM
        };
        if flags & RAI_NUMERICHOST != 0 {
            gh.ai_flags |= libc::AI_NUMERICHOST;
        }
        if flags & RAI_PASSIVE != 0 {
            gh.ai_flags |= libc::AI_PASSIVE;
        }
        let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: C strings from the caller and our hints; `ai` is freed below.
        let r = unsafe { libc::getaddrinfo(node, service, &gh, &mut ai) };
        if r != 0 {
            return r;
        }
        // SAFETY: getaddrinfo succeeded: `ai` is a valid list with at least one entry.
        let found = unsafe { from_c((*ai).ai_addr) };
        // SAFETY: the list getaddrinfo returned.
        unsafe { libc::freeaddrinfo(ai) };
        let Some(found) = found else {
            return err(libc::EAFNOSUPPORT);
        };
        // SAFETY: all-zero is a valid value of these C structures.
        let mut obj: Box<AddrInfoObj> = Box::new(unsafe { std::mem::zeroed() });
        obj.ai.ai_flags = flags;
        obj.ai.ai_family = if found.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        obj.ai.ai_qp_type = qp_type as c_int;
        obj.ai.ai_port_space = ps as c_int;
        let (st, len) = to_storage(found);
        if flags & RAI_PASSIVE != 0 {
            obj.src = st;
            obj.ai.ai_src_len = len;
            obj.ai.ai_src_addr = std::ptr::addr_of_mut!(obj.src).cast();
        } else {
            obj.dst = st;
            obj.ai.ai_dst_len = len;
            obj.ai.ai_dst_addr = std::ptr::addr_of_mut!(obj.dst).cast();
            // SAFETY: the hints' source address if any.
            if let Some(src) = h.and_then(|h| unsafe { from_c(h.ai_src_addr) }) {
                let (st, len) = to_storage(src);
                obj.src = st;
                obj.ai.ai_src_len = len;
                obj.ai.ai_src_addr = std::ptr::addr_of_mut!(obj.src).cast();
            }
        }
        // SAFETY: the caller's out pointer; the box is freed by rdma_freeaddrinfo.
        unsafe { *res = Box::into_raw(obj).cast() };
        0
    })
}

/// An rdma_addrinfo holding the hints' addresses.
///
/// # Safety
/// `res` is the caller's out pointer; the hints' addresses are NULL or valid.
unsafe fn addrinfo_from_hints(h: &rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> c_int {
    // SAFETY: the hints' addresses (function contract).
    let (src, dst) = unsafe { (from_c(h.ai_src_addr), from_c(h.ai_dst_addr)) };
    let Some(family_of) = dst.or(src) else {
        return err(libc::EAFNOSUPPORT);
    };
    // SAFETY: all-zero is a valid value of these C structures.
    let mut obj: Box<AddrInfoObj> = Box::new(unsafe { std::mem::zeroed() });
    obj.ai.ai_flags = h.ai_flags;
    obj.ai.ai_family = if family_of.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    obj.ai.ai_qp_type = if h.ai_qp_type != 0 {
        h.ai_qp_type
    } else {
        IBV_QPT_RC as c_int
    };
    obj.ai.ai_port_space = if h.ai_port_space != 0 {
        h.ai_port_space
    } else {
        RDMA_PS_TCP as c_int
    };
    if let Some(a) = src {
        let (st, len) = to_storage(a);
        obj.src = st;
        obj.ai.ai_src_len = len;
        obj.ai.ai_src_addr = std::ptr::addr_of_mut!(obj.src).cast();
    }
    if let Some(a) = dst {
        let (st, len) = to_storage(a);
        obj.dst = st;
        obj.ai.ai_dst_len = len;
        obj.ai.ai_dst_addr = std::ptr::addr_of_mut!(obj.dst).cast();
    }
    // SAFETY: the caller's out pointer; freed by rdma_freeaddrinfo.
    unsafe { *res = Box::into_raw(obj).cast() };
    0
}

#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard((), || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: entries of a list from rdma_getaddrinfo (AddrInfoObj boxes).
            let o = unsafe { Box::from_raw(p.cast::<AddrInfoObj>()) };
            p = o.ai.ai_next;
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        };
        // SAFETY: a NULL-terminated array of two pointers, freed by rdma_free_devices.
        let list = unsafe { libc::calloc(2, std::mem::size_of::<*mut ibv_context>()) }
            .cast::<*mut ibv_context>();
        if list.is_null() {
            set_errno(libc::ENOMEM);
            return list;
        }
        // SAFETY: the array just allocated; the caller's count.
        unsafe {
            *list = rt.verbs();
            if !num_devices.is_null() {
                *num_devices = 1;
            }
        }
        list
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: an array from rdma_get_devices (calloc).
    unsafe { libc::free(list.cast()) };
}
