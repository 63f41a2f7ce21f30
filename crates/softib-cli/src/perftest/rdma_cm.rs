//! perftest's `-R`: both the parameter exchange and the test QPs connect through rdma_cm
//! (IB CM REQ/REP/RTU over QP1, softib-net's [`CmConnection`]) instead of TCP and a
//! hand-made QP exchange, so `softib write-bw -R` pairs with `ib_write_bw -R` on a Linux
//! host (rdma-core's librdmacm over the kernel's rdma_cm) or through softib's shim.
//!
//! What perftest 4.5 does (`perftest_communication.c`), and so what this module does:
//! 1. The exchange connection: an RC QP with one receive posted, connected to the server's
//!    rdma_cm port (TCP port space). Each message is one SEND into the peer's receive
//!    buffer of `sizeof(struct pingpong_dest)` (56) bytes; the reader reposts at once.
//! 2. After the version, system-data and MTU messages, one handshake, then the test QPs
//!    connect through rdma_cm to the same port (the server listens again, once per QP),
//!    then another handshake.
//! 3. The key messages are the binary `struct pingpong_dest`, integers big-endian.
//!
//! perftest's server listens for the test connections only after its side of the first
//! handshake, so a client can ask before that and be rejected (reason 8, invalid service
//! ID: nobody listens yet). perftest 4.5-0.17 then retries with the ids it has destroyed
//! (upstream fixed that in 2025, commit 3d9d8d0); this client retries the connection
//! with a new QP every 100 ms, as perftest meant to. This server does not leave that gap:
//! it keeps listening from the exchange connection to the test connections, so an early
//! REQ waits for its accept instead of being rejected (a stock perftest client, whose retry
//! hangs, then never needs one).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use softib_net::context::MemoryRegion;
use softib_net::oob::perftest::PerftestDest;
use softib_net::verbs::{
    CmApiError, CmConnection, CmListener, CompletionQueue, Hca, PreparedQueuePair, ProtectionDomain,
};
use softib_transport::{
    AccessFlags, Mtu, QpType, RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};
use softib_wire::cm::RejectReason;

use super::params::{Params, Verb, RDMA_CM_ACK_TIMEOUT};

/// `sizeof(struct pingpong_dest)`: the receive buffer of perftest's exchange QP, and the
/// key message over rdma_cm.
pub const CM_KEY_MSG_LEN: usize = 56;
/// Where the exchange buffer receives (offset 0) and sends from.
const SEND_OFFSET: usize = 64;
const RECV_WR_ID: u64 = 1;
const SEND_WR_ID: u64 = 2;
/// How often and how long a client asks again for a test connection the server rejected
/// because it does not listen yet.
const REJECTED_RETRY_DELAY: Duration = Duration::from_millis(100);
const REJECTED_RETRIES: u32 = 50;

/// perftest's binary key message (`rdma_write_keys`): lid, out_reads, qpn, psn, rkey (each
/// a big-endian 32-bit int), 4 bytes of padding, vaddr (big-endian 64-bit), the GID, srqn
/// and gid_index (big-endian 32-bit).
pub fn dest_to_cm_bytes(d: &PerftestDest) -> [u8; CM_KEY_MSG_LEN] {
    let mut b = [0u8; CM_KEY_MSG_LEN];
    b[0..4].copy_from_slice(&u32::from(d.lid).to_be_bytes());
    b[4..8].copy_from_slice(&u32::from(d.out_reads).to_be_bytes());
    b[8..12].copy_from_slice(&d.qpn.to_be_bytes());
    b[12..16].copy_from_slice(&d.psn.to_be_bytes());
    b[16..20].copy_from_slice(&d.rkey.to_be_bytes());
    b[24..32].copy_from_slice(&d.vaddr.to_be_bytes());
    b[32..48].copy_from_slice(&d.gid.unwrap_or([0; 16]));
    b[48..52].copy_from_slice(&d.srqn.to_be_bytes());
    b
}

/// Reads perftest's binary key message (see [`dest_to_cm_bytes`]).
pub fn dest_from_cm_bytes(b: &[u8; CM_KEY_MSG_LEN]) -> PerftestDest {
    let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let mut vaddr = [0u8; 8];
    vaddr.copy_from_slice(&b[24..32]);
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[32..48]);
    PerftestDest {
        lid: be32(0).min(0xFFFF) as u16,
        out_reads: be32(4).min(0xFFFF) as u16,
        qpn: be32(8) & 0xFF_FFFF,
        psn: be32(12) & 0xFF_FFFF,
        rkey: be32(16),
        vaddr: u64::from_be_bytes(vaddr),
        gid: Some(gid),
        srqn: be32(48),
    }
}

