//! What the device advertises: every capability bit, limit and identity value that
//! `ibv_query_device` and `ibv_query_device_ex` report, in one place.
//!
//! Rule: advertise only what works now. A capability that is advertised but fails makes a
//! test suite (pyverbs) fail where it would otherwise skip, and makes applications take a
//! path that breaks. When a feature lands (memory windows, XRC, ODP, device memory,
//! extended CQs), its branch flips the entry here and nowhere else; the verbs that refuse
//! the feature (e.g. `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND`) read the same entries.
//!
//! The reference for values is Linux 6.1 rxe (drivers/infiniband/sw/rxe/rxe_param.h and
//! rxe_verbs.c `rxe_query_device`), the software RoCE device softib stands in for.

use crate::abi::*;
use crate::objects::Shared;

/// `vendor_id`: 0xFFFFFF, the value Linux rxe reports for a software device without an
/// IEEE OUI of its own (rxe_param.h `RXE_VENDOR_ID`, after IBA vol. 1 A3.3.1 "Vendor
/// information"). softib has no OUI either; a zero
/// vendor means "no device" to some tools (pyverbs' test_query_device asserts non-zero),
/// and rxe's value makes softib look like the software device it is.
pub const VENDOR_ID: u32 = 0x00FF_FFFF;
/// `vendor_part_id`: 0, as rxe (no part numbers for a software device).
pub const VENDOR_PART_ID: u32 = 0;
/// `hw_ver`: 0, as rxe (there is no hardware revision).
pub const HW_VER: u32 = 0;

/// `fw_ver`: the shim's crate version in rxe's `major.minor.sub_minor` form (rxe prints
/// its raw firmware version that way, rdma-core providers/rxe/rxe.c), so `ibv_devinfo`
/// shows which softib a program ran on.
pub fn fw_ver() -> [u8; 64] {
    let mut fw = [0u8; 64];
    crate::objects::copy_cstr(&mut fw, crate::view::facts::FW_VER);
    fw
}

/// `device_cap_flags` (the 32-bit `ibv_device_attr` field and the low half of
/// `device_cap_flags_ex`):
/// - RC_RNR_NAK_GEN: the RC responder sends RNR NAKs (IBA 9.7.5.2.8);
/// - SYS_IMAGE_GUID: `sys_image_guid` is meaningful;
/// - N_NOTIFY_CQ: `ibv_req_notify_cq` with `solicited_only` is honoured.
///
/// Not advertised until they work: MEM_MGT_EXTENSIONS (local invalidate / fast registration),
/// SRQ_RESIZE (`ibv_modify_srq` with `IBV_SRQ_MAX_WR`), PORT_ACTIVE_EVENT (no port events),
/// UD_IP_CSUM, RC_IP_CSUM, RAW_*.
pub const DEVICE_CAP_FLAGS: u32 = IBV_DEVICE_RC_RNR_NAK_GEN
    | IBV_DEVICE_SYS_IMAGE_GUID
    | IBV_DEVICE_N_NOTIFY_CQ
    | MW_CAP_FLAGS
    | if XRC { IBV_DEVICE_XRC } else { 0 };

/// The memory window bits of `device_cap_flags`: windows of type 1 and of types 2A and 2B
/// (the engine's `mw.rs`, the shim's `ffi/mw.rs`; QPNs are never reused, so 2A and 2B
/// behave alike), as rxe advertises them.
pub const MW_CAP_FLAGS: u32 =
    IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B;

/// `device_cap_flags_ex` bits above bit 31: ATOMIC WRITE (IBA 1.5; the engine's
/// `rc/responder.rs`), as rxe sets it on 64-bit hosts. Not raw scatter FCS or PCI write end
/// padding (no raw packet QPs, no PCI).
pub const DEVICE_CAP_FLAGS_EX_HIGH: u64 = DEVICE_ATOMIC_WRITE;

/// `IB_UVERBS_DEVICE_ATOMIC_WRITE` (rdma-core's kernel-headers/rdma/ib_user_verbs.h): the
/// device carries out `IBV_WR_ATOMIC_WRITE`. libibverbs 44 has no `IBV_DEVICE_*` name for
/// it; the kernel passes the bit through in `device_cap_flags_ex`.
pub const DEVICE_ATOMIC_WRITE: u64 = 1 << 40;

