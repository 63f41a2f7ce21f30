//! Every RoCEv2 packet in the real Linux Soft-RoCE captures parses, and re-emitting the parsed
//! packet reproduces its bytes exactly.
//!
//! The transport bytes are cut out of each Ethernet frame by hand (Ethernet, IPv4/IPv6, UDP
//! port 4791, then everything but the trailing 4-byte ICRC): the encapsulation modules are
//! tested on their own; this test is about BTH and up.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use pcap_file::pcap::PcapReader;
use softib_wire::{Opcode, PacketRepr};

const ROCEV2_PORT: u16 = 4791;
const ICRC_LEN: usize = 4;

/// The UDP payload minus ICRC of a RoCEv2 frame, or None for any other frame.
fn transport_bytes(frame: &[u8]) -> Option<&[u8]> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = frame.get(14..)?;
    let udp = match ethertype {
        0x0800 => {
            let ihl = usize::from(ip.first()? & 0x0F) * 4;
            let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
            if *ip.get(9)? != 17 {
                return None;
            }
            ip.get(ihl..total)?
        }
        0x86DD => {
            let payload_len = usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]));
            if *ip.get(6)? != 17 {
                return None;
            }
            ip.get(40..40 + payload_len)?
        }
        _ => return None,
    };
    if u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]) != ROCEV2_PORT {
        return None;
    }
    let udp_len = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    udp.get(8..udp_len.checked_sub(ICRC_LEN)?)
}

/// Parses and re-emits every RoCEv2 packet of one capture; returns opcode counts.
fn check_capture(path: &Path) -> BTreeMap<&'static str, usize> {
    let file = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut reader = PcapReader::new(file).expect("pcap header");
    let mut counts = BTreeMap::new();
    let mut index = 0usize;
    let mut out = vec![0u8; 16 * 1024];
    while let Some(packet) = reader.next_packet() {
        index += 1;
        let packet = packet.expect("pcap record");
        let Some(bytes) = transport_bytes(&packet.data) else {
            continue;
        };
        let repr = PacketRepr::parse(bytes).unwrap_or_else(|e| {
            panic!("{} frame {index}: {e}", path.display());
        });
        assert_eq!(repr.buffer_len(), bytes.len(), "frame {index}");
        let n = repr.emit(&mut out).expect("emit");
        assert_eq!(
            &out[..n],
            bytes,
            "{} frame {index}: re-emit differs",
            path.display()
        );
        *counts.entry(repr.opcode().name()).or_insert(0) += 1;
    }
    counts
}

fn bundled(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name)
}

#[test]
fn rxe_write_bw_capture_parses_and_reemits_exactly() {
    let counts = check_capture(&bundled("rxe-write_bw.pcap"));
    let expected = BTreeMap::from([
        (Opcode::RC_RDMA_WRITE_FIRST.name(), 100),
        (Opcode::RC_RDMA_WRITE_MIDDLE.name(), 200),
        (Opcode::RC_RDMA_WRITE_LAST.name(), 100),
        (Opcode::RC_ACKNOWLEDGE.name(), 100),
    ]);
    assert_eq!(counts, expected);
}

#[test]
fn rxe_send_bw_ud_capture_parses_and_reemits_exactly() {
    let counts = check_capture(&bundled("rxe-send_bw_ud.pcap"));
    assert_eq!(counts, BTreeMap::from([(Opcode::UD_SEND_ONLY.name(), 100)]));
}

/// All four rxe captures (bundled in testdata/captures; `SOFTIB_RXE_CAPTURES` points at another
/// copy of the set, e.g. the shared originals), each with the opcode counts its README lists.
#[test]
fn all_shared_rxe_captures_parse_and_reemit_exactly() {
    let dir = std::env::var_os("SOFTIB_RXE_CAPTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures"));
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the rxe captures in {}: {e}", dir.display()));
    let expected: BTreeMap<&str, Vec<(Opcode, usize)>> = BTreeMap::from([
        (
            "rc_pingpong.pcap",
            vec![
                (Opcode::RC_SEND_FIRST, 202),
                (Opcode::RC_SEND_MIDDLE, 402),
                (Opcode::RC_SEND_LAST, 200),
                (Opcode::RC_ACKNOWLEDGE, 204),
            ],
        ),
        (
            "write_bw.pcap",
            vec![
                (Opcode::RC_RDMA_WRITE_FIRST, 100),
                (Opcode::RC_RDMA_WRITE_MIDDLE, 200),
                (Opcode::RC_RDMA_WRITE_LAST, 100),
                (Opcode::RC_ACKNOWLEDGE, 100),
            ],
        ),
        (
            "read_bw.pcap",
            vec![
                (Opcode::RC_RDMA_READ_REQUEST, 100),
                (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 100),
                (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 200),
                (Opcode::RC_RDMA_READ_RESPONSE_LAST, 100),
            ],
        ),
        ("send_bw_ud.pcap", vec![(Opcode::UD_SEND_ONLY, 100)]),
    ]);
    let mut seen = Vec::new();
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        let counts = check_capture(&path);
        // Bundled files are named rxe-<test>.pcap, the shared originals pair-<test>.pcap.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let name = name.split_once('-').map_or(name, |(_, test)| test);
        seen.push(name.to_string());
        if let Some(want) = expected.get(name) {
            let want: BTreeMap<&str, usize> = want.iter().map(|(o, n)| (o.name(), *n)).collect();
            assert_eq!(counts, want, "{name}");
        }
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
