//! Memory windows through the softib-net API over real loopback sockets (two devices on
//! 127.0.0.1 / 127.0.0.2): a type 1 window bound with `Context::bind_mw`, a type 2
//! window bound with a BIND_MW WR and freed by the peer's SEND with Invalidate, and a
//! LOCAL_INV; remote accesses through them checked byte for byte.

mod common;

use std::time::Duration;

use common::{pattern, rc_pair, Side};
use softib_transport::{
    AccessFlags, MwBind, MwType, RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

fn pair() -> (Side, Side) {
    let (a, b) = rc_pair("127.0.0.1:0", "127.0.0.2:0", 1 << 16);
    (a, b)
}

fn write(a: &Side, rkey: u32, va: u64, len: u32, id: u64) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: vec![Sge {
            addr: a.mr.addr,
            length: len,
            lkey: a.mr.keys.lkey,
        }],
        remote_addr: va,
        rkey,
        ..Default::default()
    }
}

/// One completion, whatever its status.
fn one(s: &Side) -> WorkCompletion {
    let mut buf = [softib_transport::harness::empty_wc(); 1];
    let k = s.ctx.wait_cq(s.cq, &mut buf, Duration::from_secs(10));
    assert_eq!(k, 1, "no completion within 10 s");
    buf[0]
}

#[test]
fn type1_window_bound_by_the_verb_carries_a_write_and_refuses_outside_its_range() {
    let (a, b) = pair();
    let mw = b.ctx.alloc_mw(b.pd, MwType::Type1).unwrap();
    let bind = MwBind {
        mw_rkey: mw,
        mr_lkey: b.mr.keys.lkey,
        addr: b.mr.addr + 4096,
        length: 4096,
        access: AccessFlags::REMOTE_WRITE,
        ..Default::default()
    };
    let rkey = b.ctx.bind_mw(b.qpn, 7, SendFlags::SIGNALED, bind).unwrap();
    let wc = b.completions(1, 10);
    assert_eq!((wc[0].wr_id, wc[0].opcode), (7, WcOpcode::BindMw));
    let data = pattern(3, 1000);
    a.ctx.write_mr(&a.mr, 0, &data).unwrap();
    a.ctx
        .post_send(a.qpn, &[write(&a, rkey, b.mr.addr + 4096, 1000, 1)])
        .unwrap();
    a.completions(1, 10);
    assert_eq!(b.read(4096, 1000), data);
    a.ctx
        .post_send(a.qpn, &[write(&a, rkey, b.mr.addr + 8000, 1000, 2)])
        .unwrap();
    assert_eq!(one(&a).status, WcStatus::RemAccessErr);
    b.ctx.dealloc_mw(rkey).unwrap();
}

#[test]
fn type2_window_bound_by_a_wr_is_freed_by_the_peers_send_with_invalidate() {
    let (a, b) = pair();
    let mw = b.ctx.alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let bind = SendWr {
        wr_id: 1,
        opcode: WrOpcode::BindMw,
        flags: SendFlags::SIGNALED,
        bind_mw: Some(MwBind {
            mw_rkey: mw,
            new_rkey: rkey,
            mr_lkey: b.mr.keys.lkey,
            addr: b.mr.addr,
            length: 8192,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        }),
        ..Default::default()
    };
    b.ctx.post_send(b.qpn, &[bind]).unwrap();
    assert_eq!(b.completions(1, 10)[0].opcode, WcOpcode::BindMw);
    let data = pattern(4, 512);
    a.ctx.write_mr(&a.mr, 0, &data).unwrap();
    a.ctx
        .post_send(a.qpn, &[write(&a, rkey, b.mr.addr + 100, 512, 2)])
        .unwrap();
    a.completions(1, 10);
    assert_eq!(b.read(100, 512), data);
    b.ctx
        .post_recv(
            b.qpn,
            &[RecvWr {
                wr_id: 9,
                sg_list: vec![Sge {
                    addr: b.mr.addr + 16384,
                    length: 64,
                    lkey: b.mr.keys.lkey,
                }],
            }],
        )
        .unwrap();
    let mut inv = write(&a, 0, 0, 16, 3);
    inv.opcode = WrOpcode::SendWithInv;
    inv.invalidate_rkey = rkey;
    a.ctx.post_send(a.qpn, &[inv]).unwrap();
    a.completions(1, 10);
    let r = b.completions(1, 10);
    assert_eq!(r[0].invalidated_rkey, Some(rkey));
    a.ctx
        .post_send(a.qpn, &[write(&a, rkey, b.mr.addr + 100, 8, 4)])
        .unwrap();
    assert_eq!(one(&a).status, WcStatus::RemAccessErr);
}

#[test]
fn local_inv_frees_a_type2_window_on_its_own_qp() {
    let (a, b) = pair();
    let mw = b.ctx.alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = softib_transport::next_rkey(mw);
    let bind = SendWr {
        wr_id: 1,
        opcode: WrOpcode::BindMw,
        bind_mw: Some(MwBind {
            mw_rkey: mw,
            new_rkey: rkey,
            mr_lkey: b.mr.keys.lkey,
            addr: b.mr.addr,
            length: 64,
            access: AccessFlags::REMOTE_WRITE,
        }),
        ..Default::default()
    };
    let inv = SendWr {
        wr_id: 2,
        opcode: WrOpcode::LocalInv,
        flags: SendFlags::SIGNALED,
        invalidate_rkey: rkey,
        ..Default::default()
    };
    b.ctx.post_send(b.qpn, &[bind, inv]).unwrap();
    let wc = b.completions(1, 10);
    assert_eq!((wc[0].wr_id, wc[0].opcode), (2, WcOpcode::LocalInv));
    a.ctx
        .post_send(a.qpn, &[write(&a, rkey, b.mr.addr, 8, 3)])
        .unwrap();
    assert_eq!(one(&a).status, WcStatus::RemAccessErr);
}
