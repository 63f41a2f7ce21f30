//! librdmacm's public entry points (`<rdma/rdma_cma.h>`, rdma-core 44), on softib's CM.
//! As librdmacm, every function returns 0 or -1 with `errno` set (its `ERR()` macro), and
//! an id created without an event channel is synchronous: the call waits for its event and
//! fails with the event's status (librdmacm `ucma_complete`).

pub(crate) mod verbs;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use softib_cm::rdma_cm::{self, PortSpace};
use softib_cm::{AcceptParams, SidrParams};
use softib_wire::cm::{RejectReason, SidrStatus, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN};

use super::{guard, obj};
use crate::abi::*;
use crate::objects::QpObj;
use crate::rdmacm::abi::*;
use crate::rdmacm::addr::{from_c, from_storage, to_storage};
use crate::rdmacm::dispatch::{device_mtu_code, header_len, runtime};
use crate::rdmacm::objects::{
    fresh_state, new_id, set_route, ChannelObj, EventObj, IdObj, Phase, Runtime,
};
use crate::rdmacm::qp::{self as cmqp, RtrParams};
use crate::sys::set_errno;
use verbs::last_errno;

/// librdmacm's `ERR(e)`: sets errno, returns -1.
fn err(e: i32) -> c_int {
    set_errno(e);
    -1
}

/// `ERR(e)` with a `SOFTIB_DEBUG` line saying why.
fn failed(rt: &Runtime, call: &str, e: i32, why: &dyn std::fmt::Display) -> c_int {
    if rt.shared.config.debug {
        eprintln!(
            "softib: {call} failed ({}): {why}",
            std::io::Error::from_raw_os_error(e)
        );
    }
    err(e)
}

fn port_space(ps: u32) -> Option<PortSpace> {
    match ps {
        RDMA_PS_TCP => Some(PortSpace::Tcp),
        RDMA_PS_UDP => Some(PortSpace::Udp),
        RDMA_PS_IB => Some(PortSpace::Ib),
        RDMA_PS_IPOIB => Some(PortSpace::Ipoib),
        _ => None,
    }
}

/// The live id behind a handle, with the runtime.
fn id_of(id: *mut rdma_cm_id) -> Result<(&'static Runtime, &'static IdObj), c_int> {
    let rt = runtime().map_err(err)?;
    rt.id(id).map(|o| (rt, o)).ok_or_else(|| err(libc::EINVAL))
}

/// Waits for the event a synchronous id's operation produces (librdmacm `ucma_complete`).
fn complete(o: &IdObj) -> c_int {
    if !o.state().sync {
        return 0;
    }
    let Some(ch) = o.channel() else {
        return err(libc::EINVAL);
    };
    // SAFETY: the id's C view; `event` holds the previous synchronous event (ours).
    let c = unsafe { &mut *o.c() };
    if !c.event.is_null() {
        // SAFETY: an EventObj this library handed out.
        drop(unsafe { Box::from_raw(c.event.cast::<EventObj>()) });
        c.event = std::ptr::null_mut();
    }
    let ev = match ch.queue.pop() {
        Ok(e) => e as *mut EventObj,
        Err(e) => return err(e.raw_os_error().unwrap_or(libc::EAGAIN)),
    };
    c.event = ev.cast();
    // SAFETY: just taken off the queue: a live EventObj.
    let (kind, status) = unsafe { ((*ev).ev.event, (*ev).ev.status) };
    if status == 0 {
        0
    } else if kind == RDMA_CM_EVENT_REJECTED {
        err(libc::ECONNREFUSED)
    } else if status < 0 {
        err(-status)
    } else {
        err(status)
    }
}

// ----- event channels -----

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

// ----- ids -----

/// rdma_create_id's work: `channel` NULL makes a synchronous id with its own channel.
fn create_id(
    rt: &'static Runtime,
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: u32,
    qp_type: u32,
) -> Result<&'static IdObj, c_int> {
    let Some(space) = port_space(ps) else {
        return Err(failed(
            rt,
            "rdma_create_id",
            libc::EINVAL,
            &format!("port space {ps:#x}"),
        ));
    };
    let (channel, sync) = if channel.is_null() {
        match ChannelObj::create() {
            Ok(c) => (c.cast::<rdma_event_channel>(), true),
            Err(e) => return Err(err(e.raw_os_error().unwrap_or(libc::EMFILE))),
        }
    } else {
        (channel, false)
    };
    Ok(new_id(
        rt,
        channel,
        context,
        ps,
        qp_type,
        fresh_state(rt, space, sync),
    ))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    guard(-1, || {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return err(e),
        };
        if id.is_null() {
            return err(libc::EINVAL);
        }
        // librdmacm rdma_create_id: UD for the UDP and IPoIB spaces, RC otherwise.
        let qp_type = if ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        };
        match create_id(rt, channel, context, ps, qp_type) {
            Ok(o) => {
                // SAFETY: the caller's out pointer.
                unsafe { *id = o.c() };
                0
            }
            Err(r) => r,
        }
    })
}

