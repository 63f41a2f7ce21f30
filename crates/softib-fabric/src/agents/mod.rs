//! The nodes' management agents (IBA vol. 1 ch. 13-16): the subnet management agent of every
//! node ([`sma`]), the performance management agent ([`pma`]) and the delivery of a MAD to
//! the node it is for ([`delivery`]: directed-route and LID-routed SMPs, LID-routed GMPs).
//!
//! The agents answer against a [`Subnet`]: a snapshot of the fabric taken at one simulated
//! instant (topology, LIDs, forwarding tables, link widths and speeds, port states, QoS
//! tables and port counters). A MAD does not travel the simulated fabric on VL15: it is
//! answered against the snapshot at once (see docs/design/management.md). An SM's Sets
//! (PortInfo, SwitchInfo, LFT, SL2VL, VLArb and P_Key blocks) change the snapshot, so an SM
//! sees what it wrote; the congestion control agent's Sets ([`cca`]) change the nodes'
//! settings ([`crate::cc_state`]) the same way. A fabric waiting for an external SM starts
//! [`Subnet::unconfigured`]; once the SM has brought every port up, [`Subnet::program`] is what the data plane takes
//! ([`crate::fabric::Fabric::program_subnet`]).
//!
//! A topology imported from a real fabric (`ibnetdiscover`) carries its nodes' GUIDs
//! ([`crate::topology::NodeGuids`]) and the agents answer with those. Otherwise they are
//! derived from the topology ([`node_guid`]): node `i` (its index in the topology) has node
//! GUID `GUID_BASE | (i + 1) << 8`; an HCA's port `p` has port GUID `node GUID | p`; a
//! switch has one port GUID (port 0's) equal to its node GUID; the system image GUID is the
//! node GUID. The same topology always gets the same GUIDs. [`Subnet::node_guid`] and
//! [`Subnet::port_guid`] give whichever applies.
#![forbid(unsafe_code)]

pub mod cca;
pub mod delivery;
pub mod mad;
pub mod pma;
pub mod sma;

use crate::counters::PortCounters;
use crate::fabric::Fabric;
use crate::link::LinkRate;
use crate::qos::{no_qos, PortClass, PortQos, Sl2Vl};
use crate::routing::{peers, Addressing};
use crate::time::Picos;
use crate::topology::{NodeKind, PortAddr, Topology};
use crate::vlarb::VlArbConfig;

/// The upper bits of every GUID softib assigns (company ID 0x5EF1B0, which no HCA vendor
/// uses, so tools never take a simulated node for a vendor's and ask for vendor attributes).
pub const GUID_BASE: u64 = 0x5EF1_B000_0000_0000;

/// VendorID in NodeInfo (24 bits): the company ID of [`GUID_BASE`].
pub const VENDOR_ID: u32 = 0x5E_F1B0;

/// The node GUID of topology node `index`.
pub fn node_guid(index: usize) -> u64 {
    GUID_BASE | ((index as u64 + 1) << 8)
}

/// The port GUID of port `port` of node `index` of kind `kind` (a switch has one, port 0's).
pub fn port_guid(index: usize, kind: NodeKind, port: u8) -> u64 {
    match kind {
        NodeKind::Switch => node_guid(index),
        NodeKind::Hca => node_guid(index) | port as u64,
    }
}

/// The P_Key block a port powers up with: the default partition, full member (IBA
/// §10.9.1.2), then empty entries.
pub fn default_pkeys() -> [u16; 32] {
    let mut k = [0u16; 32];
    k[0] = 0xFFFF;
    k
}

