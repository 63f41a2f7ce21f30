//! The data path: the functions installed in `context->ops`, which the inline
//! `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq` and
//! `ibv_req_notify_cq` of verbs.h call. Errors follow the verbs convention: the post
//! functions return an errno and point `bad_wr` at the first WR not posted.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use softib_transport::{
    Device, Nanos, RecvWr, SendFlags, SendWr, Sge, UdDest, VerbsError, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

use super::{guard, obj, report};
use crate::abi::*;
use crate::convert::{errno_of, imm_from_c, roce_v2_packet_type, wc_to_c, wr_opcode_from_c};
use crate::objects::{AhObj, CqObj, PdObj, QpObj, SrqObj};

/// Why one WR was refused: errno and the message for `SOFTIB_DEBUG`.
pub(super) type Refusal = (i32, String);

fn refuse(e: VerbsError) -> Refusal {
    (errno_of(&e), e.to_string())
}

/// The SGEs of a WR.
///
/// # Safety
/// `list` points at `n` SGEs when `n > 0` (ibv_post_send(3)).
unsafe fn sges(list: *const ibv_sge, n: i32) -> Result<Vec<Sge>, Refusal> {
    if n < 0 || (n > 0 && list.is_null()) {
        return Err((libc::EINVAL, format!("num_sge {n} with sg_list {list:p}")));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: function contract: `n` readable SGEs at `list`.
    let s = unsafe { std::slice::from_raw_parts(list, n as usize) };
    Ok(s.iter()
        .map(|g| Sge {
            addr: g.addr,
            length: g.length,
            lkey: g.lkey,
        })
        .collect())
}

/// Builds and posts one send WR.
///
/// # Safety
/// `w` is a valid send WR whose SGEs (and, for INLINE, the bytes they name) are readable.
pub(super) unsafe fn post_one_send(
    q: &QpObj,
    bounce: u32,
    e: &mut Device,
    now: Nanos,
    w: &ibv_send_wr,
) -> Result<(), Refusal> {
    let opcode =
        wr_opcode_from_c(w.opcode).map_err(|errno| (errno, format!("opcode {}", w.opcode)))?;
    // SAFETY: forwarded function contract.
    let mut sg_list = unsafe { sges(w.sg_list, w.num_sge) }?;
    let mut flags = SendFlags(w.send_flags & 0xF);
    if flags.contains(SendFlags::INLINE) {
        // Inline data may live in unregistered memory (ibv_post_send(3)): stage it in the
        // PD's bounce region, from which the engine copies it at post time.
        let total: u64 = sg_list.iter().map(|g| u64::from(g.length)).sum();
        // An ATOMIC WRITE's 8 bytes are part of its WQE, not inline data (rxe keeps them in
        // wqe->dma.atomic_wr): max_inline_data does not bound them; the engine checks the 8.
        if opcode != WrOpcode::AtomicWrite && total > u64::from(q.cap.max_inline_data) {
            return Err((
                libc::EINVAL,
                format!(
                    "{total} inline bytes exceed max_inline_data {}",
                    q.cap.max_inline_data
                ),
            ));
        }
        let m = e
            .memory_mut(bounce)
            .ok_or((libc::EINVAL, "the PD's inline region is gone".to_string()))?;
        let mut at = 0usize;
        for g in &sg_list {
            if g.length == 0 {
                continue;
            }
            // SAFETY: the application promises the inline SGEs' bytes are readable for the
            // duration of the call (ibv_post_send(3), IBV_SEND_INLINE).
            let bytes = unsafe {
                std::slice::from_raw_parts(g.addr as usize as *const u8, g.length as usize)
            };
            m.write(at, bytes);
            at += bytes.len();
        }
        sg_list = if total == 0 {
            Vec::new()
        } else {
            vec![Sge {
                addr: 0,
                length: total as u32,
                lkey: bounce,
            }]
        };
    } else {
        flags = flags.difference(SendFlags::INLINE);
    }
    let has_imm = matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
    let atomic = opcode.is_atomic();
    if atomic {
        // rdma-core providers/rxe/rxe.c validate_send_wr: an atomic needs 8 bytes of local
        // buffer and an 8-byte aligned remote address, refused at post time (IBA 9.4.5
        // makes the misaligned case an error; rxe reports it here, not in a completion).
        let total: u64 = sg_list.iter().map(|g| u64::from(g.length)).sum();
        let remote = w.wr.remote_addr();
        if total < 8 || remote & 7 != 0 {
            return Err((
                libc::EINVAL,
                format!("atomic with {total} local bytes at remote address {remote:#x}"),
            ));
        }
    }
    let ud = if q.qp_type == softib_transport::QpType::Ud {
        // SAFETY: `wr.ud.ah` is NULL or an AH from ibv_create_ah (ibv_post_send(3)).
        let ah = unsafe { obj::<_, AhObj>(w.wr.ud_ah() as *mut ibv_ah) }.ok_or((
            libc::EINVAL,
            "UD send without an address handle".to_string(),
        ))?;
        Some(UdDest {
            ah: ah.handle,
            remote_qpn: w.wr.ud_remote_qpn(),
            remote_qkey: w.wr.ud_remote_qkey(),
        })
    } else {
        None
    };
    let wr = SendWr {
        wr_id: w.wr_id,
        opcode,
        sg_list,
        flags,
        imm_data: has_imm.then(|| imm_from_c(w.imm_data)),
        invalidate_rkey: if matches!(opcode, WrOpcode::SendWithInv | WrOpcode::LocalInv) {
            w.imm_data
        } else {
            0
        },
        remote_addr: w.wr.remote_addr(),
        rkey: if atomic {
            w.wr.atomic_rkey()
        } else {
            w.wr.rdma_rkey()
        },
        compare_add: if atomic { w.wr.compare_add() } else { 0 },
        swap: if atomic { w.wr.swap() } else { 0 },
        ud,
        // `qp_type.xrc.remote_srqn`: the remote XRC SRQ, for XRC initiator QPs.
        xrc_remote_srqn: w.remote_srqn,
        // libibverbs has no RD.
        rd: None,
        bind_mw: if opcode == WrOpcode::BindMw {
            // SAFETY: forwarded function contract (the WR's window and region are ours).
            Some(unsafe { super::mw::bind_of_wr(w) }?)
        } else {
            None
        },
    };
    e.post_send(now, q.qpn, &wr).map_err(refuse)
}

pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP from ibv_create_qp (the ops table is only reachable through ours).
        let Some(q) = (unsafe { obj::<_, QpObj>(qp) }) else {
            return libc::EINVAL;
        };
        // SAFETY: the QP's PD is one of ours and outlives the QP.
        let bounce = q.staging.map_or_else(
            || {
                unsafe { obj::<_, PdObj>(q.pd) }
                    .map_or(0, |p| p.bounce_lkey.load(Ordering::Acquire))
            },
            |st| st.lkey,
        );
        let mut cur = wr;
        let r = q.shared.net.with_engine(|e, now| {
            while !cur.is_null() {
                // SAFETY: a chain of valid WRs, NULL-terminated (ibv_post_send(3)).
                let w = unsafe { &*cur };
                // SAFETY: as above.
                unsafe { post_one_send(q, bounce, e, now, w) }?;
                cur = w.next;
            }
            Ok(())
        });
        match r {
            Ok(()) => 0,
            Err((errno, why)) => {
                if !bad.is_null() {
                    // SAFETY: the caller's out pointer (ibv_post_send(3)).
                    unsafe { *bad = cur };
                }
                report(&q.shared, "ibv_post_send", errno, &why)
            }
        }
    })
}

