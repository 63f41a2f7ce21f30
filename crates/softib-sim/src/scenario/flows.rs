//! perftest-style flows run by the real transport engine (scenario `[[flow]]` tables).
//!
//! Each (requester, responder) pair of a flow table gets a QP on each side's device
//! (RC, UC, UD or RD), connected as perftest's out-of-band exchange would, and the requester
//! keeps `tx_depth` signalled work requests of `size` bytes in flight: RDMA WRITEs
//! (`ib_write_bw`), RDMA READs (`ib_read_bw`), SENDs (`ib_send_bw`) or 8-byte atomics
//! (`ib_atomic_bw`). Every completed message is one sample for the report: payload bytes and
//! post-to-completion latency (where unreliable SENDs are counted: [`crate::flow_app`]).
//! After the run the engines' counters (retransmissions, timeouts, NAKs, duplicates,
//! FECN/BECN) go into the report per host and per flow.
//!
//! ```toml
//! [[flow]]
//! op = "write"              # write (ib_write_bw), read, send, atomic
//! service = "rc"            # rc; uc for send and write; ud for send; rd for every op
//! pattern = "one-to-one"    # one-to-one, incast, permutation, all-to-all, ring
//! src = "h0"                # the requester; incast takes srcs = [...] and dst
//! dst = "h1"
//! size = 65536              # message bytes (atomic: 8; UD: at most the MTU)
//! tx_depth = 128            # messages in flight per QP
//! iterations = 1000         # per QP; default: until the end of the run
//! duration_us = 500         # or: each QP posts for this long after its start
//! qps = 1                   # QP pairs per (requester, responder), perftest's -q
//! eecs = 1                  # RD: EE contexts per pair of hosts, 1..=qps (below)
//! mtu = 4096                # path MTU: 256, 512, 1024, 2048 or 4096
//! sl = 0
//! local_ack_timeout = 14    # 4.096 us x 2^n (IBA 9.7.6.1.3); 0 = infinite
//! retry_cnt = 7             # transport retries before IBV_WC_RETRY_EXC_ERR
//! rnr_retry = 7             # RNR retries before IBV_WC_RNR_RETRY_EXC_ERR; 7 = forever
//! rnr_timer = 12            # the responder's min_rnr_timer code (12 = 0.64 ms)
//! max_rd_atomic = 16        # READs/atomics in flight per QP (both ends), 1..=16
//! sq_psn_offset = 0         # the requester's sq_psn at RTS minus the responder's rq_psn
//!                           #   at RTR (mod 2^24): nonzero is a set-up mistake (case 10)
//! start_us = 0
//! stagger_us = 0            # pair k of the table starts k x stagger_us after start_us
//! # op = "atomic":
//! atomic = "fetch_add"      # or "cmp_swap"; every QP of the table hits one 8-byte
//! add = 1                   #   counter at its responder; fetch_add adds `add`,
//! compare = 0               #   cmp_swap swaps in `swap` where it finds `compare`
//! swap = 1
//! # before each message, leads (RC): unsignaled READs or atomics posted just ahead of
//! # it, so that they are outstanding when it starts (case 11)
//! lead_op = "read"          # or "atomic" (a FetchAdd of 1 on the table's counter)
//! lead_count = 4            # leads per message, 1..=64
//! lead_size = 64            # bytes of each READ lead
//! fence = false             # IBV_SEND_FENCE on the message: it starts only once every
//!                           #   earlier READ and atomic completed (IBA 10.8.3.3)
//! # op = "send": the receiving application
//! rq_depth = 512            # receive WRs it keeps posted (the SRQ's depth with srq)
//! srq = false               # post to one shared receive queue per host and table
//! recv_post_delay_ns = 0    # from consuming a receive to posting it again
//! ```
//!
//! `service = "rd"` (Reliable Datagram, IBA 9.7): every host of the table has one RD
//! domain and `qps` RD QPs (not `qps` per peer: an RD QP is connectionless), and every pair
//! of hosts the table connects has `eecs` EE contexts between them, brought up as RC QPs
//! would be. Flow `q` of a (requester, responder) pair runs from RD QP `q` of the requester
//! to RD QP `q` of the responder over EEC `q mod eecs` of that host pair; the same EECs
//! carry the pair's flows in both directions. So a server with N clients of `qps` QPs each
//! holds `qps` RD QPs and N x `eecs` EECs where RC holds N x `qps` QPs, and an EEC, which
//! has one message in progress at a time (IBA 9.7.1), serialises the messages of the
//! `qps / eecs` QPs sharing it. RD runs every `op`; `srq`, leads, `fence` and
//! `sq_psn_offset` are RC's (UC's, UD's) keys and refused.
//!
//! `pattern = "ring"` sends from each host (of `srcs`, in that order, or every host) to the
//! next, with `op = "send"` or `"write"` (WRITE with immediate, so that each chunk consumes a
//! receive at its successor): a host posts message k + 1 only once it has received
//! message k from its predecessor, the step dependency of a ring all-reduce
//! (`iterations` default 2 x (N - 1), one all-reduce of N chunks of `size` bytes).

