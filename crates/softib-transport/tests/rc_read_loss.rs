//! Large RDMA READs through loss and reordering with many READs outstanding: the retry
//! counter restarts on every read response that advances the PSN the requester waits for
//! (forward progress, IBA 9.7.6.1.3), and re-sent READ requests never count against the
//! responder's max_dest_rd_atomic (IBA 9.7.5.1.5 duplicate requests reuse their resource),
//! so every READ and atomic completes successfully and byte-exact.

mod common;
use common::*;
use softib_transport::harness::{Faults, Pair, QpOptions};
use softib_transport::{Mtu, RxGrh, RxMeta, WcStatus, WrOpcode};

const MIB: usize = 1 << 20;

/// `reads` READs of `len` bytes each, all posted at once, through `faults`.
fn read_through(seed: u64, faults: Faults, len: usize, reads: usize, depth: u8) {
    let mut pair = Pair::new(seed);
    pair.faults = faults;
    let total = len * reads;
    let (a, b) = pair.connect(&QpOptions {
        mtu: Mtu::M1024,
        timeout: 8,
        retry_cnt: 7,
        max_rd_atomic: depth,
        max_dest_rd_atomic: depth,
        buf_len: total,
        ..Default::default()
    });
    let data = pattern(total, seed as u8);
    pair.fill(1, &b, 0, &data);
    for i in 0..reads {
        let off = (i * len) as u64;
        pair.dev(0)
            .post_send(
                0,
                a.qpn,
                &wr(WrOpcode::RdmaRead, i as u64, &a, off, &b, off, len as u32),
            )
            .unwrap();
    }
    let wcs = wait_send(&mut pair, &a, reads, 10_000 * SEC);
    assert_eq!(wcs.len(), reads, "seed {seed}: {wcs:?}");
    for w in &wcs {
        assert_eq!(w.status, WcStatus::Success, "seed {seed}: {w:?}");
    }
    assert!(
        pair.read(0, &a, 0, total) == data,
        "seed {seed}: READ data differs"
    );
    let c = pair.device(0).counters();
    assert!(
        c.qp.retransmitted_packets > 0,
        "seed {seed}: the faults caused retries"
    );
}

#[test]
fn a_four_mebibyte_read_survives_ten_percent_loss_because_each_response_resets_retries() {
    for seed in 0..6u64 {
        read_through(
            seed,
            Faults {
                drop: 0.10,
                reorder: 0.10,
                reorder_window: 30_000,
                ..Default::default()
            },
            4 * MIB,
            1,
            16,
        );
    }
}

#[test]
fn sixteen_outstanding_mebibyte_reads_survive_loss_duplication_and_reordering() {
    for seed in 10..16u64 {
        read_through(
            seed,
            Faults {
                drop: 0.05,
                duplicate: 0.05,
                reorder: 0.10,
                reorder_window: 30_000,
                ..Default::default()
            },
            MIB,
            16,
            16,
        );
    }
}

/// Moves one packet from `from` to the other device by hand (no link, no faults), returning
/// its bytes so the test can deliver it again as a duplicate.
fn hand_over(pair: &mut Pair, from: usize) -> (RxMeta, Vec<u8>) {
    let mut buf = vec![0u8; 8192];
    let now = pair.now;
    let t = pair
        .dev(from)
        .poll_transmit(now, &mut buf)
        .expect("a packet is ready");
    buf.truncate(t.len);
    let meta = RxMeta {
        slid: pair.device(from).config().lid,
        sl: t.path.sl,
        grh: t.path.grh.map(|g| RxGrh {
            sgid: pair.device(from).config().gid,
            dgid: g.dgid,
            traffic_class: g.traffic_class,
            flow_label: g.flow_label,
            hop_limit: g.hop_limit,
        }),
        ecn_ce: false,
    };
    pair.dev(1 - from).handle_packet(now, &meta, &buf);
    (meta, buf)
}

#[test]
fn a_replayed_response_still_queued_does_not_count_against_max_dest_rd_atomic() {
    // The responder has not sent anything yet when a duplicate of the first atomic arrives
    // (as on a real link whose responder lags): its replay is queued behind the two
    // originals. The first answer completes WR 0, so the requester starts WR 2; at that
    // moment one new response (WR 1) and one replay are queued. Only the new one occupies a
    // responder resource (IBA 9.7.5.1.5: a duplicate reuses the resource of its original),
    // so WR 2 is within max_dest_rd_atomic 2 and must not be NAKed as an invalid request.
    let mut pair = Pair::new(7);
    let (a, b) = pair.connect(&QpOptions {
        max_rd_atomic: 2,
        max_dest_rd_atomic: 2,
        ..Default::default()
    });
    pair.fill(1, &b, 0, &0u64.to_le_bytes());
    for i in 0..3u64 {
        let mut w = wr(WrOpcode::AtomicFetchAndAdd, i, &a, 64 + i * 8, &b, 0, 8);
        w.compare_add = 1;
        pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    }
    let (meta, first) = hand_over(&mut pair, 0);
    hand_over(&mut pair, 0);
    let now = pair.now;
    pair.dev(1).handle_packet(now, &meta, &first);
    hand_over(&mut pair, 1);
    let third = hand_over(&mut pair, 0).1;
    assert_eq!(third[0], first[0], "the third request is an atomic too");
    let wcs = wait_send(&mut pair, &a, 3, 10 * SEC);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        (0..3).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(pair.device(1).counters().qp.invalid_requests, 0);
    assert_eq!(
        pair.read(1, &b, 0, 8),
        3u64.to_le_bytes(),
        "each add ran once"
    );
    let mut originals: Vec<u64> = (0..3)
        .map(|i| u64::from_le_bytes(pair.read(0, &a, 64 + i * 8, 8).try_into().unwrap()))
        .collect();
    originals.sort_unstable();
    assert_eq!(originals, vec![0, 1, 2]);
}
