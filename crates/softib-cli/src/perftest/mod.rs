//! The perftest-style tools: `softib write-bw`, `read-bw`, `send-bw`, `atomic-bw`,
//! `write-lat`, `read-lat`, `send-lat`, `atomic-lat`.
//!
//! Each runs perftest 4.5's TCP exchange (softib-net's `oob::perftest` messages) in the
//! same order as the stock tool of the same name, so either side may be a stock
//! `ib_write_bw` (etc.) on a Linux rxe host: versions, system data, MTU, the key messages
//! (N before the QPs are connected, N + 1 after, and one more before for the READ, WRITE
//! and atomic latency tests), then the test with the tool's synchronisation points, then
//! the reports and the closing handshake. `bw` and `lat` run the tests; `report` prints
//! perftest's tables. With `-R` the exchange and the QPs connect through rdma_cm instead
//! (`exchange` is the channel either way, `rdma_cm` the connections), as perftest's `-R`.

pub mod bw;
pub mod exchange;
pub mod lat;
pub mod params;
pub mod rdma_cm;
pub mod report;
mod tool;

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use softib_net::context::{ConnectOptions, Context, MemoryRegion};
use softib_net::oob::endpoint::Endpoint;
use softib_net::oob::perftest::{
    i32_msg, parse_i32_msg, MtuMsg, PerftestDest, PerftestVersion, VERSION_MSG_LEN,
};
use softib_net::oob::stream::OobStream;
use softib_net::verbs::{CmConnection, CompletionQueue, Hca, ProtectionDomain};
use softib_transport::{
    AccessFlags, AhAttr, AhHandle, CqHandle, GlobalRoute, Mtu, PdHandle, QpCap, QpInitAttr, QpType,
    WorkCompletion,
};

use crate::device::Publisher;
use exchange::Exchange;
pub use params::{AtomicType, Conn, Kind, Params, PerfArgs, Verb};
pub use tool::run;

/// GRH room a UD receive buffer needs in front of the payload (IBA 11.4.1.2).
const GRH_LEN: u64 = 40;
/// perftest's Q_Key (`DEF_QKEY`).
const PERFTEST_QKEY: u32 = 0x1111_1111;

/// A tool's device: the verbs-level handle (which rdma_cm's connections need), used as
/// the [`Context`] it wraps.
pub struct Device(Hca);

impl std::ops::Deref for Device {
    type Target = Context;
    fn deref(&self) -> &Context {
        self.0.context()
    }
}

/// An established test: exchange connection, device, buffers, connected QPs.
pub struct Session {
    /// The test QPs' rdma_cm connections (`-R`; empty otherwise). First, so that they are
    /// dropped before the exchange and the device.
    pub cm_conns: Vec<CmConnection>,
    /// The exchange connection.
    pub oob: Exchange,
    /// Protection domain.
    pub pd: PdHandle,
    /// The one CQ of every QP, send and receive.
    pub cq: CqHandle,
    /// The buffer: `qps` send slots, then `qps` receive slots.
    pub mr: MemoryRegion,
    /// Bytes per slot.
    pub slot: u64,
    /// Our QPs.
    pub qpns: Vec<u32>,
    /// What we told the peer, per QP.
    pub my: Vec<PerftestDest>,
    /// What the peer told us, per QP.
    pub rem: Vec<PerftestDest>,
    /// UD address handles, per QP.
    pub ahs: Vec<Option<AhHandle>>,
    /// `-c RD`: the EE context each QP sends over (EEC i mod `--rd-eecs`).
    pub eecs: Vec<u32>,
    /// The MTU both sides use.
    pub mtu: Mtu,
    /// Counters file.
    pub publisher: Publisher,
    /// Silence limit.
    pub timeout: Duration,
    /// The verbs objects behind `pd` and `cq` (kept alive with the session).
    _verbs: (ProtectionDomain, CompletionQueue),
    /// The device (last: everything above lives on it).
    pub ctx: Device,
}

