//! The RD state a `Qp` entry carries (IBA vol. 1 §9.7, §10.2.7): whether it is an RD QP or
//! an end-to-end context, an EEC's extra state, and the RD facts of a WQE queued on an EEC.
//! Plain data with no imports from the engine, so the QP and its send queue can hold it
//! without depending on the RD logic in `rd/`.

use crate::verbs::{CqHandle, PdHandle, RddHandle};

/// What an RD QP or EEC `Qp` entry is.
#[derive(Clone, Debug)]
pub(crate) enum RdRole {
    /// A connectionless RD QP of a domain.
    Qp { rdd: RddHandle },
    /// An end-to-end context of a domain.
    Eec(EecCtx),
}

/// The RD state of an EEC beyond RC's.
#[derive(Clone, Debug)]
pub(crate) struct EecCtx {
    /// The reliable datagram domain (IBA §10.2.7).
    pub rdd: RddHandle,
    /// The RD QP the responder delivers the current message to.
    pub serving: Option<Serving>,
    /// The responder NAKed a request with an error: requests are dropped until RESYNC.
    pub await_resync: bool,
    /// DestQP of the EEC's responses: the source QP (DETH) of the last request.
    pub reply_qpn: u32,
}

/// The RD QP a message is delivered to and the QP that sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Serving {
    /// Destination RD QP (BTH DestQP).
    pub qpn: u32,
    /// Source QP (DETH SrcQP).
    pub src_qp: u32,
}

/// The RD facts of a WQE queued on an EEC by an RD QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RdWqe {
    /// The RD QP that posted it (the DETH's SrcQP, the completion's qp_num).
    pub src_qp: u32,
    /// That QP's PD (local buffer checks) and send CQ.
    pub pd: PdHandle,
    pub send_cq: CqHandle,
    /// That QP signals every WR.
    pub sq_sig_all: bool,
    /// Destination QP and Q_Key.
    pub dest_qpn: u32,
    pub qkey: u32,
    /// A RESYNC the EEC sends by itself: no WR, no completion.
    pub resync: bool,
}
