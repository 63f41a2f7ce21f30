//! An id's QP: `rdma_create_qp` (with the CQs librdmacm makes when the caller gives none),
//! `rdma_destroy_qp`, `rdma_init_qp_attr` and `rdma_create_qp_ex`.

use std::ffi::{c_int, c_void};

use super::verbs::last_errno;
use super::{err, failed, id_of, on_id};
use crate::abi::*;
use crate::ffi::guard;
use crate::rdmacm::abi::*;
use crate::rdmacm::dispatch::device_mtu_code;
use crate::rdmacm::objects::{IdObj, Runtime};
use crate::rdmacm::qp::{self as cmqp, RtrParams};

/// rdma_create_qp's work: CQs if the caller gave none (librdmacm `ucma_create_cqs`), the
/// QP, and INIT (UD: on to RTS), so receives can be posted before the connection.
pub(super) fn create_qp(
    rt: &Runtime,
    o: &IdObj,
    pd: *mut ibv_pd,
    attr: &mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the id's C view; the application does not use the id concurrently with
    // rdma_create_qp.
    let c = unsafe { &mut *o.c() };
    if c.verbs.is_null() {
        return failed(
            rt,
            "rdma_create_qp",
            libc::EINVAL,
            &"the id is not bound to the device",
        );
    }
    if !c.qp.is_null() {
        return failed(rt, "rdma_create_qp", libc::EINVAL, &"the id has a QP");
    }
    let pd = if pd.is_null() { rt.default_pd() } else { pd };
    if pd.is_null() {
        return err(libc::ENOMEM);
    }
    // Which of the caller's CQs librdmacm's `ucma_create_cqs` would make: on a failure
    // below they are freed and the caller's attributes get their NULLs back, so a retry
    // (with smaller caps, say) makes them afresh.
    let (fill_recv, fill_send) = (attr.recv_cq.is_null(), attr.send_cq.is_null());
    let own_cqs = fill_recv || fill_send;
    let undo = |c: &mut rdma_cm_id, attr: &mut ibv_qp_init_attr, e: i32| {
        if own_cqs {
            // SAFETY: the CQs and channels were made above for this id, and nothing else
            // has seen them.
            unsafe { destroy_own_cqs(c) };
            if fill_recv {
                attr.recv_cq = std::ptr::null_mut();
            }
            if fill_send {
                attr.send_cq = std::ptr::null_mut();
            }
        }
        err(e)
    };
    // SAFETY: the id's C view, bound to our context; what it makes is the id's alone.
    if let Err(e) = unsafe { make_own_cqs(c, attr, fill_recv, fill_send, o.c().cast()) } {
        return undo(c, attr, e);
    }
    if attr.srq.is_null() && !c.srq.is_null() {
        attr.srq = c.srq;
    }
    // SAFETY: our PD and the caller's (completed) attributes.
    let qp = unsafe { crate::ffi::qp::ibv_create_qp(pd, attr) };
    if qp.is_null() {
        return undo(c, attr, last_errno());
    }
    let psn = o.state().psn;
    let ready = {
        // SAFETY: a QP just created by this library.
        unsafe {
            let r = cmqp::modify(qp, cmqp::init_attr(attr.qp_type));
            if attr.qp_type == IBV_QPT_UD {
                let rtr = ibv_qp_attr {
                    qp_state: cmqp::IBV_QPS_RTR,
                    ..Default::default()
                };
                r.and_then(|_| cmqp::modify(qp, (rtr, cmqp::IBV_QP_STATE)))
                    .and_then(|_| cmqp::modify(qp, cmqp::rts_attr(IBV_QPT_UD, psn, 0, 0, 0, 0)))
            } else {
                r
            }
        }
    };
    if let Err(e) = ready {
        // SAFETY: the QP just created.
        unsafe { crate::ffi::qp::ibv_destroy_qp(qp) };
        return undo(c, attr, e);
    }
    c.qp = qp;
    c.pd = pd;
    c.qp_type = attr.qp_type;
    {
        let mut st = o.state();
        st.own_cqs |= own_cqs;
        // SAFETY: the QP just created (ours).
        st.qpn = Some(unsafe { (*qp).qp_num });
    }
    0
}

/// The CQs the caller gave none for (`fill_recv`, `fill_send`), each with its own completion
/// channel as librdmacm's `ucma_create_cqs` makes them, put on the id and in `attr`. On an
/// error what was made stays on the id for [`destroy_own_cqs`].
///
/// # Safety
/// `c` is the C view of an id bound to a context of this library (`verbs`); `cq_context` is
/// what the CQs report as their context.
unsafe fn make_own_cqs(
    c: &mut rdma_cm_id,
    attr: &mut ibv_qp_init_attr,
    fill_recv: bool,
    fill_send: bool,
    cq_context: *mut c_void,
) -> Result<(), i32> {
    let verbs = c.verbs;
    for (fill, depth, id_ch, id_cq, attr_cq) in [
        (
            fill_recv,
            attr.cap.max_recv_wr,
            &mut c.recv_cq_channel,
            &mut c.recv_cq,
            &mut attr.recv_cq,
        ),
        (
            fill_send,
            attr.cap.max_send_wr,
            &mut c.send_cq_channel,
            &mut c.send_cq,
            &mut attr.send_cq,
        ),
    ] {
        if fill {
            // SAFETY: function contract.
            let (ch, cq) = unsafe { cq_with_channel(verbs, depth, cq_context) }?;
            *id_ch = ch;
            *id_cq = cq;
            *attr_cq = cq;
        }
    }
    Ok(())
}