/// Frees an id and what it owns on the CM (rdma_destroy_id's work).
fn destroy_id(rt: &Runtime, o: &'static IdObj) {
    let me = o.c();
    let st = {
        // Lock order: the id's state, then the owners.
        let st = o.state();
        let mut o_ = rt.owners();
        o_.ids.remove(&crate::rdmacm::objects::Addr(me as usize));
        if let Some(c) = st.conn {
            o_.conns.remove(&c);
        }
        if let Some(l) = st.listener {
            o_.listeners.remove(&l);
        }
        if let Some(s) = st.sidr {
            o_.sidrs.remove(&s);
        }
        if let Some(p) = st.port_held {
            o_.ports.remove(&(st.ps.value(), p));
        }
        (
            st.conn,
            st.listener,
            st.sidr,
            st.sidr_req.is_some(),
            st.sync,
            st.mcast.clone(),
        )
    };
    let (conn, listener, sidr, passive_sidr, sync, mcast) = st;
    // The kernel leaves the id's groups when it is destroyed; the QP (if still there) is
    // detached as librdmacm's leave would.
    for m in mcast {
        if let Some(qpn) = m.attached_qpn {
            let _ = rt.shared.net.detach_mcast(qpn, m.mgid);
        }
    }
    rt.shared.net.with_cm(|cm, now| {
        if let Some(c) = conn {
            // The CM finishes quietly: a pending request is rejected, a connection is
            // disconnected (kernel rdma_destroy_id -> ib_destroy_cm_id).
            let _ = cm.destroy(now, c);
        }
        if let Some(l) = listener {
            let _ = cm.stop_listening(l);
        }
        if let (Some(s), true) = (sidr, passive_sidr) {
            let _ = cm.sidr_reply(s, SidrStatus::Rejected, 0, 0, &[]);
        }
    });
    if let Some(ch) = o.channel() {
        for ev in ch.take_events_of(me) {
            // A request the application never read: its new id goes too.
            if ev.ev.listen_id == me && ev.ev.id != me {
                if let Some(child) = rt.id(ev.ev.id) {
                    destroy_id(rt, child);
                }
            }
        }
    }
    // SAFETY: the C view of an id being freed; nothing else refers to it now.
    let c = unsafe { &mut *me };
    if !c.route.path_rec.is_null() {
        // SAFETY: boxed by rdma_resolve_route.
        drop(unsafe { Box::from_raw(c.route.path_rec) });
    }
    if !c.event.is_null() {
        // SAFETY: the synchronous id's last event (ours).
        drop(unsafe { Box::from_raw(c.event.cast::<EventObj>()) });
    }
    if sync && !c.channel.is_null() {
        // SAFETY: the id's own channel (rdma_create_id without one).
        unsafe { rdma_destroy_event_channel(c.channel) };
    }
    // SAFETY: leaked by new_id; removed from the live set above.
    drop(unsafe { Box::from_raw(me.cast::<IdObj>()) });
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
        destroy_id(rt, o);
        0
    })
}

