//! Reliable Datagram (IBA vol. 1 §9.7, §10.2.7): reliability without one QP per peer.
//!
//! An end-to-end context (EEC) connects two channel adapters and carries RD's reliability:
//! PSNs, ACK/NAK, the local ACK timer, retry_cnt, RNR, duplicates. softib keeps an EEC as
//! a `Qp` entry (its number comes from the QP number space, so timers, scheduling and
//! demultiplexing are the device's usual ones) whose requester and responder are RC's own
//! code (`rc/requester.rs`, `rc/responder.rs`, `rc/recovery.rs`): what differs for RD is
//! confined to the hooks in this module.
//!
//! - **Requester.** An RD QP is connectionless: `post_send` checks the WR's destination
//!   (`SendWr::rd`: EEC, remote QP, Q_Key) and queues the WQE on the EEC, tagged with the
//!   posting QP ([`RdWqe`](state::RdWqe)): its PD checks the local buffers, its send CQ gets the
//!   completion. Every request carries an RDETH (the remote EEC) and a DETH (Q_Key, source
//!   QP), IBA §9.3.1-9.3.2. An EEC has at most one message in progress (IBA §9.7.1: the
//!   requester starts a message only after the previous one completed), so messages of
//!   all the QPs sharing it are serialised.
//! - **Responder.** A request is demultiplexed by its RDETH to the EEC, whose RC responder
//!   checks PSN and duplicates; for the message it then serves the RD QP the BTH names
//!   ([`Serving`](state::Serving)): that QP's receive queue, PD, CQ and access rights are lent to the EEC for
//!   the message (as an XRC target borrows its SRQ, `rc/xrc.rs`). The QP must exist, be an RD
//!   QP of the EEC's domain and its Q_Key must match the DETH's; otherwise the request is
//!   NAKed "invalid RD request" (NAK code 4, IBA §9.7.5.2.x).
//! - **Errors and RESYNC.** A NAK other than a PSN-sequence or RNR NAK fails only the
//!   message it names (its WR completes with the matching status at its QP); the EEC stays
//!   in RTS for the others. Because the responder skipped the rest of that message, both
//!   ends resynchronise: the responder drops requests until a RESYNC arrives, and the
//!   requester sends a RESYNC (opcode 0x55, a PSN of its own) before its next message. A
//!   RESYNC sets the responder's expected PSN to its PSN + 1 (IBA §9.7.x RESYNC) and is
//!   acknowledged like any request. `Device::resync_eec` sends one on demand, e.g. after an
//!   EEC was reset with a new send PSN.

pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod state;

pub(crate) use state::{EecCtx, RdRole, RdWqe, Serving};

use crate::verbs::RddHandle;

/// How far behind the expected PSN a RESYNC counts as a duplicate of one already applied
/// (answered again, not applied again): a RESYNC still in the network when the next
/// message started must not rewind the responder.
pub(crate) const RESYNC_DUPLICATE_WINDOW: i32 = 1 << 16;

impl crate::qp::Qp {
    /// The EEC state, when this entry is an EEC.
    pub(crate) fn eec(&self) -> Option<&EecCtx> {
        match &self.rd {
            Some(RdRole::Eec(e)) => Some(e),
            _ => None,
        }
    }

    pub(crate) fn eec_mut(&mut self) -> Option<&mut EecCtx> {
        match &mut self.rd {
            Some(RdRole::Eec(e)) => Some(e),
            _ => None,
        }
    }

    /// True for an EEC entry.
    pub(crate) fn is_eec(&self) -> bool {
        self.eec().is_some()
    }

    /// The domain of an RD QP or EEC.
    pub(crate) fn rdd(&self) -> Option<RddHandle> {
        match &self.rd {
            Some(RdRole::Qp { rdd }) => Some(*rdd),
            Some(RdRole::Eec(e)) => Some(e.rdd),
            None => None,
        }
    }

    /// True when this entry runs RC's reliability (RC, XRC, and EECs).
    pub(crate) fn runs_rc(&self) -> bool {
        self.qp_type.is_reliable() || self.is_eec()
    }

    /// The QP a responder completion or memory-window check is for: the RD QP an EEC
    /// serves, else this QP.
    pub(crate) fn serving_qpn(&self) -> u32 {
        self.eec()
            .and_then(|e| e.serving)
            .map_or(self.qpn, |s| s.qpn)
    }

    /// The remote QP of a responder completion: the sender (DETH) for an EEC, else the
    /// connected peer.
    pub(crate) fn peer_qpn(&self) -> u32 {
        self.eec()
            .and_then(|e| e.serving)
            .map_or(self.attr.dest_qp_num, |s| s.src_qp)
    }

    /// Adds the RDETH (the remote EEC, IBA §9.3.1) to a packet of an EEC.
    pub(crate) fn rd_add_rdeth(&self, repr: &mut softib_wire::PacketRepr<'_>) {
        if self.is_eec() {
            repr.rdeth = Some(softib_wire::RdethRepr {
                ee_context: self.attr.dest_qp_num & crate::psn::PSN_MASK,
            });
        }
    }
}
