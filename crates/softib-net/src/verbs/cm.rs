//! Connection management on the verbs API: RC connections set up by the IB Communication
//! Manager over QP1, as rdma_cm does between kernels, instead of an out-of-band TCP
//! exchange. A softib peer and a Linux rdma_cm peer (rping, `ib_write_bw -R`) speak the same
//! REQ/REP/RTU/DREQ/DREP (see docs/design/cm.md).
//!
//! ```no_run
//! use std::time::Duration;
//! use softib_net::driver::NetConfig;
//! use softib_net::verbs::{CmConnection, CmListener, Hca};
//! use softib_transport::QpType;
//!
//! // Server
//! let hca = Hca::open(NetConfig::new("127.0.0.1:4791".parse().unwrap()))?;
//! let (pd, cq) = (hca.alloc_pd(), hca.create_cq().build()?);
//! let listener = CmListener::bind(&hca, 18515)?;
//! let request = listener.get_request(Duration::from_secs(10))?;
//! let conn = request.accept(pd.create_qp(&cq, &cq, QpType::Rc).build()?, b"welcome",
//!                           Duration::from_secs(10))?;
//! // Client (another device): CmConnection::connect(qp, "127.0.0.1:18515".parse()?, b"hi", timeout)
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Addressing follows RoCEv2 and rdma_cm: a peer is an IP address (its GID) and an rdma_cm
//! port in the TCP port space (service ID `0x0106 << 16 | port`); its device listens on UDP
//! 4791 unless [`Context::set_peer_port`] says otherwise.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use softib_cm::rdma_cm::{self, PortSpace, PrivateDataTooLong};
use softib_cm::{AcceptParams, CmError, CmEvent, ConnId, ListenerId, TimeoutPhase};
use softib_transport::{Mtu, VerbsError};
use softib_wire::cm::{CmReq, CmaIpHeader, RejectReason, CMA_IP_HEADER_LEN};

use super::{Hca, PreparedQueuePair, QueuePair};
use crate::context::Context;
use crate::oob::endpoint::Endpoint;

