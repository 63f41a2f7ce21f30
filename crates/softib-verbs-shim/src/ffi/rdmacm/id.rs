//! rdma_cm ids and their addresses: `rdma_create_id`, `rdma_destroy_id`, `rdma_bind_addr`,
//! `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_listen`.

use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use softib_cm::rdma_cm::{self};
use softib_wire::cm::SidrStatus;

use super::channel::rdma_destroy_event_channel;
use super::{complete, err, failed, on_id, port_space};
use crate::abi::*;
use crate::ffi::guard;
use crate::rdmacm::abi::*;
use crate::rdmacm::addr::{from_c, to_storage};
use crate::rdmacm::dispatch::{device_mtu_code, runtime};
use crate::rdmacm::objects::{
    fresh_state, new_id, set_route, ChannelObj, EventObj, IdObj, Phase, Runtime,
};

/// rdma_create_id's work: `channel` NULL makes a synchronous id with its own channel.
pub(super) fn create_id(
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
pub(super) fn destroy_id(rt: &Runtime, o: &'static IdObj) {
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
    on_id(id, |rt, o| {
        destroy_id(rt, o);
        0
    })
}

/// Binds `o` to `a` (port 0: an ephemeral port); the device's address or the wildcard.
pub(super) fn bind(rt: &Runtime, o: &IdObj, a: SocketAddr, call: &str) -> c_int {
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
    on_id(id, |rt, o| {
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
    on_id(id, |rt, o| {
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
        crate::ffi::resources::note_peer(&rt.shared, rdma_cm::gid_of(dst.ip()));
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
    on_id(id, |rt, o| {
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
    on_id(id, |rt, o| {
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
                owners.listeners.insert(l, o.addr());
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
