//! The simulator: ports, switches and HCAs wired by a [`Topology`], driven by one event queue.
//!
//! Per hop a data packet costs about two events: its arrival at the next port (for a switch,
//! at the moment it becomes eligible for forwarding: head or tail arrival plus the switch
//! latency) and the transmit completion of the output that sends it on, into which the
//! release of the input buffer is usually folded. The receiver's credit accounting and the
//! switch's routing happen when the packet starts on the upstream link (`transmit_to`); the
//! flow-control packet that returns the credits is applied lazily at the upstream port
//! (`Port::apply_fc`). See `docs/design/fabric.md` for why each shortcut is exact.
//!
//! Switch model (IBA 18.2): an input-queued switch. Each input port keeps one FIFO per VL, the
//! receive buffer that link credits protect. Only the head packet of a FIFO is routed (LFT on
//! the DLID, SL2VL of the (in, out) pair for the output VL) and requests its output: a head
//! blocked on a congested output blocks the packets behind it, the head-of-line blocking that
//! credit back-pressure spreads through an IB fabric. An output port serves the inputs
//! requesting a VL round-robin by port number, VLs by its VL arbiter, and only when the
//! downstream receiver has credits for the whole packet. The crossbar moves a packet from its input at the output's
//! rate times the speed-up; an input feeds one transfer at a time. The input buffer is freed
//! when the packet has crossed the crossbar (and, cut-through, has fully arrived).
//!
//! The work is split by job: `build` constructs the fabric, `event_loop` runs it,
//! `transmit` is an output port's decision of what to send, `crossbar` a switch's input
//! side, `link_state` cables going down and up. This module holds the state they share
//! and the public surface: build a [`Fabric`] from a [`Topology`] and a [`FabricConfig`],
//! [`Fabric::attach`] endpoints, [`Fabric::run_until`] a time, read ports and counters.

mod build;
mod cross;
mod cross_codec;
mod crossbar;
mod event_loop;
mod kicks;
mod link_state;
mod partition;
mod program;
mod transmit;
mod wire;

pub(crate) use cross::Cross;
pub use cross_codec::CodecError;
pub use partition::Partitioning;

pub use program::SubnetProgram;

use crate::congestion::CongestionMarker;
use crate::counters::PortCounters;
use crate::event::EventQueue;
use crate::hca::Endpoint;
use crate::link::{LinkRate, LinkSpeed, LinkWidth};
use crate::packet::{PacketId, PacketPool};
use crate::port::{Port, DATA_VLS, NO_PEER};
use crate::qos::{QosOptions, Sl2Vl};
use crate::routing::{Addressing, RoutingEngine};
use crate::time::Picos;
use crate::topology::{NodeKind, PortAddr, Topology, TopologyError};
use std::collections::HashMap;

/// Bytes of the LRH, after which a cut-through switch can route a packet.
const LRH_BYTES: u64 = softib_wire::lrh::LRH_LEN as u64;

/// How a switch forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Forwarding {
    /// Forward as soon as the LRH has arrived (and the output cannot outrun the input).
    CutThrough,
    /// Forward once the whole packet has arrived.
    StoreAndForward,
}