use super::pattern::{host_names, resolve_pattern, sl_key, start_key, Pattern, PatternKeys};
use super::source::{ScenarioError, Source};
use crate::report::flows::FlowInfo;
use serde::Deserialize;
use softib_fabric::time::{Picos, PS_PER_NS, PS_PER_US};
use softib_fabric::topology::Topology;
use softib_transport::{Mtu, QpType};
use toml::Spanned;

/// The operation a flow runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowOp {
    /// RDMA WRITE, as `ib_write_bw`.
    Write,
    /// RDMA READ, as `ib_read_bw`.
    Read,
    /// Two-sided SEND, as `ib_send_bw`: the responder's application posts receives.
    Send,
    /// 8-byte atomic (FetchAdd or CmpSwap), as `ib_atomic_bw`.
    Atomic,
}

impl FlowOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            FlowOp::Write => "write",
            FlowOp::Read => "read",
            FlowOp::Send => "send",
            FlowOp::Atomic => "atomic",
        }
    }
}

/// The transport service of a flow's QPs (UC carries SEND and RDMA WRITE, UD
/// only SEND of at most one MTU; IBA 9.8.2, 9.8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// Reliable connected.
    #[default]
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// Reliable datagram: RD QPs over EE contexts shared per host pair.
    Rd,
}

impl Service {
    pub(crate) fn qp_type(self) -> QpType {
        match self {
            Service::Rc => QpType::Rc,
            Service::Uc => QpType::Uc,
            Service::Ud => QpType::Ud,
            Service::Rd => QpType::Rd,
        }
    }

    /// Whether completions mean the responder has the message (RC, RD): then a message
    /// counts at the requester's completion.
    pub(crate) fn reliable(self) -> bool {
        matches!(self, Service::Rc | Service::Rd)
    }
}

/// Which atomic an `op = "atomic"` flow runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AtomicKind {
    /// FETCH_ADD: the counter grows by `add` per operation.
    #[default]
    FetchAdd,
    /// CMP_SWAP: `swap` replaces the counter where it equals `compare`.
    CmpSwap,
}

/// The operation of a flow's leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeadOp {
    /// RDMA READ of `lead_size` bytes from the responder's buffer.
    Read,
    /// FetchAdd of 1 on the table's counter at the responder.
    Atomic,
}

/// Work requests posted (unsignaled) just before each message of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadPlan {
    /// Their operation.
    pub op: LeadOp,
    /// How many per message.
    pub count: u32,
    /// Bytes of each READ lead.
    pub size: u32,
}