impl Session {
    /// Address of send slot `i`.
    pub fn send_addr(&self, i: usize) -> u64 {
        self.mr.addr + i as u64 * self.slot
    }

    /// Offset of receive slot `i` in the buffer.
    pub fn recv_offset(&self, i: usize) -> u64 {
        (self.my.len() + i) as u64 * self.slot
    }

    /// One key-message handshake (perftest's `ctx_hand_shake`) with QP `i`'s keys.
    pub fn handshake(&mut self, i: usize) -> anyhow::Result<PerftestDest> {
        self.oob.keys(&self.my[i])
    }

    /// Waits for the peer's next exchange message while RDMA traffic may still be running:
    /// returns when it is there, fails if the connection closes or if neither a message
    /// nor a datagram arrives for the silence limit.
    pub fn wait_for_peer(&mut self, what: &'static str) -> anyhow::Result<()> {
        let mut last_rx = self.ctx.counters().1.rx_datagrams;
        let mut quiet_since = Instant::now();
        let mut wcs = [crate::device::blank_wc(); 16];
        loop {
            // Drive the device from this thread (the responder's work happens in the
            // device's `process`, which `poll_cq` runs) instead of leaving each batch to a
            // wake-up of the device thread, which costs tens of microseconds per round trip;
            // look at the exchange connection about once a millisecond.
            let slice_end = Instant::now() + Duration::from_millis(1);
            let mut polls = 0u32;
            let mut idle = IdleYield::default();
            loop {
                let (n, moved) = self.poll_progress(&mut wcs)?;
                idle.turn(&self.ctx, n > 0 || moved);
                polls = polls.wrapping_add(1);
                if polls % 64 == 0 && Instant::now() >= slice_end {
                    break;
                }
            }
            if self.oob.poll_peer(what)? {
                return Ok(());
            }
            let (_, drv) = self.ctx.counters();
            if drv.rx_datagrams != last_rx {
                last_rx = drv.rx_datagrams;
                quiet_since = Instant::now();
            } else {
                // Nothing arrived for a whole slice: leave the core to others for a while
                // (the device thread takes over meanwhile).
                std::thread::sleep(Duration::from_millis(1));
            }
            if quiet_since.elapsed() > self.timeout {
                bail!(
                    "the peer sent nothing for {:.1} s while we waited to {what} (did it stop or lose its network?)",
                    self.timeout.as_secs_f64()
                );
            }
            self.publisher.tick(&self.ctx);
        }
    }

    /// perftest's `ctx_close_connection`: one more handshake, then "done". The peer's
    /// "done" is read too (perftest leaves it unread), so our close never resets a
    /// connection with data in flight; a peer that closed first is not an error.
    pub fn close(&mut self) -> anyhow::Result<()> {
        self.handshake(0)?;
        self.oob.send_done()
    }

    /// `-R`: disconnects the test QPs and then the exchange (DREQs, as perftest's
    /// `destroy_ctx`); a peer that disconnected first is fine.
    pub fn disconnect(&mut self) {
        for c in &mut self.cm_conns {
            let _ = c.disconnect(&[], Duration::from_secs(1));
        }
        if let Exchange::Cm(x) = &mut self.oob {
            x.disconnect();
        }
    }

    /// Takes completions, failing on an error status with the verbs text.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> anyhow::Result<usize> {
        Ok(self.poll_progress(out)?.0)
    }

    /// [`Session::poll`], also saying whether the device moved a datagram.
    pub fn poll_progress(&self, out: &mut [WorkCompletion]) -> anyhow::Result<(usize, bool)> {
        let (n, moved) = self.ctx.poll_cq_progress(self.cq, out);
        for wc in &out[..n] {
            if wc.status != softib_transport::WcStatus::Success {
                bail!(
                    "completion error on QP {:#x}: {} (wr_id {:#x}, vendor error {:#x})",
                    wc.qp_num,
                    wc.status.as_str(),
                    wc.wr_id,
                    wc.vendor_err
                );
            }
        }
        Ok((n, moved))
    }
}