/// Fabric-wide settings; per-link values in the topology override the link defaults.
#[derive(Clone, Debug)]
pub struct FabricConfig {
    /// Rate of links that do not set one.
    pub link_rate: LinkRate,
    /// Propagation delay of links that do not set one.
    pub link_delay_ps: Picos,
    /// Receive buffer per data VL in bytes, set at link bring-up.
    pub rx_buffer_bytes: u32,
    /// VL15 receive buffer in packets.
    pub vl15_buffer_packets: u32,
    /// Data VLs the ports support (VLCap); the operational count is the smaller of this, the
    /// QoS `max_vls` of both ends.
    pub vl_cap: u8,
    /// QoS settings in OpenSM's vocabulary; `None` = one data VL, every SL on VL0.
    pub qos: Option<QosOptions>,
    /// Switch forwarding mode.
    pub forwarding: Forwarding,
    /// Crossbar speed-up in thousandths (1000 = the output's line rate).
    pub crossbar_speedup_permille: u32,
    /// Fixed switch pipeline latency from arrival (head or tail) to eligibility.
    pub switch_latency_ps: Picos,
    /// Flow-control refresh period in symbol times (IBA 7.9.4.2: at most 65,536).
    pub fc_period_symbols: u64,
    /// PortXmitWait tick.
    pub xmit_wait_tick_ps: Picos,
    /// Depth of each per-VL HCA send queue, in packets.
    pub hca_send_queue_packets: usize,
    /// Counter sampling interval (`None`: no time series).
    pub sample_interval_ps: Option<Picos>,
    /// How the subnet manager breaks ties among shortest paths.
    pub routing: RoutingEngine,
    /// Bit error rate of cables that do not set one (0: error-free).
    pub bit_error_rate: f64,
    /// Seed of every random stream of the fabric (bit errors, and later marking).
    pub seed: u64,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            link_rate: LinkRate::new(LinkWidth::X4, LinkSpeed::Edr),
            link_delay_ps: 10_000, // 2 m of cable
            rx_buffer_bytes: 64 * 1024,
            vl15_buffer_packets: 2,
            vl_cap: 8,
            qos: None,
            forwarding: Forwarding::CutThrough,
            crossbar_speedup_permille: 1000,
            switch_latency_ps: 100_000,
            fc_period_symbols: 65_536,
            xmit_wait_tick_ps: 1_000,
            hca_send_queue_packets: 4,
            sample_interval_ps: None,
            routing: RoutingEngine::MinHop,
            bit_error_rate: 0.0,
            seed: 0,
        }
    }
}

/// Why a fabric could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The topology is inconsistent.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A setting is out of range.
    #[error("invalid fabric setting {key}: {reason}")]
    Setting {
        /// The setting.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    TxDone(u32),
    Arrive(u32, PacketId),
    /// A port blocked on credits: a flow-control packet for it arrives now.
    FcWake(u32),
    LinkState {
        port: u32,
        up: bool,
    },
    Release {
        port: u32,
        vl: u8,
        blocks: u16,
    },
    FcRefresh(u32),
    XbarRetry(u32),
    HcaWake(u32),
    Sample,
}

struct Switch {
    first_port: u32,
    nports: u8,
    lft: Vec<u8>,
    /// SL2VL per (in, out): index in * (nports + 1) + out.
    sl2vl: Vec<Sl2Vl>,
    /// The table every (in, out) pair has, while they are all the same: routing then reads
    /// no per-pair entry (on a 24-port switch the pairs' tables are 10 KB of cold memory).
    uniform_sl2vl: Option<Sl2Vl>,
    /// Operational data VLs of each port by number, 0 for an uncabled one: routing decides
    /// without touching the output port's state, which the next events reach much later.
    out_vls: Vec<u8>,
}

struct Hca {
    port: u32,
    lid: u16,
    endpoint: Option<Box<dyn Endpoint>>,
    wake_at: Picos,
}

/// One row of the counter time series.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CounterSample {
    /// Sample time.
    pub time: Picos,
    /// Node index.
    pub node: u32,
    /// Port number.
    pub port: u8,
    /// Counters at that time.
    pub counters: PortCounters,
    /// Receive-buffer blocks in use, all data VLs.
    pub rx_blocks_used: u32,
}

/// A simulated fabric.
pub struct Fabric {
    config: FabricConfig,
    topo: Topology,
    /// Node index by name: lookups by name (`lid`, `attach`, counters) are per host, so a
    /// scan of the node list would make setting up N hosts quadratic.
    node_index: HashMap<String, usize>,
    addr: Addressing,
    now: Picos,
    queue: EventQueue<Event>,
    pool: PacketPool,
    ports: Vec<Port>,
    node_first_port: Vec<u32>,
    switches: Vec<Switch>,
    hcas: Vec<Hca>,
    kicks: kicks::Kicks,
    /// Per entity (0: the fabric, node n: n + 1), how many events it has scheduled: the
    /// count in the [`Tie`] of its next event.
    scheduled_by: Vec<u64>,
    /// The entity whose state the running code changes, and so schedules as.
    current: u32,
    /// The key of the event being handled plus one (0 while starting): with `current`, the
    /// [`crate::event::EventOrder`] of what taps and endpoints record.
    event_key: u128,
    /// This fabric's share of a partitioned run (`None`: it runs every node).
    part: Option<Box<cross::PartitionState>>,
    started: bool,
    events: u64,
    samples: Vec<CounterSample>,
    delivered: u64,
    marker: Option<Box<dyn CongestionMarker>>,
    /// The congestion-control setting the subnet manager pushes to the CAs, for the engine
    /// HCAs attached later (`None`: CC off at the CAs).
    ca_cc: Option<crate::cc_switch::OpensmCc>,
    /// The CC settings an SM wrote into the nodes' agents, per node (`None`: every node
    /// runs `ca_cc` and the marker's uniform setting, or is at power-on).
    cc_nodes: Option<Vec<crate::cc_state::NodeCc>>,
    /// Port taps (`None`: nothing is watched, the common case costs one test per packet).
    tap: Option<Box<crate::tap::Taps>>,
}

