//! The `[topology]` table: a generated shape (back-to-back, single switch, 2- and 3-level
//! fat trees), explicit nodes and links, or a real fabric read from an `ibnetdiscover` file
//! ([`super::ibnetdiscover`]), with per-link overrides of rate, cable, receive buffers and
//! bit error rate, as a [`softib_fabric::topology::Topology`].

use super::source::{ScenarioError, Source};
use serde::Deserialize;
use softib_fabric::fabric::FabricConfig;
use softib_fabric::link::{propagation_ps, LinkRate, LinkSpeed, LinkWidth, DEFAULT_PS_PER_METRE};
use softib_fabric::time::{Picos, PS_PER_NS};
use softib_fabric::topology::{NodeKind, PortAddr, Topology, TopologyError};
use toml::Spanned;

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
    /// Shape (absent when the fabric comes from `ibnetdiscover`).
    pub kind: Option<Spanned<TopologyKind>>,
    /// An `ibnetdiscover` output (or ibsim net) file to read the fabric from, relative to
    /// the scenario file's directory.
    pub ibnetdiscover: Option<Spanned<String>>,
    /// The fabric read from `ibnetdiscover` ([`TopologySection::import`]).
    #[serde(skip)]
    pub imported: Option<Topology>,
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

impl TopologySection {
    /// Reads the `ibnetdiscover` file, if the table names one, relative to `base_dir`; a
    /// cable that gives only its width takes its speed from `default_rate`. Errors name the
    /// key and its line, and the file's line at fault.
    pub fn import(
        &mut self,
        base_dir: &std::path::Path,
        default_rate: LinkRate,
        src: &Source,
    ) -> Result<(), ScenarioError> {
        let Some(file) = &self.ibnetdiscover else {
            return Ok(());
        };
        let path = base_dir.join(file.get_ref());
        let text = std::fs::read_to_string(&path).map_err(|e| {
            src.error_at(
                "topology.ibnetdiscover",
                file.span(),
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        let topo = super::ibnetdiscover::parse(&text, default_rate).map_err(|e| {
            src.error_at(
                "topology.ibnetdiscover",
                file.span(),
                format!("{} {e}", path.display()),
            )
        })?;
        self.imported = Some(topo);
        Ok(())
    }

    /// The topology this table describes. `config` gives the `[fabric]` defaults a link
    /// override starts from; it is asked only when a link overrides its rate or adds delay
    /// to the default cable.
    pub fn build(
        &self,
        config: &dyn Fn() -> Result<FabricConfig, ScenarioError>,
        src: &Source,
    ) -> Result<Topology, ScenarioError> {
        let t = self;
        let kind = match (&t.kind, &t.ibnetdiscover) {
            (Some(k), None) => Some(*k.get_ref()),
            (None, Some(_)) => None,
            (Some(k), Some(_)) => {
                return src.invalid(
                    "topology.kind",
                    k.span(),
                    "give either kind or ibnetdiscover, not both".into(),
                )
            }
            (None, None) => {
                return src.invalid(
                    "topology.kind",
                    0..0,
                    "missing: a shape (back-to-back, single-switch, fat-tree-2, fat-tree-3, \
                     explicit) or ibnetdiscover = \"FILE\""
                        .into(),
                )
            }
        };
        let hosts = |def: Option<usize>| -> Result<(usize, std::ops::Range<usize>), ScenarioError> {
            match (&t.hosts, def) {
                (Some(h), _) => Ok((*h.get_ref(), h.span())),
                (None, Some(d)) => Ok((d, 0..0)),
                (None, None) => src.invalid(
                    "topology.hosts",
                    0..0,
                    format!(
                        "required for kind {}",
                        kind.map_or_else(String::new, |k| format!("{k:?}"))
                    ),
                ),
            }
        };
        let radix = |def: Option<u8>| -> Result<(u8, std::ops::Range<usize>), ScenarioError> {
            match (&t.switch_ports, def) {
                (Some(p), _) => Ok((*p.get_ref(), p.span())),
                (None, Some(d)) => Ok((d, 0..0)),
                (None, None) => src.invalid(
                    "topology.switch_ports",
                    0..0,
                    format!(
                        "required for kind {}",
                        kind.map_or_else(String::new, |k| format!("{k:?}"))
                    ),
                ),
            }
        };
        let mut topo = match kind {
            None => match &t.imported {
                Some(topo) => topo.clone(),
                None => {
                    return src.invalid(
                        "topology.ibnetdiscover",
                        t.ibnetdiscover.as_ref().map_or(0..0, |f| f.span()),
                        "the file was not read (a scenario parsed without a directory)".into(),
                    )
                }
            },
            Some(kind) => match kind {
                TopologyKind::BackToBack => Topology::back_to_back(),
                TopologyKind::SingleSwitch => {
                    let (h, hs) = hosts(None)?;
                    let (p, _) = radix(Some(36))?;
                    Topology::single_switch(h, p)
                        .or_else(|e| shape_error(src, "topology.hosts", hs, e))?
                }
                TopologyKind::FatTree2 => {
                    let (p, ps) = radix(None)?;
                    let (h, _) = hosts(Some(p as usize * (p as usize / 2)))?;
                    Topology::fat_tree_2(p, h)
                        .or_else(|e| shape_error(src, "topology.switch_ports", ps, e))?
                }
                TopologyKind::FatTree3 => {
                    let (p, ps) = radix(None)?;
                    Topology::fat_tree_3(p)
                        .or_else(|e| shape_error(src, "topology.switch_ports", ps, e))?
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
            },
        };
        let explicit = kind == Some(TopologyKind::Explicit);
        for (i, l) in t.links.iter().enumerate() {
            let a = endpoint(src, &topo, &format!("topology.links[{i}].a"), &l.a)?;
            let b = endpoint(src, &topo, &format!("topology.links[{i}].b"), &l.b)?;
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
                        return src.invalid(
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
                let base = config()?.link_rate;
                spec.rate = Some(LinkRate::new(
                    l.width.unwrap_or(base.width),
                    l.speed.unwrap_or(base.speed),
                ));
            }
            if let Some(m) = &l.length_m {
                if !(m.get_ref().is_finite() && *m.get_ref() >= 0.0) {
                    return src.invalid(
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
                    return src.invalid(
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
                    None => config()?.link_delay_ps,
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
            .or_else(|e| src.invalid("topology", 0..0, e.to_string()))?;
        Ok(topo)
    }
}

fn shape_error<T>(
    src: &Source,
    key: &str,
    span: std::ops::Range<usize>,
    e: TopologyError,
) -> Result<T, ScenarioError> {
    src.invalid(key, span, e.to_string())
}

fn endpoint(
    src: &Source,
    topo: &Topology,
    key: &str,
    s: &Spanned<String>,
) -> Result<PortAddr, ScenarioError> {
    let text = s.get_ref();
    let Some((name, port)) = text.rsplit_once(':') else {
        return src.invalid(key, s.span(), format!("`{text}` is not NODE:PORT"));
    };
    let Some(node) = topo.node_by_name(name) else {
        return src.invalid(key, s.span(), format!("no node called `{name}`"));
    };
    let Ok(port) = port.parse::<u8>() else {
        return src.invalid(key, s.span(), format!("`{port}` is not a port number"));
    };
    Ok(PortAddr { node, port })
}
