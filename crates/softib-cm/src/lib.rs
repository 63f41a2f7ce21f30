//! softib-cm: the InfiniBand Communication Manager (IBA vol. 1, chapter 12), sans-IO.
//!
//! [`Cm`] speaks the CM protocol of a port: REQ/MRA/REJ/REP/RTU/DREQ/DREP and SIDR, as Linux's
//! ib_cm and rdma_cm put them on the wire (layouts in [`softib_wire::cm`]). It owns no socket,
//! no thread and no clock; like the transport engine (quinn-proto's `Connection` shape) its
//! methods fall into four kinds:
//! - input: [`Cm::handle_mad`] (a MAD arrived at the GSI), [`Cm::handle_timeout`];
//! - commands: [`Cm::listen`], [`Cm::connect`], [`Cm::accept`], [`Cm::reject`],
//!   [`Cm::send_mra`], [`Cm::ready_to_use`], [`Cm::establish`], [`Cm::disconnect`],
//!   [`Cm::destroy`], [`Cm::sidr_request`], [`Cm::sidr_reply`];
//! - output: [`Cm::poll_transmit`] (MADs for the GSI to send), [`Cm::poll_event`],
//!   [`Cm::poll_timeout`];
//! - getters: [`Cm::state`], [`Cm::info`], [`Cm::counters`].
//!
//! The CM never touches a QP: its events say when the consumer must move one (RTR/RTS
//! on ConnectRequest/ConnectReply, error on Disconnected), which keeps it usable by the
//! UDP runtime, the fabric simulator and a librdmacm layer alike. It lives in its own crate,
//! not in softib-transport, for that reason: it is a consumer of QPs (like rdma_cm in the
//! kernel is a consumer of verbs), not part of the transport.
//!
//! Everything a peer can make it hold is bounded: connections (`max_connections`),
//! half-open passive connections (`max_half_open`, beyond which REQs are rejected with
//! "no resources"), queued transmits and events. Malformed or stray MADs are dropped and
//! counted in [`CmCounters`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod counters;
mod event;
mod params;
pub mod rdma_cm;
mod state;
mod timing;

pub use counters::CmCounters;
pub use event::{CmEvent, ConnId, ListenerId, SidrId, TimeoutPhase};
pub use params::{AcceptParams, CmConfig, ConnectParams, Gid, SidrParams};
pub use state::{CmState, Role};
pub use timing::{exponent_ns, response_wait_ns, Nanos};

use std::collections::{BTreeMap, HashMap, VecDeque};

use softib_wire::cm::{
    CmDrep, CmDreq, CmMessage, CmMra, CmRej, CmRep, CmReq, CmRtu, CmSidrRep, CmSidrReq, MraMessage,
    RejMessage, RejectReason, SidrStatus, TransportService, DREP_PRIVATE_DATA_LEN,
    DREQ_PRIVATE_DATA_LEN, MRA_PRIVATE_DATA_LEN, REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN,
    RTU_PRIVATE_DATA_LEN, SIDR_REP_INFO_LEN, SIDR_REP_PRIVATE_DATA_LEN,
};
use softib_wire::mad::MAD_LEN;

/// A MAD for the GSI to send from QP1 to the peer's QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmTransmit {
    /// The peer's port GID.
    pub dest_gid: Gid,
    /// The P_Key to send with.
    pub pkey: u16,
    /// The whole MAD.
    pub mad: Box<[u8; MAD_LEN]>,
}

/// A command the CM cannot carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such connection (never made, or already gone).
    #[error("no CM connection {0:#010x}")]
    UnknownConnection(u32),
    /// The connection is in a state where the command does not apply (IBA 12.9).
    #[error("CM connection {conn:#010x} is in state {state:?}, which does not allow {command}")]
    WrongState {
        /// The connection.
        conn: u32,
        /// Its state.
        state: CmState,
        /// What was asked.
        command: &'static str,
    },
    /// Another listener already has this service ID (rdma_cm: EADDRINUSE).
    #[error("service ID {0:#018x} already has a listener")]
    ServiceIdInUse(u64),
    /// The connection table is full.
    #[error("the CM connection table is full")]
    NoResources,
    /// No such listener or SIDR request.
    #[error("unknown CM listener or request {0}")]
    UnknownId(u32),
}

/// One connection's state.
#[derive(Debug)]
struct Conn {
    state: CmState,
    role: Role,
    peer: Gid,
    pkey: u16,
    remote_comm_id: u32,
    remote_qpn: u32,
    local_qpn: u32,
    /// The TID of the establishment exchange (REQ, then REP, RTU, MRA, REJ reuse it).
    tid: u64,
    /// When the timer fires, if it runs.
    timer: Option<Nanos>,
    /// Resends left for the message in `last_sent`.
    retries_left: u8,
    /// Resends allowed per exchange (from the REQ's Max CM Retries).
    max_retries: u8,
    /// The last message sent, resent on the timer and on duplicates.
    last_sent: Option<Box<[u8; MAD_LEN]>>,
    /// The wait for an answer to our messages (peer's response time plus a round trip).
    answer_wait: Nanos,
    /// How long TIMEWAIT lasts.
    timewait: Nanos,
    /// A packet life time, added to MRA service timeouts.
    packet_life: Nanos,
    /// The consumer destroyed it: finish the protocol, report nothing.
    quiet: bool,
}

