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

use crate::congestion::{CongestionMarker, OutputState};
use crate::counters::{data_words, PortCounters};
use crate::credits::{FC_PACKET_BYTES, MAX_WINDOW};
use crate::event::EventQueue;
use crate::hca::{Endpoint, HcaTx};
use crate::link::{LinkRate, LinkSpeed, LinkWidth};
use crate::packet::{CrcState, PacketId, PacketPool, MAX_PACKET_BYTES};
use crate::port::{LinkErrors, Port, Source, DATA_VLS, NOT_WAITING, NO_PEER};
use crate::qos::{no_qos, PortClass, PortQos, QosOptions, Sl2Vl};
use crate::rng::{SeedTree, StreamKind};
use crate::routing::{compute_lfts_with, peers, Addressing, RoutingEngine, NO_ROUTE};
use crate::time::Picos;
use crate::topology::{NodeKind, PortAddr, Topology, TopologyError};
use crate::vlarb::{VlArbiter, VL15};

/// Bytes of the LRH, after which a cut-through switch can route a packet.
const LRH_BYTES: u64 = softib_wire::lrh::LRH_LEN as u64;
use std::collections::VecDeque;

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
enum Event {
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
#[derive(Clone, Debug, PartialEq, Eq)]
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
    addr: Addressing,
    now: Picos,
    queue: EventQueue<Event>,
    pool: PacketPool,
    ports: Vec<Port>,
    node_first_port: Vec<u32>,
    switches: Vec<Switch>,
    hcas: Vec<Hca>,
    kicks: VecDeque<u32>,
    started: bool,
    events: u64,
    samples: Vec<CounterSample>,
    delivered: u64,
    marker: Option<Box<dyn CongestionMarker>>,
    /// The congestion-control setting the subnet manager pushes to the CAs, for the engine
    /// HCAs attached later (`None`: CC off at the CAs).
    ca_cc: Option<crate::cc_switch::OpensmCc>,
    /// Port taps (`None`: nothing is watched, the common case costs one test per packet).
    tap: Option<Box<crate::tap::Taps>>,
}

