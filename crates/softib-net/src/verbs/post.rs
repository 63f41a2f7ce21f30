//! What QPs and SRQs share for posting receives: the receive work request naming
//! registered memory ([`RecvRequest`]) and the error a refused batch returns
//! ([`PostError`]), apart from `qp.rs` and `srq_ah.rs` so neither imports the other for
//! them.

use std::marker::PhantomData;

use softib_transport::{RecvWr, VerbsError};

use super::LocalSlice;

/// Posting stopped at a work request the device refused (`bad_wr`): the ones before it were
/// posted, none after it.
#[derive(Debug, thiserror::Error)]
#[error("work request {index} of the batch was refused ({posted} posted): {source}")]
pub struct PostError {
    /// How many WRs of the batch were posted.
    pub posted: usize,
    /// Index of the refused WR in the batch.
    pub index: usize,
    /// Why.
    #[source]
    pub source: VerbsError,
}

/// A receive work request naming registered memory; it cannot outlive the regions.
#[derive(Clone, Debug)]
pub struct RecvRequest<'a> {
    pub(crate) wr: RecvWr,
    _regions: PhantomData<&'a ()>,
}

impl<'a> RecvRequest<'a> {
    /// Receives into `local`.
    pub fn new(wr_id: u64, local: LocalSlice<'a>) -> Self {
        Self::scatter(wr_id, &[local])
    }

    /// Receives scattered over `local`, in order (none: zero-length messages only, or the
    /// immediate of an RDMA WRITE WITH IMM).
    pub fn scatter(wr_id: u64, local: &[LocalSlice<'a>]) -> Self {
        RecvRequest {
            wr: RecvWr {
                wr_id,
                sg_list: local.iter().map(LocalSlice::sge).collect(),
            },
            _regions: PhantomData,
        }
    }

    /// The engine's work request.
    pub fn wr(&self) -> &RecvWr {
        &self.wr
    }
}
