//! Bit errors on links: CRC failures are counted and dropped where IBA says, credits of the
//! lost packets come back through the FCTBS resynchronisation, and runs stay reproducible.

mod support;

use softib_fabric::fabric::{Fabric, FabricConfig, Forwarding};
use softib_fabric::time::PS_PER_MS;
use softib_fabric::topology::Topology;
use support::*;

fn b2b(ber: f64, rx_buffer_bytes: u32, seed: u64, count: u64) -> (Fabric, Shared) {
    let mut t = Topology::back_to_back();
    t.links[0].bit_error_rate = Some(ber);
    let cfg = FabricConfig {
        rx_buffer_bytes,
        seed,
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let log = shared();
    let dlid = f.lid("h1").unwrap();
    f.attach(
        "h0",
        Box::new(RawSource::new(dlid, 0, 4096, count, 1, log.clone())),
    )
    .unwrap();
    f.attach("h1", Box::new(Sink { log: log.clone() })).unwrap();
    f.run_until(40 * PS_PER_MS);
    (f, log)
}

#[test]
fn corrupted_packets_are_counted_dropped_and_their_credits_recovered() {
    let ber = 1e-6;
    let n = 20_000;
    let (f, log) = b2b(ber, 64 * 1024, 1, n);
    let errors = f.port_counters("h1", 1).unwrap().port_rcv_errors;
    let delivered = log.borrow().rx.len() as u64;
    // P(a 4122-byte packet has a bit error) = 1 - (1 - ber)^(8 x 4122).
    let p = 1.0 - (1.0 - ber).powf(8.0 * 4122.0);
    let sigma = (p * (1.0 - p) / n as f64).sqrt();
    let rate = errors as f64 / n as f64;
    assert!(
        (rate - p).abs() < 4.0 * sigma,
        "error rate {rate}, expected {p}"
    );
    // Every packet either arrived or was dropped for its CRC; none is stuck, none overran.
    assert_eq!(delivered + errors, n);
    assert_eq!(f.packets_in_flight(), 0);
    let total = f.total_counters();
    assert_eq!(total.excessive_buffer_overrun_errors, 0);
    assert_eq!(total.port_rcv_errors, errors);
}

#[test]
fn a_small_buffer_survives_losing_credits_to_drops() {
    // 3 packets of window: each drop withholds 65 blocks until h0's next flow-control packet
    // carries its FCTBS; the link slows down but never deadlocks.
    let (f, log) = b2b(1e-5, 16 * 1024, 2, 2_000);
    let errors = f.port_counters("h1", 1).unwrap().port_rcv_errors;
    assert!(errors > 100, "{errors} errors");
    assert_eq!(log.borrow().rx.len() as u64 + errors, 2_000);
    assert_eq!(f.packets_in_flight(), 0);
}

#[test]
fn bit_errors_are_reproducible_from_the_seed() {
    let count = |seed| {
        let (f, log) = b2b(1e-6, 64 * 1024, seed, 3_000);
        let at: Vec<u64> = log.borrow().rx.iter().map(|r| r.at).collect();
        (f.port_counters("h1", 1).unwrap().port_rcv_errors, at)
    };
    assert_eq!(count(7), count(7));
    assert_ne!(count(7).1, count(8).1);
}

fn through_switch(mode: Forwarding) -> (Fabric, u64) {
    let mut t = Topology::single_switch(2, 8).unwrap();
    // Only the h0 -- switch cable is noisy.
    let l = t
        .links
        .iter()
        .position(|l| t.nodes[l.a.node].name == "h0")
        .unwrap();
    t.links[l].bit_error_rate = Some(2e-6);
    let cfg = FabricConfig {
        forwarding: mode,
        seed: 5,
        ..FabricConfig::default()
    };
    let mut f = Fabric::new(t, cfg).unwrap();
    let log = shared();
    let dlid = f.lid("h1").unwrap();
    f.attach(
        "h0",
        Box::new(RawSource::new(dlid, 0, 4096, 5_000, 1, log.clone())),
    )
    .unwrap();
    f.attach("h1", Box::new(Sink { log: log.clone() })).unwrap();
    f.run_until(20 * PS_PER_MS);
    let got = log.borrow().rx.len() as u64;
    (f, got)
}

#[test]
fn cut_through_forwards_bad_packets_marked_and_store_and_forward_drops_them() {
    let (ct, ct_got) = through_switch(Forwarding::CutThrough);
    let bad = ct.port_counters("sw0", 1).unwrap().port_rcv_errors;
    assert!(bad > 100);
    // Forwarded with EBP: the destination counts a remote physical error and drops it.
    let h1 = ct.port_counters("h1", 1).unwrap();
    assert_eq!(h1.port_rcv_remote_physical_errors, bad);
    assert_eq!(h1.port_rcv_errors, 0);
    assert_eq!(ct_got + bad, 5_000);

    let (sf, sf_got) = through_switch(Forwarding::StoreAndForward);
    let bad = sf.port_counters("sw0", 1).unwrap().port_rcv_errors;
    assert!(bad > 100);
    let h1 = sf.port_counters("h1", 1).unwrap();
    assert_eq!(h1.port_rcv_remote_physical_errors, 0);
    assert_eq!(h1.port_rcv_pkts, sf_got);
    assert_eq!(sf_got + bad, 5_000);
    for f in [&ct, &sf] {
        assert_eq!(f.packets_in_flight(), 0);
        assert_eq!(f.total_counters().excessive_buffer_overrun_errors, 0);
    }
}
