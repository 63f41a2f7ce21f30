//! The link/network layer against real Linux Soft-RoCE (rxe) captures: every RoCEv2 frame has
//! a valid ICRC as computed here, non-RoCE frames are recognised as such, the IPv4
//! identification is recovered when a socket-style receiver does not know it, the UDP source
//! ports follow the Linux rule, and frame -> IP/UDP -> PacketRepr -> emit reproduces every
//! captured frame byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use softib_wire::pcap::{CaptureReader, LinkType};
use softib_wire::roce::{
    emit_ethernet, udp_source_port, udp_source_port_ud, verify_datagram, IcrcMatch, IpInfo,
    Ipv4IdentPolicy, Ipv4Info, RoceFrame,
};
use softib_wire::{BthPacket, Error, PacketRepr};

#[derive(Debug, Default)]
struct Tally {
    roce: usize,
    not_roce: usize,
    idents_recovered: usize,
    /// (source IP, destination IP) -> UDP source ports seen.
    ports: BTreeMap<(String, String), BTreeSet<u16>>,
    /// (source IP, destination IP) -> BTH DestQPs seen.
    dest_qps: BTreeMap<(String, String), BTreeSet<u32>>,
    ud_ports_checked: usize,
    /// (source IP, destination IP) -> last IPv4 identification seen.
    last_ident: BTreeMap<(String, String), u16>,
    near_window_hits: usize,
}

fn repr_deth_src_qp(transport: &[u8]) -> Option<u32> {
    PacketRepr::parse(transport).ok()?.deth.map(|d| d.src_qp)
}

fn check_capture(path: &Path) -> Tally {
    let reader = CaptureReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut t = Tally::default();
    let mut out = vec![0u8; 16 * 1024];
    let mut transport_out = vec![0u8; 16 * 1024];
    for (i, rec) in reader.enumerate() {
        let index = i + 1;
        let rec = rec.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(rec.linktype, LinkType::Ethernet);
        let frame = match RoceFrame::parse_ethernet(&rec.data) {
            Ok(f) => f,
            Err(Error::NotInfiniBand(_)) => {
                t.not_roce += 1;
                continue;
            }
            Err(e) => panic!("{} frame {index}: {e}", path.display()),
        };
        t.roce += 1;
        assert!(
            frame.icrc_ok(),
            "{} frame {index}: ICRC {:#010x}, computed {:#010x}",
            path.display(),
            frame.icrc,
            frame.computed_icrc
        );

        // A socket-style receiver that does not know the IPv4 identification recovers it.
        let udp_off = rec.data.len() - frame.transport.len() - 4 - 8;
        let datagram = &rec.data[udp_off + 8..];
        let real = frame.ip_info();
        let IpInfo::V4(mut blind) = real else {
            panic!("captures are IPv4")
        };
        let real_ident = blind.ident;
        blind.ident = 0;
        let (transport, how) = verify_datagram(
            &IpInfo::V4(blind),
            &frame.udp_info(),
            datagram,
            Ipv4IdentPolicy::Recover,
        )
        .unwrap_or_else(|e| panic!("{} frame {index}: {e}", path.display()));
        assert_eq!(transport, frame.transport);
        match how {
            IcrcMatch::Exact => assert_eq!(real_ident, 0, "frame {index}"),
            IcrcMatch::RecoveredIpv4Ident(id) => {
                assert_eq!(id, real_ident, "frame {index}");
                t.idents_recovered += 1;
            }
        }
        // One flipped bit anywhere in the transport packet must fail, even with recovery
        // (except in BTH byte 4, FECN/BECN/reserved, which the ICRC deliberately skips).
        let mut bad = datagram.to_vec();
        let mut bit = (index * 7919) % (frame.transport.len() * 8);
        if bit / 8 == 4 {
            bit += 8;
        }
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(
            verify_datagram(
                &IpInfo::V4(blind),
                &frame.udp_info(),
                &bad,
                Ipv4IdentPolicy::Recover
            )
            .is_err(),
            "{} frame {index}: flipped bit {bit} accepted",
            path.display()
        );

        let key = (
            frame.ip_info().src().to_string(),
            frame.ip_info().dst().to_string(),
        );
        // A receiver that expects the sender's next identification (last + 1) accepts with a
        // small window: rxe numbers packets per destination.
        if let Some(last) = t.last_ident.get(&key) {
            let expect = IpInfo::V4(Ipv4Info {
                ident: last.wrapping_add(1),
                ..blind
            });
            let near = Ipv4IdentPolicy::Near { window: 64 };
            if verify_datagram(&expect, &frame.udp_info(), datagram, near).is_ok() {
                t.near_window_hits += 1;
            }
        }
        t.last_ident.insert(key.clone(), real_ident);
        t.ports
            .entry(key.clone())
            .or_default()
            .insert(frame.udp.src_port);
        let bth = BthPacket::new_checked(frame.transport).expect("BTH");
        if let Some(deth) = repr_deth_src_qp(frame.transport) {
            // UD: the port is a hash of the sending QP alone.
            assert_eq!(
                frame.udp.src_port,
                udp_source_port_ud(deth),
                "frame {index}"
            );
            t.ud_ports_checked += 1;
        }
        t.dest_qps.entry(key).or_default().insert(bth.dest_qp());

        // End to end: transport through wire-core's PacketRepr, re-emitted inside our
        // encapsulation with the captured IP identification, TTL and TOS.
        let repr = PacketRepr::parse(frame.transport)
            .unwrap_or_else(|e| panic!("{} frame {index}: {e}", path.display()));
        let tn = repr.emit(&mut transport_out).expect("transport emit");
        let n = emit_ethernet(
            &frame.ethernet.expect("parsed from Ethernet"),
            &frame.ip_info(),
            &frame.udp_info(),
            &transport_out[..tn],
            &mut out,
        )
        .expect("frame emit");
        assert_eq!(
            &out[..n],
            &rec.data[..],
            "{} frame {index}: re-emitted frame differs",
            path.display()
        );
    }
    t
}

