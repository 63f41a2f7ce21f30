//! The RoCEv2 socket on loopback: batches arrive intact and in order, with and without
//! GSO/GRO and through the GSO fallback path, and the traffic class is reported.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use softib_net::socket::{RoceSocket, SocketConfig, TxBatch, ECN_CE, ECN_ECT0};

fn open(ip: [u8; 4], gso: bool, gro: bool, tc: u8) -> RoceSocket {
    let mut c = SocketConfig::new(SocketAddr::from((ip, 0)));
    c.gso = gso;
    c.gro = gro;
    c.traffic_class = tc;
    RoceSocket::bind(&c).unwrap()
}

/// Receives until `n` datagrams arrived (or 5 s pass), returning (payload, tos) pairs.
fn collect(rx: &mut RoceSocket, n: usize) -> Vec<(Vec<u8>, Option<u8>)> {
    let mut batch = rx.rx_batch(16, 4200);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < n && Instant::now() < deadline {
        if rx.recv(&mut batch).unwrap() == 0 {
            rx.wait_readable(Some(Duration::from_millis(50))).unwrap();
            continue;
        }
        for d in batch.iter() {
            out.push((d.payload.to_vec(), d.tos));
        }
    }
    out
}

fn send_numbered(tx: &mut RoceSocket, batch_gso: bool, dest: SocketAddr, sizes: &[usize]) {
    let mut batch = TxBatch::new(256 * 1024, 64, batch_gso);
    for (i, &len) in sizes.iter().enumerate() {
        batch
            .push_with(dest, None, len, |b, _| {
                b[..len].fill(i as u8);
                b[..4].copy_from_slice(&(i as u32).to_be_bytes());
                len
            })
            .unwrap();
    }
    while let Err(e) = tx.send(&mut batch) {
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        tx.wait_writable(Some(Duration::from_millis(50))).unwrap();
    }
}

fn check(sizes: &[usize], got: &[(Vec<u8>, Option<u8>)]) {
    assert_eq!(got.len(), sizes.len());
    for (i, ((p, _), &len)) in got.iter().zip(sizes).enumerate() {
        assert_eq!(p.len(), len, "datagram {i} length");
        assert_eq!(
            u32::from_be_bytes(p[..4].try_into().unwrap()),
            i as u32,
            "order"
        );
        assert!(p[4..].iter().all(|&b| b == i as u8), "datagram {i} content");
    }
}

/// Runs of equal sizes (GSO groups), a short tail closing a group, and odd sizes.
const SIZES: [usize; 12] = [
    1100, 1100, 1100, 1100, 700, 1100, 64, 4096, 4096, 4096, 4000, 33,
];

#[test]
fn batches_arrive_intact_with_gso_and_gro() {
    let mut rx = open([127, 0, 0, 1], false, true, ECN_ECT0);
    let mut tx = open([127, 0, 0, 1], true, false, ECN_ECT0);
    let gso = tx.stats().gso;
    send_numbered(&mut tx, gso, rx.local_addr(), &SIZES);
    check(&SIZES, &collect(&mut rx, SIZES.len()));
}

#[test]
fn batches_arrive_intact_without_gso_and_gro() {
    let mut rx = open([127, 0, 0, 1], false, false, ECN_ECT0);
    let mut tx = open([127, 0, 0, 1], false, false, ECN_ECT0);
    assert!(!tx.stats().gso && !rx.stats().gro);
    send_numbered(&mut tx, false, rx.local_addr(), &SIZES);
    check(&SIZES, &collect(&mut rx, SIZES.len()));
}

#[test]
fn gso_groups_are_split_when_the_socket_cannot_segment() {
    // The batch groups datagrams, the socket has GSO off: the fallback path splits them.
    let mut rx = open([127, 0, 0, 1], false, false, ECN_ECT0);
    let mut tx = open([127, 0, 0, 1], false, false, ECN_ECT0);
    send_numbered(&mut tx, true, rx.local_addr(), &SIZES);
    check(&SIZES, &collect(&mut rx, SIZES.len()));
}

#[test]
fn traffic_class_is_sent_and_reported() {
    let mut rx = open([127, 0, 0, 1], false, false, 0);
    let mut tx = open([127, 0, 0, 1], false, false, ECN_ECT0);
    let dest = rx.local_addr();
    let mut batch = TxBatch::new(4096, 4, false);
    batch.push_with(dest, None, 10, |_, _| 10).unwrap();
    batch
        .push_with(dest, Some(0x68 | ECN_CE), 10, |_, _| 10)
        .unwrap();
    tx.send(&mut batch).unwrap();
    let got = collect(&mut rx, 2);
    assert_eq!(got[0].1, Some(ECN_ECT0));
    assert_eq!(got[1].1, Some(0x68 | ECN_CE));
}

#[test]
fn ipv6_loopback_works_and_reports_traffic_class() {
    let bind = |tc: u8| {
        let mut c = SocketConfig::new("[::1]:0".parse().unwrap());
        c.traffic_class = tc;
        RoceSocket::bind(&c)
    };
    let (Ok(mut rx), Ok(mut tx)) = (bind(0), bind(ECN_ECT0)) else {
        panic!("this machine has no IPv6 loopback (::1); softib's IPv6 path cannot be tested");
    };
    let gso = tx.stats().gso;
    send_numbered(&mut tx, gso, rx.local_addr(), &SIZES);
    let got = collect(&mut rx, SIZES.len());
    check(&SIZES, &got);
    assert!(got.iter().all(|(_, tos)| *tos == Some(ECN_ECT0)));
}

#[test]
fn wildcard_bind_is_refused_with_the_reason() {
    let e = RoceSocket::bind(&SocketConfig::new("0.0.0.0:4791".parse().unwrap())).unwrap_err();
    assert!(e.to_string().contains("ICRC"), "{e}");
}
