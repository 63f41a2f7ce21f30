//! The congestion-marking hook: a marker sees the output VL's queue and the FECN it sets
//! reaches the destination engine, which returns BECN to the source; the head-of-line wait
//! it is offered blames the congested output, never an idle one whose packets are stuck
//! behind heads bound elsewhere.

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

/// Records, per output port, the largest head-of-line wait and output-queued view seen at
/// a grant; marks nothing.
struct Recorder {
    seen: Rc<std::cell::RefCell<std::collections::BTreeMap<u8, (u32, u32)>>>,
}

impl CongestionMarker for Recorder {
    fn mark(&mut self, state: &OutputState, _packet: &PacketMeta) -> bool {
        let mut seen = self.seen.borrow_mut();
        let e = seen.entry(state.port).or_default();
        e.0 = e.0.max(state.head_wait_blocks);
        e.1 = e.1.max(state.queued_blocks);
        false
    }
}

#[test]
fn the_head_of_line_wait_blames_the_congested_output_not_the_one_behind_it() {
    // h1..h3 send to h4 and h0 alternates between h4 and h5 (the head-of-line case of
    // tests/switching.rs): h0's packets for the idle h5 wait in the switch's input FIFO
    // behind its packets for the congested h4.
    let t = Topology::single_switch(6, 8).unwrap();
    let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
    let seen = Rc::new(std::cell::RefCell::new(std::collections::BTreeMap::new()));
    f.set_congestion_marker(Box::new(Recorder { seen: seen.clone() }));
    let log = support::shared();
    let (h4, h5) = (f.lid("h4").unwrap(), f.lid("h5").unwrap());
    f.attach(
        "h0",
        Box::new(support::SprayingSource::new(
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
            Box::new(support::SprayingSource::new(
                vec![h4],
                4096,
                1_000_000,
                i,
                log.clone(),
            )),
        )
        .unwrap();
    }
    f.attach("h4", Box::new(support::Sink { log: log.clone() }))
        .unwrap();
    f.attach("h5", Box::new(support::Sink { log })).unwrap();
    f.run_until(200 * PS_PER_US);
    let seen = seen.borrow();
    // Switch ports 5 and 6 lead to h4 and h5; a 4 KiB packet is 65 blocks.
    let (wait_h4, _) = seen[&5];
    let (wait_h5, queued_h5) = seen[&6];
    eprintln!("h4 port: head wait up to {wait_h4} blocks; h5 port: {wait_h5}, queued {queued_h5}");
    // At h4's port a head waits for the three other inputs' packets.
    assert!(wait_h4 >= 2 * 65, "head wait at h4's port {wait_h4} blocks");
    // h5's port is idle whenever one of its packets reaches the head: it is never blamed,
    // although packets routed to it pile up behind the heads bound for h4.
    assert!(wait_h5 < 65, "head wait at h5's port {wait_h5} blocks");
    assert!(
        queued_h5 >= 2 * 65,
        "h5's port had only {queued_h5} blocks routed to it"
    );
}
