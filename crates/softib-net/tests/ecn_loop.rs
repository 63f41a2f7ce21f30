//! The driver's half of RoCEv2 congestion control on loopback: a CE-marked
//! datagram reaches the engine and comes back as a CNP (opcode 0x81, BECN, the source QP,
//! not ECN-capable); a CNP slows the QP it names (DCQCN rate in the counter snapshot); data
//! leaves ECT(0) only while the device reacts to congestion. A plain RoCEv2 socket plays
//! the network: it sends hand-built packets with the ICRC and a chosen TOS, and reads what
//! the device sends back.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{side, unique_loopback, Side};
use softib_net::cc::RoceCc;
use softib_net::roce;
use softib_net::socket::{RoceSocket, SocketConfig, TxBatch, ECN_CE, ECN_ECT0};
use softib_transport::cc::DcqcnConfig;
use softib_transport::{
    AhAttr, GlobalRoute, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, WrOpcode,
};
use softib_wire::{BthRepr, DethRepr, Opcode, PacketRepr};

/// The Q_Key `ConnectOptions` gives UD QPs.
const QKEY: u32 = 0x1111_1111;
/// The QP the test socket pretends to send from.
const PEER_QP: u32 = 0x77;

fn network(host: u8) -> RoceSocket {
    let addr: SocketAddr = unique_loopback(host, 0x5c).parse().unwrap();
    RoceSocket::bind(&SocketConfig::new(addr)).unwrap()
}

/// A UD device whose DCQCN never recovers on its own (no timer, no byte counter), so a
/// rate cut stays visible.
fn dcqcn_side(host: u8) -> Side {
    let s = side(&unique_loopback(host, 0x5c), QpType::Ud, 1 << 16, |c| {
        c.cc = RoceCc::dcqcn(DcqcnConfig {
            rpg_time_reset: 0,
            rpg_byte_reset: 0,
            ..DcqcnConfig::default()
        });
        c.cc.min_time_between_cnps = 0;
        c.cc.link_rate_mbps = Some(1000);
    });
    let me = s.endpoint();
    s.connect(QpType::Ud, &me);
    s
}

fn bth(opcode: Opcode, dest_qp: u32, becn: bool) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn,
        dest_qp,
        ack_req: false,
        psn: 0,
    }
}

/// Sends `repr` from `net` to `dest` with `tos`, sealed with the ICRC.
fn send(net: &mut RoceSocket, dest: SocketAddr, tos: u8, repr: &PacketRepr<'_>) {
    let local = net.local_addr();
    let mut batch = TxBatch::new(8192, 4, false);
    batch
        .push_with(dest, Some(tos), 4096, |slot, _| {
            let n = repr.emit(slot).unwrap();
            roce::seal(local, dest, tos, 0, slot, n).unwrap()
        })
        .unwrap();
    net.send(&mut batch).unwrap();
}

/// The next datagram `net` receives within 5 s: (UDP payload, TOS).
fn receive(net: &mut RoceSocket) -> (Vec<u8>, u8) {
    let mut batch = net.rx_batch(4, 4200);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if net.recv(&mut batch).unwrap() > 0 {
            let d = batch.iter().next().unwrap();
            return (d.payload.to_vec(), d.tos.unwrap_or(0));
        }
        assert!(Instant::now() < deadline, "nothing arrived within 5 s");
        net.wait_readable(Some(Duration::from_millis(50))).unwrap();
    }
}

