//! Runs a scenario end to end: builds the fabric, attaches the traffic the scenario
//! describes (every HCA that sends or receives is metered for the flow statistics), runs to
//! the scenario's duration and builds the [`Report`].

use super::capture::{Capture, Captured, SharedCapture, TapCapture};
use super::cc::CcSummary;
use super::flows::{FlowRecorder, Metered, SharedRecorder};
use super::output::{FabricFigures, Report, RunMeta};
use super::summary::{FlowQp, HostTransport};
use crate::apps::flow::{Ledger, UnreliableLog};
use crate::apps::stream::Generator;
use crate::cc_trace::{flow_sources, CcSource, CcTrace};
use crate::scenario::{Scenario, ScenarioError, TopologyKind};
use crate::setup::{attach_flows, flow_qp_counters, transport_counters, FlowSetupError};
use softib_fabric::fabric::{Fabric, Partitioning};
use softib_fabric::hca::Endpoint;
use softib_fabric::time::{Picos, PS_PER_NS, PS_PER_US};
use std::collections::BTreeMap;

/// Simulated time when a scenario sets no `duration_us`.
pub const DEFAULT_DURATION_US: u64 = 100;
/// Flow bins per run at most (fewer when the counter samples are coarser).
pub const DEFAULT_BINS: u64 = 50;
/// The run advances in this many steps, reporting progress after each.
pub const PROGRESS_STEPS: u64 = 200;

/// The scenario spelling of a topology kind.
pub fn kind_name(k: TopologyKind) -> &'static str {
    match k {
        TopologyKind::BackToBack => "back-to-back",
        TopologyKind::SingleSwitch => "single-switch",
        TopologyKind::FatTree2 => "fat-tree-2",
        TopologyKind::FatTree3 => "fat-tree-3",
        TopologyKind::Explicit => "explicit",
    }
}

