//! A connected QP takes packets from its peer only, through real sockets: while two devices
//! on loopback run an RC WRITE transfer, a third host (another loopback address) sends
//! valid-ICRC RoCEv2 packets at the receiving QP, guessing nothing: it is told the QPN, the
//! R_Key and the expected PSN. Linux rxe drops such packets before transport processing
//! (rxe_recv.c, check_addr); so must softib. Asserted: the transfer completes byte-exact,
//! the foreign writes land nowhere, the receiving QP's counters show no trace of them (no
//! duplicates, no out-of-sequence drops, no NAK sent), and the device's
//! `foreign_source_drops` counts every one.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{pattern, rc_pair, third_host_socket, unique_loopback};
use softib_net::roce::seal;
use softib_transport::{SendFlags, SendWr, Sge, WrOpcode};
use softib_wire::{BthRepr, Opcode, PacketRepr, RethRepr};

const REGION: usize = 2 << 20;
/// The real transfer covers the first half; the third host aims at the second.
const TRANSFER: usize = REGION / 2;
const FOREIGN_OFFSET: u64 = (REGION / 2 + 4096) as u64;
const FOREIGN_PACKETS: usize = 200;

/// One RC RDMA WRITE ONLY datagram (BTH, RETH, payload, ICRC) from `from` to `to`.
fn foreign_write(
    from: SocketAddr,
    to: SocketAddr,
    qpn: u32,
    psn: u32,
    va: u64,
    rkey: u32,
) -> Vec<u8> {
    let payload = [0xEE; 256];
    let mut p = PacketRepr::new(BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: false,
        dest_qp: qpn,
        ack_req: true,
        psn,
    });
    p.reth = Some(RethRepr {
        va,
        rkey,
        dma_len: payload.len() as u32,
    });
    p.payload = &payload;
    let mut buf = vec![0u8; p.buffer_len() + 4];
    let n = p.emit(&mut buf).unwrap();
    let total = seal(from, to, 0, 0, &mut buf, n).expect("room for the ICRC");
    buf.truncate(total);
    buf
}

#[test]
fn a_third_host_cannot_touch_a_live_connection() {
    let (a, b) = rc_pair(&unique_loopback(1, 0x51), &unique_loopback(2, 0x51), REGION);

    let data = pattern(7, TRANSFER);
    a.ctx.write_mr(&a.mr, 0, &data).unwrap();
    let b_addr: SocketAddr = b.ctx.local_addr();
    let spoofer = third_host_socket(0x51);
    let third = spoofer.local_addr().unwrap();
    let send_foreign = |k: usize| {
        for i in 0..k {
            let psn = (a.psn.wrapping_add(i as u32 * 7)).wrapping_sub(3) & 0xFF_FFFF;
            let d = foreign_write(
                third,
                b_addr,
                b.qpn,
                psn,
                b.mr.addr + FOREIGN_OFFSET,
                b.mr.keys.rkey,
            );
            spoofer
                .send_to(&d, b_addr)
                .expect("send the foreign datagram");
        }
    };
    let wait_counted = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while b.ctx.counters().0.foreign_source_drops < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} foreign packets counted: {:?}",
                b.ctx.counters().0.foreign_source_drops,
                b.ctx.counters()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(b.ctx.counters().0.foreign_source_drops, n);
    };

    // 1. At the idle connection: at PSNs around the one the receiver expects (in sequence,
    // ahead, behind), so any of them would show as data, a duplicate, a NAK or an
    // out-of-sequence drop if the QP took it. Its counters must not move at all.
    let before = b.ctx.qp_counters(b.qpn).unwrap();
    send_foreign(FOREIGN_PACKETS / 2);
    wait_counted((FOREIGN_PACKETS / 2) as u64);
    assert_eq!(
        b.ctx.qp_counters(b.qpn).unwrap(),
        before,
        "the QP's counters show no trace of the foreign packets"
    );

    // 2. During a transfer: it completes byte-exact, and no foreign byte lands.
    let chunk = 64 * 1024;
    let wrs: Vec<SendWr> = (0..TRANSFER / chunk)
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
    send_foreign(FOREIGN_PACKETS / 2);
    a.completions(wrs.len(), 30);
    assert_eq!(
        b.read(0, TRANSFER),
        data,
        "the real transfer arrived byte-exact"
    );
    wait_counted(FOREIGN_PACKETS as u64);
    assert_eq!(
        b.read(FOREIGN_OFFSET as usize, 256),
        vec![0; 256],
        "no foreign byte landed"
    );
}
