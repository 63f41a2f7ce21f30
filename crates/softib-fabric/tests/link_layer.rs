//! Link-layer behaviour with numbers computed from first principles: line-rate fraction,
//! credit-limited throughput, PortXmitWait, cut-through and store-and-forward latency, VL15
//! drops.

mod support;

use softib_fabric::credits::FC_PACKET_BYTES;
use softib_fabric::fabric::{Fabric, FabricConfig, Forwarding};
use softib_fabric::link::{LinkRate, LinkSpeed, LinkWidth};
use softib_fabric::time::{Picos, PS_PER_US};
use softib_fabric::topology::Topology;
use support::*;

const EDR_PS_PER_BYTE: u64 = 80;

fn edr_b2b(delay_ps: Picos, rx_buffer_bytes: u32) -> (Fabric, Shared) {
    let mut t = Topology::back_to_back();
    t.links[0].delay_ps = Some(delay_ps);
    let cfg = FabricConfig {
        rx_buffer_bytes,
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let log = shared();
    let dlid = f.lid("h1").unwrap();
    f.attach(
        "h0",
        Box::new(RawSource::new(dlid, 0, 4096, u64::MAX, 1, log.clone())),
    )
    .unwrap();
    f.attach("h1", Box::new(Sink { log: log.clone() })).unwrap();
    (f, log)
}

/// Packets whose tail arrived in [from, to).
fn count_between(log: &Shared, from: Picos, to: Picos) -> u64 {
    log.borrow()
        .rx
        .iter()
        .filter(|r| r.at >= from && r.at < to)
        .count() as u64
}

#[test]
fn saturated_edr_link_carries_the_fraction_headers_and_flow_control_allow() {
    let (mut f, log) = edr_b2b(10_000, 64 * 1024);
    let from = 100 * PS_PER_US;
    let to = 1_100 * PS_PER_US;
    f.run_until(to);
    let pkt_len = (4096 + OVERHEAD) as u64;
    let pkt_ps = pkt_len * EDR_PS_PER_BYTE;
    // h0's link also carries h0's own periodic flow-control packets (it receives no data, so
    // only the refresh at least every 65,536 symbol times, which the fabric schedules early
    // enough that a maximum-size packet in progress cannot make it late).
    let rate = LinkRate::new(LinkWidth::X4, LinkSpeed::Edr);
    let period = rate.symbol_times_ps(65_536);
    let interval = period - rate.serialize_ps(2047 * 4 + 2);
    let fc_ps = FC_PACKET_BYTES * EDR_PS_PER_BYTE;
    let window = to - from;
    let busy_fraction = 1.0 - fc_ps as f64 / interval as f64;
    let expected_pkts = window as f64 * busy_fraction / pkt_ps as f64;
    let got = count_between(&log, from, to) as f64;
    assert!(
        (got - expected_pkts).abs() <= 1.0,
        "got {got} packets, expected {expected_pkts:.2}"
    );
    // Payload goodput as a fraction of the 100 Gb/s data rate.
    let goodput = got * 4096.0 * 8.0 / (window as f64 * 1e-12) / 100e9;
    let expected = 4096.0 / pkt_len as f64 * busy_fraction;
    assert!(
        (goodput - expected).abs() < 0.001,
        "{goodput} vs {expected}"
    );
    let c = f.port_counters("h0", 1).unwrap();
    assert_eq!(c.excessive_buffer_overrun_errors, 0);
    assert_eq!(f.total_counters().excessive_buffer_overrun_errors, 0);
    // Plenty of credit: the sender never waited beyond link bring-up (one flow-control
    // round trip).
    assert!(c.xmit_wait_ps <= 20_000, "xmit wait {} ps", c.xmit_wait_ps);
    // PortXmitData counts words LRH..ICRC.
    assert_eq!(c.port_xmit_data, c.port_xmit_pkts * (pkt_len - 2) / 4);
}

#[test]
fn buffer_below_bandwidth_delay_product_cuts_throughput_in_proportion() {
    // 400 m of fibre each way: 2 us. A 16 KiB buffer is 256 blocks, room for 3 packets of
    // 65 blocks; the credit of each packet returns one packet time + two propagation delays
    // + one flow-control packet after it started. So 3 packets per credit round trip.
    let delay = 2 * PS_PER_US;
    let (mut small, log_small) = edr_b2b(delay, 16 * 1024);
    let (mut big, log_big) = edr_b2b(delay, 1024 * 1024);
    let from = 200 * PS_PER_US;
    let to = 1_200 * PS_PER_US;
    small.run_until(to);
    big.run_until(to);
    let pkt_ps = (4096 + OVERHEAD) as u64 * EDR_PS_PER_BYTE;
    let rtt = pkt_ps + 2 * delay + FC_PACKET_BYTES * EDR_PS_PER_BYTE;
    let window_pkts = (16 * 1024 / 64) / 65;
    assert_eq!(window_pkts, 3);
    let expected = (to - from) as f64 / rtt as f64 * window_pkts as f64;
    let got = count_between(&log_small, from, to) as f64;
    assert!(
        (got - expected).abs() <= window_pkts as f64,
        "credit-limited: got {got}, expected {expected:.1}"
    );
    let got_big = count_between(&log_big, from, to) as f64;
    let line = (to - from) as f64 / pkt_ps as f64;
    assert!(
        got_big > 0.99 * line,
        "big buffer runs at line rate: {got_big} vs {line}"
    );
    // Throughput in proportion to the buffer: 7 packets per RTT over the line's RTT/pkt_ps.
    let ratio = got / got_big;
    let expected_ratio = window_pkts as f64 * pkt_ps as f64 / rtt as f64;
    assert!(
        (ratio - expected_ratio).abs() < 0.01,
        "{ratio} vs {expected_ratio}"
    );
    // PortXmitWait: the small-buffer sender waits for credits for the rest of each round trip.
    let c_small = small.port_counters("h0", 1).unwrap();
    let c_big = big.port_counters("h0", 1).unwrap();
    let wait_fraction = c_small.xmit_wait_ps as f64 / to as f64;
    assert!(
        (wait_fraction - (1.0 - expected_ratio)).abs() < 0.02,
        "wait fraction {wait_fraction}"
    );
    assert!(c_small.port_xmit_wait(1_000) > 100 * c_big.port_xmit_wait(1_000).max(1));
    assert_eq!(c_small.vl_xmit_wait_ps[0], c_small.xmit_wait_ps);
    // Never a drop for lack of credits, everything sent either arrived or is in flight.
    for f in [&small, &big] {
        assert_eq!(f.total_counters().excessive_buffer_overrun_errors, 0);
        assert_eq!(f.total_counters().errors(), 0);
    }
    let sent = log_small.borrow().sent;
    let rcvd = log_small.borrow().rx.len() as u64;
    assert_eq!(sent, rcvd + small.packets_in_flight() as u64);
}

fn one_packet_through_switch(mode: Forwarding) -> Picos {
    let t = Topology::single_switch(2, 8).unwrap();
    let cfg = FabricConfig {
        forwarding: mode,
        switch_latency_ps: 90_000,
        link_delay_ps: 10_000,
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let log = shared();
    let dlid = f.lid("h1").unwrap();
    f.attach(
        "h0",
        Box::new(RawSource::new(dlid, 0, 1024, 1, 7, log.clone())),
    )
    .unwrap();
    f.attach("h1", Box::new(Sink { log: log.clone() })).unwrap();
    f.run_until(10 * PS_PER_US);
    let l = log.borrow();
    assert_eq!(l.rx.len(), 1);
    l.rx[0].at
}

#[test]
fn cut_through_and_store_and_forward_latency_are_exact() {
    let d = 10_000;
    let lat = 90_000;
    let ser = (1024 + OVERHEAD) as u64 * EDR_PS_PER_BYTE;
    // h0 may send once the switch port's bring-up flow-control packet has arrived.
    let t0 = FC_PACKET_BYTES * EDR_PS_PER_BYTE + d;
    // Cut-through: forwarding starts once the LRH (8 bytes) is in, plus the pipeline latency.
    let ct = t0 + d + 8 * EDR_PS_PER_BYTE + lat + ser + d;
    assert_eq!(one_packet_through_switch(Forwarding::CutThrough), ct);
    let sf = t0 + ser + d + lat + ser + d;
    assert_eq!(one_packet_through_switch(Forwarding::StoreAndForward), sf);
}

#[test]
fn vl15_is_not_flow_controlled_and_overflow_is_counted_as_vl15_dropped() {
    // 4x EDR into the switch, 1x SDR out: the switch's VL15 buffer (2 packets) overflows.
    let mut t = Topology::single_switch(2, 8).unwrap();
    let slow = LinkRate::new(LinkWidth::X1, LinkSpeed::Sdr);
    let out = t
        .links
        .iter()
        .position(|l| t.nodes[l.a.node].name == "h1")
        .unwrap();
    t.links[out].rate = Some(slow);
    let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
    let log = shared();
    let dlid = f.lid("h1").unwrap();
    let mut src = RawSource::new(dlid, 0, 256, 100, 3, log.clone());
    src.management = true;
    f.attach("h0", Box::new(src)).unwrap();
    f.attach("h1", Box::new(Sink { log: log.clone() })).unwrap();
    f.run_until(1_000 * PS_PER_US);
    let dropped = f.port_counters("sw0", 1).unwrap().vl15_dropped;
    let got = log.borrow().rx.len() as u64;
    assert!(dropped > 50, "dropped {dropped}");
    assert_eq!(got + dropped, 100);
    assert!(log.borrow().rx.iter().all(|r| r.vl == 15));
    // Data VLs were never involved: no credit violation anywhere.
    assert_eq!(f.total_counters().excessive_buffer_overrun_errors, 0);
}

#[test]
fn credit_window_is_capped_at_2048_blocks_whatever_the_buffer() {
    // 1 km each way (5 us): the bandwidth-delay product (~129 KB) exceeds the 2048-block
    // (128 KiB) window the modulo-4096 credit arithmetic can express, so even a 1 MiB buffer
    // carries only 31 packets of 65 blocks per credit round trip.
    let delay = 5 * PS_PER_US;
    let (mut f, log) = edr_b2b(delay, 1024 * 1024);
    let from = 200 * PS_PER_US;
    let to = 1_200 * PS_PER_US;
    f.run_until(to);
    let pkt_ps = (4096 + OVERHEAD) as u64 * EDR_PS_PER_BYTE;
    let rtt = pkt_ps + 2 * delay + FC_PACKET_BYTES * EDR_PS_PER_BYTE;
    let window_pkts = 2048 / 65;
    assert_eq!(window_pkts, 31);
    assert!(
        window_pkts * pkt_ps < rtt,
        "the window, not the line, limits"
    );
    let expected = (to - from) as f64 / rtt as f64 * window_pkts as f64;
    let got = count_between(&log, from, to) as f64;
    assert!(
        (got - expected).abs() <= window_pkts as f64,
        "{got} vs {expected:.1}"
    );
    assert_eq!(f.total_counters().errors(), 0);
}

#[test]
fn idle_direction_sends_flow_control_at_least_every_65536_symbol_times() {
    // h0 only sends data; its receive side frees nothing, so its flow-control packets are
    // the bring-up one plus the periodic refresh, due before 65,536 symbol times pass.
    let (mut f, _log) = edr_b2b(10_000, 64 * 1024);
    let end = 10_000 * PS_PER_US;
    f.run_until(end);
    let rate = LinkRate::new(LinkWidth::X4, LinkSpeed::Edr);
    let period = rate.symbol_times_ps(65_536);
    let sent = f.port_counters("h0", 1).unwrap().fc_packets_sent;
    // At least one per period, and (being scheduled one maximum packet early) not many more.
    let min = end / period + 1;
    assert!(
        sent >= min,
        "{sent} flow-control packets in {end} ps, need {min}"
    );
    let interval = period - rate.serialize_ps(2047 * 4 + 2);
    assert!(sent <= end / interval + 2, "{sent}");
    // h1 answers every freed packet: one flow-control packet per data packet (coalesced
    // only when the link is busy, which it is not in this direction).
    let h1 = f.port_counters("h1", 1).unwrap();
    let data = f.port_counters("h0", 1).unwrap().port_xmit_pkts;
    assert!(h1.fc_packets_sent >= data);
}

#[test]
fn xmit_wait_ticks_follow_the_configured_tick() {
    let (mut f, _log) = edr_b2b(2 * PS_PER_US, 16 * 1024);
    f.run_until(500 * PS_PER_US);
    let c = f.port_counters("h0", 1).unwrap();
    assert!(c.xmit_wait_ps > 0);
    assert_eq!(c.port_xmit_wait(1_000), c.xmit_wait_ps / 1_000);
    assert_eq!(c.port_xmit_wait(4_000), c.xmit_wait_ps / 4_000);
    assert_eq!(
        c.classic(1_000).port_xmit_wait as u64,
        (c.xmit_wait_ps / 1_000).min(u32::MAX as u64)
    );
}