impl Fabric {
    /// Current simulated time.
    pub fn now(&self) -> Picos {
        self.now
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The configuration.
    pub fn config(&self) -> &FabricConfig {
        &self.config
    }

    /// Index of the node called `name`.
    fn node_by_name(&self, name: &str) -> Option<usize> {
        self.node_index.get(name).copied()
    }

    /// LID of port 1 of the node called `name` (an HCA), or of the switch called `name`.
    pub fn lid(&self, name: &str) -> Option<u16> {
        let n = self.node_by_name(name)?;
        match self.topo.nodes[n].kind {
            NodeKind::Hca => Some(self.addr.lid_of(PortAddr { node: n, port: 1 })),
            NodeKind::Switch => Some(self.addr.switch_lid[n]),
        }
    }

    /// The linear forwarding table of the switch called `name`.
    pub fn lft(&self, name: &str) -> Option<&[u8]> {
        let n = self.node_by_name(name)?;
        let gp = self.node_first_port[n] as usize;
        let s = self.ports.get(gp)?.switch?;
        Some(&self.switches[s as usize].lft)
    }

    fn port_index(&self, name: &str, port: u8) -> Option<usize> {
        let n = self.node_by_name(name)?;
        if port == 0 || port > self.topo.nodes[n].ports {
            return None;
        }
        Some(self.node_first_port[n] as usize + port as usize - 1)
    }

    /// Hands every packet that crosses one of `ports` (node name, port number), in either
    /// direction, to `sink` (see [`crate::tap`]). Replaces earlier taps. Fails, naming the
    /// port, if a port does not exist or has no cable.
    pub fn set_tap(
        &mut self,
        ports: &[(String, u8)],
        sink: Box<dyn crate::tap::WireTap>,
    ) -> Result<(), BuildError> {
        let mut idx = Vec::with_capacity(ports.len());
        for (name, port) in ports {
            let i = self
                .port_index(name, *port)
                .ok_or_else(|| BuildError::Setting {
                    key: "pcap port",
                    reason: format!("`{name}` has no port {port}"),
                })?;
            if self.ports[i].peer == NO_PEER {
                return Err(BuildError::Setting {
                    key: "pcap port",
                    reason: format!("port {port} of `{name}` has no cable"),
                });
            }
            idx.push(i);
        }
        self.tap = Some(Box::new(crate::tap::Taps::new(
            self.ports.len(),
            &idx,
            sink,
        )));
        Ok(())
    }

    /// Counters of port `port` of node `name` as of now.
    pub fn port_counters(&self, name: &str, port: u8) -> Option<PortCounters> {
        let i = self.port_index(name, port)?;
        Some(self.ports[i].counters_at(self.now))
    }

    /// Whether the cable of port `port` of node `name` is up (false for an uncabled port).
    /// Read-only, for the management agents (`crate::agents`).
    pub fn port_link_up(&self, name: &str, port: u8) -> Option<bool> {
        let p = &self.ports[self.port_index(name, port)?];
        Some(p.peer != NO_PEER && p.link_up)
    }

    /// Operational data VLs of a port.
    pub fn operational_vls(&self, name: &str, port: u8) -> Option<u8> {
        Some(self.ports[self.port_index(name, port)?].op_vls)
    }

    /// Receive-buffer blocks in use on a data VL of a port.
    pub fn rx_blocks_used(&self, name: &str, port: u8, vl: u8) -> Option<u32> {
        let p = &self.ports[self.port_index(name, port)?];
        // Heads that have arrived by now count, whether or not the port has applied them yet.
        let due: u32 = p
            .wire_in
            .iter()
            .take_while(|w| w.at <= self.now)
            .filter(|w| w.epoch == p.epoch)
            .map(|w| match w.kind {
                crate::port::WireKind::Data { vl: v, blocks, .. } if v == vl => blocks as u32,
                _ => 0,
            })
            .sum();
        p.vls[..DATA_VLS]
            .get(vl as usize)
            .map(|v| v.rx.occupied() + due)
    }

    /// Sum of all ports' counters (errors, packets) as of now.
    pub fn total_counters(&self) -> PortCounters {
        let mut t = PortCounters::default();
        for p in &self.ports {
            let c = p.counters_at(self.now);
            t.port_xmit_pkts += c.port_xmit_pkts;
            t.port_rcv_pkts += c.port_rcv_pkts;
            t.port_xmit_data += c.port_xmit_data;
            t.port_rcv_data += c.port_rcv_data;
            t.xmit_wait_ps += c.xmit_wait_ps;
            t.fc_packets_sent += c.fc_packets_sent;
            t.fc_packets_rcvd += c.fc_packets_rcvd;
            t.fecn_marked += c.fecn_marked;
            t.port_rcv_errors += c.port_rcv_errors;
            t.port_rcv_switch_relay_errors += c.port_rcv_switch_relay_errors;
            t.port_xmit_discards += c.port_xmit_discards;
            t.excessive_buffer_overrun_errors += c.excessive_buffer_overrun_errors;
            t.vl15_dropped += c.vl15_dropped;
        }
        t
    }

    /// Events processed so far.
    pub fn events_processed(&self) -> u64 {
        self.events
    }

    /// Events currently scheduled.
    pub fn events_pending(&self) -> usize {
        self.queue.len()
    }

    /// Bytes held by the event queue.
    pub fn event_queue_bytes(&self) -> usize {
        self.queue.memory_bytes()
    }

    /// Data packets delivered to HCA endpoints so far.
    pub fn packets_delivered(&self) -> u64 {
        self.delivered
    }

    /// Packets currently held by the fabric (queued, on the wire or in buffers).
    pub fn packets_in_flight(&self) -> usize {
        self.pool.live()
    }

    /// Packet buffers allocated by the pool over the run (its memory footprint).
    pub fn packet_buffers(&self) -> usize {
        self.pool.slots()
    }

    /// The counter time series sampled so far.
    pub fn samples(&self) -> &[CounterSample] {
        &self.samples
    }

    // ----- commands -----

    /// Attaches the endpoint driving port 1 of HCA `name` (port `port` with
    /// [`Fabric::attach_port`]).
    pub fn attach(&mut self, name: &str, endpoint: Box<dyn Endpoint>) -> Result<(), BuildError> {
        self.attach_port(name, 1, endpoint)
    }

    /// Attaches the endpoint driving port `port` of HCA `name`.
    pub fn attach_port(
        &mut self,
        name: &str,
        port: u8,
        endpoint: Box<dyn Endpoint>,
    ) -> Result<(), BuildError> {
        let gp = self
            .port_index(name, port)
            .ok_or_else(|| BuildError::Setting {
                key: "endpoint",
                reason: format!("no port {port} on a node called `{name}`"),
            })?;
        let h = self.ports[gp].hca.ok_or_else(|| BuildError::Setting {
            key: "endpoint",
            reason: format!("`{name}` is a switch, endpoints attach to HCAs"),
        })?;
        self.hcas[h as usize].endpoint = Some(endpoint);
        if self.started && self.owns_node(self.ports[gp].node as usize) {
            self.current = self.entity_of_port(gp as u32);
            self.call_endpoint(h, |ep, tx| ep.on_transmit_ready(tx));
            self.drain_kicks();
        }
        Ok(())
    }

    /// The endpoint attached to port `port` of HCA `name`, as its concrete type (when the
    /// endpoint exposes itself through [`Endpoint::as_any_mut`]).
    pub fn endpoint_mut<T: 'static>(&mut self, name: &str, port: u8) -> Option<&mut T> {
        let gp = self.port_index(name, port)?;
        let h = self.ports[gp].hca?;
        self.hcas[h as usize]
            .endpoint
            .as_mut()?
            .as_any_mut()?
            .downcast_mut::<T>()
    }

