//! The C structures and constants of librdmacm's `<rdma/rdma_cma.h>` (rdma-core 44) and
//! `<infiniband/sa.h>`, checked against the installed headers by `tests/layout.rs`.
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_void};

use crate::abi::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_srq,
};
use crate::layout_check::checked_constants;

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

/// `struct rdma_addr`: source and destination as `sockaddr_storage`, then the GIDs.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src_storage: libc::sockaddr_storage,
    pub dst_storage: libc::sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

/// `struct ibv_sa_path_rec` of `<infiniband/sa.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: u32,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: u32,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: u32,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: libc::socklen_t,
    pub ai_dst_len: libc::socklen_t,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

// enum rdma_cm_event_type
pub const RDMA_CM_EVENT_ADDR_RESOLVED: u32 = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: u32 = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: u32 = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: u32 = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: u32 = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: u32 = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: u32 = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: u32 = 7;
pub const RDMA_CM_EVENT_REJECTED: u32 = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: u32 = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: u32 = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: u32 = 11;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: u32 = 12;
pub const RDMA_CM_EVENT_MULTICAST_ERROR: u32 = 13;
pub const RDMA_CM_EVENT_ADDR_CHANGE: u32 = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: u32 = 15;
// enum rdma_port_space
pub const RDMA_PS_IPOIB: u32 = 0x0002;
pub const RDMA_PS_TCP: u32 = 0x0106;
pub const RDMA_PS_UDP: u32 = 0x0111;
pub const RDMA_PS_IB: u32 = 0x013F;
// option levels and names
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;
// rdma_addrinfo flags
pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;
pub const RAI_NOROUTE: c_int = 4;
pub const RAI_FAMILY: c_int = 8;
/// rdma_cm's Q_Key for UD ids (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// The values above, by C name, for `tests/layout.rs`.
pub const CHECKED_CONSTANTS: &[(&str, i64)] = checked_constants![
    RDMA_CM_EVENT_ADDR_RESOLVED,
    RDMA_CM_EVENT_ADDR_ERROR,
    RDMA_CM_EVENT_ROUTE_RESOLVED,
    RDMA_CM_EVENT_ROUTE_ERROR,
    RDMA_CM_EVENT_CONNECT_REQUEST,
    RDMA_CM_EVENT_CONNECT_RESPONSE,
    RDMA_CM_EVENT_CONNECT_ERROR,
    RDMA_CM_EVENT_UNREACHABLE,
    RDMA_CM_EVENT_REJECTED,
    RDMA_CM_EVENT_ESTABLISHED,
    RDMA_CM_EVENT_DISCONNECTED,
    RDMA_CM_EVENT_DEVICE_REMOVAL,
    RDMA_CM_EVENT_MULTICAST_JOIN,
    RDMA_CM_EVENT_MULTICAST_ERROR,
    RDMA_CM_EVENT_ADDR_CHANGE,
    RDMA_CM_EVENT_TIMEWAIT_EXIT,
    RDMA_PS_IPOIB,
    RDMA_PS_TCP,
    RDMA_PS_UDP,
    RDMA_PS_IB,
    RDMA_OPTION_ID,
    RDMA_OPTION_IB,
    RDMA_OPTION_ID_TOS,
    RDMA_OPTION_ID_REUSEADDR,
    RDMA_OPTION_ID_AFONLY,
    RDMA_OPTION_ID_ACK_TIMEOUT,
    RDMA_OPTION_IB_PATH,
    RAI_PASSIVE,
    RAI_NUMERICHOST,
    RAI_NOROUTE,
    RAI_FAMILY,
    RDMA_UDP_QKEY,
];

/// (C expression, Rust value) for every size and offset above, for `tests/rdmacm_layout.rs`
/// to compare with `<rdma/rdma_cma.h>`.
pub fn checked_layouts() -> Vec<(&'static str, usize)> {
    use crate::layout_check::{c_offset as off, c_size as size};
    vec![
        size!(rdma_event_channel),
        size!(rdma_ib_addr),
        off!(rdma_ib_addr, dgid),
        off!(rdma_ib_addr, pkey),
        size!(rdma_addr),
        off!(rdma_addr, dst_storage),
        off!(rdma_addr, ibaddr, "addr.ibaddr"),
        size!(ibv_sa_path_rec),
        off!(ibv_sa_path_rec, sgid),
        off!(ibv_sa_path_rec, dlid),
        off!(ibv_sa_path_rec, raw_traffic),
        off!(ibv_sa_path_rec, flow_label),
        off!(ibv_sa_path_rec, hop_limit),
        off!(ibv_sa_path_rec, reversible),
        off!(ibv_sa_path_rec, numb_path),
        off!(ibv_sa_path_rec, pkey),
        off!(ibv_sa_path_rec, sl),
        off!(ibv_sa_path_rec, mtu),
        off!(ibv_sa_path_rec, packet_life_time),
        off!(ibv_sa_path_rec, preference),
        size!(rdma_route),
        off!(rdma_route, path_rec),
        off!(rdma_route, num_paths),
        size!(rdma_cm_id),
        off!(rdma_cm_id, channel),
        off!(rdma_cm_id, context),
        off!(rdma_cm_id, qp),
        off!(rdma_cm_id, route),
        off!(rdma_cm_id, ps),
        off!(rdma_cm_id, port_num),
        off!(rdma_cm_id, event),
        off!(rdma_cm_id, send_cq_channel),
        off!(rdma_cm_id, send_cq),
        off!(rdma_cm_id, recv_cq_channel),
        off!(rdma_cm_id, recv_cq),
        off!(rdma_cm_id, srq),
        off!(rdma_cm_id, pd),
        off!(rdma_cm_id, qp_type),
        size!(rdma_conn_param),
        off!(rdma_conn_param, private_data_len),
        off!(rdma_conn_param, responder_resources),
        off!(rdma_conn_param, initiator_depth),
        off!(rdma_conn_param, flow_control),
        off!(rdma_conn_param, retry_count),
        off!(rdma_conn_param, rnr_retry_count),
        off!(rdma_conn_param, srq),
        off!(rdma_conn_param, qp_num),
        size!(rdma_ud_param),
        off!(rdma_ud_param, private_data_len),
        off!(rdma_ud_param, ah_attr),
        off!(rdma_ud_param, qp_num),
        off!(rdma_ud_param, qkey),
        size!(rdma_cm_event),
        off!(rdma_cm_event, listen_id),
        off!(rdma_cm_event, event),
        off!(rdma_cm_event, status),
        off!(rdma_cm_event, param),
        size!(rdma_addrinfo),
        off!(rdma_addrinfo, ai_family),
        off!(rdma_addrinfo, ai_qp_type),
        off!(rdma_addrinfo, ai_port_space),
        off!(rdma_addrinfo, ai_src_len),
        off!(rdma_addrinfo, ai_dst_len),
        off!(rdma_addrinfo, ai_src_addr),
        off!(rdma_addrinfo, ai_dst_addr),
        off!(rdma_addrinfo, ai_src_canonname),
        off!(rdma_addrinfo, ai_dst_canonname),
        off!(rdma_addrinfo, ai_route_len),
        off!(rdma_addrinfo, ai_route),
        off!(rdma_addrinfo, ai_connect_len),
        off!(rdma_addrinfo, ai_connect),
        off!(rdma_addrinfo, ai_next),
    ]
}
