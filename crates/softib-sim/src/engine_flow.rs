//! perftest-style flows run by the real transport engine (scenario `[[flow]]` tables).
//!
//! Each (requester, responder) pair of a flow table gets a QP on each side's device
//! (RC, UC or UD), connected as perftest's out-of-band exchange would, and the requester
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
//! service = "rc"            # rc; uc for send and write; ud for send
//! pattern = "one-to-one"    # one-to-one, incast, permutation, all-to-all, ring
//! src = "h0"                # the requester; incast takes srcs = [...] and dst
//! dst = "h1"
//! size = 65536              # message bytes (atomic: 8; UD: at most the MTU)
//! tx_depth = 128            # messages in flight per QP
//! iterations = 1000         # per QP; default: until the end of the run
//! duration_us = 500         # or: each QP posts for this long after its start
//! qps = 1                   # QP pairs per (requester, responder), perftest's -q
//! mtu = 4096                # path MTU: 256, 512, 1024, 2048 or 4096
//! sl = 0
//! local_ack_timeout = 14    # 4.096 us x 2^n (IBA 9.7.6.1.3); 0 = infinite
//! retry_cnt = 7             # transport retries before IBV_WC_RETRY_EXC_ERR
//! rnr_retry = 7             # RNR retries before IBV_WC_RNR_RETRY_EXC_ERR; 7 = forever
//! rnr_timer = 12            # the responder's min_rnr_timer code (12 = 0.64 ms)
//! max_rd_atomic = 16        # READs/atomics in flight per QP (both ends), 1..=16
//! start_us = 0
//! stagger_us = 0            # pair k of the table starts k x stagger_us after start_us
//! # op = "atomic":
//! atomic = "fetch_add"      # or "cmp_swap"; every QP of the table hits one 8-byte
//! add = 1                   #   counter at its responder; fetch_add adds `add`,
//! compare = 0               #   cmp_swap swaps in `swap` where it finds `compare`
//! swap = 1
//! # op = "send": the receiving application
//! rq_depth = 512            # receive WRs it keeps posted (the SRQ's depth with srq)
//! srq = false               # post to one shared receive queue per host and table
//! recv_post_delay_ns = 0    # from consuming a receive to posting it again
//! ```
//!
//! `pattern = "ring"` sends from each host (of `srcs`, in that order, or every host) to the
//! next, with `op = "send"` or `"write"` (WRITE with immediate, so that each chunk consumes a
//! receive at its successor): a host posts message k + 1 only once it has received
//! message k from its predecessor, the step dependency of a ring all-reduce
//! (`iterations` default 2 x (N - 1), one all-reduce of N chunks of `size` bytes).

use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::Fabric;
use crate::flow_app::{
    work_request, FlowHost, Ledger, Receiver, RecvQueue, RecvRole, Requester, SharedQueue,
    SharedTarget,
};
use softib_fabric::hca::Endpoint;
use crate::perftest::device_config;
use crate::report::flows::{FlowInfo, SharedRecorder};
use crate::report::summary::{FlowQp, HostTransport};
use softib_fabric::rng::{SeedTree, StreamKind};
use crate::scenario::{Scenario, ScenarioError};
use crate::stream::{host_names, Pattern, PatternKeys};
use softib_fabric::time::{to_engine_nanos, Picos, PS_PER_NS, PS_PER_US};
use serde::Deserialize;
use softib_transport::{
    AccessFlags, AhAttr, Device, MrKeys, Mtu, PdHandle, QpAttr, QpAttrMask, QpCap, QpInitAttr,
    QpState, QpType, Sge, SrqAttr, SrqHandle, UdDest, VecMemory, VerbsError, WrOpcode,
};
use std::collections::BTreeMap;
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
    fn name(self) -> &'static str {
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
}