/// A `[[flow]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowEntry {
    /// Operation.
    pub op: Spanned<FlowOp>,
    /// Transport service (default RC).
    pub service: Option<Spanned<Service>>,
    /// Who runs it against whom.
    pub pattern: Spanned<Pattern>,
    /// Requester (one-to-one).
    pub src: Option<Spanned<String>>,
    /// Requesters (incast; default every host but `dst`), or the ring's order.
    pub srcs: Option<Vec<Spanned<String>>>,
    /// Responder (one-to-one, incast).
    pub dst: Option<Spanned<String>>,
    /// Permutation shift.
    pub shift: Option<Spanned<usize>>,
    /// Message size in bytes (default 65536; atomics 8).
    pub size: Option<Spanned<u32>>,
    /// Messages in flight per QP (default 128, perftest's).
    pub tx_depth: Option<Spanned<u32>>,
    /// Messages per QP (default: until the end of the run; ring: one all-reduce).
    pub iterations: Option<Spanned<u64>>,
    /// How long each QP posts, microseconds from its start (default: until the end).
    pub duration_us: Option<Spanned<f64>>,
    /// QP pairs per (requester, responder), perftest's `-q` (default 1).
    pub qps: Option<Spanned<u32>>,
    /// RD: EE contexts per pair of hosts, shared by the table's RD QPs (default 1).
    pub eecs: Option<Spanned<u32>>,
    /// Path MTU in bytes (default 4096).
    pub mtu: Option<Spanned<u32>>,
    /// Service level.
    pub sl: Option<Spanned<u8>>,
    /// Local ACK timeout exponent (default 14: 67 ms).
    pub local_ack_timeout: Option<Spanned<u8>>,
    /// Transport retry count, 0..=7 (default 7).
    pub retry_cnt: Option<Spanned<u8>>,
    /// RNR retry count, 0..=7 (default 7 = retry forever).
    pub rnr_retry: Option<Spanned<u8>>,
    /// The responder's RNR timer code, 0..=31 (default 12: 0.64 ms).
    pub rnr_timer: Option<Spanned<u8>>,
    /// READs and atomics in flight per QP, 1..=16 (default 16).
    pub max_rd_atomic: Option<Spanned<u8>>,
    /// The requester's sq_psn at RTS minus the responder's rq_psn at RTR, modulo 2^24
    /// (default 0, a correct exchange): reproduces a PSN mismatch at set-up.
    pub sq_psn_offset: Option<Spanned<i64>>,
    /// Start time, microseconds.
    pub start_us: Option<Spanned<f64>>,
    /// Start offset between consecutive QP pairs of the table, microseconds (pair k
    /// starts at `start_us + k x stagger_us`).
    pub stagger_us: Option<Spanned<f64>>,
    /// Which atomic (default fetch_add).
    pub atomic: Option<Spanned<AtomicKind>>,
    /// FetchAdd addend (default 1).
    pub add: Option<Spanned<u64>>,
    /// CmpSwap compare value (default 0).
    pub compare: Option<Spanned<u64>>,
    /// CmpSwap swap value (default 1).
    pub swap: Option<Spanned<u64>>,
    /// Leads: the operation posted before each message (RC).
    pub lead_op: Option<Spanned<LeadOp>>,
    /// Leads per message (default 1 with `lead_op`).
    pub lead_count: Option<Spanned<u32>>,
    /// Bytes of each READ lead (default 64).
    pub lead_size: Option<Spanned<u32>>,
    /// IBV_SEND_FENCE on each message (RC; default false).
    pub fence: Option<Spanned<bool>>,
    /// Receive WRs the receiving application keeps posted (default 512, perftest's).
    pub rq_depth: Option<Spanned<u32>>,
    /// Receive through one shared receive queue per responder host and table.
    pub srq: Option<Spanned<bool>>,
    /// Nanoseconds from consuming a receive to posting it again (default 0).
    pub recv_post_delay_ns: Option<Spanned<u64>>,
}

/// The atomic operation of a flow, with its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicPlan {
    /// FETCH_ADD of `add`.
    FetchAdd {
        /// Addend.
        add: u64,
    },
    /// CMP_SWAP.
    CmpSwap {
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
}

/// How the receiving application of a SEND flow behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvPlan {
    /// Receive WRs kept posted (the SRQ's depth with `srq`).
    pub depth: u32,
    /// Through a shared receive queue.
    pub srq: bool,
    /// Time from consuming a receive to posting it again.
    pub post_delay_ps: Picos,
}

/// QP attributes of a flow's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpPlan {
    /// Path MTU.
    pub mtu: Mtu,
    /// Service level.
    pub sl: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// The responder's RNR timer code.
    pub rnr_timer: u8,
    /// READs/atomics in flight (requester) and accepted (responder).
    pub max_rd_atomic: u8,
    /// Added (mod 2^24) to the requester's sq_psn at RTS; the responder's rq_psn at RTR
    /// stays the agreed one. Zero unless a scenario reproduces a set-up mistake.
    pub sq_psn_offset: u32,
}

/// Where an RD flow runs: which RD QP of each host's table, over which EEC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdPlan {
    /// EE contexts per pair of hosts of the table.
    pub eecs: u32,
    /// The RD QP of the table on each end (`q` of the pair's `qps`), also the flow's EEC
    /// modulo `eecs`.
    pub qp: u32,
}

impl RdPlan {
    /// The EEC (of the host pair's `eecs`) this flow's messages go over.
    pub fn eec(&self) -> u32 {
        self.qp % self.eecs
    }
}

