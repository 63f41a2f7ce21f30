//! UD multicast over real sockets on loopback, as Linux RoCEv2 does it: three devices on
//! different loopback addresses, two receivers attached to a group and one detached; a
//! datagram to the group (DestQP 0xFFFFFF, the group's IPv4 address on UDP 4791) reaches
//! both attached receivers, byte for byte, and not the detached one.

mod common;

use std::time::{Duration, Instant};

use common::{pattern, side, unique_loopback, Side};
use softib_transport::mcast::MULTICAST_QPN;
use softib_transport::{
    AhAttr, GlobalRoute, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, VerbsError, WcOpcode,
};

/// A multicast group unique to this process (239.P.P.77), IPv4-mapped as a GID.
fn group() -> [u8; 16] {
    let pid = std::process::id();
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[239, (pid >> 8) as u8, pid as u8, 77]);
    g
}

fn post_recv(s: &Side, id: u64) {
    s.ctx
        .post_recv(
            s.qpn,
            &[RecvWr {
                wr_id: id,
                sg_list: vec![Sge {
                    addr: s.mr.addr,
                    length: 4096,
                    lkey: s.mr.keys.lkey,
                }],
            }],
        )
        .unwrap();
}

/// Receive completions that arrive within `within`.
fn received(s: &Side, within: Duration) -> Vec<softib_transport::WorkCompletion> {
    let mut buf = [softib_transport::harness::empty_wc(); 8];
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let k = s.ctx.wait_cq(s.cq, &mut buf, left);
        out.extend(
            buf[..k]
                .iter()
                .filter(|w| w.opcode == WcOpcode::Recv)
                .copied(),
        );
        if !out.is_empty() {
            break;
        }
    }
    out
}

#[test]
fn a_datagram_to_the_group_reaches_every_attached_device_and_not_a_detached_one() {
    let sender = side(&unique_loopback(1, 0x3c), QpType::Ud, 1 << 16, |_| {});
    let r1 = side(&unique_loopback(2, 0x3c), QpType::Ud, 1 << 16, |_| {});
    let r2 = side(&unique_loopback(3, 0x3c), QpType::Ud, 1 << 16, |_| {});
    let r3 = side(&unique_loopback(4, 0x3c), QpType::Ud, 1 << 16, |_| {});
    let es = sender.endpoint();
    for s in [&sender, &r1, &r2, &r3] {
        s.connect(QpType::Ud, &es);
    }
    let g = group();
    for r in [&r1, &r2, &r3] {
        r.ctx.attach_mcast(r.qpn, g).unwrap();
    }
    // r3 leaves again: it must get nothing.
    r3.ctx.detach_mcast(r3.qpn, g).unwrap();
    for r in [&r1, &r2, &r3] {
        post_recv(r, 5);
    }
    let qkey = r1.ctx.query_qp(r1.qpn).unwrap().qkey;
    let ah = sender
        .ctx
        .create_ah(
            sender.pd,
            AhAttr {
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                grh: Some(GlobalRoute {
                    dgid: g,
                    flow_label: 0,
                    sgid_index: 0,
                    hop_limit: 1,
                    traffic_class: 0,
                }),
            },
        )
        .unwrap();
    let msg = pattern(9, 1500);
    sender.ctx.write_mr(&sender.mr, 0, &msg).unwrap();
    let send = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: sender.mr.addr,
            length: msg.len() as u32,
            lkey: sender.mr.keys.lkey,
        }],
        ud: Some(UdDest {
            ah,
            remote_qpn: MULTICAST_QPN,
            remote_qkey: qkey,
        }),
        ..Default::default()
    };
    sender.ctx.post_send(sender.qpn, &[send]).unwrap();
    sender.completions(1, 10);
    for r in [&r1, &r2] {
        let got = received(r, Duration::from_secs(10));
        assert_eq!(got.len(), 1, "attached receiver: {:?}", r.ctx.counters());
        assert_eq!(got[0].byte_len, 40 + 1500);
        assert_eq!(got[0].src_qp, sender.qpn);
        assert_eq!(r.read(40, 1500), msg);
    }
    assert!(
        received(&r3, Duration::from_millis(300)).is_empty(),
        "a detached device gets nothing"
    );
}

#[test]
fn attach_refuses_rc_qps_unicast_gids_and_ipv6_groups_on_an_ipv4_device() {
    let s = side(&unique_loopback(5, 0x3c), QpType::Rc, 4096, |_| {});
    assert!(matches!(
        s.ctx.attach_mcast(s.qpn, group()),
        Err(VerbsError::InvalidAttribute { attr: "qp", .. })
    ));
    let u = side(&unique_loopback(6, 0x3c), QpType::Ud, 4096, |_| {});
    assert!(matches!(
        u.ctx.attach_mcast(u.qpn, u.ctx.gid()),
        Err(VerbsError::InvalidAttribute { attr: "gid", .. })
    ));
    let mut ff0e = [0u8; 16];
    ff0e[0] = 0xff;
    ff0e[1] = 0x0e;
    ff0e[15] = 1;
    assert!(matches!(
        u.ctx.attach_mcast(u.qpn, ff0e),
        Err(VerbsError::Unsupported { .. })
    ));
    // The refused attach left nothing behind: a detach finds no membership.
    assert!(u.ctx.detach_mcast(u.qpn, ff0e).is_err());
}

use softib_transport::WrOpcode;
