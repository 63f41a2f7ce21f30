//! The QP state machine's transition table and the attributes each transition requires
//! and accepts (IBA 11.2.5.2 table "QP state transition properties"; ibv_modify_qp(3)).

use crate::verbs::{QpAttrMask as M, QpState as S, QpType as T};

/// Required and optional attribute masks of one transition (STATE excluded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TransitionRule {
    pub required: M,
    pub optional: M,
}

const fn rule(required: M, optional: M) -> TransitionRule {
    TransitionRule { required, optional }
}

const fn m(bits: &[M]) -> M {
    let mut out = 0;
    let mut i = 0;
    while i < bits.len() {
        out |= bits[i].0;
        i += 1;
    }
    M(out)
}

/// The rule for `from -> to` on a `qp_type` QP, or `None` if the transition does not exist.
/// Transitions to RESET and ERR are allowed from every state with no other attribute.
pub(crate) fn transition_rule(qp_type: T, from: S, to: S) -> Option<TransitionRule> {
    use M as A;
    let none = M::empty();
    // XRC halves follow RC's table except where Linux's qp_state_table differs: an
    // initiator has no responder (INIT->RTR does not need its responder attributes), a
    // target no requester (RTR->RTS needs only SQ_PSN and TIMEOUT).
    match (qp_type, from, to) {
        (T::XrcSend, S::Init, S::Rtr) => {
            return Some(rule(
                m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]),
                m(&[
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PKEY_INDEX,
                    A::MAX_DEST_RD_ATOMIC,
                    A::MIN_RNR_TIMER,
                ]),
            ))
        }
        (T::XrcRecv, S::Rtr, S::Rts) => {
            return Some(rule(
                m(&[A::SQ_PSN, A::TIMEOUT]),
                m(&[
                    A::CUR_STATE,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                    A::RETRY_CNT,
                    A::RNR_RETRY,
                    A::MAX_QP_RD_ATOMIC,
                ]),
            ))
        }
        _ => {}
    }
    Some(match (from, to) {
        (_, S::Reset) | (_, S::Err) => rule(none, none),
        (S::Reset, S::Init) => match qp_type {
            T::Ud => rule(m(&[A::PKEY_INDEX, A::PORT, A::QKEY]), none),
            // An RD QP: UD's attributes and the remote access enables (IBA 10.2.7).
            T::Rd => rule(m(&[A::PKEY_INDEX, A::PORT, A::QKEY, A::ACCESS_FLAGS]), none),
            T::Rc | T::Uc | T::XrcSend | T::XrcRecv => {
                rule(m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]), none)
            }
        },
        (S::Init, S::Init) => match qp_type {
            T::Ud => rule(none, m(&[A::PKEY_INDEX, A::PORT, A::QKEY])),
            // An RD QP: UD's attributes and the remote access enables (IBA 10.2.7).
            T::Rd => rule(none, m(&[A::PKEY_INDEX, A::PORT, A::QKEY, A::ACCESS_FLAGS])),
            T::Rc | T::Uc | T::XrcSend | T::XrcRecv => {
                rule(none, m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]))
            }
        },
        (S::Init, S::Rtr) => match qp_type {
            T::Ud => rule(none, m(&[A::PKEY_INDEX, A::QKEY])),
            // An RD QP: UD's attributes and the remote access enables (IBA 10.2.7).
            T::Rd => rule(none, m(&[A::PKEY_INDEX, A::QKEY, A::ACCESS_FLAGS])),
            T::Uc => rule(
                m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]),
                m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
            ),
            T::Rc | T::XrcSend | T::XrcRecv => rule(
                m(&[
                    A::AV,
                    A::PATH_MTU,
                    A::DEST_QPN,
                    A::RQ_PSN,
                    A::MAX_DEST_RD_ATOMIC,
                    A::MIN_RNR_TIMER,
                ]),
                m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
            ),
        },
        (S::Rtr, S::Rts) => match qp_type {
            T::Ud => rule(m(&[A::SQ_PSN]), m(&[A::CUR_STATE, A::QKEY])),
            // An RD QP: UD's attributes and the remote access enables (IBA 10.2.7).
            T::Rd => rule(
                m(&[A::SQ_PSN]),
                m(&[A::CUR_STATE, A::QKEY, A::ACCESS_FLAGS]),
            ),
            T::Uc => rule(
                m(&[A::SQ_PSN]),
                m(&[
                    A::CUR_STATE,
                    A::ACCESS_FLAGS,
                    A::ALT_PATH,
                    A::PATH_MIG_STATE,
                ]),
            ),
            T::Rc | T::XrcSend | T::XrcRecv => rule(
                m(&[
                    A::SQ_PSN,
                    A::TIMEOUT,
                    A::RETRY_CNT,
                    A::RNR_RETRY,
                    A::MAX_QP_RD_ATOMIC,
                ]),
                m(&[
                    A::CUR_STATE,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                ]),
            ),
        },
        (S::Rts, S::Rts) | (S::Sqd, S::Rts) | (S::Sqe, S::Rts) => match qp_type {
            T::Ud => rule(none, m(&[A::CUR_STATE, A::QKEY])),
            // An RD QP: UD's attributes and the remote access enables (IBA 10.2.7).
            T::Rd => rule(none, m(&[A::CUR_STATE, A::QKEY, A::ACCESS_FLAGS])),
            T::Uc => rule(
                none,
                m(&[
                    A::CUR_STATE,
                    A::ACCESS_FLAGS,
                    A::ALT_PATH,
                    A::PATH_MIG_STATE,
                ]),
            ),
            T::Rc | T::XrcSend | T::XrcRecv if from == S::Sqe => return None,
            T::Rc | T::XrcSend | T::XrcRecv => rule(
                none,
                m(&[
                    A::CUR_STATE,
                    A::ACCESS_FLAGS,
                    A::ALT_PATH,
                    A::PATH_MIG_STATE,
                    A::MIN_RNR_TIMER,
                ]),
            ),
        },
        (S::Rts, S::Sqd) => rule(none, m(&[A::EN_SQD_ASYNC_NOTIFY])),
        (S::Sqd, S::Sqd) => match qp_type {
            T::Ud => rule(none, m(&[A::PKEY_INDEX, A::QKEY])),
            // An RD QP: UD's attributes and the remote access enables (IBA 10.2.7).
            T::Rd => rule(none, m(&[A::PKEY_INDEX, A::QKEY, A::ACCESS_FLAGS])),
            T::Uc => rule(
                none,
                m(&[
                    A::AV,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PKEY_INDEX,
                    A::PATH_MIG_STATE,
                ]),
            ),
            T::Rc | T::XrcSend | T::XrcRecv => rule(
                none,
                m(&[
                    A::CUR_STATE,
                    A::AV,
                    A::MAX_QP_RD_ATOMIC,
                    A::MAX_DEST_RD_ATOMIC,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PKEY_INDEX,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                    A::TIMEOUT,
                    A::RETRY_CNT,
                    A::RNR_RETRY,
                ]),
            ),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_init_to_rtr_requires_the_connection_attributes() {
        let r = transition_rule(T::Rc, S::Init, S::Rtr).unwrap();
        for a in [
            M::AV,
            M::PATH_MTU,
            M::DEST_QPN,
            M::RQ_PSN,
            M::MAX_DEST_RD_ATOMIC,
            M::MIN_RNR_TIMER,
        ] {
            assert!(r.required.contains(a));
        }
        assert!(!r.required.contains(M::SQ_PSN));
    }

    #[test]
    fn transitions_outside_the_graph_do_not_exist() {
        assert!(transition_rule(T::Rc, S::Reset, S::Rts).is_none());
        assert!(transition_rule(T::Rc, S::Init, S::Rts).is_none());
        assert!(transition_rule(T::Rc, S::Sqe, S::Rts).is_none());
        assert!(transition_rule(T::Ud, S::Sqe, S::Rts).is_some());
        assert!(transition_rule(T::Uc, S::Err, S::Reset).is_some());
        assert!(transition_rule(T::Uc, S::Err, S::Init).is_none());
    }
}