/// The exchange connection of `-R`.
pub struct CmExchange {
    hca: Hca,
    conn: CmConnection,
    cq: CompletionQueue,
    mr: MemoryRegion,
    client: bool,
    /// A receive completion `poll_peer` took and the next receive consumes (its length).
    pending: Option<u32>,
    timeout: Duration,
    peer_ip: IpAddr,
    /// The server's listener, kept open for the test connections (see the module text).
    listener: Option<CmListener>,
    _pd: ProtectionDomain,
}

impl CmExchange {
    /// The server's listener, for the test connections (`None` on a client, or once taken).
    pub fn take_listener(&mut self) -> Option<CmListener> {
        self.listener.take()
    }

    fn resources(hca: &Hca) -> anyhow::Result<(ProtectionDomain, CompletionQueue, MemoryRegion)> {
        let pd = hca.alloc_pd();
        let cq = hca.create_cq().set_entries(8).build()?;
        let mr = hca
            .context()
            .reg_mr(pd.handle(), 2 * SEND_OFFSET, AccessFlags::LOCAL_WRITE)?;
        Ok((pd, cq, mr))
    }

    fn qp(pd: &ProtectionDomain, cq: &CompletionQueue) -> anyhow::Result<PreparedQueuePair> {
        Ok(pd
            .create_qp(cq, cq, QpType::Rc)
            .set_max_send_wr(2)
            .set_max_recv_wr(2)
            .set_timeout(RDMA_CM_ACK_TIMEOUT)
            .set_retry_count(7)
            .set_rnr_retry(7)
            .build()?)
    }

    /// The client: connects to the server's rdma_cm `port` at `server`.
    pub fn connect(hca: &Hca, server: SocketAddr, timeout: Duration) -> anyhow::Result<Self> {
        let (pd, cq, mr) = Self::resources(hca)?;
        let conn = CmConnection::connect(Self::qp(&pd, &cq)?, server, &[], timeout)
            .map_err(|e| cm_error(e, server))?;
        let x = CmExchange {
            hca: hca.clone(),
            conn,
            cq,
            mr,
            client: true,
            pending: None,
            timeout,
            peer_ip: server.ip(),
            listener: None,
            _pd: pd,
        };
        x.post_recv()?;
        Ok(x)
    }

    /// The server: listens on rdma_cm `port` until a client connects (as long as it takes,
    /// like perftest's server), accepts it and stops listening.
    pub fn accept(hca: &Hca, port: u16, timeout: Duration) -> anyhow::Result<Self> {
        let (pd, cq, mr) = Self::resources(hca)?;
        let listener = CmListener::bind(hca, port)
            .with_context(|| format!("cannot listen on rdma_cm port {port}"))?;
        let request = loop {
            match listener.get_request(Duration::from_secs(3600)) {
                Ok(r) => break r,
                Err(CmApiError::TimedOut) => continue,
                Err(e) => return Err(e).context("wait for the client's connection"),
            }
        };
        let peer_ip = request
            .peer_addr()
            .map(|a| a.ip())
            .ok_or_else(|| anyhow!("the client's REQ carries no rdma_cm IP header"))?;
        let conn = request
            .accept(Self::qp(&pd, &cq)?, &[], timeout)
            .context("accept the client's exchange connection")?;
        let listener = Some(listener);
        let x = CmExchange {
            hca: hca.clone(),
            conn,
            cq,
            mr,
            client: false,
            pending: None,
            timeout,
            peer_ip,
            listener,
            _pd: pd,
        };
        x.post_recv()?;
        Ok(x)
    }

    /// The peer's address.
    pub fn peer_ip(&self) -> IpAddr {
        self.peer_ip
    }

    fn post_recv(&self) -> anyhow::Result<()> {
        let wr = RecvWr {
            wr_id: RECV_WR_ID,
            sg_list: vec![Sge {
                addr: self.mr.addr,
                length: SEND_OFFSET as u32,
                lkey: self.mr.keys.lkey,
            }],
        };
        Ok(self.hca.context().post_recv(self.conn.qp().qpn(), &[wr])?)
    }

