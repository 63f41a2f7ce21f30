//! The bandwidth tests: the client keeps `tx_depth` messages outstanding on every QP and
//! times posts and completions; the server of a SEND test counts receives, the server of
//! a WRITE, READ or atomic test only waits (its memory is the target) and prints the
//! client's report, as perftest does.

use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use softib_net::oob::perftest::BwReport;
use softib_transport::{RecvWr, SendFlags, SendWr, Sge, UdDest, WcOpcode, WrOpcode};

use super::report::{self, BwResult};
use super::{AtomicType, Conn, IdleYield, Params, Session, Verb, PERFTEST_QKEY};
use crate::device::progress_allowed;

/// perftest stops measuring the peak above this many iterations.
const PEAK_LIMIT: u64 = 20_000;

/// Runs the test for every size and the closing exchange.
pub fn run(s: &mut Session, p: &Params) -> anyhow::Result<()> {
    println!("{}", report::RESULT_LINE);
    println!("{}", report::bw_header(p.unit));
    if p.verb == Verb::Send {
        return run_send(s, p);
    }
    if !p.client {
        // The server's memory is the target: wait for the client's end-of-test handshake,
        // then print the client's report.
        s.wait_for_peer("receive the client's end-of-test message")?;
        s.handshake(0)?;
        let theirs = exchange_reports(s, None)?;
        println!(
            "{}",
            report::bw_line(
                &BwResult {
                    size: theirs.size,
                    iters: theirs.iters,
                    peak: theirs.bw_peak,
                    avg: theirs.bw_avg,
                    msg_rate: theirs.msg_rate_avg,
                },
                p.unit
            )
        );
        s.close()?;
        println!("{}", report::RESULT_LINE);
        return Ok(());
    }
    let mut last = None;
    for &size in &p.sizes {
        let r = client_run(s, p, size)?;
        println!("{}", report::bw_line(&r, p.unit));
        last = Some(r);
    }
    println!("{}", report::RESULT_LINE);
    s.handshake(0)?;
    exchange_reports(s, last.as_ref())?;
    s.close()
}

/// The SEND test: both sides run per size, with a handshake before (receives posted) and,
/// with `-a`, after.
fn run_send(s: &mut Session, p: &Params) -> anyhow::Result<()> {
    for &size in &p.sizes {
        if !p.client {
            post_initial_recvs(s, p)?;
        }
        s.handshake(0)?;
        let r = if p.client {
            client_run(s, p, size)?
        } else {
            server_recv(s, p, size)?
        };
        println!("{}", report::bw_line(&r, p.unit));
        // ib_send_bw synchronises after each size only when it runs several (-a).
        if p.sizes.len() > 1 {
            s.handshake(0)?;
        }
    }
    println!("{}", report::RESULT_LINE);
    s.close()
}

/// perftest's `xchg_bw_reports`: five 8-byte messages; returns the peer's.
fn exchange_reports(s: &mut Session, mine: Option<&BwResult>) -> anyhow::Result<BwReport> {
    let r = mine.map_or(
        BwReport {
            size: 0,
            iters: 0,
            bw_peak: 0.0,
            bw_avg: 0.0,
            msg_rate_avg: 0.0,
        },
        |m| BwReport {
            size: m.size,
            iters: m.iters,
            bw_peak: m.peak,
            bw_avg: m.avg,
            msg_rate_avg: m.msg_rate,
        },
    );
    let mut theirs = [[0u8; 8]; 5];
    for (m, t) in r.to_messages().iter().zip(theirs.iter_mut()) {
        s.oob.exchange("exchange bandwidth reports", m, t)?;
    }
    Ok(BwReport::from_messages(&theirs))
}

/// The work request QP `i` posts for message `seq` of `size` bytes.
fn send_wr(s: &Session, p: &Params, i: usize, size: u64, seq: u64, signaled: bool) -> SendWr {
    let rem = &s.rem[i];
    let mut flags = if signaled {
        SendFlags::SIGNALED
    } else {
        SendFlags::empty()
    };
    if size <= u64::from(p.inline) && matches!(p.verb, Verb::Send | Verb::Write) {
        flags |= SendFlags::INLINE;
    }
    let (opcode, compare_add, swap) = match p.verb {
        Verb::Send => (WrOpcode::Send, 0, 0),
        Verb::Write => (WrOpcode::RdmaWrite, 0, 0),
        Verb::Read => (WrOpcode::RdmaRead, 0, 0),
        Verb::Atomic => match p.atomic {
            AtomicType::FETCH_AND_ADD => (WrOpcode::AtomicFetchAndAdd, 1, 0),
            AtomicType::CMP_AND_SWAP => (WrOpcode::AtomicCmpAndSwp, 0, 0),
        },
    };
    SendWr {
        wr_id: ((i as u64) << 40) | seq,
        opcode,
        sg_list: vec![Sge {
            addr: s.send_addr(i),
            length: size as u32,
            lkey: s.mr.keys.lkey,
        }],
        flags,
        remote_addr: rem.vaddr,
        rkey: rem.rkey,
        compare_add,
        swap,
        ud: (p.conn == Conn::Ud).then(|| UdDest {
            ah: s.ahs[i].unwrap_or(softib_transport::AhHandle(0)),
            remote_qpn: rem.qpn,
            remote_qkey: PERFTEST_QKEY,
        }),
        rd: (p.conn == Conn::Rd).then(|| softib_transport::RdDest {
            eec: s.eecs[i],
            remote_qpn: rem.qpn,
            remote_qkey: PERFTEST_QKEY,
        }),
        ..SendWr::default()
    }
}

