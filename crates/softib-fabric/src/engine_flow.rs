//! perftest-style flows run by the real transport engine (scenario `[[flow]]` tables).
//!
//! Each (requester, responder) pair of a flow table gets an RC QP on each side's device,
//! connected as perftest's out-of-band exchange would, and the requester keeps `tx_depth`
//! signalled RDMA WRITEs (`ib_write_bw`) or RDMA READs (`ib_read_bw`) of `size` bytes in
//! flight. Every completion is one message for the report: payload bytes and
//! post-to-completion latency. After the run the engines' counters (retransmissions,
//! timeouts, NAKs, duplicates, FECN/BECN) go into the report per host.
//!
//! ```toml
//! [[flow]]
//! op = "write"              # write (ib_write_bw) or read (ib_read_bw)
//! pattern = "one-to-one"    # one-to-one, incast, permutation, all-to-all (one QP per pair)
//! src = "h0"                # the requester; incast takes srcs = [...] and dst
//! dst = "h1"
//! size = 65536              # message bytes
//! tx_depth = 128            # messages in flight per QP
//! iterations = 1000         # per QP; default: until the end of the run
//! mtu = 4096                # path MTU: 256, 512, 1024, 2048 or 4096
//! sl = 0
//! local_ack_timeout = 14    # 4.096 us x 2^n (IBA 9.7.6.1.3); 0 = infinite
//! start_us = 0
//! ```

use crate::engine_hca::{EngineHca, HostApp};
use crate::fabric::Fabric;
use crate::hca::Endpoint;
use crate::perftest::{device, rc_connect, rc_side, Side};
use crate::report::flows::{FlowInfo, SharedRecorder};
use crate::report::summary::HostTransport;
use crate::rng::{SeedTree, StreamKind};
use crate::scenario::{Scenario, ScenarioError};
use crate::stream::{host_names, Pattern, PatternKeys};
use crate::time::{from_engine_nanos, to_engine_nanos, Picos};
use serde::Deserialize;
use softib_transport::{
    Device, Mtu, Nanos, SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode,
};
use std::collections::{BTreeMap, VecDeque};
use toml::Spanned;

/// The operation a flow runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowOp {
    /// RDMA WRITE, as `ib_write_bw`.
    Write,
    /// RDMA READ, as `ib_read_bw`.
    Read,
}

impl FlowOp {
    fn name(self) -> &'static str {
        match self {
            FlowOp::Write => "write",
            FlowOp::Read => "read",
        }
    }
}

/// A `[[flow]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowEntry {
    /// Operation.
    pub op: FlowOp,
    /// Who runs it against whom.
    pub pattern: Pattern,
    /// Requester (one-to-one).
    pub src: Option<Spanned<String>>,
    /// Requesters (incast; default every host but `dst`).
    pub srcs: Option<Vec<Spanned<String>>>,
    /// Responder (one-to-one, incast).
    pub dst: Option<Spanned<String>>,
    /// Permutation shift.
    pub shift: Option<Spanned<usize>>,
    /// Message size in bytes (default 65536).
    pub size: Option<Spanned<u32>>,
    /// Messages in flight per QP (default 128, perftest's).
    pub tx_depth: Option<Spanned<u32>>,
    /// Messages per QP (default: until the end of the run).
    pub iterations: Option<u64>,
    /// Path MTU in bytes (default 4096).
    pub mtu: Option<Spanned<u32>>,
    /// Service level.
    pub sl: Option<Spanned<u8>>,
    /// Local ACK timeout exponent (default 14: 67 ms).
    pub local_ack_timeout: Option<Spanned<u8>>,
    /// Start time, microseconds.
    pub start_us: Option<Spanned<f64>>,
}

/// One QP pair of a flow table, resolved against the topology.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowPlan {
    /// Flow tag (after the streams' tags).
    pub flow: u32,
    /// Identity for the report.
    pub info: FlowInfo,
    /// Operation.
    pub op: FlowOp,
    /// Requester host.
    pub src: String,
    /// Responder host.
    pub dst: String,
    /// Message bytes.
    pub size: u32,
    /// Messages in flight.
    pub tx_depth: u32,
    /// Messages in all (`None`: until the end).
    pub iterations: Option<u64>,
    /// Path MTU.
    pub mtu: Mtu,
    /// Service level.
    pub sl: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Start time.
    pub start_ps: Picos,
}

