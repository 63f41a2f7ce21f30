//! RC SEND / WRITE / READ / atomics through the pair harness without faults.

mod common;
use common::*;
use softib_transport::harness::{Pair, QpOptions};
use softib_transport::{Mtu, WcFlags, WcOpcode, WcStatus, WrOpcode};

#[test]
fn rc_write_multi_packet_is_byte_exact() {
    let mut pair = Pair::new(1);
    let (a, b) = pair.connect(&QpOptions::default());
    let data = pattern(10_000, 3);
    pair.fill(0, &a, 0, &data);
    pair.dev(0)
        .post_send(
            0,
            a.qpn,
            &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 100, 10_000),
        )
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].opcode, WcOpcode::RdmaWrite);
    assert_eq!(wcs[0].byte_len, 10_000);
    assert_eq!(pair.read(1, &b, 100, 10_000), data);
    assert_eq!(pair.read(1, &b, 0, 100), vec![0; 100]);
    assert_eq!(pair.read(1, &b, 10_100, 100), vec![0; 100]);
}

#[test]
fn rc_send_with_imm_lands_in_the_receive_buffer() {
    let mut pair = Pair::new(2);
    let (a, b) = pair.connect(&QpOptions::default());
    let data = pattern(3000, 9);
    pair.fill(0, &a, 0, &data);
    pair.dev(1)
        .post_recv(b.qpn, &recv(77, &b, 500, 4096))
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::SendWithImm, 5, &a, 0, &b, 0, 3000))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let r = recv_wcs(&mut pair, &b);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].wr_id, 77);
    assert_eq!(r[0].opcode, WcOpcode::Recv);
    assert_eq!(r[0].byte_len, 3000);
    assert_eq!(r[0].imm_data, Some(0xabcd));
    assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(r[0].src_qp, a.qpn);
    assert_eq!(pair.read(1, &b, 500, 3000), data);
}

#[test]
fn rc_read_fetches_remote_bytes_across_mtus() {
    for mtu in [Mtu::M256, Mtu::M1024, Mtu::M4096] {
        let mut pair = Pair::new(3);
        let (a, b) = pair.connect(&QpOptions {
            mtu,
            ..Default::default()
        });
        let data = pattern(20_001, 1);
        pair.fill(1, &b, 64, &data);
        pair.dev(0)
            .post_send(0, a.qpn, &wr(WrOpcode::RdmaRead, 9, &a, 8, &b, 64, 20_001))
            .unwrap();
        let wcs = wait_send(&mut pair, &a, 1, SEC);
        assert_eq!(wcs[0].status, WcStatus::Success, "{mtu:?}");
        assert_eq!(wcs[0].opcode, WcOpcode::RdmaRead);
        assert_eq!(pair.read(0, &a, 8, 20_001), data);
    }
}

#[test]
fn rc_atomics_return_the_original_value() {
    let mut pair = Pair::new(4);
    let (a, b) = pair.connect(&QpOptions::default());
    pair.fill(1, &b, 64, &100u64.to_le_bytes());
    let mut w = wr(WrOpcode::AtomicFetchAndAdd, 1, &a, 0, &b, 64, 8);
    w.compare_add = 5;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    let mut c = wr(WrOpcode::AtomicCmpAndSwp, 2, &a, 8, &b, 64, 8);
    c.compare_add = 105;
    c.swap = 7;
    pair.dev(0).post_send(0, a.qpn, &c).unwrap();
    let wcs = wait_send(&mut pair, &a, 2, SEC);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(pair.read(0, &a, 0, 8), 100u64.to_le_bytes());
    assert_eq!(pair.read(0, &a, 8, 8), 105u64.to_le_bytes());
    assert_eq!(pair.read(1, &b, 64, 8), 7u64.to_le_bytes());
}

#[test]
fn rc_mixed_workload_completes_in_order() {
    let mut pair = Pair::new(5);
    let (a, b) = pair.connect(&QpOptions::default());
    let data = pattern(64 * 1024, 5);
    pair.fill(0, &a, 0, &data);
    pair.fill(1, &b, 0x80000, &data);
    for i in 0..20u64 {
        pair.dev(1)
            .post_recv(b.qpn, &recv(i, &b, 0x40000 + i * 4096, 4096))
            .unwrap();
    }
    let mut expect = Vec::new();
    for i in 0..60u64 {
        let op = match i % 3 {
            0 => WrOpcode::RdmaWrite,
            1 => WrOpcode::RdmaRead,
            _ => WrOpcode::Send,
        };
        let len = ((i * 977) % 4000 + 1) as u32;
        let w = match op {
            WrOpcode::RdmaRead => wr(op, i, &a, 0x20000 + i * 4096, &b, 0x80000 + i * 8, len),
            WrOpcode::Send => wr(op, i, &a, i * 100, &b, 0, len),
            _ => wr(op, i, &a, i * 100, &b, i * 4096, len),
        };
        pair.dev(0).post_send(0, a.qpn, &w).unwrap();
        expect.push(i);
    }
    let wcs = wait_send(&mut pair, &a, 60, SEC);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), expect);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    for i in (0..60u64).filter(|i| i % 3 == 1) {
        let len = ((i * 977) % 4000 + 1) as usize;
        let off = 0x80000 + i as usize * 8 - 0x80000;
        assert_eq!(
            pair.read(0, &a, 0x20000 + i as usize * 4096, len),
            data[off..off + len]
        );
    }
    assert_eq!(recv_wcs(&mut pair, &b).len(), 20);
}

#[test]
fn inline_data_is_captured_at_post_time_and_unsignaled_wrs_complete_silently() {
    let mut pair = Pair::new(6);
    let (a, b) = pair.connect(&QpOptions::default());
    pair.fill(0, &a, 0, b"inline!!");
    let mut w = wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 8);
    w.flags = softib_transport::SendFlags::INLINE;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    // Changing the buffer after the post does not change what is sent.
    pair.fill(0, &a, 0, b"changed!");
    let mut w2 = wr(WrOpcode::RdmaWrite, 2, &a, 0, &b, 8, 8);
    w2.flags = softib_transport::SendFlags::SIGNALED;
    pair.dev(0).post_send(0, a.qpn, &w2).unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![2],
        "only the signaled WR completes"
    );
    assert_eq!(pair.read(1, &b, 0, 16), b"inline!!changed!");
    let mut big = wr(WrOpcode::Send, 3, &a, 0, &b, 0, 1000);
    big.flags = softib_transport::SendFlags::INLINE;
    let e = pair.dev(0).post_send(0, a.qpn, &big).unwrap_err();
    assert!(e.to_string().contains("max_inline_data"), "{e}");
}

#[test]
fn zero_length_operations_complete() {
    let mut pair = Pair::new(7);
    let (a, b) = pair.connect(&QpOptions::default());
    pair.dev(1).post_recv(b.qpn, &recv(1, &b, 0, 0)).unwrap();
    for (i, op) in [WrOpcode::RdmaWrite, WrOpcode::RdmaRead, WrOpcode::Send]
        .into_iter()
        .enumerate()
    {
        let mut w = wr(op, i as u64, &a, 0, &b, 0, 0);
        w.sg_list.clear();
        w.rkey = 0;
        pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    }
    let wcs = wait_send(&mut pair, &a, 3, SEC);
    assert!(
        wcs.iter()
            .all(|w| w.status == WcStatus::Success && w.byte_len == 0),
        "{wcs:?}"
    );
    let r = recv_wcs(&mut pair, &b);
    assert_eq!((r[0].status, r[0].byte_len), (WcStatus::Success, 0));
}