/// RC captures: each direction's UDP source port is the Linux hash of (its QPN, peer QPN),
/// where a direction's own QPN is the DestQP the other direction carries.
fn assert_rc_source_ports(t: &Tally) {
    for ((src, dst), ports) in &t.ports {
        let own = &t.dest_qps[&(dst.clone(), src.clone())];
        let peer = &t.dest_qps[&(src.clone(), dst.clone())];
        assert_eq!(
            (own.len(), peer.len(), ports.len()),
            (1, 1, 1),
            "{src}->{dst}"
        );
        let (l, r) = (*own.first().unwrap(), *peer.first().unwrap());
        assert_eq!(
            *ports.first().unwrap(),
            udp_source_port(l, r),
            "{src}->{dst}: QPs {l:#x}/{r:#x}"
        );
    }
}

fn bundled(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name)
}

#[test]
fn bundled_write_bw_capture_verifies_recovers_and_reemits() {
    let t = check_capture(&bundled("rxe-write_bw.pcap"));
    assert_eq!(t.roce, 500);
    assert!(t.not_roce > 0, "the capture holds the TCP exchange too");
    assert!(t.idents_recovered > 0);
    assert_eq!(t.near_window_hits, t.roce - t.last_ident.len());
    assert_rc_source_ports(&t);
}

#[test]
fn bundled_send_bw_ud_capture_verifies_recovers_and_reemits() {
    let t = check_capture(&bundled("rxe-send_bw_ud.pcap"));
    assert_eq!(t.roce, 100);
    assert!(t.not_roce > 0);
    assert_eq!(t.ud_ports_checked, 100);
}

/// All four rxe captures (bundled in testdata/captures; `SOFTIB_RXE_CAPTURES` points at another
/// copy of the set, e.g. the shared originals).
#[test]
fn all_shared_rxe_captures() {
    let dir = std::env::var_os("SOFTIB_RXE_CAPTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures"));
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the rxe captures in {}: {e}", dir.display()));
    let expected = BTreeMap::from([
        ("rc_pingpong.pcap", 1008),
        ("write_bw.pcap", 500),
        ("read_bw.pcap", 500),
        ("send_bw_ud.pcap", 100),
    ]);
    let mut seen = Vec::new();
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        let t = check_capture(&path);
        // Bundled files are named rxe-<test>.pcap, the shared originals pair-<test>.pcap.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let name = name.split_once('-').map_or(name, |(_, test)| test);
        seen.push(name.to_string());
        eprintln!(
            "{name}: {} RoCEv2 frames, {} other frames, {} IPv4 idents recovered, \
             {} within 64 after the previous one",
            t.roce, t.not_roce, t.idents_recovered, t.near_window_hits
        );
        if let Some(want) = expected.get(name) {
            assert_eq!(t.roce, *want, "{name}");
        }
        assert!(t.not_roce > 0, "{name}");
        // Every packet but each direction's first falls in the window after its predecessor.
        assert_eq!(t.near_window_hits, t.roce - t.last_ident.len(), "{name}");
        if name.contains("ud") {
            continue;
        }
        assert_rc_source_ports(&t);
    }
    // Every capture of the set must be there: a missing file fails, it is not skipped.
    for want in expected.keys() {
        assert!(
            seen.iter().any(|s| s == want),
            "{want} missing in {}",
            dir.display()
        );
    }
}
