//! Queue pairs: the builder, the prepared (unconnected) QP, connection, and posting.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use softib_transport::{
    AccessFlags, Mtu, MwBind, QpAttr, QpAttrMask, QpCap, QpCounters, QpInitAttr, QpState, QpType,
    SendFlags, SendWr, UdDest, VerbsError, WrOpcode,
};

use super::{
    AddressHandle, CompletionQueue, ConnectOptions, LocalSlice, PostError, ProtectionDomain,
    RecvRequest, RemoteSlice, SharedReceiveQueue,
};
use crate::context::HandshakeError;
use crate::oob::endpoint::{Endpoint, RemoteRegion};
use crate::oob::stream::OobStream;
use crate::oob::OobError;

impl ProtectionDomain {
    /// Starts building a QP (`ibv_create_qp`) of `qp_type` whose send and receive
    /// completions go to `send_cq` and `recv_cq`.
    pub fn create_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        qp_type: QpType,
    ) -> QueuePairBuilder {
        QueuePairBuilder::new(self.clone(), send_cq.clone(), recv_cq.clone(), qp_type)
    }
}

/// Builds a QP (`ibv_create_qp`) and the attributes it is later connected with.
///
/// Defaults: 128 send and 128 receive WRs of 4 SGEs, 256 bytes of inline data, completions
/// only for signaled WRs; when connected: path MTU 4096 (capped by both devices), every
/// remote access right, ACK timeout 14 (67 ms), 7 retries, RNR retry forever, 16
/// outstanding READs/atomics each way, Q_Key 0x11111111, traffic class 0 (see
/// [`ConnectOptions`]).
#[derive(Debug)]
pub struct QueuePairBuilder {
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    qp_type: QpType,
    cap: QpCap,
    srq: Option<SharedReceiveQueue>,
    sq_sig_all: bool,
    options: ConnectOptions,
    /// RD QPs: their reliable datagram domain.
    rdd: Option<softib_transport::RddHandle>,
}

impl QueuePairBuilder {
    pub(crate) fn new(
        pd: ProtectionDomain,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue,
        qp_type: QpType,
    ) -> QueuePairBuilder {
        QueuePairBuilder {
            pd,
            send_cq,
            recv_cq,
            qp_type,
            cap: QpCap::default(),
            srq: None,
            sq_sig_all: false,
            options: ConnectOptions::default(),
            rdd: None,
        }
    }

    /// Send queue depth.
    pub fn set_max_send_wr(mut self, n: u32) -> Self {
        self.cap.max_send_wr = n;
        self
    }

    /// Receive queue depth (ignored with an SRQ).
    pub fn set_max_recv_wr(mut self, n: u32) -> Self {
        self.cap.max_recv_wr = n;
        self
    }

    /// SGEs per send WR.
    pub fn set_max_send_sge(mut self, n: u32) -> Self {
        self.cap.max_send_sge = n;
        self
    }

    /// SGEs per receive WR.
    pub fn set_max_recv_sge(mut self, n: u32) -> Self {
        self.cap.max_recv_sge = n;
        self
    }

    /// Bytes of inline data per send WR.
    pub fn set_max_inline_data(mut self, n: u32) -> Self {
        self.cap.max_inline_data = n;
        self
    }

    /// Receives from a shared receive queue instead of the QP's own.
    pub fn set_srq(mut self, srq: &SharedReceiveQueue) -> Self {
        self.srq = Some(srq.clone());
        self
    }

    /// Every send WR completes, signaled or not (`sq_sig_all`).
    pub fn set_sq_sig_all(mut self, all: bool) -> Self {
        self.sq_sig_all = all;
        self
    }

    /// What the peer may do to our memory through this QP.
    pub fn set_access(mut self, access: AccessFlags) -> Self {
        self.options.access = access;
        self
    }

    /// Largest path MTU (the smallest of this, ours and the peer's is used).
    pub fn set_path_mtu(mut self, mtu: Mtu) -> Self {
        self.options.mtu = mtu;
        self
    }

    /// Local ACK timeout exponent: 4.096 us x 2^timeout (IBA 9.7.6.1.3).
    pub fn set_timeout(mut self, timeout: u8) -> Self {
        self.options.timeout = timeout;
        self
    }

    /// Transport retries before the QP fails (IBA 9.7.6.1.3).
    pub fn set_retry_count(mut self, n: u8) -> Self {
        self.options.retry_cnt = n;
        self
    }

    /// RNR retries (7: forever, IBA 9.7.5.2.8).
    pub fn set_rnr_retry(mut self, n: u8) -> Self {
        self.options.rnr_retry = n;
        self
    }

