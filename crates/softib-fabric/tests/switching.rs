//! Switches end to end: VL arbitration on a congested output, forwarding over a fat tree,
//! determinism of a whole run.

mod support;

use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::qos::QosOptions;
use softib_fabric::scenario::Scenario;
use softib_fabric::time::PS_PER_US;
use softib_fabric::topology::Topology;
use support::*;

/// h0 sends SL0, h1 sends SL1, both to h2 through one switch: the switch's port to h2 is
/// oversubscribed 2:1 and its VL arbiter decides.
fn two_vls_into_one(opensm: &str) -> (Fabric, Shared) {
    let t = Topology::single_switch(3, 8).unwrap();
    let cfg = FabricConfig {
        qos: Some(QosOptions::from_opensm_conf(opensm).unwrap()),
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let log = shared();
    let dst = f.lid("h2").unwrap();
    for (h, sl) in [("h0", 0u8), ("h1", 1u8)] {
        f.attach(
            h,
            Box::new(RawSource::new(
                dst,
                sl,
                256,
                u64::MAX,
                sl as u32,
                log.clone(),
            )),
        )
        .unwrap();
    }
    f.attach("h2", Box::new(Sink { log: log.clone() })).unwrap();
    f.run_until(300 * PS_PER_US);
    (f, log)
}

fn per_vl_after(log: &Shared, from: u64) -> [u64; 2] {
    let mut n = [0; 2];
    for r in log.borrow().rx.iter().filter(|r| r.at >= from) {
        n[r.vl as usize] += 1;
    }
    n
}

const SL_TO_VL_0_1: &str = "qos_sl2vl 0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0\nqos_max_vls 2\n";

#[test]
fn weights_share_a_congested_switch_port_in_proportion() {
    // 256-byte payloads: 282-byte packets, 5 blocks. Weight 200 = 40 packets per turn on
    // VL0, weight 100 = 20 on VL1: a 2:1 share of the oversubscribed port.
    let (f, log) = two_vls_into_one(&format!(
        "{SL_TO_VL_0_1}qos_vlarb_high 0:0\nqos_vlarb_low 0:200,1:100\n"
    ));
    let [vl0, vl1] = per_vl_after(&log, 50 * PS_PER_US);
    let ratio = vl0 as f64 / vl1 as f64;
    assert!(
        (ratio - 2.0).abs() < 0.02,
        "VL0 {vl0} VL1 {vl1} ratio {ratio}"
    );
    // The port ran saturated: every picosecond carried a packet of one VL or the other.
    let line_pkts = 250.0 * PS_PER_US as f64 / (282.0 * 80.0);
    assert!((vl0 + vl1) as f64 > 0.99 * line_pkts);
    // Both senders were held back by credits (2:1 oversubscription), nothing was dropped.
    assert!(f.port_counters("h1", 1).unwrap().xmit_wait_ps > 100 * PS_PER_US);
    assert_eq!(f.total_counters().errors(), 0);
}

#[test]
fn high_priority_with_unbounded_limit_starves_low_priority() {
    let (f, log) = two_vls_into_one(&format!(
        "{SL_TO_VL_0_1}qos_vlarb_high 1:255\nqos_vlarb_low 0:255\nqos_high_limit 255\n"
    ));
    let [vl0, vl1] = per_vl_after(&log, 50 * PS_PER_US);
    assert_eq!(vl0, 0, "low priority must starve");
    assert!(vl1 > 0);
    // The starved VL is visible in the switch output's per-VL wait.
    let c = f.port_counters("sw0", 3).unwrap();
    assert!(c.vl_xmit_wait_ps[0] > 250 * PS_PER_US);
    assert_eq!(c.vl_xmit_wait_ps[1], 0);
}

#[test]
fn high_priority_within_its_limit_leaves_low_priority_a_share() {
    // Limit 1 = 4096 bytes = 64 units: high sends while its count is below 64, i.e. 13
    // packets of 5 blocks (65 units), then low gets one packet.
    let (_f, log) = two_vls_into_one(&format!(
        "{SL_TO_VL_0_1}qos_vlarb_high 1:255\nqos_vlarb_low 0:255\nqos_high_limit 1\n"
    ));
    let [vl0, vl1] = per_vl_after(&log, 50 * PS_PER_US);
    let ratio = vl1 as f64 / vl0 as f64;
    assert!(
        (ratio - 13.0).abs() < 0.2,
        "VL1/VL0 = {ratio} ({vl1}/{vl0})"
    );
}

#[test]
fn fat_tree_all_to_all_delivers_everything_over_balanced_uplinks() {
    let t = Topology::fat_tree_2(8, 32).unwrap();
    let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
    let names: Vec<String> = (0..32).map(|i| format!("h{i}")).collect();
    let lids: Vec<u16> = names.iter().map(|n| f.lid(n).unwrap()).collect();
    let log = shared();
    for (i, n) in names.iter().enumerate() {
        let dsts: Vec<u16> = lids.iter().copied().filter(|&l| l != lids[i]).collect();
        f.attach(
            n,
            Box::new(SprayingSource::new(dsts, 1024, 4, i as u32, log.clone())),
        )
        .unwrap();
    }
    f.run_until(2_000 * PS_PER_US);
    let l = log.borrow();
    assert_eq!(l.sent, 32 * 31 * 4);
    assert_eq!(l.rx.len() as u64, l.sent);
    assert_eq!(f.packets_in_flight(), 0);
    assert_eq!(f.total_counters().errors(), 0);
    // Leaf 0's four uplinks (ports 5..8) carry equal shares of its 4 hosts' remote traffic.
    let up: Vec<u64> = (5..=8)
        .map(|p| f.port_counters("leaf0", p).unwrap().port_xmit_pkts)
        .collect();
    assert_eq!(up.iter().sum::<u64>(), 4 * 28 * 4);
    assert!(up.iter().all(|&u| u == up[0]), "uplinks {up:?}");
}

const SCENARIO: &str = r#"
seed = 3
[fabric]
sample_interval_us = 10
rx_buffer_bytes = 8192
[topology]
kind = "fat-tree-2"
switch_ports = 4
hosts = 8
"#;

fn run_scenario() -> (Vec<softib_fabric::fabric::CounterSample>, Vec<(u64, u32)>) {
    let s = Scenario::parse(SCENARIO).unwrap();
    let mut f = s.build().unwrap();
    let lids: Vec<u16> = (0..8).map(|i| f.lid(&format!("h{i}")).unwrap()).collect();
    let log = shared();
    for i in 0..8usize {
        // A permutation plus an incast on h0: congestion, back-pressure, waits.
        let dsts = vec![lids[(i + 3) % 8], lids[0]];
        f.attach(
            &format!("h{i}"),
            Box::new(SprayingSource::new(dsts, 2048, 50, i as u32, log.clone())),
        )
        .unwrap();
    }
    f.run_until(200 * PS_PER_US);
    let rx = log.borrow().rx.iter().map(|r| (r.at, r.flow)).collect();
    (f.samples().to_vec(), rx)
}

#[test]
fn same_scenario_same_run() {
    let (a_samples, a_rx) = run_scenario();
    let (b_samples, b_rx) = run_scenario();
    assert!(a_samples.len() > 100);
    assert!(a_rx.len() > 100);
    assert_eq!(a_samples, b_samples);
    assert_eq!(a_rx, b_rx);
    // The incast made somebody wait, so the series is not trivially zero.
    assert!(a_samples.iter().any(|s| s.counters.xmit_wait_ps > 0));
}
