//! Translations between the C values of verbs.h and the engine's types. No pointers here:
//! the `ffi` module reads the C structures and hands plain values to these functions.

use softib_transport::{
    AccessFlags, AhAttr, GlobalRoute, MigState, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType,
    VerbsError, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

use crate::abi::*;

/// The errno a failed engine verb becomes (what a kernel provider returns for the same
/// cause, so applications print familiar messages).
pub fn errno_of(e: &VerbsError) -> i32 {
    match e {
        VerbsError::LimitReached { .. } | VerbsError::QueueFull { .. } => libc::ENOMEM,
        VerbsError::Unsupported { .. } | VerbsError::OpcodeNotSupported { .. } => libc::EOPNOTSUPP,
        VerbsError::InUse { .. } => libc::EBUSY,
        _ => libc::EINVAL,
    }
}

/// `enum ibv_mtu` of an engine MTU.
pub fn mtu_to_c(m: Mtu) -> u32 {
    match m {
        Mtu::M256 => 1,
        Mtu::M512 => 2,
        Mtu::M1024 => 3,
        Mtu::M2048 => 4,
        Mtu::M4096 => 5,
    }
}

/// The engine MTU of an `enum ibv_mtu`.
pub fn mtu_from_c(v: u32) -> Option<Mtu> {
    Some(match v {
        1 => Mtu::M256,
        2 => Mtu::M512,
        3 => Mtu::M1024,
        4 => Mtu::M2048,
        5 => Mtu::M4096,
        _ => return None,
    })
}

/// `enum ibv_qp_state` of an engine state.
pub fn qp_state_to_c(s: QpState) -> u32 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

/// The engine state of an `enum ibv_qp_state`.
pub fn qp_state_from_c(v: u32) -> Option<QpState> {
    Some(match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

/// The engine service of an `enum ibv_qp_type`: RC, UC and UD; anything else (XRC, raw
/// packet, driver QPs) is not implemented.
pub fn qp_type_from_c(v: u32) -> Option<QpType> {
    match v {
        IBV_QPT_RC => Some(QpType::Rc),
        IBV_QPT_UC => Some(QpType::Uc),
        IBV_QPT_UD => Some(QpType::Ud),
        IBV_QPT_XRC_SEND => Some(QpType::XrcSend),
        IBV_QPT_XRC_RECV => Some(QpType::XrcRecv),
        _ => None,
    }
}

/// `enum ibv_qp_type` of an engine service.
pub fn qp_type_to_c(t: QpType) -> u32 {
    match t {
        QpType::Rc => IBV_QPT_RC,
        QpType::Uc => IBV_QPT_UC,
        QpType::Ud => IBV_QPT_UD,
        QpType::XrcSend => IBV_QPT_XRC_SEND,
        QpType::XrcRecv => IBV_QPT_XRC_RECV,
        // libibverbs has no RD QP type and the shim never creates one; IBV_QPT_DRIVER
        // (0xff) says "not a standard type" should one ever be shown.
        QpType::Rd => 0xff,
    }
}

/// The region access bits the engine knows: the four local/remote ones and MW_BIND; the
/// others (ZERO_BASED, ON_DEMAND, HUGETLB, RELAXED_ORDERING) change nothing for memory the
/// engine reads and writes by copying, so they are accepted and ignored.
pub fn access_from_c(v: u32) -> AccessFlags {
    AccessFlags(v & (0xF | IBV_ACCESS_MW_BIND))
}

/// A memory window's access bits (`bind_info.mw_access_flags`): the remote rights and
/// ZERO_BASED (LOCAL_WRITE is accepted and means nothing on a window, as in rxe).
pub fn mw_access_from_c(v: u32) -> AccessFlags {
    AccessFlags(v & (0xF | IBV_ACCESS_ZERO_BASED))
}

/// An address vector from C.
pub fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        grh: (a.is_global != 0).then_some(GlobalRoute {
            dgid: a.grh.dgid.raw,
            // Kernel providers put the low 20 bits on the wire and accept any value.
            flow_label: crate::validate::flow_label(a.grh.flow_label),
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
    }
}

/// An address vector for C (port 1).
pub fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    let mut c = ibv_ah_attr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        port_num: 1,
        ..Default::default()
    };
    if let Some(g) = a.grh {
        c.is_global = 1;
        c.grh = ibv_global_route {
            dgid: ibv_gid { raw: g.dgid },
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        };
    }
    c
}

/// Mask bits of `ibv_qp_attr_mask` the engine implements (STATE .. DEST_QPN share their
/// values with [`QpAttrMask`]).
const KNOWN_QP_MASK: u32 = (1 << 21) - 1;

/// `ibv_modify_qp`'s attribute and mask for the engine, or the errno to return: EINVAL for
/// an undefined enum value, EOPNOTSUPP for mask bits softib does not implement (rate limit
/// and the other extensions above bit 20).
pub fn qp_attr_from_c(a: &ibv_qp_attr, mask: u32) -> Result<(QpAttr, QpAttrMask), i32> {
    if mask & !KNOWN_QP_MASK != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let m = QpAttrMask(mask);
    let state = |v| qp_state_from_c(v).ok_or(libc::EINVAL);
    let mut attr = QpAttr::default();
    if m.contains(QpAttrMask::STATE) {
        attr.qp_state = state(a.qp_state)?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        attr.cur_qp_state = state(a.cur_qp_state)?;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        attr.path_mtu = mtu_from_c(a.path_mtu).ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::PATH_MIG_STATE) {
        attr.path_mig_state = match a.path_mig_state {
            0 => MigState::Migrated,
            1 => MigState::Rearm,
            2 => MigState::Armed,
            _ => return Err(libc::EINVAL),
        };
    }
    attr.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    attr.pkey_index = a.pkey_index;
    attr.port_num = a.port_num;
    attr.qkey = a.qkey;
    attr.dest_qp_num = a.dest_qp_num;
    attr.rq_psn = a.rq_psn;
    attr.sq_psn = a.sq_psn;
    attr.max_rd_atomic = a.max_rd_atomic;
    attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
    attr.min_rnr_timer = a.min_rnr_timer;
    attr.timeout = a.timeout;
    attr.retry_cnt = a.retry_cnt;
    attr.rnr_retry = a.rnr_retry;
    attr.qp_access_flags = access_from_c(a.qp_access_flags);
    attr.ah_attr = ah_attr_from_c(&a.ah_attr);
    attr.cap = QpCap {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    Ok((attr, m))
}

/// `ibv_query_qp`'s attribute structure.
pub fn qp_attr_to_c(a: &QpAttr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: qp_state_to_c(a.qp_state),
        cur_qp_state: qp_state_to_c(a.qp_state),
        path_mtu: mtu_to_c(a.path_mtu),
        path_mig_state: match a.path_mig_state {
            MigState::Migrated => 0,
            MigState::Rearm => 1,
            MigState::Armed => 2,
        },
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap: cap_to_c(&a.cap),
        ah_attr: ah_attr_to_c(&a.ah_attr),
        pkey_index: a.pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify as u8,
        sq_draining: a.sq_draining as u8,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        ..Default::default()
    }
}

/// `struct ibv_qp_cap` of engine capacities.
pub fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The engine opcode of an `enum ibv_wr_opcode`: Err(EOPNOTSUPP) for the opcodes softib
/// does not implement (TSO, DRIVER1), Err(EINVAL) for
/// values verbs.h does not define.
pub fn wr_opcode_from_c(v: u32) -> Result<WrOpcode, i32> {
    Ok(match v {
        IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite,
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm,
        IBV_WR_SEND => WrOpcode::Send,
        IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm,
        IBV_WR_RDMA_READ => WrOpcode::RdmaRead,
        IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpAndSwp,
        IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAndAdd,
        IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv,
        IBV_WR_LOCAL_INV => WrOpcode::LocalInv,
        IBV_WR_BIND_MW => WrOpcode::BindMw,
        IBV_WR_ATOMIC_WRITE => WrOpcode::AtomicWrite,
        IBV_WR_TSO | IBV_WR_DRIVER1 => return Err(libc::EOPNOTSUPP),
        _ => return Err(libc::EINVAL),
    })
}

/// `enum ibv_wc_status` of an engine status.
pub fn wc_status_to_c(s: WcStatus) -> u32 {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocLenErr => 1,
        WcStatus::LocQpOpErr => 2,
        WcStatus::LocProtErr => 4,
        WcStatus::WrFlushErr => 5,
        WcStatus::BadRespErr => 7,
        WcStatus::LocAccessErr => 8,
        WcStatus::RemInvReqErr => 9,
        WcStatus::RemAccessErr => 10,
        WcStatus::RemOpErr => 11,
        WcStatus::RetryExcErr => 12,
        WcStatus::RnrRetryExcErr => 13,
        WcStatus::MwBindErr => 6,
        WcStatus::GeneralErr => 21,
        WcStatus::LocRddViolErr => 14,
        WcStatus::RemInvRdReqErr => 15,
        WcStatus::InvEecnErr => 17,
        WcStatus::InvEecStateErr => 18,
    }
}