    /// RNR NAK timer code we advertise (IBA table 45).
    pub fn set_min_rnr_timer(mut self, code: u8) -> Self {
        self.options.min_rnr_timer = code;
        self
    }

    /// RDMA READs / atomics we may have outstanding.
    pub fn set_max_rd_atomic(mut self, n: u8) -> Self {
        self.options.max_rd_atomic = n;
        self
    }

    /// RDMA READs / atomics we accept outstanding from the peer.
    pub fn set_max_dest_rd_atomic(mut self, n: u8) -> Self {
        self.options.max_dest_rd_atomic = n;
        self
    }

    /// Q_Key of a UD QP.
    pub fn set_qkey(mut self, qkey: u32) -> Self {
        self.options.qkey = qkey;
        self
    }

    /// Traffic class of our packets (DSCP << 2).
    pub fn set_traffic_class(mut self, tc: u8) -> Self {
        self.options.traffic_class = tc;
        self
    }

    /// All connection attributes at once.
    pub fn set_connect_options(mut self, options: ConnectOptions) -> Self {
        self.options = options;
        self
    }

    /// The reliable datagram domain of an RD QP (required for `QpType::Rd`).
    pub fn set_rdd(mut self, rdd: softib_transport::RddHandle) -> Self {
        self.rdd = Some(rdd);
        self
    }

    /// Creates the QP (in RESET) and chooses its first PSN.
    pub fn build(self) -> Result<PreparedQueuePair, VerbsError> {
        let ctx = self.pd.context();
        let init = QpInitAttr {
            qp_type: self.qp_type,
            send_cq: self.send_cq.handle(),
            recv_cq: self.recv_cq.handle(),
            srq: self.srq.as_ref().map(SharedReceiveQueue::handle),
            cap: self.cap,
            sq_sig_all: self.sq_sig_all,
        };
        let qpn = match (self.qp_type, self.rdd) {
            (QpType::Rd, Some(rdd)) => ctx.create_rd_qp(self.pd.handle(), rdd, init)?,
            (QpType::Rd, None) => {
                return Err(VerbsError::InvalidAttribute {
                    attr: "rdd",
                    reason: "an RD QP needs its reliable datagram domain (set_rdd)".into(),
                })
            }
            _ => ctx.create_qp(self.pd.handle(), init)?,
        };
        let psn = ctx.random_psn();
        Ok(PreparedQueuePair {
            qp: QueuePair {
                inner: Arc::new(QpInner {
                    pd: self.pd,
                    send_cq: self.send_cq,
                    recv_cq: self.recv_cq,
                    srq: self.srq,
                    qpn,
                    qp_type: self.qp_type,
                }),
            },
            psn,
            options: self.options,
        })
    }
}

/// A QP created but not connected: publish its [`PreparedQueuePair::endpoint`], then
/// connect it to the peer's with [`PreparedQueuePair::handshake`] (or exchange both over
/// TCP with [`PreparedQueuePair::exchange`]).
#[derive(Debug)]
pub struct PreparedQueuePair {
    qp: QueuePair,
    psn: u32,
    options: ConnectOptions,
}

impl PreparedQueuePair {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    /// The PSN our first request will carry.
    pub fn psn(&self) -> u32 {
        self.psn
    }

    /// The QP (still in RESET).
    pub fn queue_pair(&self) -> &QueuePair {
        &self.qp
    }

    /// Sets the PSN our first request will carry (the CM learns it from the peer).
    pub(crate) fn set_psn(&mut self, psn: u32) {
        self.psn = psn & 0x00FF_FFFF;
    }

    /// The connection options `handshake` will use (the CM narrows them to what the peer
    /// offers).
    pub(crate) fn options_mut(&mut self) -> &mut ConnectOptions {
        &mut self.options
    }

    /// Our side of the connection, exposing `regions` to the peer (UD: with our Q_Key).
    pub fn endpoint(&self, regions: &[RemoteRegion]) -> Endpoint {
        let ctx = self.qp.inner.pd.context();
        let mut e = ctx.endpoint(self.qp.qpn(), self.psn, &[]);
        e.regions = regions.to_vec();
        if self.qp.inner.qp_type == QpType::Ud {
            e.qkey = Some(self.options.qkey);
        }
        e
    }

