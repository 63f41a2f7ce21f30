//! QP bring-up: RESET -> INIT -> RTR -> RTS in one call, each step's attribute mask taken
//! from the transition table (`qp/state.rs`, IBA vol. 1 §11.2.5.2 "QP state transition
//! properties", ibv_modify_qp(3)) instead of written out by hand at every caller.
//!
//! The rule: every attribute of [`BRING_UP_ATTRS`] is applied at the first transition on
//! the path that accepts it (requires it or allows it), and never again. For RC that gives
//! the masks ibv_modify_qp(3) lists (PKEY_INDEX, PORT, ACCESS_FLAGS at INIT; AV, PATH_MTU,
//! DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER at RTR; SQ_PSN, TIMEOUT, RETRY_CNT,
//! RNR_RETRY, MAX_QP_RD_ATOMIC at RTS); UD gets QKEY at INIT and only SQ_PSN at RTS; UC
//! none of the RDMA READ / atomic limits; an XRC half takes the optional ones RC requires.

use crate::device::Device;
use crate::error::VerbsError;
use crate::qp::state::transition_rule;
use crate::time::Nanos;
use crate::verbs::{QpAttr, QpAttrMask as M, QpState, QpType};

/// The attributes a bring-up sets, from the caller's [`QpAttr`]; the rest (alternate path,
/// path migration, SQD notification, CUR_STATE) stay as RESET left them.
pub const BRING_UP_ATTRS: M = M::PKEY_INDEX
    .union(M::PORT)
    .union(M::QKEY)
    .union(M::ACCESS_FLAGS)
    .union(M::AV)
    .union(M::PATH_MTU)
    .union(M::DEST_QPN)
    .union(M::RQ_PSN)
    .union(M::MAX_DEST_RD_ATOMIC)
    .union(M::MIN_RNR_TIMER)
    .union(M::SQ_PSN)
    .union(M::TIMEOUT)
    .union(M::RETRY_CNT)
    .union(M::RNR_RETRY)
    .union(M::MAX_QP_RD_ATOMIC);

const PATH: [(QpState, QpState); 3] = [
    (QpState::Reset, QpState::Init),
    (QpState::Init, QpState::Rtr),
    (QpState::Rtr, QpState::Rts),
];

/// The transitions from RESET to `to` (INIT, RTR or RTS) of a `qp_type` QP, each with the
/// mask (STATE included) that the module's rule gives. Any other `to` is
/// `VerbsError::InvalidAttribute` on `qp_state`.
pub fn bring_up_steps(qp_type: QpType, to: QpState) -> Result<Vec<(QpState, M)>, VerbsError> {
    let steps = match to {
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        other => {
            return Err(VerbsError::InvalidAttribute {
                attr: "qp_state",
                reason: format!("bring-up goes to INIT, RTR or RTS, not {other}"),
            })
        }
    };
    let mut applied = M::empty();
    let mut out = Vec::with_capacity(steps);
    for &(from, next) in &PATH[..steps] {
        let rule = transition_rule(qp_type, from, next)
            .expect("RESET->INIT->RTR->RTS exists for every QP type");
        let accepted = rule.required.union(rule.optional);
        let mask = (accepted & BRING_UP_ATTRS).difference(applied);
        applied |= mask;
        out.push((next, M::STATE | mask));
    }
    Ok(out)
}

impl Device {
    /// Moves QP `qpn` (of type `qp_type`, in RESET) to `to` (INIT, RTR or RTS) through the
    /// real `modify_qp`, with `attr`'s values and the masks of [`bring_up_steps`]
    /// (`attr.qp_state` is ignored). Stops at the first transition `modify_qp` refuses and
    /// returns its error; the QP stays in the state it reached.
    pub fn bring_up_qp(
        &mut self,
        now: Nanos,
        qpn: u32,
        qp_type: QpType,
        attr: &QpAttr,
        to: QpState,
    ) -> Result<(), VerbsError> {
        let mut step = *attr;
        for (state, mask) in bring_up_steps(qp_type, to)? {
            step.qp_state = state;
            self.modify_qp(now, qpn, &step, mask)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT_BASE: M = M::STATE.union(M::PKEY_INDEX).union(M::PORT);

    /// The masks each caller used to write by hand (ibv_modify_qp(3)'s required lists, XRC
    /// halves with RC's), which the table-driven rule must reproduce exactly.
    fn hand_written(qp_type: QpType) -> [M; 3] {
        let rc_rtr = M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER;
        let rc_rts =
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        match qp_type {
            QpType::Ud => [INIT_BASE | M::QKEY, M::STATE, M::STATE | M::SQ_PSN],
            QpType::Rd => [
                INIT_BASE | M::QKEY | M::ACCESS_FLAGS,
                M::STATE,
                M::STATE | M::SQ_PSN,
            ],
            QpType::Uc => [
                INIT_BASE | M::ACCESS_FLAGS,
                M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
                M::STATE | M::SQ_PSN,
            ],
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv => {
                [INIT_BASE | M::ACCESS_FLAGS, rc_rtr, rc_rts]
            }
        }
    }

    #[test]
    fn the_rule_gives_the_man_page_masks_for_every_type() {
        for t in [
            QpType::Rc,
            QpType::Uc,
            QpType::Ud,
            QpType::XrcSend,
            QpType::XrcRecv,
            QpType::Rd,
        ] {
            let steps = bring_up_steps(t, QpState::Rts).unwrap();
            let want = hand_written(t);
            assert_eq!(steps.len(), 3);
            for (i, (state, mask)) in steps.iter().enumerate() {
                assert_eq!(*state, [QpState::Init, QpState::Rtr, QpState::Rts][i]);
                assert_eq!(*mask, want[i], "{t:?} step {i}");
            }
            // A shorter path is the prefix.
            assert_eq!(
                bring_up_steps(t, QpState::Rtr).unwrap(),
                steps[..2].to_vec()
            );
            assert_eq!(
                bring_up_steps(t, QpState::Init).unwrap(),
                steps[..1].to_vec()
            );
        }
    }

    #[test]
    fn other_targets_are_refused() {
        for s in [QpState::Reset, QpState::Sqd, QpState::Sqe, QpState::Err] {
            assert!(matches!(
                bring_up_steps(QpType::Rc, s),
                Err(VerbsError::InvalidAttribute {
                    attr: "qp_state",
                    ..
                })
            ));
        }
    }
}
