//! Argument checks that the kernel makes before a verb reaches its driver, and that the
//! engine does not make (or makes with another errno). Each function names the Linux 6.1
//! rule it follows, so that a program sees on softib the errno it sees on rxe. Plain
//! functions on C values: the classic verbs and the extended ones (`ibv_create_qp_ex`,
//! `ibv_create_cq_ex`) call the same checks.

use crate::abi::*;
use crate::caps;
use crate::view::facts;

/// Why a verb refuses its arguments: the errno it returns and the `SOFTIB_DEBUG` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// errno for the application.
    pub errno: i32,
    /// What was wrong, for `SOFTIB_DEBUG=1`.
    pub why: String,
}

fn einval(why: impl Into<String>) -> Refusal {
    Refusal {
        errno: libc::EINVAL,
        why: why.into(),
    }
}

/// `ibv_create_cq`: `cqe` in 1..=max_cqe (rxe_cq.c `rxe_cq_chk_attr`) and `comp_vector`
/// below `num_comp_vectors` (uverbs_cmd.c `create_cq`): EINVAL otherwise.
pub fn create_cq(cqe: i32, comp_vector: i32, max_cqe: u32) -> Result<(), Refusal> {
    if cqe <= 0 || cqe as u32 > max_cqe {
        return Err(einval(format!("cqe {cqe} is not in 1..={max_cqe}")));
    }
    // The kernel takes comp_vector as u32, so a negative one is out of range too.
    if !(0..caps::NUM_COMP_VECTORS).contains(&comp_vector) {
        return Err(einval(format!(
            "comp_vector {comp_vector} >= num_comp_vectors {}",
            caps::NUM_COMP_VECTORS
        )));
    }
    Ok(())
}

/// Access bits the kernel accepts for a memory region: LOCAL_WRITE .. HUGETLB (bits 0-7)
/// and the optional range (bits 20-29, RELAXED_ORDERING first), include/rdma/ib_verbs.h
/// `IB_ACCESS_SUPPORTED`.
const MR_ACCESS_SUPPORTED: u32 =
    ((IBV_ACCESS_HUGETLB << 1) - 1) | (((1 << 30) - 1) & !((1 << 20) - 1));

/// `ibv_reg_mr` access flags, as include/rdma/ib_verbs.h `ib_check_mr_access`: remote
/// write or atomic without local write, or an undefined bit, is EINVAL; ON_DEMAND on a
/// device without ODP is EOPNOTSUPP.
pub fn mr_access(access: u32) -> Result<(), Refusal> {
    const LOCAL_WRITE: u32 = 1;
    const REMOTE_WRITE: u32 = 2;
    const REMOTE_ATOMIC: u32 = 8;
    if access & (REMOTE_WRITE | REMOTE_ATOMIC) != 0 && access & LOCAL_WRITE == 0 {
        return Err(einval(format!(
            "access {access:#x}: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE"
        )));
    }
    if access & !MR_ACCESS_SUPPORTED != 0 {
        return Err(einval(format!(
            "access {access:#x} has undefined bits {:#x}",
            access & !MR_ACCESS_SUPPORTED
        )));
    }
    if access & IBV_ACCESS_ON_DEMAND != 0 && !caps::odp_supported() {
        return Err(Refusal {
            errno: libc::EOPNOTSUPP,
            why: "IBV_ACCESS_ON_DEMAND: the device has no on-demand paging (odp_caps 0)".into(),
        });
    }
    Ok(())
}

/// `ibv_reg_mr` range: a zero length is EINVAL (ib_umem_get refuses a region of no
/// page), so is a range that wraps, and an iova whose offset in its 4 KiB page differs
/// from the address's (uverbs_cmd.c `ib_uverbs_reg_mr`).
pub fn mr_range(addr: u64, length: usize, iova: u64) -> Result<(), Refusal> {
    if length == 0 {
        return Err(einval("length 0"));
    }
    if addr.checked_add(length as u64).is_none() {
        return Err(einval("addr + length wraps around"));
    }
    const PAGE_OFFSET: u64 = 0xFFF;
    if addr & PAGE_OFFSET != iova & PAGE_OFFSET {
        return Err(einval(format!(
            "iova {iova:#x} and addr {addr:#x} have different offsets in their page"
        )));
    }
    Ok(())
}

