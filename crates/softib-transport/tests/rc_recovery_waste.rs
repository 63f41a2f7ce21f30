//! How many packets RC recovery costs under the fault mix of softib-net's netns test (3 % loss,
//! 1 % duplication, 20 % reordering, 0.5 % corruption), on the deterministic pair harness.
//! Go-back-N (IBA 9.7.5.1.3) makes some waste unavoidable: the responder discards every
//! packet after a gap until the missing one arrives, so those are sent twice. What these
//! tests bound is the waste beyond that: a window resent for every NAK, a stale or
//! duplicate NAK restarting a resend, every outstanding READ re-requested per gap.
//!
//! Waste ratio = packets both devices sent with faults / packets the same workload takes
//! on a clean link. `cargo test -p softib-transport --test rc_recovery_waste -- --nocapture`
//! prints the table.

mod common;
use common::*;
use softib_transport::harness::{Endpoint, Faults, Pair, QpOptions};
use softib_transport::{Mtu, WcStatus, WrOpcode};

/// The fault mix of crates/softib-net/tests/netns_faults.rs, on the harness link.
fn netns_mix() -> Faults {
    Faults {
        drop: 0.03,
        duplicate: 0.01,
        reorder: 0.2,
        corrupt: 0.005,
        reorder_window: 4_000,
        ..Default::default()
    }
}

const BUF: usize = 4 << 20;

/// What one workload run cost.
#[derive(Clone, Copy, Debug)]
struct Cost {
    /// Packets both devices sent.
    packets: u64,
    /// Requests the requester sent again.
    retransmitted: u64,
    /// Sequence NAKs the responder sent.
    seq_naks: u64,
    /// Local ACK timeouts.
    timeouts: u64,
}

/// Moves `bytes` with `opcode` messages of `msg` bytes (atomics: `bytes / 8` operations),
/// at most `depth` outstanding, and checks every completion and the memory.
fn run(opcode: WrOpcode, bytes: usize, msg: usize, faults: Faults, seed: u64) -> Cost {
    let mut pair = Pair::new(seed);
    let o = QpOptions {
        mtu: Mtu::M1024,
        buf_len: BUF,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        sq_depth: 512,
        rq_depth: 512,
        ..Default::default()
    };
    let (a, b) = pair.connect(&o);
    pair.faults = faults;
    let src = pattern(BUF, 7);
    let (reader, writer): (&Endpoint, &Endpoint) = if opcode == WrOpcode::RdmaRead {
        (&a, &b)
    } else {
        (&b, &a)
    };
    pair.fill(writer.side, writer, 0, &src);
    let atomic = opcode == WrOpcode::AtomicFetchAndAdd;
    let msg = if atomic { 8 } else { msg };
    let total = bytes / msg;
    let depth = if atomic { 16 } else { 64 };
    let slots = BUF / msg;
    let (mut posted, mut done) = (0usize, 0usize);
    while done < total {
        while posted < total && posted - done < depth {
            let off = ((posted % slots) * msg) as u64;
            if opcode == WrOpcode::Send {
                pair.dev(1)
                    .post_recv(b.qpn, &recv(posted as u64, &b, off, msg as u32))
                    .unwrap();
            }
            let mut w = wr(opcode, posted as u64, &a, off, &b, off, msg as u32);
            if atomic {
                w.compare_add = 1;
                w.remote_addr = b.addr + (posted % 64) as u64 * 8;
            }
            pair.dev(0).post_send(0, a.qpn, &w).unwrap();
            posted += 1;
        }
        let deadline = pair.now + 100 * SEC;
        let wcs = wait_send(&mut pair, &a, 1, deadline);
        assert!(
            !wcs.is_empty(),
            "{opcode:?}: stalled after {done} of {total}"
        );
        for wc in &wcs {
            assert_eq!(wc.status, WcStatus::Success, "{opcode:?} {wc:?}");
        }
        done += wcs.len();
    }
    if atomic {
        let want = (total / 64) as u64;
        let got = pair.read(1, &b, 0, 8);
        assert_eq!(u64::from_le_bytes(got.try_into().unwrap()), want);
    } else {
        let span = bytes.min(BUF);
        assert!(
            pair.read(reader.side, reader, 0, span) == src[..span],
            "{opcode:?} memory"
        );
    }
    let req = *pair.device(0).qp_counters(a.qpn).unwrap();
    let resp = *pair.device(1).qp_counters(b.qpn).unwrap();
    Cost {
        packets: pair.stats.sent[0] + pair.stats.sent[1],
        retransmitted: req.retransmitted_packets,
        seq_naks: resp.seq_naks_sent,
        timeouts: req.local_ack_timeouts,
    }
}

