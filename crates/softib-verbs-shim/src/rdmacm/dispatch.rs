//! The process's rdma_cm runtime ([`runtime`], opened on first use) and its CM event
//! thread, which takes every event of the device's CM and reports it on the owning
//! id's channel as the kernel's rdma_cm does (cma.c `cma_ib_handler`, `cma_sidr_rep_handler`
//! and `cma_ib_req_handler`, Linux 6.1), doing for the active side what librdmacm does when
//! it reads CONNECT_RESPONSE (`ucma_process_conn_resp`: RTR, RTS, RTU, then ESTABLISHED).
#![allow(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use softib_cm::rdma_cm::PortSpace;
use softib_cm::{CmEvent, ConnId};
use softib_wire::cm::{CmRep, CmReq, CmaIpHeader, RejectReason, SidrStatus, CMA_IP_HEADER_LEN};

use super::abi::*;
use super::objects::{Addr, EventObj, IdObj, IdState, Owners, Phase, Runtime};
use super::qp::{self, RtrParams};
use crate::abi::IBV_QPT_RC;

/// How long one wait for a CM event lasts (the thread never ends; the device stays open for
/// the life of the process, as librdmacm keeps its devices).
const SLICE: Duration = Duration::from_millis(50);

/// The runtime, opened on first use (librdmacm opens its devices in ucma_init), once per
/// process: a forked child inherits the parent's runtime without its device thread or its
/// event thread, so it opens its own (the parent's stays untouched in the child's memory).
pub fn runtime() -> Result<&'static Runtime, i32> {
    use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
    static RT: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
    static RT_PID: AtomicU32 = AtomicU32::new(0);
    static INIT: Mutex<()> = Mutex::new(());
    let pid = std::process::id();
    let current = |pid: u32| {
        let p = RT.load(Ordering::Acquire);
        // SAFETY: a pointer from Box::leak below, never freed.
        (!p.is_null() && RT_PID.load(Ordering::Acquire) == pid).then(|| unsafe { &*p })
    };
    if let Some(rt) = current(pid) {
        ensure_started(rt);
        return Ok(rt);
    }
    let _init = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = current(pid) {
        ensure_started(rt);
        return Ok(rt);
    }
    // SAFETY: this library's own device list and open (the shim's ibv_* functions).
    let verbs = unsafe { crate::ffi::open_for_rdmacm() }?;
    // SAFETY: a context just opened by this library.
    let shared = unsafe { crate::ffi::shared_of(verbs) }.ok_or(libc::ENODEV)?;
    let rt: &'static Runtime = Box::leak(Box::new(Runtime {
        verbs: Addr(verbs as usize),
        shared,
        default_pd: Mutex::new(Addr(0)),
        owners: Mutex::new(Owners::default()),
    }));
    RT_PID.store(0, Ordering::Release);
    RT.store(rt as *const Runtime as *mut Runtime, Ordering::Release);
    RT_PID.store(pid, Ordering::Release);
    ensure_started(rt);
    Ok(rt)
}

