//! Criterion benchmarks of the simulator's hot paths:
//! `cargo bench -p softib-fabric --bench hot_paths`.
//!
//! - the event queue in a steady state (pop one, push one a little later), at the pending
//!   counts of a small and of a 3456-host fabric;
//! - the credit check and VL arbitration of one output decision;
//! - 20 us of a saturated 4x EDR link through one switch (raw packets), per packet-hop.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use softib_fabric::credits::TxCredits;
use softib_fabric::event::{EventQueue, Tie};
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::hca::{Endpoint, HcaTx};
use softib_fabric::packet::Packet;
use softib_fabric::time::{Picos, PS_PER_US};
use softib_fabric::topology::Topology;
use softib_fabric::vlarb::{ArbEntry, VlArbConfig, VlArbiter};

fn event_queue(c: &mut Criterion) {
    let mut g = c.benchmark_group("event_queue");
    for pending in [16usize, 50_000] {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut q = EventQueue::new();
        let mut now = 0u64;
        let mut count = 0u64;
        for i in 0..pending {
            q.push(
                rng.gen_range(0..400_000),
                Tie::new(1 + i as u32 % 64, count),
                i as u32,
            );
            count += 1;
        }
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("pop_push_{pending}_pending"), |b| {
            b.iter(|| {
                let (t, e) = q.pop().expect("steady state");
                now = t;
                // Ties as the fabric makes them: 64 entities, each counting its events.
                q.push(
                    now + 1 + (e as u64 * 7919) % 400_000,
                    Tie::new(1 + e % 64, count),
                    e,
                );
                count += 1;
            })
        });
    }
    g.finish();
}

fn arbitration(c: &mut Criterion) {
    let arb = VlArbiter::new(VlArbConfig {
        high: vec![ArbEntry { vl: 1, weight: 64 }],
        low: (0..8).map(|vl| ArbEntry { vl, weight: 32 }).collect(),
        high_limit: 4,
    });
    let mut credits = TxCredits::new();
    credits.on_fccl(1000);
    c.bench_function("credit_check_and_vl_arbitration", |b| {
        let mut arb = arb.clone();
        b.iter(|| {
            let mut ready = 0u16;
            for vl in 0..8 {
                if credits.can_send(black_box(65)) {
                    ready |= 1 << vl;
                }
            }
            let g = arb.select(ready).expect("ready VLs");
            arb.commit(g, 65);
            g.vl
        })
    });
}

/// Streams 4122-byte packets to `Some(dlid)`; `None` only receives.
struct Stream(Option<u16>);
impl Endpoint for Stream {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        let Some(dlid) = self.0 else {
            return;
        };
        while tx.has_room(0) {
            tx.send(dlid, 0, 4122, 0, |b| b[..8].fill(0)).expect("room");
        }
    }
    fn on_receive(&mut self, _p: &Packet, _tx: &mut HcaTx<'_>) {}
    fn next_wakeup(&self) -> Option<Picos> {
        None
    }
    fn on_timer(&mut self, _tx: &mut HcaTx<'_>) {}
}

fn link_through_switch(c: &mut Criterion) {
    let mut g = c.benchmark_group("fabric");
    // 20 us at 4x EDR: 60 packets x 2 hops.
    g.throughput(Throughput::Elements(121));
    g.bench_function("edr_one_switch_20us", |b| {
        b.iter_batched(
            || {
                let t = Topology::single_switch(2, 8).expect("topology");
                let mut f = Fabric::new(t, FabricConfig::default()).expect("fabric");
                let d = f.lid("h1").expect("lid");
                f.attach("h0", Box::new(Stream(Some(d)))).expect("attach");
                f.attach("h1", Box::new(Stream(None))).expect("attach");
                f
            },
            |mut f| {
                f.run_until(20 * PS_PER_US);
                f.total_counters().port_xmit_pkts
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, event_queue, arbitration, link_through_switch);
criterion_main!(benches);