/// One QP pair of a flow table, resolved against the topology.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowPlan {
    /// Flow tag (after the streams' tags).
    pub flow: u32,
    /// Index of the `[[flow]]` table.
    pub table: usize,
    /// Identity for the report.
    pub info: FlowInfo,
    /// Operation.
    pub op: FlowOp,
    /// Service.
    pub service: Service,
    /// RD flows: RD QP and EEC.
    pub rd: Option<RdPlan>,
    /// Operands of an atomic flow.
    pub atomic: Option<AtomicPlan>,
    /// Work requests posted before each message.
    pub lead: Option<LeadPlan>,
    /// Each message carries IBV_SEND_FENCE.
    pub fence: bool,
    /// Requester host.
    pub src: String,
    /// Responder host.
    pub dst: String,
    /// Message bytes.
    pub size: u32,
    /// Messages in flight.
    pub tx_depth: u32,
    /// When the requester stops posting (`None`: never).
    pub stop_ps: Option<Picos>,
    /// Messages in all (`None`: until the end).
    pub iterations: Option<u64>,
    /// QP attributes.
    pub qp: QpPlan,
    /// The receiving application (SEND flows).
    pub recv: Option<RecvPlan>,
    /// The flow whose arrivals at `src` gate this one's posts (ring all-reduce).
    pub gate: Option<u32>,
    /// Start time.
    pub start_ps: Picos,
}

/// The QP's send queue depth: more cannot be in flight.
const MAX_TX_DEPTH: u32 = 1024;
/// QP pairs per (requester, responder) at most.
const MAX_QPS: u32 = 1024;
/// The deepest receive queue a flow may ask for.
const MAX_RQ_DEPTH: u32 = 16384;
/// Largest message: the engine takes up to 2^31 bytes; a buffer of that size per QP would
/// not fit a large fabric, so flows stay at perftest's usual sizes.
const MAX_SIZE: u32 = 1 << 24;

/// The keys of one `[[flow]]` table: their dotted names and errors at their lines.
struct TableKeys<'a> {
    /// `flow[i]`.
    table: String,
    src: &'a Source,
}

impl TableKeys<'_> {
    /// The dotted name of key `k` of this table.
    fn name(&self, k: &str) -> String {
        format!("{}.{k}", self.table)
    }

    /// An error at key `k`, at the line of `span`.
    fn error(&self, k: &str, span: std::ops::Range<usize>, reason: String) -> ScenarioError {
        self.src.error_at(&self.name(k), span, reason)
    }

    /// A small integer key: within `range`, `default` when absent.
    fn small(
        &self,
        k: &str,
        v: &Option<Spanned<u8>>,
        range: std::ops::RangeInclusive<u8>,
        default: u8,
        what: &str,
    ) -> Result<u8, ScenarioError> {
        match v {
            Some(x) if !range.contains(x.get_ref()) => Err(self.error(
                k,
                x.span(),
                format!(
                    "{}: {what}: {}..={}",
                    x.get_ref(),
                    range.start(),
                    range.end()
                ),
            )),
            Some(x) => Ok(*x.get_ref()),
            None => Ok(default),
        }
    }
}

/// The QP pairs of every `[[flow]]`, tagged from `first_flow`; errors name key and line.
/// Each table's keys are checked in a fixed order, so a table with several mistakes always
/// reports the same one first.
pub fn flow_plan(
    entries: &[FlowEntry],
    topo: &Topology,
    first_flow: u32,
    src: &Source,
) -> Result<Vec<FlowPlan>, ScenarioError> {
    let hosts = host_names(topo);
    let mut out: Vec<FlowPlan> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let first_of_table = first_flow + out.len() as u32;
        out.extend(table_plan(i, e, &hosts, first_of_table, src)?);
    }
    Ok(out)
}