/// `IBV_QP_AV` mask bit.
const QP_AV: u32 = 1 << 7;

/// The GID table as the address vector checks see it.
#[derive(Debug, Clone, Copy)]
pub struct GidTable {
    /// `gid_tbl_len`.
    pub len: u32,
    /// Slots 0..in_use hold a GID, the others are empty.
    pub in_use: u32,
}

/// The GID table for the address vector checks.
pub fn gid_table() -> GidTable {
    GidTable {
        len: facts::GID_TBL_LEN,
        in_use: facts::GIDS_IN_USE,
    }
}

/// `ibv_modify_qp` with `IBV_QP_AV` on a RoCE port: the address vector needs a GRH
/// (drivers/infiniband/core/verbs.c `rdma_check_ah_attr`: a RoCE AH without
/// IB_AH_GRH is EINVAL) and a GID (core/cache.c `rdma_get_gid_attr`: EINVAL past the
/// table, ENODATA for an empty slot). Without this a QP moved to RTR with
/// `is_global = 0` would be accepted and then send nothing, since a RoCEv2 packet is
/// addressed by its destination GID only.
pub fn modify_qp_av(a: &ibv_qp_attr, mask: u32, gids: GidTable) -> Result<(), Refusal> {
    if mask & QP_AV == 0 {
        return Ok(());
    }
    av(&a.ah_attr, gids)
}

/// An address vector on a RoCE port (`ibv_create_ah`, `ibv_modify_qp`): port 1, GRH
/// required and `sgid_index` naming a GID, as [`modify_qp_av`] says.
pub fn av(ah: &ibv_ah_attr, gids: GidTable) -> Result<(), Refusal> {
    // uverbs_cmd.c modify_qp / create_ah: the address vector's port must exist.
    if ah.port_num != 1 {
        return Err(einval(format!(
            "ah_attr.port_num {} (the device has port 1 only)",
            ah.port_num
        )));
    }
    if ah.is_global == 0 {
        return Err(einval(
            "a RoCE address vector needs is_global = 1 and a destination GID",
        ));
    }
    let i = u32::from(ah.grh.sgid_index);
    if i >= gids.len {
        return Err(einval(format!(
            "sgid_index {i} is beyond the GID table ({} entries)",
            gids.len
        )));
    }
    if i >= gids.in_use {
        return Err(Refusal {
            errno: libc::ENODATA,
            why: format!("sgid_index {i} is an empty GID table slot (only 0 holds a GID)"),
        });
    }
    Ok(())
}

/// `ibv_create_srq`: `max_wr` in 1..=max_srq_wr and `max_sge` at most max_srq_sge, EINVAL
/// otherwise (rxe_srq.c `rxe_srq_chk_init`); a `max_sge` of 0 is raised to 1 (rxe's
/// minimum), so it returns the SGE count to use.
pub fn create_srq(attr: &ibv_srq_attr, max_srq_wr: u32, max_srq_sge: u32) -> Result<u32, Refusal> {
    if attr.max_wr == 0 || attr.max_wr > max_srq_wr {
        return Err(einval(format!(
            "max_wr {} is not in 1..={max_srq_wr}",
            attr.max_wr
        )));
    }
    if attr.max_sge > max_srq_sge {
        return Err(einval(format!(
            "max_sge {} > max_srq_sge {max_srq_sge}",
            attr.max_sge
        )));
    }
    Ok(attr.max_sge.max(1))
}

