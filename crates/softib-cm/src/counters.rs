//! What the CM counted: every MAD it did not act on is counted under the reason why, so a
//! flood or a broken peer shows up in numbers instead of state.

/// CM counters (monotonic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// CM MADs handed to [`crate::Cm::handle_mad`].
    pub rx_mads: u64,
    /// MADs queued for sending (first sends and resends).
    pub tx_mads: u64,
    /// MADs that did not parse (short, bad version, bad method, reserved fields).
    pub malformed_drops: u64,
    /// Messages for a connection we do not know or in a state that does not take them.
    pub stale_drops: u64,
    /// REQs (and SIDR_REQs) seen again while the first is being answered.
    pub duplicate_reqs: u64,
    /// REQs rejected because no listener had the service ID.
    pub rejected_no_listener: u64,
    /// REQs rejected because the half-open bound was reached (IBA reason 3).
    pub rejected_no_resources: u64,
    /// Messages resent after their answer did not come in time.
    pub retransmits: u64,
    /// Exchanges given up after the last retry (REQ, REP, DREQ, SIDR_REQ).
    pub timeouts: u64,
    /// Transmits dropped because the send queue was full.
    pub tx_queue_drops: u64,
    /// Events dropped because the event queue was full.
    pub event_queue_drops: u64,
}