    /// Moves the QP through INIT and RTR to RTS connected to `remote` (RC/UC; a UD QP only
    /// learns the peer's UDP port) and returns it ready to post.
    pub fn handshake(self, remote: &Endpoint) -> Result<QueuePair, VerbsError> {
        let q = &self.qp.inner;
        q.pd.context()
            .connect(q.qpn, q.qp_type, self.psn, remote, &self.options)?;
        Ok(self.qp)
    }

    /// An RD QP connects to nobody: this moves it to RTS with the builder's Q_Key and
    /// access rights; its sends name an EEC ([`SendRequest::over`]).
    pub fn ready_rd(self) -> Result<QueuePair, VerbsError> {
        let q = &self.qp.inner;
        if q.qp_type != QpType::Rd {
            return Err(VerbsError::InvalidAttribute {
                attr: "qp_type",
                reason: format!("ready_rd is for RD QPs, this one is {:?}", q.qp_type),
            });
        }
        let attr = QpAttr {
            pkey_index: 0,
            port_num: 1,
            qkey: self.options.qkey,
            qp_access_flags: self.options.access,
            sq_psn: self.psn,
            ..QpAttr::default()
        };
        q.pd.context().bring_up_qp(q.qpn, QpType::Rd, &attr)?;
        Ok(self.qp)
    }

    /// Exchanges endpoints over TCP on `port` (as the client of `peer` when given, else as
    /// the server waiting at most `timeout` for one), then connects; returns the QP and the
    /// peer's endpoint (its regions say where RDMA may go).
    pub fn exchange(
        self,
        regions: &[RemoteRegion],
        peer: Option<&str>,
        port: u16,
        timeout: Duration,
    ) -> Result<(QueuePair, Endpoint), HandshakeError> {
        let mine = self.endpoint(regions);
        let mut stream = match peer {
            Some(host) => OobStream::connect(host, port, timeout)?,
            None => {
                let listener =
                    std::net::TcpListener::bind(("0.0.0.0", port)).map_err(|source| {
                        OobError::Io {
                            what: format!("listen on TCP port {port}"),
                            source,
                        }
                    })?;
                OobStream::accept(&listener, timeout)?
            }
        };
        let theirs = stream.exchange_endpoint(&mine)?;
        Ok((self.handshake(&theirs)?, theirs))
    }
}

#[derive(Debug)]
struct QpInner {
    pd: ProtectionDomain,
    // Held so the CQs and SRQ outlive the QP in the device.
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    srq: Option<SharedReceiveQueue>,
    qpn: u32,
    qp_type: QpType,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if crate::region_guard::guard_held() {
            return; // see `region_guard::guard_held`
        }
        let _ = self.pd.context().destroy_qp(self.qpn);
    }
}

/// A queue pair (`ibv_qp`). Cloning gives another handle to the same QP (posting from
/// several threads is allowed; each post is atomic).
#[derive(Clone, Debug)]
pub struct QueuePair {
    inner: Arc<QpInner>,
}

impl QueuePair {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The CQ of send completions.
    pub fn send_cq(&self) -> &CompletionQueue {
        &self.inner.send_cq
    }

    /// The CQ of receive completions.
    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.inner.recv_cq
    }

    /// The SRQ, if the QP receives from one.
    pub fn srq(&self) -> Option<&SharedReceiveQueue> {
        self.inner.srq.as_ref()
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// Posts a batch of send WRs in order under one device lock, sending what they make
    /// ready once (`ibv_post_send` with a WR list).
    pub fn post_send(&self, wrs: &[SendRequest<'_>]) -> Result<(), PostError> {
        let qpn = self.inner.qpn;
        self.inner.pd.context().with_driver(|d| {
            let now = d.now();
            for (i, wr) in wrs.iter().enumerate() {
                d.engine_mut()
                    .post_send(now, qpn, &wr.wr)
                    .map_err(|source| PostError {
                        posted: i,
                        index: i,
                        source,
                    })?;
            }
            Ok(())
        })
    }

    /// Posts a batch of receive WRs in order (`ibv_post_recv` with a WR list).
    pub fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> Result<(), PostError> {
        let qpn = self.inner.qpn;
        self.inner.pd.context().with_driver(|d| {
            for (i, wr) in wrs.iter().enumerate() {
                d.engine_mut()
                    .post_recv(qpn, &wr.wr)
                    .map_err(|source| PostError {
                        posted: i,
                        index: i,
                        source,
                    })?;
            }
            Ok(())
        })
    }

    /// The QP's state.
    pub fn state(&self) -> Option<QpState> {
        self.inner.pd.context().qp_state(self.inner.qpn)
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr, VerbsError> {
        self.inner.pd.context().query_qp(self.inner.qpn)
    }

    /// `ibv_modify_qp` (for transitions the connection shortcut does not make, e.g. to SQD
    /// or ERR).
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        self.inner
            .pd
            .context()
            .modify_qp(self.inner.qpn, attr, mask)
    }

    /// Attaches this UD QP to the multicast group `gid` (an IPv4-mapped IPv4 multicast
    /// address for an IPv4 device; `ibv_attach_mcast`, IBA 10.5): datagrams sent to the
    /// multicast QPN `softib_transport::mcast::MULTICAST_QPN` with that destination GID
    /// reach it, if their Q_Key is this QP's.
    pub fn attach_multicast(&self, gid: [u8; 16]) -> Result<(), VerbsError> {
        self.inner.pd.context().attach_mcast(self.inner.qpn, gid)
    }

    /// Detaches this QP from `gid` (`ibv_detach_mcast`).
    pub fn detach_multicast(&self, gid: [u8; 16]) -> Result<(), VerbsError> {
        self.inner.pd.context().detach_mcast(self.inner.qpn, gid)
    }

    /// The QP's counters.
    pub fn counters(&self) -> Option<QpCounters> {
        self.inner.pd.context().qp_counters(self.inner.qpn)
    }
}

/// A send work request naming registered memory; it cannot outlive the regions it names.
/// Signaled by default.
#[derive(Clone, Debug)]
pub struct SendRequest<'a> {
    wr: SendWr,
    _regions: PhantomData<&'a ()>,
}

