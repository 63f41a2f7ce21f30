//! XRC (IBA vol. 1 Annex A14, `IBV_QPT_XRC_SEND` / `IBV_QPT_XRC_RECV`): RC's reliability
//! with the receive side moved out of the QP. An initiator QP is an RC requester whose
//! requests carry an XRCETH naming the remote XRC SRQ (`requester.rs`); a target QP is an
//! RC responder with no receive queue, PD or CQ of its own: each request is delivered into
//! the XRC SRQ its XRCETH names, which must belong to the target QP's XRC domain, and
//! uses that SRQ's PD for every protection check and its CQ for the receive completion.
//! Both halves send XRC opcodes (service 0xA0); the PSN, ACK, NAK, retry and duplicate
//! rules are RC's, run by the same code.

use softib_wire::{NakCode, PacketRepr};

use crate::device::{RxMeta, Shared};
use crate::qp::Qp;
use crate::verbs::{CqHandle, PdHandle, SrqHandle};

/// The PD a target QP has between requests: none (0 is never a live PD, so no region
/// matches it).
pub(crate) const NO_PD: PdHandle = PdHandle(0);
/// The CQ a target QP has between requests: none (completions to it are dropped, and a
/// target QP produces none outside a request).
pub(crate) const NO_CQ: CqHandle = CqHandle(u32::MAX);

impl Qp {
    /// A request for this XRC target QP.
    pub(crate) fn xrc_target_request(
        &mut self,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        sh: &mut Shared,
    ) {
        let named = pkt.xrceth.map(|x| x.xrc_srq);
        let target = named.and_then(|n| {
            let s = sh.srqs.get(n as usize)?.as_ref()?;
            let x = s.xrc?;
            (Some(x.xrcd) == self.xrcd).then_some((SrqHandle(n), s.pd, x.cq))
        });
        match target {
            Some((srq, pd, cq)) => {
                self.srq = Some(srq);
                self.pd = pd;
                self.recv_cq = cq;
                self.rc_handle_request(meta, pkt, sh);
                self.srq = None;
                self.pd = NO_PD;
                self.recv_cq = NO_CQ;
            }
            None if pkt.bth.psn == self.resp.epsn => {
                // The XRCETH names no XRC SRQ of this domain: the request cannot be
                // executed; NAK it as invalid (class C, the QP enters ERR).
                self.counters.xrc_bad_srq += 1;
                self.nak_fatal(sh, pkt.bth.psn, NakCode::InvalidRequest);
            }
            // Out of sequence: RC's rules (sequence NAK, duplicate answers) need no SRQ.
            None => self.rc_handle_request(meta, pkt, sh),
        }
    }
}
