//! The real transport engine on simulated HCAs: RC write_bw over native IB links.

mod support;

use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::time::{Picos, PS_PER_US};
use softib_fabric::topology::Topology;
use softib_transport::Mtu;
use support::engine::*;

const MSG: u32 = 64 * 1024;

/// h0 runs write_bw (64 KiB RDMA WRITEs, 16 in flight) to h1 over one 4x EDR cable.
fn write_bw_b2b(delay_ps: Picos, rx_buffer_bytes: u32, end: Picos) -> (Fabric, BwStats) {
    let mut t = Topology::back_to_back();
    t.links[0].delay_ps = Some(delay_ps);
    let cfg = FabricConfig {
        rx_buffer_bytes,
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let (l0, l1) = (f.lid("h0").unwrap(), f.lid("h1").unwrap());
    let mut d0 = device(l0, 1);
    let mut d1 = device(l1, 2);
    let s0 = rc_side(&mut d0, MSG as usize, 0x1000_0000).unwrap();
    let s1 = rc_side(&mut d1, MSG as usize, 0x2000_0000).unwrap();
    // Local ACK timeout 14 (67 ms): no spurious retransmission in these runs.
    rc_connect(&mut d0, &s0, &s1, l1, 0, Mtu::M4096, 14).unwrap();
    rc_connect(&mut d1, &s1, &s0, l0, 0, Mtu::M4096, 14).unwrap();
    let app = WriteBw::new(s0, s1, MSG, 16, None);
    f.attach("h0", Box::new(EngineHca::new(d0, Box::new(app))))
        .unwrap();
    f.attach("h1", Box::new(EngineHca::new(d1, Box::new(Passive))))
        .unwrap();
    f.run_until(end);
    let stats = app_stats(&mut f, "h0");
    (f, stats)
}

fn app_stats(f: &mut Fabric, host: &str) -> BwStats {
    f.endpoint_mut::<EngineHca>(host, 1)
        .unwrap()
        .app::<WriteBw>()
        .unwrap()
        .stats()
        .clone()
}

fn messages_between(stats: &BwStats, from: Picos, to: Picos) -> u64 {
    stats.completed_between(from / 1000, to / 1000)
}

/// Wire bytes of one 64 KiB RDMA WRITE at MTU 4096: WRITE_FIRST carries a RETH.
fn message_wire_bytes() -> u64 {
    let lrh_bth_icrc_vcrc = 8 + 12 + 4 + 2;
    let first = lrh_bth_icrc_vcrc + 16 + 4096;
    let rest = 15 * (lrh_bth_icrc_vcrc + 4096);
    first + rest
}

#[test]
fn rc_write_bw_reaches_the_fraction_headers_and_flow_control_allow() {
    let from = 200 * PS_PER_US;
    let to = 2_200 * PS_PER_US;
    let (f, stats) = write_bw_b2b(10_000, 64 * 1024, to);
    assert!(stats.errors.is_empty());
    let msgs = messages_between(&stats, from, to) as f64;
    let goodput = msgs * MSG as f64 * 8.0 / ((to - from) as f64 * 1e-12);
    // 100 Gb/s data rate x payload / wire bytes, the wire also carrying the flow-control
    // packets h0 sends (6 bytes each: one per ACK it receives and the 65,536-symbol
    // refresh), counted per message over the whole run.
    let h0 = f.port_counters("h0", 1).unwrap();
    let data_pkts_per_msg = 16.0;
    let fc_per_msg = h0.fc_packets_sent as f64 * data_pkts_per_msg / h0.port_xmit_pkts as f64;
    assert!(
        fc_per_msg > 0.0 && fc_per_msg < 2.0,
        "{fc_per_msg} FCPs per message"
    );
    let expected = 100e9 * MSG as f64 / (message_wire_bytes() as f64 + 6.0 * fc_per_msg);
    assert!(
        (goodput / expected - 1.0).abs() < 0.01,
        "goodput {:.3} Gb/s, expected {:.3} Gb/s",
        goodput / 1e9,
        expected / 1e9
    );
    eprintln!(
        "write_bw goodput {:.3} Gb/s, computed {:.3} Gb/s ({:+.3}%), {fc_per_msg:.3} FCPs per message",
        goodput / 1e9,
        expected / 1e9,
        (goodput / expected - 1.0) * 100.0
    );
    assert_eq!(h0.errors(), 0);
    assert_eq!(f.total_counters().excessive_buffer_overrun_errors, 0);
}

#[test]
fn rc_write_bw_with_a_buffer_below_the_bdp_falls_in_proportion_without_loss() {
    // 2 us each way, 16 KiB of buffer: 3 packets of 65 blocks per credit round trip.
    let delay = 2 * PS_PER_US;
    let from = 300 * PS_PER_US;
    let to = 2_300 * PS_PER_US;
    let (mut small, s_stats) = write_bw_b2b(delay, 16 * 1024, to);
    let (mut big, b_stats) = write_bw_b2b(delay, 128 * 1024, to);
    let ms = messages_between(&s_stats, from, to) as f64;
    let mb = messages_between(&b_stats, from, to) as f64;
    // WRITE_FIRST is 4138 bytes = 65 blocks too, so every packet is 65 blocks.
    let pkt_ps = (4096 + 26) as f64 * 80.0;
    let rtt = pkt_ps + 2.0 * delay as f64 + 6.0 * 80.0;
    let expected_ratio = 3.0 * pkt_ps / rtt;
    let ratio = ms / mb;
    assert!(
        (ratio - expected_ratio).abs() < 0.02,
        "throughput ratio {ratio:.4}, expected {expected_ratio:.4}"
    );
    let w_small = small.port_counters("h0", 1).unwrap().port_xmit_wait(1_000);
    let w_big = big.port_counters("h0", 1).unwrap().port_xmit_wait(1_000);
    assert!(
        w_small > 100 * w_big.max(1),
        "PortXmitWait {w_small} vs {w_big}"
    );
    // No loss anywhere: no link errors, no overrun, and the engine never retransmitted.
    for f in [&mut small, &mut big] {
        assert_eq!(f.total_counters().errors(), 0);
        let hca = f.endpoint_mut::<EngineHca>("h0", 1).unwrap();
        let c = hca.device().counters();
        assert_eq!(c.qp.retransmitted_packets, 0);
        assert_eq!(c.qp.local_ack_timeouts, 0);
        assert_eq!(hca.encap_counters().rx_malformed, 0);
    }
    assert!(s_stats.errors.is_empty() && b_stats.errors.is_empty());
}

#[test]
fn rc_through_a_fat_tree_delivers_byte_exact_data() {
    // Two hosts on different leaves of a small two-level fat tree, with bit errors on every
    // cable: the engine's retransmissions repair what the links corrupt.
    let t = Topology::fat_tree_2(4, 8).unwrap();
    let cfg = FabricConfig {
        bit_error_rate: 2e-7,
        seed: 9,
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let (la, lb) = (f.lid("h0").unwrap(), f.lid("h7").unwrap());
    let mut da = device(la, 3);
    let mut db = device(lb, 4);
    let sa = rc_side(&mut da, MSG as usize, 0x1000_0000).unwrap();
    let sb = rc_side(&mut db, MSG as usize, 0x2000_0000).unwrap();
    let pattern: Vec<u8> = (0..MSG).map(|i| (i * 7 + 3) as u8).collect();
    softib_transport::Memory::write(da.memory_mut(sa.keys.lkey).unwrap(), 0, &pattern);
    // Local ACK timeout 8 (1 ms): lost packets are retransmitted within the run.
    rc_connect(&mut da, &sa, &sb, lb, 0, Mtu::M4096, 8).unwrap();
    rc_connect(&mut db, &sb, &sa, la, 0, Mtu::M4096, 8).unwrap();
    let app = WriteBw::new(sa, sb, MSG, 4, None);
    f.attach("h0", Box::new(EngineHca::new(da, Box::new(app))))
        .unwrap();
    f.attach("h7", Box::new(EngineHca::new(db, Box::new(Passive))))
        .unwrap();
    f.run_until(20_000 * PS_PER_US);
    let stats = app_stats(&mut f, "h0");
    assert!(stats.errors.is_empty());
    assert!(stats.completions.len() > 1000);
    let corrupted: u64 = f.total_counters().port_rcv_errors;
    assert!(corrupted > 0, "the links did corrupt packets");
    let hb = f.endpoint_mut::<EngineHca>("h7", 1).unwrap();
    let mut got = vec![0u8; MSG as usize];
    hb.device().memory(sb.keys.lkey).unwrap().read(0, &mut got);
    assert_eq!(got, pattern);
    let ha = f.endpoint_mut::<EngineHca>("h0", 1).unwrap();
    assert!(ha.device().counters().qp.retransmitted_packets > 0);
}

/// h0 writes to h1 whose host takes 10-15 ms to process what it receives; `timeout` is h0's
/// local ACK timeout exponent.
fn slow_responder(timeout: u8) -> Fabric {
    let t = Topology::back_to_back();
    let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
    let (l0, l1) = (f.lid("h0").unwrap(), f.lid("h1").unwrap());
    let mut d0 = device(l0, 1);
    let mut d1 = device(l1, 2);
    let s0 = rc_side(&mut d0, MSG as usize, 0x1000_0000).unwrap();
    let s1 = rc_side(&mut d1, MSG as usize, 0x2000_0000).unwrap();
    rc_connect(&mut d0, &s0, &s1, l1, 0, Mtu::M4096, timeout).unwrap();
    rc_connect(&mut d1, &s1, &s0, l0, 0, Mtu::M4096, timeout).unwrap();
    let app = WriteBw::new(s0, s1, MSG, 4, None);
    f.attach("h0", Box::new(EngineHca::new(d0, Box::new(app))))
        .unwrap();
    let ms = 1_000 * PS_PER_US;
    let responder = EngineHca::new(d1, Box::new(Passive)).with_rx_delay(10 * ms, 15 * ms, 7);
    f.attach("h1", Box::new(responder)).unwrap();
    f.run_until(120 * ms);
    f
}

#[test]
fn a_slow_responder_with_a_short_ack_timeout_causes_a_retransmission_storm() {
    // local_ack_timeout 10: 4.096 us x 2^10 = 4.19 ms, shorter than the 10-15 ms the
    // responder takes: the requester retransmits although the link lost nothing, and the
    // responder sees duplicates.
    let mut short = slow_responder(10);
    assert_eq!(short.total_counters().errors(), 0, "no link errors");
    let retrans = short
        .endpoint_mut::<EngineHca>("h0", 1)
        .unwrap()
        .device()
        .counters()
        .qp
        .retransmitted_packets;
    let dups = short
        .endpoint_mut::<EngineHca>("h1", 1)
        .unwrap()
        .device()
        .counters()
        .qp
        .duplicates_received;
    assert!(retrans > 0, "retransmitted {retrans}");
    assert!(dups > 0, "duplicates {dups}");

    // local_ack_timeout 16 (268 ms): no retransmission, the responder only ever sees each
    // packet once.
    let mut long = slow_responder(16);
    let c = long
        .endpoint_mut::<EngineHca>("h0", 1)
        .unwrap()
        .device()
        .counters();
    assert_eq!(c.qp.retransmitted_packets, 0);
    let c = long
        .endpoint_mut::<EngineHca>("h1", 1)
        .unwrap()
        .device()
        .counters();
    assert_eq!(c.qp.duplicates_received, 0);
    let done_long = app_stats(&mut long, "h0").completions.len();
    let done_short = app_stats(&mut short, "h0").completions.len();
    assert!(done_long > 0);
    assert!(
        done_long >= done_short,
        "goodput with the long timeout ({done_long}) not below the short one ({done_short})"
    );
}

/// Two write_bw QPs on one host, each polling its own CQ.
struct Two(WriteBw, WriteBw);

impl softib_fabric::engine_hca::HostApp for Two {
    fn on_start(&mut self, now: softib_transport::Nanos, dev: &mut softib_transport::Device) {
        self.0.on_start(now, dev);
        self.1.on_start(now, dev);
    }
    fn on_progress(&mut self, now: softib_transport::Nanos, dev: &mut softib_transport::Device) {
        self.0.on_progress(now, dev);
        self.1.on_progress(now, dev);
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[test]
fn an_hca_arbitrates_its_qps_by_vl_and_a_starved_vl_does_not_hold_back_the_other() {
    use softib_fabric::engine_hca::HostApp;
    use softib_fabric::qos::QosOptions;
    // SL0 -> VL0 (high priority, unbounded limit), SL1 -> VL1 (low): the HCA's own port
    // must send VL0 at line rate and starve VL1, although the engine offers both QPs'
    // packets in turn.
    let qos = QosOptions::from_opensm_conf(
        "qos_max_vls 2\nqos_sl2vl 0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0\n\
         qos_vlarb_high 0:255\nqos_vlarb_low 1:255\nqos_high_limit 255\n",
    )
    .unwrap();
    let cfg = FabricConfig {
        qos: Some(qos),
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(Topology::back_to_back(), cfg).unwrap();
    let (l0, l1) = (f.lid("h0").unwrap(), f.lid("h1").unwrap());
    let mut d0 = device(l0, 1);
    let mut d1 = device(l1, 2);
    let mut apps = Vec::new();
    for sl in 0..2u8 {
        let a = rc_side(&mut d0, MSG as usize, 0x1000_0000 + sl as u64 * 0x100_0000).unwrap();
        let b = rc_side(&mut d1, MSG as usize, 0x2000_0000 + sl as u64 * 0x100_0000).unwrap();
        rc_connect(&mut d0, &a, &b, l1, sl, Mtu::M4096, 20).unwrap();
        rc_connect(&mut d1, &b, &a, l0, sl, Mtu::M4096, 20).unwrap();
        apps.push(WriteBw::new(a, b, MSG, 16, None));
    }
    let app1 = apps.pop().unwrap();
    let app0 = apps.pop().unwrap();
    let app: Box<dyn HostApp> = Box::new(Two(app0, app1));
    f.attach("h0", Box::new(EngineHca::new(d0, app))).unwrap();
    f.attach("h1", Box::new(EngineHca::new(d1, Box::new(Passive))))
        .unwrap();
    let from = 200 * PS_PER_US;
    let to = 1_200 * PS_PER_US;
    f.run_until(to);
    let hca = f.endpoint_mut::<EngineHca>("h0", 1).unwrap();
    let two = hca.app::<Two>().unwrap();
    let vl0 = two.0.stats().completed_between(from / 1000, to / 1000) as f64;
    let vl1 = two.1.stats().completed_between(0, to / 1000);
    let goodput = vl0 * MSG as f64 * 8.0 / ((to - from) as f64 * 1e-12);
    let expected = 100e9 * MSG as f64 / message_wire_bytes() as f64;
    assert!(
        (goodput / expected - 1.0).abs() < 0.01,
        "VL0 at {:.2} Gb/s, expected {:.2}",
        goodput / 1e9,
        expected / 1e9
    );
    assert_eq!(vl1, 0, "the low-priority VL is starved");
    let c = f.port_counters("h0", 1).unwrap();
    assert!(c.vl_xmit_wait_ps[1] > 900 * PS_PER_US);
}
