//! The encapsulations agree with Wireshark's dissectors: RoCEv2 over IPv4 and IPv6 in
//! Ethernet frames, and native IB packets (LRH, LRH + GRH) in a `LINKTYPE_INFINIBAND` capture,
//! all written by softib's pcap writer, are decoded by `tshark` with no malformed-packet or
//! error-level expert item, and tshark's values for the link/network fields equal ours.
//! Needs `tshark` (`.ci/run` installs it).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use softib_wire::bth::BthRepr;
use softib_wire::ethernet::EthernetRepr;
use softib_wire::grh::{GrhRepr, NXT_HDR_IBA};
use softib_wire::lrh::{Lnh, LrhRepr};
use softib_wire::pcap::{CaptureWriter, LinkType};
use softib_wire::roce::{emit_ethernet, IpInfo, Ipv4Info, Ipv6Info, UdpInfo};
use softib_wire::{native, Opcode, PacketRepr};

fn transport(dest_qp: u32, psn: u32) -> Vec<u8> {
    let payload = [0xA5u8; 10];
    let mut repr = PacketRepr::new(BthRepr {
        opcode: Opcode::RC_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: true,
        psn,
    });
    repr.payload = &payload;
    let mut t = vec![0u8; repr.buffer_len()];
    repr.emit(&mut t).unwrap();
    t
}

fn temp_pcap(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("softib-wire-{}-{name}.pcap", std::process::id()))
}

/// `LINKTYPE_USER0`. Wireshark 4.0's pcap reader does not map `LINKTYPE_INFINIBAND` (247) to
/// its InfiniBand dissector, so the native test writes the same records under a user link
/// type and tells tshark to hand those to the `infiniband` dissector.
const USER0: u32 = 147;
const USER_DLT_TO_IB: &str = r#"uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0","""#;

/// Runs tshark over `path` and returns one line per packet of comma-separated `fields`.
fn tshark_fields(path: &Path, fields: &[&str]) -> Vec<String> {
    let mut args = vec![
        "-r".to_string(),
        path.display().to_string(),
        "-T".into(),
        "fields".into(),
    ];
    args.extend([
        "-o".into(),
        USER_DLT_TO_IB.into(),
        "--disable-protocol".into(),
        "rpcordma".into(),
    ]);
    args.extend([
        "-E".into(),
        "separator=,".into(),
        "-o".into(),
        "ip.check_checksum:TRUE".into(),
    ]);
    for f in fields {
        args.push("-e".into());
        args.push((*f).into());
    }
    let out = Command::new("tshark")
        .args(&args)
        .output()
        .expect("this test runs tshark; install it (apt-get install tshark)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Hex-formatted fields become decimal, so the comparison does not depend on how a
    // Wireshark version displays a field.
    let normalise = |f: &str| match f.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).map_or(f.to_string(), |v| v.to_string()),
        None => f.to_string(),
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split(',').map(normalise).collect::<Vec<_>>().join(","))
        .collect()
}