impl<'a> SendRequest<'a> {
    fn new(wr_id: u64, opcode: WrOpcode, local: &[LocalSlice<'a>]) -> Self {
        SendRequest {
            wr: SendWr {
                wr_id,
                opcode,
                sg_list: local.iter().map(LocalSlice::sge).collect(),
                flags: SendFlags::SIGNALED,
                ..SendWr::default()
            },
            _regions: PhantomData,
        }
    }

    fn remote(mut self, remote: RemoteSlice) -> Self {
        self.wr.remote_addr = remote.addr;
        self.wr.rkey = remote.rkey;
        self
    }

    /// SEND of `local` (consumes a receive WR at the peer).
    pub fn send(wr_id: u64, local: LocalSlice<'a>) -> Self {
        Self::new(wr_id, WrOpcode::Send, &[local])
    }

    /// SEND gathered from several slices (none: a zero-length SEND).
    pub fn send_gather(wr_id: u64, local: &[LocalSlice<'a>]) -> Self {
        Self::new(wr_id, WrOpcode::Send, local)
    }

    /// RDMA WRITE of `local` to `remote` (IBA 9.4.3).
    pub fn write(wr_id: u64, local: LocalSlice<'a>, remote: RemoteSlice) -> Self {
        Self::new(wr_id, WrOpcode::RdmaWrite, &[local]).remote(remote)
    }

    /// RDMA READ of `remote` into `local` (RC only, IBA 9.4.4).
    pub fn read(wr_id: u64, local: LocalSlice<'a>, remote: RemoteSlice) -> Self {
        Self::new(wr_id, WrOpcode::RdmaRead, &[local]).remote(remote)
    }

    /// FETCH_AND_ADD of `add` to the 8 bytes at `remote`; the original value lands in the
    /// 8 bytes of `local` (RC only, IBA 9.4.5).
    pub fn fetch_add(wr_id: u64, local: LocalSlice<'a>, remote: RemoteSlice, add: u64) -> Self {
        let mut r = Self::new(wr_id, WrOpcode::AtomicFetchAndAdd, &[local]).remote(remote);
        r.wr.compare_add = add;
        r
    }

    /// CMP_AND_SWP: if the 8 bytes at `remote` equal `compare` they become `swap`; the
    /// original value lands in `local` (RC only, IBA 9.4.5).
    pub fn compare_swap(
        wr_id: u64,
        local: LocalSlice<'a>,
        remote: RemoteSlice,
        compare: u64,
        swap: u64,
    ) -> Self {
        let mut r = Self::new(wr_id, WrOpcode::AtomicCmpAndSwp, &[local]).remote(remote);
        r.wr.compare_add = compare;
        r.wr.swap = swap;
        r
    }

    /// ATOMIC WRITE of the 8 bytes of `local` to the 8-byte aligned `remote` (RC only;
    /// IBA vol. 1 release 1.5, as rxe since Linux 6.2): one indivisible store at the peer,
    /// after every earlier request of this QP; `remote` needs REMOTE_WRITE. Completes as
    /// `WcOpcode::AtomicWrite` once the peer answered. With [`SendRequest::inline`] the
    /// bytes are taken at post time, whatever the QP's `max_inline_data`.
    pub fn atomic_write(wr_id: u64, local: LocalSlice<'a>, remote: RemoteSlice) -> Self {
        Self::new(wr_id, WrOpcode::AtomicWrite, &[local]).remote(remote)
    }

    /// Adds immediate data: SEND becomes SEND_WITH_IMM, RDMA WRITE becomes
    /// RDMA_WRITE_WITH_IMM (which consumes a receive WR at the peer). Other opcodes carry
    /// no immediate; the device refuses them with it.
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.wr.opcode = match self.wr.opcode {
            WrOpcode::Send => WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite => WrOpcode::RdmaWriteWithImm,
            other => other,
        };
        self.wr.imm_data = Some(imm);
        self
    }

    /// No completion unless the QP signals all WRs.
    pub fn unsignaled(mut self) -> Self {
        self.wr.flags.set(SendFlags::SIGNALED, false);
        self
    }

    /// Sets the solicited event bit (the peer's CQ armed for solicited events fires).
    pub fn solicited(mut self) -> Self {
        self.wr.flags.set(SendFlags::SOLICITED, true);
        self
    }

    /// Waits for earlier READs and atomics to complete before this one starts.
    pub fn fence(mut self) -> Self {
        self.wr.flags.set(SendFlags::FENCE, true);
        self
    }

    /// Copies the data at post time (up to the QP's `max_inline_data`).
    pub fn inline(mut self) -> Self {
        self.wr.flags.set(SendFlags::INLINE, true);
        self
    }

    /// The destination of a send on a UD QP (IBA 10.2.5: a `remote_qkey` with the high bit
    /// set means the QP's own Q_Key).
    pub fn to(mut self, ah: &AddressHandle, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.wr.ud = Some(UdDest {
            ah: ah.handle(),
            remote_qpn,
            remote_qkey,
        });
        self
    }

    /// Turns a SEND into SEND with Invalidate of `rkey` at the peer (a type 2 memory window
    /// bound to the peer's QP, or a region; IBA 10.6.7.2.5). RC only.
    pub fn with_invalidate(mut self, rkey: u32) -> Self {
        if self.wr.opcode == WrOpcode::Send {
            self.wr.opcode = WrOpcode::SendWithInv;
        }
        self.wr.invalidate_rkey = rkey;
        self
    }

    /// LOCAL_INV of `rkey` (a type 2 memory window or a region of this QP's PD), run in
    /// order on this QP's send queue; completes with `WcOpcode::LocalInv`.
    pub fn local_invalidate(wr_id: u64, rkey: u32) -> Self {
        let mut r = Self::new(wr_id, WrOpcode::LocalInv, &[]);
        r.wr.invalidate_rkey = rkey;
        r
    }

    /// BIND_MW: binds the memory window whose R_Key is now `mw_rkey` to the bytes of
    /// `window` with remote `access`, giving it `new_rkey` (same index, new key byte:
    /// `softib_transport::next_rkey(mw_rkey)` is the usual choice). A type 2 window is
    /// then usable only through this QP (IBA 10.6.7.2); completes with `WcOpcode::BindMw`.
    pub fn bind_window(
        wr_id: u64,
        mw_rkey: u32,
        new_rkey: u32,
        window: LocalSlice<'a>,
        access: AccessFlags,
    ) -> Self {
        let sge = window.sge();
        let mut r = Self::new(wr_id, WrOpcode::BindMw, &[]);
        r.wr.bind_mw = Some(MwBind {
            mw_rkey,
            new_rkey,
            mr_lkey: sge.lkey,
            addr: sge.addr,
            length: u64::from(sge.length),
            access,
        });
        r
    }

    /// The destination of a send on an RD QP: over `eec`, to the peer's RD QP `remote_qpn`
    /// with `remote_qkey` (high bit set: the QP's own Q_Key; IBA 10.2.5).
    pub fn over(mut self, eec: &crate::rd::Eec, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.wr.rd = Some(softib_transport::RdDest {
            eec: eec.eecn(),
            remote_qpn,
            remote_qkey,
        });
        self
    }

    /// The remote XRC SRQ an XRC initiator's message goes to (`ibv_wr_set_xrc_srqn`).
    pub fn to_xrc_srq(mut self, srqn: u32) -> Self {
        self.wr.xrc_remote_srqn = srqn;
        self
    }

    /// The engine's work request.
    pub fn wr(&self) -> &SendWr {
        &self.wr
    }
}
