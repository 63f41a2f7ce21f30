//! The C structures and constants of rdma-core 44's `<infiniband/verbs.h>`, as an
//! application compiled against it sees them. Field order, types and enum values follow
//! the header exactly; `tests/layout.rs` compiles a C program against the installed header
//! and compares every size and offset checked here.
//!
//! Names keep their C spelling so a reader can grep the header for them.
#![allow(non_camel_case_types, missing_docs)]

use crate::layout_check::checked_constants;
use std::ffi::c_void;

pub type pthread_mutex_t = libc::pthread_mutex_t;
pub type pthread_cond_t = libc::pthread_cond_t;

/// `union ibv_gid`: 16 raw bytes (the `global` view is the same bytes as two `__be64`,
/// which gives the union, and every structure holding it, 8-byte alignment).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_gid_entry` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_device_attr` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [u8; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub device_cap_flags: u32,
    pub max_sge: i32,
    pub max_sge_rd: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_pd: i32,
    pub max_qp_rd_atom: i32,
    pub max_ee_rd_atom: i32,
    pub max_res_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub max_ee_init_rd_atom: i32,
    pub atomic_cap: u32,
    pub max_ee: i32,
    pub max_rdd: i32,
    pub max_mw: i32,
    pub max_raw_ipv6_qp: i32,
    pub max_raw_ethy_qp: i32,
    pub max_mcast_grp: i32,
    pub max_mcast_qp_attach: i32,
    pub max_total_mcast_qp_attach: i32,
    pub max_ah: i32,
    pub max_fmr: i32,
    pub max_map_per_fmr: i32,
    pub max_srq: i32,
    pub max_srq_wr: i32,
    pub max_srq_sge: i32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_odp_caps` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_tso_caps` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex` of verbs.h (`ibv_query_device_ex`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_query_device_ex_input` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// The `verbs_context.query_device_ex` slot.
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> i32;

/// `struct ibv_port_attr` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: i32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_async_event`: the element union is pointer-sized.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: u32,
}

/// `struct ibv_wc` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network byte order) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_pd` of verbs.h.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr` of verbs.h.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_global_route` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_srq_attr` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` of verbs.h.
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_qp_cap` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` of verbs.h.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: i32,
}

/// `struct ibv_qp_attr` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The `wr` union of `ibv_send_wr`, in its largest shape (`atomic`); `rdma` and `ud` read
/// their fields from the same bytes (see the accessors).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_send_wr_wr {
    /// rdma.remote_addr / atomic.remote_addr / ud.ah (a pointer).
    pub word0: u64,
    /// rdma.rkey (low 32 bits) / atomic.compare_add / ud.remote_qpn + ud.remote_qkey.
    pub word1: u64,
    /// atomic.swap.
    pub word2: u64,
    /// atomic.rkey.
    pub word3: u32,
}

/// `struct ibv_send_wr` of verbs.h.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: i32,
    pub opcode: u32,
    pub send_flags: u32,
    /// `imm_data` (network byte order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// The `bind_mw` / `tso` union (48 bytes on LP64).
    pub bind_mw_or_tso: [u64; 6],
}

impl ibv_send_wr {
    /// `bind_mw.mw`: the window a BIND_MW WR binds.
    pub fn bind_mw_mw(&self) -> *mut ibv_mw {
        self.bind_mw_or_tso[0] as usize as *mut ibv_mw
    }
    /// `bind_mw.rkey`: the window's R_Key after the bind.
    pub fn bind_mw_rkey(&self) -> u32 {
        u32::from_ne_bytes(
            self.bind_mw_or_tso[1].to_ne_bytes()[..4]
                .try_into()
                .unwrap_or([0; 4]),
        )
    }
    /// `bind_mw.bind_info`.
    pub fn bind_mw_info(&self) -> ibv_mw_bind_info {
        let w = &self.bind_mw_or_tso;
        ibv_mw_bind_info {
            mr: w[2] as usize as *mut ibv_mr,
            addr: w[3],
            length: w[4],
            mw_access_flags: u32::from_ne_bytes(
                w[5].to_ne_bytes()[..4].try_into().unwrap_or([0; 4]),
            ),
        }
    }
}