fn progress_bar(p: &Params, total: u64) -> Option<ProgressBar> {
    let long = p.duration.is_some_and(|d| d >= 3.0) || total >= 200_000 || p.sizes.len() > 1;
    if !long || !progress_allowed() {
        return None;
    }
    let bar = match p.duration {
        Some(d) => ProgressBar::new((d * 10.0) as u64),
        None => ProgressBar::new(total),
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {percent}% {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// The client side of one size: keeps every QP's send queue full, counts completions.
fn client_run(s: &mut Session, p: &Params, size: u64) -> anyhow::Result<BwResult> {
    let qps = s.qpns.len();
    let iters = p.iters;
    let total = iters * qps as u64;
    let timed = p.duration.is_none();
    let with_peak = timed && iters <= PEAK_LIMIT;
    let cap = if timed { total as usize } else { 0 };
    let mut tposted: Vec<f64> = Vec::with_capacity(cap);
    let mut tcompleted: Vec<f64> = Vec::with_capacity(cap);
    let mut scnt = vec![0u64; qps];
    let mut ccnt = vec![0u64; qps];
    let mut wcs = vec![crate::device::blank_wc(); 64];
    let bar = progress_bar(p, total);
    if let Some(b) = &bar {
        b.set_message(format!("{} bytes", size));
    }
    let start = Instant::now();
    let deadline = p.duration.map(|d| start + Duration::from_secs_f64(d));
    let mut last_progress = Instant::now();
    let mut last_check = Instant::now();
    let mut done = 0u64;
    let mut stop_posting = false;
    let mut batch = Vec::with_capacity(p.tx_depth as usize);
    let mut turns = 0u32;
    let mut idle = IdleYield::default();
    loop {
        // Clock reads are a visible cost in a busy loop: look at the time every 64 turns.
        turns = turns.wrapping_add(1);
        let look = turns % 64 == 0;
        if let Some(d) = deadline {
            if look && !stop_posting && Instant::now() >= d {
                stop_posting = true;
                // Unsignalled messages since the last signalled one complete only with a
                // signalled successor: post one per QP (the queue has room for one more
                // than the depth).
                for i in 0..qps {
                    if scnt[i] > ccnt[i] && scnt[i] % u64::from(p.cq_mod) != 0 {
                        let wr = send_wr(s, p, i, size, scnt[i], true);
                        s.ctx.post_send(s.qpns[i], &[wr])?;
                        scnt[i] += 1;
                    }
                }
            }
        }
        for i in 0..qps {
            batch.clear();
            while (!timed || scnt[i] < iters)
                && !stop_posting
                && scnt[i] - ccnt[i] < u64::from(p.tx_depth)
            {
                let seq = scnt[i];
                let last = timed && seq + 1 == iters;
                let signaled = (seq + 1) % u64::from(p.cq_mod) == 0 || last;
                batch.push(send_wr(s, p, i, size, seq, signaled));
                scnt[i] += 1;
                if timed {
                    tposted.push(start.elapsed().as_secs_f64());
                }
            }
            if !batch.is_empty() {
                s.ctx.post_send(s.qpns[i], &batch)?;
            }
        }
        let (n, moved) = s.poll_progress(&mut wcs)?;
        idle.turn(&s.ctx, n > 0 || moved);
        if n > 0 {
            let now = start.elapsed().as_secs_f64();
            for wc in &wcs[..n] {
                let i = (wc.wr_id >> 40) as usize;
                let seq = wc.wr_id & ((1 << 40) - 1);
                if i >= qps {
                    bail!("completion for an unknown work request {:#x}", wc.wr_id);
                }
                let covered = seq + 1 - ccnt[i];
                ccnt[i] = seq + 1;
                done += covered;
                if timed {
                    tcompleted.extend(std::iter::repeat_n(now, covered as usize));
                }
            }
            last_progress = Instant::now();
            if let Some(b) = &bar {
                match p.duration {
                    Some(_) => b.set_position((start.elapsed().as_secs_f64() * 10.0) as u64),
                    None => b.set_position(done),
                }
            }
        } else if look && last_progress.elapsed() > s.timeout {
            bail!(
                "no completion for {:.1} s ({done} of {} messages completed): is the peer still there?",
                s.timeout.as_secs_f64(),
                if timed { total.to_string() } else { "?".into() }
            );
        }
        let all_sent_done = (0..qps).all(|i| ccnt[i] == scnt[i]);
        if timed && done >= total {
            break;
        }
        if stop_posting && all_sent_done {
            break;
        }
        if look && last_check.elapsed() > Duration::from_millis(200) {
            last_check = Instant::now();
            // A closed exchange connection means the peer is gone; its bytes mean it
            // quit the test (the server never speaks first during the run).
            if s.oob.poll_peer("run the test")? {
                bail!("the peer sent an exchange message in the middle of the test (is it a matching tool?)");
            }
            s.publisher.tick(&s.ctx);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let r = if timed {
        report::bw_from_times(
            size,
            &tposted,
            &tcompleted,
            p.cq_mod as usize,
            p.unit,
            with_peak,
        )
    } else {
        report::bw_from_count(size, done, start.elapsed().as_secs_f64(), p.unit)
    };
    Ok(r)
}

/// Receive WR for QP `i`: the whole receive slot, so any size fits.
fn recv_wr(s: &Session, i: usize) -> RecvWr {
    RecvWr {
        wr_id: i as u64,
        sg_list: vec![Sge {
            addr: s.mr.addr + s.recv_offset(i),
            length: s.slot as u32,
            lkey: s.mr.keys.lkey,
        }],
    }
}

fn post_initial_recvs(s: &mut Session, p: &Params) -> anyhow::Result<()> {
    let n = if p.duration.is_some() {
        u64::from(p.rx_depth)
    } else {
        u64::from(p.rx_depth).min(p.iters)
    };
    for i in 0..s.qpns.len() {
        let wrs: Vec<RecvWr> = (0..n).map(|_| recv_wr(s, i)).collect();
        s.ctx.post_recv(s.qpns[i], &wrs)?;
    }
    Ok(())
}

/// The SEND server: counts receives until every message arrived, or (UC/UD, duration)
/// until the client says it finished and the wire has gone quiet.
fn server_recv(s: &mut Session, p: &Params, size: u64) -> anyhow::Result<BwResult> {
    let qps = s.qpns.len();
    let timed = p.duration.is_none();
    let total = p.iters * qps as u64;
    let initial = if timed {
        u64::from(p.rx_depth).min(p.iters)
    } else {
        u64::from(p.rx_depth)
    };
    let mut posted = vec![initial; qps];
    let mut rcnt = 0u64;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut wcs = vec![crate::device::blank_wc(); 64];
    let mut last_check = Instant::now();
    let mut peer_done_at: Option<Instant> = None;
    let mut quiet_since = Instant::now();
    let mut turns = 0u32;
    let mut idle = IdleYield::default();
    loop {
        turns = turns.wrapping_add(1);
        let look = turns % 64 == 0;
        let (n, moved) = s.poll_progress(&mut wcs)?;
        idle.turn(&s.ctx, n > 0 || moved);
        for wc in &wcs[..n] {
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let i = wc.wr_id as usize;
            if i >= qps {
                bail!("receive completion for an unknown QP slot {i}");
            }
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            rcnt += 1;
            if !timed || posted[i] < p.iters {
                s.ctx.post_recv(s.qpns[i], &[recv_wr(s, i)])?;
                posted[i] += 1;
            }
        }
        if n > 0 {
            quiet_since = Instant::now();
        }
        if timed && rcnt >= total {
            break;
        }
        if !look {
            continue;
        }
        if let Some(t) = peer_done_at {
            // The client finished: what is still on the way arrives within a few ms.
            if t.elapsed() > Duration::from_millis(50)
                && quiet_since.elapsed() > Duration::from_millis(20)
            {
                break;
            }
        } else if last_check.elapsed() > Duration::from_micros(500) {
            last_check = Instant::now();
            if s.oob.poll_peer("receive the client's messages")? {
                peer_done_at = Some(Instant::now());
            }
            if quiet_since.elapsed() > s.timeout {
                bail!(
                    "no message arrived for {:.1} s ({rcnt} of {total} received): is the client still there?",
                    s.timeout.as_secs_f64()
                );
            }
            s.publisher.tick(&s.ctx);
        }
    }
    if timed && p.conn == Conn::Rc && rcnt < total {
        bail!(
            "the client finished after {rcnt} of {total} messages arrived (do both sides use the same -n and -q?)"
        );
    }
    let secs = first.map_or(0.0, |f| (last - f).as_secs_f64());
    Ok(report::bw_from_count(size, rcnt, secs, p.unit))
}
