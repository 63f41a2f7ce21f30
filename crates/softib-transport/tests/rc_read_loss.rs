//! Large RDMA READs through loss and reordering with many READs outstanding: the retry
//! counter restarts on every read response that advances the PSN the requester waits for
//! (forward progress, IBA 9.7.6.1.3), and re-sent READ requests never count against the
//! responder's max_dest_rd_atomic (IBA 9.7.5.1.5 duplicate requests reuse their resource),
//! so every READ completes successfully and byte-exact.

mod common;
use common::*;
use softib_transport::harness::{Faults, Pair, QpOptions};
use softib_transport::{Mtu, WcStatus, WrOpcode};

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
