//! The extension slots of the `verbs_context` the shim hands out: the functions the inline
//! extended verbs of verbs.h (`ibv_create_qp_ex`, `ibv_create_cq_ex`, `ibv_alloc_dm`, ...)
//! call through `verbs_get_ctx_op`. A slot left NULL makes its inline wrapper fail with
//! EOPNOTSUPP (or fall back to a classic exported function), as on a provider without it.

use std::ffi::c_void;

use crate::abi::VERBS_CONTEXT_EXT_SLOTS;
use crate::abi_ex::slot;

/// The slot array of a new context.
pub(super) fn extension_slots() -> [*mut c_void; VERBS_CONTEXT_EXT_SLOTS] {
    let mut s = [std::ptr::null_mut(); VERBS_CONTEXT_EXT_SLOTS];
    s[slot::CREATE_QP_EX] = super::qp::create_qp_ex as *mut c_void;
    s[slot::CREATE_CQ_EX] = super::resources::create_cq_ex as *mut c_void;
    s[slot::QUERY_RT_VALUES] = super::cq_ex::query_rt_values as *mut c_void;
    s[slot::ALLOC_TD] = super::domain::alloc_td as *mut c_void;
    s[slot::DEALLOC_TD] = super::domain::dealloc_td as *mut c_void;
    s[slot::ALLOC_PARENT_DOMAIN] = super::domain::alloc_parent_domain as *mut c_void;
    s[slot::ALLOC_DM] = super::dm::alloc_dm as *mut c_void;
    s[slot::FREE_DM] = super::dm::free_dm as *mut c_void;
    s[slot::REG_DM_MR] = super::dm::reg_dm_mr as *mut c_void;
    s[slot::CREATE_SRQ_EX] = super::resources::create_srq_ex as *mut c_void;
    s[slot::ADVISE_MR] = super::resources::advise_mr as *mut c_void;
    s[slot::OPEN_XRCD] = super::xrc::open_xrcd as *mut c_void;
    s[slot::CLOSE_XRCD] = super::xrc::close_xrcd as *mut c_void;
    s[slot::GET_SRQ_NUM] = super::xrc::get_srq_num as *mut c_void;
    s
}