/// A CQ of `depth` entries (at least one) with its own completion channel, as librdmacm's
/// `ucma_create_cqs` makes one for each queue the caller gave no CQ for.
///
/// # Safety
/// `verbs` is a context of this library; `cq_context` is what the CQ reports as its
/// context.
unsafe fn cq_with_channel(
    verbs: *mut ibv_context,
    depth: u32,
    cq_context: *mut c_void,
) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), i32> {
    // SAFETY: function contract.
    unsafe {
        let ch = crate::ffi::resources::ibv_create_comp_channel(verbs);
        if ch.is_null() {
            return Err(last_errno());
        }
        let cq =
            crate::ffi::resources::ibv_create_cq(verbs, depth.max(1) as c_int, cq_context, ch, 0);
        if cq.is_null() {
            let e = last_errno();
            crate::ffi::resources::ibv_destroy_comp_channel(ch);
            return Err(e);
        }
        Ok((ch, cq))
    }
}

/// Destroys the CQs and completion channels rdma_create_qp made for the id (each CQ before
/// its channel, which refuses to go while a CQ uses it) and clears them from the id.
///
/// # Safety
/// `c` is the C view of an id whose non-NULL CQs and channels this library made for it, and
/// the application no longer uses them.
unsafe fn destroy_own_cqs(c: &mut rdma_cm_id) {
    for (cq, ch) in [
        (&mut c.send_cq, &mut c.send_cq_channel),
        (&mut c.recv_cq, &mut c.recv_cq_channel),
    ] {
        // SAFETY: function contract.
        unsafe {
            if !cq.is_null() {
                crate::ffi::resources::ibv_destroy_cq(*cq);
                *cq = std::ptr::null_mut();
            }
            if !ch.is_null() {
                crate::ffi::resources::ibv_destroy_comp_channel(*ch);
                *ch = std::ptr::null_mut();
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    on_id(id, |rt, o| {
        // SAFETY: the caller's attributes (rdma_create_qp(3)).
        let Some(attr) = (unsafe { qp_init_attr.as_mut() }) else {
            return err(libc::EINVAL);
        };
        create_qp(rt, o, pd, attr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard((), || {
        let Ok((_, o)) = id_of(id) else { return };
        // SAFETY: the id's C view and its QP/CQs (ours).
        unsafe {
            let c = &mut *o.c();
            if !c.qp.is_null() {
                o.state().qpn = None;
                crate::ffi::qp::ibv_destroy_qp(c.qp);
                c.qp = std::ptr::null_mut();
            }
            if std::mem::take(&mut o.state().own_cqs) {
                destroy_own_cqs(c);
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    on_id(id, |rt, o| {
        // SAFETY: the caller's attribute and mask (rdma_init_qp_attr(3)).
        let (Some(a), Some(m)) = (unsafe { qp_attr.as_mut() }, unsafe {
            qp_attr_mask.as_mut()
        }) else {
            return err(libc::EINVAL);
        };
        // SAFETY: the id's C view.
        let qp_type = unsafe { (*o.c()).qp_type };
        let st = o.state();
        let (attr, mask) = match a.qp_state {
            cmqp::IBV_QPS_INIT => cmqp::init_attr(qp_type),
            // An active id with the REP: what ready_active_qp gives the id's own QP.
            cmqp::IBV_QPS_RTR if st.req.is_none() && st.rep.is_some() => {
                let (Some(rep), Some(dst)) = (st.rep.as_ref(), st.dst) else {
                    return err(libc::EINVAL);
                };
                let src_port = st.src.map_or(0, |s| s.port());
                let flow = softib_cm::rdma_cm::roce_flow_label(src_port, dst.port());
                cmqp::rtr_attr(
                    qp_type,
                    &RtrParams {
                        ah: cmqp::peer_ah(dst.ip(), flow, st.tos),
                        dest_qpn: rep.local_qpn,
                        rq_psn: st.psn,
                        mtu: device_mtu_code(rt),
                        max_dest_rd_atomic: st.rd_atomic.0.min(rep.initiator_depth),
                    },
                )
            }
            cmqp::IBV_QPS_RTR => {
                let Some(req) = st.req.as_ref() else {
                    return failed(
                        rt,
                        "rdma_init_qp_attr",
                        libc::EINVAL,
                        &"RTR attributes are known on a passive id with a request",
                    );
                };
                let peer = crate::rdmacm::dispatch::ip_of_gid(req.primary_path.local_gid);
                cmqp::rtr_attr(
                    qp_type,
                    &RtrParams {
                        ah: cmqp::peer_ah(peer, req.primary_path.flow_label, st.tos),
                        dest_qpn: req.local_qpn,
                        rq_psn: st.psn,
                        mtu: req.path_mtu.clamp(1, device_mtu_code(rt)),
                        max_dest_rd_atomic: req.initiator_depth,
                    },
                )
            }
            cmqp::IBV_QPS_RTS => {
                let Some(send_psn) = st.send_psn else {
                    return failed(
                        rt,
                        "rdma_init_qp_attr",
                        libc::EINVAL,
                        &"RTS attributes are known once the peer's REQ or REP arrived",
                    );
                };
                cmqp::rts_attr(qp_type, send_psn, st.ack_timeout, 7, 7, 0)
            }
            s => {
                return failed(
                    rt,
                    "rdma_init_qp_attr",
                    libc::EINVAL,
                    &format!("QP state {s}"),
                )
            }
        };
        *a = attr;
        *m = mask as c_int;
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut rdma_cm_id, _attr: *mut c_void) -> c_int {
    guard(-1, || match id_of(id) {
        Ok((rt, _)) => failed(
            rt,
            "rdma_create_qp_ex",
            libc::EOPNOTSUPP,
            &"extended QP creation (use rdma_create_qp)",
        ),
        Err(r) => r,
    })
}