impl Fabric {
    /// Builds the fabric: LIDs, forwarding tables, ports with their QoS and credits. Links
    /// come up at time 0 by exchanging flow-control packets.
    pub fn new(topo: Topology, config: FabricConfig) -> Result<Self, BuildError> {
        topo.validate()?;
        if config.crossbar_speedup_permille == 0 {
            return Err(BuildError::Setting {
                key: "crossbar_speedup",
                reason: "must be positive".into(),
            });
        }
        if !(1..=15).contains(&config.vl_cap) {
            return Err(BuildError::Setting {
                key: "vl_cap",
                reason: format!("{} data VLs: must be 1..=15", config.vl_cap),
            });
        }
        if config.fc_period_symbols == 0 || config.fc_period_symbols > 65_536 {
            return Err(BuildError::Setting {
                key: "fc_period_symbols",
                reason: "IBA 7.9.4.2 requires a flow-control packet at least every 65,536 symbol times (1..=65536)".into(),
            });
        }
        if !(0.0..1.0).contains(&config.bit_error_rate) {
            return Err(BuildError::Setting {
                key: "bit_error_rate",
                reason: format!("{} is not a probability below 1", config.bit_error_rate),
            });
        }
        if config.hca_send_queue_packets == 0 {
            return Err(BuildError::Setting {
                key: "hca_send_queue_packets",
                reason: "must be at least 1".into(),
            });
        }
        let addr = Addressing::assign(&topo);
        let lfts = compute_lfts_with(&topo, &addr, config.routing);
        let peers = peers(&topo);
        let qos_for = |kind: NodeKind| -> PortQos {
            match &config.qos {
                None => no_qos(),
                Some(q) => q.resolve(match kind {
                    NodeKind::Hca => PortClass::Ca,
                    NodeKind::Switch => PortClass::Swe,
                }),
            }
        };
        // Per-port link overrides.
        let mut link_of = std::collections::HashMap::new();
        for (i, l) in topo.links.iter().enumerate() {
            link_of.insert(l.a, (l, l.rx_buffer_a, 2 * i as u64));
            link_of.insert(l.b, (l, l.rx_buffer_b, 2 * i as u64 + 1));
        }
        let seeds = SeedTree::new(config.seed);
        let mut ports = Vec::new();
        let mut node_first_port = Vec::with_capacity(topo.nodes.len());
        let mut switches = Vec::new();
        let mut hcas = Vec::new();
        for (ni, node) in topo.nodes.iter().enumerate() {
            node_first_port.push(ports.len() as u32);
            let my_qos = qos_for(node.kind);
            for pn in 1..=node.ports {
                let at = PortAddr { node: ni, port: pn };
                let (rate, delay, rx_bytes, ber, stream) = match link_of.get(&at) {
                    Some((l, rx, stream)) => (
                        l.rate.unwrap_or(config.link_rate),
                        l.delay_ps.unwrap_or(config.link_delay_ps),
                        rx.unwrap_or(config.rx_buffer_bytes),
                        l.bit_error_rate.unwrap_or(config.bit_error_rate),
                        *stream,
                    ),
                    None => (
                        config.link_rate,
                        config.link_delay_ps,
                        config.rx_buffer_bytes,
                        0.0,
                        0,
                    ),
                };
                if !(0.0..1.0).contains(&ber) {
                    return Err(BuildError::Setting {
                        key: "bit_error_rate",
                        reason: format!(
                            "{ber} on a link of `{}` is not a probability below 1",
                            node.name
                        ),
                    });
                }
                let peer_max = peers[ni][pn as usize]
                    .map(|p| qos_for(topo.nodes[p.node].kind).max_vls)
                    .unwrap_or(15);
                let op_vls = my_qos.max_vls.min(peer_max).min(config.vl_cap).max(1);
                let mut port = Port::new(
                    ni as u32,
                    pn,
                    rate,
                    delay,
                    op_vls,
                    rx_bytes / 64,
                    config.vl15_buffer_packets,
                    VlArbiter::new(my_qos.vlarb.clone()),
                    my_qos.sl2vl,
                );
                let period = rate.symbol_times_ps(config.fc_period_symbols);
                let worst_wait = rate.serialize_ps(MAX_PACKET_BYTES as u64);
                if ber > 0.0 {
                    port.errors = Some(Box::new(LinkErrors::new(
                        ber,
                        seeds.rng(StreamKind::LinkErrors, stream),
                    )));
                }
                port.fc_interval = if period > 2 * worst_wait {
                    period - worst_wait
                } else {
                    period / 2
                }
                .max(1);
                ports.push(port);
            }
            match node.kind {
                NodeKind::Switch => {
                    let idx = switches.len() as u32;
                    let n = node.ports as usize;
                    switches.push(Switch {
                        first_port: node_first_port[ni],
                        nports: node.ports,
                        lft: lfts[ni].clone(),
                        sl2vl: vec![my_qos.sl2vl; (n + 1) * (n + 1)],
                        uniform_sl2vl: Some(my_qos.sl2vl),
                        out_vls: vec![0; n + 1],
                    });
                    for pn in 0..node.ports as u32 {
                        ports[(node_first_port[ni] + pn) as usize].switch = Some(idx);
                    }
                }
                NodeKind::Hca => {
                    for pn in 1..=node.ports {
                        let gp = node_first_port[ni] + pn as u32 - 1;
                        ports[gp as usize].hca = Some(hcas.len() as u32);
                        hcas.push(Hca {
                            port: gp,
                            lid: addr.lid_of(PortAddr { node: ni, port: pn }),
                            endpoint: None,
                            wake_at: NOT_WAITING,
                        });
                    }
                }
            }
        }
        for (ni, node) in topo.nodes.iter().enumerate() {
            for pn in 1..=node.ports {
                if let Some(p) = peers[ni][pn as usize] {
                    let me = node_first_port[ni] + pn as u32 - 1;
                    ports[me as usize].peer = node_first_port[p.node] + p.port as u32 - 1;
                }
            }
        }
        for sw in switches.iter_mut() {
            for pn in 1..=sw.nports {
                let port = &ports[(sw.first_port + pn as u32 - 1) as usize];
                if port.peer != NO_PEER {
                    sw.out_vls[pn as usize] = port.op_vls;
                }
            }
        }
        Ok(Fabric {
            config,
            topo,
            addr,
            now: 0,
            queue: EventQueue::new(),
            pool: PacketPool::new(),
            ports,
            node_first_port,
            switches,
            hcas,
            kicks: VecDeque::new(),
            started: false,
            events: 0,
            samples: Vec::new(),
            delivered: 0,
            marker: None,
            ca_cc: None,
            tap: None,
        })
    }

    // ----- getters -----

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

    /// LID of port 1 of the node called `name` (an HCA), or of the switch called `name`.
    pub fn lid(&self, name: &str) -> Option<u16> {
        let n = self.topo.node_by_name(name)?;
        match self.topo.nodes[n].kind {
            NodeKind::Hca => Some(self.addr.lid_of(PortAddr { node: n, port: 1 })),
            NodeKind::Switch => Some(self.addr.switch_lid[n]),
        }
    }

    /// The linear forwarding table of the switch called `name`.
    pub fn lft(&self, name: &str) -> Option<&[u8]> {
        let n = self.topo.node_by_name(name)?;
        let gp = self.node_first_port[n] as usize;
        let s = self.ports.get(gp)?.switch?;
        Some(&self.switches[s as usize].lft)
    }