/// The QP pairs of table `i`, tagged from `first_of_table`.
fn table_plan(
    i: usize,
    e: &FlowEntry,
    hosts: &[String],
    first_of_table: u32,
    src: &Source,
) -> Result<Vec<FlowPlan>, ScenarioError> {
    let keys = TableKeys {
        table: format!("flow[{i}]"),
        src,
    };
    let (op, service, pattern) = op_service_pattern(e, &keys)?;
    // Ring WRITEs carry immediate data, which consumes a receive at the successor and
    // tells it the chunk has arrived (what NCCL-style rings do).
    let receives = op == FlowOp::Send || pattern == Pattern::Ring;
    let mtu = mtu_key(e, &keys)?;
    let size = size_key(e, op, service, mtu, &keys)?;
    let tx_depth = match &e.tx_depth {
        Some(d) if *d.get_ref() == 0 || *d.get_ref() > MAX_TX_DEPTH => {
            return Err(keys.error(
                "tx_depth",
                d.span(),
                format!(
                    "{}: must be 1..={MAX_TX_DEPTH} (the send queue)",
                    d.get_ref()
                ),
            ))
        }
        Some(d) => *d.get_ref(),
        None => 128,
    };
    let mut qp = qp_keys(e, mtu, &keys)?;
    refuse_foreign_keys(e, op, receives, &keys)?;
    let atomic = atomic_plan(e, op);
    let (lead, fence) = lead_plan(e, service, &keys)?;
    let recv = recv_plan(e, receives, service, &keys)?;
    qp.sl = sl_key(src, &keys.name("sl"), &e.sl)?;
    let start_ps = start_key(src, &keys.name("start_us"), &e.start_us)?;
    let stagger_ps = start_key(src, &keys.name("stagger_us"), &e.stagger_us)?;
    let pairs = resolve_pattern(
        src,
        &keys.table,
        PatternKeys {
            pattern,
            src: &e.src,
            srcs: &e.srcs,
            dst: &e.dst,
            shift: &e.shift,
        },
        hosts,
    )?;
    let iterations = match &e.iterations {
        Some(n) if *n.get_ref() == 0 => {
            return Err(keys.error(
                "iterations",
                n.span(),
                "at least 1 (omit it to run until the end)".into(),
            ))
        }
        Some(n) => Some(*n.get_ref()),
        None if pattern == Pattern::Ring => Some(2 * (pairs.len() as u64 - 1)),
        None => None,
    };
    let duration_ps = match &e.duration_us {
        Some(d) if !(d.get_ref().is_finite() && *d.get_ref() > 0.0) => {
            return Err(keys.error(
                "duration_us",
                d.span(),
                "must be > 0 (omit it to run until the end)".into(),
            ))
        }
        Some(d) => Some((d.get_ref() * PS_PER_US as f64).round() as Picos),
        None => None,
    };
    let qps = qps_key(e, pattern, service, &keys)?;
    let eecs = eecs_key(e, service, qps, &keys)?;
    let template = FlowPlan {
        flow: first_of_table,
        table: i,
        info: FlowInfo {
            name: String::new(),
            src: String::new(),
            dst: String::new(),
            data_from: String::new(),
            management: false,
        },
        op,
        service,
        rd: eecs.map(|eecs| RdPlan { eecs, qp: 0 }),
        atomic,
        lead,
        fence,
        src: String::new(),
        dst: String::new(),
        size,
        tx_depth,
        iterations,
        stop_ps: None,
        qp,
        recv,
        gate: None,
        start_ps,
    };
    Ok(expand_pairs(
        &template,
        pattern,
        pairs,
        qps,
        stagger_ps,
        duration_ps,
    ))
}

/// `op`, `service` and `pattern`, checked against each other.
fn op_service_pattern(
    e: &FlowEntry,
    keys: &TableKeys<'_>,
) -> Result<(FlowOp, Service, Pattern), ScenarioError> {
    let op = *e.op.get_ref();
    let service = e.service.as_ref().map_or(Service::Rc, |s| *s.get_ref());
    let allowed = match service {
        Service::Rc | Service::Rd => true,
        Service::Uc => matches!(op, FlowOp::Send | FlowOp::Write),
        Service::Ud => op == FlowOp::Send,
    };
    if !allowed {
        let s = e.service.as_ref().expect("RC allows every op");
        return Err(keys.error(
            "service",
            s.span(),
            format!(
                "{:?} has no {} (UC carries SEND and RDMA WRITE, UD only SEND; IBA 9.8.2, 9.8.3)",
                service,
                op.name()
            ),
        ));
    }
    let pattern = *e.pattern.get_ref();
    if pattern == Pattern::Ring && !matches!(op, FlowOp::Send | FlowOp::Write) {
        return Err(keys.error(
            "pattern",
            e.pattern.span(),
            "a ring steps on received messages: it needs op = \"send\" or \"write\" (with immediate)"
                .into(),
        ));
    }
    Ok((op, service, pattern))
}

/// The path MTU, default 4096.
fn mtu_key(e: &FlowEntry, keys: &TableKeys<'_>) -> Result<Mtu, ScenarioError> {
    match &e.mtu {
        None => Ok(Mtu::M4096),
        Some(m) => Mtu::from_bytes(*m.get_ref()).ok_or_else(|| {
            keys.error(
                "mtu",
                m.span(),
                format!("{}: IB MTUs are 256, 512, 1024, 2048 and 4096", m.get_ref()),
            )
        }),
    }
}