    /// Installs the switches' congestion-marking policy (Annex A10; see
    /// [`crate::congestion`]).
    pub fn set_congestion_marker(&mut self, marker: Box<dyn CongestionMarker>) {
        self.marker = Some(marker);
    }

    /// Records the congestion-control setting of the CAs (OpenSM's `cc_ca_*` and `cc_cct`,
    /// IBA Annex A10 CACongestionSetting and CongestionControlTable), so that code attaching
    /// engine HCAs configures their devices with it ([`crate::cc_switch::OpensmCc::device_cc`]).
    pub fn set_ca_congestion_control(&mut self, cc: crate::cc_switch::OpensmCc) {
        self.ca_cc = Some(cc);
    }

    /// The CAs' congestion-control setting, if congestion control is on.
    pub fn ca_congestion_control(&self) -> Option<&crate::cc_switch::OpensmCc> {
        self.ca_cc.as_ref()
    }

    /// The congestion control setting of the CA `host` (what an SM wrote into its agent,
    /// else the fabric-wide [`Fabric::ca_congestion_control`]); `None`: CC off there.
    pub fn ca_congestion_control_of(&self, host: &str) -> Option<crate::cc_switch::OpensmCc> {
        use crate::cc_state::NodeCc;
        match &self.cc_nodes {
            None => self.ca_cc.clone(),
            Some(nodes) => {
                let i = self.topo.nodes.iter().position(|n| n.name == host)?;
                match &nodes[i] {
                    NodeCc::Ca(ca) if ca.active() => Some(ca.opensm()),
                    _ => None,
                }
            }
        }
    }

