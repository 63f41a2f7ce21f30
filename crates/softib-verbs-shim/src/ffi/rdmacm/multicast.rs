//! Multicast: `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`, on
//! the groups of `rdmacm/mcast.rs`.

use std::ffi::{c_int, c_void};
use std::net::SocketAddr;

use softib_cm::rdma_cm::PortSpace;

use super::{complete, err, failed, on_id};
use crate::ffi::obj;
use crate::objects::QpObj;
use crate::rdmacm::abi::*;
use crate::rdmacm::addr::from_c;
use crate::rdmacm::objects::{EventObj, IdObj, Phase, Runtime};

/// `struct rdma_cm_join_mc_attr_ex` of rdma_cma.h.
#[repr(C)]
pub struct rdma_cm_join_mc_attr_ex {
    comp_mask: u32,
    join_flags: u32,
    addr: *mut libc::sockaddr,
}

const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1;

const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 2;

const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 4;

const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;

const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;

/// Joins the group at `addr` for `o` (`rdmacm/mcast.rs`): the kernel's checks, the QP's
/// attach (unless send-only, as librdmacm), and the MULTICAST_JOIN event.
fn join(rt: &Runtime, o: &IdObj, addr: SocketAddr, send_only: bool, context: *mut c_void) -> c_int {
    let call = "rdma_join_multicast";
    let mut st = o.state();
    // Kernel rdma_join_multicast: an id with a bound or resolved address, of a UD port
    // space.
    if !matches!(st.phase, Phase::Bound | Phase::AddrResolved) {
        return failed(
            rt,
            call,
            libc::EINVAL,
            &"the id's address is not bound or resolved",
        );
    }
    if !matches!(st.ps, PortSpace::Udp | PortSpace::Ipoib) {
        return failed(
            rt,
            call,
            libc::EINVAL,
            &"multicast needs a UD id (RDMA_PS_UDP or RDMA_PS_IPOIB)",
        );
    }
    let Some(mgid) = crate::rdmacm::mcast::mgid_of(addr.ip()) else {
        return failed(
            rt,
            call,
            libc::EINVAL,
            &format!("{} is no multicast address", addr.ip()),
        );
    };
    if st.mcast.iter().any(|m| m.addr == addr) {
        // The kernel keeps one membership per address and id (cma's mc_list).
        return failed(
            rt,
            call,
            libc::EADDRINUSE,
            &format!("{addr} is joined already"),
        );
    }
    // SAFETY: the id's C view; `qp` is NULL or the application's QP (librdmacm's contract).
    let qp = unsafe { (*o.c()).qp };
    let mut attached_qpn = None;
    if !send_only && !qp.is_null() {
        // SAFETY: a QP of this shim (rdma_create_qp or the application's own ibv_create_qp).
        let Some(q) = (unsafe { obj::<_, QpObj>(qp) }) else {
            return failed(rt, call, libc::EINVAL, &"the id's QP is not a softib QP");
        };
        if let Err(e) = q.shared.net.attach_mcast(q.qpn, mgid) {
            return failed(rt, call, crate::convert::errno_of(&e), &e);
        }
        attached_qpn = Some(q.qpn);
    }
    st.mcast.push(crate::rdmacm::mcast::Membership {
        addr,
        mgid,
        attached_qpn,
    });
    let qkey = crate::rdmacm::mcast::qkey_for(st.ps);
    drop(st);
    if rt.shared.config.debug {
        eprintln!(
            "softib: rdma_cm: joined multicast group {} ({}{})",
            addr.ip(),
            std::net::Ipv6Addr::from(mgid),
            match attached_qpn {
                Some(q) => format!(", QP {q:#x} attached"),
                None => String::from(", no QP attached"),
            }
        );
    }
    let mut e = EventObj::new(o.c(), RDMA_CM_EVENT_MULTICAST_JOIN, 0);
    // Kernel cma_make_mc_event: `param.ud` names the group; librdmacm puts the join's
    // context in `private_data`.
    e.ev.param.ud = rdma_ud_param {
        private_data: context.cast_const(),
        private_data_len: 0,
        ah_attr: crate::rdmacm::mcast::group_ah(mgid),
        qp_num: softib_transport::mcast::MULTICAST_QPN,
        qkey,
    };
    o.report(e);
    complete(o)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    on_id(id, |rt, o| {
        // SAFETY: the caller's socket address (rdma_join_multicast(3)).
        let Some(a) = (unsafe { from_c(addr) }) else {
            return err(libc::EINVAL);
        };
        join(rt, o, a, false, context)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    on_id(id, |rt, o| {
        // SAFETY: the caller's attributes (rdma_join_multicast_ex(3)).
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return err(libc::EINVAL);
        };
        // librdmacm's checks, in its order.
        if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return failed(rt, "rdma_join_multicast_ex", libc::EOPNOTSUPP, &"comp_mask");
        }
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return failed(
                rt,
                "rdma_join_multicast_ex",
                libc::EINVAL,
                &"address and join flags are required",
            );
        }
        // SAFETY: the caller's socket address.
        let Some(addr) = (unsafe { from_c(a.addr) }) else {
            return err(libc::EINVAL);
        };
        join(
            rt,
            o,
            addr,
            a.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
            context,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    on_id(id, |rt, o| {
        // SAFETY: the caller's socket address (rdma_leave_multicast(3)).
        let Some(a) = (unsafe { from_c(addr) }) else {
            return err(libc::EINVAL);
        };
        let m = {
            let mut st = o.state();
            let Some(at) = st.mcast.iter().position(|m| m.addr == a) else {
                // librdmacm: no such join on this id.
                return failed(
                    rt,
                    "rdma_leave_multicast",
                    libc::EADDRNOTAVAIL,
                    &format!("{a} was not joined"),
                );
            };
            st.mcast.remove(at)
        };
        if let Some(qpn) = m.attached_qpn {
            // librdmacm detaches and ignores the result (the QP may be gone already).
            let _ = rt.shared.net.detach_mcast(qpn, m.mgid);
        }
        0
    })
}