/// The message size: 8 for atomics, at most the MTU for UD, 64 KiB by default.
fn size_key(
    e: &FlowEntry,
    op: FlowOp,
    service: Service,
    mtu: Mtu,
    keys: &TableKeys<'_>,
) -> Result<u32, ScenarioError> {
    Ok(match (&e.size, op, service) {
        (Some(s), FlowOp::Atomic, _) if *s.get_ref() != 8 => {
            return Err(keys.error(
                "size",
                s.span(),
                format!("{} bytes: atomics work on 8 bytes", s.get_ref()),
            ))
        }
        (None, FlowOp::Atomic, _) => 8,
        (Some(s), _, Service::Ud) if *s.get_ref() > mtu.bytes() => {
            return Err(keys.error(
                "size",
                s.span(),
                format!(
                    "{} bytes: a UD message is one packet of at most the MTU ({})",
                    s.get_ref(),
                    mtu.bytes()
                ),
            ))
        }
        (None, _, Service::Ud) => mtu.bytes(),
        (Some(s), _, _) if *s.get_ref() == 0 || *s.get_ref() > MAX_SIZE => {
            return Err(keys.error(
                "size",
                s.span(),
                format!("{} bytes: must be 1..={MAX_SIZE}", s.get_ref()),
            ))
        }
        (Some(s), _, _) => *s.get_ref(),
        (None, _, _) => 65_536,
    })
}

/// The QP attributes (`sl` is checked later, with the start keys).
fn qp_keys(e: &FlowEntry, mtu: Mtu, keys: &TableKeys<'_>) -> Result<QpPlan, ScenarioError> {
    let timeout = keys.small(
        "local_ack_timeout",
        &e.local_ack_timeout,
        0..=31,
        14,
        "a 5-bit exponent",
    )?;
    let retry_cnt = keys.small("retry_cnt", &e.retry_cnt, 0..=7, 7, "a 3-bit count")?;
    let rnr_retry = keys.small(
        "rnr_retry",
        &e.rnr_retry,
        0..=7,
        7,
        "a 3-bit count (7 = forever)",
    )?;
    let rnr_timer = keys.small(
        "rnr_timer",
        &e.rnr_timer,
        0..=31,
        12,
        "a 5-bit RNR timer code (IBA 9.7.5.2.8)",
    )?;
    let max_rd_atomic = keys.small(
        "max_rd_atomic",
        &e.max_rd_atomic,
        1..=16,
        16,
        "the device allows",
    )?;
    // PSNs are 24 bits (IBA 9.7.1); an offset is taken modulo 2^24, so more than one turn
    // is a mistake in the scenario, not a different PSN.
    let sq_psn_offset = match &e.sq_psn_offset {
        Some(o) if o.get_ref().unsigned_abs() >= 1 << 24 => {
            return Err(keys.error(
                "sq_psn_offset",
                o.span(),
                format!("{}: PSNs are 24 bits, |offset| < 2^24", o.get_ref()),
            ))
        }
        Some(o) => (*o.get_ref()).rem_euclid(1 << 24) as u32,
        None => 0,
    };
    Ok(QpPlan {
        mtu,
        sl: 0,
        timeout,
        retry_cnt,
        rnr_retry,
        rnr_timer,
        max_rd_atomic,
        sq_psn_offset,
    })
}

/// Keys that belong to another op are mistakes worth naming.
fn refuse_foreign_keys(
    e: &FlowEntry,
    op: FlowOp,
    receives: bool,
    keys: &TableKeys<'_>,
) -> Result<(), ScenarioError> {
    let only = |k: &str, span: std::ops::Range<usize>, ops: &str| {
        Err(keys.error(
            k,
            span,
            format!("applies to {ops} flows, not {}", op.name()),
        ))
    };
    if op != FlowOp::Atomic {
        if let Some(a) = &e.atomic {
            return only("atomic", a.span(), "atomic");
        }
        for (v, k) in [(&e.add, "add"), (&e.compare, "compare"), (&e.swap, "swap")] {
            if let Some(v) = v {
                return only(k, v.span(), "atomic");
            }
        }
    }
    if !receives {
        if let Some(d) = &e.rq_depth {
            return only("rq_depth", d.span(), "send");
        }
        if let Some(d) = &e.srq {
            return only("srq", d.span(), "send");
        }
        if let Some(d) = &e.recv_post_delay_ns {
            return only("recv_post_delay_ns", d.span(), "send");
        }
    }
    Ok(())
}

/// The operands of an atomic flow (`None` for other ops).
fn atomic_plan(e: &FlowEntry, op: FlowOp) -> Option<AtomicPlan> {
    (op == FlowOp::Atomic).then(|| {
        match e
            .atomic
            .as_ref()
            .map_or(AtomicKind::FetchAdd, |a| *a.get_ref())
        {
            AtomicKind::FetchAdd => AtomicPlan::FetchAdd {
                add: e.add.as_ref().map_or(1, |v| *v.get_ref()),
            },
            AtomicKind::CmpSwap => AtomicPlan::CmpSwap {
                compare: e.compare.as_ref().map_or(0, |v| *v.get_ref()),
                swap: e.swap.as_ref().map_or(1, |v| *v.get_ref()),
            },
        }
    })
}

