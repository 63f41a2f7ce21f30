//! The out-of-band exchange formats against real captures of ibv_rc_pingpong and perftest
//! between two Linux rxe hosts (testdata/captures): every message parses, re-serialises
//! byte for byte, and the streams follow the documented step sequence exactly.

use std::path::PathBuf;

use softib_net::oob::perftest::{
    parse_done as perftest_done, parse_i32_msg, BwReport, MtuMsg, PerftestDest, PerftestVersion,
    KEY_MSG_LEN_GID,
};
use softib_net::oob::pingpong::{parse_done, PingpongDest, PINGPONG_MSG_LEN};

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name)
}

/// Concatenated TCP payloads of port-18515 traffic, (client->server, server->client),
/// from an Ethernet/IPv4 pcap. The client is the side whose source port is not 18515.
fn tcp_streams(name: &str) -> (Vec<u8>, Vec<u8>) {
    let file = std::fs::File::open(capture(name)).expect("bundled capture");
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("pcap header");
    let (mut to_server, mut to_client) = (Vec::new(), Vec::new());
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.expect("pcap record");
        let f = &pkt.data[..];
        if f.len() < 14 + 20 + 20 || f[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &f[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if ip[9] != 6 {
            continue;
        }
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let tcp = &ip[ihl..total];
        let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
        let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
        let doff = usize::from(tcp[12] >> 4) * 4;
        let payload = &tcp[doff..];
        if dport == 18515 {
            to_server.extend_from_slice(payload);
        } else if sport == 18515 {
            to_client.extend_from_slice(payload);
        }
    }
    (to_server, to_client)
}

fn take<'a>(s: &mut &'a [u8], n: usize) -> &'a [u8] {
    assert!(
        s.len() >= n,
        "stream ended early: wanted {n} bytes, {} left",
        s.len()
    );
    let (a, b) = s.split_at(n);
    *s = b;
    a
}

#[test]
fn rc_pingpong_messages_parse_and_reserialise_byte_exactly() {
    let (c2s, s2c) = tcp_streams("rxe-rc_pingpong-oob.pcap");
    assert_eq!(
        c2s.len(),
        PINGPONG_MSG_LEN + 5,
        "client sends its keys then done"
    );
    assert_eq!(s2c.len(), PINGPONG_MSG_LEN, "server sends its keys");
    let client = PingpongDest::parse(&c2s[..PINGPONG_MSG_LEN]).unwrap();
    let server = PingpongDest::parse(&s2c).unwrap();
    assert_eq!(client.to_bytes()[..], c2s[..PINGPONG_MSG_LEN]);
    assert_eq!(server.to_bytes()[..], s2c[..]);
    assert_eq!(
        client.gid,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 2]
    );
    assert_eq!(server.gid[12..], [10, 99, 0, 1]);
    assert_eq!((client.qpn, client.psn), (0x12, 0x145bf3));
    parse_done(&c2s[PINGPONG_MSG_LEN..]).unwrap();
}

/// Walks one direction of a perftest bandwidth run through the documented sequence.
fn check_perftest_stream(mut s: &[u8], client: bool) -> Vec<PerftestDest> {
    let v = take(&mut s, 16);
    let version = PerftestVersion::parse(v).unwrap();
    assert_eq!(version.to_bytes()[..], v[..]);
    assert!(version.has_u64_iters());
    assert_eq!(parse_i32_msg(take(&mut s, 4)).unwrap(), 4096, "page size");
    assert_eq!(parse_i32_msg(take(&mut s, 4)).unwrap(), 64, "cache line");
    let m = take(&mut s, 2);
    let mtu = MtuMsg::parse(m).unwrap();
    assert_eq!(mtu.to_bytes()[..], m[..]);
    assert_eq!(mtu.mtu_bytes(), 1024);
    let mut keys = Vec::new();
    for _ in 0..4 {
        let k = take(&mut s, KEY_MSG_LEN_GID);
        let d = PerftestDest::parse(k).unwrap();
        assert_eq!(
            d.to_bytes()[..],
            k[..],
            "key message re-serialises byte for byte"
        );
        keys.push(d);
    }
    let mut report = [[0u8; 8]; 5];
    for r in &mut report {
        r.copy_from_slice(take(&mut s, 8));
    }
    let rep = BwReport::from_messages(&report);
    assert_eq!(rep.to_messages(), report);
    if client {
        assert_eq!((rep.size, rep.iters), (4096, 100));
        assert!(rep.bw_avg > 0.0 && rep.bw_peak >= rep.bw_avg);
    }
    let k = take(&mut s, KEY_MSG_LEN_GID);
    keys.push(PerftestDest::parse(k).unwrap());
    perftest_done(take(&mut s, 5)).unwrap();
    assert!(s.is_empty(), "{} unexpected trailing bytes", s.len());
    keys
}

#[test]
fn perftest_write_bw_exchange_follows_the_documented_sequence() {
    let (c2s, s2c) = tcp_streams("rxe-write_bw.pcap");
    let ck = check_perftest_stream(&c2s, true);
    let sk = check_perftest_stream(&s2c, false);
    assert!(
        ck.iter().all(|k| *k == ck[0]),
        "the client repeats the same keys"
    );
    assert_eq!(ck[0].gid.unwrap()[10..], [0xff, 0xff, 10, 99, 0, 2]);
    assert_eq!(sk[0].gid.unwrap()[12..], [10, 99, 0, 1]);
    assert_eq!((sk[0].qpn, sk[0].rkey, sk[0].out_reads), (0x12, 0x36c, 1));
}

#[test]
fn perftest_read_bw_exchange_follows_the_documented_sequence() {
    let (c2s, s2c) = tcp_streams("rxe-read_bw-oob.pcap");
    let ck = check_perftest_stream(&c2s, true);
    let sk = check_perftest_stream(&s2c, false);
    assert_eq!(
        ck[0].out_reads, 0x80,
        "read_bw announces its outstanding reads"
    );
    assert_eq!(sk[0].qpn, 0x13);
}

#[test]
fn perftest_ud_send_bw_exchange_parses() {
    let (c2s, s2c) = tcp_streams("rxe-send_bw_ud.pcap");
    for s in [&c2s, &s2c] {
        let mut st = &s[26..];
        while st.len() >= KEY_MSG_LEN_GID && st[4] == b':' {
            let k = take(&mut st, KEY_MSG_LEN_GID);
            let d = PerftestDest::parse(k).unwrap();
            assert_eq!(d.to_bytes()[..], k[..]);
            assert_eq!(d.rkey, 0, "UD exposes no memory");
        }
    }
}