/// Turns of a polling loop without progress (no completion, no datagram in or out) after
/// which it sleeps until a datagram arrives: about 25-50 us of nothing at 0.4-0.8 us a turn,
/// longer than a loopback round trip, so an undisturbed run never sleeps. On a machine with
/// more runnable threads than cores, the peer this loop waits for may be queued behind it on
/// its own core; spinning on would only burn the time slice the peer needs.
const IDLE_TURNS_BEFORE_SLEEP: u32 = 64;

/// The longest such sleep: the engine's timers end it sooner when due.
const IDLE_SLEEP_MAX: Duration = Duration::from_millis(1);

/// Counts idle turns of a polling loop and, after [`IDLE_TURNS_BEFORE_SLEEP`], sleeps until
/// the device's socket is readable ([`softib_net::Context::sleep_until_readable`]). It
/// used to `sched_yield`, which on a busy machine hands the core to any other runnable job
/// for a whole time slice: FETCH_AND_ADD in `bench/run.sh` unpinned at load 12 ran at
/// 0.05-0.07 M ops/s against 0.36 pinned (docs/design/net.md, "Idle polling loops").
#[derive(Debug, Default)]
pub(crate) struct IdleYield(u32);

impl IdleYield {
    /// One turn of the loop; `progressed` when it completed, received or sent anything.
    pub(crate) fn turn(&mut self, ctx: &Context, progressed: bool) {
        if progressed {
            self.0 = 0;
            return;
        }
        self.0 += 1;
        if self.0 >= IDLE_TURNS_BEFORE_SLEEP {
            self.0 = 0;
            ctx.sleep_until_readable(IDLE_SLEEP_MAX);
        }
    }
}

