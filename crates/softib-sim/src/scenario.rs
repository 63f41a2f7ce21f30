//! Scenario files: TOML describing a fabric (settings, topology, QoS).
//!
//! Every table denies unknown keys, and every value is checked; errors name the key and the
//! line (`toml`'s parser reports the position of syntax and type errors; the semantic checks
//! here keep the span of the value they reject).
//!
//! ```toml
//! seed = 7
//! [fabric]
//! link_speed = "EDR"          # SDR DDR QDR FDR10 FDR EDR HDR NDR
//! link_width = "4x"           # 1x 2x 4x 8x 12x
//! cable_m = 2.0               # or link_delay_ns
//! rx_buffer_bytes = 65536     # per data VL, advertised at link bring-up
//! forwarding = "cut-through"  # or "store-and-forward"
//! switch_latency_ns = 100
//! routing_engine = "ftree"    # OpenSM engine name: minhop (default) or ftree
//! [topology]
//! kind = "single-switch"      # back-to-back, single-switch, fat-tree-2, fat-tree-3, explicit
//! hosts = 8
//! switch_ports = 36
//! [qos]                       # OpenSM keys, see softib_fabric::qos
//! qos_max_vls = 2
//! qos_vlarb_low = "0:32,1:32"
//! [congestion_control]        # OpenSM keys, see softib_fabric::cc_switch
//! congestion_control = true
//! cc_sw_cong_setting_threshold = 15
//! cc_ca_cong_setting_ccti_timer = ["0 20"]   # per SL: "<SL> <value>"
//! cc_cct = "0:0,0:1,0:2,0:3"
//! ```
//!
//! Traffic and behaviour tables, each documented in its module: `[[stream]]` raw packet
//! streams, data or VL15 management ([`crate::stream`]); `[[flow]]` perftest-like traffic on
//! the transport engine ([`crate::engine_flow`]); `[[host]]` an engine host's receive
//! processing ([`crate::host_model`]); `[[fault]]` link flaps and responder stalls
//! ([`crate::faults`]).

use softib_fabric::fabric::{BuildError, Fabric, FabricConfig, Forwarding};
use softib_fabric::link::{propagation_ps, LinkRate, LinkSpeed, LinkWidth, DEFAULT_PS_PER_METRE};
use softib_fabric::qos::QosOptions;
use softib_fabric::routing::RoutingEngine;
use softib_fabric::time::{Picos, PS_PER_NS, PS_PER_US};
use softib_fabric::topology::{NodeKind, PortAddr, Topology, TopologyError};
use serde::Deserialize;
use toml::Spanned;