    /// Notes one completion of the exchange QP; true for our SEND's.
    fn take(&mut self, what: &str, wc: &WorkCompletion) -> anyhow::Result<bool> {
        if wc.status != WcStatus::Success {
            bail!(
                "the exchange connection failed while we tried to {what}: {} (did the peer stop?)",
                wc.status.as_str()
            );
        }
        if wc.opcode == WcOpcode::Recv {
            self.pending = Some(wc.byte_len);
            return Ok(false);
        }
        Ok(wc.wr_id == SEND_WR_ID)
    }

    fn send(&mut self, what: &'static str, msg: &[u8]) -> anyhow::Result<()> {
        let ctx = self.hca.context();
        ctx.write_mr(&self.mr, SEND_OFFSET, msg)?;
        let wr = SendWr {
            wr_id: SEND_WR_ID,
            opcode: WrOpcode::Send,
            sg_list: vec![Sge {
                addr: self.mr.addr + SEND_OFFSET as u64,
                length: msg.len() as u32,
                lkey: self.mr.keys.lkey,
            }],
            flags: SendFlags::SIGNALED,
            ..SendWr::default()
        };
        ctx.post_send(self.conn.qp().qpn(), &[wr])?;
        let deadline = Instant::now() + self.timeout;
        let mut wcs = [crate::device::blank_wc(); 4];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "no acknowledgement of our message within {:.1} s while we tried to {what}",
                    self.timeout.as_secs_f64()
                );
            }
            let n = self.hca.context().wait_cq(self.cq.handle(), &mut wcs, left);
            let mut sent = false;
            for wc in &wcs[..n] {
                sent |= self.take(what, wc)?;
            }
            if sent {
                return Ok(());
            }
        }
    }

    fn recv(&mut self, what: &'static str, buf: &mut [u8]) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.timeout;
        let mut wcs = [crate::device::blank_wc(); 4];
        while self.pending.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "the peer sent nothing for {:.1} s while we waited to {what}",
                    self.timeout.as_secs_f64()
                );
            }
            let n = self.hca.context().wait_cq(self.cq.handle(), &mut wcs, left);
            for wc in &wcs[..n] {
                self.take(what, wc)?;
            }
        }
        let len = self.pending.take().unwrap_or(0) as usize;
        if len != buf.len() {
            bail!(
                "the peer's message to {what} has {len} bytes instead of {} (is it a matching tool with -R?)",
                buf.len()
            );
        }
        self.hca.context().read_mr(&self.mr, 0, buf)?;
        // perftest reposts before answering, so the peer's next message always has a buffer.
        self.post_recv()
    }

    /// One step, the client first (perftest's `ctx_xchg_data_rdma`).
    pub fn exchange(
        &mut self,
        what: &'static str,
        mine: &[u8],
        theirs: &mut [u8],
    ) -> anyhow::Result<()> {
        if self.client {
            self.send(what, mine)?;
            self.recv(what, theirs)
        } else {
            self.recv(what, theirs)?;
            self.send(what, mine)
        }
    }

    /// One key handshake with the binary message.
    pub fn keys(&mut self, mine: &PerftestDest) -> anyhow::Result<PerftestDest> {
        let mut theirs = [0u8; CM_KEY_MSG_LEN];
        self.exchange("exchange QP keys", &dest_to_cm_bytes(mine), &mut theirs)?;
        Ok(dest_from_cm_bytes(&theirs))
    }

    /// Whether the peer's next message has arrived (kept for the next receive); fails if
    /// the peer disconnected or the connection broke.
    pub fn poll_peer(&mut self, what: &'static str) -> anyhow::Result<bool> {
        if self.pending.is_some() {
            return Ok(true);
        }
        let mut wcs = [crate::device::blank_wc(); 4];
        let n = self.hca.context().poll_cq(self.cq.handle(), &mut wcs);
        for wc in &wcs[..n] {
            self.take(what, wc)?;
        }
        if self.pending.is_some() {
            return Ok(true);
        }
        if self.conn.wait_disconnected(Duration::ZERO).is_ok() {
            bail!("the peer disconnected the exchange connection while we waited to {what}");
        }
        Ok(false)
    }

    /// Disconnects (DREQ, waiting briefly for the DREP); a peer that went first is fine.
    pub fn disconnect(&mut self) {
        let _ = self.conn.disconnect(&[], Duration::from_secs(1));
    }
}