/// Connects the exchange, opens the device, runs the exchange up to connected QPs and
/// prints perftest's test information.
fn establish(p: &Params, args: &PerfArgs) -> anyhow::Result<Session> {
    let timeout = args.dev.timeout();
    let (mut oob, ctx) = if p.rdma_cm {
        open_cm_exchange(p, args, timeout)?
    } else {
        open_tcp_exchange(p, args, timeout)?
    };
    let publisher = Publisher::new(
        args.dev.counters.clone(),
        format!("{} {}", p.tool, if p.client { "client" } else { "server" }),
    );

    // Versions, system data, MTU (perftest: exchange_versions, check_sys_data, check_mtu).
    let mut v = [0u8; VERSION_MSG_LEN];
    oob.exchange(
        "exchange perftest versions",
        &PerftestVersion::softib().to_bytes(),
        &mut v,
    )?;
    let theirs = PerftestVersion::parse(&v)?;
    if theirs.number() < 5.70 {
        bail!(
            "the peer speaks perftest {}, older than 5.70, whose exchange softib does not implement",
            theirs.text
        );
    }
    let mut b4 = [0u8; 4];
    oob.exchange("exchange page size", &i32_msg(4096), &mut b4)?;
    parse_i32_msg(&b4)?;
    oob.exchange("exchange cache line size", &i32_msg(64), &mut b4)?;
    parse_i32_msg(&b4)?;
    let my_mtu = p.mtu.unwrap_or(ctx.mtu()).min(ctx.mtu());
    let mine = MtuMsg::from_bytes_mtu(my_mtu.bytes()).ok_or_else(|| anyhow!("bad MTU"))?;
    let mut m = [0u8; 2];
    oob.exchange("exchange MTU", &mine.to_bytes(), &mut m)?;
    let peer_mtu = MtuMsg::parse(&m)?.mtu_bytes();
    let mtu = Mtu::from_bytes(peer_mtu.min(my_mtu.bytes())).unwrap_or(Mtu::M256);
    if p.conn == Conn::Ud && p.sizes.len() == 1 && p.max_size() > u64::from(mtu.bytes()) {
        bail!(
            "a UD message must fit one packet: {} bytes exceed the MTU of {}",
            p.max_size(),
            mtu.bytes()
        );
    }

    // Resources: one buffer with a send slot and a receive slot per QP.
    let slot = (p.max_size() + GRH_LEN).div_ceil(4096) * 4096;
    let total = slot
        .checked_mul(2 * p.qps as u64)
        .filter(|t| *t <= 4 << 30)
        .ok_or_else(|| {
            anyhow!(
                "{} QPs of {}-byte messages need more than 4 GiB of buffers",
                p.qps,
                p.max_size()
            )
        })?;
    let verbs_pd = ctx.0.alloc_pd();
    let depth = (p.tx_depth + p.rx_depth + 16) * p.qps as u32;
    let verbs_cq = ctx.0.create_cq().set_entries(depth).build()?;
    let (pd, cq) = (verbs_pd.handle(), verbs_cq.handle());
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = ctx.reg_mr(pd, total as usize, access)?;
    let mut qpns = Vec::new();
    let mut my = Vec::new();
    let mut cm_conns = Vec::new();
    // RD: a domain, its EE contexts (each carries the messages of every QP using it), and
    // the EEC of each QP (what the peer learns in the SRQN field of the exchange).
    let mut eecs = Vec::new();
    let mut eec_psns = Vec::new();
    let rdd = (p.conn == Conn::Rd).then(|| ctx.alloc_rdd());
    if let Some(rdd) = rdd {
        let per_eec = p.qps.div_ceil(p.rd_eecs) as u32;
        let depth = (p.tx_depth.max(16) + 1) * per_eec;
        let all: Vec<u32> = (0..p.rd_eecs)
            .map(|_| ctx.create_eec_number(rdd, depth))
            .collect::<Result<_, _>>()?;
        let psns: Vec<u32> = all.iter().map(|_| ctx.random_psn()).collect();
        for i in 0..p.qps {
            eecs.push(all[i % p.rd_eecs]);
            eec_psns.push(psns[i % p.rd_eecs]);
        }
    }
    if p.rdma_cm {
        // perftest's create_rdma_cm_connection: a handshake, the test connections through
        // rdma_cm to the exchange's port, another handshake.
        let blank = PerftestDest {
            lid: 0,
            out_reads: 0,
            qpn: 0,
            psn: 0,
            rkey: 0,
            vaddr: 0,
            gid: Some([0; 16]),
            srqn: 0,
        };
        oob.keys(&blank)?;
        cm_conns = if p.client {
            let server = SocketAddr::new(oob.peer_ip(), args.port);
            rdma_cm::connect_test_qps(&verbs_pd, &verbs_cq, p, mtu, server, timeout)?
        } else {
            let listener = match &mut oob {
                Exchange::Cm(x) => x.take_listener(),
                Exchange::Tcp(_) => None,
            };
            rdma_cm::accept_test_qps(
                listener, &ctx.0, &verbs_pd, &verbs_cq, p, mtu, args.port, timeout,
            )?
        };
        oob.keys(&blank)?;
    }
    for i in 0..p.qps {
        if let Some(c) = cm_conns.get(i) {
            let qpn = c.qp().qpn();
            qpns.push(qpn);
            my.push(PerftestDest {
                lid: 0,
                out_reads: p.out_reads,
                qpn,
                psn: ctx.random_psn(),
                rkey: mr.keys.rkey,
                vaddr: mr.addr + (p.qps + i) as u64 * slot,
                gid: Some(ctx.gid()),
                srqn: 0,
            });
            continue;
        }
        let init = QpInitAttr {
            qp_type: p.conn.qp_type(),
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: p.tx_depth.max(16) + 1,
                max_recv_wr: p.rx_depth.max(16),
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: p.inline,
            },
            sq_sig_all: false,
        };
        let qpn = match rdd {
            Some(rdd) => ctx.create_rd_qp(pd, rdd, init)?,
            None => ctx.create_qp(pd, init)?,
        };
        qpns.push(qpn);
        my.push(PerftestDest {
            lid: 0,
            out_reads: p.out_reads,
            qpn,
            // RD: the PSN and number of the QP's EEC (softib to softib only).
            psn: eec_psns.get(i).copied().unwrap_or_else(|| ctx.random_psn()),
            rkey: mr.keys.rkey,
            vaddr: mr.addr + (p.qps + i) as u64 * slot,
            gid: Some(ctx.gid()),
            srqn: eecs.get(i).copied().unwrap_or(0),
        });
    }
    let mut s = Session {
        cm_conns,
        oob,
        pd,
        cq,
        mr,
        slot,
        qpns,
        rem: Vec::new(),
        my,
        ahs: vec![None; p.qps],
        eecs,
        mtu,
        publisher,
        timeout,
        _verbs: (verbs_pd, verbs_cq),
        ctx,
    };
    print_test_info(p, &s, args);

    // Keys before connecting (READ, WRITE and atomic latency tests do one more first).
    if p.kind == Kind::Lat && p.verb != Verb::Send {
        s.handshake(0)?;
    }
    for i in 0..p.qps {
        let r = s.handshake(i)?;
        s.rem.push(r);
    }
    let peer_ip = s.oob.peer_ip();
    if !p.rdma_cm {
        for i in 0..p.qps {
            connect_qp(&mut s, p, i, peer_ip)?;
        }
    }
    for i in 0..p.qps {
        print_dest("local", &s.my[i], p.verb);
    }
    for i in 0..p.qps {
        s.handshake(i)?;
        print_dest("remote", &s.rem[i], p.verb);
    }
    // The extra handshake after RTR, so neither side sends before the other is ready.
    s.handshake(0)?;
    s.publisher.tick(&s.ctx);
    Ok(s)
}

