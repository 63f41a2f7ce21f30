//! Link down and up: packets for a down port are discarded and counted, packets on the wire
//! are lost, credits are re-initialised at retraining, and the transport engine recovers.

mod support;

use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::time::PS_PER_US;
use softib_fabric::topology::Topology;
use softib_transport::Mtu;
use support::engine::*;
use support::*;

#[test]
fn a_down_link_discards_at_the_switch_and_traffic_resumes_at_line_rate() {
    let t = Topology::single_switch(2, 8).unwrap();
    let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
    let log = shared();
    let dlid = f.lid("h1").unwrap();
    f.attach(
        "h0",
        Box::new(RawSource::new(dlid, 0, 4096, u64::MAX, 1, log.clone())),
    )
    .unwrap();
    f.attach("h1", Box::new(Sink { log: log.clone() })).unwrap();
    f.schedule_link_state("sw0", 2, 50 * PS_PER_US, false)
        .unwrap();
    f.schedule_link_state("h1", 1, 100 * PS_PER_US, true)
        .unwrap();
    f.run_until(200 * PS_PER_US);

    for (n, p) in [("sw0", 2), ("h1", 1)] {
        assert_eq!(f.port_counters(n, p).unwrap().link_downed_counter, 1);
    }
    let discards = f.port_counters("sw0", 2).unwrap().port_xmit_discards;
    assert!(discards > 100, "{discards} discarded");
    let l = log.borrow();
    // Nothing arrives while the link is down (after what was already on the wire).
    let during =
        l.rx.iter()
            .filter(|r| r.at > 51 * PS_PER_US && r.at < 100 * PS_PER_US)
            .count();
    assert_eq!(during, 0);
    // After retraining, line rate again: 4122-byte packets at 80 ps per byte.
    let after =
        l.rx.iter()
            .filter(|r| r.at >= 120 * PS_PER_US && r.at < 200 * PS_PER_US)
            .count() as f64;
    let line = 80.0 * PS_PER_US as f64 / (4122.0 * 80.0);
    assert!((after - line).abs() <= 2.0, "{after} vs {line:.1}");
    // Every packet h0 sent is delivered, discarded, lost on the wire (at most the few in
    // flight at the instant the link dropped) or still in the fabric.
    let sent = l.sent;
    let accounted = l.rx.len() as u64 + discards + f.packets_in_flight() as u64;
    assert!(
        sent >= accounted && sent - accounted <= 2,
        "sent {sent}, accounted {accounted}"
    );
    assert_eq!(f.total_counters().excessive_buffer_overrun_errors, 0);
}

#[test]
fn rc_recovers_from_a_link_flap_with_retransmissions() {
    let t = Topology::single_switch(2, 8).unwrap();
    let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
    let (l0, l1) = (f.lid("h0").unwrap(), f.lid("h1").unwrap());
    let mut d0 = device(l0, 1);
    let mut d1 = device(l1, 2);
    let s0 = rc_side(&mut d0, 65_536, 0x1000_0000).unwrap();
    let s1 = rc_side(&mut d1, 65_536, 0x2000_0000).unwrap();
    let pattern: Vec<u8> = (0..65_536u32).map(|i| (i * 13 + 5) as u8).collect();
    d0.memory_mut(s0.keys.lkey).unwrap().write(0, &pattern);
    // Local ACK timeout 8: 1.05 ms.
    rc_connect(&mut d0, &s0, &s1, l1, 0, Mtu::M4096, 8).unwrap();
    rc_connect(&mut d1, &s1, &s0, l0, 0, Mtu::M4096, 8).unwrap();
    f.attach(
        "h0",
        Box::new(EngineHca::new(
            d0,
            Box::new(WriteBw::new(s0, s1, 65_536, 8, None)),
        )),
    )
    .unwrap();
    f.attach("h1", Box::new(EngineHca::new(d1, Box::new(Passive))))
        .unwrap();
    f.schedule_link_state("h0", 1, 200 * PS_PER_US, false)
        .unwrap();
    f.schedule_link_state("h0", 1, 700 * PS_PER_US, true)
        .unwrap();
    f.run_until(10_000 * PS_PER_US);
    let hca = f.endpoint_mut::<EngineHca>("h0", 1).unwrap();
    let stats = hca.app::<WriteBw>().unwrap().stats().clone();
    assert!(stats.errors.is_empty(), "{:?}", stats.errors);
    assert!(hca.device().counters().qp.retransmitted_packets > 0);
    // Completions before the flap and well after it.
    assert!(stats.completed_between(0, 200_000) > 0);
    assert!(stats.completed_between(3_000_000, 10_000_000) > 100);
    let h1 = f.endpoint_mut::<EngineHca>("h1", 1).unwrap();
    let mut got = vec![0u8; 65_536];
    h1.device().memory(s1.keys.lkey).unwrap().read(0, &mut got);
    assert_eq!(got, pattern);
    assert_eq!(f.port_counters("h0", 1).unwrap().link_downed_counter, 1);
}