/// Simulated duration of `s`.
pub fn duration_ps(s: &Scenario) -> Picos {
    s.duration_us.unwrap_or(DEFAULT_DURATION_US) * PS_PER_US
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The scenario is invalid.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The transport engine refused a flow's set-up.
    #[error(transparent)]
    Flow(#[from] FlowSetupError),
    /// An endpoint could not be attached.
    #[error(transparent)]
    Build(#[from] softib_fabric::fabric::BuildError),
    /// A capture was asked of a port that cannot have one.
    #[error("{0}")]
    Capture(String),
    /// The fabric cannot be split as asked, or a partition failed.
    #[error("{0}")]
    Partitioned(String),
}

/// What a run records beyond the report's defaults.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// HCAs whose received packets go into `capture.pcap`.
    pub capture_hosts: Vec<String>,
    /// Ports (`"NODE:PORT"`) whose traffic in both directions goes into `capture.pcap`,
    /// besides the scenario's `pcap_ports`.
    pub capture_ports: Vec<String>,
    /// The tables an external subnet manager programmed (LIDs, forwarding, SL2VL, VL
    /// arbitration), taken into the fabric before any traffic; `None`: softib's routing.
    pub program: Option<softib_fabric::fabric::SubnetProgram>,
}

/// Runs `s` (named `name` in the report) with default options.
pub fn run(
    s: &Scenario,
    name: &str,
    progress: &mut dyn FnMut(Picos, Picos),
) -> Result<Report, RunError> {
    run_with(s, name, &RunOptions::default(), progress)
}

/// Runs `s` (named `name` in the report). `progress(done, total)` is called as simulated
/// time advances, `PROGRESS_STEPS` times.
pub fn run_with(
    s: &Scenario,
    name: &str,
    opts: &RunOptions,
    progress: &mut dyn FnMut(Picos, Picos),
) -> Result<Report, RunError> {
    run_and_keep(s, name, opts, None, progress).map(|(report, _)| report)
}

/// Runs `s` as [`run_with`] does, but to `stop` (default: the scenario's end), and returns
/// the fabric as it stands then with the report: what `softib sim --serve` freezes and
/// answers management MADs against.
pub fn run_and_keep(
    s: &Scenario,
    name: &str,
    opts: &RunOptions,
    stop: Option<Picos>,
    progress: &mut dyn FnMut(Picos, Picos),
) -> Result<(Report, Fabric), RunError> {
    let total = stop.unwrap_or_else(|| duration_ps(s));
    let mut fabric = s.build()?;
    if let Some(p) = &opts.program {
        fabric.program_subnet(p)?;
    }
    let mut side = set_up(s, opts, total, &mut fabric)?;
    for (t, step) in checkpoints(total, side.cc_interval) {
        fabric.run_until(t);
        side.at_checkpoint(&mut fabric);
        if step {
            progress(t, total);
        }
    }
    let outcome = side.outcome(&mut fabric);
    let report = finish_report(
        vec![outcome],
        fabric.topology(),
        fabric.config(),
        &meta(s, name),
        total,
    );
    Ok((report, fabric))
}

/// Runs `s` as [`run_with`] does, with the fabric split into `parts` partitions on as many
/// threads (conservative parallel simulation, `softib_fabric::parallel`): by leaf switch
/// with its hosts ([`partitioning`]). The report is the serial run's, byte for byte: each
/// partition records what its own nodes see, and the records are merged after the run in
/// an order that does not depend on the partitioning. `progress` is called from the first
/// partition's thread.
pub fn run_threads(
    s: &Scenario,
    name: &str,
    opts: &RunOptions,
    parts: usize,
    progress: &(dyn Fn(Picos, Picos) + Sync),
) -> Result<Report, RunError> {
    let total = duration_ps(s);
    let p = partitioning(s, parts)?;
    let stops: Vec<(Picos, bool)> = {
        // Every partition builds the same fabric, so one probe tells the sampling steps.
        let cc = s.congestion_control()?.is_some_and(|c| c.enabled);
        checkpoints(total, cc.then_some(cc_interval(&s.config()?, total)))
    };
    let times: Vec<Picos> = stops.iter().map(|&(t, _)| t).collect();
    let results = softib_fabric::parallel::run_threads_stepped(
        &p,
        &times,
        |me| -> Result<(Fabric, Sidecar), RunError> {
            let mut fabric = s.build()?;
            if let Some(prog) = &opts.program {
                fabric.program_subnet(prog)?;
            }
            // Before the set-up, which traces only the sources this partition runs.
            fabric.set_partition(&p, me)?;
            let side = set_up(s, opts, total, &mut fabric)?;
            fabric.drop_foreign_endpoints();
            Ok((fabric, side))
        },
        |me, fabric, side, t| {
            side.at_checkpoint(fabric);
            if me == 0 && stops.binary_search(&(t, true)).is_ok() {
                progress(t, total);
            }
        },
        |me, mut fabric, side| {
            let shape = (me == 0).then(|| (fabric.topology().clone(), fabric.config().clone()));
            (side.outcome(&mut fabric), shape)
        },
    )
    .map_err(|e| match e {
        softib_fabric::parallel::ParallelError::Build { error, .. } => error,
        other => RunError::Partitioned(other.to_string()),
    })?;
    let mut outcomes = Vec::with_capacity(results.len());
    let mut shape = None;
    for (o, sh) in results {
        outcomes.push(o);
        shape = shape.or(sh);
    }
    let (topo, cfg) = shape.ok_or_else(|| RunError::Partitioned("no partition ran".into()))?;
    Ok(finish_report(outcomes, &topo, &cfg, &meta(s, name), total))
}

/// Runs this MPI rank's partition of `s` (`mpirun -np N softib sim`: one partition per
/// rank, split as for [`run_threads`]), meeting the other ranks at every window boundary
/// through `ex`. Every rank then sends its records to rank 0, which merges them: rank 0
/// gets the report (the serial run's, byte for byte), the others `None`. `progress` is
/// called on rank 0.
#[cfg(feature = "mpi")]
pub fn run_mpi(
    s: &Scenario,
    name: &str,
    opts: &RunOptions,
    ex: &mut crate::mpi_exchange::MpiExchange,
    progress: &mut dyn FnMut(Picos, Picos),
) -> Result<Option<Report>, RunError> {
    use softib_fabric::parallel::Exchange;
    let (me, ranks) = (ex.rank(), ex.size());
    let total = duration_ps(s);
    // Every rank builds the same fabric from the same scenario, so a refusal here is every
    // rank's, and none is left waiting for another.
    let p = partitioning(s, ranks)?;
    let mut fabric = s.build()?;
    if let Some(prog) = &opts.program {
        fabric.program_subnet(prog)?;
    }
    fabric.set_partition(&p, me)?;
    let mut side = set_up(s, opts, total, &mut fabric)?;
    fabric.drop_foreign_endpoints();
    let stops = checkpoints(total, side.cc_interval);
    let times: Vec<Picos> = stops.iter().map(|&(t, _)| t).collect();
    softib_fabric::parallel::run_distributed_stepped(
        &p,
        me,
        &mut fabric,
        &times,
        ex,
        &mut |f, t| {
            side.at_checkpoint(f);
            if me == 0 && stops.binary_search(&(t, true)).is_ok() {
                progress(t, total);
            }
        },
    )
    .map_err(|e| RunError::Partitioned(format!("rank {me}: {e}")))?;
    let outcome = side.outcome(&mut fabric);
    let mut outgoing = vec![Vec::new(); ranks];
    if me != 0 {
        ciborium::into_writer(&outcome, &mut outgoing[0])
            .map_err(|e| RunError::Partitioned(format!("rank {me}: encoding its records: {e}")))?;
    }
    let incoming = ex.all_to_all(outgoing);
    if me != 0 {
        return Ok(None);
    }
    let mut outcomes = vec![outcome];
    for (rank, bytes) in incoming.iter().enumerate().skip(1) {
        let o: Outcome = ciborium::from_reader(&bytes[..]).map_err(|e| {
            RunError::Partitioned(format!("the records rank {rank} sent cannot be read: {e}"))
        })?;
        outcomes.push(o);
    }
    Ok(Some(finish_report(
        outcomes,
        fabric.topology(),
        fabric.config(),
        &meta(s, name),
        total,
    )))
}

/// How `softib sim --threads N` (and `mpirun -np N`) splits the fabric of `s`: each leaf
/// switch with its hosts stays whole ([`Partitioning::by_leaf_groups`]), so the lookahead
/// is the shortest delay of a link above the leaves. Fails with a message saying why when
/// `parts` is 0 or the fabric has fewer leaf groups than `parts`.
pub fn partitioning(s: &Scenario, parts: usize) -> Result<Partitioning, RunError> {
    let topo = s.topology()?;
    let cfg = s.config()?;
    if parts == 0 {
        return Err(RunError::Partitioned(
            "0 partitions: run on at least one thread (or rank)".into(),
        ));
    }
    let p = Partitioning::by_leaf_groups(&topo, parts, cfg.link_delay_ps)?;
    let used = |p: &Partitioning| {
        (0..topo.nodes.len())
            .map(|n| p.owner(n))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    if used(&p) < parts {
        let most = Partitioning::by_leaf_groups(&topo, topo.nodes.len(), cfg.link_delay_ps)
            .map(|q| used(&q))
            .unwrap_or(1);
        return Err(RunError::Partitioned(format!(
            "{parts} partitions asked for, but this fabric splits into at most {most}: a partition is one or more leaf switches with their hosts ({} nodes, {} leaf groups)",
            topo.nodes.len(),
            most
        )));
    }
    Ok(p)
}

/// The scenario's metadata for the report.
fn meta(s: &Scenario, name: &str) -> RunMeta {
    RunMeta {
        name: name.to_string(),
        seed: s.seed,
        topology: s
            .topology
            .kind
            .as_ref()
            .map_or("ibnetdiscover", |k| kind_name(*k.get_ref()))
            .to_string(),
    }
}

/// The congestion-control trace's sampling interval: the counter sampling interval, else
/// a two-hundredth of the run.
fn cc_interval(cfg: &softib_fabric::fabric::FabricConfig, total: Picos) -> Picos {
    cfg.sample_interval_ps.unwrap_or(total.div_ceil(200)).max(1)
}

/// Where a run stops between its start and `total`: the [`PROGRESS_STEPS`] progress steps
/// (flagged `true`) and, with a congestion-control trace sampled every `cc` ps, every
/// multiple of that; increasing, without duplicates.
fn checkpoints(total: Picos, cc: Option<Picos>) -> Vec<(Picos, bool)> {
    let mut out: Vec<(Picos, bool)> = (1..=PROGRESS_STEPS)
        .map(|k| {
            (
                (total as u128 * k as u128 / PROGRESS_STEPS as u128) as Picos,
                true,
            )
        })
        .collect();
    if let Some(iv) = cc {
        out.extend((1..=total / iv).map(|k| (k * iv, false)));
    }
    // A time that is both a progress step and a sample is a progress step.
    out.sort_by_key(|&(t, step)| (t, !step));
    out.dedup_by_key(|&mut (t, _)| t);
    out.retain(|&(t, _)| t > 0);
    out
}

/// What one fabric (a whole run, or one partition of it) keeps beside it while it runs:
/// the recorders its endpoints share (on one thread).
struct Sidecar {
    recorder: SharedRecorder,
    ledger: Ledger,
    capture: Option<SharedCapture>,
    engine_hosts: Vec<String>,
    /// The trace of congestion control, with each source's (flow, is requester).
    cc: Option<(Vec<(u32, bool)>, CcTrace)>,
    /// Its sampling interval, when it is on.
    cc_interval: Option<Picos>,
}

/// A fabric's share of a run's results: what [`finish_report`] merges (and what an MPI
/// rank sends rank 0, as CBOR).
#[derive(serde::Serialize, serde::Deserialize)]
struct Outcome {
    figures: FabricFigures,
    recorder: FlowRecorder,
    ledger: UnreliableLog,
    capture: Option<Capture>,
    transport: Vec<HostTransport>,
    flow_qps: BTreeMap<u32, FlowQp>,
    engine: bool,
    cc: Option<(Vec<(u32, bool)>, CcTrace)>,
}

impl Sidecar {
    /// At a stop of the run: samples the congestion-control trace.
    fn at_checkpoint(&mut self, fabric: &mut Fabric) {
        if let Some((_, trace)) = &mut self.cc {
            trace.sample(fabric);
        }
    }

    /// What the fabric and its recorders saw, taken out for merging.
    fn outcome(&self, fabric: &mut Fabric) -> Outcome {
        let engine = !self.engine_hosts.is_empty();
        Outcome {
            figures: FabricFigures::of(fabric),
            recorder: self.recorder.borrow().clone(),
            ledger: std::mem::take(&mut *self.ledger.borrow_mut()),
            capture: self
                .capture
                .as_ref()
                .map(|c| std::mem::take(&mut *c.borrow_mut())),
            transport: match engine {
                true => transport_counters(fabric, &self.engine_hosts),
                false => Vec::new(),
            },
            flow_qps: match engine {
                true => flow_qp_counters(fabric, &self.engine_hosts),
                false => BTreeMap::new(),
            },
            engine,
            cc: self.cc.clone(),
        }
    }
}

/// Merges the outcomes of a run's partitions (one for a serial run) and builds the report:
/// every merge is a sum, a min or max, or a sort by a key that does not depend on how the
/// fabric was partitioned.
fn finish_report(
    outcomes: Vec<Outcome>,
    topo: &softib_fabric::topology::Topology,
    cfg: &softib_fabric::fabric::FabricConfig,
    meta: &RunMeta,
    total: Picos,
) -> Report {
    let mut it = outcomes.into_iter();
    let mut all = it.next().expect("at least one partition");
    let node_index = |name: &str| {
        topo.nodes
            .iter()
            .position(|n| n.name == name)
            .unwrap_or(usize::MAX)
    };
    for o in it {
        all.figures.merge(o.figures);
        all.recorder.merge(&o.recorder);
        all.ledger.merge(o.ledger);
        if let (Some(c), Some(mut oc)) = (all.capture.as_mut(), o.capture) {
            c.merge(&mut oc);
        }
        all.transport.extend(o.transport);
        for (flow, q) in o.flow_qps {
            all.flow_qps.entry(flow).or_default().absorb(&q);
        }
        all.engine |= o.engine;
        if let (Some((roles, trace)), Some((their_roles, theirs))) = (all.cc.as_mut(), o.cc) {
            trace.merge(roles, theirs, their_roles, &node_index);
        }
    }
    // The hosts in name order, as the flows' set-up lists them.
    all.transport.sort_by(|a, b| a.host.cmp(&b.host));
    all.figures
        .samples
        .sort_by_key(|s| (s.time, s.node, s.port));
    all.ledger.settle(&mut all.recorder);
    let mut report = Report::from_figures(topo, cfg, &all.figures, &all.recorder, meta);
    if all.engine {
        report.set_transport(all.transport);
        report.set_flow_qps(all.flow_qps);
    }
    if let Some((roles, trace)) = &all.cc {
        let names = report
            .summary
            .flows
            .iter()
            .map(|f| (f.id, f.name.clone()))
            .collect();
        report.set_congestion_control(CcSummary::from_trace(trace, roles, &names));
    }
    if let Some(mut c) = all.capture {
        report.pcap = Some(c.take_bytes(total));
    }
    report
}

/// Sets up what the scenario runs on `fabric`: captures, the streams' generators and the
/// flows' engines (every HCA that sends or receives metered), host models and the
/// congestion-control trace. Every partition of a partitioned run does the same on its own
/// whole fabric; only the hosts it owns will run.
fn set_up(
    s: &Scenario,
    opts: &RunOptions,
    total: Picos,
    fabric: &mut Fabric,
) -> Result<Sidecar, RunError> {
    let hosts = crate::scenario::pattern::host_names(fabric.topology());
    for h in &opts.capture_hosts {
        if !hosts.contains(h) {
            return Err(RunError::Capture(format!(
                "cannot capture `{h}`: no HCA of that name in this topology"
            )));
        }
    }
    let mut ports = s.capture_ports()?;
    for p in &opts.capture_ports {
        let port = crate::scenario::parse_port_ref(fabric.topology(), p)
            .map_err(|e| RunError::Capture(format!("cannot capture port `{p}`: {e}")))?;
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    let capture = (!opts.capture_hosts.is_empty() || !ports.is_empty()).then(Capture::shared);
    if let (Some(c), false) = (&capture, ports.is_empty()) {
        fabric.set_tap(&ports, Box::new(TapCapture(c.clone())))?;
    }
    let mut wrap = |host: &str, ep: Box<dyn Endpoint>| -> Box<dyn Endpoint> {
        match &capture {
            Some(c) if opts.capture_hosts.iter().any(|h| h == host) => {
                Box::new(Captured::new(ep, c.clone()))
            }
            _ => ep,
        }
    };
    let plan = s.stream_plan()?;
    // Bins of a fiftieth of the run at least, so that a bin holds several packets of
    // each flow; never finer than the counter samples.
    let bin = fabric
        .config()
        .sample_interval_ps
        .unwrap_or(0)
        .max(total.div_ceil(DEFAULT_BINS).div_ceil(PS_PER_NS) * PS_PER_NS)
        .max(1);
    let recorder = FlowRecorder::shared(bin);
    let mut gens: BTreeMap<&str, Generator> = BTreeMap::new();
    for p in &plan {
        recorder.borrow_mut().define(p.flow, p.info.clone());
        let dlids = p
            .dests
            .iter()
            .map(|d| {
                fabric
                    .lid(d)
                    .expect("the plan names hosts of this topology")
            })
            .collect();
        let new = || Generator::with_recorder(recorder.clone());
        gens.entry(&p.host).or_insert_with(new).add(p, dlids);
        for d in &p.dests {
            gens.entry(d).or_insert_with(new);
        }
    }
    let gens_hosts: Vec<String> = gens.keys().map(|h| h.to_string()).collect();
    for (host, g) in gens {
        fabric.attach(
            host,
            wrap(host, Box::new(Metered::new(g, recorder.clone()))),
        )?;
    }
    let flows = s.flow_plan(plan.len() as u32)?;
    let ledger = Ledger::default();
    let engine_hosts = attach_flows(fabric, &flows, &recorder, &ledger, s.seed, &mut wrap)?;
    s.apply_host_models(fabric)?;
    // Captured hosts that carry no traffic of their own still receive (a sink).
    for h in &opts.capture_hosts {
        if !gens_hosts.contains(h) && !engine_hosts.contains(h) {
            fabric.attach(h, wrap(h, Box::new(Generator::new())))?;
        }
    }
    // With congestion control on, the CCTI of every requester and the FECN/BECN counts
    // are sampled as the run advances (at the counter sampling interval, else 200 times).
    let cc = fabric.ca_congestion_control().is_some().then(|| {
        let (roles, sources): (Vec<(u32, bool)>, Vec<CcSource>) =
            flow_sources(fabric, &engine_hosts)
                .into_iter()
                .map(|(flow, requester, src)| ((flow, requester), src))
                .unzip();
        (roles, CcTrace::new(sources))
    });
    let cc_interval = cc.is_some().then(|| cc_interval(fabric.config(), total));
    Ok(Sidecar {
        recorder,
        ledger,
        capture,
        engine_hosts,
        cc,
        cc_interval,
    })
}
