//! A fabric split into 1, 2 or 3 partitions on threads (`softib_fabric::parallel`) computes
//! exactly what the unpartitioned fabric does: every port's counters, the counter time
//! series, the events processed, the packets delivered and every RC completion time, on a
//! fat tree (partitioned by leaf groups) and on an incast with IBA congestion control on
//! (partitioned node by node, so that every link is cut).

use softib_fabric::cc_switch::{parse_opensm_cc, OpensmCc};
use softib_fabric::counters::PortCounters;
use softib_fabric::engine_hca::{EngineHca, HostApp};
use softib_fabric::fabric::{CounterSample, Fabric, FabricConfig, Partitioning};
use softib_fabric::parallel::run_threads;
use softib_fabric::rng::SeedTree;
use softib_fabric::routing::RoutingEngine;
use softib_fabric::time::{Picos, PS_PER_US};
use softib_fabric::topology::{NodeKind, Topology};
use softib_sim::apps::perftest::{
    device_config, rc_connect, rc_side_with, Passive, WriteBw, ZeroMemory,
};
use softib_transport::{Device, Mtu, Nanos};

/// Everything a run computed, in a partition-independent order.
#[derive(Debug, PartialEq)]
struct Outcome {
    ports: Vec<(usize, u8, PortCounters)>,
    samples: Vec<CounterSample>,
    events: u64,
    delivered: u64,
    completions: Vec<(usize, Vec<Nanos>)>,
}

/// Fails naming the first difference (the whole outcome is too long to read).
fn assert_same(got: &Outcome, want: &Outcome, what: &str) {
    assert_eq!(got.events, want.events, "{what}: events processed");
    assert_eq!(got.delivered, want.delivered, "{what}: packets delivered");
    assert_eq!(got.ports.len(), want.ports.len(), "{what}: ports");
    for (g, w) in got.ports.iter().zip(&want.ports) {
        assert_eq!(g, w, "{what}: counters of node {} port {}", w.0, w.1);
    }
    assert_eq!(got.samples.len(), want.samples.len(), "{what}: samples");
    for (g, w) in got.samples.iter().zip(&want.samples) {
        assert_eq!(g, w, "{what}: sample");
    }
    assert_eq!(got.completions, want.completions, "{what}: completions");
    assert_eq!(got, want, "{what}");
}

impl Outcome {
    fn merge(parts: Vec<Outcome>) -> Outcome {
        let mut all = Outcome {
            ports: Vec::new(),
            samples: Vec::new(),
            events: 0,
            delivered: 0,
            completions: Vec::new(),
        };
        for p in parts {
            all.ports.extend(p.ports);
            all.samples.extend(p.samples);
            all.events += p.events;
            all.delivered += p.delivered;
            all.completions.extend(p.completions);
        }
        all.ports.sort_by_key(|&(n, p, _)| (n, p));
        // An unpartitioned fabric samples its ports in index order (node, then port).
        all.samples.sort_by_key(|s| (s.time, s.node, s.port));
        all.completions.sort_by_key(|c| c.0);
        all
    }
}

/// A scenario: the topology, settings and RC write_bw flows (source, destination host
/// index) of `size`-byte WRITEs, 8 in flight.
struct Scenario {
    topo: fn() -> Topology,
    config: FabricConfig,
    cc: Option<OpensmCc>,
    flows: Vec<(usize, usize)>,
    size: u32,
    end: Picos,
}

impl Scenario {
    /// Builds the fabric with the endpoints of the hosts `owns` says this fabric runs.
    fn build(&self, owns: &dyn Fn(&Topology, usize) -> bool) -> Fabric {
        let topo = (self.topo)();
        let hosts: Vec<usize> = topo.hcas().collect();
        let mut f = Fabric::new(topo, self.config.clone()).unwrap();
        let rate = self.config.link_rate;
        if let Some(cc) = &self.cc {
            if let Some(m) = cc.marker(self.config.rx_buffer_bytes, &SeedTree::new(5)) {
                f.set_congestion_marker(Box::new(m));
            }
        }
        let names: Vec<String> = hosts
            .iter()
            .map(|&n| f.topology().nodes[n].name.clone())
            .collect();
        // Every partition makes every device, so that QPNs and PSNs are the same.
        let mut devices: Vec<Option<Device>> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut cfg = device_config(f.lid(name).unwrap());
                if let Some(cc) = &self.cc {
                    cfg.cc = cc.device_cc(&rate);
                }
                Some(Device::new(cfg, i as u64))
            })
            .collect();
        let mut apps: Vec<Vec<WriteBw>> = hosts.iter().map(|_| Vec::new()).collect();
        for &(s, d) in &self.flows {
            let (ls, ld) = (f.lid(&names[s]).unwrap(), f.lid(&names[d]).unwrap());
            let zero = || Box::new(ZeroMemory::new(self.size as usize));
            let a = rc_side_with(devices[s].as_mut().unwrap(), zero(), 0x1000_0000).unwrap();
            let b = rc_side_with(devices[d].as_mut().unwrap(), zero(), 0x2000_0000).unwrap();
            rc_connect(devices[s].as_mut().unwrap(), &a, &b, ld, 0, Mtu::M4096, 14).unwrap();
            rc_connect(devices[d].as_mut().unwrap(), &b, &a, ls, 0, Mtu::M4096, 14).unwrap();
            apps[s].push(WriteBw::new(a, b, self.size, 8, None));
        }
        for (i, dev) in devices.iter_mut().enumerate() {
            if !owns(f.topology(), hosts[i]) {
                continue;
            }
            let app: Box<dyn HostApp> = match apps[i].pop() {
                Some(a) => Box::new(a),
                None => Box::new(Passive),
            };
            f.attach(
                &names[i],
                Box::new(EngineHca::new(dev.take().unwrap(), app)),
            )
            .unwrap();
        }
        f
    }

    /// What fabric `f` computed for the nodes it runs.
    fn outcome(&self, f: &mut Fabric) -> Outcome {
        let topo = f.topology().clone();
        let mut ports = Vec::new();
        let mut completions = Vec::new();
        for (n, node) in topo.nodes.iter().enumerate() {
            if !f.owns(&node.name) {
                continue;
            }
            for p in 1..=node.ports {
                ports.push((n, p, f.port_counters(&node.name, p).unwrap()));
            }
            if node.kind == NodeKind::Hca {
                let hca = f.endpoint_mut::<EngineHca>(&node.name, 1).unwrap();
                if let Some(w) = hca.app::<WriteBw>() {
                    completions.push((n, w.stats().completions.clone()));
                }
            }
        }
        Outcome {
            ports,
            samples: f
                .samples()
                .iter()
                .filter(|s| f.owns(&topo.nodes[s.node as usize].name))
                .cloned()
                .collect(),
            events: f.events_processed(),
            delivered: f.packets_delivered(),
            completions,
        }
    }

    fn serial(&self) -> Outcome {
        let mut f = self.build(&|_, _| true);
        f.run_until(self.end);
        self.outcome(&mut f)
    }

    fn partitioned(&self, p: &Partitioning) -> Outcome {
        let parts = run_threads(
            p,
            self.end,
            |me| Ok(self.build(&|_, n| p.owner(n) == me)),
            |_, mut f| self.outcome(&mut f),
        )
        .unwrap();
        Outcome::merge(parts)
    }
}

