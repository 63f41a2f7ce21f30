//! The C structures and constants of the extended verbs of rdma-core 44's
//! `<infiniband/verbs.h>` (extended QPs and the `ibv_wr_*` post-send API, extended CQs,
//! device memory, thread and parent domains, real-time values, extended SRQs), and the
//! `verbs_context` slots their inline wrappers call. Like [`crate::abi`], the field order
//! follows the header exactly and `tests/layout.rs` compares every size and offset listed in
//! [`checked_layouts_ex`] with the installed header.
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::c_void;

use crate::abi::*;
use crate::layout_check::checked_constants;

/// Index of each extension slot of `struct verbs_context` in [`verbs_context::ext`], in the
/// header's order (the slots grow downwards in front of `sz`).
pub mod slot {
    pub const QUERY_PORT: usize = 0;
    pub const ADVISE_MR: usize = 1;
    pub const ALLOC_NULL_MR: usize = 2;
    pub const REG_DM_MR: usize = 7;
    pub const ALLOC_DM: usize = 8;
    pub const FREE_DM: usize = 9;
    pub const ALLOC_PARENT_DOMAIN: usize = 14;
    pub const DEALLOC_TD: usize = 15;
    pub const ALLOC_TD: usize = 16;
    pub const MODIFY_CQ: usize = 17;
    pub const QUERY_RT_VALUES: usize = 24;
    pub const CREATE_CQ_EX: usize = 25;
    pub const QUERY_DEVICE_EX: usize = 27;
    pub const OPEN_QP: usize = 32;
    pub const CREATE_QP_EX: usize = 33;
    pub const GET_SRQ_NUM: usize = 34;
    pub const CREATE_SRQ_EX: usize = 35;
    pub const OPEN_XRCD: usize = 36;
    pub const CLOSE_XRCD: usize = 37;
}

/// `struct ibv_qp_ex`: the classic QP followed by the post-send builder functions the
/// inline `ibv_wr_*` of verbs.h call.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u32, *const c_void)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> i32>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

/// `struct verbs_qp` of rdma-core's `<infiniband/driver.h>` (not installed by Debian's
/// libibverbs-dev): the union of `ibv_qp` and `ibv_qp_ex` (the latter starts with the
/// former, so the union is the extended structure), then `comp_mask` (`VERBS_QP_XRCD` 1,
/// `VERBS_QP_EX` 2) and the XRC domain. libibverbs' `ibv_qp_to_qp_ex` reads `comp_mask`.
#[repr(C)]
pub struct verbs_qp {
    pub qp_ex: ibv_qp_ex,
    pub comp_mask: u32,
    pub xrcd: *mut c_void,
}

/// `VERBS_QP_EX` of driver.h: the QP has an `ibv_qp_ex` (created by `ibv_create_qp_ex`).
pub const VERBS_QP_EX: u32 = 2;

/// `struct ibv_data_buf` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_rx_hash_conf` of verbs.h.
#[repr(C)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex` of verbs.h (its first fields are `ibv_qp_init_attr`).
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: i32,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_poll_cq_attr` of verbs.h.
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_cq_ex` of verbs.h: the classic CQ's fields, then the polling functions the
/// inline `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and `ibv_wc_read_*` call.
#[repr(C)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: i32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    pub status: u32,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> i32>,
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> i32>,
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    pub read_opcode: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_slid: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut c_void)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
}

/// `struct ibv_cq_init_attr_ex` of verbs.h.
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_alloc_dm_attr` of verbs.h.
#[repr(C)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

/// `struct ibv_dm` of verbs.h: the inline `ibv_memcpy_to_dm`/`ibv_memcpy_from_dm` call its
/// two function pointers.
#[repr(C)]
pub struct ibv_dm {
    pub context: *mut ibv_context,
    pub memcpy_to_dm: Option<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> i32>,
    pub memcpy_from_dm: Option<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> i32>,
    pub comp_mask: u32,
    pub handle: u32,
}

/// `struct ibv_td_init_attr` of verbs.h.
#[repr(C)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_td` of verbs.h.
#[repr(C)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// The custom allocator of a parent domain.
pub type PdAllocFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void;
/// The custom free function of a parent domain.
pub type PdFreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);

