//! XRC (IBA vol. 1 Annex A14, `IBV_QPT_XRC_SEND` / `IBV_QPT_XRC_RECV`): RC's reliability
//! with the receive side moved out of the QP. An initiator QP is an RC requester whose
//! requests carry an XRCETH naming the remote XRC SRQ (`requester.rs`); a target QP is an
//! RC responder with no receive queue, PD or CQ of its own: each request is delivered into
//! the XRC SRQ its XRCETH names, which must belong to the target QP's XRC domain, and
//! uses that SRQ's PD for every protection check and its CQ for the receive completion.
//! Both halves send XRC opcodes (service 0xA0); the PSN, ACK, NAK, retry and duplicate
//! rules are RC's, run by the same code.

use softib_wire::{NakCode, PacketRepr};

use crate::qp::Qp;
use crate::shared::{RxMeta, Shared};
use crate::verbs::{CqHandle, PdHandle, SrqHandle};

/// The PD a target QP has between requests: none (0 is never a live PD, so no region
/// matches it).
pub(crate) const NO_PD: PdHandle = PdHandle(0);
/// The CQ a target QP has between requests: none (completions to it are dropped, and a
/// target QP produces none outside a request).
pub(crate) const NO_CQ: CqHandle = CqHandle(u32::MAX);

impl Qp {
    /// A request for this XRC target QP.
    ///
    /// The SRQ, PD and CQ a request is delivered with stay on the QP while a multi-packet
    /// message is in progress, so every packet of it (and a flush of its half-filled
    /// receive WQE, should the QP enter ERR meanwhile) uses the SRQ its first packet named;
    /// between messages the QP has none.
    pub(crate) fn xrc_target_request(
        &mut self,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        sh: &mut Shared,
    ) {
        let named = pkt.xrceth.and_then(|x| {
            let n = x.xrc_srq;
            let s = sh.srqs.get(n as usize)?.as_ref()?;
            let xrc = s.xrc?;
            (Some(xrc.xrcd) == self.xrcd).then_some((SrqHandle(n), s.pd, xrc.cq))
        });
        let in_message = self.resp.msg.is_some();
        let in_sequence = pkt.bth.psn == self.resp.epsn;
        if in_message {
            // The message's target is already on the QP.
            if in_sequence && named.map(|t| t.0) != self.srq {
                // IBA Annex A14: every packet of a message names the same XRC SRQ.
                self.counters.xrc_bad_srq += 1;
                self.abort_recv_message(sh, crate::verbs::WcStatus::RemInvReqErr);
                self.nak_fatal(sh, pkt.bth.psn, NakCode::InvalidRequest);
            } else {
                self.rc_handle_request(meta, pkt, sh);
            }
        } else {
            match named {
                Some((srq, pd, cq)) => {
                    self.srq = Some(srq);
                    self.pd = pd;
                    self.recv_cq = cq;
                    self.rc_handle_request(meta, pkt, sh);
                }
                None if in_sequence => {
                    // The XRCETH names no XRC SRQ of this domain: the request cannot be
                    // executed; NAK it as invalid (class C, the QP enters ERR).
                    self.counters.xrc_bad_srq += 1;
                    self.nak_fatal(sh, pkt.bth.psn, NakCode::InvalidRequest);
                }
                // Out of sequence: RC's rules (sequence NAK, duplicate answers) need no SRQ.
                None => self.rc_handle_request(meta, pkt, sh),
            }
        }
        if self.resp.msg.is_none() {
            self.srq = None;
            self.pd = NO_PD;
            self.recv_cq = NO_CQ;
        }
    }
}
