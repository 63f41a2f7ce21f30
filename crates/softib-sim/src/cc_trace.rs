//! Time series of the congestion-control loop (IBA Annex A10): the CCTI of each source and the
//! FECN/BECN counts per port, sampled while a fabric runs, for reports and plots.
//!
//! The trace is taken from outside the event loop: [`CcTrace::run`] advances the fabric in
//! steps of the sampling interval and reads each source's engine (`Device::cc_status`, the
//! CCTI that paces the QP: its own or its SL's, per the CA's Port_Control) and the port
//! counters. Sampling reads state only, so a traced run is the same run as an untraced one.

use crate::apps::flow::FlowHost;
use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::Fabric;
use softib_fabric::time::{to_engine_nanos, Picos};
use softib_fabric::topology::NodeKind;

/// A sending QP whose CCTI is traced.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CcSource {
    /// The HCA's node name.
    pub host: String,
    /// HCA port (from 1).
    pub port: u8,
    /// The QP number.
    pub qpn: u32,
}

/// The series of one port: cumulative counts at each sample time.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortCcSeries {
    /// Node name.
    pub node: String,
    /// Port number.
    pub port: u8,
    /// Switch ports: packets this output marked with FECN (`PortCounters::fecn_marked`).
    pub fecn_marked: Vec<u64>,
    /// HCA ports: FECNs the engine received (`QpCounters::fecn_received`).
    pub fecn_received: Vec<u64>,
    /// HCA ports: BECNs the engine received (`QpCounters::becn_received`, in ACKs and CNPs).
    pub becn_received: Vec<u64>,
}

/// CCTI per source and FECN/BECN per port over time.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CcTrace {
    /// The traced sources.
    pub sources: Vec<CcSource>,
    /// Sample times (simulated picoseconds).
    pub times: Vec<Picos>,
    /// `ccti[s][i]`: CCTI of source `s` at `times[i]` (0 for a QP without CCA state).
    pub ccti: Vec<Vec<u16>>,
    /// Every cabled port that marked, received a FECN or a BECN at some sample, in node
    /// order (ports with nothing to show are left out to keep large fabrics readable).
    pub ports: Vec<PortCcSeries>,
}

impl CcTrace {
    /// An empty trace of `sources`.
    pub fn new(sources: Vec<CcSource>) -> Self {
        let n = sources.len();
        CcTrace {
            sources,
            ccti: vec![Vec::new(); n],
            ..CcTrace::default()
        }
    }

    /// Runs `fabric` until `end`, sampling every `interval` picoseconds (and at `end`).
    pub fn run(&mut self, fabric: &mut Fabric, end: Picos, interval: Picos) {
        let interval = interval.max(1);
        while fabric.now() < end {
            let next = (fabric.now() / interval + 1) * interval;
            fabric.run_until(next.min(end));
            self.sample(fabric);
        }
    }

