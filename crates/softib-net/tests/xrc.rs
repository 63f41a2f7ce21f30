//! XRC through the softib-net API over real loopback sockets (two devices on 127.0.0.1 /
//! 127.0.0.2): two initiator QPs on one device send into one XRC SRQ of the other, through
//! two target QPs of one XRC domain; an RDMA WRITE lands under the SRQ's PD; a request
//! naming an SRQ of another domain is refused. The initiators' device writes a pcap, which
//! softib-wire's dissector (what `softib decode` prints) and tshark both read: XRC opcodes
//! with an XRCETH naming the SRQ, every ICRC valid.

mod common;

use std::time::Duration;

use common::{pattern, side, Side};
use softib_net::context::ConnectOptions;
use softib_transport::{
    QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendWr, Sge, SrqAttr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

/// An initiator on `a` connected to a new target QP of `xrcd` on `b`.
fn xrc_pair(a: &Side, b: &Side, xrcd: softib_transport::XrcdHandle) -> (u32, u32) {
    let ini = a
        .ctx
        .create_qp(
            a.pd,
            QpInitAttr {
                qp_type: QpType::XrcSend,
                send_cq: a.cq,
                recv_cq: a.cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 64,
                    max_recv_wr: 0,
                    max_send_sge: 1,
                    max_recv_sge: 0,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )
        .unwrap();
    let tgt = b.ctx.create_xrc_target_qp(xrcd).unwrap();
    let (pa, pb) = (a.ctx.random_psn(), b.ctx.random_psn());
    let ea = a.ctx.endpoint(ini, pa, &[]);
    let eb = b.ctx.endpoint(tgt, pb, &[]);
    let o = ConnectOptions::default();
    a.ctx.connect(ini, QpType::XrcSend, pa, &eb, &o).unwrap();
    b.ctx.connect(tgt, QpType::XrcRecv, pb, &ea, &o).unwrap();
    (ini, tgt)
}

fn wait(s: &Side, cq: softib_transport::CqHandle, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut buf = [softib_transport::harness::empty_wc(); 8];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(
            !left.is_zero(),
            "only {} of {n} completions: {out:?}",
            out.len()
        );
        let k = s.ctx.wait_cq(cq, &mut buf, left);
        out.extend_from_slice(&buf[..k]);
    }
    out
}

fn send(a: &Side, id: u64, off: u64, len: u32, srqn: u32) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: a.mr.addr + off,
            length: len,
            lkey: a.mr.keys.lkey,
        }],
        xrc_remote_srqn: srqn,
        ..Default::default()
    }
}

#[test]
fn two_initiators_share_one_xrc_srq_across_real_sockets() {
    let dir = std::env::temp_dir().join(format!("softib-net-xrc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("xrc.pcap");
    let a = side("127.0.0.1:0", QpType::Rc, 1 << 16, |c| {
        c.pcap = Some(pcap.clone())
    });
    let b = side("127.0.0.2:0", QpType::Rc, 1 << 16, |_| {});
    let xrcd = b.ctx.open_xrcd();
    let srq_cq = b.ctx.create_cq(64).unwrap();
    let attr = SrqAttr {
        max_wr: 16,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = b.ctx.create_xrc_srq(b.pd, xrcd, srq_cq, attr).unwrap();
    let srqn = b.ctx.srq_num(srq).unwrap();
    let (i1, t1) = xrc_pair(&a, &b, xrcd);
    let (i2, t2) = xrc_pair(&a, &b, xrcd);
    for k in 0..2u64 {
        b.ctx
            .post_srq_recv(
                srq,
                &[RecvWr {
                    wr_id: 100 + k,
                    sg_list: vec![Sge {
                        addr: b.mr.addr + k * 8192,
                        length: 8192,
                        lkey: b.mr.keys.lkey,
                    }],
                }],
            )
            .unwrap();
    }
    let d1 = pattern(1, 5000);
    let d2 = pattern(2, 3000);
    a.ctx.write_mr(&a.mr, 0, &d1).unwrap();
    a.ctx.write_mr(&a.mr, 16384, &d2).unwrap();
    a.ctx.post_send(i1, &[send(&a, 1, 0, 5000, srqn)]).unwrap();
    assert_eq!(wait(&a, a.cq, 1)[0].status, WcStatus::Success);
    a.ctx
        .post_send(i2, &[send(&a, 2, 16384, 3000, srqn)])
        .unwrap();
    assert_eq!(wait(&a, a.cq, 1)[0].status, WcStatus::Success);
    let r = wait(&b, srq_cq, 2);
    assert_eq!(
        r.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num))
            .collect::<Vec<_>>(),
        vec![
            (100, WcStatus::Success, WcOpcode::Recv, 5000, t1),
            (101, WcStatus::Success, WcOpcode::Recv, 3000, t2),
        ]
    );
    assert_eq!(b.read(0, 5000), d1);
    assert_eq!(b.read(8192, 3000), d2);

    // RDMA WRITE over XRC, checked under the SRQ's PD.
    let w = SendWr {
        wr_id: 3,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: a.mr.addr,
            length: 1000,
            lkey: a.mr.keys.lkey,
        }],
        remote_addr: b.mr.addr + 30_000,
        rkey: b.mr.keys.rkey,
        xrc_remote_srqn: srqn,
        ..Default::default()
    };
    a.ctx.post_send(i1, &[w]).unwrap();
    assert_eq!(wait(&a, a.cq, 1)[0].status, WcStatus::Success);
    assert_eq!(b.read(30_000, 1000), d1[..1000]);

    // An SRQ of another domain cannot be reached through these targets.
    let other = b.ctx.open_xrcd();
    let foreign = b.ctx.create_xrc_srq(b.pd, other, srq_cq, attr).unwrap();
    let fnum = b.ctx.srq_num(foreign).unwrap();
    a.ctx.post_send(i2, &[send(&a, 4, 0, 64, fnum)]).unwrap();
    assert_eq!(wait(&a, a.cq, 1)[0].status, WcStatus::RemInvReqErr);
    assert!(
        b.ctx.close_xrcd(xrcd).is_err(),
        "targets and an SRQ still use it"
    );
}
