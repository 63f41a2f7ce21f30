//! The per-QP congestion state each `Qp` holds: pacing, the reaction point's state (IBA
//! Annex A10 CCA or DCQCN), the CNP limiter and the CNPs waiting to leave. Plain data, apart
//! from `engine.rs`, which takes the `Qp` it lives in.

use std::collections::VecDeque;

use super::dcqcn::DcqcnState;
use super::iba::CcaState;
use super::np::CnpLimiter;
use super::pacer::Pacer;
use crate::shared::PathInfo;
use crate::time::Nanos;

/// A CNP waiting to be sent: where to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingCnp {
    pub(super) dest_qpn: u32,
    pub(super) path: PathInfo,
}

/// CNPs a QP holds before further ones are dropped (only reachable with
/// `min_time_between_cnps` = 0 and a burst of marked packets between two polls).
pub(super) const MAX_PENDING_CNPS: usize = 64;

/// Per-QP congestion state.
#[derive(Clone, Debug, Default)]
pub(crate) struct QpCc {
    pub(super) pacer: Pacer,
    /// IBA CCA state when `PortControl::Qp` (created by the first BECN).
    pub(super) cca: Option<CcaState>,
    /// DCQCN rate limiter (created by the first CNP, as ConnectX NICs allocate one).
    pub(super) dcqcn: Option<DcqcnState>,
    pub(super) limiter: CnpLimiter,
    /// CNPs waiting to leave, oldest first (at most `MAX_PENDING_CNPS`; the queue only
    /// grows to its high-water mark).
    pub(super) cnp: VecDeque<PendingCnp>,
    /// A FECN-marked RC request arrived: the next response carries BECN.
    pub(super) becn_pending: bool,
    /// When the current pacing gate closed.
    pub(super) gate_since: Nanos,
}

impl QpCc {
    /// Heap bytes: the queue of CNPs waiting to leave.
    pub(crate) fn heap_bytes(&self) -> usize {
        crate::footprint::slots::<PendingCnp>(self.cnp.capacity())
    }
}
