//! A perftest tool's settings: the verb and kind a tool measures, its command-line options
//! spelled as perftest spells them, and [`Params`], those options after perftest's defaults
//! and checks. Every other perftest module reads these; this one imports none of them but
//! `report`'s unit.

use anyhow::{anyhow, bail};
use softib_net::oob::DEFAULT_OOB_PORT;
use softib_transport::{Mtu, QpType};

use super::report::BwUnit;
use crate::device::DeviceArgs;

/// The operation a tool measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// SEND / RECV.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// FETCH_AND_ADD or CMP_AND_SWAP.
    Atomic,
}

impl Verb {
    /// perftest's name of the verb (`testsStr`).
    pub(crate) fn perftest_name(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }
}

/// Bandwidth or latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Throughput with many messages outstanding.
    Bw,
    /// One message at a time.
    Lat,
}

/// Transport service (`-c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Conn {
    /// Reliable Connected.
    #[value(name = "RC")]
    Rc,
    /// Unreliable Connected.
    #[value(name = "UC")]
    Uc,
    /// Unreliable Datagram.
    #[value(name = "UD")]
    Ud,
    /// Reliable Datagram (IBA 9.7; softib only: libibverbs has no RD, so both sides must
    /// be softib). Each test QP is an RD QP; they share `--rd-eecs` EE contexts.
    #[value(name = "RD")]
    Rd,
}

impl Conn {
    pub(crate) fn qp_type(self) -> QpType {
        match self {
            Conn::Rc => QpType::Rc,
            Conn::Uc => QpType::Uc,
            Conn::Ud => QpType::Ud,
            Conn::Rd => QpType::Rd,
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            Conn::Rc => "RC",
            Conn::Uc => "UC",
            Conn::Ud => "UD",
            Conn::Rd => "RD",
        }
    }
}

/// Atomic operation (`-A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[allow(non_camel_case_types)]
pub enum AtomicType {
    /// Compare and swap.
    #[value(name = "CMP_AND_SWAP")]
    CMP_AND_SWAP,
    /// Fetch and add.
    #[value(name = "FETCH_AND_ADD")]
    FETCH_AND_ADD,
}

/// The options of the perftest-style tools, spelled as perftest spells them.
#[derive(Debug, Clone, clap::Args)]
pub struct PerfArgs {
    /// Server to connect to; without it, run as the server and wait for a client.
    pub host: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_OOB_PORT)]
    pub port: u16,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency, 8 for atomics).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Iterations (default 5000 for bandwidth, 1000 for latency).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<u64>,
    /// Run every size from 2 to 2^23 bytes (UD: to the MTU).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Number of QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Path MTU in bytes (256..4096; default: the device's, from the interface).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Transport service.
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = Conn::Rc)]
    pub conn: Conn,
    /// Send queue depth: messages outstanding per QP (default 128 for bandwidth, 1 for latency).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Receive queue depth (SEND tests).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    pub rx_depth: u32,
    /// Signal one completion every this many messages.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    pub cq_mod: u32,
    /// Report bandwidth in Gb/s instead of MB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Atomic operation.
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value_t = AtomicType::FETCH_AND_ADD)]
    pub atomic_type: AtomicType,
    /// Largest message sent inline.
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Outstanding RDMA READ / atomic operations.
    #[arg(short = 'o', long = "outs", default_value_t = 16)]
    pub outs: u16,
    /// Local ACK timeout exponent: 4.096 us x 2^N (IBA 9.7.6.1.3; 14 = 67 ms).
    /// Default 14; with -R, rdma_cm's (19: the kernel's RoCE packet life time 18, plus one).
    #[arg(short = 'u', long = "qp-timeout")]
    pub qp_timeout: Option<u8>,
    /// GID index (accepted for compatibility; a softib device has one GID).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
    /// Do not fail on CPU frequency differences (accepted for compatibility).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// IB device name (accepted for compatibility; the device is the one on --bind).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Connect the exchange and the test QPs with rdma_cm (IB CM over QP1) instead of TCP,
    /// as perftest's -R: pairs with `ib_write_bw -R` etc. The server needs --bind (the
    /// device rdma_cm listens on); the port (-p) is an rdma_cm port.
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// `-c RD`: EE contexts the test QPs share (QP i uses EEC i mod N; both sides must
    /// give the same N). 1 = every QP over one EEC, which carries one message at a time.
    #[arg(long = "rd-eecs", default_value_t = 1)]
    pub rd_eecs: u32,
    /// Device options.
    #[command(flatten)]
    pub dev: DeviceArgs,
}

