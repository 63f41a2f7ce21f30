//! The objects behind librdmacm's handles: event channels, ids and events (each embeds its
//! C structure as first field, so the application's pointer is the object's), and the
//! process-wide runtime (the device rdma_cm opened, its default PD, which id owns which CM
//! connection, listener or SIDR request, which ports are bound).
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use softib_cm::rdma_cm::PortSpace;
use softib_cm::{ConnId, ListenerId, SidrId};
use softib_wire::cm::{CmRep, CmReq, CmSidrReq};

use super::abi::*;
use crate::abi::{ibv_context, ibv_pd, ibv_qp_init_attr};
use crate::events::EventQueue;
use crate::objects::Shared;

/// An event channel: the eventfd its `fd` is, and the events (addresses of [`EventObj`]s)
/// its signals announce.
#[repr(C)]
pub struct ChannelObj {
    /// C view.
    pub ch: rdma_event_channel,
    /// The events.
    pub queue: EventQueue<usize>,
}

impl ChannelObj {
    /// A new channel on the heap (its address is the application's handle).
    pub fn create() -> std::io::Result<*mut ChannelObj> {
        let queue = EventQueue::new()?;
        let ch = rdma_event_channel { fd: queue.raw_fd() };
        Ok(Box::into_raw(Box::new(ChannelObj { ch, queue })))
    }

    /// Queues an event for the application.
    pub fn push(&self, ev: Box<EventObj>) {
        self.queue.push(Box::into_raw(ev) as usize);
    }

    /// Takes the events of `id` off the channel (the id is being destroyed or migrated).
    /// Boxed: an event's address is what channels queue and applications hold.
    #[allow(clippy::vec_box)]
    pub fn take_events_of(&self, id: *mut rdma_cm_id) -> Vec<Box<EventObj>> {
        let mut out = Vec::new();
        self.queue.discard(|&e| {
            // SAFETY: every queued address is a live EventObj this module boxed.
            let ev = unsafe { &*(e as *const EventObj) };
            if ev.ev.id == id || ev.ev.listen_id == id {
                // SAFETY: taken off the queue here, so this is the only owner.
                out.push(unsafe { Box::from_raw(e as *mut EventObj) });
                true
            } else {
                false
            }
        });
        out
    }
}

/// An event handed to the application, with its own copy of the private data (what
/// `param.conn.private_data` points at), freed by `rdma_ack_cm_event`.
#[repr(C)]
pub struct EventObj {
    /// C view.
    pub ev: rdma_cm_event,
    /// The private data.
    pub private_data: Box<[u8]>,
}

// SAFETY: the raw pointers in an event are handles the application owns; the event only
// carries them between threads (the CM event thread to the application's).
unsafe impl Send for EventObj {}

impl EventObj {
    /// An event of `kind` with `status` for `id`.
    pub fn new(id: *mut rdma_cm_id, kind: u32, status: i32) -> Box<EventObj> {
        Box::new(EventObj {
            ev: rdma_cm_event {
                id,
                listen_id: std::ptr::null_mut(),
                event: kind,
                status,
                param: rdma_cm_event_param {
                    conn: rdma_conn_param {
                        private_data: std::ptr::null(),
                        private_data_len: 0,
                        responder_resources: 0,
                        initiator_depth: 0,
                        flow_control: 0,
                        retry_count: 0,
                        rnr_retry_count: 0,
                        srq: 0,
                        qp_num: 0,
                    },
                },
            },
            private_data: Box::new([]),
        })
    }

    /// Attaches private data (as `param.conn` or `param.ud`, whose first two fields agree).
    pub fn with_private_data(mut self: Box<Self>, data: &[u8]) -> Box<EventObj> {
        self.private_data = data.into();
        let len = data.len().min(255) as u8;
        // Both union members start with the private data pointer and length; writing
        // through `conn` gives `ud` the same (same offsets, checked by tests/layout.rs).
        self.ev.param.conn.private_data = self.private_data.as_ptr().cast();
        self.ev.param.conn.private_data_len = len;
        self
    }
}