/// XRC domains, XRC SRQs and XRC initiator/target QPs (`IBV_DEVICE_XRC`): the engine's
/// `rc/xrc.rs` (branch `engine`), the shim's `ffi/xrc.rs`.
pub const XRC: bool = true;

/// On-demand paging (`odp_caps`): explicit and implicit ODP regions
/// (`process_memory.rs`: reached through `process_vm_readv`/`process_vm_writev`, a hole
/// is a remote access error), for every operation each service has: the engine moves all
/// bytes through the same `Memory` trait; XRC (`xrc_odp_caps`) as RC, its receives always
/// on an SRQ.
pub const ODP_CAPS: ibv_odp_caps = ibv_odp_caps {
    general_caps: IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT,
    rc_odp_caps: ODP_SEND | ODP_RECV | ODP_WRITE | ODP_READ | ODP_ATOMIC | ODP_SRQ_RECV,
    uc_odp_caps: ODP_SEND | ODP_RECV | ODP_WRITE | ODP_SRQ_RECV,
    ud_odp_caps: ODP_SEND | ODP_RECV | ODP_SRQ_RECV,
};
/// `xrc_odp_caps`.
pub const XRC_ODP_CAPS: u32 =
    ODP_SEND | ODP_RECV | ODP_WRITE | ODP_READ | ODP_ATOMIC | ODP_SRQ_RECV;

/// `IBV_ODP_SUPPORT` in `odp_caps.general_caps`.
const IBV_ODP_SUPPORT: u64 = 1;
/// `IBV_ODP_SUPPORT_IMPLICIT`: address NULL / length SIZE_MAX regions.
const IBV_ODP_SUPPORT_IMPLICIT: u64 = 2;
// enum ibv_odp_transport_cap_bits
const ODP_SEND: u32 = 1;
const ODP_RECV: u32 = 2;
const ODP_WRITE: u32 = 4;
const ODP_READ: u32 = 8;
const ODP_ATOMIC: u32 = 16;
const ODP_SRQ_RECV: u32 = 32;

/// True when `ibv_reg_mr` may take `IBV_ACCESS_ON_DEMAND`.
pub const fn odp_supported() -> bool {
    ODP_CAPS.general_caps & IBV_ODP_SUPPORT != 0
}

/// `completion_timestamp_mask`: extended CQs stamp completions with a 64-bit nanosecond
/// clock as they leave the engine (`cq_ex.rs`).
pub const COMPLETION_TIMESTAMP_MASK: u64 = crate::cq_ex::COMPLETION_TIMESTAMP_MASK;
/// `hca_core_clock` in kHz: the timestamp clock runs at 1 GHz (nanoseconds).
pub const HCA_CORE_CLOCK: u64 = crate::cq_ex::HCA_CORE_CLOCK_KHZ;

/// Device memory (`max_dm_size`): `ibv_alloc_dm` of up to this many bytes in all.
pub const MAX_DM_SIZE: u64 = crate::device_memory::MAX_DM_SIZE as u64;

/// `raw_packet_caps`: 0 (no raw packet QPs).
pub const RAW_PACKET_CAPS: u32 = 0;

/// Completion vectors (`ibv_context.num_comp_vectors`): one, as rxe. `ibv_create_cq`
/// refuses a `comp_vector` at or above it with EINVAL (kernel uverbs create_cq).
pub const NUM_COMP_VECTORS: i32 = 1;

/// Physical ports.
pub const PHYS_PORT_CNT: u8 = 1;

