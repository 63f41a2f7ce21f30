//! The connection states of IBA vol. 1 12.9 (figures 98-103: active and passive
//! establishment, disconnection), and which of them count as half-open.

/// Where a connection stands (IBA 12.9.5-12.9.8). IDLE is "not in the table".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP, REJ or MRA.
    ReqSent,
    /// Active: the peer MRAed our REQ; waiting longer for its REP.
    MraReqRcvd,
    /// Active: REP received; the consumer is readying its QP (then RTU).
    RepRcvd,
    /// Active: REP received and MRAed by our consumer.
    MraRepSent,
    /// Passive: REQ received; the consumer decides.
    ReqRcvd,
    /// Passive: REQ received and MRAed by our consumer.
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the peer MRAed our REP; waiting longer for its RTU.
    MraRepRcvd,
    /// Both: connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// TIMEWAIT: the QP is quiesced until stray packets have died out (IBA 12.9.8.5).
    TimeWait,
}

/// Which end started the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sent the REQ.
    Active,
    /// Received the REQ.
    Passive,
}

impl CmState {
    /// Passive states between REQ and RTU: the ones a REQ flood would fill, bounded by
    /// `CmConfig::max_half_open`.
    pub fn is_half_open(self, role: Role) -> bool {
        role == Role::Passive
            && matches!(
                self,
                CmState::ReqRcvd | CmState::MraReqSent | CmState::RepSent | CmState::MraRepRcvd
            )
    }
}