    /// The congestion control settings of every node, in topology order, as the data plane
    /// runs them: what an SM wrote ([`Fabric::program_subnet`]), else the scenario's
    /// uniform setting, else the power-on zeros.
    pub fn cc_settings(&self) -> Vec<crate::cc_state::NodeCc> {
        use crate::cc_state::NodeCc;
        if let Some(n) = &self.cc_nodes {
            return n.clone();
        }
        self.topo
            .nodes
            .iter()
            .map(|n| match &self.ca_cc {
                Some(cc) => NodeCc::from_opensm(cc, n.kind, n.ports),
                None => NodeCc::power_on(n.kind, n.ports),
            })
            .collect()
    }

    /// The link rate of port `port` of node `name`.
    pub fn port_rate(&self, name: &str, port: u8) -> Option<crate::link::LinkRate> {
        self.port_index(name, port).map(|i| self.ports[i].rate)
    }

    /// Blocks routed to output VL `vl` of switch port (`name`, `port`) and not yet sent.
    pub fn queued_blocks(&self, name: &str, port: u8, vl: u8) -> Option<u32> {
        let p = &self.ports[self.port_index(name, port)?];
        p.vls.get(vl as usize).map(|v| v.queued_blocks)
    }

    /// Sets the SL2VL table a switch uses from input port `in_port` to output `out_port`.
    pub fn set_switch_sl2vl(
        &mut self,
        name: &str,
        in_port: u8,
        out_port: u8,
        table: Sl2Vl,
    ) -> Result<(), BuildError> {
        let gp = self
            .port_index(name, 1)
            .ok_or_else(|| BuildError::Setting {
                key: "sl2vl",
                reason: format!("no switch called `{name}`"),
            })?;
        let s = self.ports[gp].switch.ok_or_else(|| BuildError::Setting {
            key: "sl2vl",
            reason: format!("`{name}` is not a switch"),
        })?;
        let sw = &mut self.switches[s as usize];
        if in_port > sw.nports || out_port > sw.nports {
            return Err(BuildError::Setting {
                key: "sl2vl",
                reason: format!("`{name}` has ports 0..={}", sw.nports),
            });
        }
        let n = sw.nports as usize + 1;
        sw.sl2vl[in_port as usize * n + out_port as usize] = table;
        if sw.uniform_sl2vl.is_some_and(|u| u != table) {
            sw.uniform_sl2vl = None;
        }
        Ok(())
    }
}

/// Number of data VLs a port can have.
pub const MAX_DATA_VLS: usize = DATA_VLS;