/// The `flow_label` a GRH carries: its low 20 bits. Kernel providers take the low 20 bits
/// of the 32-bit verbs field (IBA vol. 1 §8.3.1: FlowLabel is 20 bits), so a wider value
/// is not an error on Linux.
pub fn flow_label(v: u32) -> u32 {
    v & 0xF_FFFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_bounds_and_comp_vector() {
        assert!(create_cq(1, 0, 16).is_ok());
        assert!(create_cq(16, 0, 16).is_ok());
        assert_eq!(create_cq(0, 0, 16).unwrap_err().errno, libc::EINVAL);
        assert_eq!(create_cq(17, 0, 16).unwrap_err().errno, libc::EINVAL);
        assert_eq!(create_cq(4, 1, 16).unwrap_err().errno, libc::EINVAL);
        assert_eq!(create_cq(4, -1, 16).unwrap_err().errno, libc::EINVAL);
    }

    #[test]
    fn access_rules_follow_ib_check_mr_access() {
        assert!(mr_access(0).is_ok());
        assert!(mr_access(1 | 2 | 4 | 8).is_ok());
        assert!(mr_access(1 | IBV_ACCESS_RELAXED_ORDERING).is_ok());
        assert_eq!(mr_access(2).unwrap_err().errno, libc::EINVAL);
        assert_eq!(mr_access(8).unwrap_err().errno, libc::EINVAL);
        assert_eq!(mr_access(1 << 12).unwrap_err().errno, libc::EINVAL);
        assert_eq!(mr_access(1 << 31).unwrap_err().errno, libc::EINVAL);
        // The device has on-demand paging (caps.rs), so the bit is accepted.
        assert!(caps::odp_supported());
        assert!(mr_access(IBV_ACCESS_ON_DEMAND).is_ok());
    }

    #[test]
    fn mr_ranges() {
        assert!(mr_range(0x1000, 1, 0x1000).is_ok());
        assert!(mr_range(0x1234, 8, 0x9234).is_ok());
        assert_eq!(mr_range(0x1000, 0, 0x1000).unwrap_err().errno, libc::EINVAL);
        assert_eq!(mr_range(0x1234, 8, 0x9000).unwrap_err().errno, libc::EINVAL);
        assert_eq!(
            mr_range(u64::MAX, 2, u64::MAX).unwrap_err().errno,
            libc::EINVAL
        );
    }

    #[test]
    fn roce_av_needs_a_grh() {
        let t = GidTable { len: 4, in_use: 1 };
        let mut a = ibv_qp_attr::default();
        assert!(modify_qp_av(&a, 1, t).is_ok(), "no AV in the mask");
        a.ah_attr.is_global = 1;
        assert_eq!(
            modify_qp_av(&a, QP_AV, t).unwrap_err().errno,
            libc::EINVAL,
            "port 0"
        );
        a.ah_attr.port_num = 1;
        a.ah_attr.is_global = 0;
        assert_eq!(modify_qp_av(&a, QP_AV, t).unwrap_err().errno, libc::EINVAL);
        a.ah_attr.is_global = 1;
        assert!(modify_qp_av(&a, QP_AV, t).is_ok());
        a.ah_attr.grh.sgid_index = 1;
        assert_eq!(modify_qp_av(&a, QP_AV, t).unwrap_err().errno, libc::ENODATA);
        a.ah_attr.grh.sgid_index = 4;
        assert_eq!(modify_qp_av(&a, QP_AV, t).unwrap_err().errno, libc::EINVAL);
    }

    #[test]
    fn srq_bounds() {
        let a = |max_wr, max_sge| ibv_srq_attr {
            max_wr,
            max_sge,
            srq_limit: 0,
        };
        assert_eq!(create_srq(&a(1, 0), 16, 4), Ok(1));
        assert_eq!(create_srq(&a(16, 4), 16, 4), Ok(4));
        assert_eq!(create_srq(&a(0, 1), 16, 4).unwrap_err().errno, libc::EINVAL);
        assert_eq!(
            create_srq(&a(17, 1), 16, 4).unwrap_err().errno,
            libc::EINVAL
        );
        assert_eq!(create_srq(&a(1, 5), 16, 4).unwrap_err().errno, libc::EINVAL);
    }

    #[test]
    fn flow_label_keeps_20_bits() {
        assert_eq!(flow_label(0xFFFF_FFFF), 0xF_FFFF);
        assert_eq!(flow_label(0x12345), 0x12345);
    }
}