/// What the agents know of one port at the snapshot's instant.
#[derive(Clone, Debug)]
pub struct PortView {
    /// The port at the other end of the cable.
    pub peer: Option<PortAddr>,
    /// The cable is up.
    pub link_up: bool,
    /// Width and speed of the cable (the fabric's default on an uncabled port).
    pub rate: LinkRate,
    /// Operational data VLs.
    pub op_vls: u8,
    /// Counters as of the snapshot.
    pub counters: PortCounters,
    /// LID (HCA ports; for a switch, the switch's LID on every port).
    pub lid: u16,
    /// PortState of a port whose link is up (IBA §14.2.5.6: 2 Init, 3 Armed, 4 Active); a
    /// port whose link is down reads Down whatever this says.
    pub state: u8,
    /// The data VLs the port supports (VLCap, as a count).
    pub vl_cap: u8,
    /// NeighborMTU (IBA §14.2.5.6 encoding: 1 = 256 .. 5 = 4096).
    pub neighbor_mtu: u8,
    /// VL arbitration of the port's output (VLArbitrationTable and VLHighLimit).
    pub vlarb: VlArbConfig,
    /// The first P_Key block (IBA §14.2.5.7).
    pub pkeys: [u16; 32],
    /// An SM runs behind this port (CapabilityMask IsSM, set by a client's SET_ISSM).
    pub is_sm: bool,
}

/// A node as its agents see it.
#[derive(Clone, Debug)]
pub struct NodeView {
    /// Name in the topology (the NodeDescription).
    pub name: String,
    /// HCA or switch.
    pub kind: NodeKind,
    /// `ports[p]` for p in 1..=N; index 0 is the switch's management port (a copy of port
    /// 1's fields with the switch LID, unused for HCAs).
    pub ports: Vec<PortView>,
    /// Linear forwarding table (switches), indexed by DLID.
    pub lft: Vec<u8>,
    /// SwitchInfo LinearFDBTop (switches): the highest LID the table holds.
    pub linear_fdb_top: u16,
    /// SL2VLMappingTable of every (input, output) pair, at `in * ports.len() + out`; a CA
    /// port `p` has its table at `p` (input 0).
    pub sl2vl: Vec<Sl2Vl>,
}

impl NodeView {
    /// The SL2VL table from input port `input` to output port `output`.
    pub fn sl2vl(&self, input: u8, output: u8) -> &Sl2Vl {
        &self.sl2vl[input as usize * self.ports.len() + output as usize]
    }

    /// The SL2VL table from `input` to `output`, to change.
    pub fn sl2vl_mut(&mut self, input: u8, output: u8) -> &mut Sl2Vl {
        let n = self.ports.len();
        &mut self.sl2vl[input as usize * n + output as usize]
    }
}

/// The fabric's management state at one instant: what every agent answers from.
#[derive(Clone, Debug)]
pub struct Subnet {
    /// The topology.
    pub topology: Topology,
    /// Nodes, in topology order.
    pub nodes: Vec<NodeView>,
    /// Owner of each LID.
    pub addressing: Addressing,
    /// The VL capability of every port (VLCap).
    pub vl_cap: u8,
    /// QoS settings per port class, as the fabric applies them.
    pub qos: [PortQos; 3],
    /// The tick of PortXmitWait, picoseconds.
    pub xmit_wait_tick_ps: Picos,
    /// The instant of the snapshot.
    pub at: Picos,
    /// MasterSMLID an SM set in PortInfo (`None`: the first HCA's LID).
    pub sm_lid: Option<u16>,
    /// The congestion control the fabric runs with (the scenario's OpenSM keys), for the
    /// congestion control agent ([`cca`]); `None`: none configured.
    pub cc: Option<crate::cc_switch::OpensmCc>,
    /// The congestion control settings of every node's agent, in topology order: what the
    /// data plane runs with, and what an SM's Sets change ([`cca`]).
    pub cc_nodes: Vec<crate::cc_state::NodeCc>,
    /// The fabric waits for an external SM ([`Subnet::unconfigured`]): MasterSMLID is what
    /// the SM set (0 until then), not the first HCA's LID.
    pub external_sm: bool,
    /// The HCA the external SM runs on (the scenario's `sm_host`): a client that names no
    /// node attaches there.
    pub sm_host: Option<usize>,
}

