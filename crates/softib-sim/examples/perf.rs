//! Simulator throughput on the issue's reference workloads, either with a raw-packet traffic
//! source (line-rate streams of 4096-byte payloads: the link layer alone) or, for the `rc-`
//! cases, with the real RC transport engine on every host running write_bw (RDMA WRITEs,
//! MTU 4096, 16 in flight):
//!
//! ```sh
//! cargo run --release -p softib-fabric --example perf -- rc-one-to-one  # 1 s, engine, 64 KiB WRITEs
//! cargo run --release -p softib-fabric --example perf -- rc-incast      # 1 s, engine, 8 -> 1
//! cargo run --release -p softib-fabric --example perf -- rc-permutation # 1 ms, engine, 3456 hosts, 16 KiB
//! cargo run --release -p softib-fabric --example perf -- rc-permutation-36 # the same, 11,664 hosts
//! ```
//!
//! With `--features mpi`, `mpirun -np N perf CASE --mpi` runs partition r in rank r
//! (`softib_sim::mpi_exchange`); rank 0 prints the figures, summed over the ranks.
//!
//! ```sh
//! cargo run --release -p softib-fabric --example perf -- one-to-one     # 1 s, 1 -> 1 via one switch
//! cargo run --release -p softib-fabric --example perf -- incast         # 1 s, 8 -> 1 on one switch
//! cargo run --release -p softib-fabric --example perf -- permutation    # 1 ms, 3456-host 3-level fat tree (ftree routing;
//!                                                                      # add `minhop` for OpenSM minhop tables)
//! ```
//!
//! `--threads N` (after the case) runs the fabric as N partitions on N threads
//! (`softib_fabric::parallel`; the figures are identical to one thread's, only the wall
//! time differs).
//!
//! Prints wall time, simulated/wall ratio, packet-hops (data packets sent on any link) per
//! wall second, events, and peak resident memory. The wall clock is read here, by the
//! harness, never by the simulator.

