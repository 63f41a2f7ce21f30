//! Extended CQs: the polling functions of `struct ibv_cq_ex` (`ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll`, the
//! `ibv_wc_read_*` readers), plus `ibv_query_rt_values_ex`. (The
//! `create_cq_ex` slot creates its CQ with `ibv_create_cq`, in `resources.rs`.)

use std::ffi::c_int;

use softib_transport::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

use super::{ctx_obj, guard, obj};
use crate::abi::*;
use crate::abi_ex::*;
use crate::convert::wc_to_c;
use crate::cq_ex::CurrentWc;
use crate::objects::CqObj;
use crate::sys::clock_ns;

/// The `ibv_cq_ex` of a new CQ; the polling functions only for `ibv_create_cq_ex`.
pub(super) fn cq_ex_of(c: ibv_cq, with_polling: bool) -> ibv_cq_ex {
    let p = with_polling;
    ibv_cq_ex {
        context: c.context,
        channel: c.channel,
        cq_context: c.cq_context,
        handle: c.handle,
        cqe: c.cqe,
        mutex: c.mutex,
        cond: c.cond,
        comp_events_completed: 0,
        async_events_completed: 0,
        comp_mask: 0,
        status: 0,
        wr_id: 0,
        start_poll: p.then_some(start_poll as _),
        next_poll: p.then_some(next_poll as _),
        end_poll: p.then_some(end_poll as _),
        read_opcode: p.then_some(read_opcode as _),
        read_vendor_err: p.then_some(read_vendor_err as _),
        read_byte_len: p.then_some(read_byte_len as _),
        read_imm_data: p.then_some(read_imm_data as _),
        read_qp_num: p.then_some(read_qp_num as _),
        read_src_qp: p.then_some(read_src_qp as _),
        read_wc_flags: p.then_some(read_wc_flags as _),
        read_slid: p.then_some(read_slid as _),
        read_sl: p.then_some(read_sl as _),
        read_dlid_path_bits: p.then_some(read_dlid_path_bits as _),
        read_completion_ts: p.then_some(read_completion_ts as _),
        read_cvlan: None,
        read_flow_tag: None,
        read_tm_info: None,
        read_completion_wallclock_ns: p.then_some(read_completion_wallclock_ns as _),
    }
}

const EMPTY: WorkCompletion = WorkCompletion {
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

/// Takes the next completion into the CQ's current slot: 0, or ENOENT when the CQ is
/// empty (ibv_create_cq_ex(3)).
///
/// # Safety
/// `cq` is an `ibv_cq_ex` of this library.
unsafe fn advance(cq: *mut ibv_cq_ex) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: function contract.
        let Some(q) = (unsafe { obj::<_, CqObj>(cq) }) else {
            return libc::EINVAL;
        };
        let Some(ex) = &q.ex else {
            return libc::EINVAL;
        };
        let mut buf = [EMPTY];
        let (got, _) = q.shared.net.poll_cq_progress(q.handle, &mut buf);
        if got == 0 {
            ex.set(None);
            return libc::ENOENT;
        }
        // Stamped as the completion leaves the engine: the shim is the "HCA" that writes
        // the CQE.
        let cur = CurrentWc {
            wc: wc_to_c(&buf[0]),
            ts: clock_ns(libc::CLOCK_MONOTONIC),
            wallclock_ns: clock_ns(libc::CLOCK_REALTIME),
        };
        ex.set(Some(cur));
        // SAFETY: `status` and `wr_id` of the C structure are written only here, under
        // the application's single poller (ibv_start_poll(3)).
        unsafe {
            (*cq).status = cur.wc.status;
            (*cq).wr_id = cur.wc.wr_id;
        }
        0
    })
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: `attr` is the caller's (NULL tolerated); comp_mask must be 0 (no extension
    // is defined).
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: the inline ibv_start_poll passes our CQ.
    unsafe { advance(cq) }
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the inline ibv_next_poll passes our CQ.
    unsafe { advance(cq) }
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    guard((), || {
        // SAFETY: the inline ibv_end_poll passes our CQ.
        if let Some(ex) = unsafe { obj::<_, CqObj>(cq) }.and_then(|q| q.ex.as_ref()) {
            ex.set(None);
        }
    })
}

/// The completion being read.
///
/// # Safety
/// `cq` is an `ibv_cq_ex` of this library.
unsafe fn current(cq: *mut ibv_cq_ex) -> CurrentWc {
    guard(CurrentWc::default(), || {
        // SAFETY: function contract.
        unsafe { obj::<_, CqObj>(cq) }
            .and_then(|q| q.ex.as_ref())
            .map_or_else(CurrentWc::default, |ex| ex.current())
    })
}

macro_rules! reader {
    ($name:ident, $ty:ty, |$c:ident| $e:expr) => {
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $ty {
            // SAFETY: the inline ibv_wc_read_* pass our CQ.
            let $c = unsafe { current(cq) };
            $e
        }
    };
}

reader!(read_opcode, u32, |c| c.wc.opcode);
reader!(read_vendor_err, u32, |c| c.wc.vendor_err);
reader!(read_byte_len, u32, |c| c.wc.byte_len);
reader!(read_imm_data, u32, |c| c.wc.imm_data);
reader!(read_qp_num, u32, |c| c.wc.qp_num);
reader!(read_src_qp, u32, |c| c.wc.src_qp);
reader!(read_wc_flags, u32, |c| c.wc.wc_flags);
reader!(read_slid, u32, |c| u32::from(c.wc.slid));
reader!(read_sl, u8, |c| c.wc.sl);
reader!(read_dlid_path_bits, u8, |c| c.wc.dlid_path_bits);
reader!(read_completion_ts, u64, |c| c.ts);
reader!(read_completion_wallclock_ns, u64, |c| c.wallclock_ns);

/// The `query_rt_values` slot: the raw clock is the completion-timestamp clock
/// (`CLOCK_MONOTONIC`), so a timestamp and a query compare directly.
pub(super) unsafe extern "C" fn query_rt_values(
    ctx: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the inline ibv_query_rt_values_ex passes our context and the caller's
        // structure.
        let (Some(_), Some(v)) = (unsafe { ctx_obj(ctx) }, unsafe { values.as_mut() }) else {
            return libc::EINVAL;
        };
        if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
            return libc::EINVAL;
        }
        if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
            let ns = clock_ns(libc::CLOCK_MONOTONIC);
            v.raw_clock = libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            };
        }
        0
    })
}