impl ibv_send_wr_wr {
    /// `wr.rdma.remote_addr` (also `wr.atomic.remote_addr`).
    pub fn remote_addr(&self) -> u64 {
        self.word0
    }
    /// `wr.rdma.rkey`: the first 4 bytes after `remote_addr`.
    pub fn rdma_rkey(&self) -> u32 {
        u32::from_ne_bytes(self.word1.to_ne_bytes()[..4].try_into().unwrap_or([0; 4]))
    }
    /// `wr.atomic.compare_add`.
    pub fn compare_add(&self) -> u64 {
        self.word1
    }
    /// `wr.atomic.swap`.
    pub fn swap(&self) -> u64 {
        self.word2
    }
    /// `wr.atomic.rkey`.
    pub fn atomic_rkey(&self) -> u32 {
        self.word3
    }
    /// `wr.ud.ah`, as an address.
    pub fn ud_ah(&self) -> usize {
        self.word0 as usize
    }
    /// `wr.ud.remote_qpn`.
    pub fn ud_remote_qpn(&self) -> u32 {
        u32::from_ne_bytes(self.word1.to_ne_bytes()[..4].try_into().unwrap_or([0; 4]))
    }
    /// `wr.ud.remote_qkey`.
    pub fn ud_remote_qkey(&self) -> u32 {
        u32::from_ne_bytes(self.word1.to_ne_bytes()[4..].try_into().unwrap_or([0; 4]))
    }
}

/// `struct ibv_recv_wr` of verbs.h.
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: i32,
}

/// `struct ibv_srq` of verbs.h.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp` of verbs.h.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_comp_channel` of verbs.h.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: i32,
    pub refcnt: i32,
}

/// `struct ibv_cq` of verbs.h.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: i32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_ah` of verbs.h.
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct _ibv_device_ops`: two obsolete pointers, always NULL (held as integers so the
/// device, which never changes after creation, can be a shared static).
#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: usize,
    pub _dummy2: usize,
}

/// `struct ibv_device` of verbs.h.
#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: i32,
    pub transport_type: i32,
    pub name: [u8; 64],
    pub dev_name: [u8; 64],
    pub dev_path: [u8; 256],
    pub ibdev_path: [u8; 256],
}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, i32, *mut ibv_wc) -> i32;
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, i32) -> i32;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> i32;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32;

/// `ops.alloc_mw`, called by the inline `ibv_alloc_mw`.
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, u32) -> *mut ibv_mw;
/// `ops.bind_mw`, called by the inline `ibv_bind_mw` (returns an errno).
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> i32;
/// `ops.dealloc_mw`, called by the inline `ibv_dealloc_mw`.
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> i32;

/// `struct ibv_mw` of verbs.h.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: u32,
}

/// `struct ibv_mw_bind_info` of verbs.h.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// `struct ibv_mw_bind` of verbs.h.
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_context_ops`: the data-path entries the inline verbs of verbs.h call (post,
/// poll, notify, and the memory-window verbs); every `_compat_*` slot stays NULL.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: *mut c_void,
    pub _compat_query_port: *mut c_void,
    pub _compat_alloc_pd: *mut c_void,
    pub _compat_dealloc_pd: *mut c_void,
    pub _compat_reg_mr: *mut c_void,
    pub _compat_rereg_mr: *mut c_void,
    pub _compat_dereg_mr: *mut c_void,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: *mut c_void,
    pub _compat_resize_cq: *mut c_void,
    pub _compat_destroy_cq: *mut c_void,
    pub _compat_create_srq: *mut c_void,
    pub _compat_modify_srq: *mut c_void,
    pub _compat_query_srq: *mut c_void,
    pub _compat_destroy_srq: *mut c_void,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: *mut c_void,
    pub _compat_query_qp: *mut c_void,
    pub _compat_modify_qp: *mut c_void,
    pub _compat_destroy_qp: *mut c_void,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: *mut c_void,
    pub _compat_destroy_ah: *mut c_void,
    pub _compat_attach_mcast: *mut c_void,
    pub _compat_detach_mcast: *mut c_void,
    pub _compat_async_event: *mut c_void,
}

/// `struct ibv_context` of verbs.h.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: i32,
    pub async_fd: i32,
    pub num_comp_vectors: i32,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// Function pointers of `struct verbs_context` in front of `sz` (query_port ... close_xrcd,
/// with `priv` among them): NULL except the ones the shim implements
/// ([`EXT_SLOT_QUERY_DEVICE_EX`]), so every other extended verb's inline wrapper in
/// verbs.h sees "not supported" and either falls back to the classic exported function or
/// fails with EOPNOTSUPP.
pub const VERBS_CONTEXT_EXT_SLOTS: usize = 38;

