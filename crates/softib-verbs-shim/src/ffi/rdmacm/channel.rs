//! Event channels and their events: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`, `rdma_event_str`.

use std::ffi::{c_char, c_int, CStr};

use super::err;
use crate::ffi::guard;
use crate::rdmacm::abi::*;
use crate::rdmacm::dispatch::runtime;
use crate::rdmacm::objects::{ChannelObj, EventObj};
use crate::sys::set_errno;

#[no_mangle]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    guard(std::ptr::null_mut(), || {
        if let Err(e) = runtime() {
            set_errno(e);
            return std::ptr::null_mut();
        }
        match ChannelObj::create() {
            Ok(c) => c.cast(),
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
                std::ptr::null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard((), || {
        if channel.is_null() {
            return;
        }
        // SAFETY: a channel from rdma_create_event_channel; its ids are destroyed and its
        // events acked (rdma_destroy_event_channel(3)).
        let ch = unsafe { Box::from_raw(channel.cast::<ChannelObj>()) };
        // Events nobody acked are freed with it.
        while let Ok(e) = {
            ch.queue.discard(|_| false);
            try_pop(&ch)
        } {
            // SAFETY: queued events are EventObjs this library boxed.
            drop(unsafe { Box::from_raw(e as *mut EventObj) });
        }
    })
}

/// Takes an event without blocking (for cleanup).
fn try_pop(ch: &ChannelObj) -> std::io::Result<usize> {
    let mut found = None;
    ch.queue.discard(|&e| {
        if found.is_none() {
            found = Some(e);
            true
        } else {
            false
        }
    });
    found.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::WouldBlock))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard(-1, || {
        if channel.is_null() || event.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: a channel from rdma_create_event_channel.
        let ch = unsafe { &*channel.cast::<ChannelObj>() };
        match ch.queue.pop() {
            Ok(e) => {
                // SAFETY: the caller's out pointer.
                unsafe { *event = e as *mut rdma_cm_event };
                0
            }
            Err(e) => err(e.raw_os_error().unwrap_or(libc::EAGAIN)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard(-1, || {
        if event.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: an event from rdma_get_cm_event, acked once (rdma_ack_cm_event(3)).
        drop(unsafe { Box::from_raw(event.cast::<EventObj>()) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_event_str(event: u32) -> *const c_char {
    let s: &'static CStr = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}
