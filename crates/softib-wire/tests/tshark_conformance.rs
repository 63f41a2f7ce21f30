//! Conformance against Wireshark: packets built by softib-wire for every opcode, in every
//! encapsulation softib uses (RoCEv2 over IPv4 and IPv6 in Ethernet frames, native IB with
//! and without a GRH in LINKTYPE_INFINIBAND), are written to pcaps and decoded by `tshark`.
//! The test asserts that Wireshark reports nothing malformed and no expert warning or error,
//! and that its values for opcode, DestQP, PSN, R_Key, VA, DMA length, syndrome and MSN are ours.
//!
//! tshark is a required tool (`.ci/run` installs it): without it this test fails and says so.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use softib_wire::ethernet::EthernetRepr;
use softib_wire::grh::GrhRepr;
use softib_wire::lrh::{Lnh, LrhRepr};
use softib_wire::pcap::{CaptureWriter, LinkType};
use softib_wire::roce::{self, IpInfo, Ipv4Info, Ipv6Info, UdpInfo};
use softib_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CreditCode, DethRepr, NakCode, Opcode,
    PacketRepr, RdethRepr, RethRepr, RnrTimer, Service, Syndrome, XrcethRepr,
};

/// The values a packet was built with, to compare with what tshark reads.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Expected {
    opcode: u8,
    dest_qp: u32,
    psn: u32,
    rkey: Option<u32>,
    va: Option<u64>,
    dma_len: Option<u32>,
    syndrome: Option<u8>,
    msn: Option<u32>,
}

/// Builds one transport packet per opcode with field values that vary with the index, so a
/// decoder that mixes fields up cannot pass by accident.
fn build_all(payload: &[u8]) -> Vec<(Vec<u8>, Expected)> {
    let mut out = Vec::new();
    for (i, &opcode) in Opcode::ALL.iter().enumerate() {
        let i = i as u32;
        // Left out of the comparison, with reasons:
        // - the RoCEv2 CNP: not an IBA transport opcode; Wireshark 4.0 shows it as vendor data.
        // - RD: Wireshark 4.0 reads the RD extension headers 8 bytes after the end of the
        //   BTH (it shows the RDETH at BTH+8 and runs off the end of RDMA READ requests),
        //   while IBA vol. 1 9.2 (table 38 and figure 117's header order) and Wireshark's
        //   own parse order put the RDETH right after the BTH, then the DETH. softib follows
        //   the specification; its RD layouts are covered by softib-wire's byte-literal tests.
        if matches!(opcode.service(), Service::Cnp | Service::Rd) {
            continue;
        }
        let bth = BthRepr {
            opcode,
            solicited: i % 2 == 0,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x10_0000 + i * 0x1111,
            ack_req: i % 3 == 0,
            psn: (0xabcdef + i * 7919) & 0xff_ffff,
        };
        let mut p = PacketRepr::new(bth);
        let mut e = Expected {
            opcode: opcode.value(),
            dest_qp: bth.dest_qp,
            psn: bth.psn,
            ..Expected::default()
        };
        if opcode.has_rdeth() {
            p.rdeth = Some(RdethRepr {
                ee_context: 0x00_1234 + i,
            });
        }
        if opcode.has_deth() {
            p.deth = Some(DethRepr {
                qkey: 0x1111_0000 + i,
                src_qp: 0x00_0100 + i,
            });
        }
        if opcode.has_xrceth() {
            p.xrceth = Some(XrcethRepr {
                xrc_srq: 0x00_0200 + i,
            });
        }
        if opcode.has_reth() {
            let r = RethRepr {
                va: 0x0000_7f00_dead_0000 + u64::from(i) * 0x1000,
                rkey: 0x0bad_0000 + i,
                dma_len: 4096 * (i + 1),
            };
            p.reth = Some(r);
            e.rkey = Some(r.rkey);
            e.va = Some(r.va);
            e.dma_len = Some(r.dma_len);
        }
        if opcode.has_atomic_eth() {
            let a = AtomicEthRepr {
                va: 0x0000_7f00_beef_0008 + u64::from(i) * 8,
                rkey: 0x0a70_0000 + i,
                swap_or_add: 0x0102_0304_0506_0708,
                compare: 0x1112_1314_1516_1718,
            };
            p.atomic_eth = Some(a);
            e.rkey = Some(a.rkey);
            e.va = Some(a.va);
        }
        if opcode.has_aeth() {
            // Cycle through every kind of syndrome.
            let syndrome = match i % 4 {
                0 => Syndrome::Ack {
                    credit: CreditCode(31),
                },
                1 => Syndrome::Ack {
                    credit: CreditCode(5),
                },
                2 => Syndrome::RnrNak {
                    timer: RnrTimer(14),
                },
                _ => Syndrome::Nak(NakCode::PsnSequenceError),
            };
            let a = AethRepr {
                syndrome,
                msn: 0x00_0400 + i,
            };
            p.aeth = Some(a);
            e.syndrome = Some(syndrome.to_u8());
            e.msn = Some(a.msn);
        }
        if opcode.has_atomic_ack_eth() {
            p.atomic_ack_eth = Some(AtomicAckEthRepr {
                orig_remote_data: 0x5555_aaaa_0000_0000 + u64::from(i),
            });
        }
        if opcode.has_immdt() {
            p.immdt = Some(0xfeed_0000 + i);
        }
        if opcode.has_ieth() {
            p.ieth = Some(0x0c0c_0000 + i);
        }
        if opcode.has_payload() {
            // Payload lengths that exercise every PadCnt.
            p.payload = &payload[..payload.len() - (i as usize % 4)];
        }
        let mut buf = vec![0u8; p.buffer_len()];
        let n = p.emit(&mut buf).expect("emit");
        buf.truncate(n);
        out.push((buf, e));
    }
    out
}