/// (faulty cost, waste ratio) of one workload.
fn waste(opcode: WrOpcode, bytes: usize, msg: usize, seed: u64) -> (Cost, f64) {
    let clean = run(opcode, bytes, msg, Faults::default(), seed);
    let faulty = run(opcode, bytes, msg, netns_mix(), seed);
    let ratio = faulty.packets as f64 / clean.packets as f64;
    println!(
        "{opcode:?}: {} MiB in {msg}-byte messages: clean {} packets, faulty {} packets \
         (ratio {ratio:.2}), {} retransmitted requests, {} sequence NAKs, {} ACK timeouts",
        bytes >> 20,
        clean.packets,
        faulty.packets,
        faulty.retransmitted,
        faulty.seq_naks,
        faulty.timeouts
    );
    (faulty, ratio)
}

const MIB: usize = 1 << 20;

#[test]
fn write_recovery_waste_is_bounded() {
    let (_, ratio) = waste(WrOpcode::RdmaWrite, 16 * MIB, 64 * 1024, 41);
    assert!(ratio < 20.0, "WRITE waste ratio {ratio:.2}");
}

#[test]
fn read_recovery_waste_is_bounded() {
    let (_, ratio) = waste(WrOpcode::RdmaRead, 16 * MIB, 64 * 1024, 42);
    assert!(ratio < 100.0, "READ waste ratio {ratio:.2}");
}

#[test]
fn send_recovery_waste_is_bounded() {
    let (_, ratio) = waste(WrOpcode::Send, 16 * MIB, 16 * 1024, 43);
    assert!(ratio < 20.0, "SEND waste ratio {ratio:.2}");
}

#[test]
fn atomic_recovery_waste_is_bounded() {
    let (_, ratio) = waste(WrOpcode::AtomicFetchAndAdd, 64 * 1024, 8, 44);
    assert!(ratio < 20.0, "atomic waste ratio {ratio:.2}");
}

/// Reordering alone loses nothing, so it must never cost a local ACK timeout: every gap
/// a sequence NAK reports is repaired by a resend, and a NAK that arrives while a resend
/// pass is still young is set aside only if that pass really resent its PSN. (A NAK for
/// a PSN first sent after the pass, and a second NAK superseding a set-aside one after
/// the reordered packet arrived, each used to be dropped: the requester then sat out
/// the full timeout, seen as ACK timeouts and a collapsed rate on a veth path whose
/// per-CPU backlogs reorder a few datagrams.)
#[test]
fn reordering_alone_never_waits_for_the_ack_timeout() {
    // READ is left out: a reordered READ response still costs one timeout now and then
    // (the re-requested tail of a READ whose responses overtook each other; noted in issue 18).
    for opcode in [WrOpcode::RdmaWrite, WrOpcode::Send] {
        for (reorder, window) in [(0.01, 2_000), (0.05, 2_000), (0.01, 20_000)] {
            for seed in 41..45 {
                let faults = Faults {
                    reorder,
                    reorder_window: window,
                    ..Default::default()
                };
                let cost = run(opcode, 4 * MIB, 64 * 1024, faults, seed);
                assert_eq!(
                    cost.timeouts, 0,
                    "{opcode:?}, {reorder} reordered within {window} ns, seed {seed}: {cost:?}"
                );
            }
        }
    }
}
