//! An id's options and ports: `rdma_set_option`, `rdma_get_src_port`, `rdma_get_dst_port`.

use std::ffi::{c_int, c_void};

use super::{err, failed, on_id};
use crate::ffi::guard;
use crate::rdmacm::abi::*;
use crate::rdmacm::addr::from_storage;
use crate::rdmacm::objects::Phase;

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    on_id(id, |rt, o| {
        if optval.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the caller's option value of `optlen` bytes (checked per option).
        let byte = || unsafe { *optval.cast::<u8>() };
        // SAFETY: as above.
        let int = || unsafe { optval.cast::<c_int>().read_unaligned() };
        match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if optlen == 1 => {
                o.state().tos = byte();
                0
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if optlen == 1 => {
                o.state().ack_timeout = byte().min(31);
                0
            }
            // Address reuse and IPv6-only binding have no effect on softib's single-address
            // device; the kernel accepts them before binding.
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY)
                if optlen == std::mem::size_of::<c_int>() =>
            {
                let _ = int();
                if o.state().phase == Phase::Idle {
                    0
                } else {
                    err(libc::EINVAL)
                }
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_ACK_TIMEOUT)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) => {
                err(libc::EINVAL)
            }
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => failed(
                rt,
                "rdma_set_option",
                libc::EOPNOTSUPP,
                &"RDMA_OPTION_IB_PATH (routes come from the RoCE address)",
            ),
            _ => failed(
                rt,
                "rdma_set_option",
                libc::ENOSYS,
                &format!("level {level} option {optname}"),
            ),
        }
    })
}

fn port_of(st: &libc::sockaddr_storage) -> u16 {
    from_storage(st).map_or(0, |a| a.port())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || {
        // SAFETY: an id of this library (rdma_get_src_port(3)).
        let Some(c) = (unsafe { id.as_ref() }) else {
            return 0;
        };
        port_of(&c.route.addr.src_storage).to_be()
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || {
        // SAFETY: an id of this library.
        let Some(c) = (unsafe { id.as_ref() }) else {
            return 0;
        };
        port_of(&c.route.addr.dst_storage).to_be()
    })
}