    fn port_index(&self, name: &str, port: u8) -> Option<usize> {
        let n = self.topo.node_by_name(name)?;
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

    /// Operational data VLs of a port.
    pub fn operational_vls(&self, name: &str, port: u8) -> Option<u8> {
        Some(self.ports[self.port_index(name, port)?].op_vls)
    }

    /// Receive-buffer blocks in use on a data VL of a port.
    pub fn rx_blocks_used(&self, name: &str, port: u8, vl: u8) -> Option<u32> {
        let p = &self.ports[self.port_index(name, port)?];
        p.rx.get(vl as usize).map(|r| r.occupied())
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
        if self.started {
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

    /// Schedules the link at port `port` of node `name` to go down (`up` false) or come back
    /// up at time `at`; both ends change together.
    pub fn schedule_link_state(
        &mut self,
        name: &str,
        port: u8,
        at: Picos,
        up: bool,
    ) -> Result<(), BuildError> {
        let gp = self
            .port_index(name, port)
            .ok_or_else(|| BuildError::Setting {
                key: "link_state",
                reason: format!("no port {port} on a node called `{name}`"),
            })?;
        if self.ports[gp].peer == NO_PEER {
            return Err(BuildError::Setting {
                key: "link_state",
                reason: format!("port {port} of `{name}` has no cable"),
            });
        }
        self.queue.push(
            at,
            Event::LinkState {
                port: gp as u32,
                up,
            },
        );
        Ok(())
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

    /// The link rate of port `port` of node `name`.
    pub fn port_rate(&self, name: &str, port: u8) -> Option<crate::link::LinkRate> {
        self.port_index(name, port).map(|i| self.ports[i].rate)
    }

    /// Blocks routed to output VL `vl` of switch port (`name`, `port`) and not yet sent.
    pub fn queued_blocks(&self, name: &str, port: u8, vl: u8) -> Option<u32> {
        let p = &self.ports[self.port_index(name, port)?];
        p.queued_blocks.get(vl as usize).copied()
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

    /// Runs the simulation until simulated time `end` (events at exactly `end` included).
    pub fn run_until(&mut self, end: Picos) {
        if !self.started {
            self.start();
        }
        while let Some(t) = self.queue.peek_time() {
            if t > end {
                break;
            }
            let (t, ev) = self.queue.pop().expect("peeked");
            self.now = t;
            self.events += 1;
            self.handle(t, ev);
            self.drain_kicks();
        }
        self.now = self.now.max(end);
    }

    // ----- internals -----

    fn start(&mut self) {
        self.started = true;
        for q in 0..self.ports.len() {
            let p = &mut self.ports[q];
            if p.peer == NO_PEER {
                continue;
            }
            // Link bring-up: each side advertises its receive buffers (IBA 7.9.4.1).
            p.fc_pending = p.data_vl_mask();
            let at = p.fc_interval;
            self.queue.push(at, Event::FcRefresh(q as u32));
            self.kicks.push_back(q as u32);
        }
        for h in 0..self.hcas.len() as u32 {
            self.call_endpoint(h, |ep, tx| ep.on_transmit_ready(tx));
        }
        if let Some(iv) = self.config.sample_interval_ps {
            self.queue.push(iv.max(1), Event::Sample);
        }
        self.drain_kicks();
    }

    fn drain_kicks(&mut self) {
        while let Some(q) = self.kicks.pop_front() {
            self.try_send(q);
            let p = &mut self.ports[q as usize];
            if p.refill {
                p.refill = false;
                if let Some(h) = p.hca {
                    self.call_endpoint(h, |ep, tx| ep.on_transmit_ready(tx));
                }
            }
        }
    }

    fn handle(&mut self, t: Picos, ev: Event) {
        match ev {
            Event::TxDone(q) => {
                let p = &mut self.ports[q as usize];
                p.done_scheduled = false;
                if let Some((ip, ivl, blocks)) = p.release_on_done.take() {
                    self.release(ip, ivl, blocks);
                }
                self.kicks.push_back(q);
            }
            Event::Arrive(q, id) => self.arrive(q, id),
            Event::FcWake(q) => {
                self.ports[q as usize].fc_wake_at = NOT_WAITING;
                self.kicks.push_back(q);
            }
            Event::Release { port, vl, blocks } => self.release(port, vl, blocks),
            Event::LinkState { port, up } => {
                let peer = self.ports[port as usize].peer;
                if peer != NO_PEER && self.ports[port as usize].link_up != up {
                    for q in [port, peer] {
                        if up {
                            self.link_up(q);
                        } else {
                            self.link_down(q);
                        }
                    }
                }
            }
            Event::FcRefresh(q) => {
                let p = &mut self.ports[q as usize];
                let mut next = Picos::MAX;
                for v in 0..p.op_vls as usize {
                    if p.fc_pending & (1 << v) != 0 {
                        next = next.min(t + p.fc_interval);
                    } else if t >= p.fc_last[v] + p.fc_interval {
                        p.fc_pending |= 1 << v;
                        next = next.min(t + p.fc_interval);
                    } else {
                        next = next.min(p.fc_last[v] + p.fc_interval);
                    }
                }
                if next != Picos::MAX {
                    self.queue.push(next, Event::FcRefresh(q));
                }
                self.kicks.push_back(q);
            }
            Event::XbarRetry(q) => {
                self.ports[q as usize].xbar_retry_at = NOT_WAITING;
                self.kicks.push_back(q);
            }
            Event::HcaWake(h) => {
                if self.hcas[h as usize].wake_at == t {
                    self.hcas[h as usize].wake_at = NOT_WAITING;
                    self.call_endpoint(h, |ep, tx| ep.on_timer(tx));
                }
            }
            Event::Sample => {
                for p in &self.ports {
                    if p.peer == NO_PEER {
                        continue;
                    }
                    self.samples.push(CounterSample {
                        time: t,
                        node: p.node,
                        port: p.num,
                        counters: p.counters_at(t),
                        rx_blocks_used: p.rx.iter().map(|r| r.occupied()).sum(),
                    });
                }
                if let Some(iv) = self.config.sample_interval_ps {
                    self.queue.push(t + iv.max(1), Event::Sample);
                }
            }
        }
    }

    fn call_endpoint(&mut self, h: u32, f: impl FnOnce(&mut dyn Endpoint, &mut HcaTx<'_>)) {
        let hca = &mut self.hcas[h as usize];
        let Some(mut ep) = hca.endpoint.take() else {
            return;
        };
        let (gp, lid) = (hca.port, hca.lid);
        {
            let mut tx = HcaTx {
                now: self.now,
                lid,
                depth: self.config.hca_send_queue_packets,
                pool: &mut self.pool,
                port: &mut self.ports[gp as usize],
            };
            f(ep.as_mut(), &mut tx);
        }
        let wake = ep.next_wakeup().map_or(NOT_WAITING, |w| w.max(self.now));
        let hca = &mut self.hcas[h as usize];
        hca.endpoint = Some(ep);
        if wake != hca.wake_at {
            hca.wake_at = wake;
            if wake != NOT_WAITING {
                self.queue.push(wake, Event::HcaWake(h));
            }
        }
        if self.ports[gp as usize].nonempty != 0 {
            self.kicks.push_back(gp);
        }
    }

    /// The request of output queue `vl` of port `q` that may be sent now (its index in the
    /// queue), or the time the earliest blocked crossbar input frees.
    ///
    /// An HCA's queue is FIFO. A switch output serves the inputs requesting this VL
    /// round-robin by input port number, starting after the input it served last (skipping
    /// inputs whose crossbar port is busy), so an input that stops requesting for a moment
    /// does not lose its turn to inputs that re-requested earlier.
    fn pick(&self, q: usize, vl: usize) -> Result<usize, Option<Picos>> {
        let p = &self.ports[q];
        let queue = &p.out_q[vl];
        let (index, id) = match queue.front() {
            None => return Err(None),
            Some(&Source::Local(id)) => (0, id),
            Some(_) => {
                let last = p.rr_last[vl] as u32;
                let mut best: Option<(u32, usize)> = None;
                let mut retry = NOT_WAITING;
                for (i, src) in queue.iter().enumerate() {
                    let Source::Input { port, .. } = *src else {
                        continue;
                    };
                    let ip = &self.ports[port as usize];
                    if ip.xbar_free_at > self.now {
                        retry = retry.min(ip.xbar_free_at);
                        continue;
                    }
                    // Distance after the last served input, in port-number order.
                    let d = (ip.num as u32 + 256 - last - 1) % 256;
                    if best.is_none_or(|(bd, _)| d < bd) {
                        best = Some((d, i));
                    }
                }
                let Some((_, i)) = best else {
                    return Err(Some(retry));
                };
                let Source::Input { port, vl: ivl } = queue[i] else {
                    unreachable!("switch queues hold inputs")
                };
                let head = *self.ports[port as usize].in_q[ivl as usize]
                    .front()
                    .expect("requesting input has a head");
                (i, head)
            }
        };
        if vl == VL15 as usize || p.tx[vl].can_send(self.pool.get(id).meta.blocks) {
            Ok(index)
        } else {
            Err(None)
        }
    }

    /// Schedules the port's transmit-completion event if it is not already scheduled.
    fn schedule_done(&mut self, q: u32) {
        let p = &mut self.ports[q as usize];
        if !p.done_scheduled {
            p.done_scheduled = true;
            let at = p.busy_until;
            self.queue.push(at, Event::TxDone(q));
        }
    }

    fn try_send(&mut self, q: u32) {
        let now = self.now;
        let qi = q as usize;
        {
            let p = &self.ports[qi];
            if p.peer == NO_PEER || !p.link_up || (p.nonempty == 0 && p.fc_pending == 0) {
                return;
            }
            if now < p.busy_until {
                // Busy: come back when the link frees (the event is only scheduled when
                // there is something to send, which keeps idle reverse links event-free).
                self.schedule_done(q);
                return;
            }
        }
        // The last packet's input-buffer release is due now (its transmission ended), but
        // this call may run before that packet's TxDone event at the same instant: release
        // it here, or the next grant would overwrite it and the input would never get those
        // credits back.
        if let Some((ip, ivl, blocks)) = self.ports[qi].release_on_done.take() {
            self.release(ip, ivl, blocks);
        }
        self.ports[qi].apply_fc(now);
        // Link packets go first (IBA 7.9.4: flow-control packets are not subject to VL
        // arbitration).
        if self.ports[qi].fc_pending != 0 {
            let p = &mut self.ports[qi];
            let vl = p.fc_pending.trailing_zeros() as u8;
            p.fc_pending &= !(1 << vl);
            let fctbs = p.tx[vl as usize].fctbs();
            let fccl = p.advertise(vl as usize, now);
            p.fc_last[vl as usize] = now;
            p.counters.fc_packets_sent += 1;
            let ser = p.ser.ps(FC_PACKET_BYTES);
            p.busy_until = now + ser;
            let (peer, delay) = (p.peer, p.delay);
            // The receiver's ABR := FCTBS (IBA 7.9.4.3) is applied now, not on arrival:
            // data packets are accounted at the receiver when they start on the wire (see
            // `transmit_to`), so "every packet sent before this flow-control packet" is
            // exactly what the receiver has accounted at this instant. Applied on arrival
            // it would wrongly write off the packets sent in between.
            let r = &mut self.ports[peer as usize];
            if vl < r.op_vls {
                r.rx[vl as usize].on_fctbs(fctbs);
            }
            // The FCCL takes effect at the peer when the packet has arrived. It is applied
            // lazily, when the peer next looks at its credits; only a peer that is idle and
            // waiting for credits needs an event to look at that moment.
            let arrive = now + ser + delay;
            r.fc_in.push_back((arrive, vl, fccl));
            if r.nonempty != 0 && r.busy_until <= now && r.fc_wake_at == NOT_WAITING {
                r.fc_wake_at = arrive;
                self.queue.push(arrive, Event::FcWake(peer));
            }
            let p = &self.ports[qi];
            if p.nonempty != 0 || p.fc_pending != 0 {
                self.schedule_done(q);
            }
            return;
        }
        let nonempty = self.ports[qi].nonempty;
        let mut ready = 0u16;
        let mut retry = NOT_WAITING;
        let mut chosen = [0usize; 16];
        let mut m = nonempty;
        while m != 0 {
            let v = m.trailing_zeros() as usize;
            m &= m - 1;
            match self.pick(qi, v) {
                Ok(i) => {
                    ready |= 1 << v;
                    chosen[v] = i;
                }
                Err(Some(t)) => retry = retry.min(t),
                Err(None) => {
                    // A request waits for credits (empty queues are not in `nonempty`).
                    let p = &mut self.ports[qi];
                    if p.credit_stalled & (1 << v) == 0 {
                        p.credit_stalled |= 1 << v;
                        p.credit_stalls[v] += 1;
                    }
                }
            }
        }
        let grant = self.ports[qi].arb.select(ready);
        let Some(grant) = grant else {
            let p = &mut self.ports[qi];
            p.start_waits(now, 0);
            if let Some(&(t, _, _)) = p.fc_in.front() {
                if p.fc_wake_at == NOT_WAITING {
                    p.fc_wake_at = t;
                    self.queue.push(t, Event::FcWake(q));
                }
            }
            if retry != NOT_WAITING && p.xbar_retry_at != retry {
                p.xbar_retry_at = retry;
                self.queue.push(retry, Event::XbarRetry(q));
            }
            return;
        };
        let vl = grant.vl;
        let p = &mut self.ports[qi];
        let queue = &mut p.out_q[vl as usize];
        let src = if chosen[vl as usize] == 0 {
            queue.pop_front()
        } else {
            queue.remove(chosen[vl as usize])
        }
        .expect("granted VL has a request");
        if p.out_q[vl as usize].is_empty() {
            p.nonempty &= !(1 << vl);
        }
        p.credit_stalled &= !(1 << vl);
        // How long this VL waited, read before the grant stops its clock, for the marker.
        let since = p.vl_wait_since[vl as usize];
        let waited = if since == NOT_WAITING { 0 } else { now - since };
        // Inputs contending for this output VL at this grant (the granted one included).
        let requests = p.out_q[vl as usize].len() as u16 + 1;
        p.stop_waits(now, vl);
        p.start_waits(now, 1 << vl);
        if let Source::Input { port, .. } = src {
            let num = self.ports[port as usize].num;
            self.ports[qi].rr_last[vl as usize] = num;
        }
        let p = &mut self.ports[qi];
        let (id, from) = match src {
            Source::Local(id) => {
                p.refill = true;
                (id, None)
            }
            Source::Input { port, vl: ivl } => {
                let id = self.ports[port as usize].in_q[ivl as usize]
                    .pop_front()
                    .expect("requesting input has a head");
                (id, Some((port, ivl)))
            }
        };
        if let Some((ip, ivl)) = from {
            // Annex A10: the marking decision at the switch output, before the packet leaves.
            if vl != VL15 {
                let head_wait =
                    now.saturating_sub(self.ports[ip as usize].head_since[ivl as usize]);
                self.mark_congestion(qi, vl, id, now, (waited, requests, head_wait));
            }
            let blocks = self.pool.get(id).meta.blocks as u32;
            let p = &mut self.ports[qi];
            p.queued_blocks[vl as usize] = p.queued_blocks[vl as usize].saturating_sub(blocks);
        }
        let p = &mut self.ports[qi];
        let pkt = self.pool.get_mut(id);
        let (blocks, len) = (pkt.meta.blocks, pkt.meta.len);
        let arrived_tail = pkt.tail_at;
        pkt.meta.vl = vl;
        p.arb.commit(grant, blocks);
        if vl != VL15 {
            p.tx[vl as usize].on_send(blocks);
        }
        p.counters.port_xmit_pkts += 1;
        p.counters.port_xmit_data += data_words(len);
        let ser = p.ser.ps(len as u64);
        p.busy_until = now + ser;
        let (peer, delay, timing) = (p.peer, p.delay, p.ser);
        let tail = now + ser + delay;
        pkt.tail_at = tail;
        if let Some(errors) = p.errors.as_mut() {
            if let Some(bit) = errors.draw(len as usize) {
                crate::crc::flip_bit(pkt, bit);
            }
        }
        let meta = pkt.meta;
        if let Some(tap) = self.tap.as_mut() {
            tap.see(qi, peer as usize, now + ser, tail, self.pool.get(id));
        }
        self.transmit_to(
            peer,
            id,
            meta,
            now + delay + timing.ps(LRH_BYTES).min(ser),
            tail,
        );
        if let Some((ip, ivl)) = from {
            let speedup = self.config.crossbar_speedup_permille as u64;
            let xfer = (ser * 1000).div_ceil(speedup).max(1);
            self.ports[ip as usize].xbar_free_at = now + xfer;
            let release = (now + xfer).max(arrived_tail);
            if release == now + ser {
                self.ports[qi].release_on_done = Some((ip, ivl, blocks));
            } else {
                self.queue.push(
                    release,
                    Event::Release {
                        port: ip,
                        vl: ivl,
                        blocks,
                    },
                );
            }
            self.promote_head(ip, ivl);
        }
        let p = &self.ports[qi];
        if p.nonempty != 0 || p.fc_pending != 0 || p.release_on_done.is_some() {
            self.schedule_done(q);
        }
    }

    /// Asks the congestion marker about a data packet a switch output `qi` grants on `vl`.
    fn mark_congestion(
        &mut self,
        qi: usize,
        vl: u8,
        id: PacketId,
        now: Picos,
        (waited, requests, head_wait): (Picos, u16, Picos),
    ) {
        let Some(marker) = self.marker.as_mut() else {
            return;
        };
        let p = &self.ports[qi];
        let state = OutputState {
            now,
            node: p.node,
            port: p.num,
            vl,
            queued_blocks: p.queued_blocks[vl as usize],
            head_wait_ps: head_wait,
            head_wait_blocks: (head_wait / p.ser.ps(64).max(1)).min(u32::MAX as u64) as u32,
            credit_stalls: p.credit_stalls[vl as usize],
            credits: p.tx[vl as usize].available(),
            waited_ps: waited,
            requests,
        };
        let pkt = self.pool.get_mut(id);
        if marker.mark(&state, &pkt.meta) && crate::congestion::set_fecn(pkt.bytes_mut()) {
            // FECN is outside the ICRC (masked) but inside the VCRC: materialised CRCs are
            // stale now and will be recomputed when next needed.
            if pkt.meta.crc == CrcState::Materialized {
                pkt.meta.crc = CrcState::Implicit;
            }
            self.ports[qi].counters.fecn_marked += 1;
        }
    }

    /// A data packet starts on the wire towards port `r`, its head arriving at `head` and its
    /// tail at `tail`. The receiver's credit accounting (ABR, buffer occupancy) is done now:
    /// it leaves FCCL = ABR + free unchanged, so when it happens is invisible to the
    /// transmitter, and doing it before any later flow-control packet from the same link can
    /// arrive keeps the FCTBS resynchronisation exact. A switch routes the packet now too (its
    /// tables are static), so a hop needs a single arrival event, at the time the packet
    /// becomes eligible for forwarding.
    fn transmit_to(
        &mut self,
        r: u32,
        id: PacketId,
        meta: crate::packet::PacketMeta,
        head: Picos,
        tail: Picos,
    ) {
        let ri = r as usize;
        self.pool.get_mut(id).epoch = self.ports[ri].epoch;
        let vl = meta.vl;
        if vl != VL15 {
            let p = &mut self.ports[ri];
            if vl >= p.op_vls {
                p.counters.port_rcv_errors += 1;
                self.pool.free(id);
                return;
            }
            if p.rx[vl as usize].on_receive(meta.blocks).is_err() {
                p.counters.excessive_buffer_overrun_errors += 1;
                self.pool.free(id);
                return;
            }
        }
        let arrive = match (self.ports[ri].switch, self.config.forwarding) {
            (Some(_), Forwarding::CutThrough) => head,
            _ => tail,
        };
        if vl != VL15 {
            let p = &mut self.ports[ri];
            if p.rx[vl as usize].capacity() > MAX_WINDOW as u32 {
                p.in_flight[vl as usize].push_back((arrive, meta.blocks));
                p.in_flight_blocks[vl as usize] += meta.blocks as u32;
            }
        }
        let at = match self.ports[ri].switch {
            None => tail,
            Some(s) => {
                let latency = self.config.switch_latency_ps;
                match self.route(s, ri, &meta) {
                    Some((op, ovl)) => {
                        let ser_out = self.ports[op as usize].ser.ps(meta.len as u64);
                        let pkt = self.pool.get_mut(id);
                        pkt.out_port = op;
                        pkt.out_vl = ovl;
                        // Cut-through may not start so early that the output would run past
                        // the bytes still arriving.
                        (arrive + latency).max((tail + latency).saturating_sub(ser_out))
                    }
                    None => {
                        let pkt = self.pool.get_mut(id);
                        pkt.out_port = NO_PEER;
                        arrive + latency
                    }
                }
            }
        };
        self.queue.push(at, Event::Arrive(r, id));
    }

    /// Where switch `s` forwards a packet that came in on global port `ri`: output port and
    /// VL, or `None` if it is consumed by the switch (its own LID) or cannot be forwarded.
    fn route(&mut self, s: u32, ri: usize, meta: &crate::packet::PacketMeta) -> Option<(u32, u8)> {
        let sw = &self.switches[s as usize];
        let in_num = self.ports[ri].num;
        let out_num = sw.lft.get(meta.dlid as usize).copied().unwrap_or(NO_ROUTE);
        if out_num == 0 || out_num == NO_ROUTE || out_num > sw.nports || out_num == in_num {
            return None;
        }
        let op = sw.first_port + out_num as u32 - 1;
        let n = sw.nports as usize + 1;
        let ovl = if meta.vl == VL15 {
            VL15
        } else if let Some(t) = sw.uniform_sl2vl {
            t.vl(meta.sl)
        } else {
            sw.sl2vl[in_num as usize * n + out_num as usize].vl(meta.sl)
        };
        let out_vls = sw.out_vls[out_num as usize];
        let vl_ok = (ovl == VL15) == (meta.vl == VL15) && (ovl == VL15 || ovl < out_vls);
        if out_vls == 0 || !vl_ok {
            return None;
        }
        // An output whose link is down is still the route: the packet is discarded there
        // when it arrives (PortXmitDiscards, see `arrive`).
        Some((op, ovl))
    }

    fn arrive(&mut self, q: u32, id: PacketId) {
        let qi = q as usize;
        let meta = self.pool.get(id).meta;
        let vl = meta.vl;
        if self.pool.get(id).epoch != self.ports[qi].epoch {
            // On the wire when the link went down: lost. It was accounted in the receive
            // buffer when it was sent; take it out again.
            let p = &mut self.ports[qi];
            if vl != VL15 && vl < p.op_vls {
                p.rx[vl as usize].on_lost(meta.blocks);
            }
            self.pool.free(id);
            return;
        }
        let p = &mut self.ports[qi];
        let cut_through_switch =
            p.switch.is_some() && self.config.forwarding == Forwarding::CutThrough;
        if meta.ebp {
            // Already found bad and marked by an upstream cut-through switch.
            p.counters.port_rcv_remote_physical_errors += 1;
            if !cut_through_switch {
                self.drop_received(q, id, &meta);
                return;
            }
        } else if meta.crc == CrcState::Corrupted && !crate::crc::crcs_valid(self.pool.get(id)) {
            p.counters.port_rcv_errors += 1;
            if cut_through_switch && self.pool.get(id).out_port != NO_PEER {
                // Its head is already on the way out: it can only be marked bad (EBP).
                self.pool.get_mut(id).meta.ebp = true;
            } else {
                self.drop_received(q, id, &meta);
                return;
            }
        }
        let p = &mut self.ports[qi];
        if vl == VL15 {
            if p.vl15_held >= p.vl15_cap {
                p.counters.vl15_dropped += 1;
                self.pool.free(id);
                return;
            }
            p.vl15_held += 1;
        }
        p.counters.port_rcv_pkts += 1;
        p.counters.port_rcv_data += data_words(meta.len);
        if let Some(h) = p.hca {
            // The HCA consumes at line rate: the buffer frees at once.
            let pkt = self.pool.take(id);
            self.call_endpoint(h, |ep, tx| ep.on_receive(&pkt, tx));
            self.pool.put_back(id, pkt);
            self.pool.free(id);
            self.delivered += 1;
            self.release(q, vl, meta.blocks);
            return;
        }
        if self.pool.get(id).out_port == NO_PEER {
            // Addressed to the switch itself (consumed by its management agent) or not
            // forwardable (PortRcvSwitchRelayErrors).
            let sw = &self.switches[p.switch.expect("switch port") as usize];
            if sw.lft.get(meta.dlid as usize).copied() != Some(0) {
                p.counters.port_rcv_switch_relay_errors += 1;
            }
            self.pool.free(id);
            self.release(q, vl, meta.blocks);
            return;
        }
        let (op, ovl) = {
            let pkt = self.pool.get(id);
            (pkt.out_port, pkt.out_vl)
        };
        if !self.ports[op as usize].link_up {
            // The output went down after the packet was routed.
            self.ports[op as usize].counters.port_xmit_discards += 1;
            self.pool.free(id);
            self.release(q, vl, meta.blocks);
            return;
        }
        self.ports[op as usize].queued_blocks[ovl as usize] += meta.blocks as u32;
        let p = &mut self.ports[qi];
        p.in_q[vl as usize].push_back(id);
        if p.in_q[vl as usize].len() == 1 {
            self.request_head(q, vl);
        }
    }

    /// Drops a packet that failed its CRC at port `q`: it does not count as received, and
    /// the sender's next FCTBS writes its blocks off (IBA 7.9.4.3).
    fn drop_received(&mut self, q: u32, id: PacketId, meta: &crate::packet::PacketMeta) {
        let p = &mut self.ports[q as usize];
        if meta.vl != VL15 && meta.vl < p.op_vls {
            p.rx[meta.vl as usize].on_drop(meta.blocks);
            p.fc_pending |= 1 << meta.vl;
            self.kicks.push_back(q);
        }
        self.pool.free(id);
    }

    fn release(&mut self, q: u32, vl: u8, blocks: u16) {
        let p = &mut self.ports[q as usize];
        if vl == VL15 {
            p.vl15_held = p.vl15_held.saturating_sub(1);
        } else {
            p.rx[vl as usize].on_release(blocks);
            // Tell the upstream transmitter (IBA 7.9.4.2: when credits free up).
            p.fc_pending |= 1 << vl;
            self.kicks.push_back(q);
        }
    }

    /// The next packet of input FIFO (`ip`, `ivl`) became its head: it requests its output.
    /// Packets enter a FIFO only when eligible, so a new head is always ready to go.
    fn promote_head(&mut self, ip: u32, ivl: u8) {
        if !self.ports[ip as usize].in_q[ivl as usize].is_empty() {
            self.request_head(ip, ivl);
        }
    }

    /// The head of (`ip`, `ivl`) requests its output. Heads for an output whose link is
    /// down are discarded (PortXmitDiscards at that output) and the next head tries.
    fn request_head(&mut self, ip: u32, ivl: u8) {
        while let Some(&id) = self.ports[ip as usize].in_q[ivl as usize].front() {
            let pkt = self.pool.get(id);
            let (op, ovl, blocks) = (pkt.out_port, pkt.out_vl, pkt.meta.blocks);
            if self.ports[op as usize].link_up {
                self.ports[op as usize].enqueue(ovl, Source::Input { port: ip, vl: ivl });
                // Its wait for the output starts when its input's crossbar port is free:
                // before that it waits for its own input, not for the output.
                let input = &mut self.ports[ip as usize];
                input.head_since[ivl as usize] = self.now.max(input.xbar_free_at);
                self.kicks.push_back(op);
                return;
            }
            self.discard_head(ip, ivl, op, ovl, blocks);
        }
    }

    /// Drops the head of input FIFO (`ip`, `ivl`), routed to output `op`/`ovl`.
    fn discard_head(&mut self, ip: u32, ivl: u8, op: u32, ovl: u8, blocks: u16) {
        let id = self.ports[ip as usize].in_q[ivl as usize]
            .pop_front()
            .expect("discarding a head that exists");
        let out = &mut self.ports[op as usize];
        out.counters.port_xmit_discards += 1;
        out.queued_blocks[ovl as usize] =
            out.queued_blocks[ovl as usize].saturating_sub(blocks as u32);
        self.pool.free(id);
        self.release(ip, ivl, blocks);
    }

    /// The link of port `q` goes down (IBA 7.2 link state Down): LinkDownedCounter, packets
    /// on the wire are lost (epoch), credits are void until retraining, requests from switch
    /// inputs for this output are discarded. An HCA keeps its send queue for when the link
    /// returns.
    fn link_down(&mut self, q: u32) {
        let now = self.now;
        let p = &mut self.ports[q as usize];
        p.close_waits(now);
        p.link_up = false;
        p.epoch = p.epoch.wrapping_add(1);
        p.counters.link_downed_counter += 1;
        p.fc_pending = 0;
        p.fc_in.clear(); // flow-control packets on the wire are lost too
        p.tx = [crate::credits::TxCredits::new(); DATA_VLS];
        for v in 0..DATA_VLS {
            p.in_flight[v].clear();
            p.in_flight_blocks[v] = 0;
        }
        if p.switch.is_none() {
            return;
        }
        for v in 0..16u8 {
            while let Some(src) = self.ports[q as usize].out_q[v as usize].pop_front() {
                if let Source::Input { port, vl } = src {
                    let blocks = {
                        let head = *self.ports[port as usize].in_q[vl as usize]
                            .front()
                            .expect("requesting input has a head");
                        self.pool.get(head).meta.blocks
                    };
                    self.discard_head(port, vl, q, v, blocks);
                    // Its next head requests (or is discarded) in turn.
                    self.request_head(port, vl);
                }
            }
        }
        self.ports[q as usize].nonempty = 0;
    }

    /// The link of port `q` comes back: credits are re-initialised and advertised afresh
    /// (IBA 7.9.4.1), the send queues resume.
    fn link_up(&mut self, q: u32) {
        let p = &mut self.ports[q as usize];
        p.link_up = true;
        for r in p.rx.iter_mut() {
            r.reset_abr();
        }
        p.fc_pending = p.data_vl_mask();
        self.kicks.push_back(q);
    }
}

/// Number of data VLs a port can have.
pub const MAX_DATA_VLS: usize = DATA_VLS;
