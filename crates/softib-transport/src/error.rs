//! Errors returned by verbs calls. Each names what the caller got wrong, so a user can fix
//! the call without reading the engine.

use crate::verbs::{QpState, QpType, WrOpcode};

/// A verbs call was refused. Nothing changed in the engine when one of these is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// A handle or number that names nothing on this device.
    #[error("unknown {kind} {value:#x}: it was never created on this device or was destroyed")]
    UnknownHandle {
        /// "QP", "CQ", "SRQ", "PD", "AH", "lkey".
        kind: &'static str,
        /// The value given.
        value: u32,
    },
    /// A device limit (max_qp, max_mr, ...) is reached.
    #[error("device limit {limit} = {max} reached")]
    LimitReached {
        /// The limit's name in `DeviceConfig`.
        limit: &'static str,
        /// Its value.
        max: u32,
    },
    /// An attribute value outside what the device or the specification allows.
    #[error("invalid value for {attr}: {reason}")]
    InvalidAttribute {
        /// The attribute (`QpAttr` field name or creation parameter).
        attr: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// `modify_qp` lacks an attribute this transition requires (ibv_modify_qp(3), IBA 11.2.5.2).
    #[error("modify_qp {from}->{to} for {qp_type:?} requires attribute {attr}")]
    MissingAttribute {
        /// The mask bit's name (e.g. "PATH_MTU").
        attr: &'static str,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// QP type.
        qp_type: QpType,
    },
    /// `modify_qp` sets an attribute this transition does not accept.
    #[error("modify_qp {from}->{to} for {qp_type:?} does not accept attribute {attr}")]
    UnexpectedAttribute {
        /// The mask bit's name.
        attr: &'static str,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// QP type.
        qp_type: QpType,
    },
    /// `modify_qp` asks for a transition the state machine does not have (IBA 10.3.1).
    #[error("QP {qpn:#x} cannot go from {from} to {to}")]
    InvalidTransition {
        /// The QP.
        qpn: u32,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// CUR_STATE was given and differs from the QP's real state.
    #[error("QP {qpn:#x} is in state {actual}, not {claimed} as cur_qp_state says")]
    CurrentStateMismatch {
        /// The QP.
        qpn: u32,
        /// What the caller claimed.
        claimed: QpState,
        /// The real state.
        actual: QpState,
    },
    /// An attribute softib does not implement.
    #[error("{attr} is not supported by softib")]
    Unsupported {
        /// What.
        attr: &'static str,
    },
    /// A WR cannot be posted in the QP's current state.
    #[error("cannot post a {queue} WR (wr_id {wr_id}) to QP {qpn:#x} in state {state}")]
    WrongState {
        /// The QP.
        qpn: u32,
        /// Its state.
        state: QpState,
        /// "send" or "receive".
        queue: &'static str,
        /// The refused WR.
        wr_id: u64,
    },
    /// The queue is full.
    #[error("{queue} queue of {owner} is full ({depth} WRs outstanding); poll completions first (wr_id {wr_id})")]
    QueueFull {
        /// "send", "receive" or "shared receive".
        queue: &'static str,
        /// "QP 0x11" or "SRQ 0".
        owner: String,
        /// Its depth.
        depth: u32,
        /// The refused WR.
        wr_id: u64,
    },
    /// More SGEs than the queue was created for.
    #[error("wr_id {wr_id} has {given} SGEs, the queue allows {max}")]
    TooManySge {
        /// The refused WR.
        wr_id: u64,
        /// SGEs in the WR.
        given: usize,
        /// The queue's max_*_sge.
        max: u32,
    },
    /// The QP has no send queue to take the WR: an XRC target QP (IBA Annex A14). An
    /// operation that a QP's service does not carry (an atomic on UC) is accepted instead,
    /// as the kernel accepts it, and fails at the head of the send queue
    /// ([`crate::VendorErr::OpcodeForService`]).
    #[error("{opcode} is not supported on a {qp_type:?} QP (wr_id {wr_id})")]
    OpcodeNotSupported {
        /// The refused WR.
        wr_id: u64,
        /// The opcode.
        opcode: WrOpcode,
        /// The QP type.
        qp_type: QpType,
    },
    /// A malformed WR (missing immediate, wrong atomic buffer size, inline too long, ...).
    #[error("invalid WR {wr_id}: {reason}")]
    InvalidWr {
        /// The refused WR.
        wr_id: u64,
        /// What is wrong.
        reason: String,
    },
    /// The resource is still in use (e.g. a CQ with QPs attached).
    #[error("{kind} {value:#x} is in use: {reason}")]
    InUse {
        /// What.
        kind: &'static str,
        /// Its handle value.
        value: u32,
        /// By whom.
        reason: &'static str,
    },
}
