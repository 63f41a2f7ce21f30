//! Sends the datagrams whose IPv4 Identification field docs/design/net.md reports: three
//! single datagrams and one UDP GSO group of four segments, from a softib socket to a
//! listener, both on `ADDR` (default 127.0.0.1). Capture them with tcpdump to see what
//! the kernel writes into the ID field (which the RoCEv2 ICRC covers, Annex A17.3.3):
//!
//! ```text
//! ip netns add idprobe && ip -n idprobe link set lo up
//! ip netns exec idprobe tcpdump -i lo -w /tmp/id.pcap udp port 4791 &
//! ip netns exec idprobe cargo run -p softib-net --example ipv4_id_probe
//! tshark -r /tmp/id.pcap -T fields -e ip.id -e ip.flags.df -e udp.length
//! ```

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use softib_net::socket::{RoceSocket, SocketConfig, TxBatch, ROCE_V2_PORT};

fn main() {
    let ip: IpAddr = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let mut rx_config = SocketConfig::new(SocketAddr::new(ip, ROCE_V2_PORT));
    rx_config.gro = false;
    let mut rx = RoceSocket::bind(&rx_config).expect("bind listener on port 4791");
    let mut tx = RoceSocket::bind(&SocketConfig::new(SocketAddr::new(ip, 0))).expect("bind sender");
    let dest = rx.local_addr();
    println!("sender GSO available: {}", tx.stats().gso);

    let mut batch = TxBatch::new(64 * 1024, 8, false);
    for i in 0..3u8 {
        batch
            .push_with(dest, None, 100, |b, oracle| {
                b.fill(i);
                println!(
                    "single datagram {i}: predicted IPv4 ident {}",
                    oracle.ipv4_ident(100)
                );
                100
            })
            .expect("room");
    }
    tx.send(&mut batch).expect("send singles");

    let mut gso = TxBatch::new(64 * 1024, 8, tx.stats().gso);
    for i in 0..4u8 {
        gso.push_with(dest, None, 1000, |b, oracle| {
            b.fill(0x10 + i);
            println!(
                "GSO segment {i}: predicted IPv4 ident {}",
                oracle.ipv4_ident(1000)
            );
            1000
        })
        .expect("room");
    }
    tx.send(&mut gso).expect("send GSO group");

    let mut rb = rx.rx_batch(16, 2048);
    let mut got = 0;
    while got < 7
        && rx
            .wait_readable(Some(Duration::from_secs(2)))
            .expect("poll")
    {
        rx.recv(&mut rb).expect("recv");
        for d in rb.iter() {
            println!(
                "received {} bytes from {} tos {:?}",
                d.payload.len(),
                d.source,
                d.tos
            );
            got += 1;
        }
    }
    println!(
        "received {got} of 7 datagrams; socket stats {:?}",
        tx.stats()
    );
}