/// Walks a receive WR chain, posting each with `post`.
///
/// # Safety
/// `wr` is a NULL-terminated chain of valid receive WRs.
unsafe fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    mut post: impl FnMut(&RecvWr) -> Result<(), VerbsError>,
) -> Result<(), (i32, String)> {
    let mut cur = wr;
    let r = (|| {
        while !cur.is_null() {
            // SAFETY: function contract.
            let w = unsafe { &*cur };
            // SAFETY: function contract (the WR's SGE list).
            let sg_list = unsafe { sges(w.sg_list, w.num_sge) }?;
            post(&RecvWr {
                wr_id: w.wr_id,
                sg_list,
            })
            .map_err(refuse)?;
            cur = w.next;
        }
        Ok(())
    })();
    if r.is_err() && !bad.is_null() {
        // SAFETY: the caller's out pointer.
        unsafe { *bad = cur };
    }
    r
}

pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a QP from ibv_create_qp.
        let Some(q) = (unsafe { obj::<_, QpObj>(qp) }) else {
            return libc::EINVAL;
        };
        let qpn = q.qpn;
        // SAFETY: the caller's WR chain (ibv_post_recv(3)).
        let r = q
            .shared
            .net
            .with_engine(|e, _| unsafe { post_recv_chain(wr, bad, |w| e.post_recv(qpn, w)) });
        match r {
            Ok(()) => 0,
            Err((errno, why)) => report(&q.shared, "ibv_post_recv", errno, &why),
        }
    })
}

pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: an SRQ from ibv_create_srq.
        let Some(q) = (unsafe { obj::<_, SrqObj>(srq) }) else {
            return libc::EINVAL;
        };
        let h = q.handle;
        // SAFETY: the caller's WR chain (ibv_post_srq_recv(3)).
        let r = q
            .shared
            .net
            .with_engine(|e, _| unsafe { post_recv_chain(wr, bad, |w| e.post_srq_recv(h, w)) });
        match r {
            Ok(()) => 0,
            Err((errno, why)) => report(&q.shared, "ibv_post_srq_recv", errno, &why),
        }
    })
}

/// Completions taken from the engine per call (a stack buffer, no allocation).
const POLL_BATCH: usize = 32;

const EMPTY_WC: WorkCompletion = WorkCompletion {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: WcOpcode::Send,
    byte_len: 0,
    imm_data: None,
    invalidated_rkey: None,
    qp_num: 0,
    src_qp: 0,
    slid: 0,
    sl: 0,
    wc_flags: WcFlags(0),
    vendor_err: 0,
};

/// Empty polls in a row after which a polling thread yields its core once.
const IDLE_POLLS_BEFORE_YIELD: u32 = 64;

/// Counts this thread's empty polls (no completion, no datagram in or out) and yields the
/// core after [`IDLE_POLLS_BEFORE_YIELD`] of them: a program spinning on `ibv_poll_cq`
/// would otherwise hold a core the peer (or this device's own thread) may need on a loaded
/// machine, as softib's tools do (docs/design/net.md).
fn idle_turn(idle: bool) {
    thread_local! {
        static IDLE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    IDLE.with(|c| {
        if !idle {
            c.set(0);
        } else if c.get() + 1 >= IDLE_POLLS_BEFORE_YIELD {
            c.set(0);
            std::thread::yield_now();
        } else {
            c.set(c.get() + 1);
        }
    });
}

pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-1, || {
        // SAFETY: a CQ from ibv_create_cq.
        let Some(q) = (unsafe { obj::<_, CqObj>(cq) }) else {
            return -1;
        };
        if n <= 0 || wc.is_null() {
            return 0;
        }
        let want = n as usize;
        let packet_type = roce_v2_packet_type(q.shared.config.addr.is_ipv4());
        let mut buf = [EMPTY_WC; POLL_BATCH];
        let mut done = 0;
        while done < want {
            let chunk = (want - done).min(POLL_BATCH);
            let (got, moved) = q.shared.net.poll_cq_progress(q.handle, &mut buf[..chunk]);
            idle_turn(got == 0 && !moved);
            for (i, w) in buf[..got].iter().enumerate() {
                let mut c = wc_to_c(w);
                // A receive with a GRH is a UD one (RC/UC receives carry none on RoCE).
                if c.opcode & IBV_WC_RECV != 0 && c.wc_flags & IBV_WC_GRH != 0 {
                    c.sl = packet_type;
                }
                // SAFETY: `wc` has room for `n` entries (ibv_poll_cq(3)); done + i < n.
                unsafe { wc.add(done + i).write(c) };
            }
            done += got;
            if got < chunk {
                break;
            }
        }
        done as c_int
    })
}

pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a CQ from ibv_create_cq.
        let Some(q) = (unsafe { obj::<_, CqObj>(cq) }) else {
            return libc::EINVAL;
        };
        q.shared.net.req_notify_cq(q.handle, solicited_only != 0);
        0
    })
}
