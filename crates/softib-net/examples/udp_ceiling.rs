//! Measures what softib-net's raw socket layer can move on loopback: the ceiling for the
//! RoCEv2 datapath (docs/design/net.md quotes its output).
//!
//! ```text
//! cargo run --release -p softib-net --example udp_ceiling -- [SECONDS]
//! ```
//! For 1 KiB and 4 KiB datagrams it streams from one thread to another with one datagram
//! per system call, with sendmmsg/recvmmsg batches of 64, and with UDP GSO/GRO, and prints
//! received packets/s and Gb/s (UDP payload). Then it measures a 64-byte ping-pong with the
//! receiver busy-polling and with it sleeping in poll(2), and prints half round trips.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softib_net::socket::{RoceSocket, SocketConfig, TxBatch};

#[derive(Clone, Copy)]
struct Mode {
    name: &'static str,
    batch: usize,
    gso: bool,
    gro: bool,
}

const MODES: [Mode; 3] = [
    Mode {
        name: "1 per syscall",
        batch: 1,
        gso: false,
        gro: false,
    },
    Mode {
        name: "mmsg x64",
        batch: 64,
        gso: false,
        gro: false,
    },
    Mode {
        name: "mmsg x64 + GSO/GRO",
        batch: 64,
        gso: true,
        gro: true,
    },
];

fn open(port: u16, gso: bool, gro: bool) -> RoceSocket {
    let mut config = SocketConfig::new(SocketAddr::from(([127, 0, 0, 1], port)));
    config.gso = gso;
    config.gro = gro;
    config.socket_buffer = 8 << 20;
    RoceSocket::bind(&config).expect("bind loopback socket")
}

fn stream(mode: Mode, size: usize, secs: f64) -> (f64, f64, f64) {
    let mut rx = open(0, false, mode.gro);
    let mut tx = open(0, mode.gso, false);
    let dest = rx.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_rx = stop.clone();
    let receiver = std::thread::spawn(move || {
        let mut batch = rx.rx_batch(mode.batch, size + 64);
        let (mut packets, mut bytes) = (0u64, 0u64);
        let start = Instant::now();
        while !stop_rx.load(Ordering::Relaxed) {
            match rx.recv(&mut batch) {
                Ok(0) => {
                    let _ = rx.wait_readable(Some(Duration::from_millis(10)));
                }
                Ok(_) => {
                    for d in batch.iter() {
                        packets += 1;
                        bytes += d.payload.len() as u64;
                    }
                }
                Err(e) => panic!("recv: {e}"),
            }
        }
        (packets, bytes, start.elapsed())
    });
    let gso = tx.stats().gso;
    let mut batch = TxBatch::new(mode.batch * size.max(1), mode.batch, gso);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut seq = 0u32;
    while start.elapsed().as_secs_f64() < secs {
        while batch
            .push_with(dest, None, size, |b, _| {
                b[..4].copy_from_slice(&seq.to_be_bytes());
                size
            })
            .is_ok()
        {
            seq = seq.wrapping_add(1);
        }
        loop {
            match tx.send(&mut batch) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let _ = tx.wait_writable(Some(Duration::from_millis(10)));
                }
                Err(e) => panic!("send: {e}"),
            }
        }
        sent += mode.batch as u64;
    }
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let (packets, bytes, elapsed) = receiver.join().expect("receiver thread");
    let send_secs = start.elapsed().as_secs_f64();
    let rx_secs = elapsed.as_secs_f64();
    (
        packets as f64 / rx_secs,
        bytes as f64 * 8.0 / rx_secs / 1e9,
        sent as f64 / send_secs,
    )
}

fn pingpong(busy: bool, rounds: usize) -> (f64, f64) {
    let mut a = open(0, false, false);
    let mut b = open(0, false, false);
    let (addr_a, addr_b) = (a.local_addr(), b.local_addr());
    let echo = std::thread::spawn(move || {
        let mut rxb = b.rx_batch(1, 128);
        let mut txb = TxBatch::new(128, 1, false);
        let mut done = 0;
        while done < rounds {
            if b.recv(&mut rxb).expect("recv") == 0 {
                if !busy {
                    b.wait_readable(None).expect("poll");
                }
                continue;
            }
            for d in rxb.iter() {
                let n = d.payload.len();
                let p = d.payload;
                txb.push_with(addr_a, None, n, |buf, _| {
                    buf[..n].copy_from_slice(p);
                    n
                })
                .expect("room");
                done += 1;
            }
            b.send(&mut txb).expect("send");
        }
    });
    let mut rxb = a.rx_batch(1, 128);
    let mut txb = TxBatch::new(128, 1, false);
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        txb.push_with(addr_b, None, 64, |_, _| 64).expect("room");
        a.send(&mut txb).expect("send");
        loop {
            if a.recv(&mut rxb).expect("recv") > 0 {
                break;
            }
            if !busy {
                a.wait_readable(None).expect("poll");
            }
        }
        samples.push(t.elapsed().as_nanos() as f64 / 2.0 / 1000.0);
    }
    echo.join().expect("echo thread");
    samples.sort_by(|x, y| x.partial_cmp(y).expect("finite"));
    let median = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    (median, p99)
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let probe = open(0, true, true);
    println!(
        "kernel: UDP GSO {}, UDP GRO {}",
        probe.stats().gso,
        probe.stats().gro
    );
    drop(probe);
    println!(
        "{:<22} {:>6} {:>12} {:>9} {:>12}",
        "mode", "size", "rx pkt/s", "rx Gb/s", "tx pkt/s"
    );
    for size in [1024usize, 4096] {
        for mode in MODES {
            let (pps, gbps, tx_pps) = stream(mode, size, secs);
            println!(
                "{:<22} {:>6} {:>12.0} {:>9.2} {:>12.0}",
                mode.name, size, pps, gbps, tx_pps
            );
        }
    }
    for busy in [true, false] {
        let (median, p99) = pingpong(busy, 20_000);
        println!(
            "64 B ping-pong, {:<12}: half round trip median {:.2} us, p99 {:.2} us",
            if busy { "busy polling" } else { "poll(2) wait" },
            median,
            p99
        );
    }
}
