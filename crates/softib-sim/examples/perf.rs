//! Simulator throughput on the issue's reference workloads, either with a raw-packet traffic
//! source (line-rate streams of 4096-byte payloads: the link layer alone) or, for the `rc-`
//! cases, with the real RC transport engine on every host running write_bw (RDMA WRITEs,
//! MTU 4096, 16 in flight):
//!
//! ```sh
//! cargo run --release -p softib-sim --example perf -- rc-one-to-one  # 1 s, engine, 64 KiB WRITEs
//! cargo run --release -p softib-sim --example perf -- rc-incast      # 1 s, engine, 8 -> 1
//! cargo run --release -p softib-sim --example perf -- rc-permutation # 1 ms, engine, 3456 hosts, 16 KiB
//! cargo run --release -p softib-sim --example perf -- one-to-one     # 1 s, 1 -> 1 via one switch
//! cargo run --release -p softib-sim --example perf -- incast         # 1 s, 8 -> 1 on one switch
//! cargo run --release -p softib-sim --example perf -- permutation    # 1 ms, 3456-host 3-level fat tree (ftree routing;
//!                                                                      # add `minhop` for OpenSM minhop tables)
//! ```
//!
//! Prints wall time, simulated/wall ratio, packet-hops (data packets sent on any link) per
//! wall second, events, and peak resident memory. The wall clock is read here, by the
//! harness, never by the simulator.

use softib_fabric::engine_hca::{EngineHca, HostApp};
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::hca::{Endpoint, HcaTx};
use softib_fabric::packet::Packet;
use softib_fabric::routing::RoutingEngine;
use softib_fabric::time::{Picos, PS_PER_MS, PS_PER_S};
use softib_fabric::topology::Topology;
use softib_sim::apps::perftest::{device, rc_connect, rc_side_with, Passive, WriteBw, ZeroMemory};
use softib_transport::{Device, Mtu};
use softib_wire::lrh::{Lnh, LrhPacket, LrhRepr};
use std::time::Instant;

/// Streams fixed-size packets to one destination for ever.
struct Stream {
    dlid: u16,
    len: usize,
}