use softib_fabric::engine_hca::{EngineHca, HostApp};
use softib_fabric::fabric::{Fabric, FabricConfig, Partitioning};
use softib_fabric::hca::{Endpoint, HcaTx};
use softib_fabric::packet::Packet;
use softib_fabric::parallel::run_threads;
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
fn rc_flows(f: &mut Fabric, flows: &[(usize, usize)], size: u32, owns: &dyn Fn(usize) -> bool) {
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
        if !owns(hosts[i]) {
            continue;
        }
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

/// Builds `case`, with the endpoints of the hosts `owns` accepts (by node index).
fn build(case: &str, minhop: bool, owns: &dyn Fn(usize) -> bool) -> (Fabric, Picos) {
    match case {
        "one-to-one" => {
            let mut f = Fabric::new(
                Topology::single_switch(2, 36).unwrap(),
                FabricConfig::default(),
            )
            .unwrap();
            let d = f.lid("h1").unwrap();
            if owns(0) {
                f.attach("h0", Box::new(Stream { dlid: d, len: LEN }))
                    .unwrap();
            }
            if owns(1) {
                f.attach("h1", Box::new(Sink)).unwrap();
            }
            (f, PS_PER_S)
        }
        "incast" => {
            let mut f = Fabric::new(
                Topology::single_switch(9, 36).unwrap(),
                FabricConfig::default(),
            )
            .unwrap();
            let d = f.lid("h8").unwrap();
            let hosts: Vec<usize> = f.topology().hcas().collect();
            for (i, &node) in hosts.iter().enumerate().take(8) {
                if owns(node) {
                    f.attach(&format!("h{i}"), Box::new(Stream { dlid: d, len: LEN }))
                        .unwrap();
                }
            }
            if owns(hosts[8]) {
                f.attach("h8", Box::new(Sink)).unwrap();
            }
            (f, PS_PER_S)
        }
        "permutation" => {
            let t = Topology::fat_tree_3(24).unwrap();
            let n = t.hcas().count();
            let routing = if minhop {
                RoutingEngine::MinHop
            } else {
                RoutingEngine::Ftree
            };
            let cfg = FabricConfig {
                routing,
                ..FabricConfig::default()
            };
            let mut f = Fabric::new(t, cfg).unwrap();
            let hosts: Vec<usize> = f.topology().hcas().collect();
            for (i, &node) in hosts.iter().enumerate() {
                let d = f.lid(&format!("h{}", (i + n / 2) % n)).unwrap();
                if owns(node) {
                    f.attach(&format!("h{i}"), Box::new(Stream { dlid: d, len: LEN }))
                        .unwrap();
                }
            }
            (f, PS_PER_MS)
        }
        "rc-one-to-one" => {
            let t = Topology::single_switch(2, 36).unwrap();
            let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
            rc_flows(&mut f, &[(0, 1)], 65_536, owns);
            (f, PS_PER_S)
        }
        "rc-incast" => {
            let t = Topology::single_switch(9, 36).unwrap();
            let mut f = Fabric::new(t, FabricConfig::default()).unwrap();
            let flows: Vec<(usize, usize)> = (0..8).map(|i| (i, 8)).collect();
            rc_flows(&mut f, &flows, 65_536, owns);
            (f, PS_PER_S)
        }
        c if c == "rc-permutation" || c.starts_with("rc-permutation-") => {
            // rc-permutation-K: switches of K ports (default 24).
            let k: u8 = c.strip_prefix("rc-permutation-").map_or(24, |k| {
                k.parse().expect("rc-permutation-K takes a port count")
            });
            let t = Topology::fat_tree_3(k).unwrap();
            let n = t.hcas().count();
            let cfg = FabricConfig {
                routing: RoutingEngine::Ftree,
                ..FabricConfig::default()
            };
            let mut f = Fabric::new(t, cfg).unwrap();
            let flows: Vec<(usize, usize)> = (0..n).map(|i| (i, (i + n / 2) % n)).collect();
            rc_flows(&mut f, &flows, 16_384, owns);
            (f, PS_PER_MS)
        }
        other => {
            eprintln!(
                "unknown case `{other}`: one-to-one, incast, permutation, rc-one-to-one, rc-incast, rc-permutation, rc-permutation-36"
            );
            std::process::exit(2);
        }
    }
}

/// What the report needs from one fabric (or one partition: the sums are the run's).
#[derive(Default)]
struct Figures {
    counters: softib_fabric::counters::PortCounters,
    events: u64,
    pending: usize,
    delivered: u64,
    buffers: usize,
    queue_bytes: usize,
    /// Sum over the ports this fabric runs of a hash of (node, port, every counter): equal
    /// sums mean, but for a hash collision, equal counters everywhere.
    digest: u64,
}

/// FNV-1a of `bytes`.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// See [`Figures::digest`].
fn port_digest(f: &Fabric) -> u64 {
    let mut sum = 0u64;
    for (n, node) in f.topology().nodes.iter().enumerate() {
        if !f.owns(&node.name) {
            continue;
        }
        for p in 1..=node.ports {
            let c = f.port_counters(&node.name, p).expect("the port exists");
            sum = sum.wrapping_add(fnv(format!("{n}:{p}:{c:?}").as_bytes()));
        }
    }
    sum
}

impl Figures {
    fn of(f: &Fabric) -> Self {
        Figures {
            counters: f.total_counters(),
            events: f.events_processed(),
            pending: f.events_pending(),
            delivered: f.packets_delivered(),
            buffers: f.packet_buffers(),
            queue_bytes: f.event_queue_bytes(),
            digest: port_digest(f),
        }
    }

    fn add(&mut self, o: Figures) {
        let (c, d) = (&mut self.counters, &o.counters);
        c.port_xmit_pkts += d.port_xmit_pkts;
        c.port_rcv_errors += d.port_rcv_errors;
        c.port_rcv_switch_relay_errors += d.port_rcv_switch_relay_errors;
        c.port_xmit_discards += d.port_xmit_discards;
        c.excessive_buffer_overrun_errors += d.excessive_buffer_overrun_errors;
        c.vl15_dropped += d.vl15_dropped;
        c.port_rcv_remote_physical_errors += d.port_rcv_remote_physical_errors;
        c.symbol_error_counter += d.symbol_error_counter;
        c.link_error_recovery_counter += d.link_error_recovery_counter;
        c.link_downed_counter += d.link_downed_counter;
        c.port_xmit_constraint_errors += d.port_xmit_constraint_errors;
        c.port_rcv_constraint_errors += d.port_rcv_constraint_errors;
        c.local_link_integrity_errors += d.local_link_integrity_errors;
        self.events += o.events;
        self.pending += o.pending;
        self.delivered += o.delivered;
        self.buffers += o.buffers;
        self.queue_bytes += o.queue_bytes;
        self.digest = self.digest.wrapping_add(o.digest);
    }
}

/// One rank of `mpirun -np N perf CASE --mpi`: partition `rank` of N, the figures summed
/// over the ranks and printed by rank 0.
#[cfg(feature = "mpi")]
fn run_mpi(case: &str, minhop: bool, serial: Fabric, duration: Picos) {
    use softib_sim::mpi_exchange::MpiExchange;
    let universe = mpi::initialize().expect("MPI initialises once");
    let mut ex = MpiExchange::new(mpi::topology::Communicator::duplicate(&universe.world()));
    let (rank, ranks) = (ex.rank(), ex.size());
    let p = Partitioning::by_leaf_groups(serial.topology(), ranks, serial.config().link_delay_ps)
        .expect("partitioning");
    drop(serial);
    let mut f = build(case, minhop, &|n| p.owner(n) == rank).0;
    let start = Instant::now();
    softib_fabric::parallel::run_distributed(&p, rank, &mut f, duration, &mut ex)
        .expect("distributed run");
    let wall = start.elapsed().as_secs_f64();
    let fig = Figures::of(&f);
    let c = &fig.counters;
    let hops = ex.sum(c.port_xmit_pkts);
    let events = ex.sum(fig.events);
    let delivered = ex.sum(fig.delivered);
    let errors = ex.sum(c.errors());
    let rss = ex.sum((peak_rss_mib() * 1024.0) as u64);
    // Wrapping sum of the ranks' digests: the same as one fabric's.
    let digests = ex.gather_to_all(fig.digest);
    let digest = digests.iter().fold(0u64, |a, &d| a.wrapping_add(d));
    if rank == 0 {
        println!("case                 {case}");
        println!(
            "ranks                {ranks} (lookahead {} ps)",
            p.lookahead()
        );
        println!(
            "simulated            {:.6} s",
            duration as f64 / PS_PER_S as f64
        );
        println!("wall                 {wall:.3} s");
        println!("packet-hops          {hops}");
        println!("events               {events}");
        println!("delivered            {delivered}");
        println!("errors               {errors}");
        println!("counters digest      {digest:016x}");
        println!("peak RSS, all ranks  {:.1} MiB", rss as f64 / 1024.0);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args.get(1).cloned().unwrap_or_else(|| "one-to-one".into());
    let minhop = args.iter().any(|a| a == "minhop");
    let threads: usize = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .map_or(1, |v| v.parse().expect("--threads takes a number"));
    let build_start = Instant::now();
    let (mut f, duration) = build(&case, minhop, &|_| true);
    // SOFTIB_PERF_US shortens or lengthens the run (for profiling).
    let duration = std::env::var("SOFTIB_PERF_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(duration, |us| us * 1_000_000);
    let build_time = build_start.elapsed();
    let start = Instant::now();
    #[cfg(feature = "mpi")]
    if args.iter().any(|a| a == "--mpi") {
        run_mpi(&case, minhop, f, duration);
        return;
    }
    let fig = if threads <= 1 {
        f.run_until(duration);
        Figures::of(&f)
    } else {
        let cfg = f.config().clone();
        let p = Partitioning::by_leaf_groups(f.topology(), threads, cfg.link_delay_ps)
            .expect("partitioning");
        drop(f);
        println!(
            "partitions           {threads} (lookahead {} ps)",
            p.lookahead()
        );
        let parts = run_threads(
            &p,
            duration,
            |me| Ok(build(&case, minhop, &|n| p.owner(n) == me).0),
            |_, f| Figures::of(&f),
        )
        .expect("partitioned run");
        let mut all = Figures::default();
        for part in parts {
            all.add(part);
        }
        all
    };
    let wall = start.elapsed().as_secs_f64();
    let c = &fig.counters;
    let hops = c.port_xmit_pkts;
    println!("case                 {case}");
    println!("threads              {threads}");
    println!("build                {:.3} s", build_time.as_secs_f64());
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
    println!("events               {}", fig.events);
    println!(
        "events / wall s      {:.3} M",
        fig.events as f64 / wall / 1e6
    );
    println!("events pending       {}", fig.pending);
    println!("delivered            {}", fig.delivered);
    println!("packet buffers       {}", fig.buffers);
    println!(
        "event queue          {:.1} MiB",
        fig.queue_bytes as f64 / 1048576.0
    );
    println!("errors               {}", c.errors());
    println!("counters digest      {:016x}", fig.digest);
    println!("peak RSS             {:.1} MiB", peak_rss_mib());
}