/// Binds `o` to `a` (port 0: an ephemeral port); the device's address or the wildcard.
fn bind(rt: &Runtime, o: &IdObj, a: SocketAddr, call: &str) -> c_int {
    let local = rt.local_ip();
    let ip = a.ip();
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    // A loopback address on a device that is not on loopback binds the device, as the
    // kernel's cma_bind_loopback gives a loopback address the first active device
    // (libfabric's verbs provider binds "localhost" for a passive endpoint).
    // Likewise an address of the host on the device's interface (127.0.0.1 for a device
    // at 127.77.0.1, both on `lo`): the kernel finds the device by that netdev.
    let loopback_alias = (ip.is_loopback() && !local.is_loopback())
        || softib_net::roce::is_host_address_on_device_interface(local, ip);
    if !ip.is_unspecified() && ip != local && !loopback_alias {
        return failed(
            rt,
            call,
            libc::ENODEV,
            &format!("{ip} is not the softib device's address {local} (SOFTIB_ADDR)"),
        );
    }
    // The id reports the device's address: on softib each process is its own host, so the
    // address a peer must use is the device's (libfabric hands a passive endpoint's bound
    // address to its peer).
    let ip = if loopback_alias { local } else { ip };
    let mut st = o.state();
    if st.phase != Phase::Idle {
        return failed(rt, call, libc::EINVAL, &"the id is already bound");
    }
    let ps = st.ps.value();
    let port = if a.port() == 0 {
        match rt.reserve_ephemeral(ps) {
            Some(p) => p,
            None => return failed(rt, call, libc::EADDRNOTAVAIL, &"no ephemeral port left"),
        }
    } else if rt.reserve(ps, a.port()) {
        a.port()
    } else {
        return failed(
            rt,
            call,
            libc::EADDRINUSE,
            &format!("port {} is bound", a.port()),
        );
    };
    st.port_held = Some(port);
    st.phase = Phase::Bound;
    let src = SocketAddr::new(ip, port);
    st.src = Some(src);
    drop(st);
    set_route(rt, o, Some(src), None);
    0
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
        // SAFETY: the caller's socket address (rdma_bind_addr(3)).
        let Some(a) = (unsafe { from_c(addr) }) else {
            return err(libc::EAFNOSUPPORT);
        };
        bind(rt, o, a, "rdma_bind_addr")
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
        // SAFETY: the caller's socket addresses (rdma_resolve_addr(3)).
        let (src, dst) = unsafe { (from_c(src_addr), from_c(dst_addr)) };
        let Some(dst) = dst else {
            return err(libc::EINVAL);
        };
        if o.state().phase == Phase::Idle {
            let want = src.unwrap_or_else(|| SocketAddr::new(unspecified_like(rt.local_ip()), 0));
            let r = bind(rt, o, want, "rdma_resolve_addr");
            if r != 0 {
                return r;
            }
        }
        let local = rt.local_ip();
        let mut st = o.state();
        if st.phase != Phase::Bound {
            return failed(
                rt,
                "rdma_resolve_addr",
                libc::EINVAL,
                &"the id is not bound",
            );
        }
        let port = st.src.map_or(0, |s| s.port());
        if dst.is_ipv4() != local.is_ipv4() {
            // The device cannot reach the other family: ADDR_ERROR, as a route lookup
            // failure reports.
            drop(st);
            o.report(EventObj::new(
                o.c(),
                RDMA_CM_EVENT_ADDR_ERROR,
                -libc::EHOSTUNREACH,
            ));
            return complete(o);
        }
        let src = SocketAddr::new(local, port);
        // The host's own address on the device's interface is this device (kernel
        // cma_resolve_loopback); the id still reports the address the caller gave.
        let given = dst;
        let dst = if softib_net::roce::is_host_address_on_device_interface(local, dst.ip()) {
            SocketAddr::new(local, dst.port())
        } else {
            dst
        };
        st.src = Some(src);
        st.dst = Some(dst);
        st.phase = Phase::AddrResolved;
        drop(st);
        super::resources::note_peer(&rt.shared, rdma_cm::gid_of(dst.ip()));
        set_route(rt, o, Some(src), Some(dst));
        if given != dst {
            // SAFETY: the id's C view, written while the caller waits in this call.
            unsafe { (*o.c()).route.addr.dst_storage = to_storage(given).0 };
        }
        o.report(EventObj::new(o.c(), RDMA_CM_EVENT_ADDR_RESOLVED, 0));
        complete(o)
    })
}