/// perftest's TCP exchange connection, then the device on `--bind` or on the
/// connection's local address.
fn open_tcp_exchange(
    p: &Params,
    args: &PerfArgs,
    timeout: Duration,
) -> anyhow::Result<(Exchange, Device)> {
    let bind = args.dev.bind_addr()?;
    let oob = match &args.host {
        Some(host) => OobStream::connect(host, args.port, timeout).with_context(|| {
            format!("cannot reach the {} server at {host}:{}", p.tool, args.port)
        })?,
        None => {
            let ip = bind.map(|b| b.ip()).unwrap_or(IpAddr::from([0, 0, 0, 0]));
            let listener = TcpListener::bind(SocketAddr::new(ip, args.port))
                .with_context(|| format!("cannot listen on {ip} port {}", args.port))?;
            println!();
            println!("************************************");
            println!("* Waiting for client to connect... *");
            println!("************************************");
            let (stream, _) = listener.accept().context("accept the client")?;
            OobStream::from_stream(stream, softib_net::oob::stream::Role::Server, timeout)?
        }
    };
    let local_ip = match oob.local_addr()?.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    let ctx = args.dev.open(local_ip, p.mtu)?;
    Ok((Exchange::Tcp(oob), Device(Hca::from_context(ctx))))
}

/// `-R`: the device first (the server's on `--bind`; the client's on `--bind` or on the
/// address the host routes to the server from, as rdma_resolve_addr picks its source),
/// then the exchange connection through rdma_cm.
fn open_cm_exchange(
    p: &Params,
    args: &PerfArgs,
    timeout: Duration,
) -> anyhow::Result<(Exchange, Device)> {
    let bind = args.dev.bind_addr()?;
    match &args.host {
        Some(host) => {
            let server = (host.as_str(), args.port)
                .to_socket_addrs()
                .with_context(|| format!("cannot resolve {host}"))?
                .next()
                .ok_or_else(|| anyhow!("{host} has no address"))?;
            let local_ip = match bind {
                Some(b) => b.ip(),
                None => route_source(server.ip())?,
            };
            let ctx = Device(Hca::from_context(args.dev.open(local_ip, p.mtu)?));
            let x = rdma_cm::CmExchange::connect(&ctx.0, server, timeout)?;
            Ok((Exchange::Cm(Box::new(x)), ctx))
        }
        None => {
            let b = bind.ok_or_else(|| {
                anyhow!("-R as a server needs --bind ADDR: rdma_cm listens on a device, and a softib device has one address")
            })?;
            let ctx = Device(Hca::from_context(args.dev.open(b.ip(), p.mtu)?));
            println!();
            println!("************************************");
            println!("* Waiting for client to connect... *");
            println!("************************************");
            let x = rdma_cm::CmExchange::accept(&ctx.0, args.port, timeout)?;
            Ok((Exchange::Cm(Box::new(x)), ctx))
        }
    }
}