/// Starts the event thread once per process (a forked child has none of its parent's
/// threads: it starts its own for its own runtime).
pub fn ensure_started(_rt: &Runtime) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static STARTED_IN: AtomicU32 = AtomicU32::new(0);
    let pid = std::process::id();
    let before = STARTED_IN.load(Ordering::Acquire);
    if before == pid
        || STARTED_IN
            .compare_exchange(before, pid, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("softib rdma_cm".into())
        .spawn(|| {
            let Ok(rt) = runtime() else { return };
            loop {
                if let Some(ev) = rt.shared.net.wait_cm_event(SLICE) {
                    handle(rt, ev);
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("softib verbs shim: cannot start the rdma_cm event thread: {e}");
    }
}

/// The IP address of a GID (IPv4-mapped GIDs give IPv4).
pub fn ip_of_gid(gid: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(gid);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

/// How many bytes of the REQ/SIDR_REQ private data rdma_cm's header takes in `ps`
/// (kernel `cma_user_data_offset`: none in RDMA_PS_IB).
pub fn header_len(ps: PortSpace) -> usize {
    if ps == PortSpace::Ib {
        0
    } else {
        CMA_IP_HEADER_LEN
    }
}

/// The id that listens with `listener`.
fn listener_owner(rt: &Runtime, listener: softib_cm::ListenerId) -> Option<&'static IdObj> {
    let a = *rt.owners().listeners.get(&listener)?;
    rt.id(a.0 as *mut rdma_cm_id)
}

/// The id that owns `conn`.
fn conn_owner(rt: &Runtime, conn: ConnId) -> Option<&'static IdObj> {
    let a = *rt.owners().conns.get(&conn)?;
    rt.id(a.0 as *mut rdma_cm_id)
}

fn handle(rt: &'static Runtime, ev: CmEvent) {
    if rt.shared.config.debug {
        eprintln!("softib: rdma_cm: CM event {}", event_name(&ev));
    }
    match ev {
        CmEvent::ConnectRequest {
            conn,
            listener,
            peer,
            req,
        } => {
            let Some(listen) = listener_owner(rt, listener) else {
                rt.shared.net.with_cm(|cm, _| {
                    let _ = cm.reject(conn, RejectReason::InvalidServiceId, &[]);
                });
                return;
            };
            connect_request(rt, listen, conn, peer, req);
        }
        CmEvent::SidrRequest {
            id,
            listener,
            peer,
            req,
        } => {
            let Some(listen) = listener_owner(rt, listener) else {
                rt.shared.net.with_cm(|cm, _| {
                    let _ = cm.sidr_reply(id, SidrStatus::ServiceIdNotSupported, 0, 0, &[]);
                });
                return;
            };
            let ps = listen.state().ps;
            let hl = header_len(ps);
            let hdr = CmaIpHeader::parse(&req.private_data).ok();
            let child = new_passive_id(rt, listen, peer, hdr.as_ref(), IBV_QPT_UD_C);
            {
                let mut st = child.state();
                st.sidr = Some(id);
                st.phase = Phase::RequestReceived;
                st.sidr_req = Some(req.clone());
            }
            rt.owners().sidrs.insert(id, child.addr());
            let mut e = EventObj::new(child.c(), RDMA_CM_EVENT_CONNECT_REQUEST, 0)
                .with_private_data(&req.private_data[hl..]);
            e.ev.listen_id = listen.c();
            listen.report(e);
        }
        CmEvent::ConnectReply { conn, rep } => {
            let Some(id) = conn_owner(rt, conn) else {
                return;
            };
            connect_reply(rt, id, conn, rep);
        }
        CmEvent::Established { conn, .. } => {
            let Some(id) = conn_owner(rt, conn) else {
                return;
            };
            id.state().phase = Phase::Connected;
            id.report(EventObj::new(id.c(), RDMA_CM_EVENT_ESTABLISHED, 0));
        }
        CmEvent::Rejected {
            conn,
            reason,
            private_data,
            ..
        } => {
            let Some(id) = conn_owner(rt, conn) else {
                return;
            };
            went_down(rt, id, conn);
            // Kernel cma_ib_handler: REJECTED with the IBA reason as status.
            id.report(
                EventObj::new(id.c(), RDMA_CM_EVENT_REJECTED, i32::from(reason.code()))
                    .with_private_data(&private_data[..]),
            );
        }
        CmEvent::Unreachable { conn, .. } => {
            let Some(id) = conn_owner(rt, conn) else {
                return;
            };
            went_down(rt, id, conn);
            id.report(EventObj::new(
                id.c(),
                RDMA_CM_EVENT_UNREACHABLE,
                -libc::ETIMEDOUT,
            ));
        }
        CmEvent::Disconnected {
            conn,
            by_peer,
            private_data,
        } => {
            let Some(id) = conn_owner(rt, conn) else {
                return;
            };
            let was_connected = {
                let mut st = id.state();
                let was = st.phase == Phase::Connected || st.phase == Phase::Accepting;
                st.phase = Phase::Down;
                was
            };
            qp::to_error_by_number(rt, id.state().qpn);
            if !was_connected {
                return;
            }
            let e = EventObj::new(id.c(), RDMA_CM_EVENT_DISCONNECTED, 0);
            let e = if by_peer {
                e.with_private_data(&private_data[..])
            } else {
                e
            };
            id.report(e);
        }
        CmEvent::TimewaitExit { conn } => {
            let Some(id) = conn_owner(rt, conn) else {
                return;
            };
            rt.owners().conns.remove(&conn);
            id.state().conn = None;
            id.report(EventObj::new(id.c(), RDMA_CM_EVENT_TIMEWAIT_EXIT, 0));
        }
        CmEvent::SidrReply { id: sidr, rep } => {
            let Some(a) = rt.owners().sidrs.remove(&sidr) else {
                return;
            };
            let Some(id) = rt.id(a.0 as *mut rdma_cm_id) else {
                return;
            };
            let (dst, tos) = {
                let mut st = id.state();
                st.sidr = None;
                (st.dst, st.tos)
            };
            if rep.status != SidrStatus::Valid {
                id.state().phase = Phase::Down;
                // Kernel cma_sidr_rep_handler: UNREACHABLE with the SIDR status.
                id.report(
                    EventObj::new(
                        id.c(),
                        RDMA_CM_EVENT_UNREACHABLE,
                        i32::from(rep.status.code()),
                    )
                    .with_private_data(&rep.private_data[..]),
                );
                return;
            }
            id.state().phase = Phase::Connected;
            let peer = dst.map_or(rt.local_ip(), |d| d.ip());
            let mut e = EventObj::new(id.c(), RDMA_CM_EVENT_ESTABLISHED, 0)
                .with_private_data(&rep.private_data[..]);
            // An established UD event carries `param.ud` (kernel cma_set_ud_event).
            e.ev.param.ud.ah_attr = qp::peer_ah(peer, 0, tos);
            e.ev.param.ud.qp_num = rep.qpn;
            e.ev.param.ud.qkey = rep.qkey;
            id.report(e);
        }
        CmEvent::SidrTimeout { id: sidr } => {
            let Some(a) = rt.owners().sidrs.remove(&sidr) else {
                return;
            };
            let Some(id) = rt.id(a.0 as *mut rdma_cm_id) else {
                return;
            };
            {
                let mut st = id.state();
                st.sidr = None;
                st.phase = Phase::Down;
            }
            id.report(EventObj::new(
                id.c(),
                RDMA_CM_EVENT_UNREACHABLE,
                -libc::ETIMEDOUT,
            ));
        }
    }
}

/// `IBV_QPT_UD` as the C enum.
const IBV_QPT_UD_C: u32 = crate::abi::IBV_QPT_UD;

/// A connection failed or was refused: forget it and put the QP in error (librdmacm
/// `ucma_modify_qp_err` on REJECTED/UNREACHABLE).
fn went_down(rt: &Runtime, id: &IdObj, conn: ConnId) {
    rt.owners().conns.remove(&conn);
    {
        let mut st = id.state();
        st.conn = None;
        st.phase = Phase::Down;
    }
    qp::to_error_by_number(rt, id.state().qpn);
}

/// A new id for a request that reached `listen` (kernel `cma_ib_new_conn_id`): the
/// listener's channel, context and port space, bound to the device, with the peer's
/// address from rdma_cm's IP header.
fn new_passive_id(
    rt: &'static Runtime,
    listen: &IdObj,
    peer_gid: [u8; 16],
    hdr: Option<&CmaIpHeader>,
    qp_type: u32,
) -> &'static IdObj {
    let lst = listen.state();
    let local_port = lst.src.map_or(0, |s| s.port());
    let local_ip = hdr
        .map(|h| h.dst_addr)
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or_else(|| rt.local_ip());
    let peer = hdr.map_or(SocketAddr::new(ip_of_gid(peer_gid), 0), |h| {
        SocketAddr::new(h.src_addr, h.src_port)
    });
    let state = IdState {
        ps: lst.ps,
        phase: Phase::RequestReceived,
        src: Some(SocketAddr::new(local_ip, local_port)),
        dst: Some(peer),
        port_held: None,
        listener: None,
        conn: None,
        sidr: None,
        req: None,
        rep: None,
        sidr_req: None,
        psn: rt.shared.net.random_psn() & 0xFF_FFFF,
        send_psn: None,
        rd_atomic: (0, 0),
        tos: lst.tos,
        ack_timeout: lst.ack_timeout,
        sync: false,
        ep_qp_init: None,
        own_cqs: false,
        mcast: Vec::new(),
        qpn: None,
    };
    drop(lst);
    // SAFETY: the listener's C view is live (looked up in the owners map).
    let (channel, context, ps) = unsafe {
        let l = &*listen.c();
        (l.channel, l.context, l.ps)
    };
    let child = super::objects::new_id(rt, channel, context, ps, qp_type, state);
    super::objects::set_route(
        rt,
        child,
        Some(SocketAddr::new(local_ip, local_port)),
        Some(peer),
    );
    child
}

fn connect_request(
    rt: &'static Runtime,
    listen: &IdObj,
    conn: ConnId,
    peer: [u8; 16],
    req: Box<CmReq>,
) {
    let ps = listen.state().ps;
    let hl = header_len(ps);
    let hdr = if hl > 0 {
        CmaIpHeader::parse(&req.private_data).ok()
    } else {
        None
    };
    let qp_type = match req.transport_service {
        softib_wire::cm::TransportService::Uc => crate::abi::IBV_QPT_UC,
        _ => IBV_QPT_RC,
    };
    let child = new_passive_id(rt, listen, peer, hdr.as_ref(), qp_type);
    {
        let mut st = child.state();
        st.conn = Some(conn);
        st.send_psn = Some(req.starting_psn);
        st.req = Some(req.clone());
    }
    rt.owners().conns.insert(conn, child.addr());
    // Kernel cma_set_req_event_data: the consumer's bytes after the header, and the
    // requester's parameters.
    let mut e = EventObj::new(child.c(), RDMA_CM_EVENT_CONNECT_REQUEST, 0)
        .with_private_data(&req.private_data[hl..]);
    e.ev.listen_id = listen.c();
    // SAFETY: a connection request carries `param.conn`.
    unsafe {
        let c = &mut e.ev.param.conn;
        c.responder_resources = req.responder_resources;
        c.initiator_depth = req.initiator_depth;
        c.flow_control = u8::from(req.end_to_end_flow_control);
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        c.srq = u8::from(req.srq);
        c.qp_num = req.local_qpn;
    }
    listen.report(e);
}

/// The REP to our REQ: with a QP, ready it and send the RTU (ESTABLISHED); without,
/// report CONNECT_RESPONSE for rdma_establish.
fn connect_reply(rt: &'static Runtime, id: &IdObj, conn: ConnId, rep: Box<CmRep>) {
    {
        let mut st = id.state();
        st.send_psn = Some(rep.starting_psn);
        st.rep = Some(rep.clone());
    }
    // SAFETY: the id's C view is live (looked up in the owners map).
    let (qp_ptr, qp_type) = unsafe { ((*id.c()).qp, (*id.c()).qp_type) };
    let mut e = if qp_ptr.is_null() {
        id.state().phase = Phase::Connecting;
        EventObj::new(id.c(), RDMA_CM_EVENT_CONNECT_RESPONSE, 0)
    } else {
        match ready_active_qp(rt, id, qp_ptr, qp_type, &rep) {
            Ok(()) => {
                let sent = rt.shared.net.with_cm(|cm, _| cm.ready_to_use(conn, &[]));
                if sent.is_ok() {
                    id.state().phase = Phase::Connected;
                    EventObj::new(id.c(), RDMA_CM_EVENT_ESTABLISHED, 0)
                } else {
                    went_down(rt, id, conn);
                    EventObj::new(id.c(), RDMA_CM_EVENT_CONNECT_ERROR, -libc::EINVAL)
                }
            }
            Err(errno) => {
                // librdmacm ucma_process_conn_resp: reject and report CONNECT_ERROR.
                rt.shared.net.with_cm(|cm, _| {
                    let _ = cm.reject(conn, RejectReason::NoQp, &[]);
                });
                went_down(rt, id, conn);
                EventObj::new(id.c(), RDMA_CM_EVENT_CONNECT_ERROR, -errno)
            }
        }
    }
    .with_private_data(&rep.private_data[..]);
    // SAFETY: connection events carry `param.conn` (kernel cma_set_rep_event_data).
    unsafe {
        let c = &mut e.ev.param.conn;
        c.responder_resources = rep.responder_resources;
        c.initiator_depth = rep.initiator_depth;
        c.flow_control = u8::from(rep.end_to_end_flow_control);
        c.rnr_retry_count = rep.rnr_retry_count;
        c.srq = u8::from(rep.srq);
        c.qp_num = rep.local_qpn;
    }
    id.report(e);
}

/// RTR and RTS of the active QP with the REP's values (kernel cm_init_qp_rtr/rts_attr).
fn ready_active_qp(
    rt: &Runtime,
    id: &IdObj,
    qp_ptr: *mut crate::abi::ibv_qp,
    qp_type: u32,
    rep: &CmRep,
) -> Result<(), i32> {
    let st = id.state();
    let dst = st.dst.ok_or(libc::EINVAL)?;
    let src_port = st.src.map_or(0, |s| s.port());
    let flow = softib_cm::rdma_cm::roce_flow_label(src_port, dst.port());
    let rtr = RtrParams {
        ah: qp::peer_ah(dst.ip(), flow, st.tos),
        dest_qpn: rep.local_qpn,
        // A REQ's or REP's Starting PSN is what its sender expects to receive (kernel
        // ib_send_cm_req / cm_init_qp_rtr_attr, docs/design/cm.md): we receive from the
        // PSN our REQ announced and send with the REP's.
        rq_psn: st.psn,
        mtu: device_mtu_code(rt),
        max_dest_rd_atomic: st.rd_atomic.0.min(rep.initiator_depth),
    };
    let rts = qp::rts_attr(
        qp_type,
        rep.starting_psn,
        st.ack_timeout,
        7,
        rep.rnr_retry_count,
        st.rd_atomic.1.min(rep.responder_resources),
    );
    drop(st);
    // SAFETY: the id's QP is one of ours (rdma_create_qp).
    unsafe {
        qp::modify(qp_ptr, qp::rtr_attr(qp_type, &rtr))?;
        qp::modify(qp_ptr, rts)
    }
}

/// The device's path MTU as an IBA code (1 = 256 ... 5 = 4096).
pub fn device_mtu_code(rt: &Runtime) -> u8 {
    (rt.shared.net.mtu().bytes().trailing_zeros() - 7) as u8
}

fn event_name(ev: &CmEvent) -> &'static str {
    match ev {
        CmEvent::ConnectRequest { .. } => "ConnectRequest",
        CmEvent::ConnectReply { .. } => "ConnectReply",
        CmEvent::Established { .. } => "Established",
        CmEvent::Rejected { .. } => "Rejected",
        CmEvent::Unreachable { .. } => "Unreachable",
        CmEvent::Disconnected { .. } => "Disconnected",
        CmEvent::TimewaitExit { .. } => "TimewaitExit",
        CmEvent::SidrRequest { .. } => "SidrRequest",
        CmEvent::SidrReply { .. } => "SidrReply",
        CmEvent::SidrTimeout { .. } => "SidrTimeout",
    }
}