fn fat_tree() -> Topology {
    Topology::fat_tree_3(4).unwrap()
}

#[test]
fn a_fat_tree_permutation_is_identical_at_one_two_and_three_partitions() {
    let hosts = fat_tree().hcas().count();
    let s = Scenario {
        topo: fat_tree,
        config: FabricConfig {
            routing: RoutingEngine::Ftree,
            sample_interval_ps: Some(10 * PS_PER_US),
            ..FabricConfig::default()
        },
        cc: None,
        flows: (0..hosts).map(|i| (i, (i + hosts / 2) % hosts)).collect(),
        size: 16_384,
        end: 60 * PS_PER_US,
    };
    let serial = s.serial();
    assert!(serial.delivered > 1000, "traffic ran: {}", serial.delivered);
    assert!(serial.completions.iter().all(|(_, c)| c.len() > 10));
    for n in 1..=3 {
        let p = Partitioning::by_leaf_groups(&fat_tree(), n, s.config.link_delay_ps).unwrap();
        if n > 1 {
            assert_eq!(p.lookahead(), s.config.link_delay_ps);
        }
        let got = s.partitioned(&p);
        assert_same(&got, &serial, &format!("{n} partitions"));
    }
}

/// h0..h7 write to d through two switches; the link sw0-sw1 is the shared hop.
fn incast() -> Topology {
    let mut t = Topology::new();
    let sw0 = t.add_node("sw0", NodeKind::Switch, 8);
    let sw1 = t.add_node("sw1", NodeKind::Switch, 8);
    for i in 0..8 {
        let h = t.add_node(format!("h{i}"), NodeKind::Hca, 1);
        let (sw, p) = if i < 4 { (sw0, i + 1) } else { (sw1, i - 3) };
        t.connect(h, 1, sw, p as u8);
    }
    let d = t.add_node("d", NodeKind::Hca, 1);
    t.connect(d, 1, sw1, 5);
    t.connect(sw0, 8, sw1, 8);
    t
}

#[test]
fn an_incast_with_congestion_control_is_identical_at_one_two_and_three_partitions() {
    let cc = parse_opensm_cc(
        "congestion_control TRUE\n\
         cc_sw_cong_setting_control_map 0x1f\n\
         cc_sw_cong_setting_threshold 14\n\
         cc_sw_cong_setting_packet_size 8\n\
         cc_sw_cong_setting_marking_rate 0\n\
         cc_ca_cong_setting_control_map 0x0001\n\
         cc_ca_cong_setting_ccti_timer 0 20\n\
         cc_ca_cong_setting_ccti_increase 0 1\n\
         cc_ca_cong_setting_trigger_threshold 0 2\n\
         cc_cct 0:0,1:0,1:2,1:4,2:8,2:16,2:32,3:64\n",
    )
    .unwrap();
    let s = Scenario {
        topo: incast,
        config: FabricConfig {
            sample_interval_ps: Some(5 * PS_PER_US),
            ..FabricConfig::default()
        },
        cc: Some(cc),
        flows: (0..8).map(|i| (i, 8)).collect(),
        size: 65_536,
        end: 80 * PS_PER_US,
    };
    let serial = s.serial();
    let marked: u64 = serial.ports.iter().map(|p| p.2.fecn_marked).sum();
    assert!(marked > 0, "congestion control acted: no packet was marked");
    let topo = incast();
    for n in 1..=3 {
        // Node by node: every link is cut, host links included.
        let owners = (0..topo.nodes.len()).map(|i| (i % n) as u16).collect();
        let p = Partitioning::from_owners(&topo, owners, n, s.config.link_delay_ps).unwrap();
        assert_same(&s.partitioned(&p), &serial, &format!("{n} partitions"));
    }
}
