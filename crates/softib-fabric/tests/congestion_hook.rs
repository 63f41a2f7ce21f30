//! The congestion-marking hook: a marker sees the output VL's queue and the FECN it sets
//! reaches the destination engine, which returns BECN to the source.

mod support;

use softib_fabric::congestion::{CongestionMarker, OutputState};
use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::packet::PacketMeta;
use softib_fabric::time::PS_PER_US;
use softib_fabric::topology::Topology;
use softib_transport::Mtu;
use std::cell::Cell;
use std::rc::Rc;
use support::engine::*;

/// Marks every packet leaving an output VL with more than `threshold` blocks queued.
struct Threshold {
    threshold: u32,
    max_seen: Rc<Cell<u32>>,
}

impl CongestionMarker for Threshold {
    fn mark(&mut self, state: &OutputState, _packet: &PacketMeta) -> bool {
        self.max_seen
            .set(self.max_seen.get().max(state.queued_blocks));
        state.queued_blocks > self.threshold
    }
}

/// h0 and h1 write to h2 through one switch (2:1 at the switch port to h2).
fn incast(marker: Option<Threshold>) -> Fabric {
    let t = Topology::single_switch(3, 8).unwrap();
    let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
    if let Some(m) = marker {
        f.set_congestion_marker(Box::new(m));
    }
    let l2 = f.lid("h2").unwrap();
    // The destination answers FECN with BECN (Annex A10 notification, engine `cc.notify`).
    let mut cfg = device_config(l2);
    cfg.cc.notify = true;
    let mut d2 = softib_transport::Device::new(cfg, 10);
    for i in 0..2u16 {
        let li = f.lid(&format!("h{i}")).unwrap();
        let mut d = device(li, i as u64);
        let a = rc_side(&mut d, 65_536, 0x1000_0000).unwrap();
        let b = rc_side(&mut d2, 65_536, 0x2000_0000 + i as u64 * 0x100_0000).unwrap();
        rc_connect(&mut d, &a, &b, l2, 0, Mtu::M4096, 14).unwrap();
        rc_connect(&mut d2, &b, &a, li, 0, Mtu::M4096, 14).unwrap();
        let app = WriteBw::new(a, b, 65_536, 16, None);
        f.attach(&format!("h{i}"), Box::new(EngineHca::new(d, Box::new(app))))
            .unwrap();
    }
    f.attach("h2", Box::new(EngineHca::new(d2, Box::new(Passive))))
        .unwrap();
    f.run_until(300 * PS_PER_US);
    f
}

#[test]
fn fecn_marked_at_a_congested_output_comes_back_as_becn() {
    let max_seen = Rc::new(Cell::new(0));
    let mut f = incast(Some(Threshold {
        threshold: 200,
        max_seen: max_seen.clone(),
    }));
    // The 2:1 output backs up into both input buffers (1024 blocks each).
    assert!(
        max_seen.get() > 200,
        "queue peaked at {} blocks",
        max_seen.get()
    );
    assert!(max_seen.get() <= 2 * 1024 + 2 * 65);
    let marked = f.port_counters("sw0", 3).unwrap().fecn_marked;
    assert!(marked > 100, "{marked} marked");
    let fecn_rcvd = f
        .endpoint_mut::<EngineHca>("h2", 1)
        .unwrap()
        .device()
        .counters()
        .qp
        .fecn_received;
    // Every mark reaches the destination engine, but for the packet on the wire at the end.
    assert!(
        fecn_rcvd <= marked && marked - fecn_rcvd <= 1,
        "{fecn_rcvd} FECN received for {marked} marked"
    );
    let becn: u64 = (0..2)
        .map(|i| {
            f.endpoint_mut::<EngineHca>(&format!("h{i}"), 1)
                .unwrap()
                .device()
                .counters()
                .qp
                .becn_received
        })
        .sum();
    assert!(becn > 0, "the destination returned BECN in its ACKs");
    // Only the congested output marks.
    for p in [1, 2] {
        assert_eq!(f.port_counters("sw0", p).unwrap().fecn_marked, 0);
    }
}

#[test]
fn without_a_marker_nothing_is_marked() {
    let mut f = incast(None);
    assert_eq!(f.total_counters().fecn_marked, 0);
    let c = f
        .endpoint_mut::<EngineHca>("h2", 1)
        .unwrap()
        .device()
        .counters();
    assert_eq!(c.qp.fecn_received, 0);
    // The queue exists all the same: the switch reports it.
    assert!(f.queued_blocks("sw0", 3, 0).unwrap() > 0);
}
