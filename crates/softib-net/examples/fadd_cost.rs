//! CPU cost of one FETCH_AND_ADD through the whole stack, both sides, measured in a way a
//! loaded machine does not distort: one thread drives a requester and a responder device
//! alternately (each `poll_cq` receives, handles and sends), with 16 atomics outstanding and
//! every 8th signaled, as `bench/run.sh` runs `softib atomic-bw`. The figure is the process's
//! CPU time (user + system, from /proc/self/stat) per operation, which does not count the
//! time the thread waited for a core; its inverse is the rate one core would reach doing
//! both sides, a floor for two idle cores.
//!
//! ```text
//! cargo run --release -p softib-net --example fadd_cost -- [SECONDS | --ops N]
//! ```
//!
//! `--ops N` runs exactly N operations instead of a time: under `valgrind --tool=callgrind`
//! the difference between the instruction counts of two such runs (N and 2N) divided by N
//! is the user-space instructions per operation without the set-up, a figure any load
//! leaves alone (on loopback a send runs the receiver's kernel path before it returns, so
//! the lockstep run takes the same steps every time).

use std::time::{Duration, Instant};

use softib_net::context::{ConnectOptions, Context, WaitMode};
use softib_net::driver::NetConfig;
use softib_transport::harness::empty_wc;
use softib_transport::{
    AccessFlags, QpCap, QpInitAttr, QpType, SendFlags, SendWr, Sge, WcStatus, WrOpcode,
};

const DEPTH: u64 = 16;
const SIGNAL_EVERY: u64 = 8;

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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ops: Option<u64> = match args.first().map(String::as_str) {
        Some("--ops") => Some(
            args.get(1)
                .and_then(|n| n.parse().ok())
                .map(|n: u64| n.div_ceil(SIGNAL_EVERY) * SIGNAL_EVERY)
                .expect("--ops needs a number of operations"),
        ),
        _ => None,
    };
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let open = |addr: &str| {
        let c = NetConfig::new(addr.parse().unwrap());
        Context::open(c, WaitMode::default()).unwrap()
    };
    let (a, b) = (open("127.0.0.1:0"), open("127.0.0.2:0"));
    let qp = |ctx: &Context| {
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
        (cq, mr, qpn, ctx.random_psn())
    };
    let (acq, amr, aqp, apsn) = qp(&a);
    let (bcq, bmr, bqp, bpsn) = qp(&b);
    let o = ConnectOptions::default();
    let (ea, eb) = (a.endpoint(aqp, apsn, &[amr]), b.endpoint(bqp, bpsn, &[bmr]));
    a.connect(aqp, QpType::Rc, apsn, &eb, &o).unwrap();
    b.connect(bqp, QpType::Rc, bpsn, &ea, &o).unwrap();
    let wr = |seq: u64| SendWr {
        wr_id: seq,
        opcode: WrOpcode::AtomicFetchAndAdd,
        sg_list: vec![Sge {
            addr: amr.addr + 8 * (seq % 64),
            length: 8,
            lkey: amr.keys.lkey,
        }],
        flags: if (seq + 1) % SIGNAL_EVERY == 0 {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        },
        remote_addr: bmr.addr,
        rkey: bmr.keys.rkey,
        compare_add: 1,
        ..SendWr::default()
    };
    let mut wcs = [empty_wc(); 16];
    let (mut posted, mut done) = (0u64, 0u64);
    let (t0, c0) = (Instant::now(), cpu_seconds());
    let end = t0 + Duration::from_secs_f64(secs);
    let mut batch = Vec::with_capacity(DEPTH as usize);
    let more = |posted: u64| match ops {
        Some(n) => posted < n,
        None => Instant::now() < end,
    };
    while more(posted) {
        batch.clear();
        while posted - done < DEPTH && ops.is_none_or(|n| posted < n) {
            batch.push(wr(posted));
            posted += 1;
        }
        if !batch.is_empty() {
            a.post_send(aqp, &batch).unwrap();
        }
        b.poll_cq(bcq, &mut wcs);
        let n = a.poll_cq(acq, &mut wcs);
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            done = wc.wr_id + 1;
        }
    }
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
    let mut word = [0u8; 8];
    // Let the last ones land before reading the word back.
    while done < posted {
        b.poll_cq(bcq, &mut wcs);
        let n = a.poll_cq(acq, &mut wcs);
        for wc in &wcs[..n] {
            done = wc.wr_id + 1;
        }
    }
    b.read_mr(&bmr, 0, &mut word).unwrap();
    assert_eq!(
        u64::from_le_bytes(word),
        posted,
        "every FETCH_AND_ADD landed once"
    );
    println!(
        "{done} FETCH_AND_ADDs in {wall:.2} s wall, {cpu:.2} s CPU: {:.2} us CPU per op (both \
         sides) = {:.3} M ops/s on one core; wall rate {:.3} M ops/s",
        cpu * 1e6 / done as f64,
        done as f64 / cpu / 1e6,
        done as f64 / wall / 1e6
    );
}