/// Most leads per message.
const MAX_LEADS: u32 = 64;

/// The leads and the fence of a flow: RC only (UC and UD have no READ or atomic to wait
/// for; IBA 10.8.3.3 fences order a send queue's READs and atomics).
fn lead_plan(
    e: &FlowEntry,
    service: Service,
    keys: &TableKeys<'_>,
) -> Result<(Option<LeadPlan>, bool), ScenarioError> {
    let fence = e.fence.as_ref().is_some_and(|f| *f.get_ref());
    if service != Service::Rc {
        let why = match service {
            // RD has READs and atomics, but a message's leads would queue on an EEC that
            // other QPs share, behind their messages: not modelled.
            Service::Rd => "applies to RC flows: an RD QP's messages queue on EE contexts shared with other QPs, and leads or fences are not modelled there",
            _ => "applies to RC flows: a fence orders READs and atomics, which only RC has here",
        };
        let rc_only = [
            ("lead_op", e.lead_op.as_ref().map(|v| v.span())),
            ("lead_count", e.lead_count.as_ref().map(|v| v.span())),
            ("lead_size", e.lead_size.as_ref().map(|v| v.span())),
            ("fence", e.fence.as_ref().map(|v| v.span())),
        ];
        if let Some((k, Some(span))) = rc_only.into_iter().find(|(_, s)| s.is_some()) {
            return Err(keys.error(k, span, why.into()));
        }
    }
    let Some(op) = &e.lead_op else {
        for (k, v) in [("lead_count", &e.lead_count), ("lead_size", &e.lead_size)] {
            if let Some(v) = v {
                return Err(keys.error(k, v.span(), "needs lead_op".into()));
            }
        }
        return Ok((None, fence));
    };
    let count = match &e.lead_count {
        Some(c) if *c.get_ref() == 0 || *c.get_ref() > MAX_LEADS => {
            return Err(keys.error(
                "lead_count",
                c.span(),
                format!("{}: must be 1..={MAX_LEADS}", c.get_ref()),
            ))
        }
        Some(c) => *c.get_ref(),
        None => 1,
    };
    let size = match (&e.lead_size, op.get_ref()) {
        (Some(s), LeadOp::Atomic) => {
            return Err(keys.error("lead_size", s.span(), "atomic leads work on 8 bytes".into()))
        }
        (Some(s), _) if *s.get_ref() == 0 || *s.get_ref() > MAX_SIZE => {
            return Err(keys.error(
                "lead_size",
                s.span(),
                format!("{} bytes: must be 1..={MAX_SIZE}", s.get_ref()),
            ))
        }
        (Some(s), _) => *s.get_ref(),
        (None, LeadOp::Atomic) => 8,
        (None, LeadOp::Read) => 64,
    };
    Ok((
        Some(LeadPlan {
            op: *op.get_ref(),
            count,
            size,
        }),
        fence,
    ))
}

/// The receiving application of a flow whose messages consume receives.
fn recv_plan(
    e: &FlowEntry,
    receives: bool,
    service: Service,
    keys: &TableKeys<'_>,
) -> Result<Option<RecvPlan>, ScenarioError> {
    let srq = e.srq.as_ref().is_some_and(|s| *s.get_ref());
    if srq && service != Service::Rc {
        let s = e.srq.as_ref().expect("srq is set");
        return Err(keys.error(
            "srq",
            s.span(),
            "shared receive queues serve RC QPs here".into(),
        ));
    }
    if !receives {
        return Ok(None);
    }
    let depth = match &e.rq_depth {
        Some(d) if *d.get_ref() == 0 || *d.get_ref() > MAX_RQ_DEPTH => {
            return Err(keys.error(
                "rq_depth",
                d.span(),
                format!("{}: must be 1..={MAX_RQ_DEPTH}", d.get_ref()),
            ))
        }
        Some(d) => *d.get_ref(),
        None => 512,
    };
    Ok(Some(RecvPlan {
        depth,
        srq,
        post_delay_ps: e.recv_post_delay_ns.as_ref().map_or(0, |v| *v.get_ref()) * PS_PER_NS,
    }))
}

