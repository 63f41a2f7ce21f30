//! The report of a run: a [`Report`] built from a finished [`Fabric`] and the
//! [`FlowRecorder`] of its traffic, with the summary (`summary.json`), the counter series and
//! the run's metadata. Writing it as files is [`super::files`].

use super::decimals::round;
use super::flows::{FlowRecorder, FlowStats};
use super::histogram::Histogram;
use super::summary::*;
use softib_fabric::counters::PortCounters;
use softib_fabric::fabric::{CounterSample, Fabric, FabricConfig};
use softib_fabric::time::{Picos, PS_PER_NS, PS_PER_US};
use softib_fabric::topology::{NodeKind, Topology};
use std::collections::BTreeMap;

/// What a report reads of a finished fabric: the counters of its cabled ports, the counter
/// samples and the run's totals. A partitioned run takes each partition's share (the ports
/// it owns) and merges them ([`FabricFigures::merge`]) into what one fabric would show.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FabricFigures {
    /// Simulated time at the end.
    pub duration_ps: Picos,
    /// (node, port) -> counters as of the end and operational VLs.
    pub ports: BTreeMap<(usize, u8), (PortCounters, u8)>,
    /// The counter samples.
    pub samples: Vec<CounterSample>,
    /// Events handled.
    pub events: u64,
    /// Packets delivered to HCAs.
    pub delivered: u64,
    /// Packets still in the fabric.
    pub in_flight: usize,
}

impl FabricFigures {
    /// The figures of the nodes `fabric` runs (all of them, unless it is a partition).
    pub fn of(fabric: &Fabric) -> Self {
        let topo = fabric.topology();
        let mut ports = BTreeMap::new();
        for l in &topo.links {
            for a in [l.a, l.b] {
                let name = &topo.nodes[a.node].name;
                if !fabric.owns(name) {
                    continue;
                }
                let c = fabric.port_counters(name, a.port).unwrap_or_default();
                let vls = fabric.operational_vls(name, a.port).unwrap_or(1);
                ports.insert((a.node, a.port), (c, vls));
            }
        }
        let samples = fabric
            .samples()
            .iter()
            .filter(|s| fabric.owns(&topo.nodes[s.node as usize].name))
            .cloned()
            .collect();
        FabricFigures {
            duration_ps: fabric.now(),
            ports,
            samples,
            events: fabric.events_processed(),
            delivered: fabric.packets_delivered(),
            in_flight: fabric.packets_in_flight(),
        }
    }

    /// Adds another partition's figures (its own ports; the totals add up).
    pub fn merge(&mut self, other: FabricFigures) {
        self.duration_ps = self.duration_ps.max(other.duration_ps);
        self.ports.extend(other.ports);
        self.samples.extend(other.samples);
        // Each port's series in time order, ports in (node, port) order within a sample,
        // as one fabric samples them.
        self.samples.sort_by_key(|s| (s.time, s.node, s.port));
        self.events += other.events;
        self.delivered += other.delivered;
        self.in_flight += other.in_flight;
    }
}

/// Describes the run for the report (what the fabric itself does not know).
#[derive(Clone, Debug, Default)]
pub struct RunMeta {
    /// Scenario name.
    pub name: String,
    /// Seed used.
    pub seed: u64,
    /// Topology shape as written in the scenario ("fat-tree-2").
    pub topology: String,
}

/// One sample of one port's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplePoint {
    /// Sample time.
    pub time_ps: Picos,
    /// PortXmitData, words.
    pub xmit_data: u64,
    /// PortRcvData, words.
    pub rcv_data: u64,
    /// PortXmitPkts.
    pub xmit_pkts: u64,
    /// PortRcvPkts.
    pub rcv_pkts: u64,
    /// PortXmitWait, ticks.
    pub xmit_wait: u64,
    /// Sum of the error counters.
    pub errors: u64,
    /// Receive-buffer blocks in use (64 bytes each), all data VLs.
    pub rx_blocks: u32,
}