/// Where an id is in rdma_cm's life cycle (kernel cma.c `enum rdma_cm_state`, the states
/// the user-visible rules depend on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Created.
    Idle,
    /// rdma_bind_addr done.
    Bound,
    /// ADDR_RESOLVED reported.
    AddrResolved,
    /// ROUTE_RESOLVED reported.
    RouteResolved,
    /// rdma_listen done.
    Listening,
    /// REQ (or SIDR_REQ) sent, waiting for the answer.
    Connecting,
    /// A request reached this (passive) id; waiting for rdma_accept/rdma_reject.
    RequestReceived,
    /// rdma_accept done, waiting for the RTU.
    Accepting,
    /// ESTABLISHED reported.
    Connected,
    /// DISCONNECTED, REJECTED or UNREACHABLE reported.
    Down,
}

/// What the shim knows about an id besides its C structure.
pub struct IdState {
    /// Port space.
    pub ps: PortSpace,
    /// Phase.
    pub phase: Phase,
    /// Our address and rdma_cm port once bound.
    pub src: Option<SocketAddr>,
    /// The peer's once resolved or known.
    pub dst: Option<SocketAddr>,
    /// The port this id holds in `Runtime::ports`.
    pub port_held: Option<u16>,
    /// The CM listener (listening ids).
    pub listener: Option<ListenerId>,
    /// The CM connection (RC/UC ids).
    pub conn: Option<ConnId>,
    /// The SIDR exchange (UD ids).
    pub sidr: Option<SidrId>,
    /// The REQ that created this passive id.
    pub req: Option<Box<CmReq>>,
    /// The REP an active id received (its RTR attributes, kernel cm_init_qp_rtr_attr).
    pub rep: Option<Box<CmRep>>,
    /// The SIDR_REQ that created this passive UD id.
    pub sidr_req: Option<Box<CmSidrReq>>,
    /// The PSN our QP expects to receive first (announced in our REQ or REP).
    pub psn: u32,
    /// The PSN our QP sends with first: the peer's REQ/REP Starting PSN, once known.
    pub send_psn: Option<u32>,
    /// READ/atomic limits asked for at connect (responder, initiator).
    pub rd_atomic: (u8, u8),
    /// rdma_set_option(TOS).
    pub tos: u8,
    /// rdma_set_option(ACK_TIMEOUT), or the CM's 19.
    pub ack_timeout: u8,
    /// The id owns its channel (created without one: synchronous operation).
    pub sync: bool,
    /// QP attributes `rdma_get_request` gives new ids (rdma_create_ep on a passive id).
    pub ep_qp_init: Option<(usize, ibv_qp_init_attr)>,
    /// CQs and channels rdma_create_qp made for the id (destroyed with its QP).
    pub own_cqs: bool,
    /// The multicast groups joined through this id (`rdmacm/mcast.rs`).
    pub mcast: Vec<super::mcast::Membership>,
    /// The number of the QP rdma_create_qp made for the id. The CM event thread puts a
    /// failed or disconnected connection's QP in error by this number, never through the
    /// application's `id->qp`: the application may destroy that QP at any moment (rping
    /// does, with ibv_destroy_qp), and the engine refuses a number whose QP is gone.
    pub qpn: Option<u32>,
}

/// An rdma_cm id.
#[repr(C)]
pub struct IdObj {
    /// C view (the application reads and writes fields such as `context` and `qp`).
    pub id: UnsafeCell<rdma_cm_id>,
    /// What librdmacm keeps after the `rdma_cm_id` (`struct cma_id_private` of cma.c):
    /// librdmacm's own rsocket code, which runs on these ids, reads it.
    pub librdmacm_private: CmaIdPrivate,
    /// The rest.
    pub state: Mutex<IdState>,
}

// SAFETY: the C view is only written by the shim under `state`'s lock or by the
// application under the librdmacm threading rules; the pointers in it are handles.
unsafe impl Sync for IdObj {}
// SAFETY: as above.
unsafe impl Send for IdObj {}

impl IdObj {
    /// The state, poison-tolerant (a panicking verb leaves it consistent enough to destroy).
    pub fn state(&self) -> MutexGuard<'_, IdState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The C structure.
    pub fn c(&self) -> *mut rdma_cm_id {
        self.id.get()
    }