/// Packets tshark flags as malformed or with an error-level expert item.
fn tshark_problems(path: &Path) -> Vec<String> {
    let out = Command::new("tshark")
        .args([
            "-r",
            &path.display().to_string(),
            "-o",
            USER_DLT_TO_IB,
            "-o",
            "ip.check_checksum:TRUE",
        ])
        // RPC-over-RDMA's heuristic claims the test payload and then fails on it; that is
        // about the payload bytes, not the headers under test.
        .args(["--disable-protocol", "rpcordma"])
        // RoCEv2 sends UDP checksum 0 over IPv6 too, as Linux does (the ICRC protects the
        // packet; RFC 6935 allows zero checksums for such tunnels); Wireshark flags that unless told.
        .args(["-o", "udp.ignore_ipv6_zero_checksum:TRUE"])
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= \"error\""])
        .output()
        .expect("tshark");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn rocev2_ipv4_and_ipv6_frames_decode_in_wireshark() {
    let path = temp_pcap("roce");
    let eth = EthernetRepr {
        dst_addr: [2, 0, 0, 0, 0, 2],
        src_addr: [2, 0, 0, 0, 0, 1],
        vlan: None,
        ethertype: 0,
    };
    let v4 = IpInfo::V4(Ipv4Info {
        ident: 0x1234,
        tos: 0x02,
        ..Ipv4Info::new(Ipv4Addr::new(10, 1, 0, 1), Ipv4Addr::new(10, 1, 0, 2))
    });
    let v6 = IpInfo::V6(Ipv6Info {
        flow_label: 0xABCDE,
        ..Ipv6Info::new(
            "fd00::1".parse::<Ipv6Addr>().unwrap(),
            "fd00::2".parse().unwrap(),
        )
    });
    let udp = UdpInfo::for_qps(0x11, 0x12);
    let mut w = CaptureWriter::create(&path, LinkType::Ethernet).unwrap();
    let mut buf = [0u8; 256];
    for (i, ip) in [v4, v6].iter().enumerate() {
        let t = transport(0x12, 100 + i as u32);
        let n = emit_ethernet(&eth, ip, &udp, &t, &mut buf).unwrap();
        w.write(Duration::from_micros(i as u64), &buf[..n]).unwrap();
    }
    w.into_inner().unwrap();
    let rows = tshark_fields(
        &path,
        &[
            "ip.src",
            "ip.id",
            "ip.checksum.status",
            "ipv6.src",
            "ipv6.flow",
            "udp.srcport",
            "udp.dstport",
            "infiniband.bth.destqp",
            "infiniband.bth.psn",
        ],
    );
    let problems = tshark_problems(&path);
    if std::env::var_os("KEEP_PCAP").is_none() {
        std::fs::remove_file(&path).ok();
    }
    assert_eq!(rows.len(), 2, "{rows:?}");
    let port = udp.src_port;
    assert_eq!(rows[0], format!("10.1.0.1,4660,1,,,{port},4791,18,100"));
    assert_eq!(
        rows[1],
        format!(",,,fd00::1,{},{port},4791,18,101", 0xABCDE)
    );
    assert!(problems.is_empty(), "tshark problems: {problems:?}");
}

#[test]
fn native_ib_packets_decode_in_wireshark() {
    let path = temp_pcap("native");
    let lrh = LrhRepr {
        vl: 3,
        lver: 0,
        sl: 5,
        lnh: Lnh::Bth,
        dlid: 0x0007,
        pkt_len_words: 0,
        slid: 0x0002,
    };
    let grh = GrhRepr {
        traffic_class: 0x20,
        flow_label: 0x54321,
        payload_len: 0,
        next_header: NXT_HDR_IBA,
        hop_limit: 9,
        sgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        dgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    };
    let t = transport(0x40, 7);
    let mut w = CaptureWriter::create(&path, LinkType::Other(USER0)).unwrap();
    let mut buf = [0u8; 256];
    let local = native::emit(&lrh, None, &t, &mut buf).unwrap();
    w.write(Duration::ZERO, &buf[..local]).unwrap();
    let global = native::emit(&lrh, Some(&grh), &t, &mut buf).unwrap();
    w.write(Duration::from_micros(1), &buf[..global]).unwrap();
    w.into_inner().unwrap();
    let rows = tshark_fields(
        &path,
        &[
            "infiniband.lrh.vl",
            "infiniband.lrh.sl",
            "infiniband.lrh.lnh",
            "infiniband.lrh.dlid",
            "infiniband.lrh.pktlen",
            "infiniband.lrh.slid",
            "infiniband.grh.paylen",
            "infiniband.grh.hoplmt",
            "infiniband.bth.destqp",
            "infiniband.bth.psn",
        ],
    );
    let problems = tshark_problems(&path);
    std::fs::remove_file(&path).ok();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let words = |n: usize| (n - 2) / 4;
    assert_eq!(rows[0], format!("3,5,2,7,{},2,,,64,7", words(local)));
    assert_eq!(
        rows[1],
        format!("3,5,3,7,{},2,{},9,64,7", words(global), t.len() + 4)
    );
    assert!(problems.is_empty(), "tshark problems: {problems:?}");
}