/// Everything a run produced, ready to write.
#[derive(Clone, Debug)]
pub struct Report {
    /// The summary (`summary.json`).
    pub summary: Summary,
    /// Counter samples per port, indexed like `summary.ports`.
    pub series: Vec<Vec<SamplePoint>>,
    /// PortVLXmitWait (ticks) of each sample of `series`, `series_vls` values per sample
    /// (VL0 first). Recorded only when some port runs more than one data VL
    /// (`series_vls` > 1); with one, PortXmitWait is VL0's wait and this stays empty.
    pub vl_series: Vec<Vec<u64>>,
    /// Data VLs per sample in `vl_series` (0 when it is not recorded).
    pub series_vls: usize,
    /// Bytes per time bin per flow, indexed like `summary.flows`.
    pub flow_bins: Vec<Vec<u64>>,
    /// Width of a flow bin.
    pub bin_ps: Picos,
    /// Simulated duration.
    pub duration_ps: Picos,
    /// Per flow (like `summary.flows`), the host whose port carries its data.
    pub data_from: Vec<String>,
    /// A pcap of the captured ports, when the run captured any (`capture.pcap`).
    pub pcap: Option<Vec<u8>>,
}

/// Gb/s from bytes over picoseconds.
fn gbps(bytes: u64, ps: Picos) -> f64 {
    if ps == 0 {
        0.0
    } else {
        bytes as f64 * 8_000.0 / ps as f64
    }
}

fn latency(h: &Histogram, level: &'static str) -> Latency {
    let us = |ns: u64| round(ns as f64 / 1000.0, 3);
    Latency {
        level,
        count: h.count(),
        min_us: us(h.min()),
        p50_us: us(h.quantile(0.5)),
        p90_us: us(h.quantile(0.9)),
        p99_us: us(h.quantile(0.99)),
        p999_us: us(h.quantile(0.999)),
        max_us: us(h.max()),
        mean_us: round(h.mean() / 1000.0, 3),
    }
}

fn flow_summary(id: u32, f: &FlowStats, duration_ps: Picos) -> FlowSummary {
    let bytes = f.bytes();
    let n = if f.by_message() {
        f.messages
    } else {
        f.packets
    };
    let first = f.first_ps.unwrap_or(0);
    let span = f.last_ps.saturating_sub(first);
    // n deliveries span n - 1 gaps: count the bytes after the first.
    let active = if n > 1 && span > 0 {
        gbps(bytes - bytes / n, span)
    } else {
        gbps(bytes, duration_ps)
    };
    FlowSummary {
        id,
        name: f.info.name.clone(),
        src: f.info.src.clone(),
        dst: f.info.dst.clone(),
        packets: f.packets,
        wire_bytes: f.wire_bytes,
        messages: f.messages,
        payload_bytes: f.payload_bytes,
        error_completions: f.errors,
        error_statuses: f
            .error_statuses
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        qp: None,
        messages_lost: f.lost,
        management: f.info.management,
        gbps: round(gbps(bytes, duration_ps), 4),
        active_gbps: round(active, 4),
        msg_rate_mpps: round(
            if duration_ps > 0 {
                n as f64 * PS_PER_US as f64 / duration_ps as f64
            } else {
                0.0
            },
            6,
        ),
        first_us: round(first as f64 / PS_PER_US as f64, 3),
        last_us: round(f.last_ps as f64 / PS_PER_US as f64, 3),
        latency: latency(
            f.latency(),
            if f.by_message() { "message" } else { "packet" },
        ),
        limited_by: "",
        evidence: String::new(),
    }
}

fn flow_totals(flows: &FlowRecorder, rows: &[FlowSummary]) -> Option<FlowTotals> {
    if rows.is_empty() {
        return None;
    }
    let g: Vec<f64> = rows.iter().map(|f| f.gbps).collect();
    let sum: f64 = g.iter().sum();
    let sq: f64 = g.iter().map(|x| x * x).sum();
    let jain = if sq > 0.0 {
        sum * sum / (g.len() as f64 * sq)
    } else {
        0.0
    };
    let mut all = Histogram::new();
    let by_message = flows.flows().values().any(|f| f.by_message());
    for f in flows.flows().values() {
        if f.by_message() == by_message {
            all.merge(f.latency());
        }
    }
    Some(FlowTotals {
        flows: rows.len(),
        aggregate_gbps: round(sum, 4),
        min_gbps: round(g.iter().copied().fold(f64::INFINITY, f64::min), 4),
        mean_gbps: round(sum / g.len() as f64, 4),
        max_gbps: round(g.iter().copied().fold(0.0, f64::max), 4),
        jain_fairness: round(jain, 4),
        latency: latency(&all, if by_message { "message" } else { "packet" }),
    })
}