/// `struct ibv_parent_domain_init_attr` of verbs.h.
#[repr(C)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Option<PdAllocFn>,
    pub free: Option<PdFreeFn>,
    pub pd_context: *mut c_void,
}

/// `struct ibv_values_ex` of verbs.h.
#[repr(C)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

/// `struct ibv_tm_cap` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex` of verbs.h (its first fields are `ibv_srq_init_attr`).
#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

// enum ibv_qp_init_attr_mask
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
pub const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
// enum ibv_qp_create_send_ops_flags
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
pub const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
pub const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
pub const IBV_QP_EX_WITH_TSO: u64 = 1 << 10;
pub const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;
// enum ibv_create_cq_wc_flags
pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
pub const IBV_WC_EX_WITH_CVLAN: u64 = 1 << 8;
pub const IBV_WC_EX_WITH_FLOW_TAG: u64 = 1 << 9;
pub const IBV_WC_EX_WITH_TM_INFO: u64 = 1 << 10;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
// enum ibv_cq_init_attr_mask / ibv_create_cq_attr_flags
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;
// enum ibv_parent_domain_init_attr_mask
pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1 << 0;
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;
/// `IBV_ALLOCATOR_USE_DEFAULT`: the custom allocator declines; the library allocates.
pub const IBV_ALLOCATOR_USE_DEFAULT: usize = usize::MAX;
// enum ibv_values_mask
pub const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;
// enum ibv_srq_init_attr_mask / ibv_srq_type
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
pub const IBV_SRQT_BASIC: u32 = 0;
pub const IBV_SRQT_XRC: u32 = 1;
// enum ibv_access_flags beyond the four the engine knows
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
// enum ibv_rereg_mr_flags
pub const IBV_REREG_MR_CHANGE_TRANSLATION: u32 = 1 << 0;
pub const IBV_REREG_MR_CHANGE_PD: u32 = 1 << 1;
pub const IBV_REREG_MR_CHANGE_ACCESS: u32 = 1 << 2;
// enum ibv_advise_mr_advice / flags
pub const IBV_ADVISE_MR_ADVICE_PREFETCH: u32 = 0;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: u32 = 1;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: u32 = 2;
pub const IBV_ADVISE_MR_FLAG_FLUSH: u32 = 1;
// enum ibv_wc_opcode values the extended API adds to the classic list
pub const IBV_WC_ATOMIC_WRITE: u32 = 9;

/// The constants above, by C name, for `tests/layout.rs`.
pub const CHECKED_CONSTANTS_EX: &[(&str, i64)] = checked_constants![
    IBV_WC_ATOMIC_WRITE,
    IBV_QP_INIT_ATTR_PD,
    IBV_QP_INIT_ATTR_XRCD,
    IBV_QP_INIT_ATTR_CREATE_FLAGS,
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
    IBV_QP_EX_WITH_RDMA_WRITE,
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
    IBV_QP_EX_WITH_SEND,
    IBV_QP_EX_WITH_SEND_WITH_IMM,
    IBV_QP_EX_WITH_RDMA_READ,
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
    IBV_QP_EX_WITH_LOCAL_INV,
    IBV_QP_EX_WITH_BIND_MW,
    IBV_QP_EX_WITH_SEND_WITH_INV,
    IBV_QP_EX_WITH_TSO,
    IBV_QP_EX_WITH_ATOMIC_WRITE,
    IBV_WC_EX_WITH_BYTE_LEN,
    IBV_WC_EX_WITH_IMM,
    IBV_WC_EX_WITH_QP_NUM,
    IBV_WC_EX_WITH_SRC_QP,
    IBV_WC_EX_WITH_SLID,
    IBV_WC_EX_WITH_SL,
    IBV_WC_EX_WITH_DLID_PATH_BITS,
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
    IBV_WC_EX_WITH_CVLAN,
    IBV_WC_EX_WITH_FLOW_TAG,
    IBV_WC_EX_WITH_TM_INFO,
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
    IBV_CQ_INIT_ATTR_MASK_FLAGS,
    IBV_CQ_INIT_ATTR_MASK_PD,
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
    IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
    IBV_VALUES_MASK_RAW_CLOCK,
    IBV_SRQ_INIT_ATTR_TYPE,
    IBV_SRQ_INIT_ATTR_PD,
    IBV_SRQ_INIT_ATTR_XRCD,
    IBV_SRQ_INIT_ATTR_CQ,
    IBV_SRQT_BASIC,
    IBV_SRQT_XRC,
    IBV_ACCESS_LOCAL_WRITE,
    IBV_ACCESS_REMOTE_WRITE,
    IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_ATOMIC,
    IBV_REREG_MR_CHANGE_TRANSLATION,
    IBV_REREG_MR_CHANGE_PD,
    IBV_REREG_MR_CHANGE_ACCESS,
    IBV_ADVISE_MR_ADVICE_PREFETCH,
    IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
    IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
    IBV_ADVISE_MR_FLAG_FLUSH,
];

