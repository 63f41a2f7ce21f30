//! Fabric topologies: explicit node and link lists, and generators for the shapes fabric
//! engineers build (back-to-back, one switch, two- and three-level fat trees).
//!
//! Port numbers follow IBA: switch ports are 1..=N (port 0 is the switch's management port and
//! has no cable), HCA ports are 1..=N.

use crate::link::LinkRate;
use crate::time::Picos;

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A channel adapter: the transport engine lives here.
    Hca,
    /// A switch.
    Switch,
}

/// A node of the topology.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// Unique name (used in scenario files and reports).
    pub name: String,
    /// HCA or switch.
    pub kind: NodeKind,
    /// Number of physical ports (numbered from 1).
    pub ports: u8,
    /// GUIDs the node had where the topology came from (an imported `ibnetdiscover` file);
    /// `None`: the management agents derive them from the node's index
    /// (`agents::node_guid`).
    pub guids: Option<NodeGuids>,
}

/// A node's GUIDs as a real fabric reported them (IBA vol. 1 §14.2.5.3 NodeInfo).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeGuids {
    /// NodeGUID.
    pub node: u64,
    /// SystemImageGUID.
    pub system_image: u64,
    /// PortGUID per port number: a switch has one, port 0's, at index 0; an HCA's port `p`
    /// is at index `p` (index 0 unused). A port missing here gets `node | p`.
    pub ports: Vec<u64>,
}

impl NodeGuids {
    /// The PortGUID of port `p` (a switch's every port answers with port 0's).
    pub fn port(&self, kind: NodeKind, p: u8) -> u64 {
        let p = match kind {
            NodeKind::Switch => 0,
            NodeKind::Hca => p,
        };
        match self.ports.get(p as usize) {
            Some(&g) if g != 0 => g,
            _ => self.node | p as u64,
        }
    }
}

/// One end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortAddr {
    /// Node index in [`Topology::nodes`].
    pub node: usize,
    /// Port number (1-based).
    pub port: u8,
}

/// A cable between two ports, with optional per-link overrides of the fabric defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    /// One end.
    pub a: PortAddr,
    /// The other end.
    pub b: PortAddr,
    /// Width and speed (default: the fabric's).
    pub rate: Option<LinkRate>,
    /// Propagation delay (default: the fabric's cable length at 5 ns/m).
    pub delay_ps: Option<Picos>,
    /// Receive buffer per data VL at end `a`, in bytes (default: the fabric's).
    pub rx_buffer_a: Option<u32>,
    /// Receive buffer per data VL at end `b`, in bytes.
    pub rx_buffer_b: Option<u32>,
    /// Bit error rate of the cable, both directions (default: the fabric's).
    pub bit_error_rate: Option<f64>,
}

impl LinkSpec {
    /// A link with all defaults.
    pub fn new(a: PortAddr, b: PortAddr) -> Self {
        LinkSpec {
            a,
            b,
            rate: None,
            delay_ps: None,
            rx_buffer_a: None,
            rx_buffer_b: None,
            bit_error_rate: None,
        }
    }
}

/// A topology error, naming the node or port at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    /// Two nodes share a name.
    #[error("duplicate node name `{0}`")]
    DuplicateName(String),
    /// A link names a port the node does not have.
    #[error("node `{node}` has ports 1..={ports}, link uses port {port}")]
    NoSuchPort {
        /// Node name.
        node: String,
        /// Its port count.
        ports: u8,
        /// The port asked for.
        port: u8,
    },
    /// Two links use the same port.
    #[error("port {port} of `{node}` is cabled twice")]
    PortReused {
        /// Node name.
        node: String,
        /// Port number.
        port: u8,
    },
    /// A link references a node index that does not exist.
    #[error("link references node #{0}, which does not exist")]
    NoSuchNode(usize),
    /// A generator was asked for an impossible shape.
    #[error("impossible topology: {0}")]
    Shape(String),
}

