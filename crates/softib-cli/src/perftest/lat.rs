//! The latency tests, one message at a time as perftest runs them:
//! - WRITE: ping-pong through memory: each side RDMA-writes the message into the other's
//!   buffer with an iteration counter in its last byte and waits for the peer's counter in
//!   its own buffer (perftest `run_iter_lat_write`);
//! - SEND: ping-pong through receive completions (`run_iter_lat_send`);
//! - READ and atomics: the client issues one operation, waits for its completion, repeats
//!   (`run_iter_lat`); the server only lends its memory.
//!
//! The samples are the times between consecutive posts; a ping-pong sample is a round
//! trip, reported halved, as perftest does.

use std::time::{Duration, Instant};

use anyhow::bail;
use softib_transport::{
    RecvWr, SendFlags, SendWr, Sge, UdDest, WcOpcode, WorkCompletion, WrOpcode,
};

use super::report;
use super::{AtomicType, Conn, IdleYield, Params, Session, Verb, PERFTEST_QKEY};

/// Runs the test for every size and the closing exchange of the tool.
pub fn run(s: &mut Session, p: &Params) -> anyhow::Result<()> {
    let server_idle = !p.client && matches!(p.verb, Verb::Read | Verb::Atomic);
    if server_idle {
        // Only the client posts: wait until it finishes, then close.
        s.wait_for_peer("receive the client's end-of-test message")?;
        s.close()?;
        println!("{}", report::RESULT_LINE);
        return Ok(());
    }
    println!("{}", report::RESULT_LINE);
    println!(
        "{}",
        if p.duration.is_some() {
            report::LAT_DUR_HEADER
        } else {
            report::LAT_HEADER
        }
    );
    // -a runs 23 sizes one after the other: show which on a terminal.
    let bar = (p.sizes.len() > 1 && crate::device::progress_allowed()).then(|| {
        let b = indicatif::ProgressBar::new(p.sizes.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} sizes")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    for &size in &p.sizes {
        if let Some(b) = &bar {
            b.set_message(format!("{size} bytes"));
        }
        if p.verb == Verb::Send {
            post_recvs(s, p)?;
            s.handshake(0)?;
        }
        let start = Instant::now();
        let (tposted, count) = match p.verb {
            Verb::Write => write_pingpong(s, p, size)?,
            Verb::Send => send_pingpong(s, p, size)?,
            Verb::Read | Verb::Atomic => one_at_a_time(s, p, size)?,
        };
        let rtt = if matches!(p.verb, Verb::Read | Verb::Atomic) {
            1.0
        } else {
            2.0
        };
        if p.duration.is_some() {
            println!(
                "{}",
                report::lat_dur_line(size, count, start.elapsed().as_secs_f64(), rtt)
            );
        } else {
            let r = report::lat_from_posts(size, &tposted, rtt)
                .ok_or_else(|| anyhow::anyhow!("too few iterations for statistics"))?;
            let line = report::lat_line(&r);
            match &bar {
                Some(b) => {
                    // The table goes to stdout; the bar (stderr) steps aside meanwhile.
                    b.suspend(|| println!("{line}"));
                    b.inc(1);
                }
                None => println!("{line}"),
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    println!("{}", report::RESULT_LINE);
    match p.verb {
        // ib_write_lat ends without a closing exchange.
        Verb::Write => Ok(()),
        _ => s.close(),
    }
}

/// How a loop knows when to stop.
struct Clock {
    start: Instant,
    deadline: Option<Instant>,
    iters: u64,
}

impl Clock {
    fn new(p: &Params) -> Clock {
        let start = Instant::now();
        Clock {
            start,
            deadline: p.duration.map(|d| start + Duration::from_secs_f64(d)),
            iters: p.iters,
        }
    }
    fn more(&self, n: u64) -> bool {
        match self.deadline {
            Some(d) => Instant::now() < d,
            None => n < self.iters,
        }
    }
}

/// Waits, making progress, until `f` is satisfied (true) or the duration of a timed run
/// ends (false); fails after the silence limit or if the exchange connection closes.
fn spin_until(
    s: &mut Session,
    what: &'static str,
    deadline: Option<Instant>,
    mut f: impl FnMut(&mut Session, &[WorkCompletion]) -> anyhow::Result<bool>,
) -> anyhow::Result<bool> {
    let mut wcs = [crate::device::blank_wc(); 8];
    let since = Instant::now();
    let mut checks = 0u32;
    let mut idle = IdleYield::default();
    loop {
        let (n, moved) = s.poll_progress(&mut wcs)?;
        idle.turn(&s.ctx, n > 0 || moved);
        if f(s, &wcs[..n])? {
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        checks = checks.wrapping_add(1);
        if checks % 4096 == 0 {
            if since.elapsed() > s.timeout {
                bail!(
                    "no answer for {:.1} s while waiting to {what}: is the peer still there?",
                    s.timeout.as_secs_f64()
                );
            }
            match s.oob.poll_peer(what) {
                // In a timed run the peer may stop a moment before us (ib_write_lat ends
                // without a closing exchange): its leaving ends our run too.
                // (Its deadline is ours within the start-up skew of a few milliseconds; a
                // peer that leaves earlier than a second before ours vanished.)
                Err(e)
                    if matches!(
                        e.downcast_ref::<softib_net::oob::OobError>(),
                        Some(softib_net::oob::OobError::Closed { .. })
                    ) && deadline.is_some_and(|d| {
                        d.saturating_duration_since(Instant::now()) < Duration::from_secs(1)
                    }) =>
                {
                    return Ok(false)
                }
                other => {
                    other?;
                }
            }
            s.publisher.tick(&s.ctx);
        }
    }
}

fn send_wr(s: &Session, p: &Params, size: u64, opcode: WrOpcode) -> SendWr {
    let mut flags = SendFlags::SIGNALED;
    if size <= u64::from(p.inline) && matches!(opcode, WrOpcode::Send | WrOpcode::RdmaWrite) {
        flags |= SendFlags::INLINE;
    }
    let (compare_add, swap) = match (p.verb, p.atomic) {
        (Verb::Atomic, AtomicType::FETCH_AND_ADD) => (1, 0),
        _ => (0, 0),
    };
    SendWr {
        wr_id: 1,
        opcode,
        sg_list: vec![Sge {
            addr: s.send_addr(0),
            length: size as u32,
            lkey: s.mr.keys.lkey,
        }],
        flags,
        remote_addr: s.rem[0].vaddr,
        rkey: s.rem[0].rkey,
        compare_add,
        swap,
        ud: (p.conn == Conn::Ud).then(|| UdDest {
            ah: s.ahs[0].unwrap_or(softib_transport::AhHandle(0)),
            remote_qpn: s.rem[0].qpn,
            remote_qkey: PERFTEST_QKEY,
        }),
        rd: (p.conn == Conn::Rd).then(|| softib_transport::RdDest {
            eec: s.eecs[0],
            remote_qpn: s.rem[0].qpn,
            remote_qkey: PERFTEST_QKEY,
        }),
        ..SendWr::default()
    }
}

/// RDMA WRITE ping-pong through the last byte of the message.
fn write_pingpong(s: &mut Session, p: &Params, size: u64) -> anyhow::Result<(Vec<f64>, u64)> {
    let clock = Clock::new(p);
    let mut tposted = Vec::with_capacity(p.iters as usize);
    let poll_off = (s.recv_offset(0) + size - 1) as usize;
    let post_off = (size - 1) as usize;
    let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
    let wr = send_wr(s, p, size, WrOpcode::RdmaWrite);
    let mr = s.mr;
    while clock.more(scnt) || clock.more(rcnt) || ccnt < scnt {
        // The server writes first (perftest: the server skips the first wait).
        if (p.client || scnt != 0) && clock.more(rcnt) {
            rcnt += 1;
            let want = rcnt as u8;
            let arrived = spin_until(s, "receive the peer's write", clock.deadline, |s, wcs| {
                ccnt += wcs
                    .iter()
                    .filter(|w| w.opcode == WcOpcode::RdmaWrite)
                    .count() as u64;
                let mut b = [0u8; 1];
                s.ctx.read_mr(&mr, poll_off, &mut b)?;
                Ok(b[0] == want)
            })?;
            if !arrived {
                break;
            }
        }
        if clock.more(scnt) {
            tposted.push(clock.start.elapsed().as_secs_f64());
            scnt += 1;
            s.ctx.write_mr(&mr, post_off, &[scnt as u8])?;
            s.ctx.post_send(s.qpns[0], std::slice::from_ref(&wr))?;
        }
        if ccnt < scnt {
            let done = spin_until(s, "complete our write", clock.deadline, |_, wcs| {
                ccnt += wcs
                    .iter()
                    .filter(|w| w.opcode == WcOpcode::RdmaWrite)
                    .count() as u64;
                Ok(ccnt >= scnt)
            })?;
            if !done {
                break;
            }
        }
        if p.duration.is_some() && !clock.more(scnt) {
            break;
        }
    }
    Ok((tposted, scnt))
}

fn recv_wr(s: &Session) -> RecvWr {
    RecvWr {
        wr_id: 0,
        sg_list: vec![Sge {
            addr: s.mr.addr + s.recv_offset(0),
            length: s.slot as u32,
            lkey: s.mr.keys.lkey,
        }],
    }
}

fn post_recvs(s: &mut Session, p: &Params) -> anyhow::Result<()> {
    let n = if p.duration.is_some() {
        u64::from(p.rx_depth)
    } else {
        u64::from(p.rx_depth).min(p.iters)
    };
    let wrs: Vec<RecvWr> = (0..n).map(|_| recv_wr(s)).collect();
    s.ctx.post_recv(s.qpns[0], &wrs)?;
    Ok(())
}

/// SEND ping-pong: the client sends first; each side answers every receive.
fn send_pingpong(s: &mut Session, p: &Params, size: u64) -> anyhow::Result<(Vec<f64>, u64)> {
    let clock = Clock::new(p);
    let mut tposted = Vec::with_capacity(p.iters as usize);
    let wr = send_wr(s, p, size, WrOpcode::Send);
    let posted_recvs = if p.duration.is_some() {
        u64::from(p.rx_depth)
    } else {
        u64::from(p.rx_depth).min(p.iters)
    };
    let mut recvs_posted = posted_recvs;
    let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
    // Receives completed but not yet answered: one poll may return a receive together
    // with the completion of our own send, so both are counted wherever we poll.
    let mut arrived = 0u64;
    let tally = |wcs: &[softib_transport::WorkCompletion], arrived: &mut u64, ccnt: &mut u64| {
        for w in wcs {
            match w.opcode {
                WcOpcode::Recv => *arrived += 1,
                WcOpcode::Send => *ccnt += 1,
                _ => {}
            }
        }
    };
    while clock.more(scnt) || clock.more(rcnt) {
        // The client sends first.
        if (!p.client || scnt != 0) && clock.more(rcnt) {
            let got = spin_until(s, "receive the peer's message", clock.deadline, |_, wcs| {
                tally(wcs, &mut arrived, &mut ccnt);
                Ok(arrived > 0)
            })?;
            if !got {
                break;
            }
            arrived -= 1;
            rcnt += 1;
            if p.duration.is_some() || recvs_posted < p.iters {
                s.ctx.post_recv(s.qpns[0], &[recv_wr(s)])?;
                recvs_posted += 1;
            }
        }
        if clock.more(scnt) {
            tposted.push(clock.start.elapsed().as_secs_f64());
            s.ctx.post_send(s.qpns[0], std::slice::from_ref(&wr))?;
            scnt += 1;
        }
        // Keep the send queue from filling with completed but unpolled sends.
        let depth = u64::from(p.tx_depth.max(1));
        if scnt - ccnt >= depth {
            spin_until(s, "complete our send", clock.deadline, |_, wcs| {
                tally(wcs, &mut arrived, &mut ccnt);
                Ok(scnt - ccnt < depth)
            })?;
        }
        if p.duration.is_some() && !clock.more(scnt) {
            break;
        }
    }
    // Let the last sends complete so the peer's last receive is not cut short.
    let wait = Instant::now();
    while ccnt < scnt && wait.elapsed() < Duration::from_secs(1) {
        let mut wcs = [crate::device::blank_wc(); 8];
        let n = s.poll(&mut wcs)?;
        ccnt += wcs[..n]
            .iter()
            .filter(|w| w.opcode == WcOpcode::Send)
            .count() as u64;
    }
    Ok((tposted, scnt))
}

/// READ or atomic latency: one operation at a time.
fn one_at_a_time(s: &mut Session, p: &Params, size: u64) -> anyhow::Result<(Vec<f64>, u64)> {
    let clock = Clock::new(p);
    let op = match (p.verb, p.atomic) {
        (Verb::Read, _) => WrOpcode::RdmaRead,
        (_, AtomicType::FETCH_AND_ADD) => WrOpcode::AtomicFetchAndAdd,
        (_, AtomicType::CMP_AND_SWAP) => WrOpcode::AtomicCmpAndSwp,
    };
    let wr = send_wr(s, p, size, op);
    let mut tposted = Vec::with_capacity(p.iters as usize);
    let mut n = 0u64;
    while clock.more(n) {
        tposted.push(clock.start.elapsed().as_secs_f64());
        s.ctx.post_send(s.qpns[0], std::slice::from_ref(&wr))?;
        spin_until(s, "complete the operation", None, |_, wcs| {
            Ok(!wcs.is_empty())
        })?;
        n += 1;
    }
    Ok((tposted, n))
}
