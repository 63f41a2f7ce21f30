//! XRC through two engines (IBA vol. 1 Annex A14): initiator QPs on device 0, target QPs
//! and XRC SRQs on device 1. Requests carry an XRCETH right after the BTH naming the SRQ;
//! the target delivers into it (its PD, its CQ) only if it belongs to the target QP's XRC
//! domain, else NAKs; both halves use XRC opcodes; RC's reliability carries it all.

mod common;
use common::*;
use softib_transport::harness::{Faults, Pair, QpOptions, Verdict};
use softib_transport::{
    AccessFlags, CqHandle, MrKeys, PdHandle, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendFlags,
    SendWr, Sge, SrqAttr, SrqHandle, VecMemory, VerbsError, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode, XrcdHandle,
};

const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);
const BASE0: u64 = 0x1000_0000;
const BASE1: u64 = 0x2000_0000;

/// Device 0: initiators; device 1: a domain with one XRC SRQ (and its CQ) and targets.
struct Xrc {
    pair: Pair,
    cq0: CqHandle,
    mr0: MrKeys,
    pd1: PdHandle,
    xrcd: XrcdHandle,
    srq_cq: CqHandle,
    srq: SrqHandle,
    srqn: u32,
    mr1: MrKeys,
}

fn setup(seed: u64) -> Xrc {
    let mut pair = Pair::new(seed);
    let d0 = pair.dev(0);
    let pd0 = d0.alloc_pd();
    let cq0 = d0.create_cq(1024).unwrap();
    let mr0 = d0
        .reg_mr(pd0, Box::new(VecMemory::zeroed(1 << 16)), BASE0, ALL)
        .unwrap();
    let _ = pd0;
    let d1 = pair.dev(1);
    let pd1 = d1.alloc_pd();
    let xrcd = d1.open_xrcd();
    let srq_cq = d1.create_cq(1024).unwrap();
    let attr = SrqAttr {
        max_wr: 64,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = d1.create_xrc_srq(pd1, xrcd, srq_cq, attr).unwrap();
    let srqn = d1.srq_num(srq).expect("an XRC SRQ has a number");
    let mr1 = d1
        .reg_mr(pd1, Box::new(VecMemory::zeroed(1 << 16)), BASE1, ALL)
        .unwrap();
    Xrc {
        pair,
        cq0,
        mr0,
        pd1,
        xrcd,
        srq_cq,
        srq,
        srqn,
        mr1,
    }
}

impl Xrc {
    /// An initiator on device 0 connected to a new target QP of `xrcd` on device 1.
    fn initiator(&mut self, xrcd: XrcdHandle) -> (u32, u32) {
        let pd0 = PdHandle(1);
        let init = QpInitAttr {
            qp_type: QpType::XrcSend,
            send_cq: self.cq0,
            recv_cq: self.cq0,
            srq: None,
            cap: QpCap {
                max_send_wr: 256,
                max_recv_wr: 0,
                max_send_sge: 2,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let ini = self.pair.dev(0).create_qp(pd0, init).unwrap();
        let tgt = self.pair.dev(1).create_xrc_target_qp(xrcd).unwrap();
        let o = QpOptions {
            qp_type: QpType::Rc,
            access: ALL,
            ..QpOptions::default()
        };
        self.pair.bring_up([ini, tgt], &o);
        (ini, tgt)
    }

    fn post_srq_recv(&mut self, srq: SrqHandle, id: u64, off: u64, len: u32) {
        let lkey = self.mr1.lkey;
        self.pair
            .dev(1)
            .post_srq_recv(
                srq,
                &RecvWr {
                    wr_id: id,
                    sg_list: vec![Sge {
                        addr: BASE1 + off,
                        length: len,
                        lkey,
                    }],
                },
            )
            .unwrap();
    }

    fn wr(&self, opcode: WrOpcode, id: u64, off: u64, len: u32, srqn: u32) -> SendWr {
        SendWr {
            wr_id: id,
            opcode,
            sg_list: vec![Sge {
                addr: BASE0 + off,
                length: len,
                lkey: self.mr0.lkey,
            }],
            flags: SendFlags::SIGNALED,
            rkey: self.mr1.rkey,
            xrc_remote_srqn: srqn,
            ..Default::default()
        }
    }

    fn fill0(&mut self, off: usize, data: &[u8]) {
        self.pair
            .dev(0)
            .memory_mut(self.mr0.lkey)
            .unwrap()
            .write(off, data);
    }

    fn read1(&mut self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.pair
            .dev(1)
            .memory(self.mr1.lkey)
            .unwrap()
            .read(off, &mut v);
        v
    }

    fn read0(&mut self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.pair
            .dev(0)
            .memory(self.mr0.lkey)
            .unwrap()
            .read(off, &mut v);
        v
    }

    /// Drives until `n` completions are on `cq` of `side`.
    fn wait(&mut self, side: usize, cq: CqHandle, n: usize) -> Vec<WorkCompletion> {
        let mut got = Vec::new();
        self.pair.drive_until(SEC, |p| {
            let mut buf = [softib_transport::harness::empty_wc(); 16];
            let k = p.dev(side).poll_cq(cq, &mut buf);
            got.extend_from_slice(&buf[..k]);
            got.len() >= n
        });
        got
    }
}

#[test]
fn two_initiators_send_into_one_shared_srq_and_completions_go_to_the_srqs_cq() {
    let mut x = setup(500);
    let (i1, t1) = x.initiator(x.xrcd);
    let (i2, t2) = x.initiator(x.xrcd);
    let srq = x.srq;
    x.post_srq_recv(srq, 10, 0, 4096);
    x.post_srq_recv(srq, 11, 4096, 4096);
    let a = pattern(3000, 1);
    let b = pattern(2500, 2);
    x.fill0(0, &a);
    x.fill0(8192, &b);
    let w1 = x.wr(WrOpcode::Send, 1, 0, 3000, x.srqn);
    let w2 = x.wr(WrOpcode::Send, 2, 8192, 2500, x.srqn);
    x.pair.dev(0).post_send(0, i1, &w1).unwrap();
    let sends = x.wait(0, x.cq0, 1);
    x.pair.dev(0).post_send(0, i2, &w2).unwrap();
    let mut sends2 = x.wait(0, x.cq0, 1);
    sends2.extend(sends);
    assert!(
        sends2.iter().all(|w| w.status == WcStatus::Success),
        "{sends2:?}"
    );
    let recvs = x.wait(1, x.srq_cq, 2);
    assert_eq!(
        recvs
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num))
            .collect::<Vec<_>>(),
        vec![
            (10, WcStatus::Success, WcOpcode::Recv, 3000, t1),
            (11, WcStatus::Success, WcOpcode::Recv, 2500, t2),
        ]
    );
    assert_eq!(x.read1(0, 3000), a);
    assert_eq!(x.read1(4096, 2500), b);
}

#[test]
fn requests_carry_the_xrceth_after_the_bth_and_both_halves_use_xrc_opcodes() {
    use std::sync::{Arc, Mutex};
    let mut x = setup(501);
    let (i1, _t1) = x.initiator(x.xrcd);
    let srq = x.srq;
    x.post_srq_recv(srq, 1, 0, 4096);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    x.pair.filter = Some(Box::new(move |from, _now, bytes| {
        log.lock()
            .unwrap()
            .push((from, bytes[0], bytes[12..16].to_vec()));
        Verdict::Pass
    }));
    let w = x.wr(WrOpcode::Send, 1, 0, 100, x.srqn);
    x.pair.dev(0).post_send(0, i1, &w).unwrap();
    assert_eq!(x.wait(0, x.cq0, 1)[0].status, WcStatus::Success);
    let seen = seen.lock().unwrap();
    let srqn = x.srqn.to_be_bytes();
    // XRC SEND_ONLY (0xA4) with XRCETH = 0, SRQ number (24 bits), then an XRC ACK (0xB1).
    assert_eq!(seen[0], (0, 0xA4, vec![0, srqn[1], srqn[2], srqn[3]]));
    assert_eq!((seen[1].0, seen[1].1), (1, 0xB1));
    // Its AETH: ACK with credit code 31 ("unlimited", IBA 9.7.7.2): a target always
    // receives into an SRQ, so initiators never wait for credits.
    assert_eq!(seen[1].2[0], 0x1F);
}

#[test]
fn an_srq_of_another_xrc_domain_is_refused_with_an_invalid_request_nak() {
    let mut x = setup(502);
    let (i1, t1) = x.initiator(x.xrcd);
    let d1 = x.pair.dev(1);
    let other = d1.open_xrcd();
    let attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let foreign = d1.create_xrc_srq(x.pd1, other, x.srq_cq, attr).unwrap();
    let foreign_n = d1.srq_num(foreign).unwrap();
    x.post_srq_recv(foreign, 1, 0, 4096);
    let w = x.wr(WrOpcode::Send, 1, 0, 64, foreign_n);
    x.pair.dev(0).post_send(0, i1, &w).unwrap();
    let wcs = x.wait(0, x.cq0, 1);
    assert_eq!(wcs[0].status, WcStatus::RemInvReqErr);
    assert_eq!(x.pair.dev(1).qp_state(t1), Some(QpState::Err));
    assert_eq!(x.pair.dev(1).qp_counters(t1).unwrap().xrc_bad_srq, 1);
    assert_eq!(
        x.wait(1, x.srq_cq, 0).len(),
        0,
        "the foreign SRQ's WR is untouched"
    );
    // A number that names no SRQ at all is refused the same way.
    let (i2, _t2) = x.initiator(x.xrcd);
    let w = x.wr(WrOpcode::Send, 2, 0, 64, 0x00AB_CDEF);
    x.pair.dev(0).post_send(0, i2, &w).unwrap();
    assert_eq!(x.wait(0, x.cq0, 1)[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn rdma_write_read_and_atomics_over_xrc_use_the_named_srqs_pd() {
    let mut x = setup(503);
    let (i1, _t1) = x.initiator(x.xrcd);
    let data = pattern(5000, 7);
    x.fill0(0, &data);
    let mut w = x.wr(WrOpcode::RdmaWrite, 1, 0, 5000, x.srqn);
    w.remote_addr = BASE1 + 100;
    x.pair.dev(0).post_send(0, i1, &w).unwrap();
    let mut r = x.wr(WrOpcode::RdmaRead, 2, 16384, 5000, x.srqn);
    r.remote_addr = BASE1 + 100;
    x.pair.dev(0).post_send(0, i1, &r).unwrap();
    let mut f = x.wr(WrOpcode::AtomicFetchAndAdd, 3, 32768, 8, x.srqn);
    f.remote_addr = BASE1 + 8192;
    f.compare_add = 5;
    x.pair.dev(0).post_send(0, i1, &f).unwrap();
    let wcs = x.wait(0, x.cq0, 3);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(x.read1(100, 5000), data);
    assert_eq!(x.read0(16384, 5000), data);
    assert_eq!(x.read1(8192, 8), 5u64.to_le_bytes());

    // An SRQ of the same domain but another PD: the region is out of its reach.
    let d1 = x.pair.dev(1);
    let pd2 = d1.alloc_pd();
    let attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq2 = d1.create_xrc_srq(pd2, x.xrcd, x.srq_cq, attr).unwrap();
    let n2 = d1.srq_num(srq2).unwrap();
    let (i2, _t2) = x.initiator(x.xrcd);
    let mut w = x.wr(WrOpcode::RdmaWrite, 4, 0, 64, n2);
    w.remote_addr = BASE1;
    x.pair.dev(0).post_send(0, i2, &w).unwrap();
    assert_eq!(x.wait(0, x.cq0, 1)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn xrc_is_exactly_once_under_loss_because_it_is_rc_underneath() {
    let mut x = setup(504);
    x.pair.faults = Faults {
        drop: 0.1,
        reorder: 0.05,
        reorder_window: 5_000,
        ..Default::default()
    };
    let (i1, _t1) = x.initiator(x.xrcd);
    let srq = x.srq;
    for k in 0..20 {
        x.post_srq_recv(srq, k, k * 2048, 2048);
    }
    for k in 0..20u64 {
        let d = pattern(2000, k as u8);
        x.fill0(k as usize * 2048, &d);
        let w = x.wr(WrOpcode::Send, k, k * 2048, 2000, x.srqn);
        x.pair.dev(0).post_send(0, i1, &w).unwrap();
    }
    let sends = x.wait(0, x.cq0, 20);
    assert!(sends.iter().all(|w| w.status == WcStatus::Success));
    let recvs = x.wait(1, x.srq_cq, 20);
    assert_eq!(recvs.len(), 20);
    for (k, r) in recvs.iter().enumerate() {
        assert_eq!(
            (r.wr_id, r.byte_len, r.status),
            (k as u64, 2000, WcStatus::Success)
        );
        assert_eq!(x.read1(k * 2048, 2000), pattern(2000, k as u8));
    }
    assert!(x.pair.dev(0).qp_counters(i1).unwrap().retransmitted_packets > 0);
}

#[test]
fn xrc_queues_exist_only_where_annex_a14_puts_them() {
    let mut x = setup(505);
    let (i1, t1) = x.initiator(x.xrcd);
    let recv = RecvWr {
        wr_id: 1,
        sg_list: vec![],
    };
    for (side, qpn) in [(0, i1), (1, t1)] {
        assert!(matches!(
            x.pair.dev(side).post_recv(qpn, &recv),
            Err(VerbsError::InvalidWr { .. })
        ));
    }
    let w = x.wr(WrOpcode::Send, 1, 0, 8, x.srqn);
    assert!(matches!(
        x.pair.dev(1).post_send(0, t1, &w),
        Err(VerbsError::OpcodeNotSupported { .. })
    ));
    let init = QpInitAttr {
        qp_type: QpType::XrcRecv,
        send_cq: x.srq_cq,
        recv_cq: x.srq_cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let pd1 = x.pd1;
    assert!(x.pair.dev(1).create_qp(pd1, init).is_err());
    let xrcd = x.xrcd;
    assert!(matches!(
        x.pair.dev(1).close_xrcd(xrcd),
        Err(VerbsError::InUse { kind: "XRCD", .. })
    ));
    x.pair.dev(1).destroy_qp(t1).unwrap();
    let srq = x.srq;
    x.pair.dev(1).destroy_srq(srq).unwrap();
    x.pair.dev(1).close_xrcd(xrcd).unwrap();
    assert!(x.pair.dev(1).close_xrcd(xrcd).is_err(), "closed twice");
    assert_eq!(x.pair.dev(1).srq_num(srq), None);
}

#[test]
fn a_message_keeps_the_srq_its_first_packet_named_and_a_switch_mid_message_is_refused() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut x = setup(506);
    let (i1, t1) = x.initiator(x.xrcd);
    let d1 = x.pair.dev(1);
    let attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let other = d1.create_xrc_srq(x.pd1, x.xrcd, x.srq_cq, attr).unwrap();
    let other_n = d1.srq_num(other).unwrap();
    let srq = x.srq;
    x.post_srq_recv(srq, 1, 0, 8192);
    x.post_srq_recv(other, 2, 8192, 8192);
    // The initiator's SEND_MIDDLE / SEND_LAST are held back; a copy of the first
    // SEND_MIDDLE naming the other SRQ of the same domain is delivered instead.
    let held: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
    let keep = held.clone();
    x.pair.filter = Some(Box::new(move |from, _now, bytes| {
        if from == 0 && matches!(bytes[0], 0xA1 | 0xA2) {
            let mut k = keep.borrow_mut();
            if k.is_none() && bytes[0] == 0xA1 {
                let mut b = bytes.to_vec();
                b[13..16].copy_from_slice(&other_n.to_be_bytes()[1..]);
                *k = Some(b);
            }
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    let w = x.wr(WrOpcode::Send, 1, 0, 3000, x.srqn); // 3 packets at MTU 1024
    x.pair.dev(0).post_send(0, i1, &w).unwrap();
    x.pair.drive_until(SEC, |_| held.borrow().is_some());
    let forged = held.borrow().clone().unwrap();
    let now = x.pair.now;
    // Forged by the initiator's own device (its address): only the SRQ number is wrong.
    let from_initiator = softib_transport::RxMeta {
        grh: Some(softib_transport::RxGrh {
            sgid: x.pair.device(0).config().gid,
            dgid: x.pair.device(1).config().gid,
            ..Default::default()
        }),
        ..Default::default()
    };
    x.pair.dev(1).handle_packet(now, &from_initiator, &forged);
    assert_eq!(x.wait(0, x.cq0, 1)[0].status, WcStatus::RemInvReqErr);
    // The WR the first packet took completes in error on the SRQ's CQ (nothing lost);
    // the other SRQ's WR is untouched.
    let r = x.wait(1, x.srq_cq, 1);
    assert_eq!((r[0].wr_id, r[0].status), (1, WcStatus::RemInvReqErr));
    assert_eq!(x.pair.dev(1).qp_counters(t1).unwrap().xrc_bad_srq, 1);
    assert_eq!(x.pair.dev(1).qp_state(t1), Some(QpState::Err));
    assert_eq!(
        x.wait(1, x.srq_cq, 0).len(),
        0,
        "no second receive completion"
    );
}
