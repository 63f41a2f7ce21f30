//! The pcap tap writes raw-IP records that softib-wire and tshark decode as RoCEv2, with the
//! ICRC exactly as given (valid when the datagram was intact, invalid when corrupted).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;

use softib_net::tap::PcapTap;
use softib_wire::pcap::{CaptureReader, LinkType};
use softib_wire::roce::{icrc_from_parts, IpInfo, Ipv4Info, Ipv6Info, RoceFrame, UdpInfo};
use softib_wire::{BthRepr, Opcode, PacketRepr};

/// An RC SEND_ONLY with `payload`, as the UDP payload softib would send (ICRC appended).
fn datagram(ip: &IpInfo, udp: &UdpInfo, payload: &[u8]) -> Vec<u8> {
    let mut p = PacketRepr::new(BthRepr {
        opcode: Opcode::RC_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x11,
        ack_req: true,
        psn: 0x123456,
    });
    p.payload = payload;
    let mut buf = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut buf).unwrap();
    buf.truncate(n);
    let icrc = icrc_from_parts(ip, udp, &buf);
    buf.extend_from_slice(&icrc.to_le_bytes());
    buf
}

#[test]
fn tap_records_decode_as_rocev2_with_the_icrc_as_given() {
    let dir = std::env::temp_dir().join(format!("softib-net-tap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tap.pcap");
    let v4 = IpInfo::V4(Ipv4Info {
        tos: 0x02,
        ident: 3,
        ..Ipv4Info::new(Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2))
    });
    let v6 = IpInfo::V6(Ipv6Info::new(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST));
    let udp = UdpInfo {
        src_port: 4791,
        dst_port: 4791,
    };
    let good4 = datagram(&v4, &udp, b"hello, rxe");
    let good6 = datagram(&v6, &udp, &[7u8; 333]);
    let mut bad4 = good4.clone();
    bad4[20] ^= 0x10;
    {
        let mut tap = PcapTap::create(&path).unwrap();
        tap.record(&v4, &udp, &good4).unwrap();
        tap.record(&v6, &udp, &good6).unwrap();
        tap.record(&v4, &udp, &bad4).unwrap();
        tap.record(&v4, &udp, &[1, 2]).unwrap();
        assert_eq!((tap.recorded(), tap.skipped()), (3, 1));
    }
    let mut reader = CaptureReader::open(&path).unwrap();
    assert_eq!(reader.linktype(), Some(LinkType::Raw));
    let mut icrc_ok = Vec::new();
    while let Some(rec) = reader.next_record() {
        let rec = rec.unwrap();
        let f = RoceFrame::parse_ip(&rec.data).unwrap();
        assert_eq!(f.udp.dst_port, 4791);
        icrc_ok.push(f.icrc_ok());
    }
    assert_eq!(icrc_ok, [true, true, false]);

    // Wireshark's dissector sees InfiniBand over UDP 4791 in raw-IP records.
    let out = Command::new("tshark")
        .args([
            "-r",
            path.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.destqp",
        ])
        .output()
        .expect("tshark is needed for this test (.ci/run installs it)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("4\t") && l.ends_with("0x000011")),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
