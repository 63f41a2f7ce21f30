//! Two softib devices on loopback in one process: RC RDMA WRITE bandwidth (64 KiB
//! messages, 16 outstanding), FETCH_AND_ADD operations per second (16 outstanding) and RC
//! SEND half round trip (64 bytes), for docs/design/net.md.
//!
//! ```text
//! cargo run --release -p softib-net --example loopback_bench -- [SECONDS] [polling|blocking]
//! ```
//! With `SOFTIB_BENCH_GAPS=1` it also prints the distribution of the time between
//! completion batches (where a stalled or descheduled device thread shows).

use std::time::{Duration, Instant};

use softib_net::context::{ConnectOptions, Context, MemoryRegion, WaitMode};
use softib_net::driver::NetConfig;
use softib_transport::{
    AccessFlags, CqHandle, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendWr, Sge, WcStatus,
    WorkCompletion,
};

struct Side {
    ctx: Context,
    cq: CqHandle,
    mr: MemoryRegion,
    qpn: u32,
    psn: u32,
}

fn side(bind: &str, mode: WaitMode) -> Side {
    let mut cfg = NetConfig::new(bind.parse().expect("address"));
    cfg.seed = 7;
    let ctx = Context::open(cfg, mode).expect("open device");
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(8192).expect("cq");
    let mr = ctx.reg_mr(pd, 4 << 20, AccessFlags::all()).expect("mr");
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            ..QpCap::default()
        },
        sq_sig_all: false,
    };
    let qpn = ctx.create_qp(pd, init).expect("qp");
    let psn = ctx.random_psn();
    Side {
        ctx,
        cq,
        mr,
        qpn,
        psn,
    }
}

fn blank() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: softib_transport::WcOpcode::Send,
        byte_len: 0,
        imm_data: None,
        invalidated_rkey: None,
        qp_num: 0,
        src_qp: 0,
        slid: 0,
        sl: 0,
        wc_flags: Default::default(),
        vendor_err: 0,
    }
}

