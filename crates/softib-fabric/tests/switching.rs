//! Switches end to end: VL arbitration on a congested output, forwarding over a fat tree,
//! determinism of a whole run.

mod support;

use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::qos::QosOptions;
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

/// A 2-level fat tree of 4-port switches with 8 hosts, seed 3, 8 KiB receive buffers,
/// counters sampled every 10 us.
fn sampled_fat_tree() -> Fabric {
    let cfg = FabricConfig {
        seed: 3,
        sample_interval_ps: Some(10 * PS_PER_US),
        rx_buffer_bytes: 8192,
        ..FabricConfig::default()
    };
    Fabric::new(Topology::fat_tree_2(4, 8).unwrap(), cfg).unwrap()
}

fn run_scenario() -> (Vec<softib_fabric::fabric::CounterSample>, Vec<(u64, u32)>) {
    let mut f = sampled_fat_tree();
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

/// h0 on a 4x HDR link sprays packets to h1 and h2 on 4x EDR links through one switch.
fn fast_input_two_outputs(speedup_permille: u32) -> (Fabric, Shared) {
    use softib_fabric::link::{LinkRate, LinkSpeed, LinkWidth};
    let mut t = Topology::single_switch(3, 8).unwrap();
    let l = t
        .links
        .iter()
        .position(|l| t.nodes[l.a.node].name == "h0")
        .unwrap();
    t.links[l].rate = Some(LinkRate::new(LinkWidth::X4, LinkSpeed::Hdr));
    let cfg = FabricConfig {
        crossbar_speedup_permille: speedup_permille,
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let log = shared();
    let dsts = vec![f.lid("h1").unwrap(), f.lid("h2").unwrap()];
    f.attach(
        "h0",
        Box::new(SprayingSource::new(dsts, 4096, 100_000, 0, log.clone())),
    )
    .unwrap();
    f.attach("h1", Box::new(Sink { log: log.clone() })).unwrap();
    f.attach("h2", Box::new(Sink { log: log.clone() })).unwrap();
    f.run_until(300 * PS_PER_US);
    (f, log)
}

#[test]
fn crossbar_speedup_lets_one_input_feed_two_outputs() {
    let edr_pkts_per_window = 250.0 * PS_PER_US as f64 / ((4096 + OVERHEAD) as f64 * 80.0);
    // Speed-up 1: the input's crossbar port moves one packet at a time at the output's
    // (EDR) rate, so h1 and h2 share 100 Gb/s although h0 brings 200 Gb/s.
    let (slow, log) = fast_input_two_outputs(1000);
    let n1 = log
        .borrow()
        .rx
        .iter()
        .filter(|r| r.at >= 50 * PS_PER_US)
        .count() as f64;
    assert!(
        (n1 / edr_pkts_per_window - 1.0).abs() < 0.02,
        "speed-up 1: {n1}"
    );
    // Speed-up 2: each transfer takes half an output packet time; both outputs run at line
    // rate.
    let (fast, log) = fast_input_two_outputs(2000);
    let n2 = log
        .borrow()
        .rx
        .iter()
        .filter(|r| r.at >= 50 * PS_PER_US)
        .count() as f64;
    assert!(
        (n2 / edr_pkts_per_window - 2.0).abs() < 0.04,
        "speed-up 2: {n2}"
    );
    // The slow crossbar backs up into h0's link: h0 waits for credits.
    assert!(
        slow.port_counters("h0", 1).unwrap().xmit_wait_ps
            > 10 * fast.port_counters("h0", 1).unwrap().xmit_wait_ps.max(1)
    );
}

#[test]
fn head_of_line_blocking_holds_a_victim_flow_to_the_congested_share() {
    // h0..h3 send to h4 (4:1 incast); h0 alternates its packets between h4 and h5 on the
    // same VL. h0's packets for the idle h5 wait in the switch input FIFO behind packets for
    // the congested h4, so h0 -> h5 gets h0's quarter share of h4's port instead of the 75%
    // of a link that is free for it (the victim flow of the congestion-control issue).
    let t = Topology::single_switch(6, 8).unwrap();
    let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
    let log = shared();
    let h4 = f.lid("h4").unwrap();
    let h5 = f.lid("h5").unwrap();
    f.attach(
        "h0",
        Box::new(SprayingSource::new(
            vec![h4, h5],
            4096,
            1_000_000,
            0,
            log.clone(),
        )),
    )
    .unwrap();
    for i in 1..4 {
        f.attach(
            &format!("h{i}"),
            Box::new(SprayingSource::new(
                vec![h4],
                4096,
                1_000_000,
                i,
                log.clone(),
            )),
        )
        .unwrap();
    }
    f.attach("h4", Box::new(Sink { log: log.clone() })).unwrap();
    f.attach("h5", Box::new(Sink { log: log.clone() })).unwrap();
    f.run_until(500 * PS_PER_US);
    let window = 400.0 * PS_PER_US as f64;
    let line = window / ((4096 + OVERHEAD) as f64 * 80.0);
    let h5_rcvd = f.port_counters("h5", 1).unwrap().port_rcv_pkts as f64;
    let late: Vec<_> = log
        .borrow()
        .rx
        .iter()
        .filter(|r| r.at >= 100 * PS_PER_US)
        .copied()
        .collect();
    let victim = late.iter().filter(|r| r.flow == 0).count() as f64;
    // Flow 0 packets arrive at h4 and h5 alternately; its total is half h4-bound, half
    // h5-bound.
    let victim_to_h5 = victim / 2.0;
    assert!(h5_rcvd > 0.0);
    assert!(
        (victim_to_h5 / line - 0.25).abs() < 0.03,
        "victim at {:.3} of line",
        victim_to_h5 / line
    );
    assert_eq!(f.total_counters().errors(), 0);
}

#[test]
fn counter_samples_are_periodic_and_monotonic() {
    let mut f = sampled_fat_tree();
    let log = shared();
    let d = f.lid("h7").unwrap();
    f.attach(
        "h0",
        Box::new(SprayingSource::new(vec![d], 1024, 10_000, 0, log.clone())),
    )
    .unwrap();
    f.run_until(100 * PS_PER_US);
    let samples = f.samples();
    // 10 samples (every 10 us) of every cabled port: 8 hosts + 4 leaves x 4 + 2 spines x 4.
    let cabled_ports = 8 + 4 * 4 + 2 * 4;
    assert_eq!(samples.len(), 10 * cabled_ports);
    let h0: Vec<_> = samples.iter().filter(|s| s.node == 0).collect();
    assert_eq!(h0.len(), 10);
    for w in h0.windows(2) {
        assert_eq!(w[1].time - w[0].time, 10 * PS_PER_US);
        assert!(w[1].counters.port_xmit_pkts >= w[0].counters.port_xmit_pkts);
        assert!(w[1].counters.port_xmit_data >= w[0].counters.port_xmit_data);
    }
    assert!(h0.last().unwrap().counters.port_xmit_pkts > 0);
}

#[test]
fn sl2vl_is_per_input_output_pair() {
    use softib_fabric::qos::Sl2Vl;
    // Two data VLs; the switch maps SL0 to VL1 from port 1 to port 3 only.
    let t = Topology::single_switch(3, 8).unwrap();
    let cfg = FabricConfig {
        qos: Some(
            QosOptions::from_opensm_conf("qos_max_vls 2\nqos_vlarb_low 0:64,1:64\n").unwrap(),
        ),
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let mut table = [0u8; 16];
    table[0] = 1;
    f.set_switch_sl2vl("sw0", 1, 3, Sl2Vl(table)).unwrap();
    assert!(f.set_switch_sl2vl("sw0", 1, 9, Sl2Vl(table)).is_err());
    let log = shared();
    let dst = f.lid("h2").unwrap();
    for (i, h) in ["h0", "h1"].iter().enumerate() {
        f.attach(
            h,
            Box::new(RawSource::new(dst, 0, 256, 50, i as u32, log.clone())),
        )
        .unwrap();
    }
    f.attach("h2", Box::new(Sink { log: log.clone() })).unwrap();
    f.run_until(100 * PS_PER_US);
    let l = log.borrow();
    assert_eq!(l.rx.len(), 100);
    // h0 (port 1) arrives on VL1, h1 (port 2) on VL0, both with SL0.
    assert!(l.rx.iter().filter(|r| r.flow == 0).all(|r| r.vl == 1));
    assert!(l.rx.iter().filter(|r| r.flow == 1).all(|r| r.vl == 0));
}