/// Nodes and the cables between them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// Nodes, indexed by position.
    pub nodes: Vec<NodeSpec>,
    /// Links.
    pub links: Vec<LinkSpec>,
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node and returns its index.
    pub fn add_node(&mut self, name: impl Into<String>, kind: NodeKind, ports: u8) -> usize {
        self.nodes.push(NodeSpec {
            name: name.into(),
            kind,
            ports,
            guids: None,
        });
        self.nodes.len() - 1
    }

    /// Cables port `pa` of node `a` to port `pb` of node `b` with default link parameters.
    pub fn connect(&mut self, a: usize, pa: u8, b: usize, pb: u8) -> &mut LinkSpec {
        self.links.push(LinkSpec::new(
            PortAddr { node: a, port: pa },
            PortAddr { node: b, port: pb },
        ));
        self.links.last_mut().expect("just pushed")
    }

    /// Index of the node called `name`.
    pub fn node_by_name(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Indices of the HCAs, in node order.
    pub fn hcas(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.kind == NodeKind::Hca)
            .map(|(i, _)| i)
    }

    /// Indices of the switches, in node order.
    pub fn switches(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.kind == NodeKind::Switch)
            .map(|(i, _)| i)
    }

    /// Checks names, port numbers and that no port is cabled twice.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let mut names = std::collections::HashSet::new();
        for n in &self.nodes {
            if !names.insert(n.name.as_str()) {
                return Err(TopologyError::DuplicateName(n.name.clone()));
            }
        }
        let mut used = std::collections::HashSet::new();
        for l in &self.links {
            for end in [l.a, l.b] {
                let node = self
                    .nodes
                    .get(end.node)
                    .ok_or(TopologyError::NoSuchNode(end.node))?;
                if end.port == 0 || end.port > node.ports {
                    return Err(TopologyError::NoSuchPort {
                        node: node.name.clone(),
                        ports: node.ports,
                        port: end.port,
                    });
                }
                if !used.insert(end) {
                    return Err(TopologyError::PortReused {
                        node: node.name.clone(),
                        port: end.port,
                    });
                }
            }
        }
        Ok(())
    }

    /// Two HCAs cabled port 1 to port 1.
    pub fn back_to_back() -> Self {
        let mut t = Topology::new();
        let a = t.add_node("h0", NodeKind::Hca, 1);
        let b = t.add_node("h1", NodeKind::Hca, 1);
        t.connect(a, 1, b, 1);
        t
    }

    /// `hosts` HCAs on one switch of `ports` ports (host i on port i+1).
    pub fn single_switch(hosts: usize, ports: u8) -> Result<Self, TopologyError> {
        if hosts > ports as usize {
            return Err(TopologyError::Shape(format!(
                "{hosts} hosts do not fit a {ports}-port switch"
            )));
        }
        let mut t = Topology::new();
        let sw = t.add_node("sw0", NodeKind::Switch, ports);
        for i in 0..hosts {
            let h = t.add_node(format!("h{i}"), NodeKind::Hca, 1);
            t.connect(h, 1, sw, i as u8 + 1);
        }
        Ok(t)
    }

    /// A two-level fat tree of `k`-port switches: `k/2` spines and up to `k` leaves, each
    /// leaf with `k/2` hosts on ports 1..=k/2 and one uplink to every spine on ports
    /// k/2+1..=k. Full size is k^2/2 hosts (648 for k = 36); fewer hosts use fewer leaves.
    pub fn fat_tree_2(k: u8, hosts: usize) -> Result<Self, TopologyError> {
        if k < 2 || k % 2 != 0 {
            return Err(TopologyError::Shape(format!(
                "switch radix {k} must be even and at least 2"
            )));
        }
        let half = k as usize / 2;
        let max = k as usize * half;
        if hosts == 0 || hosts > max {
            return Err(TopologyError::Shape(format!(
                "a two-level fat tree of {k}-port switches holds 1..={max} hosts, not {hosts}"
            )));
        }
        let leaves = hosts.div_ceil(half);
        let mut t = Topology::new();
        let mut hcas = Vec::with_capacity(hosts);
        for i in 0..hosts {
            hcas.push(t.add_node(format!("h{i}"), NodeKind::Hca, 1));
        }
        let leaf: Vec<usize> = (0..leaves)
            .map(|l| t.add_node(format!("leaf{l}"), NodeKind::Switch, k))
            .collect();
        let spine: Vec<usize> = (0..half)
            .map(|s| t.add_node(format!("spine{s}"), NodeKind::Switch, k))
            .collect();
        for (i, &h) in hcas.iter().enumerate() {
            t.connect(h, 1, leaf[i / half], (i % half) as u8 + 1);
        }
        for (l, &lf) in leaf.iter().enumerate() {
            for (s, &sp) in spine.iter().enumerate() {
                t.connect(lf, (half + s) as u8 + 1, sp, l as u8 + 1);
            }
        }
        Ok(t)
    }

    /// A three-level fat tree of `k`-port switches (k pods of k/2 leaves and k/2
    /// aggregation switches, (k/2)^2 cores): k^3/4 hosts, 3456 for k = 24.
    #[allow(clippy::needless_range_loop)] // indices are pod, leaf and port numbers at once
    pub fn fat_tree_3(k: u8) -> Result<Self, TopologyError> {
        if k < 2 || k % 2 != 0 {
            return Err(TopologyError::Shape(format!(
                "switch radix {k} must be even and at least 2"
            )));
        }
        let k = k as usize;
        let half = k / 2;
        let mut t = Topology::new();
        let hosts = k * half * half;
        let hcas: Vec<usize> = (0..hosts)
            .map(|i| t.add_node(format!("h{i}"), NodeKind::Hca, 1))
            .collect();
        let mut leaf = Vec::with_capacity(k);
        let mut agg = Vec::with_capacity(k);
        for p in 0..k {
            leaf.push(
                (0..half)
                    .map(|i| t.add_node(format!("p{p}-leaf{i}"), NodeKind::Switch, k as u8))
                    .collect::<Vec<_>>(),
            );
            agg.push(
                (0..half)
                    .map(|i| t.add_node(format!("p{p}-agg{i}"), NodeKind::Switch, k as u8))
                    .collect::<Vec<_>>(),
            );
        }
        let core: Vec<usize> = (0..half * half)
            .map(|c| t.add_node(format!("core{c}"), NodeKind::Switch, k as u8))
            .collect();
        for (i, &h) in hcas.iter().enumerate() {
            let p = i / (half * half);
            let l = (i / half) % half;
            t.connect(h, 1, leaf[p][l], (i % half) as u8 + 1);
        }
        for p in 0..k {
            for l in 0..half {
                for a in 0..half {
                    t.connect(leaf[p][l], (half + a + 1) as u8, agg[p][a], l as u8 + 1);
                }
            }
            for a in 0..half {
                for c in 0..half {
                    t.connect(
                        agg[p][a],
                        (half + c + 1) as u8,
                        core[a * half + c],
                        p as u8 + 1,
                    );
                }
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_produce_valid_full_size_trees() {
        let t = Topology::fat_tree_2(36, 648).unwrap();
        t.validate().unwrap();
        assert_eq!(t.hcas().count(), 648);
        assert_eq!(t.switches().count(), 36 + 18);
        assert_eq!(t.links.len(), 648 + 36 * 18);
        let t = Topology::fat_tree_3(24).unwrap();
        t.validate().unwrap();
        assert_eq!(t.hcas().count(), 3456);
        assert_eq!(t.switches().count(), 24 * 24 + 144);
        assert_eq!(t.links.len(), 3456 + 24 * 12 * 12 * 2);
        let t = Topology::single_switch(8, 36).unwrap();
        t.validate().unwrap();
        Topology::back_to_back().validate().unwrap();
    }

    #[test]
    fn bad_shapes_and_cabling_are_reported() {
        assert!(Topology::single_switch(37, 36).is_err());
        assert!(Topology::fat_tree_2(36, 649).is_err());
        assert!(Topology::fat_tree_3(7).is_err());
        let mut t = Topology::back_to_back();
        t.connect(0, 1, 1, 1);
        assert_eq!(
            t.validate(),
            Err(TopologyError::PortReused {
                node: "h0".into(),
                port: 1
            })
        );
        let mut t = Topology::new();
        let a = t.add_node("a", NodeKind::Hca, 1);
        let b = t.add_node("b", NodeKind::Hca, 1);
        t.connect(a, 2, b, 1);
        assert!(matches!(
            t.validate(),
            Err(TopologyError::NoSuchPort { .. })
        ));
    }
}