/// A test's settings after defaults and checks.
#[derive(Clone, Debug)]
pub struct Params {
    /// The verb.
    pub verb: Verb,
    /// Bandwidth or latency.
    pub kind: Kind,
    /// Client (has a host) or server.
    pub client: bool,
    /// Sizes to run, in order (one unless `-a`).
    pub sizes: Vec<u64>,
    /// Iterations per size (per QP for bandwidth).
    pub iters: u64,
    /// Duration mode, seconds.
    pub duration: Option<f64>,
    /// QPs.
    pub qps: usize,
    /// Requested MTU.
    pub mtu: Option<Mtu>,
    /// Service.
    pub conn: Conn,
    /// Outstanding sends per QP.
    pub tx_depth: u32,
    /// Receives posted per QP.
    pub rx_depth: u32,
    /// Completion moderation.
    pub cq_mod: u32,
    /// Report unit.
    pub unit: BwUnit,
    /// Atomic operation.
    pub atomic: AtomicType,
    /// Inline threshold.
    pub inline: u32,
    /// Outstanding READs/atomics.
    pub out_reads: u16,
    /// The tool's command name (for messages and counters).
    pub tool: String,
    /// Local ACK timeout exponent.
    pub qp_timeout: u8,
    /// Exchange and QPs over rdma_cm (`-R`).
    pub rdma_cm: bool,
    /// `-c RD`: EE contexts shared by the QPs.
    pub rd_eecs: usize,
}

/// Largest message `-a` runs (`MAX_SIZE`).
const MAX_SIZE: u64 = 1 << 23;
/// The local ACK timeout rdma_cm gives a RoCE QP (4.096 us x 2^19 = 2.1 s).
pub(crate) const RDMA_CM_ACK_TIMEOUT: u8 = 19;