/// `ibv_query_device`'s attributes: limits from the engine configuration, identity and
/// capabilities from the constants above.
pub fn device_attr(s: &Shared) -> ibv_device_attr {
    let l = &s.limits;
    let clamp = |v: u32| v.min(i32::MAX as u32) as i32;
    let guid = u64::from_ne_bytes(s.config.node_guid());
    ibv_device_attr {
        fw_ver: fw_ver(),
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: !0xFFF,
        vendor_id: VENDOR_ID,
        vendor_part_id: VENDOR_PART_ID,
        hw_ver: HW_VER,
        max_qp: clamp(l.max_qp),
        max_qp_wr: clamp(l.max_qp_wr),
        device_cap_flags: DEVICE_CAP_FLAGS,
        max_sge: clamp(l.max_sge),
        max_sge_rd: clamp(l.max_sge),
        max_cq: clamp(l.max_cq),
        max_cqe: clamp(l.max_cqe),
        max_mr: clamp(l.max_mr),
        max_pd: clamp(l.max_pd),
        max_qp_rd_atom: i32::from(l.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: clamp(u32::from(l.max_qp_rd_atom).saturating_mul(l.max_qp)),
        max_qp_init_rd_atom: i32::from(l.max_qp_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: IBV_ATOMIC_HCA,
        max_ee: 0,
        max_rdd: 0,
        max_mw: clamp(l.max_mw),
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        // UD multicast (`softib_transport::mcast`), with rxe's limits.
        max_mcast_grp: clamp(softib_transport::mcast::MAX_MCAST_GRP),
        max_mcast_qp_attach: clamp(softib_transport::mcast::MAX_MCAST_QP_ATTACH),
        max_total_mcast_qp_attach: clamp(softib_transport::mcast::MAX_TOTAL_MCAST_QP_ATTACH),
        max_ah: clamp(l.max_ah),
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: clamp(l.max_srq),
        max_srq_wr: clamp(l.max_qp_wr),
        max_srq_sge: clamp(l.max_sge),
        max_pkeys: l.pkeys.len().min(u16::MAX as usize) as u16,
        local_ca_ack_delay: 15,
        phys_port_cnt: PHYS_PORT_CNT,
    }
}

/// `ibv_query_device_ex`'s attributes: `orig_attr` as [`device_attr`], the extended
/// capabilities from the constants above; every feature softib lacks reads 0, as rxe
/// reports it (TSO, RSS, WQs, packet pacing, tag matching, CQ moderation, PCI atomics).
pub fn device_attr_ex(s: &Shared) -> ibv_device_attr_ex {
    ibv_device_attr_ex {
        orig_attr: device_attr(s),
        comp_mask: 0,
        odp_caps: ODP_CAPS,
        completion_timestamp_mask: COMPLETION_TIMESTAMP_MASK,
        hca_core_clock: HCA_CORE_CLOCK,
        device_cap_flags_ex: u64::from(DEVICE_CAP_FLAGS) | DEVICE_CAP_FLAGS_EX_HIGH,
        tso_caps: ibv_tso_caps::default(),
        rss_caps: ibv_rss_caps::default(),
        max_wq_type_rq: 0,
        packet_pacing_caps: ibv_packet_pacing_caps::default(),
        raw_packet_caps: RAW_PACKET_CAPS,
        tm_caps: ibv_tm_caps::default(),
        cq_mod_caps: ibv_cq_moderation_caps::default(),
        max_dm_size: MAX_DM_SIZE,
        pci_atomic_caps: ibv_pci_atomic_caps::default(),
        xrc_odp_caps: XRC_ODP_CAPS,
        phys_port_cnt_ex: u32::from(PHYS_PORT_CNT),
    }
}

// What ext advertises, checked when the crate compiles: ODP includes implicit regions;
// UD has neither RDMA nor atomics (IBA 9.8.3), so no ODP for them; no XRC ODP without XRC;
// a 1 GHz timestamp clock over all 64 bits (a timestamp in ns converts back exactly).
const _: () = {
    assert!(odp_supported());
    assert!(ODP_CAPS.general_caps & IBV_ODP_SUPPORT_IMPLICIT != 0);
    assert!(ODP_CAPS.ud_odp_caps & (ODP_WRITE | ODP_READ | ODP_ATOMIC) == 0);
    assert!(XRC || XRC_ODP_CAPS == 0);
    assert!(MAX_DM_SIZE as usize == crate::device_memory::MAX_DM_SIZE);
    assert!(HCA_CORE_CLOCK == 1_000_000);
    assert!(COMPLETION_TIMESTAMP_MASK == u64::MAX);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fw_ver_is_the_crate_version() {
        let fw = fw_ver();
        let n = fw.iter().position(|&b| b == 0).unwrap();
        assert_eq!(&fw[..n], env!("CARGO_PKG_VERSION").as_bytes());
    }
}