fn write_pcaps(dir: &Path, packets: &[(Vec<u8>, Expected)]) -> Vec<(String, LinkType)> {
    let eth = EthernetRepr {
        dst_addr: [0x52, 0x54, 0x00, 0x00, 0x00, 0x02],
        src_addr: [0x52, 0x54, 0x00, 0x00, 0x00, 0x01],
        vlan: None,
        ethertype: 0,
    };
    let v4 = IpInfo::V4(Ipv4Info::new(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
    ));
    let v6 = IpInfo::V6(Ipv6Info::new(
        "fd00::1".parse::<Ipv6Addr>().unwrap(),
        "fd00::2".parse::<Ipv6Addr>().unwrap(),
    ));
    let lrh = LrhRepr {
        vl: 0,
        lver: 0,
        sl: 3,
        lnh: Lnh::Bth,
        dlid: 0x0012,
        pkt_len_words: 0,
        slid: 0x0034,
    };
    let grh = GrhRepr {
        traffic_class: 0,
        flow_label: 0x12345,
        payload_len: 0,
        next_header: 0x1b,
        hop_limit: 64,
        sgid: "fe80::1".parse::<Ipv6Addr>().unwrap().octets(),
        dgid: "fe80::2".parse::<Ipv6Addr>().unwrap().octets(),
    };
    let mut files = Vec::new();
    let cases: [(&str, LinkType); 4] = [
        ("rocev2-ipv4.pcap", LinkType::Ethernet),
        ("rocev2-ipv6.pcap", LinkType::Ethernet),
        // tshark 4.0 refuses LINKTYPE_INFINIBAND (247) files ("network type 247 unknown or
        // unsupported"), so native packets go in as LINKTYPE_USER0 (147), mapped to
        // Wireshark's `infiniband` dissector (LRH first) with a user DLT, see `tshark()`.
        ("native-lrh.pcap", LinkType::Other(USER0)),
        ("native-grh.pcap", LinkType::Other(USER0)),
    ];
    for (name, linktype) in cases {
        let mut w = CaptureWriter::create(dir.join(name), linktype).unwrap();
        for (k, (transport, e)) in packets.iter().enumerate() {
            let mut frame = vec![0u8; 9000];
            let n = match name {
                "rocev2-ipv4.pcap" | "rocev2-ipv6.pcap" => {
                    let ip = if name.contains("ipv4") { &v4 } else { &v6 };
                    let udp = UdpInfo::for_qps(e.dest_qp ^ 0x5a5a, e.dest_qp);
                    roce::emit_ethernet(&eth, ip, &udp, transport, &mut frame).unwrap()
                }
                "native-lrh.pcap" => {
                    softib_wire::native::emit(&lrh, None, transport, &mut frame).unwrap()
                }
                _ => softib_wire::native::emit(&lrh, Some(&grh), transport, &mut frame).unwrap(),
            };
            w.write(Duration::from_micros(k as u64), &frame[..n])
                .unwrap();
        }
        w.flush().unwrap();
        files.push((name.to_string(), linktype));
    }
    files
}

/// LINKTYPE_USER0, mapped to the `infiniband` dissector for native packets.
const USER0: u32 = 147;

const FIELDS: [&str; 11] = [
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.reth.r_key",
    "infiniband.reth.va",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "_ws.expert.severity",
    "_ws.malformed",
];

