//! Connecting: `rdma_connect`, `rdma_accept`, `rdma_reject`, `rdma_establish`,
//! `rdma_disconnect`, `rdma_notify`, and the conn_param rules they share.

use std::ffi::{c_int, c_void};
use std::net::SocketAddr;

use softib_cm::rdma_cm::{self};
use softib_cm::{AcceptParams, SidrParams};
use softib_wire::cm::{RejectReason, SidrStatus, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN};

use super::{complete, err, failed, on_id};
use crate::abi::*;
use crate::rdmacm::abi::*;
use crate::rdmacm::dispatch::{device_mtu_code, header_len};
use crate::rdmacm::objects::{Phase, Runtime};
use crate::rdmacm::qp::{self as cmqp, RtrParams};

/// The caller's conn_param (NULL: none) and the consumer's private data in it, as
/// rdma_connect and rdma_accept both start.
///
/// # Safety
/// `p` is NULL or the caller's conn_param whose data pointer covers its length, alive for
/// `'a`.
unsafe fn params_of<'a>(p: *const rdma_conn_param) -> (Option<&'a rdma_conn_param>, &'a [u8]) {
    // SAFETY: function contract.
    let p = unsafe { p.as_ref() };
    let user = match p {
        Some(p) if !p.private_data.is_null() && p.private_data_len > 0 => {
            // SAFETY: function contract.
            unsafe {
                std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into())
            }
        }
        _ => &[],
    };
    (p, user)
}

/// The QPN a REQ, REP or SIDR REP announces: the id's own QP's, else (the application
/// brings its own QP) conn_param's `qp_num`.
///
/// # Safety
/// `qp` is NULL or a QP of this library.
unsafe fn announced_qpn(qp: *mut ibv_qp, p: Option<&rdma_conn_param>) -> u32 {
    if qp.is_null() {
        p.map_or(0, |p| p.qp_num)
    } else {
        // SAFETY: function contract.
        unsafe { (*qp).qp_num }
    }
}

/// The device's READ/atomic depth, where conn_param's 0xFF (RDMA_MAX_RESP_RES /
/// RDMA_MAX_INIT_DEPTH) means "the most the device takes".
fn rd_limit(rt: &Runtime, v: u8) -> Result<u8, ()> {
    let max = rt.shared.limits.max_qp_rd_atom;
    if v == 0xff {
        Ok(max)
    } else if v > max {
        Err(())
    } else {
        Ok(v)
    }
}