impl Endpoint for Stream {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        while tx.has_room(0) {
            let lrh = LrhRepr {
                vl: 0,
                lver: 0,
                sl: 0,
                lnh: Lnh::Bth,
                dlid: self.dlid,
                pkt_len_words: ((self.len - 2) / 4) as u16,
                slid: tx.lid(),
            };
            tx.send(self.dlid, 0, self.len, 0, |b| {
                let _ = lrh.emit(&mut LrhPacket::new_unchecked(&mut b[..8]));
            })
            .expect("room was checked");
        }
    }
    fn on_receive(&mut self, _p: &Packet, _tx: &mut HcaTx<'_>) {}
    fn next_wakeup(&self) -> Option<Picos> {
        None
    }
    fn on_timer(&mut self, _tx: &mut HcaTx<'_>) {}
}

struct Sink;
impl Endpoint for Sink {
    fn on_transmit_ready(&mut self, _tx: &mut HcaTx<'_>) {}
    fn on_receive(&mut self, _p: &Packet, _tx: &mut HcaTx<'_>) {}
    fn next_wakeup(&self) -> Option<Picos> {
        None
    }
    fn on_timer(&mut self, _tx: &mut HcaTx<'_>) {}
}

const LEN: usize = 4096 + 26; // LRH + BTH + payload + ICRC + VCRC

/// Connects an RC QP pair for every (source, destination) host pair and attaches engines:
/// sources run write_bw with `size`-byte WRITEs, 16 in flight. As with perftest, nobody
/// reads the buffers: they are `ZeroMemory` (the packets carry the zeros a zeroed buffer
/// would give; nothing is stored).
fn rc_flows(f: &mut Fabric, flows: &[(usize, usize)], size: u32) {
    let hosts: Vec<usize> = f.topology().hcas().collect();
    let mut devices: Vec<Option<Device>> = hosts
        .iter()
        .enumerate()
        .map(|(i, _)| Some(device(f.lid(&format!("h{i}")).unwrap(), i as u64)))
        .collect();
    let mut apps: Vec<Vec<WriteBw>> = (0..hosts.len()).map(|_| Vec::new()).collect();
    for &(s, d) in flows {
        let (ls, ld) = (
            f.lid(&format!("h{s}")).unwrap(),
            f.lid(&format!("h{d}")).unwrap(),
        );
        let zero = || Box::new(ZeroMemory::new(size as usize));
        let a = rc_side_with(devices[s].as_mut().unwrap(), zero(), 0x1000_0000).unwrap();
        let b = rc_side_with(devices[d].as_mut().unwrap(), zero(), 0x2000_0000).unwrap();
        rc_connect(devices[s].as_mut().unwrap(), &a, &b, ld, 0, Mtu::M4096, 14).unwrap();
        rc_connect(devices[d].as_mut().unwrap(), &b, &a, ls, 0, Mtu::M4096, 14).unwrap();
        apps[s].push(WriteBw::new(a, b, size, 16, None));
    }
    for (i, dev) in devices.iter_mut().enumerate() {
        let app: Box<dyn HostApp> = match apps[i].pop() {
            Some(a) => Box::new(a),
            None => Box::new(Passive),
        };
        let hca = EngineHca::new(dev.take().unwrap(), app);
        f.attach(&format!("h{i}"), Box::new(hca)).unwrap();
    }
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let case = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "one-to-one".into());
    let build_start = Instant::now();
    let (mut f, duration) = match case.as_str() {
        "one-to-one" => {
            let mut f = Fabric::new(
                Topology::single_switch(2, 36).unwrap(),
                FabricConfig::default(),
            )
            .unwrap();
            let d = f.lid("h1").unwrap();
            f.attach("h0", Box::new(Stream { dlid: d, len: LEN }))
                .unwrap();
            f.attach("h1", Box::new(Sink)).unwrap();
            (f, PS_PER_S)
        }
        "incast" => {
            let mut f = Fabric::new(
                Topology::single_switch(9, 36).unwrap(),
                FabricConfig::default(),
            )
            .unwrap();
            let d = f.lid("h8").unwrap();
            for i in 0..8 {
                f.attach(&format!("h{i}"), Box::new(Stream { dlid: d, len: LEN }))
                    .unwrap();
            }
            f.attach("h8", Box::new(Sink)).unwrap();
            (f, PS_PER_S)
        }
        "permutation" => {
            let t = Topology::fat_tree_3(24).unwrap();
            let n = t.hcas().count();
            let routing = match std::env::args().nth(2).as_deref() {
                Some("minhop") => RoutingEngine::MinHop,
                _ => RoutingEngine::Ftree,
            };
            let cfg = FabricConfig {
                routing,
                ..FabricConfig::default()
            };
            let mut f = Fabric::new(t, cfg).unwrap();
            for i in 0..n {
                let d = f.lid(&format!("h{}", (i + n / 2) % n)).unwrap();
                f.attach(&format!("h{i}"), Box::new(Stream { dlid: d, len: LEN }))
                    .unwrap();
            }
            (f, PS_PER_MS)
        }
        "rc-one-to-one" => {
            let t = Topology::single_switch(2, 36).unwrap();
            let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
            rc_flows(&mut f, &[(0, 1)], 65_536);
            (f, PS_PER_S)
        }
        "rc-incast" => {
            let t = Topology::single_switch(9, 36).unwrap();
            let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
            let flows: Vec<(usize, usize)> = (0..8).map(|i| (i, 8)).collect();
            rc_flows(&mut f, &flows, 65_536);
            (f, PS_PER_S)
        }
        "rc-permutation" => {
            let t = Topology::fat_tree_3(24).unwrap();
            let n = t.hcas().count();
            let cfg = FabricConfig {
                routing: RoutingEngine::Ftree,
                ..FabricConfig::default()
            };
            let mut f = Fabric::new(t, cfg).unwrap();
            let flows: Vec<(usize, usize)> = (0..n).map(|i| (i, (i + n / 2) % n)).collect();
            rc_flows(&mut f, &flows, 16_384);
            (f, PS_PER_MS)
        }
        other => {
            eprintln!(
                "unknown case `{other}`: one-to-one, incast, permutation, rc-one-to-one, rc-incast, rc-permutation"
            );
            std::process::exit(2);
        }
    };
    // SOFTIB_PERF_US shortens or lengthens the run (for profiling).
    let duration = std::env::var("SOFTIB_PERF_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(duration, |us| us * 1_000_000);
    let build = build_start.elapsed();
    let start = Instant::now();
    f.run_until(duration);
    let wall = start.elapsed().as_secs_f64();
    let c = f.total_counters();
    let hops = c.port_xmit_pkts;
    println!("case                 {case}");
    println!("build                {:.3} s", build.as_secs_f64());
    println!(
        "simulated            {:.6} s",
        duration as f64 / PS_PER_S as f64
    );
    println!("wall                 {wall:.3} s");
    println!(
        "wall / simulated     {:.3}",
        wall / (duration as f64 / PS_PER_S as f64)
    );
    println!("packet-hops          {hops}");
    println!("packet-hops / wall s {:.3} M", hops as f64 / wall / 1e6);
    println!("events               {}", f.events_processed());
    println!(
        "events / wall s      {:.3} M",
        f.events_processed() as f64 / wall / 1e6
    );
    println!("events pending       {}", f.events_pending());
    println!("delivered            {}", f.packets_delivered());
    println!("packet buffers       {}", f.packet_buffers());
    println!(
        "event queue          {:.1} MiB",
        f.event_queue_bytes() as f64 / 1048576.0
    );
    println!("errors               {}", c.errors());
    println!("peak RSS             {:.1} MiB", peak_rss_mib());
}
