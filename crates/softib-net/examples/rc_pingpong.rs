//! RC SEND ping-pong in the manner of rdma-core's `ibv_rc_pingpong`, with the object API;
//! `-e` waits for completions on a completion channel (an eventfd: what an epoll, mio or
//! tokio loop would watch) instead of polling.
//!
//! ```text
//! # both sides in one process (127.0.0.1 and 127.0.0.2, ephemeral ports); what
//! # `tests/examples.rs` runs: the server waits on its completion channel, the client polls
//! cargo run -p softib-net --example rc_pingpong
//! # two processes or hosts; endpoints over TCP port 18518 (softib's JSON format; for the
//! # stock ibv_rc_pingpong's format use `softib pingpong`)
//! cargo run -p softib-net --example rc_pingpong -- server 127.0.0.2:4791 [-n ITERS] [-s SIZE] [-e]
//! cargo run -p softib-net --example rc_pingpong -- client 127.0.0.1:4791 127.0.0.2 [-n ITERS] [-s SIZE] [-e]
//! ```
//! Every message carries its iteration number and a pattern derived from it; both sides check
//! every byte. The client prints the average round trip.

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{check, fail, Link, Setup};
use softib_net::verbs::{CompletionQueue, Hca, MemoryRegion, QueuePair, RecvRequest, SendRequest};
use softib_transport::harness::empty_wc;
use softib_transport::{QpType, WcOpcode, WorkCompletion};

const NAME: &str = "rc_pingpong";
const PORT: u16 = 18518;
/// Receives kept posted (ibv_rc_pingpong's rx_depth).
const RX_DEPTH: usize = 16;

#[derive(Clone, Copy)]
struct Opts {
    iters: u64,
    size: usize,
    events: bool,
}

fn parse(flags: &[String]) -> Opts {
    let mut o = Opts {
        iters: 1000,
        size: 4096,
        events: false,
    };
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        let mut value = |what: &str| -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| fail(NAME, &format!("{f} needs {what}")))
        };
        match f.as_str() {
            "-n" => o.iters = value("an iteration count"),
            "-s" => o.size = value("a size in bytes") as usize,
            "-e" => o.events = true,
            _ => fail(NAME, &format!("unknown flag {f} (known: -n, -s, -e)")),
        }
    }
    if o.size < 8 {
        fail(NAME, "-s must be at least 8 (the iteration number)");
    }
    o
}

/// Both sides in this process: the server waits on its completion channel, the client
/// polls (what `tests/examples.rs` runs).
pub fn loopback() {
    loopback_with(parse(&[]));
}

fn loopback_with(o: Opts) {
    common::loopback(
        NAME,
        move |hca, link| run(hca, link, Opts { events: true, ..o }, false),
        move |hca, link| run(hca, link, o, true),
    );
}

fn main() {
    let (setup, flags) = common::setup(NAME, "server", "client");
    let o = parse(&flags);
    match setup {
        Setup::Loopback => loopback_with(o),
        Setup::Server { bind } => run(
            common::open(NAME, bind),
            Link::Tcp {
                peer: None,
                port: PORT,
            },
            o,
            false,
        ),
        Setup::Client { bind, host } => run(
            common::open(NAME, bind),
            Link::Tcp {
                peer: Some(host),
                port: PORT,
            },
            o,
            true,
        ),
    }
}

fn fill(buf: &mut [u8], iter: u64) {
    buf[..8].copy_from_slice(&iter.to_le_bytes());
    for (i, b) in buf[8..].iter_mut().enumerate() {
        *b = (iter as usize * 13 + i) as u8;
    }
}

fn intact(buf: &[u8], iter: u64) -> bool {
    buf[..8] == iter.to_le_bytes()
        && buf[8..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (iter as usize * 13 + i) as u8)
}