fn cm_error(e: CmApiError, peer: SocketAddr) -> anyhow::Error {
    match e {
        CmApiError::Rejected {
            reason: RejectReason::InvalidServiceId,
            ..
        } => anyhow!(
            "connection REJECTED by {peer}: nobody listens on rdma_cm port {} (is the server running?)",
            peer.port()
        ),
        e => anyhow::Error::new(e).context(format!("cannot connect to {peer} through rdma_cm")),
    }
}

/// The test QPs' settings: perftest's `rdma_cm_route_handler` / `connection_request_handler`
/// (READ and atomics offer `out_reads` each way, retry counts 7).
fn test_qp(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    p: &Params,
    mtu: Mtu,
) -> anyhow::Result<PreparedQueuePair> {
    let reads = if matches!(p.verb, Verb::Read | Verb::Atomic) {
        p.out_reads.min(16) as u8
    } else {
        0
    };
    Ok(pd
        .create_qp(cq, cq, QpType::Rc)
        .set_max_send_wr(p.tx_depth.max(16) + 1)
        .set_max_recv_wr(p.rx_depth.max(16))
        .set_max_send_sge(1)
        .set_max_recv_sge(1)
        .set_max_inline_data(p.inline)
        .set_access(
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        )
        .set_path_mtu(mtu)
        .set_timeout(p.qp_timeout)
        .set_retry_count(7)
        .set_rnr_retry(7)
        .set_max_rd_atomic(reads)
        .set_max_dest_rd_atomic(reads)
        .build()?)
}

/// The client's test connections: one per QP to the server's rdma_cm port, asking again
/// while the server does not listen yet (see the module text).
pub fn connect_test_qps(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    p: &Params,
    mtu: Mtu,
    server: SocketAddr,
    timeout: Duration,
) -> anyhow::Result<Vec<CmConnection>> {
    let mut conns = Vec::with_capacity(p.qps);
    for i in 0..p.qps {
        let mut tries = 0;
        let conn = loop {
            match CmConnection::connect(test_qp(pd, cq, p, mtu)?, server, &[], timeout) {
                Ok(c) => break c,
                Err(CmApiError::Rejected {
                    reason: RejectReason::InvalidServiceId,
                    ..
                }) if tries < REJECTED_RETRIES => {
                    tries += 1;
                    std::thread::sleep(REJECTED_RETRY_DELAY);
                }
                Err(e) => {
                    return Err(cm_error(e, server))
                        .with_context(|| format!("connect test QP {i} (after {tries} retries)"))
                }
            }
        };
        conns.push(conn);
    }
    Ok(conns)
}

/// The server's test connections: accepts one per QP on `listener` (the exchange's, still
/// open) or, without one, on a new listener on `port`.
#[allow(clippy::too_many_arguments)]
pub fn accept_test_qps(
    listener: Option<CmListener>,
    hca: &Hca,
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    p: &Params,
    mtu: Mtu,
    port: u16,
    timeout: Duration,
) -> anyhow::Result<Vec<CmConnection>> {
    let listener = match listener {
        Some(l) => l,
        None => CmListener::bind(hca, port)
            .with_context(|| format!("cannot listen on rdma_cm port {port} for the test QPs"))?,
    };
    let mut conns = Vec::with_capacity(p.qps);
    for i in 0..p.qps {
        let conn = listener
            .accept(test_qp(pd, cq, p, mtu)?, &[], timeout)
            .with_context(|| format!("accept test QP {i}"))?;
        conns.push(conn);
    }
    Ok(conns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_message_is_perftests_big_endian_struct() {
        let d = PerftestDest {
            lid: 0,
            out_reads: 16,
            qpn: 0x12_3456,
            psn: 0xab_cdef,
            rkey: 0x1122_3344,
            vaddr: 0x0000_7f00_dead_beef,
            gid: Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 254]),
            srqn: 0,
        };
        let b = dest_to_cm_bytes(&d);
        // struct pingpong_dest on x86-64: vaddr is 8-aligned at 24, the GID at 32.
        assert_eq!(&b[4..8], &[0, 0, 0, 16]);
        assert_eq!(&b[8..12], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(&b[16..20], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&b[20..24], &[0; 4]);
        assert_eq!(&b[24..32], &[0, 0, 0x7f, 0, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&b[44..48], &[10, 99, 0, 254]);
        assert_eq!(dest_from_cm_bytes(&b), d);
    }
}