impl Report {
    /// Builds the report of `fabric` as of now, with the flows of `flows`.
    pub fn build(fabric: &Fabric, flows: &FlowRecorder, meta: &RunMeta) -> Report {
        let figures = FabricFigures::of(fabric);
        Self::from_figures(fabric.topology(), fabric.config(), &figures, flows, meta)
    }

    /// Builds the report of a fabric of topology `topo` and settings `cfg` that ended with
    /// `figures` (merged over its partitions, for a partitioned run), with the flows of
    /// `flows`.
    pub fn from_figures(
        topo: &Topology,
        cfg: &FabricConfig,
        figures: &FabricFigures,
        flows: &FlowRecorder,
        meta: &RunMeta,
    ) -> Report {
        let duration_ps = figures.duration_ps;
        let tick = cfg.xmit_wait_tick_ps;

        // Cabled ports in (node, port) order, with the far end of each.
        let mut ends = Vec::with_capacity(topo.links.len() * 2);
        for l in &topo.links {
            let rate = l.rate.unwrap_or(cfg.link_rate);
            ends.push((l.a, l.b, rate));
            ends.push((l.b, l.a, rate));
        }
        ends.sort_by_key(|(a, _, _)| (a.node, a.port));
        let mut index_of: Vec<Vec<u32>> = topo
            .nodes
            .iter()
            .map(|n| vec![u32::MAX; n.ports as usize + 1])
            .collect();
        let name = |a: softib_fabric::topology::PortAddr| {
            format!("{}:{}", topo.nodes[a.node].name, a.port)
        };
        let mut ports = Vec::with_capacity(ends.len());
        for (i, (me, peer, rate)) in ends.iter().enumerate() {
            index_of[me.node][me.port as usize] = i as u32;
            let (c, operational_vls) = figures
                .ports
                .get(&(me.node, me.port))
                .cloned()
                .unwrap_or((PortCounters::default(), 1));
            let link_gbps = rate.data_bps() as f64 / 1e9;
            let mut p = PortSummary {
                port: name(*me),
                peer: name(*peer),
                link: rate.name(),
                link_gbps: round(link_gbps, 4),
                operational_vls,
                ..PortSummary::default()
            };
            p.fill_counters(&c, tick);
            let xg = gbps(c.port_xmit_data * 4, duration_ps);
            p.xmit_gbps = round(xg, 4);
            p.xmit_utilisation = round(if link_gbps > 0.0 { xg / link_gbps } else { 0.0 }, 4);
            p.xmit_wait_fraction = round(
                if duration_ps > 0 {
                    c.xmit_wait_ps as f64 / duration_ps as f64
                } else {
                    0.0
                },
                4,
            );
            ports.push(p);
        }

        let mut series: Vec<Vec<SamplePoint>> = vec![Vec::new(); ports.len()];
        let max_vls = ports
            .iter()
            .map(|p| p.operational_vls as usize)
            .max()
            .unwrap_or(1);
        let series_vls = if max_vls > 1 { max_vls } else { 0 };
        let mut vl_series: Vec<Vec<u64>> = vec![Vec::new(); ports.len()];
        for s in &figures.samples {
            let Some(&i) = index_of
                .get(s.node as usize)
                .and_then(|v| v.get(s.port as usize))
            else {
                continue;
            };
            if i == u32::MAX {
                continue;
            }
            let c = &s.counters;
            series[i as usize].push(SamplePoint {
                time_ps: s.time,
                xmit_data: c.port_xmit_data,
                rcv_data: c.port_rcv_data,
                xmit_pkts: c.port_xmit_pkts,
                rcv_pkts: c.port_rcv_pkts,
                xmit_wait: c.port_xmit_wait(tick),
                errors: c.errors(),
                rx_blocks: s.rx_blocks_used,
            });
            vl_series[i as usize].extend((0..series_vls).map(|v| c.vl_xmit_wait(v as u8, tick)));
        }
        for (p, s) in ports.iter_mut().zip(&series) {
            p.rx_buffer_peak_bytes = s.iter().map(|x| x.rx_blocks as u64 * 64).max().unwrap_or(0);
        }

        let mut totals = Totals {
            ports: ports.len(),
            ..Totals::default()
        };
        for p in &ports {
            totals.port_xmit_data += p.port_xmit_data;
            totals.port_rcv_data += p.port_rcv_data;
            totals.port_xmit_pkts += p.port_xmit_pkts;
            totals.port_rcv_pkts += p.port_rcv_pkts;
            totals.port_xmit_wait += p.port_xmit_wait;
            totals.errors += p.error_total();
            totals.drops += p.port_rcv_errors
                + p.port_rcv_switch_relay_errors
                + p.port_xmit_discards
                + p.excessive_buffer_overrun_errors
                + p.vl15_dropped;
        }

        let rows: Vec<FlowSummary> = flows
            .flows()
            .iter()
            .map(|(&id, f)| flow_summary(id, f, duration_ps))
            .collect();
        let flow_bins = flows.flows().values().map(|f| f.bins().to_vec()).collect();
        let data_from: Vec<String> = flows
            .flows()
            .values()
            .map(|f| f.info.data_from.clone())
            .collect();
        let totals_f = flow_totals(flows, &rows);

        let hosts = topo.hcas().count();
        let switches = topo
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Switch)
            .count();
        let mut summary = Summary {
            generator: format!("softib-sim {}", env!("CARGO_PKG_VERSION")),
            scenario: ScenarioInfo {
                name: meta.name.clone(),
                seed: meta.seed,
                duration_us: round(duration_ps as f64 / PS_PER_US as f64, 3),
                topology: meta.topology.clone(),
                hosts,
                switches,
                links: topo.links.len(),
                link: cfg.link_rate.name(),
                link_gbps: round(cfg.link_rate.data_bps() as f64 / 1e9, 4),
                xmit_wait_tick_ns: round(tick as f64 / PS_PER_NS as f64, 3),
                sample_interval_us: round(
                    cfg.sample_interval_ps.unwrap_or(0) as f64 / PS_PER_US as f64,
                    3,
                ),
            },
            run: RunInfo {
                events: figures.events,
                packets_delivered: figures.delivered,
                packets_in_flight: figures.in_flight,
            },
            units: Units {
                port_xmit_data: "4-byte words of data packets, LRH through ICRC (PortXmitData, PortRcvData)",
                port_rcv_data: "4-byte words",
                port_xmit_pkts: "data packets (PortXmitPkts, PortRcvPkts)",
                port_xmit_wait: format!(
                    "ticks of {} ns with data queued and nothing sent (PortXmitWait, PortVLXmitWait)",
                    round(tick as f64 / PS_PER_NS as f64, 3)
                ),
                errors: "events (packets or link events)",
                gbps: "10^9 bits per second",
                time: "microseconds of simulated time",
            },
            totals,
            flow_totals: totals_f,
            flows: rows,
            stood_out: Vec::new(),
            transport: Vec::new(),
            congestion_control: None,
            ports,
        };
        super::diagnose::diagnose(&mut summary, &data_from);
        summary.stood_out = super::standout::findings(&summary);
        Report {
            summary,
            series,
            vl_series,
            series_vls,
            flow_bins,
            bin_ps: flows.bin_ps(),
            duration_ps,
            data_from,
            pcap: None,
        }
    }

    /// Adds the transport engines' counters and re-derives what stood out.
    pub fn set_transport(&mut self, transport: Vec<HostTransport>) {
        self.summary.transport = transport;
        super::diagnose::diagnose(&mut self.summary, &self.data_from);
        self.summary.stood_out = super::standout::findings(&self.summary);
    }

    /// Adds the congestion-control time series (CCTI per source, FECN/BECN per port).
    pub fn set_congestion_control(&mut self, cc: super::cc::CcSummary) {
        self.summary.congestion_control = Some(cc);
    }

    /// Adds the counters of each engine flow's QP pair, by flow tag.
    pub fn set_flow_qps(&mut self, qps: std::collections::BTreeMap<u32, FlowQp>) {
        for f in &mut self.summary.flows {
            if let Some(q) = qps.get(&f.id) {
                f.qp = Some(q.clone());
            }
        }
        super::diagnose::diagnose(&mut self.summary, &self.data_from);
        self.summary.stood_out = super::standout::findings(&self.summary);
    }
}