/// The local address the host's routing table picks towards `peer` (a connected UDP
/// socket sends nothing).
fn route_source(peer: IpAddr) -> anyhow::Result<IpAddr> {
    let any: IpAddr = if peer.is_ipv4() {
        IpAddr::from([0u8; 4])
    } else {
        IpAddr::from([0u16; 8])
    };
    let sock = UdpSocket::bind(SocketAddr::new(any, 0)).context("route lookup socket")?;
    sock.connect(SocketAddr::new(peer, 4791))
        .with_context(|| format!("no route to {peer}"))?;
    Ok(sock.local_addr().context("route lookup")?.ip())
}

/// Moves QP `i` to RTS towards the peer's keys (UD: also creates the address handle).
fn connect_qp(s: &mut Session, p: &Params, i: usize, peer_ip: IpAddr) -> anyhow::Result<()> {
    let rem = s.rem[i];
    let gid = match rem.gid {
        Some(g) if g != [0; 16] => Ipv6Addr::from(g),
        // A peer without a GID: its address is the exchange connection's.
        _ => match peer_ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        },
    };
    let ours_v4 = s.ctx.local_addr().is_ipv4();
    if gid.to_ipv4_mapped().is_some() != ours_v4 {
        bail!(
            "the peer's GID {gid} is of the other IP family than our device {} (use --bind with an address of the peer's family)",
            s.ctx.local_addr()
        );
    }
    let endpoint = Endpoint {
        qpn: rem.qpn,
        psn: rem.psn,
        gid,
        lid: 0,
        udp: None,
        mtu: Some(s.mtu.bytes()),
        qkey: None,
        regions: Vec::new(),
    };
    let opts = ConnectOptions {
        mtu: s.mtu,
        max_rd_atomic: p.out_reads.min(rem.out_reads.max(1)).min(16) as u8,
        max_dest_rd_atomic: p.out_reads.min(16) as u8,
        qkey: PERFTEST_QKEY,
        timeout: p.qp_timeout,
        ..ConnectOptions::default()
    };
    s.ctx
        .connect(s.qpns[i], p.conn.qp_type(), s.my[i].psn, &endpoint, &opts)
        .with_context(|| format!("cannot connect QP {:#x}", s.qpns[i]))?;
    if p.conn == Conn::Rd {
        connect_eec(s, p, i, &endpoint, &opts)?;
    }
    if p.conn == Conn::Ud {
        let ah = s.ctx.create_ah(
            s.pd,
            AhAttr {
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                grh: Some(GlobalRoute {
                    dgid: gid.octets(),
                    flow_label: 0,
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                }),
            },
        )?;
        s.ahs[i] = Some(ah);
    }
    Ok(())
}

