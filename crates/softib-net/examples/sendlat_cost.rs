//! CPU cost of one RC SEND ping-pong round trip (64 bytes, both sides) against the same
//! ping-pong on plain UDP sockets, measured in a way a loaded machine does not distort:
//! one thread plays both sides in lockstep, as `softib send-lat` runs each side (poll until
//! the receive completes, re-post the receive, post the answer, signaled and inline). In a
//! ping-pong everything either side does lies on the critical path, so the CPU time per
//! round trip (user + system, from /proc/self/stat, which leaves out the time the thread
//! waited for a core) is a floor for the latency two idle cores reach. The UDP reference
//! does what `sockperf ping-pong --nonblocked` does: non-blocking `send_to` and a spinning
//! `recv_from` on each side.
//!
//! ```text
//! cargo run --release -p softib-net --example sendlat_cost -- [SECONDS [udp|softib]]
//! ```
//!
//! A second argument runs only that side (for a profile of one).

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use softib_net::context::{ConnectOptions, Context, WaitMode};
use softib_net::driver::NetConfig;
use softib_transport::harness::empty_wc;
use softib_transport::{
    AccessFlags, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus,
    WrOpcode,
};

const SIZE: u32 = 64;

/// User + system CPU time of this process, in seconds (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat(5), i.e. 11 and 12 after the ')'.
    (ticks(11) + ticks(12)) / 100.0
}

/// One side of the softib ping-pong.
struct Side {
    ctx: Context,
    cq: softib_transport::CqHandle,
    qpn: u32,
    send: SendWr,
    recv: RecvWr,
    received: u64,
    sends_done: u64,
}

impl Side {
    /// Polls once; counts receives and send completions.
    fn poll(&mut self) {
        let mut wcs = [empty_wc(); 8];
        let n = self.ctx.poll_cq(self.cq, &mut wcs);
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            match wc.opcode {
                WcOpcode::Recv => self.received += 1,
                WcOpcode::Send => self.sends_done += 1,
                _ => {}
            }
        }
    }

    /// What `softib send-lat` does on a receive: re-post it, then answer.
    fn answer(&mut self) {
        self.ctx
            .post_recv(self.qpn, std::slice::from_ref(&self.recv))
            .unwrap();
        self.ctx
            .post_send(self.qpn, std::slice::from_ref(&self.send))
            .unwrap();
    }
}

fn softib_side(addr: &str) -> (Side, softib_net::oob::endpoint::Endpoint) {
    let ctx = Context::open(NetConfig::new(addr.parse().unwrap()), WaitMode::default()).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(256).unwrap();
    let mr = ctx.reg_mr(pd, 4096, AccessFlags::all()).unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let qpn = ctx.create_qp(pd, init).unwrap();
    let psn = ctx.random_psn();
    let ep = ctx.endpoint(qpn, psn, &[mr]);
    let sge = |off: u64| Sge {
        addr: mr.addr + off,
        length: SIZE,
        lkey: mr.keys.lkey,
    };
    let send = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        sg_list: vec![sge(0)],
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..SendWr::default()
    };
    let recv = RecvWr {
        wr_id: 2,
        sg_list: vec![sge(1024)],
    };
    let side = Side {
        ctx,
        cq,
        qpn,
        send,
        recv,
        received: 0,
        sends_done: 0,
    };
    (side, ep)
}

/// CPU seconds and wall seconds of `secs` of softib ping-pong; round trips done.
fn softib_pingpong(secs: f64) -> (u64, f64, f64) {
    let (mut a, ea) = softib_side("127.0.0.1:0");
    let (mut b, eb) = softib_side("127.0.0.2:0");
    let o = ConnectOptions::default();
    a.ctx.connect(a.qpn, QpType::Rc, ea.psn, &eb, &o).unwrap();
    b.ctx.connect(b.qpn, QpType::Rc, eb.psn, &ea, &o).unwrap();
    for s in [&a, &b] {
        for _ in 0..16 {
            s.ctx
                .post_recv(s.qpn, std::slice::from_ref(&s.recv))
                .unwrap();
        }
    }
    let (t0, c0) = (Instant::now(), cpu_seconds());
    let end = t0 + Duration::from_secs_f64(secs);
    let mut trips = 0u64;
    a.ctx
        .post_send(a.qpn, std::slice::from_ref(&a.send))
        .unwrap();
    while Instant::now() < end {
        while b.received == trips {
            b.poll();
        }
        b.answer();
        while a.received == trips {
            a.poll();
        }
        trips += 1;
        a.answer();
    }
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
    // Every send was acknowledged (the held ACKs are not lost).
    let settle = Instant::now();
    while (a.sends_done < trips + 1 || b.sends_done < trips || b.received < trips + 1)
        && settle.elapsed() < Duration::from_secs(5)
    {
        a.poll();
        b.poll();
    }
    assert_eq!(a.sends_done, trips + 1, "every SEND of A completed");
    assert_eq!(b.sends_done, trips, "every SEND of B completed");
    (trips, cpu, wall)
}

/// The same on plain non-blocking UDP sockets.
fn udp_pingpong(secs: f64) -> (u64, f64, f64) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.2:0").unwrap();
    for s in [&a, &b] {
        s.set_nonblocking(true).unwrap();
    }
    let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let msg = [7u8; SIZE as usize];
    let mut buf = [0u8; 2048];
    let spin_recv = |s: &UdpSocket, buf: &mut [u8]| loop {
        if let Ok((n, _)) = s.recv_from(buf) {
            return n;
        }
    };
    let (t0, c0) = (Instant::now(), cpu_seconds());
    let end = t0 + Duration::from_secs_f64(secs);
    let mut trips = 0u64;
    while Instant::now() < end {
        a.send_to(&msg, pb).unwrap();
        assert_eq!(spin_recv(&b, &mut buf), msg.len());
        b.send_to(&msg, pa).unwrap();
        assert_eq!(spin_recv(&a, &mut buf), msg.len());
        trips += 1;
    }
    (trips, cpu_seconds() - c0, t0.elapsed().as_secs_f64())
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let only = std::env::args().nth(2).unwrap_or_default();
    let (ut, ucpu, uwall) = if only == "softib" {
        (1, f64::NAN, f64::NAN)
    } else {
        udp_pingpong(secs)
    };
    let (st, scpu, swall) = if only == "udp" {
        (1, f64::NAN, f64::NAN)
    } else {
        softib_pingpong(secs)
    };
    let (u, s) = (ucpu * 1e6 / ut as f64, scpu * 1e6 / st as f64);
    println!(
        "UDP ping-pong {ut} round trips: {u:.2} us CPU per round trip ({:.2} us wall)",
        uwall * 1e6 / ut as f64
    );
    println!(
        "softib RC SEND {SIZE} B {st} round trips: {s:.2} us CPU per round trip ({:.2} us wall)",
        swall * 1e6 / st as f64
    );
    println!("ratio {:.2}x (CPU per round trip, both sides)", s / u);
}