impl Service {
    fn qp_type(self) -> QpType {
        match self {
            Service::Rc => QpType::Rc,
            Service::Uc => QpType::Uc,
            Service::Ud => QpType::Ud,
        }
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
    /// Operands of an atomic flow.
    pub atomic: Option<AtomicPlan>,
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
/// Q_Key of the flows' UD QPs.
const FLOW_QKEY: u32 = 0x1111_1111;
/// First PSN of every flow QP, as perftest's exchange would agree on.
const START_PSN: u32 = 0x100;

impl Scenario {
    fn small_key(
        &self,
        key: &str,
        v: &Option<Spanned<u8>>,
        range: std::ops::RangeInclusive<u8>,
        default: u8,
        what: &str,
    ) -> Result<u8, ScenarioError> {
        match v {
            Some(x) if !range.contains(x.get_ref()) => Err(self.error_at(
                key,
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

    /// The QP pairs of every `[[flow]]`, tagged from `first_flow`; errors name key and line.
    pub fn flow_plan(&self, first_flow: u32) -> Result<Vec<FlowPlan>, ScenarioError> {
        let topo = self.topology()?;
        let hosts = host_names(&topo);
        let mut out: Vec<FlowPlan> = Vec::new();
        for (i, e) in self.flow.iter().enumerate() {
            let table = format!("flow[{i}]");
            let key = |k: &str| format!("{table}.{k}");
            let op = *e.op.get_ref();
            let service = e.service.as_ref().map_or(Service::Rc, |s| *s.get_ref());
            let allowed = match service {
                Service::Rc => true,
                Service::Uc => matches!(op, FlowOp::Send | FlowOp::Write),
                Service::Ud => op == FlowOp::Send,
            };
            if !allowed {
                let s = e.service.as_ref().expect("RC allows every op");
                return Err(self.error_at(
                    &key("service"),
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
                return Err(self.error_at(
                    &key("pattern"),
                    e.pattern.span(),
                    "a ring steps on received messages: it needs op = \"send\" or \"write\" (with immediate)"
                        .into(),
                ));
            }
            // Ring WRITEs carry immediate data, which consumes a receive at the successor
            // and tells it the chunk has arrived (what NCCL-style rings do).
            let receives = op == FlowOp::Send || pattern == Pattern::Ring;
            let mtu = match &e.mtu {
                None => Mtu::M4096,
                Some(m) => Mtu::from_bytes(*m.get_ref()).ok_or_else(|| {
                    self.error_at(
                        &key("mtu"),
                        m.span(),
                        format!("{}: IB MTUs are 256, 512, 1024, 2048 and 4096", m.get_ref()),
                    )
                })?,
            };
            let size = match (&e.size, op, service) {
                (Some(s), FlowOp::Atomic, _) if *s.get_ref() != 8 => {
                    return Err(self.error_at(
                        &key("size"),
                        s.span(),
                        format!("{} bytes: atomics work on 8 bytes", s.get_ref()),
                    ))
                }
                (None, FlowOp::Atomic, _) => 8,
                (Some(s), _, Service::Ud) if *s.get_ref() > mtu.bytes() => {
                    return Err(self.error_at(
                        &key("size"),
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
                    return Err(self.error_at(
                        &key("size"),
                        s.span(),
                        format!("{} bytes: must be 1..={MAX_SIZE}", s.get_ref()),
                    ))
                }
                (Some(s), _, _) => *s.get_ref(),
                (None, _, _) => 65_536,
            };
            let tx_depth = match &e.tx_depth {
                Some(d) if *d.get_ref() == 0 || *d.get_ref() > MAX_TX_DEPTH => {
                    return Err(self.error_at(
                        &key("tx_depth"),
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
            let timeout = self.small_key(
                &key("local_ack_timeout"),
                &e.local_ack_timeout,
                0..=31,
                14,
                "a 5-bit exponent",
            )?;
            let retry_cnt =
                self.small_key(&key("retry_cnt"), &e.retry_cnt, 0..=7, 7, "a 3-bit count")?;
            let rnr_retry = self.small_key(
                &key("rnr_retry"),
                &e.rnr_retry,
                0..=7,
                7,
                "a 3-bit count (7 = forever)",
            )?;
            let rnr_timer = self.small_key(
                &key("rnr_timer"),
                &e.rnr_timer,
                0..=31,
                12,
                "a 5-bit RNR timer code (IBA 9.7.5.2.8)",
            )?;
            let max_rd_atomic = self.small_key(
                &key("max_rd_atomic"),
                &e.max_rd_atomic,
                1..=16,
                16,
                "the device allows",
            )?;
            // Keys that belong to another op are mistakes worth naming.
            let only = |present: bool, k: &str, span: std::ops::Range<usize>, ops: &str| {
                if present {
                    Err(self.error_at(
                        &key(k),
                        span,
                        format!("applies to {ops} flows, not {}", op.name()),
                    ))
                } else {
                    Ok(())
                }
            };
            if op != FlowOp::Atomic {
                if let Some(a) = &e.atomic {
                    only(true, "atomic", a.span(), "atomic")?;
                }
                for (v, k) in [(&e.add, "add"), (&e.compare, "compare"), (&e.swap, "swap")] {
                    if let Some(v) = v {
                        only(true, k, v.span(), "atomic")?;
                    }
                }
            }
            if !receives {
                if let Some(d) = &e.rq_depth {
                    only(true, "rq_depth", d.span(), "send")?;
                }
                if let Some(d) = &e.srq {
                    only(true, "srq", d.span(), "send")?;
                }
                if let Some(d) = &e.recv_post_delay_ns {
                    only(true, "recv_post_delay_ns", d.span(), "send")?;
                }
            }
            let atomic = (op == FlowOp::Atomic).then(|| {
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
            });
            let srq = e.srq.as_ref().is_some_and(|s| *s.get_ref());
            if srq && service != Service::Rc {
                let s = e.srq.as_ref().expect("srq is set");
                return Err(self.error_at(
                    &key("srq"),
                    s.span(),
                    "shared receive queues serve RC QPs here".into(),
                ));
            }
            let recv = receives
                .then(|| -> Result<RecvPlan, ScenarioError> {
                    let depth = match &e.rq_depth {
                        Some(d) if *d.get_ref() == 0 || *d.get_ref() > MAX_RQ_DEPTH => {
                            return Err(self.error_at(
                                &key("rq_depth"),
                                d.span(),
                                format!("{}: must be 1..={MAX_RQ_DEPTH}", d.get_ref()),
                            ))
                        }
                        Some(d) => *d.get_ref(),
                        None => 512,
                    };
                    Ok(RecvPlan {
                        depth,
                        srq,
                        post_delay_ps: e.recv_post_delay_ns.as_ref().map_or(0, |v| *v.get_ref())
                            * PS_PER_NS,
                    })
                })
                .transpose()?;
            let sl = self.sl_key(&key("sl"), &e.sl)?;
            let start_ps = self.start_key(&key("start_us"), &e.start_us)?;
            let stagger_ps = self.start_key(&key("stagger_us"), &e.stagger_us)?;
            let pairs = self.resolve_pattern(
                &table,
                PatternKeys {
                    pattern,
                    src: &e.src,
                    srcs: &e.srcs,
                    dst: &e.dst,
                    shift: &e.shift,
                },
                &hosts,
            )?;
            let iterations = match &e.iterations {
                Some(n) if *n.get_ref() == 0 => {
                    return Err(self.error_at(
                        &key("iterations"),
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
                    return Err(self.error_at(
                        &key("duration_us"),
                        d.span(),
                        "must be > 0 (omit it to run until the end)".into(),
                    ))
                }
                Some(d) => Some((d.get_ref() * PS_PER_US as f64).round() as Picos),
                None => None,
            };
            let qps = match &e.qps {
                Some(q) if *q.get_ref() == 0 || *q.get_ref() > MAX_QPS => {
                    return Err(self.error_at(
                        &key("qps"),
                        q.span(),
                        format!("{}: must be 1..={MAX_QPS}", q.get_ref()),
                    ))
                }
                Some(q) if *q.get_ref() > 1 && (pattern == Pattern::Ring || service == Service::Ud) => {
                    return Err(self.error_at(
                        &key("qps"),
                        q.span(),
                        "a ring steps one QP per neighbour, and UD uses one QP per host: qps must be 1"
                            .into(),
                    ))
                }
                Some(q) => *q.get_ref(),
                None => 1,
            };
            let first_of_table = first_flow + out.len() as u32;
            let ring_len = pairs.len() as u32;
            for (k, (src, dests)) in pairs.into_iter().enumerate() {
                for (dst, q) in dests
                    .into_iter()
                    .flat_map(|d| (0..qps).map(move |q| (d.clone(), q)))
                {
                    let flow = first_flow + out.len() as u32;
                    let nth = (flow - first_of_table) as u64;
                    let arrow = match op {
                        FlowOp::Read => "<-",
                        _ => "->",
                    };
                    let tag = match (op, service) {
                        (_, Service::Rc) => op.name().to_string(),
                        (_, s) => format!("{}-{}", format!("{s:?}").to_lowercase(), op.name()),
                    };
                    // Ring: host k's posts wait for what host k - 1 sent it.
                    let gate = (pattern == Pattern::Ring)
                        .then(|| first_of_table + (k as u32 + ring_len - 1) % ring_len);
                    out.push(FlowPlan {
                        flow,
                        table: i,
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
                        op,
                        service,
                        atomic,
                        src: src.clone(),
                        dst,
                        size,
                        tx_depth,
                        iterations,
                        stop_ps: duration_ps.map(|d| start_ps + nth * stagger_ps + d),
                        qp: QpPlan {
                            mtu,
                            sl,
                            timeout,
                            retry_cnt,
                            rnr_retry,
                            rnr_timer,
                            max_rd_atomic,
                        },
                        recv,
                        gate,
                        start_ps: start_ps + nth * stagger_ps,
                    });
                }
            }
        }
        Ok(out)
    }
}

impl Scenario {
    /// Checks every `[[stream]]` and `[[flow]]`, and that no host carries both (an HCA
    /// port runs either the packet generator or the transport engine).
    pub fn traffic_check(&self) -> Result<(), ScenarioError> {
        let streams = self.stream_plan()?;
        let flows = self.flow_plan(streams.len() as u32)?;
        let mut generator_hosts = std::collections::BTreeSet::new();
        for s in &streams {
            generator_hosts.insert(s.host.as_str());
            generator_hosts.extend(s.dests.iter().map(String::as_str));
        }
        for (i, f) in flows.iter().enumerate() {
            for h in [&f.src, &f.dst] {
                if generator_hosts.contains(h.as_str()) {
                    return Err(self.error_at(
                        "flow",
                        0..0,
                        format!(
                            "{} (pair {i}) uses {h}, which a [[stream]] also uses: a host runs either a stream or engine flows",
                            f.info.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Why flows could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up flow {flow} ({name}): {reason}")]
pub struct FlowSetupError {
    /// Flow tag.
    pub flow: u32,
    /// Flow name.
    pub name: String,
    /// What the engine refused.
    pub reason: String,
}

/// Something that may wrap a host's endpoint before it is attached (e.g. a capture).
pub type WrapEndpoint<'a> = dyn FnMut(&str, Box<dyn Endpoint>) -> Box<dyn Endpoint> + 'a;

/// One side of a flow's connection.
#[derive(Clone, Copy, Debug)]
struct Side {
    qpn: u32,
    keys: MrKeys,
    addr: u64,
}

/// A host's device and what the flows put on it.
struct Host {
    dev: Device,
    pd: PdHandle,
    next_addr: u64,
    app: FlowHost,
    /// SRQ per flow table: index into `app.srqs`.
    srq_of_table: BTreeMap<usize, usize>,
    /// Atomic counter per flow table: (keys, addr).
    counter_of_table: BTreeMap<usize, (MrKeys, u64)>,
    /// The UD QP per flow table, and its receive queue in `app.srqs`.
    ud_of_table: BTreeMap<usize, (Side, usize)>,
    /// The shared buffer per (flow table, length).
    buffer_of_table: BTreeMap<(usize, usize), (MrKeys, u64)>,
    /// Send WRs the UD QP of each flow table may have posted: its requesters' windows.
    ud_send_depth: BTreeMap<usize, u32>,
}

impl Host {
    /// The buffer the QPs of flow table `table` on this host share (`len` bytes): what
    /// moves is counted, not checked, so one region per table keeps memory per host
    /// rather than per QP, as it must for an all-to-all of thousands of hosts.
    fn table_buffer(&mut self, table: usize, len: usize) -> Result<(MrKeys, u64), VerbsError> {
        if let Some(&b) = self.buffer_of_table.get(&(table, len)) {
            return Ok(b);
        }
        let b = self.buffer(len)?;
        self.buffer_of_table.insert((table, len), b);
        Ok(b)
    }

    /// Registers a zeroed buffer of `len` bytes with every access right the flows use.
    fn buffer(&mut self, len: usize) -> Result<(MrKeys, u64), VerbsError> {
        let addr = self.next_addr;
        self.next_addr += (len as u64).div_ceil(4096) * 4096 + 4096;
        let keys = self.dev.reg_mr(
            self.pd,
            Box::new(VecMemory::zeroed(len)),
            addr,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        )?;
        Ok((keys, addr))
    }

    /// The UD QP of flow table `table` on this host, created (ready to send and receive,
    /// `recv_depth` receives of `len` bytes kept posted) on first use.
    fn ud_qp(
        &mut self,
        table: usize,
        len: usize,
        (send_depth, recv_depth): (u32, u32),
        qp: &QpPlan,
    ) -> Result<(Side, usize), VerbsError> {
        if let Some(&q) = self.ud_of_table.get(&table) {
            return Ok(q);
        }
        let buf = self.table_buffer(table, len)?;
        let side = self.side(Service::Ud, buf, (send_depth, recv_depth), None)?;
        connect(&mut self.dev, Service::Ud, side.qpn, 0, 0, qp)?;
        let i = self.app.srqs.len();
        self.app.srqs.push(SharedQueue {
            target: SharedTarget::Qp(side.qpn),
            sge: Sge {
                addr: side.addr,
                length: len as u32,
                lkey: side.keys.lkey,
            },
            depth: recv_depth,
            due: Default::default(),
        });
        self.app.recv_roles.insert(side.qpn, RecvRole::Ud);
        self.ud_of_table.insert(table, (side, i));
        Ok((side, i))
    }

    /// A QP of `service` (on `srq` if given) completing into the host's CQ, with queues of
    /// the depths it needs (the engine reserves them) and the buffer `buf`.
    fn side(
        &mut self,
        service: Service,
        (keys, addr): (MrKeys, u64),
        (send_depth, recv_depth): (u32, u32),
        srq: Option<SrqHandle>,
    ) -> Result<Side, VerbsError> {
        let cq = self.app.cq;
        let qpn = self.dev.create_qp(
            self.pd,
            QpInitAttr {
                qp_type: service.qp_type(),
                send_cq: cq,
                recv_cq: cq,
                srq,
                cap: QpCap {
                    max_send_wr: send_depth.max(1),
                    max_recv_wr: recv_depth.max(1),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )?;
        Ok(Side { qpn, keys, addr })
    }
}

/// Moves `me`'s QP RESET -> INIT -> RTR -> RTS: connected to `peer` at `peer_lid` (RC, UC)
/// or ready for datagrams (UD), with the attributes of `qp`.
fn connect(
    dev: &mut Device,
    service: Service,
    me: u32,
    peer: u32,
    peer_lid: u16,
    qp: &QpPlan,
) -> Result<(), VerbsError> {
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qkey: FLOW_QKEY,
        qp_access_flags: AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    let base = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
    match service {
        Service::Ud => dev.modify_qp(0, me, &attr, base | QpAttrMask::QKEY)?,
        Service::Uc => {
            attr.qp_access_flags = AccessFlags::REMOTE_WRITE;
            dev.modify_qp(0, me, &attr, base | QpAttrMask::ACCESS_FLAGS)?
        }
        Service::Rc => dev.modify_qp(0, me, &attr, base | QpAttrMask::ACCESS_FLAGS)?,
    }
    attr.qp_state = QpState::Rtr;
    attr.path_mtu = qp.mtu;
    attr.dest_qp_num = peer;
    attr.rq_psn = START_PSN;
    attr.max_dest_rd_atomic = qp.max_rd_atomic;
    attr.min_rnr_timer = qp.rnr_timer;
    attr.ah_attr = AhAttr {
        dlid: peer_lid,
        sl: qp.sl,
        src_path_bits: 0,
        grh: None,
    };
    let connected =
        QpAttrMask::STATE | QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::DEST_QPN;
    match service {
        Service::Ud => dev.modify_qp(0, me, &attr, QpAttrMask::STATE)?,
        Service::Uc => dev.modify_qp(0, me, &attr, connected | QpAttrMask::RQ_PSN)?,
        Service::Rc => dev.modify_qp(
            0,
            me,
            &attr,
            connected
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER,
        )?,
    }
    attr.qp_state = QpState::Rts;
    attr.sq_psn = START_PSN;
    attr.timeout = qp.timeout;
    attr.retry_cnt = qp.retry_cnt;
    attr.rnr_retry = qp.rnr_retry;
    attr.max_rd_atomic = qp.max_rd_atomic;
    let rts = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
    match service {
        Service::Ud | Service::Uc => dev.modify_qp(0, me, &attr, rts),
        Service::Rc => dev.modify_qp(
            0,
            me,
            &attr,
            rts | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        ),
    }
}

/// The device of host `host` (LID `lid`): native IB, with the CAs' congestion control
/// (IBA Annex A10 CCA, BECN answers) when the fabric has it on, at the host port's rate.
fn flow_device(fabric: &Fabric, host: &str, lid: u16, seed: u64) -> Device {
    let mut cfg = device_config(lid);
    if let (Some(cc), Some(rate)) = (fabric.ca_congestion_control(), fabric.port_rate(host, 1)) {
        cfg.cc = cc.device_cc(&rate);
    }
    Device::new(cfg, seed)
}

/// Creates a device per host of `plans`, the QPs of every pair, connects them and attaches
/// the hosts to `fabric` (each endpoint passed through `wrap`, e.g. to capture it). Returns the hosts, for [`transport_counters`].
pub fn attach_flows(
    fabric: &mut Fabric,
    plans: &[FlowPlan],
    recorder: &SharedRecorder,
    seed: u64,
    wrap: &mut WrapEndpoint<'_>,
) -> Result<Vec<String>, FlowSetupError> {
    let seeds = SeedTree::new(seed);
    let ledger = Ledger::default();
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    let lid = |f: &Fabric, h: &str| f.lid(h).expect("the plan names hosts of this topology");
    // Completions a host's CQ may have to hold at once: every send and receive WR of its
    // QPs (it is polled after every engine interaction, so far fewer in practice).
    // A receive queue shared by a table's flows (an SRQ, or the one UD QP of the table on
    // the responder) counts once, not once per flow.
    let mut cq_depth: BTreeMap<&str, u64> = BTreeMap::new();
    let mut shared_rq: std::collections::BTreeSet<(&str, usize)> = Default::default();
    for p in plans {
        *cq_depth.entry(&p.src).or_default() += p.tx_depth as u64;
        let dst = cq_depth.entry(&p.dst).or_default();
        if let Some(r) = p.recv {
            let shared = r.srq || p.service == Service::Ud;
            if !shared || shared_rq.insert((p.dst.as_str(), p.table)) {
                *dst += r.depth as u64;
            }
        }
    }
    for p in plans {
        for h in [&p.src, &p.dst] {
            if !hosts.contains_key(h) {
                let l = lid(fabric, h);
                let mut dev = flow_device(fabric, h, l, seeds.derive(StreamKind::Engine, l as u64));
                let pd = dev.alloc_pd();
                let max = dev.config().max_cqe as u64;
                let cq = dev
                    .create_cq(cq_depth[h.as_str()].clamp(64, max) as u32)
                    .map_err(|e| FlowSetupError {
                        flow: p.flow,
                        name: p.info.name.clone(),
                        reason: e.to_string(),
                    })?;
                hosts.insert(
                    h.clone(),
                    Host {
                        dev,
                        pd,
                        next_addr: 0x1000_0000,
                        app: FlowHost {
                            cq,
                            recv_roles: BTreeMap::new(),
                            ud_sources: BTreeMap::new(),
                            requesters: Vec::new(),
                            receivers: Vec::new(),
                            srqs: Vec::new(),
                            responders: Vec::new(),
                            counters: Vec::new(),
                            recorder: recorder.clone(),
                            ledger: ledger.clone(),
                            wcs: vec![softib_transport::harness::empty_wc(); 64],
                            unreliable: false,
                            dirty: Vec::new(),
                            unstarted: 0,
                        },
                        srq_of_table: BTreeMap::new(),
                        ud_of_table: BTreeMap::new(),
                        buffer_of_table: BTreeMap::new(),
                        ud_send_depth: BTreeMap::new(),
                        counter_of_table: BTreeMap::new(),
                    },
                );
            }
        }
    }
    for p in plans.iter().filter(|p| p.service == Service::Ud) {
        let host = hosts.get_mut(&p.src).expect("created above");
        let max = host.dev.config().max_qp_wr;
        let d = host.ud_send_depth.entry(p.table).or_insert(0);
        *d += p.tx_depth;
        if *d > max {
            // One UD QP carries all of the host's flows of the table: their windows add up
            // in its send queue.
            return Err(FlowSetupError {
                flow: p.flow,
                name: p.info.name.clone(),
                reason: format!(
                    "{}'s UD QP for flow table {} would need more than {max} send WRs in flight (tx_depth x destinations): lower tx_depth",
                    p.src, p.table
                ),
            });
        }
    }
    // Receivers by flow tag, to resolve ring gates: (host, index in its receivers).
    let mut receiver_of: BTreeMap<u32, usize> = BTreeMap::new();
    for p in plans {
        let err = |reason: String| FlowSetupError {
            flow: p.flow,
            name: p.info.name.clone(),
            reason,
        };
        let verr = |e: VerbsError| err(e.to_string());
        recorder.borrow_mut().define(p.flow, p.info.clone());
        let (ls, ld) = (lid(fabric, &p.src), lid(fabric, &p.dst));
        // UD receives carry the 40-byte GRH area in front of the payload.
        let header = if p.service == Service::Ud { 40 } else { 0 };
        let buf_len = p.size as usize + header as usize;
        let responder = hosts.get_mut(&p.dst).expect("created above");
        let srq = match p.recv {
            Some(r) if r.srq => {
                let next = responder.app.srqs.len();
                let i = *responder.srq_of_table.entry(p.table).or_insert(next);
                if i == next {
                    let handle = responder
                        .dev
                        .create_srq(
                            responder.pd,
                            SrqAttr {
                                max_wr: r.depth,
                                max_sge: 1,
                                srq_limit: 0,
                            },
                        )
                        .map_err(verr)?;
                    let (keys, addr) = responder.table_buffer(p.table, buf_len).map_err(verr)?;
                    responder.app.srqs.push(SharedQueue {
                        target: SharedTarget::Srq(handle),
                        sge: Sge {
                            addr,
                            length: buf_len as u32,
                            lkey: keys.lkey,
                        },
                        depth: r.depth,
                        due: Default::default(),
                    });
                }
                Some(i)
            }
            _ => None,
        };
        let recv_depth = match p.recv {
            Some(r) if !r.srq => r.depth,
            _ => 1,
        };
        // UD: one QP per host and table, which every peer reaches (the point of UD at
        // scale); its receive queue serves all of them.
        let (peer, ud_queue) = if p.service == Service::Ud {
            let depths = (
                responder.ud_send_depth.get(&p.table).copied().unwrap_or(1),
                recv_depth,
            );
            let (side, q) = responder
                .ud_qp(p.table, buf_len, depths, &p.qp)
                .map_err(verr)?;
            (side, Some(q))
        } else {
            let srq_handle = srq.and_then(|i| match responder.app.srqs[i].target {
                SharedTarget::Srq(h) => Some(h),
                SharedTarget::Qp(_) => None,
            });
            let buf = responder.table_buffer(p.table, buf_len).map_err(verr)?;
            let side = responder
                .side(p.service, buf, (1, recv_depth), srq_handle)
                .map_err(verr)?;
            (side, None)
        };
        let target = match p.atomic {
            Some(_) => {
                let entry = match responder.counter_of_table.get(&p.table) {
                    Some(c) => *c,
                    None => {
                        let c = responder.buffer(8).map_err(verr)?;
                        responder.counter_of_table.insert(p.table, c);
                        responder.app.counters.push((p.table, c.0.lkey, c.1));
                        c
                    }
                };
                entry
            }
            None => (peer.keys, peer.addr),
        };
        responder.app.responders.push((p.flow, peer.qpn));
        let mut ud_receiver = None;
        if let Some(r) = p.recv {
            let index = responder.app.receivers.len();
            receiver_of.insert(p.flow, index);
            let queue = match (ud_queue, srq) {
                (Some(q), _) => {
                    ud_receiver = Some(index);
                    RecvQueue::Shared(q)
                }
                (None, Some(q)) => {
                    responder
                        .app
                        .recv_roles
                        .insert(peer.qpn, RecvRole::Flow(index));
                    RecvQueue::Shared(q)
                }
                (None, None) => {
                    responder
                        .app
                        .recv_roles
                        .insert(peer.qpn, RecvRole::Flow(index));
                    RecvQueue::Own
                }
            };
            responder.app.receivers.push(Receiver {
                flow: p.flow,
                qpn: peer.qpn,
                queue,
                sge: Sge {
                    addr: peer.addr,
                    length: buf_len as u32,
                    lkey: peer.keys.lkey,
                },
                depth: r.depth,
                delay: to_engine_nanos(r.post_delay_ps),
                header,
                records: p.service != Service::Rc,
                due: Default::default(),
                received: 0,
                gates: None,
            });
        }
        let requester = hosts.get_mut(&p.src).expect("created above");
        let me = if p.service == Service::Ud {
            let depths = (
                requester.ud_send_depth.get(&p.table).copied().unwrap_or(1),
                recv_depth,
            );
            requester
                .ud_qp(p.table, buf_len, depths, &p.qp)
                .map_err(verr)?
                .0
        } else {
            let buf = requester
                .table_buffer(p.table, p.size as usize)
                .map_err(verr)?;
            let me = requester
                .side(p.service, buf, (p.tx_depth, 1), None)
                .map_err(verr)?;
            connect(&mut requester.dev, p.service, me.qpn, peer.qpn, ld, &p.qp).map_err(verr)?;
            me
        };
        let ud = if p.service == Service::Ud {
            let ah = requester
                .dev
                .create_ah(
                    requester.pd,
                    AhAttr {
                        dlid: ld,
                        sl: p.qp.sl,
                        src_path_bits: 0,
                        grh: None,
                    },
                )
                .map_err(verr)?;
            Some(UdDest {
                ah,
                remote_qpn: peer.qpn,
                remote_qkey: FLOW_QKEY,
            })
        } else {
            None
        };
        // Unreliable messages that consume a receive are counted where they arrive.
        let unreliable_send = p.recv.is_some() && p.service != Service::Rc;
        let (opcode, compare_add, swap) = match (p.op, p.atomic) {
            (FlowOp::Write, _) if p.recv.is_some() => (WrOpcode::RdmaWriteWithImm, 0, 0),
            (FlowOp::Write, _) => (WrOpcode::RdmaWrite, 0, 0),
            (FlowOp::Read, _) => (WrOpcode::RdmaRead, 0, 0),
            (FlowOp::Send, _) if unreliable_send => (WrOpcode::SendWithImm, 0, 0),
            (FlowOp::Send, _) => (WrOpcode::Send, 0, 0),
            (FlowOp::Atomic, Some(AtomicPlan::CmpSwap { compare, swap })) => {
                (WrOpcode::AtomicCmpAndSwp, compare, swap)
            }
            (FlowOp::Atomic, a) => {
                let add = match a {
                    Some(AtomicPlan::FetchAdd { add }) => add,
                    _ => 1,
                };
                (WrOpcode::AtomicFetchAndAdd, add, 0)
            }
        };
        let local = Sge {
            addr: me.addr,
            length: p.size,
            lkey: me.keys.lkey,
        };
        requester.app.unreliable |= p.service != Service::Rc;
        requester.app.unstarted += 1;
        requester.app.requesters.push(Requester {
            flow: p.flow,
            qpn: me.qpn,
            wr: work_request(
                opcode,
                local,
                target.1,
                target.0.rkey,
                compare_add,
                swap,
                ud,
            ),
            size: p.size,
            tx_depth: p.tx_depth,
            remaining: p.iterations,
            start: to_engine_nanos(p.start_ps),
            stop: p.stop_ps.map(to_engine_nanos),
            gate: None,
            counted_at_receiver: unreliable_send,
            posted: Default::default(),
            posted_total: 0,
            started: false,
            failed: false,
        });
        let responder = hosts.get_mut(&p.dst).expect("created above");
        if let Some(index) = ud_receiver {
            responder.app.ud_sources.insert((ls, me.qpn), index);
        }
        if p.service != Service::Ud {
            connect(&mut responder.dev, p.service, peer.qpn, me.qpn, ls, &p.qp).map_err(verr)?;
        }
    }
    // Ring gates: the receiver of the gating flow lives on this flow's requester host.
    for p in plans {
        if let Some(g) = p.gate {
            let host = hosts.get_mut(&p.src).expect("created above");
            let r = receiver_of[&g];
            if let Some(i) = host.app.requesters.iter().position(|o| o.flow == p.flow) {
                host.app.requesters[i].gate = Some(r);
                host.app.receivers[r].gates = Some(i);
            }
        }
    }
    let names: Vec<String> = hosts.keys().cloned().collect();
    for (name, h) in hosts {
        fabric
            .attach(
                &name,
                wrap(&name, Box::new(EngineHca::new(h.dev, Box::new(h.app)))),
            )
            .map_err(|e| FlowSetupError {
                flow: 0,
                name: name.clone(),
                reason: e.to_string(),
            })?;
    }
    Ok(names)
}

/// The transport counters of the engines on `hosts` (as attached by [`attach_flows`]).
pub fn transport_counters(fabric: &mut Fabric, hosts: &[String]) -> Vec<HostTransport> {
    hosts
        .iter()
        .filter_map(|h| {
            let hca = fabric.endpoint_mut::<EngineHca>(h, 1)?;
            let mut t = HostTransport::new(
                h,
                &hca.device().counters(),
                hca.encap_counters().rx_malformed,
            )
            .with_footprint(&hca.device().footprint());
            let e = hca.encap_counters();
            if e.rx_processed > 0 {
                t.rx_wait_mean_us = crate::report::summary::round(
                    e.rx_wait_ps as f64 / e.rx_processed as f64 / PS_PER_US as f64,
                    3,
                );
            }
            t.rx_backlog_peak = e.rx_backlog_peak;
            Some(t)
        })
        .collect()
}

/// Per flow, the counters of its requester and responder QPs (hosts as attached by
/// [`attach_flows`]).
pub fn flow_qp_counters(fabric: &mut Fabric, hosts: &[String]) -> BTreeMap<u32, FlowQp> {
    let mut out: BTreeMap<u32, FlowQp> = BTreeMap::new();
    for h in hosts {
        let Some(hca) = fabric.endpoint_mut::<EngineHca>(h, 1) else {
            continue;
        };
        let Some(app) = hca.app::<FlowHost>() else {
            continue;
        };
        for (flow, qpn, requester) in app.qps() {
            let Some(c) = hca.device().qp_counters(qpn) else {
                continue;
            };
            let e = out.entry(flow).or_default();
            if requester {
                e.set_requester(c);
            } else {
                e.set_responder(c);
            }
        }
    }
    out
}

/// The 8-byte counter that the atomic flows of table `table` target on `host`, as it is
/// now (the simulator's memory holds it little-endian, as an x86 host would).
pub fn atomic_counter(fabric: &mut Fabric, host: &str, table: usize) -> Option<u64> {
    let hca = fabric.endpoint_mut::<EngineHca>(host, 1)?;
    let app = hca.app::<FlowHost>()?;
    let &(_, lkey, _) = app.counters.iter().find(|c| c.0 == table)?;
    let mut b = [0u8; 8];
    hca.device().memory(lkey)?.read(0, &mut b);
    Some(u64::from_le_bytes(b))
}
