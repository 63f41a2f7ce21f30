//! Engine throughput: 4 KiB RDMA WRITEs between two devices on one core, packets handed
//! over directly (no link model). Prints packets/s.
//!
//! `cargo run --release -p softib-transport --example pair_throughput`

use softib_transport::harness::{empty_wc, Pair, QpOptions};
use softib_transport::{Mtu, RxGrh, RxMeta, SendFlags, SendWr, Sge, WrOpcode};

fn main() {
    let mut pair = Pair::new(1);
    let (a, b) = pair.connect(&QpOptions {
        mtu: Mtu::M4096,
        sq_depth: 1024,
        cq_depth: 1 << 16,
        buf_len: 1 << 22,
        ..Default::default()
    });
    let mut buf = vec![0u8; 8192];
    let mut rx = vec![0u8; 8192];
    // What the driver reports for a packet from device `from` (its GID as the source): a
    // connected QP takes packets from its peer only.
    let meta: Vec<RxMeta> = (0..2)
        .map(|from| RxMeta {
            grh: Some(RxGrh {
                sgid: pair.device(from).config().gid,
                dgid: pair.device(1 - from).config().gid,
                ..RxGrh::default()
            }),
            ..RxMeta::default()
        })
        .collect();
    let total = 2_000_000u64;
    let (mut posted, mut done, mut packets, mut now) = (0u64, 0u64, 0u64, 0u64);
    let mut wcs = [empty_wc(); 64];
    let start = std::time::Instant::now();
    while done < total {
        while posted < total && posted - done < 512 {
            let off = (posted % 1024) * 4096;
            let wr = SendWr {
                wr_id: posted,
                opcode: WrOpcode::RdmaWrite,
                sg_list: vec![Sge {
                    addr: a.addr + off,
                    length: 4096,
                    lkey: a.keys.lkey,
                }],
                flags: if posted % 64 == 63 {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty()
                },
                remote_addr: b.addr + off,
                rkey: b.keys.rkey,
                ..Default::default()
            };
            pair.dev(0).post_send(now, a.qpn, &wr).expect("post");
            posted += 1;
        }
        now += 1_000;
        for (from, from_meta) in meta.iter().enumerate() {
            while let Some(t) = pair.dev(from).poll_transmit(now, &mut buf) {
                packets += 1;
                rx[..t.len].copy_from_slice(&buf[..t.len]);
                pair.dev(1 - from)
                    .handle_packet(now, from_meta, &rx[..t.len]);
            }
        }
        loop {
            let n = pair.dev(0).poll_cq(a.send_cq, &mut wcs);
            if n == 0 {
                break;
            }
            done += 64 * n as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{packets} packets ({} data + ACKs) in {secs:.3} s: {:.2} M packets/s, {:.2} Gb/s of payload",
        total,
        packets as f64 / secs / 1e6,
        total as f64 * 4096.0 * 8.0 / secs / 1e9
    );
}
