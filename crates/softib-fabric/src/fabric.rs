//! The simulator: ports, switches and HCAs wired by a [`Topology`], driven by one event queue.
//!
//! Per hop a data packet costs three events: the transmit completion at the output port, the
//! arrival at the next port (the head of the packet for a cut-through switch, its tail
//! otherwise) and the release of the input buffer it occupied (which makes the receiving port
//! send a flow-control packet upstream). Switch latency adds an "eligible" event per hop when
//! it is non-zero.
//!
//! Switch model (IBA 18.2): an input-queued switch. Each input port keeps one FIFO per VL, the
//! receive buffer that link credits protect. Only the head packet of a FIFO is routed (LFT on
//! the DLID, SL2VL of the (in, out) pair for the output VL) and requests its output: a head
//! blocked on a congested output blocks the packets behind it, the head-of-line blocking that
//! credit back-pressure spreads through an IB fabric. An output port serves the requests of
//! each VL in arrival order, VLs by its VL arbiter, and only when the downstream receiver has
//! credits for the whole packet. The crossbar moves a packet from its input at the output's
//! rate times the speed-up; an input feeds one transfer at a time. The input buffer is freed
//! when the packet has crossed the crossbar (and, cut-through, has fully arrived).

use crate::counters::{data_words, PortCounters};
use crate::credits::FC_PACKET_BYTES;
use crate::event::EventQueue;
use crate::hca::{Endpoint, HcaTx};
use crate::link::{LinkRate, LinkSpeed, LinkWidth};
use crate::packet::{CrcState, PacketId, PacketPool, MAX_PACKET_BYTES};
use crate::port::{Port, Source, DATA_VLS, NOT_WAITING, NO_PEER};
use crate::qos::{no_qos, PortClass, PortQos, QosOptions, Sl2Vl};
use crate::routing::{compute_lfts, peers, Addressing, NO_ROUTE};
use crate::time::Picos;
use crate::topology::{NodeKind, PortAddr, Topology, TopologyError};
use crate::vlarb::{VlArbiter, VL15};
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
    Eligible(u32, u8),
    FcArrive {
        port: u32,
        vl: u8,
        fctbs: u16,
        fccl: u16,
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
        if config.hca_send_queue_packets == 0 {
            return Err(BuildError::Setting {
                key: "hca_send_queue_packets",
                reason: "must be at least 1".into(),
            });
        }
        let addr = Addressing::assign(&topo);
        let lfts = compute_lfts(&topo, &addr);
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
        for l in &topo.links {
            link_of.insert(l.a, (l, l.rx_buffer_a));
            link_of.insert(l.b, (l, l.rx_buffer_b));
        }
        let mut ports = Vec::new();
        let mut node_first_port = Vec::with_capacity(topo.nodes.len());
        let mut switches = Vec::new();
        let mut hcas = Vec::new();
        for (ni, node) in topo.nodes.iter().enumerate() {
            node_first_port.push(ports.len() as u32);
            let my_qos = qos_for(node.kind);
            for pn in 1..=node.ports {
                let at = PortAddr { node: ni, port: pn };
                let (rate, delay, rx_bytes) = match link_of.get(&at) {
                    Some((l, rx)) => (
                        l.rate.unwrap_or(config.link_rate),
                        l.delay_ps.unwrap_or(config.link_delay_ps),
                        rx.unwrap_or(config.rx_buffer_bytes),
                    ),
                    None => (
                        config.link_rate,
                        config.link_delay_ps,
                        config.rx_buffer_bytes,
                    ),
                };
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
        }
    }

    fn handle(&mut self, t: Picos, ev: Event) {
        match ev {
            Event::TxDone(q) => {
                let p = &mut self.ports[q as usize];
                p.busy = false;
                if p.refill {
                    p.refill = false;
                    if let Some(h) = p.hca {
                        self.call_endpoint(h, |ep, tx| ep.on_transmit_ready(tx));
                    }
                }
                self.kicks.push_back(q);
            }
            Event::Arrive(q, id) => self.arrive(q, id),
            Event::Eligible(q, vl) => self.request_head(q, vl),
            Event::FcArrive {
                port,
                vl,
                fctbs,
                fccl,
            } => {
                let p = &mut self.ports[port as usize];
                p.counters.fc_packets_rcvd += 1;
                if vl < p.op_vls {
                    p.tx[vl as usize].on_fccl(fccl);
                    p.rx[vl as usize].on_fctbs(fctbs);
                }
                if p.nonempty != 0 {
                    self.kicks.push_back(port);
                }
            }
            Event::Release { port, vl, blocks } => self.release(port, vl, blocks),
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

    /// The head packet of output queue `vl` of port `q`, if it may be sent now, or the time
    /// its crossbar input frees.
    fn head_ready(&self, q: usize, vl: usize) -> Result<(), Option<Picos>> {
        let p = &self.ports[q];
        let Some(&src) = p.out_q[vl].front() else {
            return Err(None);
        };
        let id = match src {
            Source::Local(id) => id,
            Source::Input { port, vl: ivl } => {
                let ip = &self.ports[port as usize];
                if ip.xbar_free_at > self.now {
                    return Err(Some(ip.xbar_free_at));
                }
                *ip.in_q[ivl as usize]
                    .front()
                    .expect("requesting input has a head")
            }
        };
        if vl == VL15 as usize || p.tx[vl].can_send(self.pool.get(id).meta.blocks) {
            Ok(())
        } else {
            Err(None)
        }
    }

    fn try_send(&mut self, q: u32) {
        let now = self.now;
        let qi = q as usize;
        {
            let p = &self.ports[qi];
            if p.busy || p.peer == NO_PEER {
                return;
            }
        }
        // Link packets go first (IBA 7.9.4: flow control packets are not subject to VL
        // arbitration).
        if self.ports[qi].fc_pending != 0 {
            let p = &mut self.ports[qi];
            let vl = p.fc_pending.trailing_zeros() as u8;
            p.fc_pending &= !(1 << vl);
            let fctbs = p.tx[vl as usize].fctbs();
            let fccl = p.rx[vl as usize].fccl();
            p.fc_last[vl as usize] = now;
            p.busy = true;
            p.counters.fc_packets_sent += 1;
            let ser = p.rate.serialize_ps(FC_PACKET_BYTES);
            let (peer, delay) = (p.peer, p.delay);
            self.queue.push(now + ser, Event::TxDone(q));
            self.queue.push(
                now + ser + delay,
                Event::FcArrive {
                    port: peer,
                    vl,
                    fctbs,
                    fccl,
                },
            );
            return;
        }
        let nonempty = self.ports[qi].nonempty;
        if nonempty == 0 {
            return;
        }
        let mut ready = 0u16;
        let mut retry = NOT_WAITING;
        let mut m = nonempty;
        while m != 0 {
            let v = m.trailing_zeros() as usize;
            m &= m - 1;
            match self.head_ready(qi, v) {
                Ok(()) => ready |= 1 << v,
                Err(Some(t)) => retry = retry.min(t),
                Err(None) => {}
            }
        }
        let grant = self.ports[qi].arb.select(ready);
        let Some(grant) = grant else {
            let p = &mut self.ports[qi];
            p.start_waits(now, 0);
            if retry != NOT_WAITING && p.xbar_retry_at != retry {
                p.xbar_retry_at = retry;
                self.queue.push(retry, Event::XbarRetry(q));
            }
            return;
        };
        let vl = grant.vl;
        let p = &mut self.ports[qi];
        let src = p.out_q[vl as usize]
            .pop_front()
            .expect("granted VL has a request");
        if p.out_q[vl as usize].is_empty() {
            p.nonempty &= !(1 << vl);
        }
        p.stop_waits(now, vl);
        p.start_waits(now, 1 << vl);
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
        let cut_through = self.config.forwarding == Forwarding::CutThrough;
        let speedup = self.config.crossbar_speedup_permille as u64;
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
        let ser = p.rate.serialize_ps(len as u64);
        p.busy = true;
        let (peer, delay, rate) = (p.peer, p.delay, p.rate);
        let tail = now + ser + delay;
        pkt.tail_at = tail;
        let peer_is_switch = self.ports[peer as usize].switch.is_some();
        let arrive = if cut_through && peer_is_switch {
            now + delay + rate.serialize_ps(softib_wire::lrh::LRH_LEN as u64).min(ser)
        } else {
            tail
        };
        self.queue.push(now + ser, Event::TxDone(q));
        self.queue.push(arrive, Event::Arrive(peer, id));
        if let Some((ip, ivl)) = from {
            let xfer = (ser * 1000).div_ceil(speedup).max(1);
            self.ports[ip as usize].xbar_free_at = now + xfer;
            let release = (now + xfer).max(arrived_tail);
            self.queue.push(
                release,
                Event::Release {
                    port: ip,
                    vl: ivl,
                    blocks,
                },
            );
            self.route_head(ip, ivl);
        }
    }

    fn arrive(&mut self, q: u32, id: PacketId) {
        let now = self.now;
        let qi = q as usize;
        let meta = self.pool.get(id).meta;
        let vl = meta.vl;
        if meta.crc == CrcState::Corrupted && !crate::crc::crcs_valid(self.pool.get(id)) {
            // Dropped without touching ABR: the sender's next FCTBS writes its blocks off.
            self.ports[qi].counters.port_rcv_errors += 1;
            self.pool.free(id);
            return;
        }
        let p = &mut self.ports[qi];
        if vl == VL15 {
            if p.vl15_held >= p.vl15_cap {
                p.counters.vl15_dropped += 1;
                self.pool.free(id);
                return;
            }
            p.vl15_held += 1;
        } else if vl >= p.op_vls {
            p.counters.port_rcv_errors += 1;
            self.pool.free(id);
            return;
        } else if p.rx[vl as usize].on_receive(meta.blocks).is_err() {
            p.counters.excessive_buffer_overrun_errors += 1;
            self.pool.free(id);
            return;
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
        let latency = self.config.switch_latency_ps;
        self.pool.get_mut(id).ready_at = now + latency;
        let p = &mut self.ports[qi];
        p.in_q[vl as usize].push_back(id);
        if p.in_q[vl as usize].len() == 1 {
            self.route_head(q, vl);
        }
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

    /// Routes the head packet of input FIFO (`ip`, `ivl`) of a switch; drops what cannot be
    /// forwarded (PortRcvSwitchRelayErrors) and moves on to the next head.
    fn route_head(&mut self, ip: u32, ivl: u8) {
        loop {
            let Some(&id) = self.ports[ip as usize].in_q[ivl as usize].front() else {
                return;
            };
            let sw_idx = self.ports[ip as usize]
                .switch
                .expect("input FIFOs are switch ports");
            let sw = &self.switches[sw_idx as usize];
            let in_num = self.ports[ip as usize].num;
            let meta = self.pool.get(id).meta;
            let out_num = sw.lft.get(meta.dlid as usize).copied().unwrap_or(NO_ROUTE);
            let consumed_here = out_num == 0;
            let mut target = None;
            if !consumed_here && out_num != NO_ROUTE && out_num <= sw.nports && out_num != in_num {
                let op = sw.first_port + out_num as u32 - 1;
                let n = sw.nports as usize + 1;
                let ovl = if ivl == VL15 {
                    VL15
                } else {
                    sw.sl2vl[in_num as usize * n + out_num as usize].vl(meta.sl)
                };
                let out = &self.ports[op as usize];
                let vl_ok = ovl == VL15 && ivl == VL15 || ovl != VL15 && ovl < out.op_vls;
                if out.peer == NO_PEER {
                    self.ports[op as usize].counters.port_xmit_discards += 1;
                } else if vl_ok {
                    target = Some((op, ovl));
                }
                if !vl_ok {
                    self.ports[ip as usize]
                        .counters
                        .port_rcv_switch_relay_errors += 1;
                }
            } else if !consumed_here {
                self.ports[ip as usize]
                    .counters
                    .port_rcv_switch_relay_errors += 1;
            }
            match target {
                Some((op, ovl)) => {
                    let rate = self.ports[op as usize].rate;
                    let pkt = self.pool.get_mut(id);
                    pkt.out_port = op;
                    pkt.out_vl = ovl;
                    // Cut-through may not start so early that the output would run past the
                    // bytes still arriving.
                    let ser_out = rate.serialize_ps(meta.len as u64);
                    let latency = self.config.switch_latency_ps;
                    let eligible = pkt
                        .ready_at
                        .max((pkt.tail_at + latency).saturating_sub(ser_out));
                    if eligible > self.now {
                        self.queue.push(eligible, Event::Eligible(ip, ivl));
                    } else {
                        self.request_head(ip, ivl);
                    }
                    return;
                }
                None => {
                    // Consumed by the switch's management port, or dropped.
                    self.ports[ip as usize].in_q[ivl as usize].pop_front();
                    self.pool.free(id);
                    self.release(ip, ivl, meta.blocks);
                }
            }
        }
    }

    /// The routed head of (`ip`, `ivl`) requests its output.
    fn request_head(&mut self, ip: u32, ivl: u8) {
        let Some(&id) = self.ports[ip as usize].in_q[ivl as usize].front() else {
            return;
        };
        let pkt = self.pool.get(id);
        let (op, ovl) = (pkt.out_port, pkt.out_vl);
        self.ports[op as usize].enqueue(ovl, Source::Input { port: ip, vl: ivl });
        self.kicks.push_back(op);
    }
}

/// Number of data VLs a port can have.
pub const MAX_DATA_VLS: usize = DATA_VLS;