/// Keeps `depth` WRs from `make` outstanding for `secs`; returns completed WRs per second.
fn stream(s: &Side, depth: usize, secs: f64, make: impl Fn(u64) -> SendWr) -> f64 {
    let mut wcs = vec![blank(); 64];
    let mut posted = 0u64;
    let mut done = 0u64;
    let start = Instant::now();
    let mut last = Instant::now();
    let mut gaps = Vec::new();
    while start.elapsed().as_secs_f64() < secs {
        while posted - done < depth as u64 {
            s.ctx.post_send(s.qpn, &[make(posted)]).expect("post");
            posted += 1;
        }
        let n = s.ctx.poll_cq(s.cq, &mut wcs);
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
        done += n as u64;
        if n > 0 {
            gaps.push(last.elapsed().as_micros());
            last = Instant::now();
        }
    }
    if std::env::var("SOFTIB_BENCH_GAPS").is_ok() {
        gaps.sort_unstable();
        let l = gaps.len();
        eprintln!(
            "completion batches {l}, gap p50 {} us p90 {} us p99 {} us max {} us, sum {} ms",
            gaps[l / 2],
            gaps[l * 9 / 10],
            gaps[l * 99 / 100],
            gaps[l - 1],
            gaps.iter().sum::<u128>() / 1000
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    while done < posted {
        done += s.ctx.wait_cq(s.cq, &mut wcs, Duration::from_secs(10)) as u64;
    }
    done as f64 / elapsed
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let mode = match std::env::args().nth(2).as_deref() {
        Some("polling") => WaitMode::Polling,
        _ => WaitMode::default(),
    };
    let a = side("127.0.0.1:0", mode);
    let b = side("127.0.0.2:0", mode);
    let (ea, eb) = (
        a.ctx.endpoint(a.qpn, a.psn, &[a.mr]),
        b.ctx.endpoint(b.qpn, b.psn, &[b.mr]),
    );
    a.ctx
        .connect(a.qpn, QpType::Rc, a.psn, &eb, &ConnectOptions::default())
        .expect("connect a");
    b.ctx
        .connect(b.qpn, QpType::Rc, b.psn, &ea, &ConnectOptions::default())
        .expect("connect b");
    println!("mode {mode:?}, MTU {:?}", a.ctx.mtu());

    let size = 64 * 1024u32;
    let rate = stream(&a, 16, secs, |i| SendWr {
        wr_id: i,
        opcode: softib_transport::WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: a.mr.addr,
            length: size,
            lkey: a.mr.keys.lkey,
        }],
        remote_addr: b.mr.addr + (i % 32) * u64::from(size),
        rkey: b.mr.keys.rkey,
        ..Default::default()
    });
    println!(
        "RC RDMA WRITE 64 KiB x16 outstanding: {:.0} msg/s, {:.2} Gb/s",
        rate,
        rate * f64::from(size) * 8.0 / 1e9
    );

    let rate = stream(&a, 16, secs, |i| SendWr {
        wr_id: i,
        opcode: softib_transport::WrOpcode::AtomicFetchAndAdd,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: a.mr.addr + 8 * (i % 64),
            length: 8,
            lkey: a.mr.keys.lkey,
        }],
        remote_addr: b.mr.addr,
        rkey: b.mr.keys.rkey,
        compare_add: 1,
        ..Default::default()
    });
    println!("FETCH_AND_ADD x16 outstanding: {rate:.0} ops/s");
    let rate1 = stream(&a, 1, secs / 3.0, |i| SendWr {
        wr_id: i,
        opcode: softib_transport::WrOpcode::AtomicFetchAndAdd,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: a.mr.addr + 8 * (i % 64),
            length: 8,
            lkey: a.mr.keys.lkey,
        }],
        remote_addr: b.mr.addr,
        rkey: b.mr.keys.rkey,
        compare_add: 1,
        ..Default::default()
    });
    println!("FETCH_AND_ADD x1 outstanding: {rate1:.0} ops/s");

    // 64-byte SEND ping-pong, both sides driven from this thread through poll_cq.
    let rounds = 20_000;
    let mut wcs = vec![blank(); 16];
    let recv = |s: &Side, id| RecvWr {
        wr_id: id,
        sg_list: vec![Sge {
            addr: s.mr.addr + 2_000_000,
            length: 64,
            lkey: s.mr.keys.lkey,
        }],
    };
    let send = |s: &Side, id| SendWr {
        wr_id: id,
        opcode: softib_transport::WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: s.mr.addr,
            length: 64,
            lkey: s.mr.keys.lkey,
        }],
        ..Default::default()
    };
    let wait_recv = |s: &Side, wcs: &mut [WorkCompletion]| loop {
        let n = s.ctx.poll_cq(s.cq, wcs);
        if wcs[..n]
            .iter()
            .any(|w| w.opcode == softib_transport::WcOpcode::Recv)
        {
            return;
        }
    };
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds as u64 {
        b.ctx.post_recv(b.qpn, &[recv(&b, i)]).expect("recv");
        a.ctx.post_recv(a.qpn, &[recv(&a, i)]).expect("recv");
        let t = Instant::now();
        a.ctx.post_send(a.qpn, &[send(&a, i)]).expect("send");
        wait_recv(&b, &mut wcs);
        b.ctx.post_send(b.qpn, &[send(&b, i)]).expect("send");
        wait_recv(&a, &mut wcs);
        samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    samples.sort_by(|x, y| x.partial_cmp(y).expect("finite"));
    println!(
        "RC SEND 64 B half round trip: median {:.2} us, p99 {:.2} us",
        samples[rounds / 2],
        samples[rounds * 99 / 100]
    );
    let (dev, drv) = a.ctx.counters();
    println!(
        "A: retransmitted {}, ack timeouts {}, datagrams sent {}, GSO {}",
        dev.qp.retransmitted_packets, dev.qp.local_ack_timeouts, drv.tx_datagrams, drv.socket.gso
    );
}