/// `(C expression, Rust value)` pairs of sizes and offsets for `tests/layout.rs`.
/// `struct verbs_qp` is not in the installed headers, so its layout is checked as the
/// driver.h definition spells it (a union of `ibv_qp` and `ibv_qp_ex`, then `comp_mask`
/// and a pointer) by a local C definition the test provides.
pub fn checked_layouts_ex() -> Vec<(&'static str, usize)> {
    use crate::layout_check::{c_offset as off, c_size as size};
    use std::mem::{offset_of, size_of};
    let ext = offset_of!(verbs_context, ext);
    let slot_at = |i: usize| ext + i * size_of::<*mut c_void>();
    vec![
        size!(ibv_qp_ex),
        off!(ibv_qp_ex, comp_mask),
        off!(ibv_qp_ex, wr_id),
        off!(ibv_qp_ex, wr_flags),
        off!(ibv_qp_ex, wr_atomic_cmp_swp),
        off!(ibv_qp_ex, wr_local_inv),
        off!(ibv_qp_ex, wr_send),
        off!(ibv_qp_ex, wr_send_tso),
        off!(ibv_qp_ex, wr_set_ud_addr),
        off!(ibv_qp_ex, wr_set_xrc_srqn),
        off!(ibv_qp_ex, wr_set_inline_data_list),
        off!(ibv_qp_ex, wr_set_sge_list),
        off!(ibv_qp_ex, wr_start),
        off!(ibv_qp_ex, wr_complete),
        off!(ibv_qp_ex, wr_abort),
        off!(ibv_qp_ex, wr_atomic_write),
        size!(verbs_qp),
        off!(verbs_qp, comp_mask),
        off!(verbs_qp, xrcd),
        size!(ibv_data_buf),
        size!(ibv_qp_init_attr_ex),
        off!(ibv_qp_init_attr_ex, comp_mask),
        off!(ibv_qp_init_attr_ex, pd),
        off!(ibv_qp_init_attr_ex, xrcd),
        off!(ibv_qp_init_attr_ex, create_flags),
        off!(ibv_qp_init_attr_ex, max_tso_header),
        off!(ibv_qp_init_attr_ex, rwq_ind_tbl),
        off!(ibv_qp_init_attr_ex, rx_hash_conf),
        off!(ibv_qp_init_attr_ex, source_qpn),
        off!(ibv_qp_init_attr_ex, send_ops_flags),
        size!(ibv_poll_cq_attr),
        size!(ibv_cq_ex),
        off!(ibv_cq_ex, handle),
        off!(ibv_cq_ex, cqe),
        off!(ibv_cq_ex, comp_events_completed),
        off!(ibv_cq_ex, comp_mask),
        off!(ibv_cq_ex, status),
        off!(ibv_cq_ex, wr_id),
        off!(ibv_cq_ex, start_poll),
        off!(ibv_cq_ex, read_opcode),
        off!(ibv_cq_ex, read_dlid_path_bits),
        off!(ibv_cq_ex, read_completion_ts),
        off!(ibv_cq_ex, read_tm_info),
        off!(ibv_cq_ex, read_completion_wallclock_ns),
        size!(ibv_cq_init_attr_ex),
        off!(ibv_cq_init_attr_ex, cq_context),
        off!(ibv_cq_init_attr_ex, comp_vector),
        off!(ibv_cq_init_attr_ex, wc_flags),
        off!(ibv_cq_init_attr_ex, comp_mask),
        off!(ibv_cq_init_attr_ex, flags),
        off!(ibv_cq_init_attr_ex, parent_domain),
        size!(ibv_alloc_dm_attr),
        off!(ibv_alloc_dm_attr, log_align_req),
        off!(ibv_alloc_dm_attr, comp_mask),
        size!(ibv_dm),
        off!(ibv_dm, memcpy_to_dm),
        off!(ibv_dm, memcpy_from_dm),
        off!(ibv_dm, comp_mask),
        off!(ibv_dm, handle),
        size!(ibv_td_init_attr),
        size!(ibv_td),
        size!(ibv_parent_domain_init_attr),
        off!(ibv_parent_domain_init_attr, td),
        off!(ibv_parent_domain_init_attr, comp_mask),
        off!(ibv_parent_domain_init_attr, alloc),
        off!(ibv_parent_domain_init_attr, free),
        off!(ibv_parent_domain_init_attr, pd_context),
        size!(ibv_values_ex),
        off!(ibv_values_ex, raw_clock),
        size!(ibv_srq_init_attr_ex),
        off!(ibv_srq_init_attr_ex, comp_mask),
        off!(ibv_srq_init_attr_ex, srq_type),
        off!(ibv_srq_init_attr_ex, pd),
        off!(ibv_srq_init_attr_ex, xrcd),
        off!(ibv_srq_init_attr_ex, cq),
        off!(ibv_srq_init_attr_ex, tm_cap),
        (
            "offsetof(struct verbs_context, query_port)",
            slot_at(slot::QUERY_PORT),
        ),
        (
            "offsetof(struct verbs_context, advise_mr)",
            slot_at(slot::ADVISE_MR),
        ),
        (
            "offsetof(struct verbs_context, alloc_null_mr)",
            slot_at(slot::ALLOC_NULL_MR),
        ),
        (
            "offsetof(struct verbs_context, reg_dm_mr)",
            slot_at(slot::REG_DM_MR),
        ),
        (
            "offsetof(struct verbs_context, alloc_dm)",
            slot_at(slot::ALLOC_DM),
        ),
        (
            "offsetof(struct verbs_context, free_dm)",
            slot_at(slot::FREE_DM),
        ),
        (
            "offsetof(struct verbs_context, alloc_parent_domain)",
            slot_at(slot::ALLOC_PARENT_DOMAIN),
        ),
        (
            "offsetof(struct verbs_context, dealloc_td)",
            slot_at(slot::DEALLOC_TD),
        ),
        (
            "offsetof(struct verbs_context, alloc_td)",
            slot_at(slot::ALLOC_TD),
        ),
        (
            "offsetof(struct verbs_context, modify_cq)",
            slot_at(slot::MODIFY_CQ),
        ),
        (
            "offsetof(struct verbs_context, query_rt_values)",
            slot_at(slot::QUERY_RT_VALUES),
        ),
        (
            "offsetof(struct verbs_context, create_cq_ex)",
            slot_at(slot::CREATE_CQ_EX),
        ),
        (
            "offsetof(struct verbs_context, query_device_ex)",
            slot_at(slot::QUERY_DEVICE_EX),
        ),
        (
            "offsetof(struct verbs_context, open_qp)",
            slot_at(slot::OPEN_QP),
        ),
        (
            "offsetof(struct verbs_context, create_qp_ex)",
            slot_at(slot::CREATE_QP_EX),
        ),
        (
            "offsetof(struct verbs_context, get_srq_num)",
            slot_at(slot::GET_SRQ_NUM),
        ),
        (
            "offsetof(struct verbs_context, create_srq_ex)",
            slot_at(slot::CREATE_SRQ_EX),
        ),
        (
            "offsetof(struct verbs_context, open_xrcd)",
            slot_at(slot::OPEN_XRCD),
        ),
        (
            "offsetof(struct verbs_context, close_xrcd)",
            slot_at(slot::CLOSE_XRCD),
        ),
    ]
}