/// `-c RD`: the first QP of each EE context connects it to the peer's (whose number came
/// in the exchange's SRQN field), as an RC connection (IBA 10.2.7).
fn connect_eec(
    s: &mut Session,
    p: &Params,
    i: usize,
    endpoint: &Endpoint,
    opts: &ConnectOptions,
) -> anyhow::Result<()> {
    let k = i % p.rd_eecs;
    let theirs = s.rem[i].srqn;
    if s.rem[i].srqn == 0 || s.rem[k].srqn != theirs {
        bail!(
            "-c RD: the peer's QPs do not share EE contexts as ours do (is the peer softib, with the same -q and --rd-eecs?)"
        );
    }
    if i >= p.rd_eecs {
        return Ok(());
    }
    let remote = Endpoint {
        qpn: theirs,
        psn: s.rem[i].psn,
        ..endpoint.clone()
    };
    s.ctx
        .connect(s.eecs[i], QpType::Rc, s.my[i].psn, &remote, opts)
        .with_context(|| format!("cannot connect EEC {:#x}", s.eecs[i]))?;
    Ok(())
}

/// perftest's `ctx_print_test_info`.
fn print_test_info(p: &Params, s: &Session, args: &PerfArgs) {
    println!("{}", report::RESULT_LINE);
    let mut title = format!("                    {} ", p.verb.perftest_name());
    if p.verb == Verb::Atomic {
        title.push_str(match p.atomic {
            AtomicType::CMP_AND_SWAP => "CMP_AND_SWAP ",
            AtomicType::FETCH_AND_ADD => "FETCH_AND_ADD ",
        });
    }
    title.push_str(match p.kind {
        Kind::Bw => "BW Test",
        Kind::Lat => "Latency Test",
    });
    println!("{title}");
    println!(
        " Dual-port       : OFF\t\tDevice         : softib {}",
        s.ctx.local_addr()
    );
    println!(" Number of qps   : {}\t\tTransport type : IB", p.qps);
    println!(
        " Connection type : {}\t\tUsing SRQ      : OFF",
        p.conn.name()
    );
    println!(" PCIe relax order: Unsupported");
    println!(" ibv_wr* API     : OFF");
    if p.client {
        println!(" TX depth        : {}", p.tx_depth);
    }
    if p.verb == Verb::Send && !p.client {
        println!(" RX depth        : {}", p.rx_depth);
    }
    if p.kind == Kind::Bw {
        println!(" CQ Moderation   : {}", p.cq_mod);
    }
    println!(" Mtu             : {}[B]", s.mtu.bytes());
    println!(" Link type       : Ethernet");
    if let Some(g) = args.gid_index {
        println!(" GID index       : {g}");
    }
    if matches!(p.verb, Verb::Read | Verb::Atomic) {
        println!(" Outstand reads  : {}", p.out_reads);
    } else {
        println!(" Max inline data : {}[B]", p.inline);
    }
    if p.rdma_cm {
        println!(" rdma_cm QPs\t : ON");
        println!(" Data ex. method : rdma_cm");
    } else {
        println!(" rdma_cm QPs\t : OFF");
        println!(" Data ex. method : Ethernet");
    }
    println!("{}", report::RESULT_LINE);
}

/// C's `%#0Nx`: zero-padded to `width` including the "0x", which zero does not get.
fn alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// perftest's `ctx_print_pingpong_data`.
fn print_dest(side: &str, d: &PerftestDest, verb: Verb) {
    let mut line = format!(
        " {side} address: LID {} QPN {} PSN {}",
        alt_hex(u64::from(d.lid), 4),
        alt_hex(u64::from(d.qpn), 6),
        alt_hex(u64::from(d.psn), 6)
    );
    if verb == Verb::Read {
        line.push_str(&format!(" OUT {}", alt_hex(u64::from(d.out_reads), 4)));
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        line.push_str(&format!(
            " RKey {} VAddr {}",
            alt_hex(u64::from(d.rkey), 8),
            alt_hex(d.vaddr, 16)
        ));
    }
    println!("{line}");
    if let Some(g) = d.gid {
        let parts: Vec<String> = g.iter().map(|b| format!("{b:02}")).collect();
        println!(" GID: {}", parts.join(":"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_alternate_hex_matches_printf() {
        assert_eq!(alt_hex(0, 4), "0000");
        assert_eq!(alt_hex(0x11, 6), "0x0011");
        assert_eq!(alt_hex(0xabcdef, 6), "0xabcdef");
    }
}