    /// The C structure's address, as the owners maps keep it.
    pub fn addr(&self) -> Addr {
        Addr(self.c() as usize)
    }

    /// The channel the id reports on.
    pub fn channel(&self) -> Option<&ChannelObj> {
        // SAFETY: `channel` is NULL or a ChannelObj of this module (set at creation or by
        // rdma_migrate_id), alive while ids use it (librdmacm's contract).
        unsafe { ((*self.c()).channel as *const ChannelObj).as_ref() }
    }

    /// Queues an event on the id's channel.
    pub fn report(&self, ev: Box<EventObj>) {
        if let Some(ch) = self.channel() {
            ch.push(ev);
        }
    }
}

/// The start of librdmacm's `struct cma_id_private` after its `rdma_cm_id` (rdma-core 44
/// cma.c). librdmacm's rsocket code calls librdmacm internals on our ids: `ucma_max_qpsize`
/// follows `cma_dev` unless it is NULL, and `ucma_complete` waits for the id's event only if
/// `sync` is set (then through `rdma_get_cm_event`, which is ours). So `cma_dev` and the
/// pending-connect fields stay zero and `sync` mirrors whether the id is synchronous.
#[repr(C)]
pub struct CmaIdPrivate {
    cma_dev: usize,
    connect: usize,
    connect_len: usize,
    events_completed: i32,
    connect_error: i32,
    /// Mirrors [`IdState::sync`].
    pub sync: std::sync::atomic::AtomicI32,
    /// The rest of the structure (condition variable, mutex, handle, ...), never read for
    /// our ids by the code paths above; zero.
    rest: [u64; 24],
}

impl CmaIdPrivate {
    fn new(sync: bool) -> CmaIdPrivate {
        CmaIdPrivate {
            cma_dev: 0,
            connect: 0,
            connect_len: 0,
            events_completed: 0,
            connect_error: 0,
            sync: std::sync::atomic::AtomicI32::new(i32::from(sync)),
            rest: [0; 24],
        }
    }
}

/// A pointer that crosses threads (an address the application owns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Addr(pub usize);

/// The maps from CM objects to ids.
#[derive(Default)]
pub struct Owners {
    /// Connection -> id.
    pub conns: HashMap<ConnId, Addr>,
    /// Listener -> id.
    pub listeners: HashMap<ListenerId, Addr>,
    /// SIDR exchange -> id (both sides).
    pub sidrs: HashMap<SidrId, Addr>,
    /// Bound (port space, port).
    pub ports: HashSet<(u16, u16)>,
    /// Live ids (so a stale handle is refused rather than followed).
    pub ids: HashSet<Addr>,
}

/// The process-wide state of the librdmacm layer.
pub struct Runtime {
    /// The device as librdmacm opens it (`id->verbs`), open for the life of the process.
    pub verbs: Addr,
    /// Its shared device.
    pub shared: Arc<Shared>,
    /// The default PD (for rdma_create_qp without one), allocated on first use.
    pub default_pd: Mutex<Addr>,
    /// Who owns what.
    pub owners: Mutex<Owners>,
}

impl Runtime {
    /// The maps.
    pub fn owners(&self) -> MutexGuard<'_, Owners> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device's address.
    pub fn local_ip(&self) -> std::net::IpAddr {
        self.shared.net.local_addr().ip()
    }

    /// The `ibv_context` ids carry.
    pub fn verbs(&self) -> *mut ibv_context {
        self.verbs.0 as *mut ibv_context
    }

    /// The default PD, allocated on first use.
    pub fn default_pd(&self) -> *mut ibv_pd {
        let mut pd = self.default_pd.lock().unwrap_or_else(|p| p.into_inner());
        if pd.0 == 0 {
            // SAFETY: our own open context.
            pd.0 = unsafe { crate::ffi::alloc_pd_for_rdmacm(self.verbs()) } as usize;
        }
        pd.0 as *mut ibv_pd
    }

    /// An ephemeral port (kernel ip_local_port_range 32768..60999) free in `ps`, reserved.
    pub fn reserve_ephemeral(&self, ps: u16) -> Option<u16> {
        let start = (self.shared.net.random_psn() % 28232) as u16;
        let mut o = self.owners();
        (0..28232u16)
            .map(|i| 32768 + (start + i) % 28232)
            .find(|&p| o.ports.insert((ps, p)))
    }