/// Public facts about a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// Its state.
    pub state: CmState,
    /// Which end we are.
    pub role: Role,
    /// The peer's GID.
    pub peer: Gid,
    /// The peer's communication ID (0 until known).
    pub remote_comm_id: u32,
    /// The peer's QP (0 until known).
    pub remote_qpn: u32,
    /// Our QP.
    pub local_qpn: u32,
}

#[derive(Debug)]
struct SidrOut {
    peer: Gid,
    pkey: u16,
    mad: Box<[u8; MAD_LEN]>,
    timer: Nanos,
    wait: Nanos,
    retries_left: u8,
}

#[derive(Debug)]
struct SidrIn {
    peer: Gid,
    pkey: u16,
    request_id: u32,
    service_id: u64,
    tid: u64,
}

/// The Communication Manager of one port.
#[derive(Debug)]
pub struct Cm {
    config: CmConfig,
    conns: BTreeMap<u32, Conn>,
    /// Passive connections by (peer GID, peer's communication ID), to spot duplicate REQs.
    by_remote: HashMap<(Gid, u32), u32>,
    listeners: BTreeMap<u64, ListenerId>,
    /// Bumped by every listen and stop: lets a driver notice a change cheaply.
    listener_changes: u64,
    next_listener: u32,
    half_open: usize,
    id_counter: u32,
    id_mask: u32,
    tid_high: u64,
    sidr_out: BTreeMap<u32, SidrOut>,
    sidr_in: BTreeMap<u32, SidrIn>,
    sidr_in_by_remote: HashMap<(Gid, u32), u32>,
    tx: VecDeque<CmTransmit>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
}

/// splitmix64: turns the seed into well-mixed bits (no RNG state needed after start).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn pad<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = data.len().min(N);
    out[..n].copy_from_slice(&data[..n]);
    out
}

