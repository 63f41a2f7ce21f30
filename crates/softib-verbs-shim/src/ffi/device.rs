//! Device discovery, contexts, device/port/GID queries and async events.

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{ctx_obj, fail, guard};
use crate::abi::*;
use crate::convert::mtu_to_c;
use crate::objects::{device, open_shared, ContextObj};
use crate::sys::set_errno;
use crate::view::facts;

type DeviceList = [*mut ibv_device; 2];

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard(std::ptr::null_mut(), || {
        let (first, n) = match device() {
            Ok(d) => (std::ptr::from_ref(&d.dev).cast_mut(), 1),
            Err(e) => {
                static ONCE: AtomicBool = AtomicBool::new(false);
                if !ONCE.swap(true, Ordering::Relaxed) {
                    eprintln!("{e}");
                }
                (std::ptr::null_mut(), 0)
            }
        };
        if !num_devices.is_null() {
            // SAFETY: the caller passes NULL or a writable int (ibv_get_device_list(3)).
            unsafe { *num_devices = n };
        }
        let list: Box<DeviceList> = Box::new([first, std::ptr::null_mut()]);
        Box::into_raw(list).cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard((), || {
        if !list.is_null() {
            // SAFETY: `list` came from ibv_get_device_list above, which boxed a DeviceList.
            drop(unsafe { Box::from_raw(list.cast::<DeviceList>()) });
        }
    })
}

/// True when `dev` is this library's device.
fn is_ours(dev: *mut ibv_device) -> bool {
    device().is_ok_and(|d| std::ptr::eq(dev.cast_const(), &d.dev))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    guard(std::ptr::null(), || match device() {
        Ok(d) if is_ours(dev) => d.dev.name.as_ptr().cast(),
        _ => {
            set_errno(libc::ENODEV);
            std::ptr::null()
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    guard(0, || match device() {
        Ok(d) if is_ours(dev) => u64::from_ne_bytes(d.config.node_guid()),
        _ => 0,
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    guard(-1, || if is_ours(dev) { 0 } else { -1 })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let d = match device() {
            Ok(d) if is_ours(dev) => d,
            _ => {
                set_errno(libc::ENODEV);
                return std::ptr::null_mut();
            }
        };
        let shared = match open_shared(&d.config) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{}", e.message);
                set_errno(e.errno);
                return std::ptr::null_mut();
            }
        };
        let ops = ibv_context_ops {
            _compat_query_device: std::ptr::null_mut(),
            _compat_query_port: std::ptr::null_mut(),
            _compat_alloc_pd: std::ptr::null_mut(),
            _compat_dealloc_pd: std::ptr::null_mut(),
            _compat_reg_mr: std::ptr::null_mut(),
            _compat_rereg_mr: std::ptr::null_mut(),
            _compat_dereg_mr: std::ptr::null_mut(),
            alloc_mw: Some(super::mw::alloc_mw),
            bind_mw: Some(super::mw::bind_mw),
            dealloc_mw: Some(super::mw::dealloc_mw),
            _compat_create_cq: std::ptr::null_mut(),
            poll_cq: Some(super::datapath::poll_cq),
            req_notify_cq: Some(super::datapath::req_notify_cq),
            _compat_cq_event: std::ptr::null_mut(),
            _compat_resize_cq: std::ptr::null_mut(),
            _compat_destroy_cq: std::ptr::null_mut(),
            _compat_create_srq: std::ptr::null_mut(),
            _compat_modify_srq: std::ptr::null_mut(),
            _compat_query_srq: std::ptr::null_mut(),
            _compat_destroy_srq: std::ptr::null_mut(),
            post_srq_recv: Some(super::datapath::post_srq_recv),
            _compat_create_qp: std::ptr::null_mut(),
            _compat_query_qp: std::ptr::null_mut(),
            _compat_modify_qp: std::ptr::null_mut(),
            _compat_destroy_qp: std::ptr::null_mut(),
            post_send: Some(super::datapath::post_send),
            post_recv: Some(super::datapath::post_recv),
            _compat_create_ah: std::ptr::null_mut(),
            _compat_destroy_ah: std::ptr::null_mut(),
            _compat_attach_mcast: std::ptr::null_mut(),
            _compat_detach_mcast: std::ptr::null_mut(),
            _compat_async_event: std::ptr::null_mut(),
        };
        let cmd_file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .ok();
        let cmd_fd = cmd_file
            .as_ref()
            .map_or(-1, std::os::fd::AsRawFd::as_raw_fd);
        let mut ext = super::slots::extension_slots();
        ext[EXT_SLOT_QUERY_DEVICE_EX] = query_device_ex as QueryDeviceExFn as *mut c_void;
        let obj = Box::new(ContextObj {
            vctx: verbs_context {
                ext,
                _abi_placeholder3: 0,
                sz: size_of::<verbs_context>(),
                context: ibv_context {
                    device: dev,
                    ops,
                    cmd_fd,
                    async_fd: shared.async_events.raw_fd(),
                    num_comp_vectors: crate::caps::NUM_COMP_VECTORS,
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    abi_compat: VERBS_ABI_IS_EXTENDED as *mut c_void,
                },
            },
            shared,
            cmd_file,
        });
        let obj = Box::into_raw(obj);
        // SAFETY: `obj` is a live, exclusively owned box; the application gets a pointer
        // to its embedded ibv_context and returns it to ibv_close_device.
        unsafe { std::ptr::addr_of_mut!((*obj).vctx.context) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: ibv_close_device(3) takes a context from ibv_open_device.
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            return fail(libc::EINVAL);
        };
        // Objects the program never destroyed (perftest leaves its UD address handles)
        // keep the device open after this; its capture must be complete anyway.
        c.shared.net.flush_capture();
        // SAFETY: the context object was boxed by ibv_open_device; the application
        // promises not to use it after this call.
        drop(unsafe { Box::from_raw(std::ptr::from_ref(c).cast_mut()) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a context from ibv_open_device (ibv_query_device(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            return fail(libc::EINVAL);
        };
        if attr.is_null() {
            return fail(libc::EINVAL);
        }
        let a = crate::caps::device_attr(&c.shared);
        // SAFETY: `attr` is non-NULL and points at a struct ibv_device_attr (ibv_query_device(3)).
        unsafe { attr.write(a) };
        0
    })
}

/// The `query_device_ex` slot of the context (`ibv_query_device_ex`'s inline wrapper in
/// verbs.h calls it after checking `input->comp_mask`). Like libibverbs'
/// `ibv_cmd_query_device_any`, it fills only the `attr_size` bytes the caller's header
/// knows, and refuses a buffer smaller than `struct ibv_device_attr` with EINVAL.
pub unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a context from ibv_open_device; the slot is reachable only through ours.
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `input` is NULL or the caller's input structure.
        if unsafe { input.as_ref() }.is_some_and(|i| i.comp_mask != 0) {
            return fail(libc::EINVAL);
        }
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return fail(libc::EINVAL);
        }
        let a = crate::caps::device_attr_ex(&c.shared);
        let n = attr_size.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's structure holds `attr_size` >= n bytes; the source is a
        // local value of at least n bytes; they do not overlap. The bytes the caller has
        // beyond ours (a newer header) are zeroed as libibverbs does.
        unsafe {
            std::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(&a).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
        }
        0
    })
}

/// The port's attributes: one active RoCEv2 port (the values the device view's sysfs
/// files show come from the same `facts`).
fn port_attr(c: &ContextObj) -> ibv_port_attr {
    let mtu = mtu_to_c(c.shared.net.mtu());
    ibv_port_attr {
        state: facts::PORT_STATE,
        max_mtu: mtu,
        active_mtu: mtu,
        gid_tbl_len: facts::GID_TBL_LEN as i32,
        port_cap_flags: facts::PORT_CAP_FLAGS,
        max_msg_sz: 1 << 31,
        pkey_tbl_len: 1,
        lid: 0,
        max_vl_num: 1,
        active_width: facts::ACTIVE_WIDTH_4X,
        active_speed: facts::ACTIVE_SPEED_EDR,
        phys_state: facts::PHYS_STATE_LINK_UP,
        link_layer: IBV_LINK_LAYER_ETHERNET,
        ..Default::default()
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a context from ibv_open_device (ibv_query_port(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            return fail(libc::EINVAL);
        };
        if port != 1 || attr.is_null() {
            return fail(libc::EINVAL);
        }
        let a = port_attr(c);
        // The exported function receives libibverbs' `_compat_ibv_port_attr`, which ends
        // before `port_cap_flags2` (the inline wrapper zeroed the full structure), so only
        // the bytes before that field are written.
        let n = offset_of!(ibv_port_attr, port_cap_flags2);
        // SAFETY: `attr` points at a port attribute structure of at least `n` bytes; the
        // source is a local value; the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(std::ptr::from_ref(&a).cast::<u8>(), attr.cast::<u8>(), n)
        };
        0
    })
}

