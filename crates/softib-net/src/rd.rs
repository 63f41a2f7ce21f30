//! Reliable Datagram on a [`Context`] (IBA vol. 1 §9.7, §10.2.7; the engine's rules are in
//! softib-transport's `rd/`). libibverbs has no RD, so this is softib's own API:
//!
//! 1. [`Hca::alloc_rdd`]: a reliable datagram domain.
//! 2. RD QPs: [`crate::verbs::QueuePairBuilder::set_rdd`] with `QpType::Rd`, then
//!    [`crate::verbs::PreparedQueuePair::ready_rd`] (an RD QP connects to nobody).
//! 3. One EE context per peer: [`Hca::create_eec`] gives a [`PreparedEec`]; exchange its
//!    [`PreparedEec::endpoint`] with the peer's (out of band, as for an RC QP) and
//!    [`PreparedEec::handshake`] (or [`PreparedEec::exchange`] over TCP).
//! 4. Send with [`crate::verbs::SendRequest::over`]: the EEC, the remote RD QP, its Q_Key.
//!    Any number of RD QPs of the domain share the EEC; it carries one message at a time.

use std::sync::Arc;
use std::time::Duration;

use softib_transport::{QpCounters, QpState, QpType, RddHandle, VerbsError};

use crate::context::{ConnectOptions, Context, HandshakeError};
use crate::oob::endpoint::Endpoint;
use crate::oob::stream::OobStream;
use crate::oob::OobError;
use crate::verbs::Hca;

impl Context {
    /// A new reliable datagram domain.
    pub fn alloc_rdd(&self) -> RddHandle {
        self.with_driver(|d| d.engine_mut().alloc_rdd())
    }

    /// Releases a domain (refused while RD QPs or EECs belong to it).
    pub fn dealloc_rdd(&self, rdd: RddHandle) -> Result<(), VerbsError> {
        self.with_driver(|d| d.engine_mut().dealloc_rdd(rdd))
    }

    /// An RD QP of `rdd` in RESET (engine level; the verbs API's builder calls it).
    pub fn create_rd_qp(
        &self,
        pd: softib_transport::PdHandle,
        rdd: RddHandle,
        init: softib_transport::QpInitAttr,
    ) -> Result<u32, VerbsError> {
        self.with_driver(|d| d.engine_mut().create_rd_qp(pd, rdd, init))
    }

    /// Engine-level EEC creation (the tools manage the number themselves).
    pub fn create_eec_number(&self, rdd: RddHandle, max_send_wr: u32) -> Result<u32, VerbsError> {
        self.with_driver(|d| d.engine_mut().create_eec(rdd, max_send_wr))
    }

    /// Sends a RESYNC on EEC `eecn` (after it was reset and brought up with a new PSN).
    pub fn resync_eec(&self, eecn: u32) -> Result<(), VerbsError> {
        self.with_driver(|d| d.engine_mut().resync_eec(eecn))
    }

    /// Moves QP (or EEC) `qpn` of `qp_type` from RESET to RTS with `attr`, through the
    /// transitions and attribute masks of the engine's table.
    pub fn bring_up_qp(
        &self,
        qpn: u32,
        qp_type: QpType,
        attr: &softib_transport::QpAttr,
    ) -> Result<(), VerbsError> {
        self.with_driver(|d| {
            let now = d.now();
            d.engine_mut()
                .bring_up_qp(now, qpn, qp_type, attr, QpState::Rts)
        })
    }

    /// Destroys EEC `eecn`.
    pub fn destroy_eec(&self, eecn: u32) -> Result<(), VerbsError> {
        self.with_driver(|d| d.engine_mut().destroy_eec(eecn))
    }
}

impl Hca {
    /// A new reliable datagram domain ([`Context::alloc_rdd`]).
    pub fn alloc_rdd(&self) -> RddHandle {
        self.context().alloc_rdd()
    }

    /// An EE context of `rdd` in RESET, carrying up to `max_send_wr` queued messages;
    /// connect it with [`PreparedEec::handshake`].
    pub fn create_eec(&self, rdd: RddHandle, max_send_wr: u32) -> Result<PreparedEec, VerbsError> {
        let ctx = self.context();
        let eecn = ctx.create_eec_number(rdd, max_send_wr)?;
        Ok(PreparedEec {
            eec: Eec {
                inner: Arc::new(EecInner {
                    hca: self.clone(),
                    eecn,
                }),
            },
            psn: ctx.random_psn(),
            options: ConnectOptions::default(),
        })
    }
}

#[derive(Debug)]
struct EecInner {
    hca: Hca,
    eecn: u32,
}

impl Drop for EecInner {
    fn drop(&mut self) {
        if crate::region_guard::guard_held() {
            return; // as for QPs, see `region_guard::guard_held`
        }
        let _ = self.hca.context().destroy_eec(self.eecn);
    }
}

/// An EE context: the reliable connection RD QPs of a domain share towards one peer.
/// Cloning gives another handle to the same EEC; the last one destroys it.
#[derive(Clone, Debug)]
pub struct Eec {
    inner: Arc<EecInner>,
}

impl Eec {
    /// Its number (what the peer's EEC sends to, in the RDETH).
    pub fn eecn(&self) -> u32 {
        self.inner.eecn
    }

    /// Its state (RESET .. ERR, as a QP's).
    pub fn state(&self) -> Option<QpState> {
        self.inner
            .hca
            .context()
            .lock()
            .engine()
            .qp_state(self.inner.eecn)
    }

    /// Its counters (retransmissions, NAKs, RESYNCs, RD refusals).
    pub fn counters(&self) -> Option<QpCounters> {
        self.inner
            .hca
            .context()
            .lock()
            .engine()
            .qp_counters(self.inner.eecn)
            .copied()
    }

    /// Sends a RESYNC before the next message (IBA §9.7.x).
    pub fn resync(&self) -> Result<(), VerbsError> {
        self.inner.hca.context().resync_eec(self.inner.eecn)
    }
}

/// An EEC created but not connected: publish [`PreparedEec::endpoint`], then connect it
/// to the peer's with [`PreparedEec::handshake`], as an RC QP's handshake.
#[derive(Debug)]
pub struct PreparedEec {
    eec: Eec,
    psn: u32,
    options: ConnectOptions,
}

impl PreparedEec {
    /// The EEC number.
    pub fn eecn(&self) -> u32 {
        self.eec.eecn()
    }

    /// Path MTU, timeouts, retry counts the EEC connects with (RC's meaning).
    pub fn set_connect_options(mut self, options: ConnectOptions) -> Self {
        self.options = options;
        self
    }

    /// Our side for the out-of-band exchange: the EECN in `qpn`, our first PSN.
    pub fn endpoint(&self) -> Endpoint {
        self.eec
            .inner
            .hca
            .context()
            .endpoint(self.eecn(), self.psn, &[])
    }

    /// Moves the EEC through INIT and RTR to RTS connected to the peer's EEC `remote`.
    pub fn handshake(self, remote: &Endpoint) -> Result<Eec, VerbsError> {
        let ctx = self.eec.inner.hca.context();
        // An EEC's attributes and transitions are an RC QP's (IBA §10.2.7).
        ctx.connect(self.eecn(), QpType::Rc, self.psn, remote, &self.options)?;
        Ok(self.eec)
    }

    /// Exchanges endpoints over TCP on `port` (client of `peer` when given, else server
    /// waiting at most `timeout`), then connects.
    pub fn exchange(
        self,
        peer: Option<&str>,
        port: u16,
        timeout: Duration,
    ) -> Result<(Eec, Endpoint), HandshakeError> {
        let mine = self.endpoint();
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