/// `ibv_wc_status_str`'s text for a C status value (libibverbs' wording).
pub fn wc_status_str(v: u32) -> &'static std::ffi::CStr {
    const S: [&std::ffi::CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    S.get(v as usize).copied().unwrap_or(c"unknown")
}

/// `struct ibv_wc` of an engine completion. Immediate data goes back to network byte order
/// (the engine keeps the value of the big-endian ImmDt field, IBA 9.3.4).
pub fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    let flags = w.wc_flags.bits() & (IBV_WC_GRH | IBV_WC_WITH_IMM | IBV_WC_WITH_INV);
    let imm = match (w.imm_data, w.invalidated_rkey) {
        (Some(i), _) => u32::from_ne_bytes(i.to_be_bytes()),
        (None, Some(k)) => k,
        (None, None) => 0,
    };
    ibv_wc {
        wr_id: w.wr_id,
        status: wc_status_to_c(w.status),
        opcode: match w.opcode {
            WcOpcode::Send => IBV_WC_SEND,
            WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
            WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
            WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
            WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
            WcOpcode::AtomicWrite => crate::abi_ex::IBV_WC_ATOMIC_WRITE,
            WcOpcode::Recv => IBV_WC_RECV,
            WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
            WcOpcode::BindMw => IBV_WC_BIND_MW,
            WcOpcode::LocalInv => IBV_WC_LOCAL_INV,
        },
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: 0,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: 0,
    }
}

