//! `softib pingpong`: an RC SEND ping-pong that pairs with rdma-core's `ibv_rc_pingpong`:
//! the same options where they apply, its 52-byte TCP message (softib-net's
//! `oob::pingpong`), its exchange order (the client writes its message, reads the
//! server's, writes "done"; the server reads, connects its QP, answers, reads "done") and
//! its two result lines. As in ibv_rc_pingpong, one buffer is both sent and received into,
//! so the server echoes what the client sent; `-c` checks it came back intact.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use softib_net::context::{ConnectOptions, Context};
use softib_net::oob::endpoint::Endpoint;
use softib_net::oob::pingpong::{parse_done, PingpongDest, PINGPONG_DONE, PINGPONG_MSG_LEN};
use softib_net::oob::stream::{OobStream, Role};
use softib_net::oob::DEFAULT_OOB_PORT;
use softib_transport::{
    AccessFlags, Mtu, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendWr, Sge, WcOpcode,
    WcStatus, WrOpcode,
};

use crate::device::{DeviceArgs, Publisher};

/// Options, spelled as ibv_rc_pingpong spells them.
#[derive(Debug, Clone, clap::Args)]
pub struct PingpongArgs {
    /// Server to connect to; without it, wait for a client.
    pub host: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_OOB_PORT)]
    pub port: u16,
    /// IB device (accepted for compatibility; the device is the one on --bind).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// IB port (accepted for compatibility; a softib device has one port).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u32,
    /// Message size, bytes.
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    pub size: u32,
    /// Path MTU, bytes.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: u32,
    /// Receives posted at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u32,
    /// Service level (accepted; RoCEv2 carries none).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// GID index (accepted; a softib device has one GID, always sent).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<i32>,
    /// On-demand paging (accepted; softib memory is always resident).
    #[arg(short = 'o', long = "odp")]
    pub odp: bool,
    /// Implicit on-demand paging (accepted, as -o).
    #[arg(short = 'O', long = "iodp")]
    pub iodp: bool,
    /// Prefetch an ODP MR (accepted, as -o).
    #[arg(short = 'P', long = "prefetch")]
    pub prefetch: bool,
    /// Completion timestamps (not supported by softib).
    #[arg(short = 't', long = "ts")]
    pub ts: bool,
    /// Validate the received buffer.
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Device memory (not supported by softib).
    #[arg(short = 'j', long = "dm")]
    pub dm: bool,
    /// New post-send API (accepted; the same operation).
    #[arg(short = 'N', long = "new_send")]
    pub new_send: bool,
    /// Local ACK timeout exponent, 4.096 us x 2^N (ibv_rc_pingpong uses 14, 67 ms; a
    /// larger value rides out a peer descheduled on a busy host).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const PAGE: usize = 4096;

/// The byte `-c` expects at offset `i` (a page-number pattern, so a misplaced page shows).
fn pattern(i: usize) -> u8 {
    (i / PAGE) as u8 ^ 0x5a
}

/// Runs the ping-pong.
pub fn run(a: &PingpongArgs) -> anyhow::Result<()> {
    a.dev.validate()?;
    if a.ts {
        bail!("-t (completion timestamps) is not supported by softib devices");
    }
    if a.dm {
        bail!("-j (device memory) is not supported by softib devices");
    }
    let mtu = Mtu::from_bytes(a.mtu)
        .ok_or_else(|| anyhow!("-m {}: the MTU must be 256, 512, 1024, 2048 or 4096", a.mtu))?;
    if a.size == 0 || a.iters == 0 || a.rx_depth == 0 {
        bail!("-s, -n and -r must be at least 1");
    }
    let timeout = a.dev.timeout();
    let client = a.host.is_some();
    let mut oob = match &a.host {
        Some(host) => OobStream::connect(host, a.port, timeout)
            .with_context(|| format!("cannot reach the pingpong server at {host}:{}", a.port))?,
        None => {
            let ip = a
                .dev
                .bind_addr()?
                .map(|b| b.ip())
                .unwrap_or(IpAddr::from([0, 0, 0, 0]));
            let l = TcpListener::bind(SocketAddr::new(ip, a.port))
                .with_context(|| format!("cannot listen on {ip} port {}", a.port))?;
            let (stream, _) = l.accept().context("accept the client")?;
            OobStream::from_stream(stream, Role::Server, timeout)?
        }
    };
    let local_ip = match oob.local_addr()?.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    let ctx = a.dev.open(local_ip, Some(mtu))?;
    let mut publisher = Publisher::new(
        a.dev.counters.clone(),
        format!("pingpong {}", if client { "client" } else { "server" }),
    );
    let result = pingpong(a, &ctx, &mut oob, mtu, &mut publisher);
    let state = if result.is_ok() { "finished" } else { "failed" };
    let published = publisher.write(&ctx, state);
    result?;
    published
}