/// Index of `query_device_ex` in [`verbs_context::ext`] (`tests/layout.rs` checks it
/// against `offsetof(struct verbs_context, query_device_ex)`).
pub const EXT_SLOT_QUERY_DEVICE_EX: usize = 27;

/// `struct verbs_context`: the extended ops grow downwards in front of `sz` and `context`.
#[repr(C)]
pub struct verbs_context {
    pub ext: [*mut c_void; VERBS_CONTEXT_EXT_SLOTS],
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

/// `__VERBS_ABI_IS_EXTENDED`: `context.abi_compat` says "a verbs_context surrounds me".
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

// enum ibv_node_type / ibv_transport_type
pub const IBV_NODE_CA: i32 = 1;
pub const IBV_TRANSPORT_IB: i32 = 0;
// enum ibv_atomic_cap
pub const IBV_ATOMIC_HCA: u32 = 1;
// enum ibv_port_state
pub const IBV_PORT_ACTIVE: u32 = 4;
// enum ibv_link_layer
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
// enum ibv_port_cap_flags
pub const IBV_PORT_CM_SUP: u32 = 1 << 16;
pub const IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;
// enum ibv_device_cap_flags
pub const IBV_DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;
pub const IBV_DEVICE_SYS_IMAGE_GUID: u32 = 1 << 11;
pub const IBV_DEVICE_N_NOTIFY_CQ: u32 = 1 << 14;
pub const IBV_DEVICE_XRC: u32 = 1 << 20;
pub const IBV_DEVICE_MEM_WINDOW: u32 = 1 << 17;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2A: u32 = 1 << 23;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
// enum ibv_gid_type
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
// enum ibv_gid_type_sysfs of rdma-core's libibverbs/driver.h (not installed by
// libibverbs-dev, so tests/layout.rs cannot compare it; tests/c/kernel_semantics.c checks
// the value ibv_devinfo expects): what ibv_query_gid_type returns
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;
// enum ibv_access_flags
pub const IBV_ACCESS_ON_DEMAND: u32 = 1 << 6;
pub const IBV_ACCESS_HUGETLB: u32 = 1 << 7;
pub const IBV_ACCESS_RELAXED_ORDERING: u32 = 1 << 20;
// enum ibv_qp_type
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UC: u32 = 3;
pub const IBV_QPT_UD: u32 = 4;
pub const IBV_QPT_XRC_SEND: u32 = 9;
pub const IBV_QPT_XRC_RECV: u32 = 10;
// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const IBV_WR_SEND: u32 = 2;
pub const IBV_WR_SEND_WITH_IMM: u32 = 3;
pub const IBV_WR_RDMA_READ: u32 = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
pub const IBV_WR_LOCAL_INV: u32 = 7;
pub const IBV_WR_BIND_MW: u32 = 8;
pub const IBV_WR_SEND_WITH_INV: u32 = 9;
pub const IBV_WR_TSO: u32 = 10;
pub const IBV_WR_DRIVER1: u32 = 11;
pub const IBV_WR_ATOMIC_WRITE: u32 = 15;
// enum ibv_send_flags
pub const IBV_SEND_FENCE: u32 = 1;
pub const IBV_SEND_SIGNALED: u32 = 2;
pub const IBV_SEND_SOLICITED: u32 = 4;
pub const IBV_SEND_INLINE: u32 = 8;
// enum ibv_wc_opcode
pub const IBV_WC_SEND: u32 = 0;
pub const IBV_WC_RDMA_WRITE: u32 = 1;
pub const IBV_WC_RDMA_READ: u32 = 2;
pub const IBV_WC_COMP_SWAP: u32 = 3;
pub const IBV_WC_FETCH_ADD: u32 = 4;
pub const IBV_WC_RECV: u32 = 128;
pub const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;
pub const IBV_WC_BIND_MW: u32 = 5;
pub const IBV_WC_LOCAL_INV: u32 = 6;
// enum ibv_mw_type
pub const IBV_MW_TYPE_1: u32 = 1;
pub const IBV_MW_TYPE_2: u32 = 2;
// enum ibv_access_flags bits beyond the four remote/local ones
pub const IBV_ACCESS_MW_BIND: u32 = 1 << 4;
pub const IBV_ACCESS_ZERO_BASED: u32 = 1 << 5;
// enum ibv_wc_flags
pub const IBV_WC_GRH: u32 = 1;
pub const IBV_WC_WITH_IMM: u32 = 2;
pub const IBV_WC_WITH_INV: u32 = 8;
// enum ibv_event_type
pub const IBV_EVENT_CQ_ERR: u32 = 0;
pub const IBV_EVENT_QP_FATAL: u32 = 1;
pub const IBV_EVENT_COMM_EST: u32 = 4;
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
// enum ibv_qp_attr_mask: bits above DEST_QPN that softib does not implement
pub const IBV_QP_RATE_LIMIT: u32 = 1 << 25;
// enum ibv_srq_attr_mask
pub const IBV_SRQ_MAX_WR: u32 = 1;
pub const IBV_SRQ_LIMIT: u32 = 2;

/// The enum values above, by C name, for `tests/layout.rs` to compare with the header.
pub const CHECKED_CONSTANTS: &[(&str, i64)] = checked_constants![
    IBV_NODE_CA,
    IBV_TRANSPORT_IB,
    IBV_ATOMIC_HCA,
    IBV_PORT_ACTIVE,
    IBV_LINK_LAYER_ETHERNET,
    IBV_PORT_CM_SUP,
    IBV_PORT_IP_BASED_GIDS,
    IBV_DEVICE_RC_RNR_NAK_GEN,
    IBV_DEVICE_SYS_IMAGE_GUID,
    IBV_DEVICE_N_NOTIFY_CQ,
    IBV_DEVICE_XRC,
    IBV_DEVICE_MEM_WINDOW,
    IBV_DEVICE_MEM_WINDOW_TYPE_2A,
    IBV_DEVICE_MEM_WINDOW_TYPE_2B,
    IBV_GID_TYPE_ROCE_V2,
    IBV_ACCESS_ON_DEMAND,
    IBV_ACCESS_HUGETLB,
    IBV_ACCESS_RELAXED_ORDERING,
    IBV_QPT_RC,
    IBV_QPT_UC,
    IBV_QPT_UD,
    IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM,
    IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM,
    IBV_WR_RDMA_READ,
    IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_LOCAL_INV,
    IBV_WR_BIND_MW,
    IBV_WR_SEND_WITH_INV,
    IBV_WR_TSO,
    IBV_WR_DRIVER1,
    IBV_WR_ATOMIC_WRITE,
    IBV_SEND_FENCE,
    IBV_SEND_SIGNALED,
    IBV_SEND_SOLICITED,
    IBV_SEND_INLINE,
    IBV_WC_SEND,
    IBV_WC_RDMA_WRITE,
    IBV_WC_RDMA_READ,
    IBV_WC_COMP_SWAP,
    IBV_WC_FETCH_ADD,
    IBV_WC_RECV,
    IBV_WC_BIND_MW,
    IBV_QPT_XRC_SEND,
    IBV_QPT_XRC_RECV,
    IBV_WC_LOCAL_INV,
    IBV_MW_TYPE_1,
    IBV_MW_TYPE_2,
    IBV_ACCESS_MW_BIND,
    IBV_ACCESS_ZERO_BASED,
    IBV_WC_RECV_RDMA_WITH_IMM,
    IBV_WC_GRH,
    IBV_WC_WITH_IMM,
    IBV_WC_WITH_INV,
    IBV_EVENT_CQ_ERR,
    IBV_EVENT_QP_FATAL,
    IBV_EVENT_COMM_EST,
    IBV_EVENT_SQ_DRAINED,
    IBV_EVENT_SRQ_LIMIT_REACHED,
    IBV_EVENT_QP_LAST_WQE_REACHED,
    IBV_QP_RATE_LIMIT,
    IBV_SRQ_MAX_WR,
    IBV_SRQ_LIMIT,
];

/// `(C expression, Rust value)` pairs of sizes and offsets for `tests/layout.rs`.
pub fn checked_layouts() -> Vec<(&'static str, usize)> {
    use crate::layout_check::{c_offset as off, c_size as size};
    use std::mem::{offset_of, size_of};
    vec![
        size!(ibv_gid),
        size!(ibv_gid_entry),
        off!(ibv_gid_entry, gid_index),
        off!(ibv_gid_entry, ndev_ifindex),
        size!(ibv_device_attr),
        off!(ibv_device_attr, node_guid),
        off!(ibv_device_attr, max_qp),
        off!(ibv_device_attr, atomic_cap),
        off!(ibv_device_attr, max_srq_sge),
        off!(ibv_device_attr, max_pkeys),
        off!(ibv_device_attr, phys_port_cnt),
        size!(ibv_device_attr_ex),
        off!(ibv_device_attr_ex, comp_mask),
        off!(ibv_device_attr_ex, odp_caps),
        off!(ibv_device_attr_ex, completion_timestamp_mask),
        off!(ibv_device_attr_ex, device_cap_flags_ex),
        off!(ibv_device_attr_ex, rss_caps),
        off!(ibv_device_attr_ex, raw_packet_caps),
        off!(ibv_device_attr_ex, cq_mod_caps),
        off!(ibv_device_attr_ex, max_dm_size),
        off!(ibv_device_attr_ex, pci_atomic_caps),
        off!(ibv_device_attr_ex, xrc_odp_caps),
        off!(ibv_device_attr_ex, phys_port_cnt_ex),
        (
            "offsetof(struct verbs_context, query_device_ex)",
            EXT_SLOT_QUERY_DEVICE_EX * size_of::<*mut c_void>(),
        ),
        size!(ibv_port_attr),
        off!(ibv_port_attr, gid_tbl_len),
        off!(ibv_port_attr, pkey_tbl_len),
        off!(ibv_port_attr, link_layer),
        off!(ibv_port_attr, port_cap_flags2),
        size!(ibv_async_event),
        off!(ibv_async_event, event_type),
        size!(ibv_wc),
        off!(ibv_wc, status),
        off!(ibv_wc, vendor_err),
        off!(ibv_wc, byte_len),
        off!(ibv_wc, imm_data),
        off!(ibv_wc, qp_num),
        off!(ibv_wc, src_qp),
        off!(ibv_wc, wc_flags),
        off!(ibv_wc, pkey_index),
        off!(ibv_wc, slid),
        off!(ibv_wc, sl),
        off!(ibv_wc, dlid_path_bits),
        size!(ibv_pd),
        off!(ibv_pd, handle),
        size!(ibv_mw),
        off!(ibv_mw, rkey),
        off!(ibv_mw, handle),
        off!(ibv_mw, type_, "type"),
        size!(ibv_mw_bind_info),
        off!(ibv_mw_bind_info, addr),
        off!(ibv_mw_bind_info, length),
        off!(ibv_mw_bind_info, mw_access_flags),
        size!(ibv_mw_bind),
        off!(ibv_mw_bind, send_flags),
        off!(ibv_mw_bind, bind_info),
        size!(ibv_mr),
        off!(ibv_mr, addr),
        off!(ibv_mr, length),
        off!(ibv_mr, lkey),
        off!(ibv_mr, rkey),
        size!(ibv_global_route),
        off!(ibv_global_route, flow_label),
        off!(ibv_global_route, sgid_index),
        off!(ibv_global_route, traffic_class),
        size!(ibv_ah_attr),
        off!(ibv_ah_attr, dlid),
        off!(ibv_ah_attr, sl),
        off!(ibv_ah_attr, is_global),
        off!(ibv_ah_attr, port_num),
        size!(ibv_srq_attr),
        size!(ibv_srq_init_attr),
        off!(ibv_srq_init_attr, attr),
        size!(ibv_qp_cap),
        size!(ibv_qp_init_attr),
        off!(ibv_qp_init_attr, srq),
        off!(ibv_qp_init_attr, cap),
        off!(ibv_qp_init_attr, qp_type),
        off!(ibv_qp_init_attr, sq_sig_all),
        size!(ibv_qp_attr),
        ("_Alignof(union ibv_gid)", std::mem::align_of::<ibv_gid>()),
        (
            "_Alignof(struct ibv_qp_attr)",
            std::mem::align_of::<ibv_qp_attr>(),
        ),
        off!(ibv_qp_attr, qkey),
        off!(ibv_qp_attr, qp_access_flags),
        off!(ibv_qp_attr, cap),
        off!(ibv_qp_attr, ah_attr),
        off!(ibv_qp_attr, alt_ah_attr),
        off!(ibv_qp_attr, pkey_index),
        off!(ibv_qp_attr, max_rd_atomic),
        off!(ibv_qp_attr, port_num),
        off!(ibv_qp_attr, timeout),
        off!(ibv_qp_attr, rnr_retry),
        off!(ibv_qp_attr, alt_timeout),
        off!(ibv_qp_attr, rate_limit),
        size!(ibv_sge),
        off!(ibv_sge, lkey),
        size!(ibv_send_wr),
        off!(ibv_send_wr, next),
        off!(ibv_send_wr, sg_list),
        off!(ibv_send_wr, num_sge),
        off!(ibv_send_wr, opcode),
        off!(ibv_send_wr, send_flags),
        off!(ibv_send_wr, imm_data),
        off!(ibv_send_wr, wr),
        // The union members the accessors of `ibv_send_wr_wr` read.
        (
            "offsetof(struct ibv_send_wr, wr.rdma.rkey)",
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_wr, word1),
        ),
        (
            "offsetof(struct ibv_send_wr, wr.atomic.compare_add)",
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_wr, word1),
        ),
        (
            "offsetof(struct ibv_send_wr, wr.atomic.swap)",
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_wr, word2),
        ),
        (
            "offsetof(struct ibv_send_wr, wr.atomic.rkey)",
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_wr, word3),
        ),
        (
            "offsetof(struct ibv_send_wr, wr.ud.remote_qpn)",
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_wr, word1),
        ),
        (
            "offsetof(struct ibv_send_wr, wr.ud.remote_qkey)",
            offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_wr, word1) + 4,
        ),
        off!(ibv_send_wr, remote_srqn, "qp_type.xrc.remote_srqn"),
        off!(ibv_send_wr, bind_mw_or_tso, "bind_mw"),
        // The bind_mw members `ibv_send_wr::bind_mw_*` read (8-byte words).
        (
            "offsetof(struct ibv_send_wr, bind_mw.rkey)",
            offset_of!(ibv_send_wr, bind_mw_or_tso) + 8,
        ),
        (
            "offsetof(struct ibv_send_wr, bind_mw.bind_info.mr)",
            offset_of!(ibv_send_wr, bind_mw_or_tso) + 16,
        ),
        (
            "offsetof(struct ibv_send_wr, bind_mw.bind_info.addr)",
            offset_of!(ibv_send_wr, bind_mw_or_tso) + 24,
        ),
        (
            "offsetof(struct ibv_send_wr, bind_mw.bind_info.length)",
            offset_of!(ibv_send_wr, bind_mw_or_tso) + 32,
        ),
        (
            "offsetof(struct ibv_send_wr, bind_mw.bind_info.mw_access_flags)",
            offset_of!(ibv_send_wr, bind_mw_or_tso) + 40,
        ),
        size!(ibv_recv_wr),
        off!(ibv_recv_wr, num_sge),
        size!(ibv_srq),
        off!(ibv_srq, handle),
        off!(ibv_srq, mutex),
        off!(ibv_srq, cond),
        off!(ibv_srq, events_completed),
        size!(ibv_qp),
        off!(ibv_qp, srq),
        off!(ibv_qp, handle),
        off!(ibv_qp, qp_num),
        off!(ibv_qp, state),
        off!(ibv_qp, qp_type),
        off!(ibv_qp, mutex),
        off!(ibv_qp, events_completed),
        size!(ibv_comp_channel),
        off!(ibv_comp_channel, fd),
        off!(ibv_comp_channel, refcnt),
        size!(ibv_cq),
        off!(ibv_cq, cq_context),
        off!(ibv_cq, handle),
        off!(ibv_cq, cqe),
        off!(ibv_cq, mutex),
        off!(ibv_cq, comp_events_completed),
        off!(ibv_cq, async_events_completed),
        size!(ibv_ah),
        off!(ibv_ah, handle),
        size!(ibv_device),
        off!(ibv_device, node_type),
        off!(ibv_device, transport_type),
        off!(ibv_device, name),
        off!(ibv_device, dev_name),
        off!(ibv_device, dev_path),
        off!(ibv_device, ibdev_path),
        size!(ibv_context_ops),
        off!(ibv_context_ops, poll_cq),
        off!(ibv_context_ops, req_notify_cq),
        off!(ibv_context_ops, post_srq_recv),
        off!(ibv_context_ops, post_send),
        off!(ibv_context_ops, post_recv),
        off!(ibv_context_ops, _compat_async_event),
        size!(ibv_context),
        off!(ibv_context, ops),
        off!(ibv_context, cmd_fd),
        off!(ibv_context, async_fd),
        off!(ibv_context, num_comp_vectors),
        off!(ibv_context, mutex),
        off!(ibv_context, abi_compat),
        size!(verbs_context),
        off!(verbs_context, ext, "query_port"),
        off!(verbs_context, sz),
        off!(verbs_context, context),
    ]
}