/// Runs tshark over a pcap; returns one map (field -> value) per frame.
fn tshark(path: &Path) -> Vec<BTreeMap<&'static str, String>> {
    let mut cmd = Command::new("tshark");
    // RoCEv2 sends UDP checksum 0 over IPv6 too, as Linux rxe does (the ICRC protects the
    // packet; RFC 6935 allows zero checksums for such tunnels): tell Wireshark so.
    cmd.args(["-n", "-o", "udp.ignore_ipv6_zero_checksum:TRUE"]);
    cmd.args([
        "-o",
        r#"uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0","""#,
        "-r",
    ])
    .arg(path)
    .args([
        "-T",
        "fields",
        "-E",
        "separator=\t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => panic!(
            "tshark is required for the Wireshark conformance test and could not be run ({e}); \
             install it with `apt-get install -y tshark` (.ci/run does)"
        ),
    };
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            FIELDS
                .iter()
                .copied()
                .zip(line.split('\t').map(str::to_string))
                .collect()
        })
        .collect()
}

fn parse_num(s: &str) -> u64 {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {s:?}"))
    } else {
        s.parse().unwrap_or_else(|_| panic!("bad number {s:?}"))
    }
}

fn opt(row: &BTreeMap<&str, String>, key: &str) -> Option<u64> {
    row.get(key).filter(|v| !v.is_empty()).map(|v| parse_num(v))
}

#[test]
fn tshark_reads_every_opcode_in_every_encapsulation_as_we_wrote_it() {
    let dir = std::env::temp_dir().join(format!("softib-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let payload: Vec<u8> = (0..64u8).collect();
    let packets = build_all(&payload);
    // RC 23 (with IBA 1.5's ATOMIC WRITE) + UC 12 + UD 2 + XRC 23 opcodes (IBA 9.2, table 38).
    assert!(
        packets.len() >= 50,
        "every RC/UC/UD/XRC opcode: {}",
        packets.len()
    );
    for (name, _) in write_pcaps(&dir, &packets) {
        let rows = tshark(&dir.join(&name));
        assert_eq!(rows.len(), packets.len(), "{name}: one row per frame");
        for (row, (_, e)) in rows.iter().zip(&packets) {
            let ctx = format!(
                "{name} frame {} opcode {:#04x}",
                row["frame.number"], e.opcode
            );
            assert_eq!(row["_ws.malformed"], "", "{ctx}: Wireshark says malformed");
            // Expert severities: 0x00200000 note... we refuse warning (0x00600000) and error (0x00800000).
            for sev in row["_ws.expert.severity"]
                .split(',')
                .filter(|s| !s.is_empty())
            {
                let sev = parse_num(sev);
                assert!(
                    sev < 0x0060_0000,
                    "{ctx}: Wireshark expert severity {sev:#x}"
                );
            }
            assert_eq!(
                opt(row, "infiniband.bth.opcode"),
                Some(u64::from(e.opcode)),
                "{ctx}: opcode"
            );
            assert_eq!(
                opt(row, "infiniband.bth.destqp"),
                Some(u64::from(e.dest_qp)),
                "{ctx}: DestQP"
            );
            assert_eq!(
                opt(row, "infiniband.bth.psn"),
                Some(u64::from(e.psn)),
                "{ctx}: PSN"
            );
            if e.opcode >> 5 == 5 {
                // XRC (0xA0..): Wireshark 4.0 names the opcode but shows everything after the
                // BTH as "Vendor Specific or Unknown Header Sequence", so only the BTH compares.
                continue;
            }
            if e.opcode == Opcode::RC_ATOMIC_WRITE.value() {
                // IBA 1.5's ATOMIC WRITE (0x1D) is newer than Wireshark 4.0: it reads the BTH
                // (compared above) and nothing after it. Assert that, so this test says when
                // a newer Wireshark starts decoding the RETH and the comparison can be added.
                assert_eq!(opt(row, "infiniband.reth.r_key"), None, "{ctx}: R_Key");
                continue;
            }
            if e.dma_len.is_some() {
                assert_eq!(
                    opt(row, "infiniband.reth.r_key"),
                    e.rkey.map(u64::from),
                    "{ctx}: R_Key"
                );
                assert_eq!(opt(row, "infiniband.reth.va"), e.va, "{ctx}: VA");
                assert_eq!(
                    opt(row, "infiniband.reth.dmalen"),
                    e.dma_len.map(u64::from),
                    "{ctx}: DMA length"
                );
            }
            assert_eq!(
                opt(row, "infiniband.aeth.syndrome"),
                e.syndrome.map(u64::from),
                "{ctx}: syndrome"
            );
            assert_eq!(
                opt(row, "infiniband.aeth.msn"),
                e.msn.map(u64::from),
                "{ctx}: MSN"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