/// The `wc.sl` of a UD receive completion on RoCE: the packet type as mlx5 reports it
/// (mlx5 CQE `roce_packet_type`), since SL means nothing on RoCEv2 (it has no LRH) and
/// UCX 1.13's `ud_verbs` reads the field that way (src/uct/ib/ud/base/ud_iface.h): bit 3
/// says a UDP header is present (RoCEv2), bits 2:0 give the L3 header, 2 for IPv4 and 1
/// for IPv6. Linux rxe leaves the field 0 in a user completion (rxe_resp.c do_complete).
pub fn roce_v2_packet_type(ipv4: bool) -> u8 {
    const UDP_PRESENT: u8 = 1 << 3;
    const L3_IPV6: u8 = 1;
    const L3_IPV4: u8 = 2;
    UDP_PRESENT | if ipv4 { L3_IPV4 } else { L3_IPV6 }
}

/// Immediate data of a send WR for the engine: the C field holds network byte order.
pub fn imm_from_c(raw: u32) -> u32 {
    u32::from_be_bytes(raw.to_ne_bytes())
}

/// The source GID of a received UD message from the 40-byte area in front of its data:
/// RoCEv2 over IPv4 puts 20 unused bytes and then the IPv4 header there (its source
/// address at bytes 32..36), over IPv6 the IPv6 header (source at 8..24), as Linux does.
pub fn source_gid_of_grh_area(area: &[u8; 40]) -> [u8; 16] {
    if area[20] >> 4 == 4 {
        let mut src = [0u8; 4];
        src.copy_from_slice(&area[32..36]);
        std::net::Ipv4Addr::from(src).to_ipv6_mapped().octets()
    } else {
        let mut g = [0u8; 16];
        g.copy_from_slice(&area[8..24]);
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_round_trips() {
        for m in [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096] {
            assert_eq!(mtu_from_c(mtu_to_c(m)), Some(m));
        }
        assert_eq!(mtu_from_c(0), None);
        for v in 0..7 {
            assert_eq!(qp_state_from_c(v).map(qp_state_to_c), Some(v));
        }
        for t in [
            QpType::Rc,
            QpType::Uc,
            QpType::Ud,
            QpType::XrcSend,
            QpType::XrcRecv,
        ] {
            assert_eq!(qp_type_from_c(qp_type_to_c(t)), Some(t));
        }
        assert_eq!(qp_type_from_c(8), None, "raw packet");
    }

    #[test]
    fn unsupported_opcodes_and_masks_get_eopnotsupp() {
        assert_eq!(wr_opcode_from_c(IBV_WR_BIND_MW), Ok(WrOpcode::BindMw));
        assert_eq!(wr_opcode_from_c(IBV_WR_LOCAL_INV), Ok(WrOpcode::LocalInv));
        assert_eq!(wr_opcode_from_c(IBV_WR_TSO), Err(libc::EOPNOTSUPP));
        assert_eq!(
            wr_opcode_from_c(IBV_WR_ATOMIC_WRITE),
            Ok(WrOpcode::AtomicWrite)
        );
        assert_eq!(wr_opcode_from_c(77), Err(libc::EINVAL));
        assert_eq!(wr_opcode_from_c(IBV_WR_RDMA_READ), Ok(WrOpcode::RdmaRead));
        let a = ibv_qp_attr::default();
        assert_eq!(
            qp_attr_from_c(&a, IBV_QP_RATE_LIMIT | 1).unwrap_err(),
            libc::EOPNOTSUPP
        );
        let bad_mtu = ibv_qp_attr {
            path_mtu: 9,
            ..Default::default()
        };
        assert_eq!(
            qp_attr_from_c(&bad_mtu, QpAttrMask::PATH_MTU.bits()).unwrap_err(),
            libc::EINVAL
        );
    }

    #[test]
    fn packet_type_in_sl_is_mlx5s() {
        assert_eq!(roce_v2_packet_type(true), 0xA);
        assert_eq!(roce_v2_packet_type(false), 0x9);
    }

    #[test]
    fn immediate_data_keeps_network_order() {
        // The C side stores the wire bytes 12 34 56 78.
        let c = u32::from_ne_bytes([0x12, 0x34, 0x56, 0x78]);
        assert_eq!(imm_from_c(c), 0x1234_5678);
        let w = WorkCompletion {
            wr_id: 1,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 4,
            imm_data: Some(0x1234_5678),
            invalidated_rkey: None,
            qp_num: 0x11,
            src_qp: 0x12,
            slid: 0,
            sl: 0,
            wc_flags: softib_transport::WcFlags::WITH_IMM | softib_transport::WcFlags::SOLICITED,
            vendor_err: 0,
        };
        let c_wc = wc_to_c(&w);
        assert_eq!(c_wc.imm_data.to_ne_bytes(), [0x12, 0x34, 0x56, 0x78]);
        // softib's SOLICITED extension bit is not a verbs.h flag.
        assert_eq!(c_wc.wc_flags, IBV_WC_WITH_IMM);
        assert_eq!(c_wc.opcode, IBV_WC_RECV);
    }

    #[test]
    fn source_gid_from_an_ipv4_grh_area() {
        let mut area = [0u8; 40];
        area[20] = 0x45;
        area[32..36].copy_from_slice(&[127, 0, 0, 2]);
        let g = source_gid_of_grh_area(&area);
        assert_eq!(&g[10..], &[0xff, 0xff, 127, 0, 0, 2]);
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[8..24].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(source_gid_of_grh_area(&v6)[15], 7);
    }
}
