//! Many QPs on one device: demux by DestQP, round-robin transmit, the timer heap, PSN wrap,
//! SEND with invalidate and solicited notification.

mod common;
use common::*;
use softib_transport::harness::{Faults, Pair, QpOptions};
use softib_transport::{AsyncEvent, Mtu, SendFlags, WcFlags, WcStatus, WrOpcode};

#[test]
fn two_hundred_qp_pairs_complete_under_loss() {
    let mut pair = Pair::new(60);
    pair.faults = Faults {
        drop: 0.05,
        reorder: 0.05,
        reorder_window: 5_000,
        ..Default::default()
    };
    let opts = QpOptions {
        buf_len: 64 * 1024,
        timeout: 8,
        mtu: Mtu::M1024,
        ..Default::default()
    };
    let eps: Vec<_> = (0..200).map(|_| pair.connect(&opts)).collect();
    for (i, (a, b)) in eps.iter().enumerate() {
        let data = pattern(8000, i as u8);
        pair.fill(0, a, 0, &data);
        pair.dev(0)
            .post_send(
                0,
                a.qpn,
                &wr(WrOpcode::RdmaWrite, i as u64, a, 0, b, 0, 8000),
            )
            .unwrap();
        pair.dev(0)
            .post_send(
                0,
                a.qpn,
                &wr(WrOpcode::RdmaRead, 1000 + i as u64, a, 16384, b, 0, 8000),
            )
            .unwrap();
    }
    assert!(pair.drive(100 * SEC));
    for (i, (a, b)) in eps.iter().enumerate() {
        let wcs = pair.completions(0, a);
        assert_eq!(
            wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![
                (i as u64, WcStatus::Success),
                (1000 + i as u64, WcStatus::Success)
            ]
        );
        let data = pattern(8000, i as u8);
        assert_eq!(pair.read(1, b, 0, 8000), data);
        assert_eq!(pair.read(0, a, 16384, 8000), data);
    }
}

#[test]
fn round_robin_interleaves_qps_packet_by_packet() {
    let mut pair = Pair::new(61);
    pair.trace = true;
    let opts = QpOptions {
        mtu: Mtu::M256,
        ..Default::default()
    };
    let (a1, b1) = pair.connect(&opts);
    let (a2, b2) = pair.connect(&opts);
    pair.dev(0)
        .post_send(0, a1.qpn, &wr(WrOpcode::RdmaWrite, 1, &a1, 0, &b1, 0, 1024))
        .unwrap();
    pair.dev(0)
        .post_send(0, a2.qpn, &wr(WrOpcode::RdmaWrite, 2, &a2, 0, &b2, 0, 1024))
        .unwrap();
    pair.flush_transmits();
    let order: Vec<u32> = pair
        .trace_log
        .iter()
        .filter(|e| e.from == 0)
        .map(|e| e.dest_qp)
        .collect();
    assert_eq!(
        order,
        vec![b1.qpn, b2.qpn, b1.qpn, b2.qpn, b1.qpn, b2.qpn, b1.qpn, b2.qpn]
    );
}

#[test]
fn psns_wrap_around_24_bits() {
    let mut pair = Pair::new(62);
    let (a, b) = pair.connect(&QpOptions {
        psn: 0xFF_FFFA,
        mtu: Mtu::M256,
        ..Default::default()
    });
    let data = pattern(4096, 77);
    pair.fill(0, &a, 0, &data);
    pair.fill(1, &b, 8192, &data);
    pair.faults = Faults {
        drop: 0.1,
        ..Default::default()
    };
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 4096))
        .unwrap();
    pair.dev(0)
        .post_send(
            0,
            a.qpn,
            &wr(WrOpcode::RdmaRead, 2, &a, 8192, &b, 8192, 4096),
        )
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 2, 100 * SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(pair.read(1, &b, 0, 4096), data);
    assert_eq!(pair.read(0, &a, 8192, 4096), data);
    assert!(pair.dev(0).query_qp(a.qpn).unwrap().sq_psn < 0x100);
}

#[test]
fn send_with_invalidate_revokes_the_rkey() {
    let mut pair = Pair::new(63);
    let (a, b) = pair.connect(&QpOptions::default());
    pair.dev(1).post_recv(b.qpn, &recv(1, &b, 0, 64)).unwrap();
    let mut w = wr(WrOpcode::SendWithInv, 1, &a, 0, &b, 0, 16);
    w.invalidate_rkey = b.keys.rkey;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    wait_send(&mut pair, &a, 1, SEC);
    let r = recv_wcs(&mut pair, &b);
    assert_eq!(r[0].invalidated_rkey, Some(b.keys.rkey));
    assert!(r[0].wc_flags.contains(WcFlags::WITH_INV));
    // A later RDMA WRITE with the invalidated rkey is refused.
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaWrite, 2, &a, 0, &b, 0, 16))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 1, SEC);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
}

#[test]
fn solicited_only_notification_fires_on_a_solicited_send() {
    let mut pair = Pair::new(64);
    let (a, b) = pair.connect(&QpOptions::default());
    for i in 0..2 {
        pair.dev(1)
            .post_recv(b.qpn, &recv(i, &b, i * 64, 64))
            .unwrap();
    }
    pair.dev(1).req_notify_cq(b.recv_cq, true);
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::Send, 1, &a, 0, &b, 0, 8))
        .unwrap();
    pair.drive(SEC);
    assert_eq!(
        pair.dev(1).poll_event(),
        None,
        "unsolicited receive does not notify"
    );
    let mut w = wr(WrOpcode::Send, 2, &a, 0, &b, 0, 8);
    w.flags |= SendFlags::SOLICITED;
    pair.dev(0).post_send(0, a.qpn, &w).unwrap();
    pair.drive(SEC);
    assert_eq!(
        pair.dev(1).poll_event(),
        Some(AsyncEvent::CqNotify(b.recv_cq))
    );
    let r = recv_wcs(&mut pair, &b);
    assert!(r[1].wc_flags.contains(WcFlags::SOLICITED));
}
