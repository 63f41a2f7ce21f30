//! Hostile datagrams at port 4791 while a transfer runs, through real sockets: random bytes
//! (bad ICRC), runts shorter than a BTH, datagrams longer than any RoCEv2 packet, and random
//! transport headers sealed with a valid ICRC (so they reach the engine). Nothing
//! crashes, the transfer completes byte-exact, and each kind is counted under its own cause.
//! (Datagrams with a bad UDP checksum never reach a socket: the kernel drops them and counts
//! them in its own UDP statistics, `InCsumErrors`.)

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{pattern, rc_pair, third_host_socket, unique_loopback};
use softib_net::roce::seal;
use softib_transport::{SendFlags, SendWr, Sge, WrOpcode};

const REGION: usize = 1 << 20;
const GARBAGE: u64 = 100;
const RUNTS: u64 = 50;
const OVERSIZE: u64 = 20;
const SEALED: u64 = 100;

#[test]
fn hostile_datagrams_are_dropped_and_counted_by_cause_while_a_transfer_runs() {
    let (a, b) = rc_pair(&unique_loopback(1, 0x61), &unique_loopback(2, 0x61), REGION);
    let data = pattern(11, REGION);
    a.ctx.write_mr(&a.mr, 0, &data).unwrap();
    let b_addr: SocketAddr = b.ctx.local_addr();
    let hostile = third_host_socket(0x61);
    let from = hostile.local_addr().unwrap();
    let before = b.ctx.counters();

    let chunk = 64 * 1024;
    let wrs: Vec<SendWr> = (0..REGION / chunk)
        .map(|i| SendWr {
            wr_id: i as u64,
            opcode: WrOpcode::RdmaWrite,
            flags: SendFlags::SIGNALED,
            sg_list: vec![Sge {
                addr: a.mr.addr + (i * chunk) as u64,
                length: chunk as u32,
                lkey: a.mr.keys.lkey,
            }],
            remote_addr: b.mr.addr + (i * chunk) as u64,
            rkey: b.mr.keys.rkey,
            ..Default::default()
        })
        .collect();
    a.ctx.post_send(a.qpn, &wrs).unwrap();

    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Paced (a pause every 10), so no datagram is lost to a full socket buffer while the
    // transfer also runs: the counts below are exact.
    let mut sent = 0u32;
    let mut send = |d: &[u8]| {
        hostile.send_to(d, b_addr).expect("send a hostile datagram");
        sent += 1;
        if sent % 10 == 0 {
            std::thread::sleep(Duration::from_micros(500));
        }
    };
    for _ in 0..GARBAGE {
        // At least a BTH's worth, so it is not a runt: the ICRC decides.
        let len = 16 + (next() % 900) as usize;
        let d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        send(&d);
    }
    for i in 0..RUNTS {
        let d: Vec<u8> = (0..(1 + i % 15)).map(|_| next() as u8).collect();
        send(&d);
    }
    for _ in 0..OVERSIZE {
        send(&vec![0xA5; 9000]);
    }
    for _ in 0..SEALED {
        // Random transport bytes with a valid ICRC: past the driver, the engine parses them.
        let len = 12 + (next() % 200) as usize;
        let mut d: Vec<u8> = (0..len + 4).map(|_| next() as u8).collect();
        let n = seal(from, b_addr, 0, 0, &mut d, len).expect("room for the ICRC");
        send(&d[..n]);
    }
    a.completions(wrs.len(), 30);
    assert_eq!(b.read(0, REGION), data, "the transfer arrived byte-exact");

    // The device thread may still be reading the last hostile datagrams.
    let counted = |c: &(
        softib_transport::DeviceCounters,
        softib_net::driver::DriverCounters,
    )| {
        let (dev, drv) = c;
        let (dev0, drv0) = &before;
        let engine_drops = (dev.malformed_drops - dev0.malformed_drops)
            + (dev.unknown_qp_drops - dev0.unknown_qp_drops)
            + (dev.wrong_service_drops - dev0.wrong_service_drops)
            + (dev.bad_pkey_drops - dev0.bad_pkey_drops)
            + (dev.bad_qkey_drops - dev0.bad_qkey_drops)
            + (dev.wrong_state_drops - dev0.wrong_state_drops)
            + (dev.foreign_source_drops - dev0.foreign_source_drops);
        (
            drv.rx.icrc_errors - drv0.rx.icrc_errors,
            drv.rx.runts - drv0.rx.runts,
            drv.rx_oversize - drv0.rx_oversize,
            engine_drops,
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (icrc, runts, truncated, engine) = counted(&b.ctx.counters());
        if icrc == GARBAGE && runts == RUNTS && truncated == OVERSIZE && engine >= SEALED {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counted by cause: ICRC {icrc} of {GARBAGE}, runts {runts} of {RUNTS}, oversize \
             {truncated} of {OVERSIZE}, engine drops {engine} of {SEALED}: {:?}",
            b.ctx.counters()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