/// What slot `index` of port `port`'s GID table holds.
enum GidSlot {
    /// A GID (index 0: the RoCEv2 GID of SOFTIB_ADDR).
    Valid([u8; 16]),
    /// A slot of the table without a GID.
    Empty,
    /// No such port or index.
    OutOfRange,
}

fn gid_slot(c: &ContextObj, port: u32, index: u32) -> GidSlot {
    if port != 1 || index >= facts::GID_TBL_LEN {
        GidSlot::OutOfRange
    } else if index < facts::GIDS_IN_USE {
        GidSlot::Valid(c.shared.net.gid())
    } else {
        GidSlot::Empty
    }
}

/// GID `index` of port `port`, if the slot holds one.
fn gid_at(c: &ContextObj, port: u32, index: u32) -> Option<[u8; 16]> {
    match gid_slot(c, port, index) {
        GidSlot::Valid(g) => Some(g),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(-1, || {
        // SAFETY: a context from ibv_open_device (ibv_query_gid(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        // verbs.c ibv_query_gid: an empty slot reads as the zero GID, success.
        let g = match gid_slot(c, u32::from(port), index as u32) {
            GidSlot::Valid(g) => g,
            GidSlot::Empty => [0; 16],
            GidSlot::OutOfRange => {
                set_errno(libc::EINVAL);
                return -1;
            }
        };
        if gid.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: `gid` is non-NULL and points at a union ibv_gid.
        unsafe { gid.write(ibv_gid { raw: g }) };
        0
    })
}

fn gid_entry(c: &ContextObj, port: u32, index: u32) -> Option<ibv_gid_entry> {
    gid_at(c, port, index).map(|g| ibv_gid_entry {
        gid: ibv_gid { raw: g },
        gid_index: index,
        port_num: port,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    })
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a context from ibv_open_device (ibv_query_gid_ex(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            return fail(libc::EINVAL);
        };
        if flags != 0 || entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
            return fail(libc::EINVAL);
        }
        match gid_entry(c, port_num, gid_index) {
            Some(e) => {
                // SAFETY: non-NULL, and the caller says it holds `entry_size` bytes.
                unsafe { entry.write(e) };
                0
            }
            // The kernel's GID query: ENODATA for an empty slot, EINVAL past the table.
            None => match gid_slot(c, port_num, gid_index) {
                GidSlot::Empty => fail(libc::ENODATA),
                _ => fail(libc::EINVAL),
            },
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EIO as isize), || {
        // SAFETY: a context from ibv_open_device (ibv_query_gid_table(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            set_errno(libc::EINVAL);
            return -(libc::EINVAL as isize);
        };
        if flags != 0
            || entry_size < size_of::<ibv_gid_entry>()
            || (entries.is_null() && max_entries > 0)
        {
            return -(libc::EINVAL as isize);
        }
        if max_entries == 0 {
            return -(libc::EINVAL as isize);
        }
        let Some(e) = gid_entry(c, 1, 0) else {
            return 0;
        };
        // SAFETY: `entries` holds at least one entry of `entry_size` bytes.
        unsafe { entries.write(e) };
        1
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    ty: *mut u32,
) -> c_int {
    guard(-1, || {
        // SAFETY: a context from ibv_open_device.
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let slot = gid_slot(c, u32::from(port), index);
        if matches!(slot, GidSlot::OutOfRange) || ty.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        if matches!(slot, GidSlot::Empty) {
            // verbs.c: an empty slot answers IB/RoCEv1, success.
            // SAFETY: non-NULL pointer to the caller's enum ibv_gid_type_sysfs.
            unsafe { ty.write(IBV_GID_TYPE_SYSFS_IB_ROCE_V1) };
            return 0;
        }
        // ibv_query_gid_type(3) answers in `enum ibv_gid_type_sysfs`, where RoCEv2 is 1
        // (not `enum ibv_gid_type`'s 2): ibv_devinfo -v prints no GID for another value.
        // SAFETY: non-NULL pointer to the caller's enum ibv_gid_type_sysfs.
        unsafe { ty.write(IBV_GID_TYPE_SYSFS_ROCE_V2) };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard(-1, || {
        // SAFETY: a context from ibv_open_device (ibv_query_pkey(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        match c.shared.limits.pkeys.get(index as usize) {
            Some(&k) if port == 1 && index >= 0 && !pkey.is_null() => {
                // SAFETY: non-NULL pointer to the caller's __be16.
                unsafe { pkey.write(k.to_be()) };
                0
            }
            _ => {
                // verbs.c reads ports/<port>/pkeys/<index> from sysfs: a slot that does
                // not exist fails the open with ENOENT.
                set_errno(libc::ENOENT);
                -1
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    guard(-1, || {
        // SAFETY: a context from ibv_open_device (ibv_get_pkey_index(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let want = u16::from_be(pkey);
        match c.shared.limits.pkeys.iter().position(|&k| k == want) {
            Some(i) if port == 1 => i as c_int,
            // verbs.c: the ibv_query_pkey that runs past the table fails, and its -1
            // (errno ENOENT) is the result.
            _ => {
                set_errno(libc::ENOENT);
                -1
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    guard(-1, || {
        // SAFETY: a context from ibv_open_device (ibv_get_async_event(3)).
        let Some(c) = (unsafe { ctx_obj(ctx) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        if let Err(errno) = c.shared.ensure_notifier() {
            set_errno(errno);
            return -1;
        }
        match c.shared.async_events.pop() {
            Ok((addr, ty)) => {
                // SAFETY: non-NULL pointer to the caller's struct ibv_async_event.
                unsafe {
                    event.write(ibv_async_event {
                        element: addr as *mut c_void,
                        event_type: ty,
                    })
                };
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
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}
