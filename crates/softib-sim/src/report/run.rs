//! Runs a scenario end to end: builds the fabric, attaches the traffic the scenario
//! describes (every HCA that sends or receives is metered for the flow statistics), runs to
//! the scenario's duration and builds the [`Report`].

use super::capture::{Capture, Captured, TapCapture};
use super::cc::CcSummary;
use super::flows::{FlowRecorder, Metered};
use super::output::{Report, RunMeta};
use crate::apps::stream::Generator;
use crate::cc_trace::{flow_sources, CcSource, CcTrace};
use crate::scenario::{Scenario, ScenarioError, TopologyKind};
use crate::setup::{attach_flows, flow_qp_counters, transport_counters, FlowSetupError};
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
) -> Result<(Report, softib_fabric::fabric::Fabric), RunError> {
    let mut fabric = s.build()?;
    if let Some(p) = &opts.program {
        fabric.program_subnet(p)?;
    }
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
    let total = stop.unwrap_or_else(|| duration_ps(s));
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
    let engine_hosts = attach_flows(&mut fabric, &flows, &recorder, s.seed, &mut wrap)?;
    s.apply_host_models(&mut fabric)?;
    // Captured hosts that carry no traffic of their own still receive (a sink).
    for h in &opts.capture_hosts {
        if !gens_hosts.contains(h) && !engine_hosts.contains(h) {
            fabric.attach(h, wrap(h, Box::new(Generator::new())))?;
        }
    }
    // With congestion control on, the CCTI of every requester and the FECN/BECN counts
    // are sampled as the run advances (at the counter sampling interval, else 200 times).
    let mut cc = fabric.ca_congestion_control().is_some().then(|| {
        let (roles, sources): (Vec<(u32, bool)>, Vec<CcSource>) =
            flow_sources(&mut fabric, &engine_hosts)
                .into_iter()
                .map(|(flow, requester, src)| ((flow, requester), src))
                .unzip();
        (roles, CcTrace::new(sources))
    });
    let cc_interval = fabric
        .config()
        .sample_interval_ps
        .unwrap_or(total.div_ceil(200))
        .max(1);
    for k in 1..=PROGRESS_STEPS {
        let t = (total as u128 * k as u128 / PROGRESS_STEPS as u128) as Picos;
        match &mut cc {
            Some((_, trace)) => trace.run(&mut fabric, t, cc_interval),
            None => fabric.run_until(t),
        }
        progress(t, total);
    }
    let meta = RunMeta {
        name: name.to_string(),
        seed: s.seed,
        topology: s
            .topology
            .kind
            .as_ref()
            .map_or("ibnetdiscover", |k| kind_name(*k.get_ref()))
            .to_string(),
    };
    let mut report = Report::build(&fabric, &recorder.borrow(), &meta);
    if !engine_hosts.is_empty() {
        report.set_transport(transport_counters(&mut fabric, &engine_hosts));
        report.set_flow_qps(flow_qp_counters(&mut fabric, &engine_hosts));
    }
    if let Some((roles, trace)) = &cc {
        let names = report
            .summary
            .flows
            .iter()
            .map(|f| (f.id, f.name.clone()))
            .collect();
        report.set_congestion_control(CcSummary::from_trace(trace, roles, &names));
    }
    if let Some(c) = capture {
        report.pcap = Some(c.borrow_mut().take_bytes(total));
    }
    Ok((report, fabric))
}
