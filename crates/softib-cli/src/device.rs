//! Options every traffic tool shares (device address, capture, fault injection, counters,
//! timeouts) and how a tool opens its device and publishes its counters.

use std::io::IsTerminal;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context as _};
use serde::{Deserialize, Serialize};
use softib_net::context::{Context, WaitMode};
use softib_net::counters::CounterSnapshot;
use softib_net::driver::NetConfig;
use softib_net::inject::FaultSpec;
use softib_net::socket::ROCE_V2_PORT;
use softib_transport::Mtu;

/// Device options shared by the perftest-style tools and `pingpong`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeviceArgs {
    /// Address of the softib device: IP, or IP:PORT for a UDP port other than 4791. Default:
    /// the local address of the exchange connection. The server also listens on this IP.
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// Write every RoCEv2 datagram sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Inject faults on the send path, e.g. drop=0.01,dup=0.01,reorder=0.2,corrupt=0.005,seed=7.
    #[arg(long, value_name = "SPEC")]
    pub inject: Option<String>,
    /// Publish the device and per-QP counters to this JSON file (every second while running,
    /// and at the end); read it with `softib counters FILE`.
    #[arg(long, value_name = "FILE")]
    pub counters: Option<PathBuf>,
    /// Seconds an exchange step may take, and how long a peer may stay silent during the
    /// test, before the run fails.
    #[arg(long = "oob-timeout", value_name = "SECONDS", default_value_t = 15.0)]
    pub timeout: f64,
    /// Busy-poll in the device thread instead of sleeping when idle (lower latency, one
    /// core busy).
    #[arg(long)]
    pub busy_poll: bool,
    /// Microseconds the device thread keeps spinning after the last datagram before it
    /// sleeps (without --busy-poll). The tools poll the device themselves while a test
    /// runs, so a spinning device thread only competes with them for a core.
    #[arg(long = "spin-us", value_name = "MICROSECONDS", default_value_t = 0)]
    pub spin_us: u64,
    /// Congestion control.
    #[command(flatten)]
    pub cc: crate::cc::CcArgs,
}

impl DeviceArgs {
    /// The exchange timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout.clamp(0.1, 86_400.0))
    }

    /// The `--bind` address, parsed (port 4791 unless given).
    pub fn bind_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        let Some(b) = &self.bind else { return Ok(None) };
        if let Ok(sa) = b.parse::<SocketAddr>() {
            return Ok(Some(sa));
        }
        let ip: IpAddr = b
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| anyhow!("--bind {b:?} is not an IP address or IP:PORT"))?;
        Ok(Some(SocketAddr::new(ip, ROCE_V2_PORT)))
    }

    /// Checks the options that can be checked before any connection.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.bind_addr()?;
        self.fault_spec()?;
        self.cc.roce_cc()?;
        if self.timeout.is_nan() || self.timeout <= 0.0 {
            return Err(anyhow!(
                "--oob-timeout must be a positive number of seconds"
            ));
        }
        Ok(())
    }

    fn fault_spec(&self) -> anyhow::Result<Option<FaultSpec>> {
        self.inject
            .as_deref()
            .map(|s| {
                s.parse::<FaultSpec>()
                    .map_err(|e| anyhow!("--inject {s:?}: {e}"))
            })
            .transpose()
    }

    /// Opens the device on `--bind`, or on `fallback` port 4791. Without `--bind`, a
    /// loopback fallback that is taken (both sides of a test on one host) moves to the next
    /// free address of 127.0.0.0/8 (127.0.0.2, 127.0.0.3, ...): the peer learns the
    /// address from our GID, not from the TCP connection.
    pub fn open(&self, fallback: IpAddr, mtu: Option<Mtu>) -> anyhow::Result<Context> {
        if let Some(addr) = self.bind_addr()? {
            return self.open_on(addr, mtu);
        }
        let first = SocketAddr::new(fallback, ROCE_V2_PORT);
        let IpAddr::V4(v4) = fallback else {
            return self.open_on(first, mtu);
        };
        if !v4.is_loopback() {
            return self.open_on(first, mtu);
        }
        let mut last = None;
        for host in
            std::iter::once(v4).chain((2..=32).map(|h| std::net::Ipv4Addr::new(127, 0, 0, h)))
        {
            let addr = SocketAddr::new(IpAddr::V4(host), ROCE_V2_PORT);
            // A device would share a taken address with its process (softib-net's address
            // group); the tools want a host of their own, as two machines would be, so an
            // address another device holds is skipped.
            if let Err(e) = std::net::UdpSocket::bind(addr) {
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    last = Some(anyhow::Error::new(e).context(format!("{addr} is taken")));
                    continue;
                }
            }
            match self.open_on(addr, mtu) {
                Ok(c) => return Ok(c),
                Err(e) if address_in_use(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no free loopback address for a softib device")))
            .context("every loopback address tried is taken; give one with --bind")
    }

    fn open_on(&self, addr: SocketAddr, mtu: Option<Mtu>) -> anyhow::Result<Context> {
        let mut config = NetConfig::new(addr);
        config.mtu = mtu;
        config.inject = self.fault_spec()?;
        config.pcap = self.pcap.clone();
        config.cc = self.cc.roce_cc()?;
        let mode = if self.busy_poll {
            WaitMode::Polling
        } else {
            WaitMode::Blocking {
                spin: Duration::from_micros(self.spin_us),
            }
        };
        Context::open(config, mode).map_err(|e| {
            let hint = if address_in_use_net(&e) {
                " (another softib device or the kernel's rdma_rxe uses it; choose another address with --bind)"
            } else {
                ""
            };
            anyhow::Error::new(e).context(format!("cannot open a softib device on {addr}{hint}"))
        })
    }
}

fn address_in_use_net(e: &softib_net::driver::NetError) -> bool {
    use std::error::Error;
    let mut cur: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::AddrInUse;
        }
        cur = c.source();
    }
    false
}