/// conn_param's (responder_resources, initiator_depth) within the device's limits, or
/// None when either is above them.
fn rd_limits(rt: &Runtime, p: &rdma_conn_param) -> Option<(u8, u8)> {
    match (
        rd_limit(rt, p.responder_resources),
        rd_limit(rt, p.initiator_depth),
    ) {
        (Ok(r), Ok(i)) => Some((r, i)),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    on_id(id, |rt, o| {
        // SAFETY: NULL or the caller's parameters (rdma_connect(3)).
        let (p, user) = unsafe { params_of(conn_param) };
        // SAFETY: the id's C view.
        let (qp, qp_type, srq) = unsafe { ((*o.c()).qp, (*o.c()).qp_type, (*o.c()).srq) };
        let mut st = o.state();
        if st.phase != Phase::RouteResolved {
            return failed(rt, "rdma_connect", libc::EINVAL, &"route not resolved");
        }
        let (Some(src), Some(dst)) = (st.src, st.dst) else {
            return err(libc::EINVAL);
        };
        let hl = header_len(st.ps);
        if qp_type == IBV_QPT_UD {
            // A UD id looks the service up with SIDR (kernel cma_resolve_ib_udp).
            let mut pd = [0u8; softib_wire::cm::SIDR_REQ_PRIVATE_DATA_LEN];
            if hl > 0 {
                let h = softib_wire::cm::CmaIpHeader {
                    src_port: src.port(),
                    src_addr: src.ip(),
                    dst_addr: dst.ip(),
                };
                if h.emit(&mut pd).is_err() {
                    return err(libc::EINVAL);
                }
            }
            if user.len() > pd.len() - hl {
                return failed(rt, "rdma_connect", libc::EINVAL, &"private data too long");
            }
            pd[hl..hl + user.len()].copy_from_slice(user);
            let params = SidrParams {
                remote_gid: rdma_cm::gid_of(dst.ip()),
                service_id: rdma_cm::service_id(st.ps, dst.port()),
                pkey: 0xffff,
                timeout: 20,
                max_retries: 15,
                private_data: pd,
            };
            // Owners held across the CM call: the reply may come before it returns.
            let mut owners = rt.owners();
            let sidr = rt
                .shared
                .net
                .with_cm(|cm, now| cm.sidr_request(now, &params));
            owners.sidrs.insert(sidr, o.addr());
            drop(owners);
            st.sidr = Some(sidr);
            st.phase = Phase::Connecting;
            drop(st);
            return complete(o);
        }
        let (resp, init) = match p {
            Some(p) => match rd_limits(rt, p) {
                Some(depths) => depths,
                None => {
                    return failed(
                        rt,
                        "rdma_connect",
                        libc::EINVAL,
                        &"responder_resources/initiator_depth above the device's",
                    )
                }
            },
            None => (0, 0),
        };
        // SAFETY: the id's QP is NULL or ours.
        let qpn = unsafe { announced_qpn(qp, p) };
        let mut params = match rdma_cm::rc_connect_params(st.ps, src, dst, qpn, st.psn, user) {
            Ok(v) if hl > 0 => v,
            Ok(mut v) => {
                if user.len() > REQ_PRIVATE_DATA_LEN {
                    return err(libc::EINVAL);
                }
                v.private_data = [0; REQ_PRIVATE_DATA_LEN];
                v.private_data[..user.len()].copy_from_slice(user);
                v
            }
            Err(e) => return failed(rt, "rdma_connect", libc::EINVAL, &e),
        };
        params.responder_resources = resp;
        params.initiator_depth = init;
        params.retry_count = p.map_or(7, |p| p.retry_count.min(7));
        params.rnr_retry_count = p.map_or(7, |p| p.rnr_retry_count.min(7));
        params.path_mtu = device_mtu_code(rt);
        params.srq = !srq.is_null() || p.is_some_and(|p| p.srq != 0);
        params.path.local_ack_timeout = st.ack_timeout;
        params.path.traffic_class = st.tos;
        if qp_type == IBV_QPT_UC {
            params.transport = softib_wire::cm::TransportService::Uc;
        }
        st.rd_atomic = (resp, init);
        // Owners held across the CM call: the REP may come before it returns.
        let mut owners = rt.owners();
        match rt.shared.net.with_cm(|cm, now| cm.connect(now, &params)) {
            Ok(conn) => {
                owners.conns.insert(conn, o.addr());
                drop(owners);
                st.conn = Some(conn);
                st.phase = Phase::Connecting;
            }
            Err(e) => return failed(rt, "rdma_connect", libc::ENOMEM, &e),
        }
        drop(st);
        complete(o)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    on_id(id, |rt, o| {
        // SAFETY: NULL or the caller's parameters (rdma_accept(3)).
        let (p, user) = unsafe { params_of(conn_param) };
        // SAFETY: the id's C view.
        let (qp, qp_type) = unsafe { ((*o.c()).qp, (*o.c()).qp_type) };
        let mut st = o.state();
        if st.phase != Phase::RequestReceived {
            return failed(rt, "rdma_accept", libc::EINVAL, &"no request to accept");
        }
        if let Some(sidr) = st.sidr {
            // UD: answer the SIDR request with our QP and rdma_cm's Q_Key.
            // SAFETY: the id's QP is NULL or ours.
            let qpn = unsafe { announced_qpn(qp, p) };
            let r = rt
                .shared
                .net
                .with_cm(|cm, _| cm.sidr_reply(sidr, SidrStatus::Valid, qpn, RDMA_UDP_QKEY, user));
            rt.owners().sidrs.remove(&sidr);
            st.sidr = None;
            st.phase = Phase::Connected;
            return match r {
                Ok(()) => 0,
                Err(e) => failed(rt, "rdma_accept", libc::EINVAL, &e),
            };
        }
        let (Some(conn), Some(req)) = (st.conn, st.req.clone()) else {
            return err(libc::EINVAL);
        };
        if user.len() > REP_PRIVATE_DATA_LEN {
            return failed(rt, "rdma_accept", libc::EINVAL, &"private data too long");
        }
        let max = rt.shared.limits.max_qp_rd_atom;
        // librdmacm: without conn_param, the request's depths capped by the device.
        let (resp, init) = match p {
            Some(p) => match rd_limits(rt, p) {
                Some((r, i)) => (r.min(req.initiator_depth), i.min(req.responder_resources)),
                None => {
                    return failed(
                        rt,
                        "rdma_accept",
                        libc::EINVAL,
                        &"READ depths above the device's",
                    )
                }
            },
            None => (
                req.initiator_depth.min(max),
                req.responder_resources.min(max),
            ),
        };
        let dst = st.dst.unwrap_or_else(|| SocketAddr::new(rt.local_ip(), 0));
        let peer_ip = crate::rdmacm::dispatch::ip_of_gid(req.primary_path.local_gid);
        let peer_ip = if peer_ip.is_unspecified() {
            dst.ip()
        } else {
            peer_ip
        };
        let mtu = req.path_mtu.clamp(1, device_mtu_code(rt));
        if !qp.is_null() {
            let rtr = RtrParams {
                ah: cmqp::peer_ah(peer_ip, req.primary_path.flow_label, st.tos),
                dest_qpn: req.local_qpn,
                // The REP announces the PSN we receive from; we send with the REQ's
                // (a Starting PSN is what its sender expects to receive, as Linux does).
                rq_psn: st.psn,
                mtu,
                max_dest_rd_atomic: resp,
            };
            let timeout = if req.primary_path.local_ack_timeout != 0 {
                req.primary_path.local_ack_timeout
            } else {
                st.ack_timeout
            };
            let rts = cmqp::rts_attr(
                qp_type,
                req.starting_psn,
                timeout,
                req.retry_count,
                req.rnr_retry_count,
                init,
            );
            // SAFETY: the id's QP (ours).
            let r = unsafe {
                cmqp::modify(qp, cmqp::rtr_attr(qp_type, &rtr)).and_then(|_| cmqp::modify(qp, rts))
            };
            if let Err(e) = r {
                rt.shared.net.with_cm(|cm, _| {
                    let _ = cm.reject(conn, RejectReason::NoQp, &[]);
                });
                return failed(rt, "rdma_accept", e, &"the QP could not be readied");
            }
        }
        // SAFETY: the id's QP is NULL or ours.
        let qpn = unsafe { announced_qpn(qp, p) };
        // SAFETY: the id's C view.
        let has_srq = unsafe { !(*o.c()).srq.is_null() };
        let mut private_data = [0u8; REP_PRIVATE_DATA_LEN];
        private_data[..user.len()].copy_from_slice(user);
        let params = AcceptParams {
            qpn,
            starting_psn: st.psn,
            responder_resources: resp,
            initiator_depth: init,
            rnr_retry_count: p.map_or(7, |p| p.rnr_retry_count.min(7)),
            srq: has_srq || p.is_some_and(|p| p.srq != 0),
            private_data,
        };
        if let Err(e) = rt
            .shared
            .net
            .with_cm(|cm, now| cm.accept(now, conn, &params))
        {
            return failed(rt, "rdma_accept", libc::EINVAL, &e);
        }
        st.phase = Phase::Accepting;
        drop(st);
        complete(o)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    on_id(id, |rt, o| {
        let data: &[u8] = if private_data.is_null() || private_data_len == 0 {
            &[]
        } else {
            // SAFETY: the caller's bytes (rdma_reject(3)).
            unsafe { std::slice::from_raw_parts(private_data.cast(), private_data_len.into()) }
        };
        let mut st = o.state();
        if st.phase != Phase::RequestReceived {
            return failed(rt, "rdma_reject", libc::EINVAL, &"no request to reject");
        }
        st.phase = Phase::Down;
        let r = if let Some(sidr) = st.sidr.take() {
            rt.owners().sidrs.remove(&sidr);
            rt.shared
                .net
                .with_cm(|cm, _| cm.sidr_reply(sidr, SidrStatus::Rejected, 0, 0, data))
        } else if let Some(conn) = st.conn.take() {
            rt.owners().conns.remove(&conn);
            rt.shared
                .net
                .with_cm(|cm, _| cm.reject(conn, RejectReason::ConsumerReject, data))
        } else {
            return err(libc::EINVAL);
        };
        match r {
            Ok(()) => 0,
            Err(e) => failed(rt, "rdma_reject", libc::EINVAL, &e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    on_id(id, |rt, o| {
        // SAFETY: the id's C view.
        if unsafe { !(*o.c()).qp.is_null() } {
            return err(libc::EINVAL);
        }
        let mut st = o.state();
        let Some(conn) = st.conn.filter(|_| st.phase == Phase::Connecting) else {
            return err(libc::EINVAL);
        };
        if let Err(e) = rt.shared.net.with_cm(|cm, _| cm.ready_to_use(conn, &[])) {
            return failed(rt, "rdma_establish", libc::EINVAL, &e);
        }
        st.phase = Phase::Connected;
        // librdmacm's rdma_establish only tells the kernel to send the RTU (ucma
        // ACCEPT on an active id, kernel cma_rep_recv): no event follows, the
        // application already had CONNECT_RESPONSE.
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    on_id(id, |rt, o| {
        // librdmacm: the QP goes to error first, then the kernel sends a DREQ (or answers
        // the peer's with a DREP); any CM state past that is fine (returns 0).
        // SAFETY: the id's QP (ours) or NULL.
        unsafe { cmqp::to_error((*o.c()).qp) };
        let Some(conn) = o.state().conn else {
            return err(libc::EINVAL);
        };
        rt.shared.net.with_cm(|cm, now| {
            let _ = cm.disconnect(now, conn, &[]);
        });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: u32) -> c_int {
    on_id(id, |rt, o| {
        if event != IBV_EVENT_COMM_EST {
            return err(libc::EINVAL);
        }
        let Some(conn) = o.state().conn else {
            return err(libc::EINVAL);
        };
        // First data before the RTU (IBA 12.9.7): the CM may consider it established.
        match rt.shared.net.with_cm(|cm, _| cm.establish(conn)) {
            Ok(()) => 0,
            Err(e) => failed(rt, "rdma_notify", libc::EINVAL, &e),
        }
    })
}