/// Why a CM operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CmApiError {
    /// The peer rejected the connection (rdma_cm: RDMA_CM_EVENT_REJECTED). Reason 8
    /// (invalid service ID) means nobody listens on that port.
    #[error("connection rejected by the peer: {reason:?} (IBA reason {code})", code = reason.code())]
    Rejected {
        /// Why.
        reason: RejectReason,
        /// The peer's private data (148 bytes).
        private_data: Vec<u8>,
    },
    /// The peer did not answer within the CM's retries (rdma_cm: RDMA_CM_EVENT_UNREACHABLE).
    #[error("peer unreachable: no answer to our {0:?} within the CM retries")]
    Unreachable(TimeoutPhase),
    /// Nothing happened within the caller's timeout.
    #[error("timed out waiting for the CM")]
    TimedOut,
    /// The peer disconnected before the connection was established.
    #[error("the peer disconnected during connection set-up")]
    Disconnected,
    /// The CM refused the command.
    #[error(transparent)]
    Cm(#[from] CmError),
    /// A verb on the QP failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// Private data longer than the message has room for.
    #[error(transparent)]
    PrivateDataTooLong(#[from] PrivateDataTooLong),
    /// The peer's address family differs from the device's.
    #[error("address {0} is not of the device's address family")]
    AddressFamily(IpAddr),
    /// Only RC QPs connect through the CM here (UD would use SIDR).
    #[error("only RC queue pairs connect through the CM")]
    UnsupportedQpType,
}

/// The IBA path MTU code (1 = 256 ... 5 = 4096).
fn mtu_code(mtu: Mtu) -> u8 {
    (mtu.bytes().trailing_zeros() - 7) as u8
}

fn mtu_of_code(code: u8) -> Option<Mtu> {
    (1..=5)
        .contains(&code)
        .then(|| Mtu::from_bytes(128 << code))
        .flatten()
}

fn peer_endpoint(ctx: &Context, peer: IpAddr, qpn: u32, psn: u32, mtu: Mtu) -> Endpoint {
    let mut e = ctx.endpoint(qpn, psn, &[]);
    e.gid = std::net::Ipv6Addr::from(rdma_cm::gid_of(peer));
    e.udp = None;
    e.mtu = Some(mtu.bytes());
    e
}

/// Waits for the next event of `conn`.
fn wait_conn(ctx: &Context, conn: ConnId, timeout: Duration) -> Result<CmEvent, CmApiError> {
    ctx.wait_for(timeout, |d| d.gsi_mut().take_conn_event(conn))
        .ok_or(CmApiError::TimedOut)
}

/// Drops a connection the caller gave up on: the CM finishes the protocol quietly.
fn abandon(ctx: &Context, conn: ConnId) {
    ctx.with_driver(|d| {
        let now = d.now();
        let g = d.gsi_mut();
        let _ = g.cm_mut().destroy(now, conn);
        g.forget_conn(conn);
    });
}

/// A listener on an rdma_cm port of one device (rdma_bind_addr + rdma_listen).
#[derive(Debug)]
pub struct CmListener {
    hca: Hca,
    listener: ListenerId,
    addr: SocketAddr,
}

impl CmListener {
    /// Listens on `port` of the device's address (TCP port space, as `RDMA_PS_TCP`).
    /// Fails if the port already has a listener on this device.
    pub fn bind(hca: &Hca, port: u16) -> Result<CmListener, CmApiError> {
        let service_id = rdma_cm::service_id(PortSpace::Tcp, port);
        let listener = hca.context().cm_listen(service_id)?;
        Ok(CmListener {
            hca: hca.clone(),
            listener,
            addr: SocketAddr::new(hca.context().local_addr().ip(), port),
        })
    }

    /// The address peers connect to (device IP, rdma_cm port).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits up to `timeout` for a connection request (rdma_cm: CONNECT_REQUEST).
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest, CmApiError> {
        let listener = self.listener;
        let ev = self
            .hca
            .context()
            .wait_for(timeout, |d| d.gsi_mut().take_listener_event(listener))
            .ok_or(CmApiError::TimedOut)?;
        match ev {
            CmEvent::ConnectRequest { conn, req, .. } => Ok(ConnectRequest {
                hca: self.hca.clone(),
                conn: Some(conn),
                peer_addr: CmaIpHeader::parse(&req.private_data)
                    .ok()
                    .map(|h| SocketAddr::new(h.src_addr, h.src_port)),
                req,
            }),
            // A SIDR request on a TCP-space listener: nothing here serves UD.
            CmEvent::SidrRequest { id, .. } => {
                self.hca.context().with_driver(|d| {
                    let _ = d.gsi_mut().cm_mut().sidr_reply(
                        id,
                        softib_wire::cm::SidrStatus::Rejected,
                        0,
                        0,
                        &[],
                    );
                });
                Err(CmApiError::UnsupportedQpType)
            }
            _ => Err(CmApiError::TimedOut),
        }
    }

    /// Waits for a request and accepts it on `qp` (see [`ConnectRequest::accept`]).
    pub fn accept(
        &self,
        qp: PreparedQueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<CmConnection, CmApiError> {
        self.get_request(timeout)?.accept(qp, private_data, timeout)
    }
}

impl Drop for CmListener {
    fn drop(&mut self) {
        let listener = self.listener;
        self.hca.context().with_driver(|d| {
            let pending = d.gsi_mut().close_listener(listener);
            for e in pending {
                if let CmEvent::ConnectRequest { conn, .. } = e {
                    let _ = d
                        .gsi_mut()
                        .cm_mut()
                        .reject(conn, RejectReason::ConsumerReject, &[]);
                }
            }
        });
    }
}

/// A connection request waiting for an answer. Dropping it rejects it (consumer reject,
/// IBA reason 28), as `rdma_destroy_id` on a request does.
#[derive(Debug)]
pub struct ConnectRequest {
    hca: Hca,
    conn: Option<ConnId>,
    req: Box<CmReq>,
    peer_addr: Option<SocketAddr>,
}

impl ConnectRequest {
    /// The peer's address and rdma_cm port, from rdma_cm's IP header in the REQ (`None` if
    /// the REQ did not come from rdma_cm).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    /// The consumer's private data: the REQ's bytes after rdma_cm's 36-byte IP header (56
    /// bytes, zero-padded as the wire carries them).
    pub fn private_data(&self) -> &[u8] {
        &self.req.private_data[CMA_IP_HEADER_LEN..]
    }

    /// The REQ as received.
    pub fn req(&self) -> &CmReq {
        &self.req
    }

    /// Connects `qp` to the requester (INIT, RTR, RTS with the REQ's QPN, PSN, MTU and
    /// READ/atomic limits), sends the REP with `private_data` (at most 196 bytes) and waits
    /// up to `timeout` for the RTU (rdma_cm: ESTABLISHED).
    pub fn accept(
        self,
        qp: PreparedQueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<CmConnection, CmApiError> {
        self.accept_with(qp, private_data, timeout, |_| Ok(()))
    }

    /// [`ConnectRequest::accept`], running `ready` on the QP once it is in RTS and before
    /// the REP goes out: the place to post receives, so the client's first SEND finds one
    /// (what an rdma_cm server does between rdma_create_qp and rdma_accept).
    pub fn accept_with(
        mut self,
        mut qp: PreparedQueuePair,
        private_data: &[u8],
        timeout: Duration,
        ready: impl FnOnce(&QueuePair) -> Result<(), super::PostError>,
    ) -> Result<CmConnection, CmApiError> {
        if qp.queue_pair().qp_type() != softib_transport::QpType::Rc {
            return Err(CmApiError::UnsupportedQpType);
        }
        if private_data.len() > softib_wire::cm::REP_PRIVATE_DATA_LEN {
            return Err(PrivateDataTooLong(private_data.len()).into());
        }
        let conn = self.conn.take().expect("a request is answered once");
        let ctx = self.hca.context();
        let req = &self.req;
        let peer = IpAddr::from(std::net::Ipv6Addr::from(req.primary_path.local_gid));
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        // IBA 12.7.29/12.7.30 and kernel cm_init_qp_*_attr: our responder takes at most
        // what the requester will issue, and we issue at most what it accepts.
        let o = qp.options_mut();
        o.max_dest_rd_atomic = o.max_dest_rd_atomic.min(req.initiator_depth);
        o.max_rd_atomic = o.max_rd_atomic.min(req.responder_resources);
        o.retry_cnt = req.retry_count;
        o.rnr_retry = req.rnr_retry_count;
        if req.primary_path.local_ack_timeout != 0 {
            o.timeout = req.primary_path.local_ack_timeout;
        }
        let mtu = mtu_of_code(req.path_mtu)
            .unwrap_or(Mtu::M1024)
            .min(o.mtu)
            .min(ctx.mtu());
        o.mtu = mtu;
        let (responder_resources, initiator_depth, rnr) =
            (o.max_dest_rd_atomic, o.max_rd_atomic, o.rnr_retry);
        // IBA 12.7 / kernel cm.c: the REQ's Starting PSN is what we send with; we expect
        // our own (random) PSN, announced in the REP.
        let expected = qp.psn();
        qp.set_psn(req.starting_psn);
        let remote = peer_endpoint(ctx, peer, req.local_qpn, expected, mtu);
        let psn = expected;
        let qpn = qp.qpn();
        let queue_pair = match qp.handshake(&remote) {
            Ok(q) => q,
            Err(e) => {
                // rdma_cm rejects when it cannot ready the QP.
                ctx.with_driver(|d| {
                    let _ = d.gsi_mut().cm_mut().reject(conn, RejectReason::NoQp, &[]);
                    d.gsi_mut().forget_conn(conn);
                });
                return Err(e.into());
            }
        };
        if let Err(e) = ready(&queue_pair) {
            ctx.with_driver(|d| {
                let _ = d
                    .gsi_mut()
                    .cm_mut()
                    .reject(conn, RejectReason::NoResources, &[]);
                d.gsi_mut().forget_conn(conn);
            });
            return Err(e.source.into());
        }
        let params = AcceptParams {
            qpn,
            starting_psn: psn,
            responder_resources,
            initiator_depth,
            rnr_retry_count: rnr,
            srq: queue_pair.srq().is_some(),
            private_data: {
                let mut pd = [0u8; softib_wire::cm::REP_PRIVATE_DATA_LEN];
                pd[..private_data.len()].copy_from_slice(private_data);
                pd
            },
        };
        ctx.with_driver(|d| {
            let now = d.now();
            d.gsi_mut().cm_mut().accept(now, conn, &params)
        })?;
        let connection = CmConnection {
            qp: queue_pair,
            conn,
            peer_private_data: self.req.private_data[CMA_IP_HEADER_LEN..].to_vec(),
            peer_addr: self.peer_addr,
            state: ConnState::Connected,
        };
        match wait_conn(ctx, conn, timeout) {
            Ok(CmEvent::Established { .. }) => Ok(connection),
            Ok(CmEvent::Rejected {
                reason,
                private_data,
                ..
            }) => Err(CmApiError::Rejected {
                reason,
                private_data: private_data.to_vec(),
            }),
            Ok(CmEvent::Unreachable { phase, .. }) => Err(CmApiError::Unreachable(phase)),
            Ok(CmEvent::Disconnected { .. }) => Err(CmApiError::Disconnected),
            Ok(_) | Err(_) => Err(CmApiError::TimedOut),
        }
    }

    /// Rejects the request (consumer reject) with up to 148 bytes of private data.
    pub fn reject(mut self, private_data: &[u8]) -> Result<(), CmApiError> {
        if private_data.len() > softib_wire::cm::REJ_PRIVATE_DATA_LEN {
            return Err(PrivateDataTooLong(private_data.len()).into());
        }
        let conn = self.conn.take().expect("a request is answered once");
        self.hca.context().with_driver(|d| {
            let g = d.gsi_mut();
            let r = g
                .cm_mut()
                .reject(conn, RejectReason::ConsumerReject, private_data);
            g.forget_conn(conn);
            r
        })?;
        Ok(())
    }
}

impl Drop for ConnectRequest {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            abandon(self.hca.context(), conn);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Connected,
    Disconnected,
}

/// An RC connection set up through the CM. Dropping it disconnects (DREQ) if it is still
/// connected; the CM then finishes the exchange and TIMEWAIT by itself.
#[derive(Debug)]
pub struct CmConnection {
    qp: QueuePair,
    conn: ConnId,
    peer_private_data: Vec<u8>,
    peer_addr: Option<SocketAddr>,
    state: ConnState,
}

impl CmConnection {
    /// Connects `qp` (an RC QP of a device) to the listener at `peer` (IP address, rdma_cm
    /// port): sends a REQ with `private_data` (at most 56 bytes, after rdma_cm's IP header),
    /// readies the QP with the REP's values, sends the RTU. Waits up to `timeout`.
    ///
    /// The REQ carries rdma_cm's choices (response timeouts 20, 15 CM retries, so a peer
    /// that never answers is reported after about 100 s unless `timeout` is shorter) and
    /// the QP's options: READ/atomic limits, retry counts, local ACK timeout, MTU.
    pub fn connect(
        mut qp: PreparedQueuePair,
        peer: SocketAddr,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<CmConnection, CmApiError> {
        if qp.queue_pair().qp_type() != softib_transport::QpType::Rc {
            return Err(CmApiError::UnsupportedQpType);
        }
        // An owned handle keeps the context while `qp` is changed and moved.
        let owner = qp.queue_pair().clone();
        let ctx = owner.pd().context();
        let local_ip = ctx.local_addr().ip();
        if local_ip.is_ipv4() != peer.is_ipv4() {
            return Err(CmApiError::AddressFamily(peer.ip()));
        }
        // rdma_cm binds an ephemeral port for the active side (its source port, which the
        // REQ's IP header and flow label carry).
        let src_port = 32768 + (ctx.random_psn() % 28232) as u16;
        let src = SocketAddr::new(local_ip, src_port);
        let mut params = rdma_cm::rc_connect_params(
            PortSpace::Tcp,
            src,
            peer,
            qp.qpn(),
            qp.psn(),
            private_data,
        )?;
        let o = *qp.options_mut();
        let mtu = o.mtu.min(ctx.mtu());
        params.path_mtu = mtu_code(mtu);
        params.responder_resources = o.max_dest_rd_atomic;
        params.initiator_depth = o.max_rd_atomic;
        params.retry_count = o.retry_cnt.min(7);
        params.rnr_retry_count = o.rnr_retry.min(7);
        params.path.local_ack_timeout = o.timeout.min(31);
        params.path.traffic_class = o.traffic_class;
        let conn = ctx.with_driver(|d| {
            let now = d.now();
            d.gsi_mut().cm_mut().connect(now, &params)
        })?;
        let rep = match wait_conn(ctx, conn, timeout) {
            Ok(CmEvent::ConnectReply { rep, .. }) => rep,
            Ok(CmEvent::Rejected {
                reason,
                private_data,
                ..
            }) => {
                ctx.with_driver(|d| d.gsi_mut().forget_conn(conn));
                return Err(CmApiError::Rejected {
                    reason,
                    private_data: private_data.to_vec(),
                });
            }
            Ok(CmEvent::Unreachable { phase, .. }) => {
                ctx.with_driver(|d| d.gsi_mut().forget_conn(conn));
                return Err(CmApiError::Unreachable(phase));
            }
            Ok(_) | Err(_) => {
                abandon(ctx, conn);
                return Err(CmApiError::TimedOut);
            }
        };
        // Kernel cm_init_qp_rtr/rts_attr: we accept the REP's initiator depth as
        // responder, and issue at most its responder resources.
        let opts = qp.options_mut();
        opts.max_dest_rd_atomic = opts.max_dest_rd_atomic.min(rep.initiator_depth);
        opts.max_rd_atomic = opts.max_rd_atomic.min(rep.responder_resources);
        opts.rnr_retry = rep.rnr_retry_count;
        opts.mtu = mtu;
        // We expect the PSN our REQ announced, and send with the REP's.
        let expected = qp.psn();
        qp.set_psn(rep.starting_psn);
        let remote = peer_endpoint(ctx, peer.ip(), rep.local_qpn, expected, mtu);
        let queue_pair = match qp.handshake(&remote) {
            Ok(q) => q,
            Err(e) => {
                ctx.with_driver(|d| {
                    let _ = d.gsi_mut().cm_mut().reject(conn, RejectReason::NoQp, &[]);
                    d.gsi_mut().forget_conn(conn);
                });
                return Err(e.into());
            }
        };
        ctx.with_driver(|d| d.gsi_mut().cm_mut().ready_to_use(conn, &[]))?;
        Ok(CmConnection {
            qp: queue_pair,
            conn,
            peer_private_data: rep.private_data.to_vec(),
            peer_addr: Some(peer),
            state: ConnState::Connected,
        })
    }

    /// The connected QP (RTS).
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The peer's private data: the REP's 196 bytes (active side) or the REQ's 56 bytes
    /// after rdma_cm's header (passive side), zero-padded as on the wire.
    pub fn peer_private_data(&self) -> &[u8] {
        &self.peer_private_data
    }

    /// The peer's address and rdma_cm port, when known.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    /// Whether the connection is still up as far as this side knows.
    pub fn is_connected(&self) -> bool {
        self.state == ConnState::Connected
    }

    fn ctx(&self) -> &Context {
        self.qp.pd().context()
    }

    /// Moves the QP to the error state (what rdma_cm does on disconnect: outstanding work
    /// requests complete flushed).
    fn qp_to_error(&self) {
        let attr = softib_transport::QpAttr {
            qp_state: softib_transport::QpState::Err,
            ..softib_transport::QpAttr::default()
        };
        let _ = self.qp.modify(&attr, softib_transport::QpAttrMask::STATE);
    }

    /// Sends a DREQ with up to 220 bytes of private data and waits up to `timeout` for the
    /// DREP (or for the CM to give up on it); the QP goes to the error state.
    pub fn disconnect(&mut self, private_data: &[u8], timeout: Duration) -> Result<(), CmApiError> {
        if self.state == ConnState::Disconnected {
            return Ok(());
        }
        if private_data.len() > softib_wire::cm::DREQ_PRIVATE_DATA_LEN {
            return Err(PrivateDataTooLong(private_data.len()).into());
        }
        let conn = self.conn;
        let sent = self.ctx().with_driver(|d| {
            let now = d.now();
            d.gsi_mut().cm_mut().disconnect(now, conn, private_data)
        });
        self.qp_to_error();
        if let Err(e) = sent {
            // The peer's DREQ crossed ours: the event below says so.
            if !matches!(e, CmError::WrongState { .. }) {
                return Err(e.into());
            }
        }
        loop {
            match wait_conn(self.ctx(), conn, timeout)? {
                CmEvent::Disconnected { .. } => {
                    self.state = ConnState::Disconnected;
                    return Ok(());
                }
                _ => continue,
            }
        }
    }

    /// Waits up to `timeout` for the peer to disconnect (its DREQ, answered with a DREP);
    /// returns the DREQ's private data (220 bytes). The QP goes to the error state.
    pub fn wait_disconnected(&mut self, timeout: Duration) -> Result<Vec<u8>, CmApiError> {
        let conn = self.conn;
        loop {
            match wait_conn(self.ctx(), conn, timeout)? {
                CmEvent::Disconnected { private_data, .. } => {
                    self.state = ConnState::Disconnected;
                    self.qp_to_error();
                    return Ok(private_data.to_vec());
                }
                _ => continue,
            }
        }
    }
}

impl Drop for CmConnection {
    fn drop(&mut self) {
        if super::mr::guard_held() {
            return; // see `mr::guard_held`
        }
        abandon(self.qp.pd().context(), self.conn);
    }
}