fn address_in_use(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
    })
}

/// What a counters file holds: the tool, its state and the device's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountersFile {
    /// The tool and role, e.g. "write-bw client".
    pub tool: String,
    /// "running", "finished" or "failed".
    pub state: String,
    /// When this file was written, milliseconds since the Unix epoch.
    pub updated_unix_ms: u64,
    /// Milliseconds since the device opened.
    pub elapsed_ms: u64,
    /// The device's counters.
    pub counters: CounterSnapshot,
}

/// Writes a tool's counters to `--counters FILE` at most once a second, and at the end.
#[derive(Debug)]
pub struct Publisher {
    path: Option<PathBuf>,
    tool: String,
    started: Instant,
    last: Instant,
}

impl Publisher {
    /// A publisher for `tool`; does nothing without a path.
    pub fn new(path: Option<PathBuf>, tool: String) -> Publisher {
        let now = Instant::now();
        Publisher {
            path,
            tool,
            started: now,
            last: now,
        }
    }

    /// Publishes if a second has passed since the last time.
    pub fn tick(&mut self, ctx: &Context) {
        if self.path.is_some() && self.last.elapsed() >= Duration::from_secs(1) {
            // A failed periodic write is retried on the next tick; the final one reports.
            let _ = self.write(ctx, "running");
        }
    }

    /// Publishes now with `state`.
    pub fn write(&mut self, ctx: &Context, state: &str) -> anyhow::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        self.last = Instant::now();
        let file = CountersFile {
            tool: self.tool.clone(),
            state: state.to_string(),
            updated_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            elapsed_ms: self.started.elapsed().as_millis() as u64,
            counters: ctx.counter_snapshot(),
        };
        let json = serde_json::to_vec_pretty(&file)?;
        // Write beside and rename, so a reader never sees half a file. The temporary name
        // carries our process id: two tools told to publish to the same path (a client and
        // a server on one host) must not rename each other's temporary file away.
        let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        std::fs::write(&tmp, json)
            .and_then(|()| std::fs::rename(&tmp, path))
            .with_context(|| format!("cannot write counters to {}", path.display()))
    }
}

/// Whether progress bars may be drawn (stderr is a terminal).
pub fn progress_allowed() -> bool {
    std::io::stderr().is_terminal()
}

/// An empty completion, to fill a buffer `poll_cq` writes into.
pub fn blank_wc() -> softib_transport::WorkCompletion {
    softib_transport::WorkCompletion {
        wr_id: 0,
        status: softib_transport::WcStatus::Success,
        opcode: softib_transport::WcOpcode::Send,
        byte_len: 0,
        imm_data: None,
        invalidated_rkey: None,
        qp_num: 0,
        src_qp: 0,
        slid: 0,
        sl: 0,
        wc_flags: softib_transport::WcFlags::empty(),
        vendor_err: 0,
    }
}
