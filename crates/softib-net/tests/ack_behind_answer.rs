//! An RC SEND ping-pong through real loopback sockets, both sides polling in one thread as
//! `softib send-lat` does: the ACK of each received SEND leaves behind the answer in the
//! same send batch (driver counter `acks_behind_data`), every message arrives byte-exact,
//! and every send completes, so no held ACK is lost. A side that receives and does not
//! answer still acknowledges (its next poll releases what it held).

mod common;

use common::{pattern, rc_pair, Side};
use softib_transport::{RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};

const ROUND_TRIPS: u64 = 300;
const LEN: u32 = 64;

fn send(s: &Side, seq: u64) -> SendWr {
    SendWr {
        wr_id: seq,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: s.mr.addr + (seq % 16) * 64,
            length: LEN,
            lkey: s.mr.keys.lkey,
        }],
        ..Default::default()
    }
}

fn recv(s: &Side, seq: u64) -> RecvWr {
    RecvWr {
        wr_id: seq,
        sg_list: vec![Sge {
            addr: s.mr.addr + 4096 + (seq % 16) * 64,
            length: LEN,
            lkey: s.mr.keys.lkey,
        }],
    }
}

/// Polls `s` until its next receive completes; counts its send completions on the way.
fn await_receive(s: &Side, sends_done: &mut u64) -> u64 {
    let mut wcs = [softib_transport::harness::empty_wc(); 8];
    let start = std::time::Instant::now();
    loop {
        let n = s.ctx.poll_cq(s.cq, &mut wcs);
        let mut got = None;
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            match wc.opcode {
                WcOpcode::Recv => got = Some(wc.wr_id),
                WcOpcode::Send => *sends_done += 1,
                other => panic!("unexpected completion {other:?}"),
            }
        }
        if let Some(id) = got {
            return id;
        }
        assert!(
            start.elapsed().as_secs() < 10,
            "no receive within 10 s: the ping-pong stalled"
        );
    }
}

#[test]
fn acks_leave_behind_the_answer_and_none_is_lost() {
    let (a, b) = rc_pair("127.0.0.1:0", "127.0.0.2:0", 1 << 16);
    for seq in 0..8 {
        a.ctx.post_recv(a.qpn, &[recv(&a, seq)]).unwrap();
        b.ctx.post_recv(b.qpn, &[recv(&b, seq)]).unwrap();
    }
    let (_, a0) = a.ctx.counters();
    let (_, b0) = b.ctx.counters();
    let (mut a_sends, mut b_sends) = (0u64, 0u64);
    for seq in 0..ROUND_TRIPS {
        let ping = pattern(seq, LEN as usize);
        a.ctx
            .write_mr(&a.mr, ((seq % 16) * 64) as usize, &ping)
            .unwrap();
        a.ctx.post_send(a.qpn, &[send(&a, seq)]).unwrap();
        let id = await_receive(&b, &mut b_sends);
        assert_eq!(id, seq, "receives complete in order");
        assert_eq!(
            b.read(4096 + ((seq % 16) * 64) as usize, LEN as usize),
            ping
        );
        // Answer as send-lat does: re-post the receive, then send.
        b.ctx.post_recv(b.qpn, &[recv(&b, seq + 8)]).unwrap();
        let pong = pattern(seq + 1_000_000, LEN as usize);
        b.ctx
            .write_mr(&b.mr, ((seq % 16) * 64) as usize, &pong)
            .unwrap();
        b.ctx.post_send(b.qpn, &[send(&b, seq)]).unwrap();
        await_receive(&a, &mut a_sends);
        assert_eq!(
            a.read(4096 + ((seq % 16) * 64) as usize, LEN as usize),
            pong
        );
        a.ctx.post_recv(a.qpn, &[recv(&a, seq + 8)]).unwrap();
    }
    // The last ping's ACK is held by B until B polls again (nothing to answer): every send
    // must still complete.
    let mut wcs = [softib_transport::harness::empty_wc(); 8];
    let start = std::time::Instant::now();
    while (a_sends < ROUND_TRIPS || b_sends < ROUND_TRIPS) && start.elapsed().as_secs() < 10 {
        for (s, done) in [(&a, &mut a_sends), (&b, &mut b_sends)] {
            let n = s.ctx.poll_cq(s.cq, &mut wcs);
            for wc in &wcs[..n] {
                assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Send));
                *done += 1;
            }
        }
    }
    assert_eq!(
        (a_sends, b_sends),
        (ROUND_TRIPS, ROUND_TRIPS),
        "every SEND completed"
    );

    let (_, a1) = a.ctx.counters();
    let (_, b1) = b.ctx.counters();
    let behind =
        (a1.acks_behind_data - a0.acks_behind_data) + (b1.acks_behind_data - b0.acks_behind_data);
    // Each round trip has two answers; an ACK goes alone only when a device thread's turn
    // (at most every 200 us while the application polls) fell between a receive and its
    // answer, which a preempted test thread can cause on a loaded machine.
    assert!(
        behind >= ROUND_TRIPS,
        "only {behind} of {} ACKs left behind an answer",
        2 * ROUND_TRIPS - 1
    );
}