fn pingpong(
    a: &PingpongArgs,
    ctx: &Context,
    oob: &mut OobStream,
    mtu: Mtu,
    publisher: &mut Publisher,
) -> anyhow::Result<()> {
    let client = a.host.is_some();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(a.rx_depth + 1)?;
    let size = a.size as usize;
    let buf_len = size.div_ceil(PAGE) * PAGE;
    let mr = ctx.reg_mr(pd, buf_len, AccessFlags::LOCAL_WRITE)?;
    let qpn = ctx.create_qp(
        pd,
        QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: a.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        },
    )?;
    let sge = vec![Sge {
        addr: mr.addr,
        length: a.size,
        lkey: mr.keys.lkey,
    }];
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: sge.clone(),
    };
    let send = SendWr {
        wr_id: SEND_WRID,
        opcode: WrOpcode::Send,
        sg_list: sge,
        flags: SendFlags::SIGNALED,
        ..SendWr::default()
    };
    let post_recvs = |n: u32| -> anyhow::Result<()> {
        let wrs = vec![recv.clone(); n as usize];
        ctx.post_recv(qpn, &wrs)?;
        Ok(())
    };
    let mut routs = a.rx_depth;

    let psn = ctx.random_psn();
    let my = PingpongDest {
        lid: 0,
        qpn,
        psn,
        gid: ctx.gid(),
    };
    println!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        my.lid,
        my.qpn,
        my.psn,
        Ipv6Addr::from(my.gid)
    );
    let mut msg = [0u8; PINGPONG_MSG_LEN];
    let peer_ip = oob.peer_addr().ip();
    let connect = |rem: &PingpongDest| -> anyhow::Result<()> {
        let gid = if rem.gid == [0; 16] {
            // ibv_rc_pingpong without -g sends no GID: the peer is where the TCP came from.
            match peer_ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            }
        } else {
            Ipv6Addr::from(rem.gid)
        };
        let endpoint = Endpoint {
            qpn: rem.qpn,
            psn: rem.psn,
            gid,
            lid: rem.lid,
            udp: None,
            mtu: Some(mtu.bytes()),
            qkey: None,
            regions: Vec::new(),
        };
        let opts = ConnectOptions {
            mtu,
            access: AccessFlags::LOCAL_WRITE,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            timeout: a.qp_timeout,
            ..ConnectOptions::default()
        };
        ctx.connect(qpn, QpType::Rc, psn, &endpoint, &opts)
            .with_context(|| format!("cannot connect to the remote QP {:#x}", rem.qpn))?;
        // A softib QP takes receives from INIT on; `connect` goes from RESET to RTS in one
        // call, so the receives are posted here, before the peer can send.
        post_recvs(a.rx_depth)
    };
    let rem = if client {
        oob.write_msg("send our address", &my.to_bytes())?;
        oob.read_msg("receive the server's address", &mut msg)?;
        let rem = PingpongDest::parse(&msg)?;
        oob.write_msg("send done", PINGPONG_DONE)?;
        rem
    } else {
        oob.read_msg("receive the client's address", &mut msg)?;
        let rem = PingpongDest::parse(&msg)?;
        connect(&rem)?;
        oob.write_msg("send our address", &my.to_bytes())?;
        let mut done = [0u8; 5];
        oob.read_msg("receive the client's done", &mut done)?;
        parse_done(&done)?;
        rem
    };
    println!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        rem.lid,
        rem.qpn,
        rem.psn,
        Ipv6Addr::from(rem.gid)
    );
    let mut pending = RECV_WRID;
    if client {
        connect(&rem)?;
        if a.chk {
            let data: Vec<u8> = (0..size).map(pattern).collect();
            ctx.write_mr(&mr, 0, &data)?;
        }
        ctx.post_send(qpn, std::slice::from_ref(&send))?;
        pending |= SEND_WRID;
    }

    let start = Instant::now();
    let (mut scnt, mut rcnt) = (0u32, 0u32);
    let mut wcs = [crate::device::blank_wc(); 2];
    let mut last_progress = Instant::now();
    while rcnt < a.iters || scnt < a.iters {
        let n = if a.events {
            ctx.wait_cq(cq, &mut wcs, Duration::from_millis(100))
        } else {
            ctx.poll_cq(cq, &mut wcs)
        };
        if n == 0 {
            if last_progress.elapsed() > ctx_timeout(a) {
                bail!(
                    "no completion for {:.1} s after {scnt} sends and {rcnt} receives of {}: is the peer still there?",
                    ctx_timeout(a).as_secs_f64(),
                    a.iters
                );
            }
            publisher.tick(ctx);
            continue;
        }
        last_progress = Instant::now();
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                bail!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status.as_str(),
                    wc.vendor_err,
                    wc.wr_id
                );
            }
            match (wc.wr_id, wc.opcode) {
                (SEND_WRID, WcOpcode::Send) => scnt += 1,
                (RECV_WRID, WcOpcode::Recv) => {
                    routs -= 1;
                    if routs <= 1 {
                        post_recvs(a.rx_depth - routs)?;
                        routs = a.rx_depth;
                    }
                    rcnt += 1;
                }
                _ => bail!("Completion for unknown wr_id {}", wc.wr_id),
            }
            pending &= !wc.wr_id;
            if scnt < a.iters && pending == 0 {
                ctx.post_send(qpn, std::slice::from_ref(&send))?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let usec = secs * 1e6;
    let bytes = u64::from(a.size) * u64::from(a.iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        secs,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        a.iters,
        secs,
        usec / f64::from(a.iters)
    );
    if client && a.chk {
        let mut got = vec![0u8; size];
        ctx.read_mr(&mr, 0, &mut got)?;
        let bad: Vec<usize> = (0..size)
            .step_by(PAGE)
            .filter(|&i| got[i] != pattern(i))
            .collect();
        for page in &bad {
            println!("invalid data in page {}", page / PAGE);
        }
        if !bad.is_empty() {
            bail!("{} page(s) came back altered", bad.len());
        }
    }
    Ok(())
}

fn ctx_timeout(a: &PingpongArgs) -> Duration {
    a.dev.timeout()
}
