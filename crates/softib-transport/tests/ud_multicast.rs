//! UD multicast in the engine (IBA vol. 1 9.8.4, 10.5): a datagram to DestQP 0xFFFFFF reaches
//! every UD QP attached to its destination GID whose Q_Key matches, and no other; attach and
//! detach follow the kernel's rules.

mod common;
use common::*;
use softib_transport::harness::{Endpoint, Pair, QpOptions};
use softib_transport::mcast::{MAX_MCAST_QP_ATTACH, MULTICAST_QPN};
use softib_transport::{
    AhAttr, AhHandle, GlobalRoute, QpType, SendWr, Sge, UdDest, VerbsError, WcStatus, WrOpcode,
};

/// The IPv4-mapped GID of 239.1.2.3, the MGID RoCEv2 uses for that group.
const GROUP: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3];

fn ud(pair: &mut Pair, qkey: u32) -> (Endpoint, Endpoint) {
    pair.connect(&QpOptions {
        qp_type: QpType::Ud,
        qkey,
        ..Default::default()
    })
}

fn group_ah(pair: &mut Pair, a: &Endpoint) -> AhHandle {
    pair.dev(0)
        .create_ah(
            a.pd,
            AhAttr {
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                grh: Some(GlobalRoute {
                    dgid: GROUP,
                    hop_limit: 1,
                    ..Default::default()
                }),
            },
        )
        .unwrap()
}

fn to_group(a: &Endpoint, ah: AhHandle, qkey: u32, len: u32) -> SendWr {
    SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        sg_list: vec![Sge {
            addr: a.addr,
            length: len,
            lkey: a.keys.lkey,
        }],
        flags: softib_transport::SendFlags::SIGNALED,
        ud: Some(UdDest {
            ah,
            remote_qpn: MULTICAST_QPN,
            remote_qkey: qkey,
        }),
        ..Default::default()
    }
}

#[test]
fn a_datagram_to_the_group_reaches_every_attached_qp_with_the_right_qkey_and_no_other() {
    let mut pair = Pair::new(1);
    let (a, b1) = ud(&mut pair, 0x0123_4567);
    let (_, b2) = ud(&mut pair, 0x0123_4567);
    let (_, not_attached) = ud(&mut pair, 0x0123_4567);
    let (_, wrong_qkey) = ud(&mut pair, 0x7777);
    for b in [&b1, &b2, &wrong_qkey] {
        assert!(pair.dev(1).attach_mcast(b.qpn, GROUP).is_ok());
    }
    for b in [&b1, &b2, &not_attached, &wrong_qkey] {
        pair.dev(1).post_recv(b.qpn, &recv(5, b, 0, 2048)).unwrap();
    }
    let data = pattern(300, 4);
    pair.fill(0, &a, 0, &data);
    let ah = group_ah(&mut pair, &a);
    pair.dev(0)
        .post_send(0, a.qpn, &to_group(&a, ah, 0x0123_4567, 300))
        .unwrap();
    pair.drive(SEC);
    assert_eq!(pair.completions(0, &a)[0].status, WcStatus::Success);
    for b in [&b1, &b2] {
        let r = recv_wcs(&mut pair, b);
        assert_eq!(r.len(), 1, "QP {:#x}", b.qpn);
        assert_eq!(r[0].byte_len, 340);
        assert_eq!(r[0].src_qp, a.qpn);
        assert_eq!(pair.read(1, b, 40, 300), data);
    }
    assert!(recv_wcs(&mut pair, &not_attached).is_empty());
    assert!(recv_wcs(&mut pair, &wrong_qkey).is_empty());
    assert_eq!(pair.device(1).counters().bad_qkey_drops, 1);

    // After a detach the QP gets nothing; the other member still does.
    assert_eq!(pair.dev(1).detach_mcast(b1.qpn, GROUP), Ok(false));
    for b in [&b1, &b2] {
        pair.dev(1).post_recv(b.qpn, &recv(6, b, 0, 2048)).unwrap();
    }
    pair.dev(0)
        .post_send(0, a.qpn, &to_group(&a, ah, 0x0123_4567, 300))
        .unwrap();
    pair.drive(SEC);
    assert!(recv_wcs(&mut pair, &b1).is_empty());
    assert_eq!(recv_wcs(&mut pair, &b2).len(), 1);
}

#[test]
fn a_group_nobody_joined_drops_the_datagram_as_an_unknown_qp() {
    let mut pair = Pair::new(2);
    let (a, b) = ud(&mut pair, 0x0123_4567);
    pair.dev(1).post_recv(b.qpn, &recv(5, &b, 0, 2048)).unwrap();
    let ah = group_ah(&mut pair, &a);
    let before = pair.device(1).counters().unknown_qp_drops;
    pair.dev(0)
        .post_send(0, a.qpn, &to_group(&a, ah, 0x0123_4567, 8))
        .unwrap();
    pair.drive(SEC);
    assert!(recv_wcs(&mut pair, &b).is_empty());
    assert_eq!(pair.device(1).counters().unknown_qp_drops, before + 1);
}

#[test]
fn attach_and_detach_follow_the_kernel_rules() {
    let mut pair = Pair::new(3);
    let (_, b) = ud(&mut pair, 1);
    let (_, rc) = pair.connect(&QpOptions::default());
    // Only UD QPs, only multicast GIDs.
    assert!(matches!(
        pair.dev(1).attach_mcast(rc.qpn, GROUP),
        Err(VerbsError::InvalidAttribute { attr: "qp", .. })
    ));
    let unicast = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
    assert!(matches!(
        pair.dev(1).attach_mcast(b.qpn, unicast),
        Err(VerbsError::InvalidAttribute { attr: "gid", .. })
    ));
    // New group first, then idempotent; detach says when the group is empty.
    assert_eq!(pair.dev(1).attach_mcast(b.qpn, GROUP), Ok(true));
    assert_eq!(pair.dev(1).attach_mcast(b.qpn, GROUP), Ok(false));
    assert_eq!(pair.device(1).mcast_groups(), vec![GROUP]);
    assert_eq!(pair.dev(1).detach_mcast(b.qpn, GROUP), Ok(true));
    assert!(matches!(
        pair.dev(1).detach_mcast(b.qpn, GROUP),
        Err(VerbsError::InvalidAttribute { attr: "gid", .. })
    ));
    // Destroying a QP detaches it.
    pair.dev(1).attach_mcast(b.qpn, GROUP).unwrap();
    pair.dev(1).destroy_qp(b.qpn).unwrap();
    assert!(pair.device(1).mcast_groups().is_empty());
    assert!(matches!(
        pair.dev(1).attach_mcast(b.qpn, GROUP),
        Err(VerbsError::UnknownHandle { .. })
    ));
}

#[test]
fn a_group_holds_at_most_max_mcast_qp_attach_qps() {
    let mut pair = Pair::new(4);
    let mut qps = Vec::new();
    for _ in 0..=MAX_MCAST_QP_ATTACH {
        qps.push(ud(&mut pair, 1).1);
    }
    for b in &qps[..MAX_MCAST_QP_ATTACH as usize] {
        pair.dev(1).attach_mcast(b.qpn, GROUP).unwrap();
    }
    assert!(matches!(
        pair.dev(1)
            .attach_mcast(qps[MAX_MCAST_QP_ATTACH as usize].qpn, GROUP),
        Err(VerbsError::LimitReached {
            limit: "max_mcast_qp_attach",
            ..
        })
    ));
}