fn unspecified_like(ip: IpAddr) -> IpAddr {
    if ip.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let mut st = o.state();
        if st.phase != Phase::AddrResolved {
            return failed(
                rt,
                "rdma_resolve_route",
                libc::EINVAL,
                &"address not resolved",
            );
        }
        st.phase = Phase::RouteResolved;
        let (src, dst, tos) = (st.src, st.dst, st.tos);
        drop(st);
        let (Some(src), Some(dst)) = (src, dst) else {
            return err(libc::EINVAL);
        };
        // One path, as the kernel's RoCE route resolution gives (cma_resolve_iboe_route).
        let path = ibv_sa_path_rec {
            dgid: ibv_gid {
                raw: rdma_cm::gid_of(dst.ip()),
            },
            sgid: ibv_gid {
                raw: rdma_cm::gid_of(src.ip()),
            },
            dlid: 0,
            slid: 0,
            raw_traffic: 0,
            flow_label: rdma_cm::roce_flow_label(src.port(), dst.port()).to_be(),
            hop_limit: 64,
            traffic_class: tos,
            reversible: 1,
            numb_path: 1,
            pkey: 0xffff_u16.to_be(),
            sl: 0,
            mtu_selector: 2,
            mtu: device_mtu_code(rt),
            rate_selector: 2,
            rate: 0,
            packet_life_time_selector: 2,
            packet_life_time: 18,
            preference: 0,
        };
        // SAFETY: the id's C view, written while the application waits in this call.
        let c = unsafe { &mut *o.c() };
        if !c.route.path_rec.is_null() {
            // SAFETY: boxed by an earlier call.
            drop(unsafe { Box::from_raw(c.route.path_rec) });
        }
        c.route.path_rec = Box::into_raw(Box::new(path));
        c.route.num_paths = 1;
        o.report(EventObj::new(o.c(), RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
        complete(o)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
        if o.state().phase == Phase::Idle {
            // The kernel binds an unbound listener to the wildcard and an ephemeral port.
            let r = bind(
                rt,
                o,
                SocketAddr::new(unspecified_like(rt.local_ip()), 0),
                "rdma_listen",
            );
            if r != 0 {
                return r;
            }
        }
        let mut st = o.state();
        if st.phase != Phase::Bound {
            return failed(rt, "rdma_listen", libc::EINVAL, &"the id is not bound");
        }
        let port = st.src.map_or(0, |s| s.port());
        let service = rdma_cm::service_id(st.ps, port);
        // The owners map is held across the CM call, so a request arriving at once finds
        // its listener (the CM event thread looks it up there).
        let mut owners = rt.owners();
        match rt.shared.net.cm_listen(service) {
            Ok(l) => {
                owners
                    .listeners
                    .insert(l, crate::rdmacm::objects::Addr(o.c() as usize));
                drop(owners);
                st.listener = Some(l);
                st.phase = Phase::Listening;
                if rt.shared.config.debug {
                    eprintln!(
                        "softib: rdma_cm: listening on port {port} (service ID {service:#x})"
                    );
                }
                0
            }
            Err(e) => failed(rt, "rdma_listen", libc::EADDRINUSE, &e),
        }
    })
}

// ----- QPs -----

/// rdma_create_qp's work: CQs if the caller gave none (librdmacm `ucma_create_cqs`), the
/// QP, and INIT (UD: on to RTS), so receives can be posted before the connection.
fn create_qp(rt: &Runtime, o: &IdObj, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> c_int {
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
    let mut own_cqs = false;
    if attr.send_cq.is_null() || attr.recv_cq.is_null() {
        // SAFETY: our own context; the CQs get their own completion channels as
        // librdmacm's ucma_create_cqs makes them.
        unsafe {
            if attr.recv_cq.is_null() {
                let ch = super::resources::ibv_create_comp_channel(c.verbs);
                let cq = super::resources::ibv_create_cq(
                    c.verbs,
                    attr.cap.max_recv_wr.max(1) as c_int,
                    o.c().cast(),
                    ch,
                    0,
                );
                if cq.is_null() {
                    return err(last_errno());
                }
                c.recv_cq_channel = ch;
                c.recv_cq = cq;
                attr.recv_cq = cq;
            }
            if attr.send_cq.is_null() {
                let ch = super::resources::ibv_create_comp_channel(c.verbs);
                let cq = super::resources::ibv_create_cq(
                    c.verbs,
                    attr.cap.max_send_wr.max(1) as c_int,
                    o.c().cast(),
                    ch,
                    0,
                );
                if cq.is_null() {
                    return err(last_errno());
                }
                c.send_cq_channel = ch;
                c.send_cq = cq;
                attr.send_cq = cq;
            }
        }
        own_cqs = true;
    }
    if attr.srq.is_null() && !c.srq.is_null() {
        attr.srq = c.srq;
    }
    // SAFETY: our PD and the caller's (completed) attributes.
    let qp = unsafe { super::qp::ibv_create_qp(pd, attr) };
    if qp.is_null() {
        return err(last_errno());
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
        unsafe { super::qp::ibv_destroy_qp(qp) };
        return err(e);
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

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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
                super::qp::ibv_destroy_qp(c.qp);
                c.qp = std::ptr::null_mut();
            }
            if std::mem::take(&mut o.state().own_cqs) {
                for (cq, ch) in [
                    (&mut c.send_cq, &mut c.send_cq_channel),
                    (&mut c.recv_cq, &mut c.recv_cq_channel),
                ] {
                    if !cq.is_null() {
                        super::resources::ibv_destroy_cq(*cq);
                        *cq = std::ptr::null_mut();
                    }
                    if !ch.is_null() {
                        super::resources::ibv_destroy_comp_channel(*ch);
                        *ch = std::ptr::null_mut();
                    }
                }
            }
        }
    })
}