impl Params {
    /// Applies perftest's defaults and rejects combinations that cannot run.
    pub fn new(verb: Verb, kind: Kind, tool: &str, a: &PerfArgs) -> anyhow::Result<Params> {
        a.dev.validate()?;
        if a.conn == Conn::Ud && verb != Verb::Send {
            bail!(
                "-c UD supports only SEND tests (RDMA READ, WRITE and atomics need a connected QP)"
            );
        }
        if a.conn == Conn::Uc && matches!(verb, Verb::Read | Verb::Atomic) {
            bail!("-c UC has no RDMA READ or atomics (IBA 9.8.2); use -c RC");
        }
        if a.rdma_cm && a.conn == Conn::Uc {
            bail!("-R with -c UC: UC is not supported in librdmacm (perftest refuses it too)");
        }
        if a.rdma_cm && a.conn == Conn::Ud {
            bail!("-R with -c UD is not supported: softib's tools connect only RC QPs through rdma_cm (UD ids need SIDR); use -c RC");
        }
        if a.rdma_cm && a.conn == Conn::Rd {
            bail!(
                "-R with -c RD: rdma_cm has no RD; RD EE contexts connect through the TCP exchange"
            );
        }
        if a.conn == Conn::Rd && (a.rd_eecs == 0 || a.rd_eecs > a.qps) {
            bail!("--rd-eecs {}: 1..=-q ({}) EE contexts", a.rd_eecs, a.qps);
        }
        if a.qps == 0 || a.qps > 1024 {
            bail!("-q {}: the number of QPs must be 1..=1024", a.qps);
        }
        if kind == Kind::Lat && a.qps != 1 {
            bail!("latency tests use one QP (-q 1)");
        }
        let mtu =
            match a.mtu {
                None => None,
                Some(m) => Some(Mtu::from_bytes(m).ok_or_else(|| {
                    anyhow!("-m {m}: the MTU must be 256, 512, 1024, 2048 or 4096")
                })?),
            };
        let default_size = match (verb, kind) {
            (Verb::Atomic, _) => 8,
            (_, Kind::Bw) => 65536,
            (_, Kind::Lat) => 2,
        };
        let sizes = if verb == Verb::Atomic {
            if a.size.is_some_and(|s| s != 8) {
                bail!("atomic operations move 8 bytes (-s 8)");
            }
            vec![8]
        } else if a.all {
            (1..=MAX_SIZE.trailing_zeros()).map(|i| 1u64 << i).collect()
        } else {
            let s = a.size.unwrap_or(default_size);
            if s == 0 || s > 1 << 30 {
                bail!("-s {s}: the message size must be 1..=1073741824 bytes");
            }
            if verb == Verb::Read || verb == Verb::Atomic || kind == Kind::Lat {
                // Nothing more to check: the buffers are sized from it.
            }
            vec![s]
        };
        if a.all && a.duration.is_some() {
            bail!("-a and -D cannot be combined");
        }
        let iters = a.iters.unwrap_or(match kind {
            Kind::Bw => 5000,
            Kind::Lat => 1000,
        });
        if kind == Kind::Lat && iters < 5 {
            bail!("-n {iters}: latency tests need at least 5 iterations");
        }
        if iters == 0 {
            bail!("-n 0: at least one iteration");
        }
        let duration = match a.duration {
            Some(0) => bail!("-D 0: the duration must be at least one second"),
            Some(d) => Some(d as f64),
            None => None,
        };
        let tx_default = match kind {
            Kind::Bw => 128,
            Kind::Lat => 1,
        };
        let mut tx_depth = a.tx_depth.unwrap_or(tx_default).clamp(1, 8192);
        if duration.is_none() {
            tx_depth = tx_depth.min(iters.min(u64::from(u32::MAX)) as u32);
        }
        let cq_mod = a.cq_mod.clamp(1, tx_depth);
        let rx_depth = a.rx_depth.clamp(1, 8192);
        let inline = a.inline_size.unwrap_or(0).min(1024);
        // perftest -R leaves the QPs' attributes to rdma_cm, which gives RoCE QPs a local
        // ACK timeout of packet life time + 1 (kernel cma.c: CMA_IBOE_PACKET_LIFETIME 18).
        let qp_timeout = a
            .qp_timeout
            .unwrap_or(if a.rdma_cm { RDMA_CM_ACK_TIMEOUT } else { 14 });
        if qp_timeout > 31 {
            bail!("-u {qp_timeout}: the timeout exponent is 0..=31");
        }
        if a.outs == 0 || a.outs > 16 {
            bail!("-o {}: outstanding reads/atomics must be 1..=16", a.outs);
        }
        Ok(Params {
            verb,
            kind,
            client: a.host.is_some(),
            sizes,
            iters,
            duration,
            qps: a.qps as usize,
            mtu,
            conn: a.conn,
            tx_depth,
            rx_depth,
            cq_mod,
            unit: if a.report_gbits {
                BwUnit::Gbps
            } else {
                BwUnit::MBps
            },
            atomic: a.atomic_type,
            inline,
            out_reads: a.outs,
            tool: tool.to_string(),
            qp_timeout,
            rdma_cm: a.rdma_cm,
            rd_eecs: a.rd_eecs as usize,
        })
    }

    /// The largest message size this test runs.
    pub(crate) fn max_size(&self) -> u64 {
        *self.sizes.iter().max().unwrap_or(&8)
    }
}
