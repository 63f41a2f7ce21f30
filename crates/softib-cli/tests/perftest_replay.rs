//! The servers against the client side of real stock-tool exchanges: the TCP bytes a stock
//! `ib_write_bw`, `ib_read_bw` and `ib_send_bw -c UD` client sent to a Linux rxe server
//! (bundled captures) are replayed to `softib write-bw`/`read-bw`/`send-bw`. The WRITE and
//! READ servers only lend memory and the UD server counts what arrives, so no RDMA traffic
//! is needed: each must consume the stock client's stream step by step, answer with
//! exactly as many bytes as the stock server did, print the client's report, and exit 0.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use common::{await_listener, pair, server, wait};
use softib_net::oob::perftest::{PerftestDest, PerftestVersion, KEY_MSG_LEN_GID};

/// TCP payloads on port 18515 of an Ethernet/IPv4 capture: (client->server, server->client).
fn tcp_streams(name: &str) -> (Vec<u8>, Vec<u8>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name);
    let file = std::fs::File::open(&path).expect("bundled capture");
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("pcap header");
    let (mut to_server, mut to_client) = (Vec::new(), Vec::new());
    while let Some(pkt) = reader.next_packet() {
        let f = pkt.expect("pcap record").data.into_owned();
        if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[14 + 9] != 6 {
            continue;
        }
        let ip = &f[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let tcp = &ip[ihl..total];
        let (sport, dport) = (
            u16::from_be_bytes([tcp[0], tcp[1]]),
            u16::from_be_bytes([tcp[2], tcp[3]]),
        );
        let payload = &tcp[usize::from(tcp[12] >> 4) * 4..];
        if dport == 18515 {
            to_server.extend_from_slice(payload);
        } else if sport == 18515 {
            to_client.extend_from_slice(payload);
        }
    }
    (to_server, to_client)
}

fn replay(n: u8, capture: &str, tool: &str, args: &[&str]) -> (Vec<u8>, Vec<u8>, String) {
    let (c2s, s2c) = tcp_streams(capture);
    let p = pair(n);
    let s = server(&p, tool, args);
    await_listener(&p);
    let mut c = TcpStream::connect((p.server_ip.as_str(), p.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(&c2s).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let out = wait(s, Duration::from_secs(60), "server");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    (got, s2c, stdout)
}

/// Checks our answer has the stock server's shape: the same length, our version first,
/// then the same system data and MTU sizes, and key messages that parse.
fn check_answer(ours: &[u8], stock: &[u8]) {
    assert_eq!(
        ours.len(),
        stock.len(),
        "answer length differs from the stock server's"
    );
    assert_eq!(PerftestVersion::parse(&ours[..16]).unwrap().text, "6.06");
    let keys = &ours[16 + 4 + 4 + 2..];
    let first = PerftestDest::parse(&keys[..KEY_MSG_LEN_GID]).unwrap();
    assert!(first.gid.is_some());
    assert!(ours.ends_with(b"done\0"));
}

#[test]
fn write_bw_server_answers_a_stock_client_byte_for_byte_in_shape() {
    let (ours, stock, out) = replay(150, "rxe-write_bw.pcap", "write-bw", &["-s", "4096"]);
    check_answer(&ours, &stock);
    // The server prints the stock client's report: 4096-byte messages, 100 iterations.
    let rows = common::report_rows(&out, "#bytes");
    assert_eq!(
        (rows[0][0].as_str(), rows[0][1].as_str()),
        ("4096", "100"),
        "{out}"
    );
}

#[test]
fn read_bw_server_answers_a_stock_client() {
    let (ours, stock, out) = replay(151, "rxe-read_bw-oob.pcap", "read-bw", &["-s", "4096"]);
    check_answer(&ours, &stock);
    let rows = common::report_rows(&out, "#bytes");
    assert_eq!(
        (rows[0][0].as_str(), rows[0][1].as_str()),
        ("4096", "100"),
        "{out}"
    );
}

#[test]
fn ud_send_bw_server_follows_a_stock_client_through_every_step() {
    let (ours, stock, _) = replay(
        152,
        "rxe-send_bw_ud.pcap",
        "send-bw",
        &["-c", "UD", "-s", "1024", "-n", "100", "--oob-timeout", "5"],
    );
    check_answer(&ours, &stock);
}

#[test]
fn pingpong_server_answers_a_stock_ibv_rc_pingpong_client() {
    use softib_net::oob::pingpong::PingpongDest;
    let (c2s, s2c) = tcp_streams("rxe-rc_pingpong-oob.pcap");
    assert_eq!((c2s.len(), s2c.len()), (52 + 5, 52));
    let p = pair(153);
    // No RDMA traffic follows (the client is a replay), so the server gives up after the
    // exchange; what matters here is its answer.
    let s = server(&p, "pingpong", &["--oob-timeout", "1"]);
    await_listener(&p);
    let mut c = TcpStream::connect((p.server_ip.as_str(), p.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(&c2s).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let out = wait(s, Duration::from_secs(60), "server");
    assert_eq!(got.len(), s2c.len());
    let ours = PingpongDest::parse(&got).unwrap();
    assert_eq!(ours.gid[10..12], [0xff, 0xff], "an IPv4-mapped GID");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The stock client's address as ibv_rc_pingpong prints it.
    assert!(
        stdout.contains("  remote address: LID 0x0000, QPN 0x"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no completion"));
}
