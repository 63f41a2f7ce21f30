//! The receive-side ICRC check against real Linux rxe frames (whose IPv4 Identification the
//! socket would hide), and softib's own sealed datagrams over loopback, GSO included.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use softib_net::roce::{seal, Ipv4IdPolicy, RxCheck};
use softib_net::socket::{RoceSocket, RxDatagram, SocketConfig, TxBatch};
use softib_wire::pcap::CaptureReader;
use softib_wire::roce::{IpInfo, IpRepr, RoceFrame};
use softib_wire::{BthRepr, Opcode, PacketRepr};

/// (source, destination, tos, real IPv4 ident, UDP payload) of every RoCEv2 frame.
fn rxe_datagrams(name: &str) -> Vec<(SocketAddr, SocketAddr, u8, u16, Vec<u8>)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name);
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record() {
        let rec = rec.unwrap();
        let Ok(f) = RoceFrame::parse_ethernet(&rec.data) else {
            continue;
        };
        let IpRepr::V4(v4) = f.ip else { continue };
        let mut payload = f.transport.to_vec();
        payload.extend_from_slice(&f.icrc.to_le_bytes());
        out.push((
            SocketAddr::new(IpAddr::V4(v4.src_addr), f.udp.src_port),
            SocketAddr::new(IpAddr::V4(v4.dst_addr), f.udp.dst_port),
            v4.tos,
            v4.ident,
            payload,
        ));
    }
    out
}

#[test]
fn rxe_frames_pass_with_their_identification_recovered() {
    for name in ["rxe-write_bw.pcap", "rxe-send_bw_ud.pcap"] {
        let frames = rxe_datagrams(name);
        assert!(
            frames.len() >= 100,
            "{name}: {} RoCEv2 frames",
            frames.len()
        );
        for (src, dst, tos, ident, payload) in &frames {
            let d = RxDatagram {
                source: *src,
                tos: Some(*tos),
                payload,
                gro_index: 0,
            };
            let mut check = RxCheck::new(*dst, Ipv4IdPolicy::Recover);
            let got = check.check(&d).expect("valid rxe frame accepted");
            let IpInfo::V4(v4) = got.ip else {
                panic!("IPv4 frame")
            };
            assert_eq!(v4.ident, *ident, "recovered the identification on the wire");
            assert_eq!(got.transport.len(), payload.len() - 4);
            // rxe's identifications are not softib's: the strict policies refuse them.
            if *ident >= 64 {
                assert!(RxCheck::new(*dst, Ipv4IdPolicy::SoftibPeers)
                    .check(&d)
                    .is_err());
            }
            if *ident != 0 {
                assert!(RxCheck::new(*dst, Ipv4IdPolicy::Zero).check(&d).is_err());
            }
        }
    }
}

#[test]
fn single_bit_corruptions_of_rxe_frames_are_caught() {
    let frames = rxe_datagrams("rxe-write_bw.pcap");
    let mut check_count = 0;
    for (src, dst, tos, _, payload) in frames.iter().take(40) {
        let mut bad = payload.clone();
        for bit in (0..bad.len() * 8).step_by(97) {
            bad[bit / 8] ^= 1 << (bit % 8);
            let d = RxDatagram {
                source: *src,
                tos: Some(*tos),
                payload: &bad,
                gro_index: 0,
            };
            let mut check = RxCheck::new(*dst, Ipv4IdPolicy::Recover);
            assert!(check.check(&d).is_err(), "bit {bit} flip went undetected");
            assert_eq!(check.counters().icrc_errors, 1);
            bad[bit / 8] ^= 1 << (bit % 8);
            check_count += 1;
        }
    }
    assert!(check_count > 1000);
}

fn transport(psn: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = PacketRepr::new(BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_MIDDLE,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x12,
        ack_req: false,
        psn,
    });
    p.payload = payload;
    let mut b = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut b).unwrap();
    b.truncate(n);
    b
}

#[test]
fn sealed_gso_groups_verify_at_the_receiver_with_segment_identifications() {
    let mut rx = RoceSocket::bind(&SocketConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let mut tx = RoceSocket::bind(&SocketConfig::new("127.0.0.1:0".parse().unwrap())).unwrap();
    let (local, dest) = (tx.local_addr(), rx.local_addr());
    let tos = tx.traffic_class();
    let mut batch = TxBatch::new(256 * 1024, 64, tx.stats().gso);
    let body = [0x5au8; 1024];
    let n = 20u32;
    for psn in 0..n {
        let t = transport(psn, &body);
        batch
            .push_with(dest, None, t.len() + 4, |slot, oracle| {
                slot[..t.len()].copy_from_slice(&t);
                let ident = oracle.ipv4_ident(t.len() + 4);
                seal(local, dest, tos, ident, slot, t.len()).unwrap()
            })
            .unwrap();
    }
    tx.send(&mut batch).unwrap();
    let mut rb = rx.rx_batch(8, 2048);
    let mut recover = RxCheck::new(dest, Ipv4IdPolicy::SoftibPeers);
    let mut zero = RxCheck::new(dest, Ipv4IdPolicy::Zero);
    let mut psns = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while psns.len() < n as usize && Instant::now() < deadline {
        if rx.recv(&mut rb).unwrap() == 0 {
            rx.wait_readable(Some(Duration::from_millis(50))).unwrap();
            continue;
        }
        for d in rb.iter() {
            let got = recover.check(&d).expect("softib datagram verifies");
            psns.push(BthRepr::parse(got.transport).unwrap().psn);
            let _ = zero.check(&d);
        }
    }
    assert_eq!(psns, (0..n).collect::<Vec<_>>());
    if tx.stats().gso {
        // One group of 20 segments: only the first has Identification 0.
        assert_eq!(zero.counters().accepted, 1);
        assert_eq!(recover.counters().ipv4_ident_recovered, u64::from(n) - 1);
    } else {
        assert_eq!(zero.counters().accepted, u64::from(n));
    }
}