fn counters_eventually(
    s: &Side,
    what: &str,
    ok: impl Fn(&softib_net::counters::CounterSnapshot) -> bool,
) -> softib_net::counters::CounterSnapshot {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let snap = s.ctx.counter_snapshot();
        if ok(&snap) {
            return snap;
        }
        assert!(Instant::now() < deadline, "{what}: {snap:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_ce_mark_comes_back_as_a_cnp_and_a_cnp_cuts_the_rate() {
    let b = dcqcn_side(2);
    let mut net = network(9);
    let b_addr = b.ctx.local_addr();
    b.ctx
        .post_recv(
            b.qpn,
            &[RecvWr {
                wr_id: 1,
                sg_list: vec![Sge {
                    addr: b.mr.addr,
                    length: 4096,
                    lkey: b.mr.keys.lkey,
                }],
            }],
        )
        .unwrap();
    let payload = [0x5a; 32];
    let mut send_only = PacketRepr::new(bth(Opcode::UD_SEND_ONLY, b.qpn, false));
    send_only.deth = Some(DethRepr {
        qkey: QKEY,
        src_qp: PEER_QP,
    });
    send_only.payload = &payload;
    send(&mut net, b_addr, ECN_CE, &send_only);

    let (cnp, tos) = receive(&mut net);
    assert_eq!(cnp[0], 0x81, "a CNP: {cnp:02x?}");
    assert_eq!(cnp[4] & 0x40, 0x40, "BECN set");
    assert_eq!(
        u32::from_be_bytes([0, cnp[5], cnp[6], cnp[7]]),
        PEER_QP,
        "to the source QP named in the DETH"
    );
    assert_eq!(tos & 0b11, 0, "a CNP is not ECN-capable");
    let snap = counters_eventually(&b, "CE counted", |s| s.driver["rx_ecn_ce"] == 1);
    assert_eq!(snap.qps[&b.qpn]["ecn_ce_received"], 1);
    assert_eq!(snap.qps[&b.qpn]["cnps_sent"], 1);
    assert_eq!(snap.driver["cc_link_rate_mbps"], 1000);
    // Loopback is not Ethernet: IPv4 20 + UDP 8 + ICRC 4.
    assert_eq!(snap.driver["cc_wire_overhead"], 32);
    assert!(
        !snap.qps[&b.qpn].contains_key("cc_rate_mbps"),
        "no limiter yet"
    );

    // A CNP for B's QP: the first one halves the rate (alpha starts at 1).
    send(
        &mut net,
        b_addr,
        0,
        &PacketRepr::new(bth(Opcode::CNP, b.qpn, true)),
    );
    let snap = counters_eventually(&b, "CNP received", |s| {
        s.qps[&b.qpn].get("cnps_received") == Some(&1)
    });
    assert_eq!(snap.qps[&b.qpn]["cc_rate_mbps"], 500);
}

#[test]
fn data_is_ect0_only_while_the_device_reacts_to_congestion() {
    let mut net = network(10);
    let gid = roce::gid_from_ip(net.local_addr().ip());
    let with_cc = dcqcn_side(3);
    let without = side(&unique_loopback(4, 0x5c), QpType::Ud, 1 << 16, |_| {});
    let me = without.endpoint();
    without.connect(QpType::Ud, &me);
    for (s, expected) in [(&with_cc, ECN_ECT0), (&without, 0)] {
        let ah = s
            .ctx
            .create_ah(
                s.pd,
                AhAttr {
                    dlid: 0,
                    sl: 0,
                    src_path_bits: 0,
                    grh: Some(GlobalRoute {
                        dgid: gid,
                        flow_label: 0,
                        sgid_index: 0,
                        hop_limit: 64,
                        traffic_class: 0,
                    }),
                },
            )
            .unwrap();
        let wr = SendWr {
            wr_id: 1,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: vec![Sge {
                addr: s.mr.addr,
                length: 64,
                lkey: s.mr.keys.lkey,
            }],
            ud: Some(UdDest {
                ah,
                remote_qpn: PEER_QP,
                remote_qkey: QKEY,
            }),
            ..SendWr::default()
        };
        s.ctx.post_send(s.qpn, &[wr]).unwrap();
        let (data, tos) = receive(&mut net);
        assert_eq!(data[0], Opcode::UD_SEND_ONLY.value());
        assert_eq!(tos & 0b11, expected, "ECN field of the data");
    }
}