impl Subnet {
    /// Takes the snapshot of `fabric` as of its current time.
    pub fn snapshot(fabric: &Fabric) -> Self {
        let topo = fabric.topology().clone();
        let cfg = fabric.config();
        let addressing = Addressing::assign(&topo);
        let peer = peers(&topo);
        let mut nodes = Vec::with_capacity(topo.nodes.len());
        for (i, n) in topo.nodes.iter().enumerate() {
            let mut ports = Vec::with_capacity(n.ports as usize + 1);
            for p in 0..=n.ports {
                let phys = p.max(1);
                let lid = match n.kind {
                    NodeKind::Switch => addressing.switch_lid[i],
                    NodeKind::Hca => addressing.port_lid[i][phys as usize],
                };
                ports.push(PortView {
                    peer: if p == 0 { None } else { peer[i][p as usize] },
                    link_up: if p == 0 {
                        true
                    } else {
                        fabric.port_link_up(&n.name, p).unwrap_or(false)
                    },
                    rate: fabric.port_rate(&n.name, phys).unwrap_or(cfg.link_rate),
                    op_vls: fabric.operational_vls(&n.name, phys).unwrap_or(1),
                    counters: if p == 0 {
                        PortCounters::default()
                    } else {
                        fabric.port_counters(&n.name, p).unwrap_or_default()
                    },
                    lid,
                    state: 4,
                    vl_cap: cfg.vl_cap,
                    neighbor_mtu: 5,
                    vlarb: VlArbConfig::single_vl(),
                    pkeys: default_pkeys(),
                    is_sm: false,
                });
            }
            let lft = match n.kind {
                NodeKind::Switch => fabric.lft(&n.name).map(<[u8]>::to_vec).unwrap_or_default(),
                NodeKind::Hca => Vec::new(),
            };
            let np = ports.len();
            nodes.push(NodeView {
                name: n.name.clone(),
                kind: n.kind,
                ports,
                linear_fdb_top: lft.len().saturating_sub(1) as u16,
                lft,
                sl2vl: vec![Sl2Vl::ALL_VL0; np * np],
            });
        }
        let qos = match &cfg.qos {
            Some(q) => [
                q.resolve(PortClass::Ca),
                q.resolve(PortClass::Sw0),
                q.resolve(PortClass::Swe),
            ],
            None => [no_qos(), no_qos(), no_qos()],
        };
        let mut subnet = Subnet {
            topology: topo,
            nodes,
            addressing,
            vl_cap: cfg.vl_cap,
            qos,
            xmit_wait_tick_ps: cfg.xmit_wait_tick_ps,
            at: fabric.now(),
            sm_lid: None,
            cc: fabric.ca_congestion_control().cloned(),
            cc_nodes: fabric.cc_settings(),
            external_sm: false,
            sm_host: None,
        };
        // The QoS tables the fabric runs with, per port (the port class's).
        for i in 0..subnet.nodes.len() {
            for p in 0..subnet.nodes[i].ports.len() {
                let q = subnet.port_qos(i, p as u8).clone();
                let n = &mut subnet.nodes[i];
                n.ports[p].vlarb = q.vlarb;
                for input in 0..n.ports.len() {
                    *n.sl2vl_mut(input as u8, p as u8) = q.sl2vl;
                }
            }
        }
        subnet
    }

    /// The fabric as it powers up for an external subnet manager (IBA §7.2, §14.2.5.6):
    /// every port whose cable is up is in Init with LID 0, switches have empty forwarding
    /// tables, no MasterSMLID. VLCap is the data VLs the simulated port runs (so an SM
    /// cannot enable VLs the data plane lacks) and OperationalVLs starts at VL0 only. The
    /// SL2VL and VL arbitration tables start as the scenario's `[qos]` gives them (one data
    /// VL without it) until the SM writes its own.
    pub fn unconfigured(fabric: &Fabric) -> Self {
        let mut s = Self::snapshot(fabric);
        s.external_sm = true;
        s.sm_lid = Some(0);
        s.addressing.owners = vec![None];
        for row in &mut s.addressing.port_lid {
            row.fill(0);
        }
        s.addressing.switch_lid.fill(0);
        for n in &mut s.nodes {
            for pv in &mut n.ports {
                pv.lid = 0;
                pv.state = 2;
                pv.vl_cap = pv.op_vls;
                pv.op_vls = 1;
            }
            n.lft.clear();
            n.linear_fdb_top = 0;
        }
        // No SM has configured congestion control yet (A10.4.3: power-on settings).
        s.cc_nodes = (s.topology.nodes.iter())
            .map(|n| crate::cc_state::NodeCc::power_on(n.kind, n.ports))
            .collect();
        s
    }