    /// Reserves `port` in `ps`; false if an id holds it.
    pub fn reserve(&self, ps: u16, port: u16) -> bool {
        self.owners().ports.insert((ps, port))
    }

    /// The id at `a` if it is live.
    pub fn id(&self, a: *mut rdma_cm_id) -> Option<&'static IdObj> {
        if a.is_null() || !self.owners().ids.contains(&Addr(a as usize)) {
            return None;
        }
        // SAFETY: a live IdObj of this module (checked in `ids`); ids are freed only by
        // rdma_destroy_id, after which the application must not use them.
        Some(unsafe { &*(a as *const IdObj) })
    }
}

/// A new id on the heap, registered as live.
pub fn new_id(
    rt: &Runtime,
    channel: *mut rdma_event_channel,
    context: *mut std::ffi::c_void,
    ps: u32,
    qp_type: u32,
    state: IdState,
) -> &'static IdObj {
    let sync = state.sync;
    // SAFETY: rdma_route is plain old data (addresses and a pointer); all-zero is the
    // unbound route librdmacm starts with.
    let route: rdma_route = unsafe { std::mem::zeroed() };
    let obj = Box::new(IdObj {
        id: UnsafeCell::new(rdma_cm_id {
            verbs: std::ptr::null_mut(),
            channel,
            context,
            qp: std::ptr::null_mut(),
            route,
            ps,
            port_num: 0,
            event: std::ptr::null_mut(),
            send_cq_channel: std::ptr::null_mut(),
            send_cq: std::ptr::null_mut(),
            recv_cq_channel: std::ptr::null_mut(),
            recv_cq: std::ptr::null_mut(),
            srq: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
            qp_type,
        }),
        librdmacm_private: CmaIdPrivate::new(sync),
        state: Mutex::new(state),
    });
    let obj: &'static IdObj = Box::leak(obj);
    rt.owners().ids.insert(obj.addr());
    obj
}

/// Writes the id's addresses into `route.addr` (and the GIDs and P_Key of `ibaddr`, as
/// librdmacm's ucma_query_addr / ucma_query_gid fill them); a source on the device binds
/// the id to it (`verbs`, `port_num`).
pub fn set_route(rt: &Runtime, id: &IdObj, src: Option<SocketAddr>, dst: Option<SocketAddr>) {
    // SAFETY: the id's C view; the shim writes it while the application waits in the call
    // that changes it (or before it learns of the id).
    let c = unsafe { &mut *id.c() };
    if let Some(s) = src {
        c.route.addr.src_storage = super::addr::to_storage(s).0;
        if !super::addr::is_any(s.ip()) {
            c.verbs = rt.verbs();
            // librdmacm's ucma_get_device gives a bound id the device's shared PD, so
            // `id->pd` is usable for the application's own QPs before rdma_create_qp.
            if c.pd.is_null() {
                c.pd = rt.default_pd();
            }
            c.port_num = 1;
            // librdmacm's ucma_get_device: an id on a device gets the device's PD (what
            // pyverbs' CMID.pd and rdma_create_qp without a PD use).
            if c.pd.is_null() {
                c.pd = rt.default_pd();
            }
            c.route.addr.ibaddr.sgid.raw = softib_cm::rdma_cm::gid_of(s.ip());
            c.route.addr.ibaddr.pkey = 0xffff_u16.to_be();
        }
    }
    if let Some(d) = dst {
        c.route.addr.dst_storage = super::addr::to_storage(d).0;
        c.route.addr.ibaddr.dgid.raw = softib_cm::rdma_cm::gid_of(d.ip());
    }
}

/// A fresh state for an id created by the application.
pub fn fresh_state(rt: &Runtime, ps: PortSpace, sync: bool) -> IdState {
    IdState {
        ps,
        phase: Phase::Idle,
        src: None,
        dst: None,
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
        tos: 0,
        ack_timeout: 19,
        sync,
        ep_qp_init: None,
        own_cqs: false,
        mcast: Vec::new(),
        qpn: None,
    }
}
