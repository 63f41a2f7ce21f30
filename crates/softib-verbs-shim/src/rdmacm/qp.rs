//! The QP transitions rdma_cm makes for its users (librdmacm `ucma_init_conn_qp`,
//! `ucma_modify_qp_rtr`/`_rts`/`_err`, the kernel's `rdma_init_qp_attr` and
//! `ib_cm_init_qp_attr`), through the shim's own `ibv_modify_qp`.
#![allow(unsafe_code)]

use std::net::IpAddr;

use crate::abi::*;

// enum ibv_qp_state and ibv_qp_attr_mask values (verbs.h).
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_ERR: u32 = 6;
pub const IBV_QP_STATE: u32 = 1;
pub const IBV_QP_ACCESS_FLAGS: u32 = 1 << 3;
pub const IBV_QP_PKEY_INDEX: u32 = 1 << 4;
pub const IBV_QP_PORT: u32 = 1 << 5;
pub const IBV_QP_QKEY: u32 = 1 << 6;
pub const IBV_QP_AV: u32 = 1 << 7;
pub const IBV_QP_PATH_MTU: u32 = 1 << 8;
pub const IBV_QP_TIMEOUT: u32 = 1 << 9;
pub const IBV_QP_RETRY_CNT: u32 = 1 << 10;
pub const IBV_QP_RNR_RETRY: u32 = 1 << 11;
pub const IBV_QP_RQ_PSN: u32 = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: u32 = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: u32 = 1 << 15;
pub const IBV_QP_SQ_PSN: u32 = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
const ACCESS_LOCAL_WRITE: u32 = 1;
const ACCESS_REMOTE_WRITE: u32 = 2;
const ACCESS_REMOTE_READ: u32 = 4;
const ACCESS_REMOTE_ATOMIC: u32 = 8;

/// The attributes and mask of INIT (rdma_init_qp_attr in the IDLE state): P_Key index 0,
/// port 1; RC/UC: remote READ/WRITE/atomic allowed (the kernel's cma_ib_init_qp_attr for a
/// connected id); UD: rdma_cm's Q_Key.
pub fn init_attr(qp_type: u32) -> (ibv_qp_attr, u32) {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: 1,
        ..Default::default()
    };
    let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if qp_type == IBV_QPT_UD {
        a.qkey = super::abi::RDMA_UDP_QKEY;
        mask |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags =
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    (a, mask)
}

/// The path to the peer as an address vector (RoCEv2: GRH to the peer's GID, SGID 0).
pub fn peer_ah(peer: IpAddr, flow_label: u32, tos: u8) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid {
                raw: softib_cm::rdma_cm::gid_of(peer),
            },
            flow_label,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: tos,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

/// What RTR takes from the connection (ib_cm_init_qp_attr for RTR).
pub struct RtrParams {
    /// The peer's address vector.
    pub ah: ibv_ah_attr,
    /// The peer's QPN.
    pub dest_qpn: u32,
    /// The peer's first PSN.
    pub rq_psn: u32,
    /// Path MTU (IBA code).
    pub mtu: u8,
    /// Incoming READ/atomic limit.
    pub max_dest_rd_atomic: u8,
}

/// RTR attributes (RC/UC; UC has no READ limit or RNR timer).
pub fn rtr_attr(qp_type: u32, p: &RtrParams) -> (ibv_qp_attr, u32) {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTR,
        ah_attr: p.ah,
        dest_qp_num: p.dest_qpn,
        rq_psn: p.rq_psn,
        path_mtu: u32::from(p.mtu),
        ..Default::default()
    };
    let mut mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if qp_type == IBV_QPT_RC {
        a.max_dest_rd_atomic = p.max_dest_rd_atomic;
        // The kernel's cm_init_qp_rtr_attr sets min_rnr_timer 0 (655 ms) for every
        // rdma_cm QP; consumers that post receives late pay for it there too.
        a.min_rnr_timer = 0;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    (a, mask)
}

/// RTS attributes (RC/UC; UC has no timeout, retries or READ limit).
pub fn rts_attr(
    qp_type: u32,
    sq_psn: u32,
    timeout: u8,
    retry: u8,
    rnr: u8,
    rd: u8,
) -> (ibv_qp_attr, u32) {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTS,
        sq_psn,
        ..Default::default()
    };
    let mut mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if qp_type == IBV_QPT_RC {
        a.timeout = timeout;
        a.retry_cnt = retry.min(7);
        a.rnr_retry = rnr.min(7);
        a.max_rd_atomic = rd;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    (a, mask)
}

/// `IBV_QP_DEST_QPN`.
pub const IBV_QP_DEST_QPN: u32 = 1 << 20;

/// Applies `attr`/`mask` to `qp`; the errno on failure.
///
/// # Safety
/// `qp` is NULL or a QP of this library.
pub unsafe fn modify(qp: *mut ibv_qp, (mut attr, mask): (ibv_qp_attr, u32)) -> Result<(), i32> {
    if qp.is_null() {
        return Ok(());
    }
    // SAFETY: a QP of this library (function contract) and attributes on our stack.
    match unsafe { crate::ffi::modify_qp_for_rdmacm(qp, &mut attr, mask as i32) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Moves the QP numbered `qpn` to the error state from the CM event thread (a failed or
/// disconnected connection). A QP the application already destroyed is refused by the
/// engine, which is fine: there is nothing left to stop.
pub fn to_error_by_number(rt: &super::objects::Runtime, qpn: Option<u32>) {
    if let Some(qpn) = qpn {
        let attr = softib_transport::QpAttr {
            qp_state: softib_transport::QpState::Err,
            ..Default::default()
        };
        let _ = rt
            .shared
            .net
            .modify_qp(qpn, &attr, softib_transport::QpAttrMask::STATE);
    }
}

/// Moves `qp` to the error state (rdma_disconnect, from the application's own thread).
///
/// # Safety
/// `qp` is NULL or a QP of this library.
pub unsafe fn to_error(qp: *mut ibv_qp) {
    let a = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..Default::default()
    };
    // SAFETY: function contract.
    let _ = unsafe { modify(qp, (a, IBV_QP_STATE)) };
}