/// QP pairs per (requester, responder), perftest's `-q`.
fn qps_key(
    e: &FlowEntry,
    pattern: Pattern,
    service: Service,
    keys: &TableKeys<'_>,
) -> Result<u32, ScenarioError> {
    match &e.qps {
        Some(q) if *q.get_ref() == 0 || *q.get_ref() > MAX_QPS => Err(keys.error(
            "qps",
            q.span(),
            format!("{}: must be 1..={MAX_QPS}", q.get_ref()),
        )),
        Some(q) if *q.get_ref() > 1 && (pattern == Pattern::Ring || service == Service::Ud) => {
            Err(keys.error(
                "qps",
                q.span(),
                "a ring steps one QP per neighbour, and UD uses one QP per host: qps must be 1"
                    .into(),
            ))
        }
        Some(q) => Ok(*q.get_ref()),
        None => Ok(1),
    }
}

/// Most EE contexts per pair of hosts.
const MAX_EECS: u32 = 1024;

/// RD's EE contexts per pair of hosts (`None` for other services, which refuse the key).
/// Flow `q` uses EEC `q mod eecs`, so more EECs than `qps` would sit unused.
fn eecs_key(
    e: &FlowEntry,
    service: Service,
    qps: u32,
    keys: &TableKeys<'_>,
) -> Result<Option<u32>, ScenarioError> {
    if service != Service::Rd {
        return match &e.eecs {
            Some(x) => Err(keys.error(
                "eecs",
                x.span(),
                "applies to RD flows (service = \"rd\"): EE contexts carry RD's reliability".into(),
            )),
            None => Ok(None),
        };
    }
    if let Some(o) = &e.sq_psn_offset {
        return Err(keys.error(
            "sq_psn_offset",
            o.span(),
            "applies to RC, UC and UD flows: an RD flow's PSNs are its EE context's, which other QPs share".into(),
        ));
    }
    match &e.eecs {
        Some(x) if *x.get_ref() == 0 || *x.get_ref() > qps.min(MAX_EECS) => Err(keys.error(
            "eecs",
            x.span(),
            format!(
                "{}: must be 1..={} (flow q of a host pair uses EEC q mod eecs, and the table has qps = {qps})",
                x.get_ref(),
                qps.min(MAX_EECS)
            ),
        )),
        Some(x) => Ok(Some(*x.get_ref())),
        None => Ok(Some(1)),
    }
}

/// One plan per (source, destination, QP) of the resolved pattern, tagged in order from
/// `template.flow`; pair k starts k x `stagger_ps` after the table's start.
fn expand_pairs(
    template: &FlowPlan,
    pattern: Pattern,
    pairs: Vec<(String, Vec<String>)>,
    qps: u32,
    stagger_ps: Picos,
    duration_ps: Option<Picos>,
) -> Vec<FlowPlan> {
    let (i, op, service) = (template.table, template.op, template.service);
    let first_of_table = template.flow;
    let start_ps = template.start_ps;
    let ring_len = pairs.len() as u32;
    let arrow = match op {
        FlowOp::Read => "<-",
        _ => "->",
    };
    let tag = match service {
        Service::Rc => op.name().to_string(),
        s => format!("{}-{}", format!("{s:?}").to_lowercase(), op.name()),
    };
    let mut out = Vec::new();
    for (k, (src, dests)) in pairs.into_iter().enumerate() {
        for (dst, q) in dests
            .into_iter()
            .flat_map(|d| (0..qps).map(move |q| (d.clone(), q)))
        {
            let flow = first_of_table + out.len() as u32;
            let nth = (flow - first_of_table) as u64;
            // Ring: host k's posts wait for what host k - 1 sent it.
            let gate = (pattern == Pattern::Ring)
                .then(|| first_of_table + (k as u32 + ring_len - 1) % ring_len);
            out.push(FlowPlan {
                flow,
                info: FlowInfo {
                    name: if qps > 1 {
                        format!("f{i} {tag} {src}{arrow}{dst} q{q}")
                    } else {
                        format!("f{i} {tag} {src}{arrow}{dst}")
                    },
                    src: src.clone(),
                    dst: dst.clone(),
                    data_from: match op {
                        FlowOp::Read => dst.clone(),
                        _ => src.clone(),
                    },
                    management: false,
                },
                src: src.clone(),
                dst,
                rd: template.rd.map(|r| RdPlan { qp: q, ..r }),
                stop_ps: duration_ps.map(|d| start_ps + nth * stagger_ps + d),
                gate,
                start_ps: start_ps + nth * stagger_ps,
                ..template.clone()
            });
        }
    }
    out
}