// ----- connecting -----

/// The consumer's private data of a conn_param.
///
/// # Safety
/// `p` is NULL or the caller's conn_param whose data pointer covers its length.
unsafe fn private_of(p: Option<&rdma_conn_param>) -> &[u8] {
    match p {
        Some(p) if !p.private_data.is_null() && p.private_data_len > 0 => {
            // SAFETY: function contract.
            unsafe {
                std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into())
            }
        }
        _ => &[],
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

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
        // SAFETY: NULL or the caller's parameters (rdma_connect(3)).
        let p = unsafe { conn_param.as_ref() };
        // SAFETY: as above.
        let user = unsafe { private_of(p) };
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
            owners
                .sidrs
                .insert(sidr, crate::rdmacm::objects::Addr(o.c() as usize));
            drop(owners);
            st.sidr = Some(sidr);
            st.phase = Phase::Connecting;
            drop(st);
            return complete(o);
        }
        let (resp, init) = match p {
            Some(p) => match (
                rd_limit(rt, p.responder_resources),
                rd_limit(rt, p.initiator_depth),
            ) {
                (Ok(r), Ok(i)) => (r, i),
                _ => {
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
        // SAFETY: the id's QP (ours) when set.
        let qpn = if qp.is_null() {
            p.map_or(0, |p| p.qp_num)
        } else {
            unsafe { (*qp).qp_num }
        };
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
                owners
                    .conns
                    .insert(conn, crate::rdmacm::objects::Addr(o.c() as usize));
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
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
        // SAFETY: NULL or the caller's parameters (rdma_accept(3)).
        let p = unsafe { conn_param.as_ref() };
        // SAFETY: as above.
        let user = unsafe { private_of(p) };
        // SAFETY: the id's C view.
        let (qp, qp_type) = unsafe { ((*o.c()).qp, (*o.c()).qp_type) };
        let mut st = o.state();
        if st.phase != Phase::RequestReceived {
            return failed(rt, "rdma_accept", libc::EINVAL, &"no request to accept");
        }
        if let Some(sidr) = st.sidr {
            // UD: answer the SIDR request with our QP and rdma_cm's Q_Key.
            let qpn = if qp.is_null() {
                p.map_or(0, |p| p.qp_num)
            } else {
                // SAFETY: our QP.
                unsafe { (*qp).qp_num }
            };
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
            Some(p) => match (
                rd_limit(rt, p.responder_resources),
                rd_limit(rt, p.initiator_depth),
            ) {
                (Ok(r), Ok(i)) => (r.min(req.initiator_depth), i.min(req.responder_resources)),
                _ => {
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
        let qpn = if qp.is_null() {
            p.map_or(0, |p| p.qp_num)
        } else {
            // SAFETY: our QP.
            unsafe { (*qp).qp_num }
        };
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
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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

// ----- synchronous endpoints -----

/// Moves the id's queued events to `new` (kernel ucma_migrate_id moves them too).
fn migrate(o: &IdObj, new: *mut rdma_event_channel, sync: bool) {
    // SAFETY: the id's C view.
    let c = unsafe { &mut *o.c() };
    let old = c.channel;
    let was_sync = o.state().sync;
    if let Some(ch) = o.channel() {
        let moved = ch.take_events_of(o.c());
        // SAFETY: `new` is a ChannelObj of this module.
        let newch = unsafe { &*new.cast::<ChannelObj>() };
        for e in moved {
            newch.push(e);
        }
    }
    c.channel = new;
    o.state().sync = sync;
    o.librdmacm_private
        .sync
        .store(i32::from(sync), std::sync::atomic::Ordering::Relaxed);
    if was_sync && !old.is_null() && old != new {
        // SAFETY: the id's own former channel.
        unsafe { rdma_destroy_event_channel(old) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    guard(-1, || {
        let (_, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let (target, sync) = if channel.is_null() {
            match ChannelObj::create() {
                Ok(c) => (c.cast::<rdma_event_channel>(), true),
                Err(e) => return err(e.raw_os_error().unwrap_or(libc::EMFILE)),
            }
        } else {
            (channel, false)
        };
        migrate(o, target, sync);
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    guard(-1, || {
        let (rt, l) = match id_of(listen) {
            Ok(v) => v,
            Err(r) => return r,
        };
        if id.is_null() || !l.state().sync {
            return err(libc::EINVAL);
        }
        let Some(ch) = l.channel() else {
            return err(libc::EINVAL);
        };
        loop {
            let ev = match ch.queue.pop() {
                Ok(e) => e as *mut EventObj,
                Err(e) => return err(e.raw_os_error().unwrap_or(libc::EAGAIN)),
            };
            // SAFETY: a live EventObj just taken off the queue.
            let (kind, status, new) = unsafe { ((*ev).ev.event, (*ev).ev.status, (*ev).ev.id) };
            if status != 0 {
                // SAFETY: ours, not handed out.
                drop(unsafe { Box::from_raw(ev) });
                return err(if status < 0 { -status } else { status });
            }
            if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
                // SAFETY: ours, not handed out.
                drop(unsafe { Box::from_raw(ev) });
                continue;
            }
            let Some(child) = rt.id(new) else {
                // SAFETY: ours.
                drop(unsafe { Box::from_raw(ev) });
                continue;
            };
            // The new id is synchronous too, with its own channel (librdmacm).
            match ChannelObj::create() {
                Ok(c) => migrate(child, c.cast(), true),
                Err(e) => return err(e.raw_os_error().unwrap_or(libc::EMFILE)),
            }
            // SAFETY: the child's C view.
            unsafe { (*child.c()).event = ev.cast() };
            let ep = l
                .state()
                .ep_qp_init
                .as_ref()
                .map(|(pd, a)| (*pd, copy_init(a)));
            if let Some((pd, mut attr)) = ep {
                let r = create_qp(rt, child, pd as *mut ibv_pd, &mut attr);
                if r != 0 {
                    let e = last_errno();
                    let _ = rt.shared.net.with_cm(|cm, _| {
                        child
                            .state()
                            .conn
                            .map(|c| cm.reject(c, RejectReason::NoQp, &[]))
                    });
                    destroy_id(rt, child);
                    return err(e);
                }
            }
            // SAFETY: the caller's out pointer.
            unsafe { *id = new };
            return 0;
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return err(e),
        };
        // SAFETY: the caller's rdma_getaddrinfo result (rdma_create_ep(3)).
        let (Some(res), false) = (unsafe { res.as_ref() }, id.is_null()) else {
            return err(libc::EINVAL);
        };
        let ps = if res.ai_port_space != 0 {
            res.ai_port_space as u32
        } else {
            RDMA_PS_TCP
        };
        let qp_type = if res.ai_qp_type != 0 {
            res.ai_qp_type as u32
        } else {
            IBV_QPT_RC
        };
        let o = match create_id(rt, std::ptr::null_mut(), std::ptr::null_mut(), ps, qp_type) {
            Ok(o) => o,
            Err(r) => return r,
        };
        let r = if res.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the result's source address.
            match unsafe { from_c(res.ai_src_addr) } {
                Some(a) => {
                    let r = bind(rt, o, a, "rdma_create_ep");
                    if r == 0 {
                        // SAFETY: NULL or the caller's attributes, copied for rdma_get_request.
                        if let Some(a) = unsafe { qp_init_attr.as_ref() } {
                            o.state().ep_qp_init = Some((pd as usize, copy_init(a)));
                        }
                    }
                    r
                }
                None => err(libc::EINVAL),
            }
        } else {
            // SAFETY: the result's addresses and the caller's attributes.
            unsafe {
                let mut r = rdma_resolve_addr(o.c(), res.ai_src_addr, res.ai_dst_addr, 2000);
                if r == 0 {
                    r = rdma_resolve_route(o.c(), 2000);
                }
                if r == 0 {
                    if let Some(a) = qp_init_attr.as_mut() {
                        r = create_qp(rt, o, pd, a);
                    }
                }
                r
            }
        };
        if r != 0 {
            let e = last_errno();
            destroy_id(rt, o);
            return err(e);
        }
        // SAFETY: the caller's out pointer.
        unsafe { *id = o.c() };
        0
    })
}

fn copy_init(a: &ibv_qp_init_attr) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    guard((), || {
        // SAFETY: an id from rdma_create_ep (or rdma_create_id).
        unsafe {
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
        }
    })
}

// ----- addresses and devices -----

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

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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
    guard(-1, || {
        let (rt, o) = match id_of(id) {
            Ok(v) => v,
            Err(r) => return r,
        };
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