/// A scenario error, with the key and line where it applies.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Syntax, unknown key or wrongly typed value (the message names key, line and column).
    /// Transparent, so that a chain of causes does not print the message twice.
    #[error(transparent)]
    Parse(#[from] toml::de::Error),
    /// A value that parsed but makes no sense.
    #[error("line {line}: {key}: {reason}")]
    Invalid {
        /// Dotted key.
        key: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The fabric could not be built from otherwise valid settings.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The `[fabric]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSection {
    /// Default link speed.
    pub link_speed: Option<LinkSpeed>,
    /// Default link width.
    pub link_width: Option<LinkWidth>,
    /// Default cable length in metres (5 ns/m).
    pub cable_m: Option<Spanned<f64>>,
    /// Default propagation delay in ns (instead of `cable_m`).
    pub link_delay_ns: Option<u64>,
    /// Receive buffer per data VL, bytes.
    pub rx_buffer_bytes: Option<Spanned<u32>>,
    /// VL15 receive buffer, packets.
    pub vl15_buffer_packets: Option<u32>,
    /// Data VLs the ports support.
    pub vl_cap: Option<Spanned<u8>>,
    /// Switch forwarding mode.
    pub forwarding: Option<Forwarding>,
    /// Crossbar speed-up (1.0 = line rate).
    pub crossbar_speedup: Option<Spanned<f64>>,
    /// Switch pipeline latency, ns.
    pub switch_latency_ns: Option<u64>,
    /// Flow-control refresh period in symbol times (<= 65536).
    pub fc_period_symbols: Option<Spanned<u64>>,
    /// PortXmitWait tick, ns.
    pub xmit_wait_tick_ns: Option<Spanned<u64>>,
    /// HCA send queue depth per VL, packets.
    pub hca_send_queue_packets: Option<Spanned<usize>>,
    /// Counter sampling interval, microseconds.
    pub sample_interval_us: Option<Spanned<u64>>,
    /// OpenSM routing engine: `minhop` (default) or `ftree`.
    pub routing_engine: Option<RoutingEngine>,
    /// Bit error rate of every cable (per bit, both directions).
    pub bit_error_rate: Option<Spanned<f64>>,
}

/// Topology shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// Two HCAs, one cable.
    BackToBack,
    /// `hosts` HCAs on one switch of `switch_ports` ports.
    SingleSwitch,
    /// Two-level fat tree of `switch_ports`-port switches with `hosts` hosts.
    #[serde(rename = "fat-tree-2")]
    FatTree2,
    /// Three-level fat tree of `switch_ports`-port switches (k^3/4 hosts).
    #[serde(rename = "fat-tree-3")]
    FatTree3,
    /// `nodes` and `links` as listed.
    Explicit,
}

/// An explicit node.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// Unique name.
    pub name: String,
    /// `hca` or `switch`.
    pub kind: NodeKindEntry,
    /// Port count (default 1 for an HCA, 36 for a switch).
    pub ports: Option<u8>,
}

/// Node kinds in scenario spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKindEntry {
    /// HCA.
    Hca,
    /// Switch.
    Switch,
}

/// An explicit link, or an override of a generated one (matched by its ends).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEntry {
    /// One end, `node:port`.
    pub a: Spanned<String>,
    /// Other end, `node:port`.
    pub b: Spanned<String>,
    /// Speed.
    pub speed: Option<LinkSpeed>,
    /// Width.
    pub width: Option<LinkWidth>,
    /// Cable length, metres.
    pub length_m: Option<Spanned<f64>>,
    /// Propagation delay, ns.
    pub delay_ns: Option<u64>,
    /// Delay added to the cable's (a patch panel, a retimer, a long detour), ns.
    pub extra_delay_ns: Option<u64>,
    /// Receive buffer per data VL at end `a`, bytes.
    pub rx_buffer_bytes_a: Option<u32>,
    /// Receive buffer per data VL at end `b`, bytes.
    pub rx_buffer_bytes_b: Option<u32>,
    /// Bit error rate of this cable.
    pub bit_error_rate: Option<Spanned<f64>>,
}

/// The `[topology]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySection {
    /// Shape.
    pub kind: TopologyKind,
    /// Number of hosts (single-switch, fat-tree-2).
    pub hosts: Option<Spanned<usize>>,
    /// Switch radix (single-switch default 36, fat trees required).
    pub switch_ports: Option<Spanned<u8>>,
    /// Explicit nodes.
    #[serde(default)]
    pub nodes: Vec<NodeEntry>,
    /// Explicit links, or per-link overrides of a generated topology.
    #[serde(default)]
    pub links: Vec<LinkEntry>,
}

/// Resolves `"NODE:PORT"` to (node name, port number) in `topo`, checking that the port
/// exists and has a cable; the error says what is wrong with the text.
pub fn parse_port_ref(topo: &Topology, text: &str) -> Result<(String, u8), String> {
    let Some((name, port)) = text.rsplit_once(':') else {
        return Err(format!("`{text}` is not NODE:PORT (e.g. \"sw0:3\")"));
    };
    let Some(node) = topo.node_by_name(name) else {
        return Err(format!("no node called `{name}`"));
    };
    let Ok(port) = port.parse::<u8>() else {
        return Err(format!("`{port}` is not a port number"));
    };
    let cabled = topo
        .links
        .iter()
        .any(|l| (l.a.node == node && l.a.port == port) || (l.b.node == node && l.b.port == port));
    if !cabled {
        return Err(format!("port {port} of `{name}` has no cable"));
    }
    Ok((name.to_string(), port))
}

/// A whole scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Seed of every random stream.
    #[serde(default)]
    pub seed: u64,
    /// Simulated duration, microseconds.
    pub duration_us: Option<u64>,
    /// Fabric settings.
    #[serde(default)]
    pub fabric: FabricSection,
    /// The topology.
    pub topology: TopologySection,
    /// QoS in OpenSM's keys; absent = one data VL.
    pub qos: Option<QosOptions>,
    /// Congestion control in OpenSM's keys (`congestion_control`, `cc_sw_cong_setting_*`,
    /// `cc_ca_cong_setting_*`, `cc_cct`); absent = off. A per-SL key takes `"<SL> <value>"`
    /// or an array of them.
    pub congestion_control: Option<std::collections::BTreeMap<String, Spanned<toml::Value>>>,
    /// Raw packet streams ([`crate::stream`]).
    #[serde(default)]
    pub stream: Vec<crate::stream::StreamEntry>,
    /// Transport-engine flows ([`crate::engine_flow`]).
    #[serde(default)]
    pub flow: Vec<crate::engine_flow::FlowEntry>,
    /// Scheduled faults ([`crate::faults`]).
    #[serde(default)]
    pub fault: Vec<crate::faults::FaultEntry>,
    /// Per-host behaviour of engine HCAs ([`crate::host_model`]).
    #[serde(default)]
    pub host: Vec<crate::host_model::HostEntry>,
    /// Ports whose traffic `softib sim` captures in both directions into `capture.pcap`,
    /// as `"NODE:PORT"` (switch ports too; see [`softib_fabric::tap`]).
    #[serde(default)]
    pub pcap_ports: Vec<Spanned<String>>,
    #[serde(skip)]
    source: String,
}

impl Scenario {
    /// Parses a scenario from TOML text.
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        let mut s: Scenario = toml::from_str(text)?;
        s.source = text.to_string();
        // Build once to surface semantic errors at load time.
        s.topology()?;
        s.config()?;
        s.traffic_check()?;
        s.fault_check()?;
        s.host_models()?;
        s.congestion_control()?;
        s.capture_ports()?;
        Ok(s)
    }

    /// The ports of `pcap_ports` as (node name, port number), each checked to exist and be
    /// cabled.
    pub fn capture_ports(&self) -> Result<Vec<(String, u8)>, ScenarioError> {
        let topo = self.topology()?;
        let mut out = Vec::with_capacity(self.pcap_ports.len());
        for (i, entry) in self.pcap_ports.iter().enumerate() {
            let key = format!("pcap_ports[{i}]");
            let text = entry.get_ref();
            match parse_port_ref(&topo, text) {
                Ok(p) => out.push(p),
                Err(reason) => return self.invalid(&key, entry.span(), reason),
            }
        }
        Ok(out)
    }

    /// Reads and parses a scenario file.
    pub fn load(path: &std::path::Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    fn line(&self, span: std::ops::Range<usize>) -> usize {
        self.source[..span.start.min(self.source.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    /// A [`ScenarioError::Invalid`] for `key` at the line of `span`, for checks made in
    /// other modules (e.g. [`crate::stream`]).
    pub(crate) fn error_at(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        reason: String,
    ) -> ScenarioError {
        ScenarioError::Invalid {
            key: key.to_string(),
            line: self.line(span),
            reason,
        }
    }

    fn invalid<T>(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        reason: String,
    ) -> Result<T, ScenarioError> {
        Err(ScenarioError::Invalid {
            key: key.to_string(),
            line: self.line(span),
            reason,
        })
    }

    /// The fabric settings this scenario describes.
    pub fn config(&self) -> Result<FabricConfig, ScenarioError> {
        let f = &self.fabric;
        let mut c = FabricConfig::default();
        let rate = LinkRate::new(
            f.link_width.unwrap_or(c.link_rate.width),
            f.link_speed.unwrap_or(c.link_rate.speed),
        );
        c.link_rate = rate;
        if let Some(m) = &f.cable_m {
            if !(m.get_ref().is_finite() && *m.get_ref() >= 0.0) {
                return self.invalid("fabric.cable_m", m.span(), "must be a length >= 0".into());
            }
            c.link_delay_ps = propagation_ps(*m.get_ref(), DEFAULT_PS_PER_METRE);
        }
        if let Some(ns) = f.link_delay_ns {
            c.link_delay_ps = ns * PS_PER_NS;
        }
        if let Some(b) = &f.rx_buffer_bytes {
            if *b.get_ref() < 64 {
                return self.invalid(
                    "fabric.rx_buffer_bytes",
                    b.span(),
                    "a receive buffer needs at least one 64-byte block".into(),
                );
            }
            c.rx_buffer_bytes = *b.get_ref();
        }
        if let Some(v) = f.vl15_buffer_packets {
            c.vl15_buffer_packets = v;
        }
        if let Some(v) = &f.vl_cap {
            if !(1..=15).contains(v.get_ref()) {
                return self.invalid("fabric.vl_cap", v.span(), "data VLs must be 1..=15".into());
            }
            c.vl_cap = *v.get_ref();
        }
        if let Some(m) = f.forwarding {
            c.forwarding = m;
        }
        if let Some(s) = &f.crossbar_speedup {
            let v = *s.get_ref();
            if !(v.is_finite() && (0.001..=64.0).contains(&v)) {
                return self.invalid(
                    "fabric.crossbar_speedup",
                    s.span(),
                    "must be in 0.001..=64".into(),
                );
            }
            c.crossbar_speedup_permille = (v * 1000.0).round() as u32;
        }
        if let Some(ns) = f.switch_latency_ns {
            c.switch_latency_ps = ns * PS_PER_NS;
        }
        if let Some(p) = &f.fc_period_symbols {
            if !(1..=65_536).contains(p.get_ref()) {
                return self.invalid(
                    "fabric.fc_period_symbols",
                    p.span(),
                    "IBA 7.9.4.2 requires a flow-control packet at least every 65,536 symbol times"
                        .into(),
                );
            }
            c.fc_period_symbols = *p.get_ref();
        }
        if let Some(t) = &f.xmit_wait_tick_ns {
            if *t.get_ref() == 0 {
                return self.invalid(
                    "fabric.xmit_wait_tick_ns",
                    t.span(),
                    "must be positive".into(),
                );
            }
            c.xmit_wait_tick_ps = t.get_ref() * PS_PER_NS;
        }
        if let Some(d) = &f.hca_send_queue_packets {
            if *d.get_ref() == 0 {
                return self.invalid(
                    "fabric.hca_send_queue_packets",
                    d.span(),
                    "must be at least 1".into(),
                );
            }
            c.hca_send_queue_packets = *d.get_ref();
        }
        if let Some(s) = &f.sample_interval_us {
            if *s.get_ref() == 0 {
                return self.invalid(
                    "fabric.sample_interval_us",
                    s.span(),
                    "must be positive".into(),
                );
            }
            c.sample_interval_ps = Some(s.get_ref() * PS_PER_US);
        }
        if let Some(r) = self.fabric.routing_engine {
            c.routing = r;
        }
        if let Some(b) = &f.bit_error_rate {
            let v = *b.get_ref();
            if !(0.0..1.0).contains(&v) {
                return self.invalid(
                    "fabric.bit_error_rate",
                    b.span(),
                    "a probability in 0..1".into(),
                );
            }
            c.bit_error_rate = v;
        }
        c.seed = self.seed;
        c.qos = self.qos.clone();
        Ok(c)
    }

    fn shape_error<T>(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        e: TopologyError,
    ) -> Result<T, ScenarioError> {
        self.invalid(key, span, e.to_string())
    }

    /// The topology this scenario describes.
    pub fn topology(&self) -> Result<Topology, ScenarioError> {
        let t = &self.topology;
        let hosts = |def: Option<usize>| -> Result<(usize, std::ops::Range<usize>), ScenarioError> {
            match (&t.hosts, def) {
                (Some(h), _) => Ok((*h.get_ref(), h.span())),
                (None, Some(d)) => Ok((d, 0..0)),
                (None, None) => self.invalid(
                    "topology.hosts",
                    0..0,
                    format!("required for kind {:?}", t.kind),
                ),
            }
        };
        let radix = |def: Option<u8>| -> Result<(u8, std::ops::Range<usize>), ScenarioError> {
            match (&t.switch_ports, def) {
                (Some(p), _) => Ok((*p.get_ref(), p.span())),
                (None, Some(d)) => Ok((d, 0..0)),
                (None, None) => self.invalid(
                    "topology.switch_ports",
                    0..0,
                    format!("required for kind {:?}", t.kind),
                ),
            }
        };
        let mut topo = match t.kind {
            TopologyKind::BackToBack => Topology::back_to_back(),
            TopologyKind::SingleSwitch => {
                let (h, hs) = hosts(None)?;
                let (p, _) = radix(Some(36))?;
                Topology::single_switch(h, p)
                    .or_else(|e| self.shape_error("topology.hosts", hs, e))?
            }
            TopologyKind::FatTree2 => {
                let (p, ps) = radix(None)?;
                let (h, _) = hosts(Some(p as usize * (p as usize / 2)))?;
                Topology::fat_tree_2(p, h)
                    .or_else(|e| self.shape_error("topology.switch_ports", ps, e))?
            }
            TopologyKind::FatTree3 => {
                let (p, ps) = radix(None)?;
                Topology::fat_tree_3(p)
                    .or_else(|e| self.shape_error("topology.switch_ports", ps, e))?
            }
            TopologyKind::Explicit => {
                let mut topo = Topology::new();
                for n in &t.nodes {
                    let (kind, def) = match n.kind {
                        NodeKindEntry::Hca => (NodeKind::Hca, 1),
                        NodeKindEntry::Switch => (NodeKind::Switch, 36),
                    };
                    topo.add_node(n.name.clone(), kind, n.ports.unwrap_or(def));
                }
                topo
            }
        };
        let explicit = t.kind == TopologyKind::Explicit;
        for (i, l) in t.links.iter().enumerate() {
            let a = self.endpoint(&topo, &format!("topology.links[{i}].a"), &l.a)?;
            let b = self.endpoint(&topo, &format!("topology.links[{i}].b"), &l.b)?;
            let idx = if explicit {
                topo.connect(a.node, a.port, b.node, b.port);
                topo.links.len() - 1
            } else {
                match topo
                    .links
                    .iter()
                    .position(|x| (x.a == a && x.b == b) || (x.a == b && x.b == a))
                {
                    Some(i) => i,
                    None => {
                        return self.invalid(
                            &format!("topology.links[{i}]"),
                            l.a.span(),
                            format!(
                                "the generated topology has no cable {} -- {}",
                                l.a.get_ref(),
                                l.b.get_ref()
                            ),
                        )
                    }
                }
            };
            let swapped = topo.links[idx].a != a;
            let spec = &mut topo.links[idx];
            if l.speed.is_some() || l.width.is_some() {
                let base = self.config()?.link_rate;
                spec.rate = Some(LinkRate::new(
                    l.width.unwrap_or(base.width),
                    l.speed.unwrap_or(base.speed),
                ));
            }
            if let Some(m) = &l.length_m {
                if !(m.get_ref().is_finite() && *m.get_ref() >= 0.0) {
                    return self.invalid(
                        &format!("topology.links[{i}].length_m"),
                        m.span(),
                        "must be >= 0".into(),
                    );
                }
                spec.delay_ps = Some(propagation_ps(*m.get_ref(), DEFAULT_PS_PER_METRE));
            }
            if let Some(b) = &l.bit_error_rate {
                let v = *b.get_ref();
                if !(0.0..1.0).contains(&v) {
                    return self.invalid(
                        &format!("topology.links[{i}].bit_error_rate"),
                        b.span(),
                        "a probability in 0..1".into(),
                    );
                }
                spec.bit_error_rate = Some(v);
            }
            if let Some(ns) = l.delay_ns {
                spec.delay_ps = Some(ns as Picos * PS_PER_NS);
            }
            if let Some(ns) = l.extra_delay_ns {
                let base = match spec.delay_ps {
                    Some(d) => d,
                    None => self.config()?.link_delay_ps,
                };
                spec.delay_ps = Some(base + ns as Picos * PS_PER_NS);
            }
            let (ra, rb) = if swapped {
                (l.rx_buffer_bytes_b, l.rx_buffer_bytes_a)
            } else {
                (l.rx_buffer_bytes_a, l.rx_buffer_bytes_b)
            };
            if ra.is_some() {
                spec.rx_buffer_a = ra;
            }
            if rb.is_some() {
                spec.rx_buffer_b = rb;
            }
        }
        topo.validate()
            .or_else(|e| self.invalid("topology", 0..0, e.to_string()))?;
        Ok(topo)
    }

    fn endpoint(
        &self,
        topo: &Topology,
        key: &str,
        s: &Spanned<String>,
    ) -> Result<PortAddr, ScenarioError> {
        let text = s.get_ref();
        let Some((name, port)) = text.rsplit_once(':') else {
            return self.invalid(key, s.span(), format!("`{text}` is not NODE:PORT"));
        };
        let Some(node) = topo.node_by_name(name) else {
            return self.invalid(key, s.span(), format!("no node called `{name}`"));
        };
        let Ok(port) = port.parse::<u8>() else {
            return self.invalid(key, s.span(), format!("`{port}` is not a port number"));
        };
        Ok(PortAddr { node, port })
    }

    /// The `[congestion_control]` table as OpenSM would read it (`None` without the table).
    /// HCAs take their `DeviceConfig::cc` from [`softib_fabric::cc_switch::OpensmCc::device_cc`].
    pub fn congestion_control(&self) -> Result<Option<softib_fabric::cc_switch::OpensmCc>, ScenarioError> {
        let Some(table) = &self.congestion_control else {
            return Ok(None);
        };
        // The table becomes opensm.conf lines; each line remembers its entry's span so an
        // error points at the scenario line.
        let mut text = String::new();
        let mut spans = Vec::new();
        for (key, value) in table {
            let full = format!("congestion_control.{key}");
            // opensm.conf's other keys are ignored by the OpenSM parser (a whole opensm.conf
            // is valid input there); in this table anything else is a typo.
            let known = key == "congestion_control"
                || key == "cc_cct"
                || key.starts_with("cc_sw_cong_setting_")
                || key.starts_with("cc_ca_cong_setting_");
            if !known {
                return self.invalid(
                    &full,
                    value.span(),
                    "not an OpenSM congestion control key (congestion_control, \
                     cc_sw_cong_setting_*, cc_ca_cong_setting_*, cc_cct)"
                        .into(),
                );
            }
            let items: Vec<&toml::Value> = match value.get_ref() {
                toml::Value::Array(a) => a.iter().collect(),
                v => vec![v],
            };
            for item in items {
                let v = match item {
                    toml::Value::Boolean(b) => if *b { "TRUE" } else { "FALSE" }.to_string(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::String(s) => s.clone(),
                    _ => {
                        return self.invalid(
                            &full,
                            value.span(),
                            "expected a boolean, an integer, a string or an array of them".into(),
                        )
                    }
                };
                text.push_str(&format!("{key} {v}\n"));
                spans.push(value.span());
            }
        }
        softib_fabric::cc_switch::parse_opensm_cc(&text)
            .map(Some)
            .map_err(|e| {
                let span = spans.get(e.line.saturating_sub(1)).cloned().unwrap_or(0..0);
                self.error_at(
                    &format!("congestion_control.{}", e.key),
                    span,
                    format!("`{}`: {}", e.token, e.reason),
                )
            })
    }

    /// Builds the fabric (endpoints are attached by the caller), with the Annex A10 switch
    /// marking of `[congestion_control]` installed when it is on and its CA setting recorded
    /// for the engine HCAs (`Fabric::ca_congestion_control`).
    pub fn build(&self) -> Result<Fabric, ScenarioError> {
        let config = self.config()?;
        let (rx, seeds) = (
            config.rx_buffer_bytes,
            softib_fabric::rng::SeedTree::new(config.seed),
        );
        let mut fabric = Fabric::new(self.topology()?, config)?;
        self.apply_faults(&mut fabric)?;
        if let Some(cc) = self.congestion_control()?.filter(|cc| cc.enabled) {
            if let Some(m) = cc.marker(rx, &seeds) {
                fabric.set_congestion_marker(Box::new(m));
            }
            fabric.set_ca_congestion_control(cc);
        }
        Ok(fabric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn congestion_control_table_uses_opensm_keys() {
        let base = "[topology]\nkind = \"single-switch\"\nhosts = 2\n";
        let s = Scenario::parse(&format!(
            "{base}[congestion_control]\ncongestion_control = true\n\
             cc_sw_cong_setting_threshold = 12\n\
             cc_ca_cong_setting_ccti_timer = [\"0 20\", \"1 40\"]\n\
             cc_cct = \"0:0,0:1\"\n"
        ))
        .unwrap();
        let cc = s.congestion_control().unwrap().unwrap();
        assert!(cc.enabled);
        assert_eq!(cc.switch.threshold, 12);
        assert_eq!(cc.ca.config.entries[1].ccti_timer, 40);
        s.build().unwrap();
        let e = Scenario::parse(&format!(
            "{base}[congestion_control]\ncc_sw_cong_setting_threshold = 16\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 5") && e.contains("cc_sw_cong_setting_threshold"),
            "{e}"
        );
        let e = Scenario::parse(&format!("{base}[congestion_control]\nthreshold = 3\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an OpenSM"), "{e}");
    }

    #[test]
    fn a_full_scenario_parses_and_builds() {
        let s = Scenario::parse(
            r#"
seed = 9
duration_us = 100
[fabric]
link_speed = "HDR"
link_width = "4x"
cable_m = 3.0
rx_buffer_bytes = 32768
forwarding = "store-and-forward"
crossbar_speedup = 1.5
switch_latency_ns = 130
routing_engine = "ftree"
xmit_wait_tick_ns = 4
sample_interval_us = 5
[topology]
kind = "single-switch"
hosts = 4
switch_ports = 8
[[topology.links]]
a = "sw0:2"
b = "h1:1"
rx_buffer_bytes_b = 8192
speed = "EDR"
[qos]
qos_max_vls = 2
qos_vlarb_low = "0:32,1:32"
qos_sl2vl = "0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1"
"#,
        )
        .unwrap();
        let c = s.config().unwrap();
        assert_eq!(c.link_rate.speed, LinkSpeed::Hdr);
        assert_eq!(c.link_delay_ps, 15_000);
        assert_eq!(c.crossbar_speedup_permille, 1500);
        assert_eq!(c.forwarding, Forwarding::StoreAndForward);
        assert_eq!(c.routing, RoutingEngine::Ftree);
        let t = s.topology().unwrap();
        let l = t
            .links
            .iter()
            .find(|l| t.nodes[l.a.node].name == "h1")
            .unwrap();
        // Written as sw0 -- h1 in the file, stored h1 -- sw0: the buffer follows h1.
        assert_eq!(l.rx_buffer_a, Some(8192));
        assert_eq!(l.rate.unwrap().speed, LinkSpeed::Edr);
        let f = s.build().unwrap();
        assert_eq!(f.operational_vls("h0", 1), Some(2));
    }

    #[test]
    fn extra_delay_adds_to_the_cable() {
        let s = Scenario::parse(
            "[fabric]\ncable_m = 2.0\n[topology]\nkind = \"single-switch\"\nhosts = 2\n\
             [[topology.links]]\na = \"h1:1\"\nb = \"sw0:2\"\nextra_delay_ns = 500\n\
             [[topology.links]]\na = \"h0:1\"\nb = \"sw0:1\"\nlength_m = 10.0\nextra_delay_ns = 1\n",
        )
        .unwrap();
        let t = s.topology().unwrap();
        let delay = |h: &str| {
            t.links
                .iter()
                .find(|l| t.nodes[l.a.node].name == h || t.nodes[l.b.node].name == h)
                .and_then(|l| l.delay_ps)
        };
        // 2 m of default cable (10 ns) + 500 ns; 10 m (50 ns) + 1 ns.
        assert_eq!(delay("h1"), Some(510_000));
        assert_eq!(delay("h0"), Some(51_000));
    }

    #[test]
    fn unknown_keys_are_errors_with_their_line() {
        let e =
            Scenario::parse("[topology]\nkind = \"back-to-back\"\n[fabric]\nlink_sped = \"EDR\"\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("line 4"), "{e}");
        assert!(e.contains("link_sped"), "{e}");
        let e = Scenario::parse(
            "[topology]\nkind = \"back-to-back\"\n[qos]\nqos_vlarb_mid = \"0:1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 4") && e.contains("qos_vlarb_mid"), "{e}");
    }

    #[test]
    fn bad_values_are_errors_with_key_and_line() {
        let e = Scenario::parse(
            "[topology]\nkind = \"back-to-back\"\n[fabric]\nlink_speed = \"XDR\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 4") && e.contains("XDR"), "{e}");
        let e =
            Scenario::parse("[topology]\nkind = \"back-to-back\"\n[qos]\nqos_sl2vl = \"0,1\"\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("line 4") && e.contains("expected 16"), "{e}");
        let e = Scenario::parse(
            "[topology]\nkind = \"back-to-back\"\n[fabric]\n\nfc_period_symbols = 70000\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("line 5: fabric.fc_period_symbols"), "{e}");
        let e = Scenario::parse(
            "[topology]\nkind = \"single-switch\"\nhosts = 40\nswitch_ports = 36\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("line 3: topology.hosts"), "{e}");
        let e = Scenario::parse(
            "[topology]\nkind = \"explicit\"\nnodes = [{name = \"a\", kind = \"hca\"}]\n[[topology.links]]\na = \"a:1\"\nb = \"zz:1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("line 6: topology.links[0].b: no node called `zz`"),
            "{e}"
        );
    }
}
