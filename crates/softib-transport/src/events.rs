//! Asynchronous events (`ibv_get_async_event` and completion-channel notifications).

use crate::verbs::{CqHandle, SrqHandle};

/// Something the application must hear about outside a work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// A completion had to be discarded because the CQ was full (`IBV_EVENT_CQ_ERR`).
    /// The CQ stays usable; its `overflows` count says how many completions were lost.
    CqOverflow(CqHandle),
    /// A CQ armed with `req_notify_cq` received a matching completion.
    CqNotify(CqHandle),
    /// The SRQ's posted WR count dropped below its limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached(SrqHandle),
    /// The QP entered ERR because of a transport error (`IBV_EVENT_QP_FATAL`).
    QpFatal(u32),
    /// The first packet arrived while the QP was in RTR (`IBV_EVENT_COMM_EST`).
    CommEstablished(u32),
    /// SQD finished draining (`IBV_EVENT_SQ_DRAINED`).
    SqDrained(u32),
    /// A QP attached to an SRQ entered ERR and will consume no more WRs
    /// (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    LastWqeReached(u32),
}