    /// Every port with a cable up (switch port 0 aside) is Active: the SM has brought the
    /// subnet up and data may flow (IBA §7.2: a port forwards data packets only in Active).
    pub fn all_active(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.ports
                .iter()
                .enumerate()
                .skip(1)
                .all(|(_, p)| !(p.link_up && p.peer.is_some()) || p.state == 4)
        })
    }

    /// Ports whose cable is up but which are not Active, as `NODE:PORT` (at most `max`).
    pub fn inactive_ports(&self, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        for n in &self.nodes {
            for (p, pv) in n.ports.iter().enumerate().skip(1) {
                if pv.link_up && pv.peer.is_some() && pv.state != 4 && out.len() < max {
                    out.push(format!("{}:{p}", n.name));
                }
            }
        }
        out
    }

    /// What the SM programmed, for the data plane ([`Fabric::program_subnet`]).
    pub fn program(&self) -> crate::fabric::SubnetProgram {
        crate::fabric::SubnetProgram {
            addressing: self.addressing.clone(),
            lfts: self.nodes.iter().map(|n| n.lft.clone()).collect(),
            sl2vl: self.nodes.iter().map(|n| n.sl2vl.clone()).collect(),
            vlarb: self
                .nodes
                .iter()
                .map(|n| n.ports.iter().map(|p| p.vlarb.clone()).collect())
                .collect(),
            op_vls: self
                .nodes
                .iter()
                .map(|n| n.ports.iter().map(|p| p.op_vls).collect())
                .collect(),
            cc: self.cc_nodes.clone(),
        }
    }

    /// Keeps what an SM configured (LIDs, states, tables, MasterSMLID, IsSM) from `sm` in
    /// this newer snapshot of the same fabric, whose counters and links are current.
    pub fn keep_configuration(&mut self, sm: &Subnet) {
        self.addressing = sm.addressing.clone();
        self.sm_lid = sm.sm_lid;
        self.external_sm = sm.external_sm;
        self.sm_host = sm.sm_host;
        self.cc_nodes = sm.cc_nodes.clone();
        for (n, old) in self.nodes.iter_mut().zip(&sm.nodes) {
            n.lft = old.lft.clone();
            n.linear_fdb_top = old.linear_fdb_top;
            n.sl2vl = old.sl2vl.clone();
            for (p, o) in n.ports.iter_mut().zip(&old.ports) {
                p.lid = o.lid;
                p.state = o.state;
                p.vl_cap = o.vl_cap;
                p.op_vls = o.op_vls;
                p.neighbor_mtu = o.neighbor_mtu;
                p.vlarb = o.vlarb.clone();
                p.pkeys = o.pkeys;
                p.is_sm = o.is_sm;
            }
        }
    }

    /// The node whose NodeDescription is `desc`, or whose node GUID (or a port GUID) is
    /// `desc` as hexadecimal (with or without `0x`).
    pub fn find_node(&self, desc: &str) -> Option<usize> {
        if let Some(i) = self.nodes.iter().position(|n| n.name == desc) {
            return Some(i);
        }
        let hex = desc.trim_start_matches("0x").trim_start_matches("0X");
        let guid = u64::from_str_radix(hex, 16).ok()?;
        self.nodes.iter().enumerate().find_map(|(i, n)| {
            let ports = match n.kind {
                NodeKind::Switch => 0..=0,
                NodeKind::Hca => 1..=n.ports.len().saturating_sub(1) as u8,
            };
            (self.node_guid(i) == guid || ports.into_iter().any(|p| self.port_guid(i, p) == guid))
                .then_some(i)
        })
    }

    /// The NodeGUID of node `node`: the imported one, else the derived [`node_guid`].
    pub fn node_guid(&self, node: usize) -> u64 {
        match &self.topology.nodes[node].guids {
            Some(g) => g.node,
            None => node_guid(node),
        }
    }

    /// The SystemImageGUID of node `node` (the NodeGUID unless imported).
    pub fn system_image_guid(&self, node: usize) -> u64 {
        match &self.topology.nodes[node].guids {
            Some(g) => g.system_image,
            None => node_guid(node),
        }
    }

    /// The PortGUID of port `port` of node `node` (a switch's is port 0's on every port).
    pub fn port_guid(&self, node: usize, port: u8) -> u64 {
        let n = &self.topology.nodes[node];
        match &n.guids {
            Some(g) => g.port(n.kind, port),
            None => port_guid(node, n.kind, port),
        }
    }

    /// The node a client attaches to when it names none: the external SM's host when the
    /// scenario names one, else the first HCA (ibsim's default is the first node of its
    /// file; a tool is normally run on a host).
    pub fn default_node(&self) -> Option<usize> {
        if self.sm_host.is_some() {
            return self.sm_host;
        }
        self.nodes.iter().position(|n| n.kind == NodeKind::Hca)
    }

    /// Gives port `port` of node `node` LID `lid` (an SM's PortInfo Set): the LID-routing
    /// view follows; on a switch the LID is port 0's and so every port's.
    pub fn set_lid(&mut self, node: usize, port: u8, lid: u16) {
        use crate::routing::LidOwner;
        let n = &mut self.nodes[node];
        let (owner, ports): (LidOwner, Vec<usize>) = match n.kind {
            NodeKind::Switch => (LidOwner::Switch(node), (0..n.ports.len()).collect()),
            NodeKind::Hca => (
                LidOwner::HcaPort(PortAddr { node, port }),
                vec![port as usize],
            ),
        };
        let old = n.ports[ports[0]].lid;
        for p in ports {
            n.ports[p].lid = lid;
        }
        let owners = &mut self.addressing.owners;
        if owners.get(old as usize).copied().flatten() == Some(owner) {
            owners[old as usize] = None;
        }
        if lid != 0 && lid < 0xC000 {
            if owners.len() <= lid as usize {
                owners.resize(lid as usize + 1, None);
            }
            owners[lid as usize] = Some(owner);
        }
        match owner {
            LidOwner::Switch(i) => self.addressing.switch_lid[i] = lid,
            LidOwner::HcaPort(p) => self.addressing.port_lid[p.node][p.port as usize] = lid,
        }
    }

    /// Declares (or withdraws) an SM behind port `at` (a client's SET_ISSM): its PortInfo
    /// CapabilityMask has IsSM set. A switch's SM sits behind port 0.
    pub fn set_is_sm(&mut self, at: PortAddr, on: bool) {
        if let Some(p) = self
            .nodes
            .get_mut(at.node)
            .and_then(|n| n.ports.get_mut(at.port as usize))
        {
            p.is_sm = on;
        }
    }

    /// The SM's port: the one a client running an SM declared (SET_ISSM), else the first
    /// HCA's port 1.
    pub fn sm_port(&self) -> Option<PortAddr> {
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(p) = n.ports.iter().position(|p| p.is_sm) {
                return Some(PortAddr {
                    node: i,
                    port: p as u8,
                });
            }
        }
        self.default_node().map(|node| PortAddr { node, port: 1 })
    }

    /// The QoS settings of port `port` of node `node`.
    pub fn port_qos(&self, node: usize, port: u8) -> &PortQos {
        match (self.nodes[node].kind, port) {
            (NodeKind::Hca, _) => &self.qos[0],
            (NodeKind::Switch, 0) => &self.qos[1],
            (NodeKind::Switch, _) => &self.qos[2],
        }
    }
}