/// Waits for the next completion: by polling, or on the CQ's completion channel.
fn next(cq: &CompletionQueue, events: bool, wcs: &mut [WorkCompletion]) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(wc) = cq.poll(&mut wcs[..1]).first() {
            return *wc;
        }
        if Instant::now() > deadline {
            fail(NAME, "no completion within 30 s");
        }
        if !events {
            continue;
        }
        // Arm, then look again: a completion that arrived before the arming raises no
        // event (the libibverbs "completion event" pattern).
        cq.req_notify(false);
        if let Some(wc) = cq.poll(&mut wcs[..1]).first() {
            return *wc;
        }
        let channel = cq.channel().expect("a CQ built with a channel");
        match channel.get_event(Some(Duration::from_secs(30))) {
            Ok(Some(h)) if h == cq.handle() => cq.ack_events(1),
            Ok(Some(h)) => fail(NAME, &format!("an event for another CQ {h:?}")),
            Ok(None) => fail(NAME, "no completion event within 30 s"),
            Err(e) => fail(NAME, &format!("waiting on the completion channel: {e}")),
        }
    }
}

fn post_recv(qp: &QueuePair, mr: &MemoryRegion<Vec<u8>>, size: usize) {
    qp.post_recv(&[RecvRequest::new(0, mr.slice(0..size))])
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
}

fn run(hca: Hca, link: Link, o: Opts, client: bool) {
    let who = if client { "client" } else { "server" };
    let pd = hca.alloc_pd();
    let mut cq = hca.create_cq().set_entries(2 * RX_DEPTH as u32 + 2);
    if o.events {
        let channel = hca
            .create_comp_channel()
            .unwrap_or_else(|e| fail(NAME, &format!("creating a completion channel: {e}")));
        cq = cq.set_channel(&channel);
    }
    let cq = cq.build().unwrap_or_else(|e| fail(NAME, &e.to_string()));
    // Received messages land in `rx`; sends are gathered from `tx`.
    let rx = pd
        .allocate(o.size)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let tx = pd
        .allocate(o.size)
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let prepared = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .set_max_recv_wr(RX_DEPTH as u32)
        .set_max_send_wr(1)
        .build()
        .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    let (qp, theirs) = link.connect(NAME, prepared, &[]);
    for _ in 0..RX_DEPTH {
        post_recv(&qp, &rx, o.size);
    }
    println!(
        "{who}: QP {:#x} at {} connected to QP {:#x} at {}; {} x {} bytes, {}",
        qp.qpn(),
        hca.local_addr(),
        theirs.qpn,
        theirs.gid,
        o.iters,
        o.size,
        if o.events {
            "completion channel"
        } else {
            "polling"
        }
    );
    let mut wcs = [empty_wc(); 1];
    let send = |iter: u64| {
        fill(&mut tx.write(), iter);
        qp.post_send(&[SendRequest::send(iter, tx.slice(..))])
            .unwrap_or_else(|e| fail(NAME, &e.to_string()));
    };
    let start = Instant::now();
    for iter in 0..o.iters {
        if client {
            send(iter);
        }
        // One receive and (on our turn) one send completion per iteration, in any order.
        let (mut received, mut sent) = (false, !client);
        while !(received && sent) {
            let wc = next(&cq, o.events, &mut wcs);
            check(NAME, &wc);
            match wc.opcode {
                WcOpcode::Recv => {
                    if wc.byte_len as usize != o.size || !intact(&rx.read(), iter) {
                        fail(NAME, &format!("{who}: message {iter} arrived damaged"));
                    }
                    post_recv(&qp, &rx, o.size);
                    received = true;
                    if !client {
                        send(iter);
                    }
                }
                WcOpcode::Send => sent = true,
                other => fail(NAME, &format!("unexpected completion {other:?}")),
            }
        }
    }
    let elapsed = start.elapsed();
    if client {
        println!(
            "{who}: {} iterations in {:.3} s: {:.2} us per round trip",
            o.iters,
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / o.iters.max(1) as f64
        );
    } else {
        // The last send must be acknowledged before the device closes.
        let wc = next(&cq, o.events, &mut wcs);
        check(NAME, &wc);
        println!("{who}: {} messages echoed byte-exact", o.iters);
    }
}
