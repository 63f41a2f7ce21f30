//! What the CM tells its consumer (the `poll_event` output). The variants map one to one on
//! the rdma_cm events a librdmacm layer reports (see docs/design/cm.md).

use softib_wire::cm::{
    CmRep, CmReq, CmSidrRep, CmSidrReq, RejectReason, DREQ_PRIVATE_DATA_LEN, REJ_ARI_LEN,
    REJ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN,
};

use crate::params::Gid;

/// A connection, named by our local communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

/// A listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenerId(pub u32);

/// A service ID resolution exchange, named by its request ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SidrId(pub u32);

/// Which wait ran out of retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// The active side got no REP (or MRA) to its REQ.
    Request,
    /// The passive side got no RTU to its REP.
    Reply,
}

/// One thing the consumer must know about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service we listen on (rdma_cm: CONNECT_REQUEST). Answer with
    /// [`crate::Cm::accept`], [`crate::Cm::reject`] or [`crate::Cm::send_mra`].
    ConnectRequest {
        /// The new passive connection.
        conn: ConnId,
        /// The listener whose service ID matched.
        listener: ListenerId,
        /// Where the REQ came from.
        peer: Gid,
        /// The REQ as received.
        req: Box<CmReq>,
    },
    /// The REP to our REQ. Move the QP to RTR and RTS with its values, then call
    /// [`crate::Cm::ready_to_use`] (rdma_cm then reports ESTABLISHED), or reject it.
    ConnectReply {
        /// The active connection.
        conn: ConnId,
        /// The REP as received.
        rep: Box<CmRep>,
    },
    /// The passive side got the RTU, or was told traffic arrived (rdma_cm: ESTABLISHED).
    Established {
        /// The connection.
        conn: ConnId,
        /// The RTU's private data (zero when established without an RTU).
        private_data: Box<[u8; RTU_PRIVATE_DATA_LEN]>,
    },
    /// The peer rejected (rdma_cm: REJECTED, status = the reason).
    Rejected {
        /// The connection (now gone).
        conn: ConnId,
        /// Why.
        reason: RejectReason,
        /// Additional rejection information.
        ari: Box<[u8; REJ_ARI_LEN]>,
        /// The peer's private data.
        private_data: Box<[u8; REJ_PRIVATE_DATA_LEN]>,
    },
    /// Retries ran out (rdma_cm: UNREACHABLE, status -ETIMEDOUT). The connection is gone.
    Unreachable {
        /// The connection.
        conn: ConnId,
        /// Which wait expired.
        phase: TimeoutPhase,
    },
    /// The connection is over (rdma_cm: DISCONNECTED): the peer's DREQ arrived (we answered
    /// with a DREP), or our DREQ was answered or ran out of retries. Move the QP to error.
    Disconnected {
        /// The connection (now in TIMEWAIT).
        conn: ConnId,
        /// The peer sent the DREQ.
        by_peer: bool,
        /// The DREQ's private data when the peer sent it.
        private_data: Box<[u8; DREQ_PRIVATE_DATA_LEN]>,
    },
    /// TIMEWAIT ended; the QP may be reused (rdma_cm: TIMEWAIT_EXIT).
    TimewaitExit {
        /// The connection (now forgotten).
        conn: ConnId,
    },
    /// A SIDR_REQ for a service we listen on. Answer with [`crate::Cm::sidr_reply`].
    SidrRequest {
        /// The request.
        id: SidrId,
        /// The listener whose service ID matched.
        listener: ListenerId,
        /// Where it came from.
        peer: Gid,
        /// The request as received.
        req: Box<CmSidrReq>,
    },
    /// The answer to our SIDR_REQ.
    SidrReply {
        /// The request.
        id: SidrId,
        /// The reply as received.
        rep: Box<CmSidrRep>,
    },
    /// Our SIDR_REQ ran out of retries.
    SidrTimeout {
        /// The request.
        id: SidrId,
    },
}