    /// Records one sample of every source and port at the fabric's current time.
    pub fn sample(&mut self, fabric: &mut Fabric) {
        let now = fabric.now();
        let idx = self.times.len();
        self.times.push(now);
        for (s, src) in self.sources.iter().enumerate() {
            let ccti = fabric
                .endpoint_mut::<EngineHca>(&src.host, src.port)
                .and_then(|h| h.device().cc_status(to_engine_nanos(now), src.qpn))
                .and_then(|st| st.ccti)
                .unwrap_or(0);
            self.ccti[s].push(ccti);
        }
        let nodes: Vec<(String, NodeKind, u8)> = fabric
            .topology()
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.kind, n.ports))
            .collect();
        let mut k = 0;
        for (name, kind, ports) in nodes {
            for port in 1..=ports {
                let (marked, fecn, becn) = if kind == NodeKind::Switch {
                    match fabric.port_counters(&name, port) {
                        Some(c) => (c.fecn_marked, 0, 0),
                        None => continue,
                    }
                } else {
                    match fabric.endpoint_mut::<EngineHca>(&name, port) {
                        Some(h) => {
                            let q = h.device().counters().qp;
                            (0, q.fecn_received, q.becn_received)
                        }
                        None => continue,
                    }
                };
                // Find or insert this port's series, keeping node order.
                let pos = self.ports[k..]
                    .iter()
                    .position(|p| p.node == name && p.port == port)
                    .map(|p| p + k);
                let i = match pos {
                    Some(i) => i,
                    None if marked + fecn + becn == 0 => continue,
                    None => {
                        self.ports.insert(
                            k,
                            PortCcSeries {
                                node: name.clone(),
                                port,
                                fecn_marked: vec![0; idx],
                                fecn_received: vec![0; idx],
                                becn_received: vec![0; idx],
                            },
                        );
                        k
                    }
                };
                let p = &mut self.ports[i];
                p.fecn_marked.push(marked);
                p.fecn_received.push(fecn);
                p.becn_received.push(becn);
                k = i + 1;
            }
        }
    }

    /// Adds another partition's trace, sampled at the same times: the sources of both in
    /// host name order (as the flows' set-up lists hosts), each host's as found, with the
    /// caller's `tags` of each source (this trace's in `mine`, the other's in `theirs`)
    /// reordered alike; the ports in node order (`node_index` gives a node's place in the
    /// topology). The result is the trace one fabric would have taken.
    pub fn merge<T>(
        &mut self,
        mine: &mut Vec<T>,
        other: CcTrace,
        theirs: Vec<T>,
        node_index: &dyn Fn(&str) -> usize,
    ) {
        if self.times.is_empty() {
            self.times = other.times;
        }
        let mut sources: Vec<((CcSource, Vec<u16>), T)> = std::mem::take(&mut self.sources)
            .into_iter()
            .zip(std::mem::take(&mut self.ccti))
            .zip(std::mem::take(mine))
            .collect();
        sources.extend(other.sources.into_iter().zip(other.ccti).zip(theirs));
        sources.sort_by(|a, b| a.0 .0.host.cmp(&b.0 .0.host));
        for ((src, ccti), tag) in sources {
            self.sources.push(src);
            self.ccti.push(ccti);
            mine.push(tag);
        }
        self.ports.extend(other.ports);
        self.ports.sort_by_key(|p| (node_index(&p.node), p.port));
    }

    /// Mean and population standard deviation of source `s`'s CCTI over samples at or after
    /// `from`.
    pub fn ccti_mean_std(&self, s: usize, from: Picos) -> (f64, f64) {
        let v: Vec<f64> = self
            .times
            .iter()
            .zip(&self.ccti[s])
            .filter(|(t, _)| **t >= from)
            .map(|(_, c)| *c as f64)
            .collect();
        if v.is_empty() {
            return (0.0, 0.0);
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
        (mean, var.sqrt())
    }
}

/// The QPs of the `[[flow]]` traffic on `hosts` (engine HCAs running a [`FlowHost`]) that
/// `fabric` runs (in a partition, the hosts it owns), as trace sources with their flow tags
/// and whether each is the flow's requester, in host then flow order. Responders count
/// too: they send the data of READ flows.
pub fn flow_sources(fabric: &mut Fabric, hosts: &[String]) -> Vec<(u32, bool, CcSource)> {
    let mut out = Vec::new();
    let owned: Vec<&String> = hosts.iter().filter(|h| fabric.owns(h)).collect();
    for h in owned {
        let Some(app) = fabric
            .endpoint_mut::<EngineHca>(h, 1)
            .and_then(|hca| hca.app::<FlowHost>())
        else {
            continue;
        };
        for (flow, qpn, requester) in app.qps() {
            out.push((
                flow,
                requester,
                CcSource {
                    host: h.clone(),
                    port: 1,
                    qpn,
                },
            ));
        }
    }
    out
}
