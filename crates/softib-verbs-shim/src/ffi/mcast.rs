//! `ibv_attach_mcast` / `ibv_detach_mcast`: a UD QP joins or leaves a multicast group
//! (IBA 10.5). On RoCE the group is its GID, an IP multicast address (IPv4-mapped for
//! IPv4), and the LID is not used, as the kernel's `ib_attach_mcast` has it; the engine
//! delivers the group's datagrams to the attached QPs and softib-net joins the group on the
//! device's interface (`softib_transport::mcast`, `softib_net`'s `mcast.rs`). Errors are the
//! kernel's: EINVAL for a QP that is not UD, a GID that is no multicast address, or a
//! detach of a QP that is not attached; ENOMEM past rxe's limits; EOPNOTSUPP for IPv6
//! groups, which softib does not carry yet.

use std::ffi::c_int;

use super::{fail, guard, obj, report};
use crate::abi::*;
use crate::convert::errno_of;
use crate::objects::QpObj;

/// Reads the GID a caller passed.
///
/// # Safety
/// `gid` is NULL or points at a readable `union ibv_gid`.
unsafe fn gid_of(gid: *const ibv_gid) -> Option<[u8; 16]> {
    // SAFETY: function contract.
    unsafe { gid.as_ref() }.map(|g| g.raw)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP from ibv_create_qp and the caller's GID (ibv_attach_mcast(3)).
        let (Some(q), Some(g)) = (unsafe { obj::<_, QpObj>(qp) }, unsafe { gid_of(gid) }) else {
            return fail(libc::EINVAL);
        };
        match q.shared.net.attach_mcast(q.qpn, g) {
            Ok(()) => 0,
            Err(e) => report(&q.shared, "ibv_attach_mcast", errno_of(&e), &e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: as in ibv_attach_mcast.
        let (Some(q), Some(g)) = (unsafe { obj::<_, QpObj>(qp) }, unsafe { gid_of(gid) }) else {
            return fail(libc::EINVAL);
        };
        match q.shared.net.detach_mcast(q.qpn, g) {
            Ok(()) => 0,
            Err(e) => report(&q.shared, "ibv_detach_mcast", errno_of(&e), &e),
        }
    })
}
