//! The per-QP state of RC recovery (which gap signals start a resend, how fast a resend
//! pass grows): the fields `rc/recovery.rs` reads and writes, kept apart so the `Qp` that
//! holds them does not depend on the recovery logic that uses the `Qp`.

use crate::time::Nanos;

/// Recovery state of one RC requester.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Recovery {
    /// `ResendPolicy::Paced` (false: `WholeWindow`, none of this module's care applies).
    pub paced: bool,
    /// PSN the last go-back resent from.
    pub from: u32,
    /// When it went back (None: never).
    pub at: Option<Nanos>,
    /// One past the highest PSN sent when it went back: the resend pass ends there.
    pub end: u32,
    /// Packets beyond the oldest unacknowledged PSN the resend pass may have out.
    pub cwnd: u32,
    /// The oldest unacknowledged PSN when `cwnd` last grew.
    pub grown_at: u32,
    /// Smoothed round-trip time (0: no sample yet).
    pub srtt: Nanos,
    /// Its mean deviation.
    pub rttvar: Nanos,
    /// A new packet whose acknowledgement measures the RTT: (PSN, time sent).
    pub probe: Option<(u32, Nanos)>,
    /// A gap signal set aside: the PSN the responder must confirm by the `GapCheck` timer.
    pub deferred: Option<u32>,
    /// The oldest unacknowledged PSN when the `GapCheck` timer was last armed for a stall.
    pub check_una: u32,
}