/// The QP's send queue depth ([`rc_side`]): more cannot be in flight.
const MAX_TX_DEPTH: u32 = 1024;
/// Largest message: the engine takes up to 2^31 bytes; a buffer of that size per QP would
/// not fit a large fabric, so flows stay at perftest's usual sizes.
const MAX_SIZE: u32 = 1 << 24;

impl Scenario {
    /// The QP pairs of every `[[flow]]`, tagged from `first_flow`; errors name key and line.
    pub fn flow_plan(&self, first_flow: u32) -> Result<Vec<FlowPlan>, ScenarioError> {
        let topo = self.topology()?;
        let hosts = host_names(&topo);
        let mut out = Vec::new();
        for (i, e) in self.flow.iter().enumerate() {
            let table = format!("flow[{i}]");
            let key = |k: &str| format!("{table}.{k}");
            let size = match &e.size {
                Some(s) if *s.get_ref() == 0 || *s.get_ref() > MAX_SIZE => {
                    return Err(self.error_at(
                        &key("size"),
                        s.span(),
                        format!("{} bytes: must be 1..={MAX_SIZE}", s.get_ref()),
                    ))
                }
                Some(s) => *s.get_ref(),
                None => 65_536,
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
            let mtu = match &e.mtu {
                None => Mtu::M4096,
                Some(m) => match m.get_ref() {
                    256 => Mtu::M256,
                    512 => Mtu::M512,
                    1024 => Mtu::M1024,
                    2048 => Mtu::M2048,
                    4096 => Mtu::M4096,
                    other => {
                        return Err(self.error_at(
                            &key("mtu"),
                            m.span(),
                            format!("{other}: IB MTUs are 256, 512, 1024, 2048 and 4096"),
                        ))
                    }
                },
            };
            let timeout = match &e.local_ack_timeout {
                Some(t) if *t.get_ref() > 31 => {
                    return Err(self.error_at(
                        &key("local_ack_timeout"),
                        t.span(),
                        "a 5-bit exponent: 0..=31".into(),
                    ))
                }
                Some(t) => *t.get_ref(),
                None => 14,
            };
            let sl = self.sl_key(&key("sl"), &e.sl)?;
            let start_ps = self.start_key(&key("start_us"), &e.start_us)?;
            let pairs = self.resolve_pattern(
                &table,
                PatternKeys {
                    pattern: e.pattern,
                    src: &e.src,
                    srcs: &e.srcs,
                    dst: &e.dst,
                    shift: &e.shift,
                },
                &hosts,
            )?;
            for (src, dests) in pairs {
                for dst in dests {
                    let flow = first_flow + out.len() as u32;
                    let arrow = match e.op {
                        FlowOp::Write => "->",
                        FlowOp::Read => "<-",
                    };
                    out.push(FlowPlan {
                        flow,
                        info: FlowInfo {
                            name: format!("f{i} {} {src}{arrow}{dst}", e.op.name()),
                            src: src.clone(),
                            dst: dst.clone(),
                            data_from: match e.op {
                                FlowOp::Write => src.clone(),
                                FlowOp::Read => dst.clone(),
                            },
                        },
                        op: e.op,
                        src: src.clone(),
                        dst,
                        size,
                        tx_depth,
                        iterations: e.iterations,
                        mtu,
                        sl,
                        timeout,
                        start_ps,
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

/// One requester QP at run time.
struct Op {
    flow: u32,
    me: Side,
    peer: Side,
    opcode: WrOpcode,
    size: u32,
    tx_depth: u32,
    remaining: Option<u64>,
    start: Nanos,
    /// Post times of the messages in flight, oldest first (RC completes in order).
    posted: VecDeque<Nanos>,
    failed: bool,
}

/// The application of one host: every requester QP it runs, recorded per message.
struct Perf {
    ops: Vec<Op>,
    recorder: SharedRecorder,
    wcs: Vec<WorkCompletion>,
}

impl Perf {
    fn post(&mut self, now: Nanos, dev: &mut Device) {
        for op in &mut self.ops {
            if op.failed || now < op.start {
                continue;
            }
            while (op.posted.len() as u32) < op.tx_depth && op.remaining != Some(0) {
                let wr = SendWr {
                    wr_id: op.flow as u64,
                    opcode: op.opcode,
                    sg_list: vec![Sge {
                        addr: op.me.addr,
                        length: op.size,
                        lkey: op.me.keys.lkey,
                    }],
                    flags: SendFlags::SIGNALED,
                    remote_addr: op.peer.addr,
                    rkey: op.peer.keys.rkey,
                    ..SendWr::default()
                };
                if dev.post_send(now, op.me.qpn, &wr).is_err() {
                    // The QP left RTS: its error completions tell the report why.
                    op.failed = true;
                    break;
                }
                op.posted.push_back(now);
                if let Some(r) = op.remaining.as_mut() {
                    *r -= 1;
                }
            }
        }
    }
}

impl HostApp for Perf {
    fn on_start(&mut self, now: Nanos, dev: &mut Device) {
        self.post(now, dev);
    }

    fn on_progress(&mut self, now: Nanos, dev: &mut Device) {
        let at = from_engine_nanos(now);
        for op in &mut self.ops {
            loop {
                let n = dev.poll_cq(op.me.cq, &mut self.wcs);
                if n == 0 {
                    break;
                }
                let mut rec = self.recorder.borrow_mut();
                for wc in &self.wcs[..n] {
                    let posted = op.posted.pop_front().unwrap_or(now);
                    if wc.status == WcStatus::Success {
                        rec.record_message(op.flow, at, op.size as u64, from_engine_nanos(posted));
                    } else {
                        rec.record_error(op.flow);
                        op.failed = true;
                    }
                }
            }
        }
        self.post(now, dev);
    }

    fn next_wakeup(&self) -> Option<Nanos> {
        // Only future start times need a wake-up; completions drive the rest.
        self.ops
            .iter()
            .filter(|o| o.posted.is_empty() && o.remaining != Some(0) && !o.failed)
            .map(|o| o.start)
            .filter(|&s| s > 0)
            .min()
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
    struct Host {
        dev: Device,
        ops: Vec<Op>,
        next_addr: u64,
    }
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    let lid = |f: &Fabric, h: &str| f.lid(h).expect("the plan names hosts of this topology");
    for p in plans {
        for h in [&p.src, &p.dst] {
            if !hosts.contains_key(h) {
                let l = lid(fabric, h);
                hosts.insert(
                    h.clone(),
                    Host {
                        dev: device(l, seeds.derive(StreamKind::Engine, l as u64)),
                        ops: Vec::new(),
                        next_addr: 0x1000_0000,
                    },
                );
            }
        }
    }
    for p in plans {
        let err = |reason: String| FlowSetupError {
            flow: p.flow,
            name: p.info.name.clone(),
            reason,
        };
        recorder.borrow_mut().define(p.flow, p.info.clone());
        let (ls, ld) = (lid(fabric, &p.src), lid(fabric, &p.dst));
        let mut side = |h: &str| -> Result<Side, FlowSetupError> {
            let host = hosts.get_mut(h).expect("created above");
            let addr = host.next_addr;
            host.next_addr += (p.size as u64).div_ceil(4096) * 4096 + 4096;
            rc_side(&mut host.dev, p.size as usize, addr).map_err(|e| err(e.to_string()))
        };
        let me = side(&p.src)?;
        let peer = side(&p.dst)?;
        let src = hosts.get_mut(&p.src).expect("created above");
        rc_connect(&mut src.dev, &me, &peer, ld, p.sl, p.mtu, p.timeout)
            .map_err(|e| err(e.to_string()))?;
        src.ops.push(Op {
            flow: p.flow,
            me,
            peer,
            opcode: match p.op {
                FlowOp::Write => WrOpcode::RdmaWrite,
                FlowOp::Read => WrOpcode::RdmaRead,
            },
            size: p.size,
            tx_depth: p.tx_depth,
            remaining: p.iterations,
            start: to_engine_nanos(p.start_ps),
            posted: VecDeque::new(),
            failed: false,
        });
        let dst = hosts.get_mut(&p.dst).expect("created above");
        rc_connect(&mut dst.dev, &peer, &me, ls, p.sl, p.mtu, p.timeout)
            .map_err(|e| err(e.to_string()))?;
    }
    let names: Vec<String> = hosts.keys().cloned().collect();
    for (name, h) in hosts {
        let app = Perf {
            ops: h.ops,
            recorder: recorder.clone(),
            wcs: vec![softib_transport::harness::empty_wc(); 64],
        };
        fabric
            .attach(
                &name,
                wrap(&name, Box::new(EngineHca::new(h.dev, Box::new(app)))),
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
            Some(HostTransport::new(
                h,
                &hca.device().counters(),
                hca.encap_counters().rx_malformed,
            ))
        })
        .collect()
}