impl Cm {
    /// A CM with no listeners and no connections.
    pub fn new(config: CmConfig) -> Cm {
        let bits = mix(config.seed);
        Cm {
            id_counter: bits as u32,
            id_mask: (bits >> 32) as u32,
            tid_high: mix(bits) & 0xFFFF_FFFF,
            config,
            conns: BTreeMap::new(),
            by_remote: HashMap::new(),
            listeners: BTreeMap::new(),
            listener_changes: 0,
            next_listener: 1,
            half_open: 0,
            sidr_out: BTreeMap::new(),
            sidr_in: BTreeMap::new(),
            sidr_in_by_remote: HashMap::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    // ----- getters -----

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.config
    }
    /// The counters.
    pub fn counters(&self) -> CmCounters {
        self.counters
    }
    /// A connection's state, `None` once it is gone (IDLE).
    pub fn state(&self, conn: ConnId) -> Option<CmState> {
        self.conns.get(&conn.0).map(|c| c.state)
    }
    /// Facts about a connection.
    pub fn info(&self, conn: ConnId) -> Option<ConnInfo> {
        self.conns.get(&conn.0).map(|c| ConnInfo {
            state: c.state,
            role: c.role,
            peer: c.peer,
            remote_comm_id: c.remote_comm_id,
            remote_qpn: c.remote_qpn,
            local_qpn: c.local_qpn,
        })
    }
    /// Connections in the table (any state).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }
    /// Passive connections between REQ and RTU.
    pub fn half_open_count(&self) -> usize {
        self.half_open
    }

    // ----- output -----

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<CmTransmit> {
        self.tx.pop_front()
    }
    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }
    /// The earliest timer.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let conns = self.conns.values().filter_map(|c| c.timer);
        let sidr = self.sidr_out.values().map(|s| s.timer);
        conns.chain(sidr).min()
    }

    // ----- commands -----

    /// Starts listening on a service ID (rdma_cm: bind + listen).
    pub fn listen(&mut self, service_id: u64) -> Result<ListenerId, CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::ServiceIdInUse(service_id));
        }
        let id = ListenerId(self.next_listener);
        self.next_listener = self.next_listener.wrapping_add(1).max(1);
        self.listeners.insert(service_id, id);
        self.listener_changes += 1;
        Ok(id)
    }

    /// The service IDs listened on.
    pub fn listening_services(&self) -> impl Iterator<Item = u64> + '_ {
        self.listeners.keys().copied()
    }

    /// A number that changes whenever the set of listened service IDs may have changed.
    pub fn listener_changes(&self) -> u64 {
        self.listener_changes
    }

    /// Stops a listener. Connections it already produced are not affected.
    pub fn stop_listening(&mut self, listener: ListenerId) -> Result<(), CmError> {
        let before = self.listeners.len();
        self.listeners.retain(|_, l| *l != listener);
        if self.listeners.len() == before {
            return Err(CmError::UnknownId(listener.0));
        }
        self.listener_changes += 1;
        Ok(())
    }

    /// Sends a REQ (IBA 12.9.5: IDLE -> REQ_SENT) and returns the new connection.
    pub fn connect(&mut self, now: Nanos, p: &ConnectParams) -> Result<ConnId, CmError> {
        if self.conns.len() >= self.config.max_connections {
            return Err(CmError::NoResources);
        }
        let id = self.alloc_comm_id();
        let mut path = p.path;
        if path.local_gid == [0; 16] {
            path.local_gid = self.config.local_gid;
        }
        if path.remote_gid == [0; 16] {
            path.remote_gid = p.remote_gid;
        }
        let req = CmReq {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: self.config.local_ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn & 0xFF_FFFF,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service: p.transport,
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn & 0xFF_FFFF,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: p.pkey,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            primary_path: path,
            alternate_path: Default::default(),
            sap_supported: false,
            private_data: p.private_data,
        };
        let tid = (self.tid_high << 32) | u64::from(id);
        let mad = Box::new(CmMessage::Req(req).to_mad(tid));
        let answer_wait = response_wait_ns(p.remote_cm_response_timeout, p.packet_life_time);
        let conn = Conn {
            state: CmState::ReqSent,
            role: Role::Active,
            peer: p.remote_gid,
            pkey: p.pkey,
            remote_comm_id: 0,
            remote_qpn: 0,
            local_qpn: p.qpn,
            tid,
            timer: Some(now + answer_wait),
            retries_left: p.max_cm_retries,
            max_retries: p.max_cm_retries,
            last_sent: Some(mad.clone()),
            answer_wait,
            timewait: exponent_ns(path.local_ack_timeout).max(exponent_ns(p.packet_life_time)),
            packet_life: exponent_ns(p.packet_life_time),
            quiet: false,
        };
        self.queue(p.remote_gid, p.pkey, mad);
        self.conns.insert(id, conn);
        Ok(ConnId(id))
    }

    /// Answers a REQ with a REP (IBA 12.9.6: REQ_RCVD / MRA_REQ_SENT -> REP_SENT).
    pub fn accept(&mut self, now: Nanos, conn: ConnId, p: &AcceptParams) -> Result<(), CmError> {
        let guid = self.config.local_ca_guid;
        let ack_delay = self.config.target_ack_delay;
        let c = self.conn_in(conn, &[CmState::ReqRcvd, CmState::MraReqSent], "accept")?;
        let rep = CmRep {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_comm_id,
            local_qkey: 0,
            local_qpn: p.qpn & 0xFF_FFFF,
            local_eecn: 0,
            starting_psn: p.starting_psn & 0xFF_FFFF,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: ack_delay,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: guid,
            private_data: p.private_data,
        };
        let mad = Box::new(CmMessage::Rep(rep).to_mad(c.tid));
        c.local_qpn = p.qpn;
        c.state = CmState::RepSent;
        c.timer = Some(now + c.answer_wait);
        c.retries_left = c.max_retries;
        c.last_sent = Some(mad.clone());
        let (peer, pkey) = (c.peer, c.pkey);
        self.queue(peer, pkey, mad);
        Ok(())
    }

    /// Rejects a REQ (passive) or a REP (active) with a REJ (IBA 12.9.5, 12.9.6); the
    /// connection is gone afterwards. rdma_cm's `rdma_reject` uses [`RejectReason::ConsumerReject`].
    pub fn reject(
        &mut self,
        conn: ConnId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let allowed = [
            CmState::ReqRcvd,
            CmState::MraReqSent,
            CmState::RepRcvd,
            CmState::MraRepSent,
        ];
        let c = self.conn_in(conn, &allowed, "reject")?;
        let message = if c.role == Role::Passive {
            RejMessage::Req
        } else {
            RejMessage::Rep
        };
        let rej = CmRej {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_comm_id,
            message,
            ari_length: 0,
            reason,
            ari: [0; REJ_ARI_LEN],
            private_data: pad(private_data),
        };
        let (peer, pkey, tid) = (c.peer, c.pkey, c.tid);
        self.queue(peer, pkey, Box::new(CmMessage::Rej(rej).to_mad(tid)));
        self.remove(conn.0);
        Ok(())
    }

    /// Tells the peer its REQ (passive) or REP (active) was received and the answer will
    /// take up to 4.096 us x 2^`service_timeout` (IBA 12.6.6).
    pub fn send_mra(&mut self, conn: ConnId, service_timeout: u8) -> Result<(), CmError> {
        let c = self.conn_in(conn, &[CmState::ReqRcvd, CmState::RepRcvd], "send_mra")?;
        let (message, next) = if c.state == CmState::ReqRcvd {
            (MraMessage::Req, CmState::MraReqSent)
        } else {
            (MraMessage::Rep, CmState::MraRepSent)
        };
        let mra = CmMra {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_comm_id,
            message,
            service_timeout: service_timeout.min(31),
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        };
        let mad = Box::new(CmMessage::Mra(mra).to_mad(c.tid));
        c.state = next;
        c.last_sent = Some(mad.clone());
        let (peer, pkey) = (c.peer, c.pkey);
        self.queue(peer, pkey, mad);
        Ok(())
    }

    /// Sends the RTU once our QP is in RTS (IBA 12.9.5: REP_RCVD -> ESTABLISHED). rdma_cm
    /// reports ESTABLISHED to the active consumer at this point.
    pub fn ready_to_use(&mut self, conn: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conn_in(
            conn,
            &[CmState::RepRcvd, CmState::MraRepSent],
            "ready_to_use",
        )?;
        let rtu = CmRtu {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_comm_id,
            private_data: pad(private_data),
        };
        let mad = Box::new(CmMessage::Rtu(rtu).to_mad(c.tid));
        c.state = CmState::Established;
        c.timer = None;
        c.last_sent = Some(mad.clone());
        let (peer, pkey) = (c.peer, c.pkey);
        self.queue(peer, pkey, mad);
        Ok(())
    }

    /// The passive QP received traffic before the RTU (the verbs "communication
    /// established" event, IBA 12.9.6): treat the connection as established.
    pub fn establish(&mut self, conn: ConnId) -> Result<(), CmError> {
        let half_open = &mut self.half_open;
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn.0))?;
        if !matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            return Err(CmError::WrongState {
                conn: conn.0,
                state: c.state,
                command: "establish",
            });
        }
        *half_open -= 1;
        c.state = CmState::Established;
        c.timer = None;
        let quiet = c.quiet;
        self.emit_unless(
            quiet,
            CmEvent::Established {
                conn,
                private_data: Box::new([0; RTU_PRIVATE_DATA_LEN]),
            },
        );
        Ok(())
    }

    /// Sends a DREQ (IBA 12.9.8: ESTABLISHED -> DREQ_SENT). The `Disconnected` event comes
    /// with the DREP or when the retries run out.
    pub fn disconnect(
        &mut self,
        now: Nanos,
        conn: ConnId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn_in(conn, &[CmState::Established], "disconnect")?;
        let dreq = CmDreq {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_comm_id,
            remote_qpn: c.remote_qpn,
            private_data: pad(private_data),
        };
        // A DREQ starts a new transaction (kernel cm_form_tid per message exchange).
        c.tid = c.tid.wrapping_add(1 << 32);
        let mad = Box::new(CmMessage::Dreq(dreq).to_mad(c.tid));
        c.state = CmState::DreqSent;
        c.timer = Some(now + c.answer_wait);
        c.retries_left = c.max_retries;
        c.last_sent = Some(mad.clone());
        let (peer, pkey) = (c.peer, c.pkey);
        self.queue(peer, pkey, mad);
        Ok(())
    }

    /// The consumer is done with a connection, whatever its state (rdma_destroy_id): a
    /// pending REQ is rejected (consumer reject), an outstanding REQ is cancelled with a REJ
    /// (timeout, as ib_cm does), an established connection is disconnected; the CM finishes
    /// the protocol (DREQ retries, TIMEWAIT) without reporting further events.
    pub fn destroy(&mut self, now: Nanos, conn: ConnId) -> Result<(), CmError> {
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn.0))?;
        c.quiet = true;
        match c.state {
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepRcvd | CmState::MraRepSent => {
                self.reject(conn, RejectReason::ConsumerReject, &[])
            }
            CmState::ReqSent | CmState::MraReqRcvd | CmState::RepSent | CmState::MraRepRcvd => {
                let message = if c.role == Role::Active {
                    RejMessage::Req
                } else {
                    RejMessage::Rep
                };
                let rej = CmRej {
                    local_comm_id: conn.0,
                    remote_comm_id: c.remote_comm_id,
                    message,
                    ari_length: 0,
                    reason: RejectReason::Timeout,
                    ari: [0; REJ_ARI_LEN],
                    private_data: [0; REJ_PRIVATE_DATA_LEN],
                };
                let (peer, pkey, tid) = (c.peer, c.pkey, c.tid);
                self.queue(peer, pkey, Box::new(CmMessage::Rej(rej).to_mad(tid)));
                self.remove(conn.0);
                Ok(())
            }
            CmState::Established => self.disconnect(now, conn, &[]),
            CmState::DreqSent | CmState::TimeWait => Ok(()),
        }
    }

    /// Asks which UD QP serves a service ID (IBA 12.11.1).
    pub fn sidr_request(&mut self, now: Nanos, p: &SidrParams) -> SidrId {
        let mut id = self.alloc_comm_id();
        while self.sidr_out.contains_key(&id) {
            id = self.alloc_comm_id();
        }
        let req = CmSidrReq {
            request_id: id,
            pkey: p.pkey,
            service_id: p.service_id,
            private_data: p.private_data,
        };
        let tid = (self.tid_high << 32) | u64::from(id);
        let mad = Box::new(CmMessage::SidrReq(req).to_mad(tid));
        let wait = response_wait_ns(p.timeout, 0);
        self.queue(p.remote_gid, p.pkey, mad.clone());
        self.sidr_out.insert(
            id,
            SidrOut {
                peer: p.remote_gid,
                pkey: p.pkey,
                mad,
                timer: now + wait,
                wait,
                retries_left: p.max_retries,
            },
        );
        SidrId(id)
    }

    /// Answers a SIDR request (IBA 12.11.2).
    pub fn sidr_reply(
        &mut self,
        id: SidrId,
        status: SidrStatus,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let s = self.sidr_in.remove(&id.0).ok_or(CmError::UnknownId(id.0))?;
        self.sidr_in_by_remote.remove(&(s.peer, s.request_id));
        self.half_open -= 1;
        let rep = CmSidrRep {
            request_id: s.request_id,
            status,
            additional_info_length: 0,
            qpn: qpn & 0xFF_FFFF,
            service_id: s.service_id,
            qkey,
            additional_info: [0; SIDR_REP_INFO_LEN],
            private_data: pad(private_data),
        };
        self.queue(
            s.peer,
            s.pkey,
            Box::new(CmMessage::SidrRep(rep).to_mad(s.tid)),
        );
        Ok(())
    }

    // ----- input -----

    /// Fires every timer due at `now`: resends, gives up, ends TIMEWAIT.
    pub fn handle_timeout(&mut self, now: Nanos) {
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.timer.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.conn_timer(now, id);
        }
        let due: Vec<u32> = self
            .sidr_out
            .iter()
            .filter(|(_, s)| s.timer <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(s) = self.sidr_out.get_mut(&id) else {
                continue;
            };
            if s.retries_left == 0 {
                self.sidr_out.remove(&id);
                self.counters.timeouts += 1;
                self.emit(CmEvent::SidrTimeout { id: SidrId(id) });
                continue;
            }
            s.retries_left -= 1;
            s.timer = now + s.wait;
            let (peer, pkey, mad) = (s.peer, s.pkey, s.mad.clone());
            self.counters.retransmits += 1;
            self.queue(peer, pkey, mad);
        }
    }

    fn conn_timer(&mut self, now: Nanos, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.timer = None;
        match c.state {
            CmState::TimeWait => {
                let quiet = c.quiet;
                self.remove(id);
                self.emit_unless(quiet, CmEvent::TimewaitExit { conn: ConnId(id) });
            }
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::DreqSent => {
                if c.retries_left == 0 {
                    self.counters.timeouts += 1;
                    self.give_up(now, id);
                    return;
                }
                c.retries_left -= 1;
                c.state = match c.state {
                    CmState::MraReqRcvd => CmState::ReqSent,
                    CmState::MraRepRcvd => CmState::RepSent,
                    s => s,
                };
                c.timer = Some(now + c.answer_wait);
                let (peer, pkey) = (c.peer, c.pkey);
                if let Some(mad) = c.last_sent.clone() {
                    self.counters.retransmits += 1;
                    self.queue(peer, pkey, mad);
                }
            }
            _ => {}
        }
    }

    /// The last retry ran out (IBA 12.9.5-12.9.8 timeouts).
    fn give_up(&mut self, now: Nanos, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let quiet = c.quiet;
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.remove(id);
                self.emit_unless(
                    quiet,
                    CmEvent::Unreachable {
                        conn: ConnId(id),
                        phase: TimeoutPhase::Request,
                    },
                );
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                // The passive side tells the active side it gave up (IBA 12.9.6).
                let rej = CmRej {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    message: RejMessage::Rep,
                    ari_length: 0,
                    reason: RejectReason::Timeout,
                    ari: [0; REJ_ARI_LEN],
                    private_data: [0; REJ_PRIVATE_DATA_LEN],
                };
                let (peer, pkey, tid) = (c.peer, c.pkey, c.tid);
                self.queue(peer, pkey, Box::new(CmMessage::Rej(rej).to_mad(tid)));
                self.remove(id);
                self.emit_unless(
                    quiet,
                    CmEvent::Unreachable {
                        conn: ConnId(id),
                        phase: TimeoutPhase::Reply,
                    },
                );
            }
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.emit_unless(
                    quiet,
                    CmEvent::Disconnected {
                        conn: ConnId(id),
                        by_peer: false,
                        private_data: Box::new([0; DREQ_PRIVATE_DATA_LEN]),
                    },
                );
            }
            _ => {}
        }
    }

    /// A MAD arrived at the GSI from `peer` with P_Key `pkey`. Anything that is not a
    /// well-formed CM message for a state that takes it is dropped and counted.
    pub fn handle_mad(&mut self, now: Nanos, peer: Gid, pkey: u16, mad: &[u8]) {
        self.counters.rx_mads += 1;
        let Ok((header, message)) = CmMessage::parse(mad) else {
            self.counters.malformed_drops += 1;
            return;
        };
        let tid = header.transaction_id;
        match message {
            CmMessage::Req(req) => self.on_req(peer, pkey, tid, req),
            CmMessage::Mra(mra) => self.on_mra(now, peer, mra),
            CmMessage::Rej(rej) => self.on_rej(peer, rej),
            CmMessage::Rep(rep) => self.on_rep(peer, pkey, tid, rep),
            CmMessage::Rtu(rtu) => self.on_rtu(peer, rtu),
            CmMessage::Dreq(dreq) => self.on_dreq(now, peer, pkey, tid, dreq),
            CmMessage::Drep(drep) => self.on_drep(now, peer, drep),
            CmMessage::SidrReq(req) => self.on_sidr_req(peer, pkey, tid, req),
            CmMessage::SidrRep(rep) => self.on_sidr_rep(peer, rep),
        }
    }

    /// A REQ (IBA 12.9.6, passive side).
    fn on_req(&mut self, peer: Gid, pkey: u16, tid: u64, req: CmReq) {
        if let Some(&id) = self.by_remote.get(&(peer, req.local_comm_id)) {
            self.counters.duplicate_reqs += 1;
            let Some(c) = self.conns.get(&id) else {
                return;
            };
            // IBA 12.9.6: a duplicate REQ while we answer gets our last answer again (the
            // MRA, or the REP); while the consumer decides it is dropped; a REQ for a
            // connection in TIMEWAIT is stale.
            match c.state {
                CmState::MraReqSent | CmState::RepSent | CmState::MraRepRcvd => {
                    if let Some(mad) = c.last_sent.clone() {
                        let (p, k) = (c.peer, c.pkey);
                        self.counters.retransmits += 1;
                        self.queue(p, k, mad);
                    }
                }
                CmState::TimeWait => {
                    self.send_rej_to(
                        peer,
                        pkey,
                        tid,
                        req.local_comm_id,
                        0,
                        RejectReason::StaleConnection,
                    );
                }
                _ => {}
            }
            return;
        }
        if req.transport_service != TransportService::Rc
            && req.transport_service != TransportService::Uc
        {
            self.send_rej_to(
                peer,
                pkey,
                tid,
                req.local_comm_id,
                0,
                RejectReason::InvalidTransportType,
            );
            return;
        }
        let Some(&listener) = self.listeners.get(&req.service_id) else {
            self.counters.rejected_no_listener += 1;
            self.send_rej_to(
                peer,
                pkey,
                tid,
                req.local_comm_id,
                0,
                RejectReason::InvalidServiceId,
            );
            return;
        };
        if self.half_open >= self.config.max_half_open
            || self.conns.len() >= self.config.max_connections
        {
            self.counters.rejected_no_resources += 1;
            self.send_rej_to(
                peer,
                pkey,
                tid,
                req.local_comm_id,
                0,
                RejectReason::NoResources,
            );
            return;
        }
        let id = self.alloc_comm_id();
        // The active side's packet life time is not in the REQ; its local ACK timeout is
        // the packet life time plus one (kernel cm_ack_timeout), which is close enough.
        let plt = req.primary_path.local_ack_timeout.saturating_sub(1);
        let conn = Conn {
            state: CmState::ReqRcvd,
            role: Role::Passive,
            peer,
            pkey,
            remote_comm_id: req.local_comm_id,
            remote_qpn: req.local_qpn,
            local_qpn: 0,
            tid,
            timer: None,
            retries_left: req.max_cm_retries,
            max_retries: req.max_cm_retries,
            last_sent: None,
            answer_wait: response_wait_ns(req.local_cm_response_timeout, plt),
            timewait: exponent_ns(req.primary_path.local_ack_timeout).max(exponent_ns(plt)),
            packet_life: exponent_ns(plt),
            quiet: false,
        };
        self.conns.insert(id, conn);
        self.by_remote.insert((peer, req.local_comm_id), id);
        self.half_open += 1;
        self.emit(CmEvent::ConnectRequest {
            conn: ConnId(id),
            listener,
            peer,
            req: Box::new(req),
        });
    }

    /// The connection a reply names, if it is ours and from that peer.
    fn answered(&mut self, peer: Gid, remote_comm_id: u32, local_comm_id: u32) -> Option<u32> {
        match self.conns.get(&remote_comm_id) {
            Some(c)
                if c.peer == peer
                    && (c.remote_comm_id == 0 || c.remote_comm_id == local_comm_id) =>
            {
                Some(remote_comm_id)
            }
            _ => {
                self.counters.stale_drops += 1;
                None
            }
        }
    }

    fn on_mra(&mut self, now: Nanos, peer: Gid, mra: CmMra) {
        let Some(id) = self.answered(peer, mra.remote_comm_id, mra.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("answered checked");
        let next = match (c.state, mra.message) {
            (CmState::ReqSent, MraMessage::Req) => CmState::MraReqRcvd,
            (CmState::RepSent, MraMessage::Rep) => CmState::MraRepRcvd,
            _ => {
                self.counters.stale_drops += 1;
                return;
            }
        };
        // IBA 12.6.6: wait the announced service time plus a packet life time; the
        // resend that follows counts against the retries like any other.
        c.state = next;
        c.remote_comm_id = mra.local_comm_id;
        c.timer = Some(now + exponent_ns(mra.service_timeout) + c.packet_life);
    }

    fn on_rej(&mut self, peer: Gid, rej: CmRej) {
        let Some(id) = self.answered(peer, rej.remote_comm_id, rej.local_comm_id) else {
            return;
        };
        let c = self.conns.get(&id).expect("answered checked");
        let takes = match c.role {
            Role::Active => matches!(
                c.state,
                CmState::ReqSent | CmState::MraReqRcvd | CmState::RepRcvd | CmState::MraRepSent
            ),
            Role::Passive => matches!(c.state, CmState::RepSent | CmState::MraRepRcvd),
        };
        if !takes {
            self.counters.stale_drops += 1;
            return;
        }
        let quiet = c.quiet;
        self.remove(id);
        self.emit_unless(
            quiet,
            CmEvent::Rejected {
                conn: ConnId(id),
                reason: rej.reason,
                ari: Box::new(rej.ari),
                private_data: Box::new(rej.private_data),
            },
        );
    }

    fn on_rep(&mut self, peer: Gid, pkey: u16, tid: u64, rep: CmRep) {
        let Some(c) = self
            .conns
            .get_mut(&rep.remote_comm_id)
            .filter(|c| c.peer == peer)
        else {
            // IBA 12.9.5 / kernel cm_rep_handler: a REP for no connection of ours is
            // rejected as an invalid communication ID.
            self.counters.stale_drops += 1;
            self.send_rej_to(
                peer,
                pkey,
                tid,
                rep.local_comm_id,
                rep.remote_comm_id,
                RejectReason::InvalidCommId,
            );
            return;
        };
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd if c.role == Role::Active => {
                c.state = CmState::RepRcvd;
                c.timer = None;
                c.remote_comm_id = rep.local_comm_id;
                c.remote_qpn = rep.local_qpn;
                let quiet = c.quiet;
                self.emit_unless(
                    quiet,
                    CmEvent::ConnectReply {
                        conn: ConnId(rep.remote_comm_id),
                        rep: Box::new(rep),
                    },
                );
            }
            // A duplicate REP: our RTU (or MRA) was lost; send it again (IBA 12.9.5).
            CmState::Established | CmState::MraRepSent
                if c.role == Role::Active && c.remote_comm_id == rep.local_comm_id =>
            {
                if let Some(mad) = c.last_sent.clone() {
                    let (p, k) = (c.peer, c.pkey);
                    self.counters.retransmits += 1;
                    self.queue(p, k, mad);
                }
            }
            _ => self.counters.stale_drops += 1,
        }
    }

    fn on_rtu(&mut self, peer: Gid, rtu: CmRtu) {
        let Some(id) = self.answered(peer, rtu.remote_comm_id, rtu.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("answered checked");
        if !matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            // Duplicate RTUs after ESTABLISHED are harmless.
            self.counters.stale_drops += 1;
            return;
        }
        c.state = CmState::Established;
        c.timer = None;
        self.half_open -= 1;
        let quiet = c.quiet;
        self.emit_unless(
            quiet,
            CmEvent::Established {
                conn: ConnId(id),
                private_data: Box::new(rtu.private_data),
            },
        );
    }

    fn on_dreq(&mut self, now: Nanos, peer: Gid, pkey: u16, tid: u64, dreq: CmDreq) {
        let drep_for = |local: u32, remote: u32| CmDrep {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; DREP_PRIVATE_DATA_LEN],
        };
        let known = self
            .conns
            .get(&dreq.remote_comm_id)
            .filter(|c| c.peer == peer && c.remote_comm_id == dreq.local_comm_id);
        let Some(c) = known else {
            // IBA 12.9.8.3 / kernel cm_dreq_handler: a DREQ for a connection we do not know
            // still gets a DREP, so the peer stops resending.
            self.counters.stale_drops += 1;
            let drep = drep_for(dreq.remote_comm_id, dreq.local_comm_id);
            self.queue(peer, pkey, Box::new(CmMessage::Drep(drep).to_mad(tid)));
            return;
        };
        let id = dreq.remote_comm_id;
        let drep = Box::new(CmMessage::Drep(drep_for(id, dreq.local_comm_id)).to_mad(tid));
        match c.state {
            // The passive side may see the DREQ before the RTU (the RTU was lost).
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd | CmState::DreqSent => {
                let quiet = c.quiet;
                let was_dreq_sent = c.state == CmState::DreqSent;
                if c.state.is_half_open(c.role) {
                    self.half_open -= 1;
                }
                self.queue(peer, pkey, drep);
                self.enter_timewait(now, id);
                self.emit_unless(
                    quiet,
                    CmEvent::Disconnected {
                        conn: ConnId(id),
                        by_peer: !was_dreq_sent,
                        private_data: Box::new(dreq.private_data),
                    },
                );
            }
            // Our DREP was lost: send it again (IBA 12.9.8.3).
            CmState::TimeWait => self.queue(peer, pkey, drep),
            _ => self.counters.stale_drops += 1,
        }
    }

    fn on_drep(&mut self, now: Nanos, peer: Gid, drep: CmDrep) {
        let Some(id) = self.answered(peer, drep.remote_comm_id, drep.local_comm_id) else {
            return;
        };
        let c = self.conns.get(&id).expect("answered checked");
        if c.state != CmState::DreqSent {
            self.counters.stale_drops += 1;
            return;
        }
        let quiet = c.quiet;
        self.enter_timewait(now, id);
        self.emit_unless(
            quiet,
            CmEvent::Disconnected {
                conn: ConnId(id),
                by_peer: false,
                private_data: Box::new([0; DREQ_PRIVATE_DATA_LEN]),
            },
        );
    }

    fn on_sidr_req(&mut self, peer: Gid, pkey: u16, tid: u64, req: CmSidrReq) {
        if self.sidr_in_by_remote.contains_key(&(peer, req.request_id)) {
            self.counters.duplicate_reqs += 1;
            return;
        }
        let status = match self.listeners.get(&req.service_id) {
            None => Some(SidrStatus::ServiceIdNotSupported),
            Some(_) if self.half_open >= self.config.max_half_open => Some(SidrStatus::NoQp),
            Some(_) => None,
        };
        if let Some(status) = status {
            if status == SidrStatus::ServiceIdNotSupported {
                self.counters.rejected_no_listener += 1;
            } else {
                self.counters.rejected_no_resources += 1;
            }
            let rep = CmSidrRep {
                request_id: req.request_id,
                status,
                additional_info_length: 0,
                qpn: 0,
                service_id: req.service_id,
                qkey: 0,
                additional_info: [0; SIDR_REP_INFO_LEN],
                private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
            };
            self.queue(peer, pkey, Box::new(CmMessage::SidrRep(rep).to_mad(tid)));
            return;
        }
        let listener = self.listeners[&req.service_id];
        let mut id = self.alloc_comm_id();
        while self.sidr_in.contains_key(&id) {
            id = self.alloc_comm_id();
        }
        self.half_open += 1;
        self.sidr_in.insert(
            id,
            SidrIn {
                peer,
                pkey,
                request_id: req.request_id,
                service_id: req.service_id,
                tid,
            },
        );
        self.sidr_in_by_remote.insert((peer, req.request_id), id);
        self.emit(CmEvent::SidrRequest {
            id: SidrId(id),
            listener,
            peer,
            req: Box::new(req),
        });
    }

    fn on_sidr_rep(&mut self, peer: Gid, rep: CmSidrRep) {
        match self.sidr_out.get(&rep.request_id) {
            Some(s) if s.peer == peer => {
                self.sidr_out.remove(&rep.request_id);
                self.emit(CmEvent::SidrReply {
                    id: SidrId(rep.request_id),
                    rep: Box::new(rep),
                });
            }
            _ => self.counters.stale_drops += 1,
        }
    }

    // ----- helpers -----

    fn conn_in(
        &mut self,
        conn: ConnId,
        allowed: &[CmState],
        command: &'static str,
    ) -> Result<&mut Conn, CmError> {
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn.0))?;
        if !allowed.contains(&c.state) {
            return Err(CmError::WrongState {
                conn: conn.0,
                state: c.state,
                command,
            });
        }
        Ok(c)
    }

    /// A communication ID not in use: a counter scrambled by a seeded bijection (so IDs are
    /// not guessable from one another, as ib_cm's are not), never 0.
    fn alloc_comm_id(&mut self) -> u32 {
        loop {
            self.id_counter = self.id_counter.wrapping_add(1);
            let mut id = self.id_counter.wrapping_mul(0x9E37_79B1) ^ self.id_mask;
            if let Some((bits, value)) = self.config.comm_id_prefix {
                let bits = bits.clamp(1, 16);
                let shift = 32 - bits;
                id = (id & ((1 << shift) - 1)) | ((value & ((1 << bits) - 1)) << shift);
            }
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn enter_timewait(&mut self, now: Nanos, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = CmState::TimeWait;
            c.timer = Some(now + c.timewait);
            c.last_sent = None;
        }
    }

    fn remove(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            if c.state.is_half_open(c.role) {
                self.half_open -= 1;
            }
            if c.role == Role::Passive {
                self.by_remote.remove(&(c.peer, c.remote_comm_id));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rej_to(
        &mut self,
        peer: Gid,
        pkey: u16,
        tid: u64,
        remote_comm_id: u32,
        local_comm_id: u32,
        reason: RejectReason,
    ) {
        let rej = CmRej {
            local_comm_id,
            remote_comm_id,
            message: RejMessage::Req,
            ari_length: 0,
            reason,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        };
        self.queue(peer, pkey, Box::new(CmMessage::Rej(rej).to_mad(tid)));
    }

    fn queue(&mut self, dest_gid: Gid, pkey: u16, mad: Box<[u8; MAD_LEN]>) {
        if self.tx.len() >= self.config.max_pending_transmits {
            self.counters.tx_queue_drops += 1;
            return;
        }
        self.counters.tx_mads += 1;
        self.tx.push_back(CmTransmit {
            dest_gid,
            pkey,
            mad,
        });
    }

    fn emit(&mut self, e: CmEvent) {
        if self.events.len() >= self.config.max_pending_events {
            self.counters.event_queue_drops += 1;
            return;
        }
        self.events.push_back(e);
    }

    fn emit_unless(&mut self, quiet: bool, e: CmEvent) {
        if !quiet {
            self.emit(e);
        }
    }
}
