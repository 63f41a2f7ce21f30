//! Construction of a [`Fabric`]: LIDs and forwarding tables from the routing engine, the
//! ports of every node with their QoS tables, credits and error model, the switches and the
//! HCAs. Links come up at time 0 by exchanging flow-control packets (IBA 7.9.4.1).

use super::{BuildError, Fabric, FabricConfig, Hca, Switch};
use crate::event::EventQueue;
use crate::packet::{PacketPool, MAX_PACKET_BYTES};
use crate::port::{LinkErrors, Port, NOT_WAITING, NO_PEER};
use crate::qos::{no_qos, PortClass, PortQos};
use crate::rng::{SeedTree, StreamKind};
use crate::routing::{compute_lfts_with, peers, Addressing};
use crate::topology::{NodeKind, PortAddr, Topology};
use crate::vlarb::VlArbiter;

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
        // Names are unique (`validate`).
        let node_index = topo
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let entities = topo.nodes.len() + 1;
        Ok(Fabric {
            config,
            topo,
            node_index,
            addr,
            now: 0,
            queue: EventQueue::new(),
            pool: PacketPool::new(),
            ports,
            node_first_port,
            switches,
            hcas,
            kicks: super::kicks::Kicks::default(),
            scheduled_by: vec![0; entities],
            current: 0,
            event_key: 0,
            part: None,
            started: false,
            events: 0,
            samples: Vec::new(),
            delivered: 0,
            marker: None,
            ca_cc: None,
            cc_nodes: None,
            tap: None,
        })
    }
}
