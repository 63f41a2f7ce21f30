//! The responder half of an EEC (IBA vol. 1 §9.7.3-9.7.6 applied to RD): RC's responder
//! runs on the EEC; for each request the RD QP the BTH names is checked against the
//! EEC's domain and the DETH's Q_Key, then lends the EEC its receive queue, PD, CQ and
//! access rights for the packet; RESYNC resets the expected PSN.

use softib_wire::{CreditCode, NakCode, Operation, PacketRepr, Syndrome};

use crate::psn;
use crate::qp::Qp;
use crate::rc::xrc::{NO_CQ, NO_PD};
use crate::rd::{RdRole, Serving, RESYNC_DUPLICATE_WINDOW};
use crate::shared::{RxMeta, Shared};
use crate::verbs::{AccessFlags, QpState, WcStatus};

/// Why an EEC refuses to deliver a request to the QP it names (all answered with the NAK
/// "invalid RD request", IBA §9.7.5.2.x).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// No RD QP of that number, or one not ready to receive.
    UnknownQp,
    /// The RD QP belongs to another reliable datagram domain (IBA §10.2.7).
    OtherDomain,
    /// The DETH's Q_Key is not the QP's (IBA §10.2.5).
    WrongQkey,
}

impl Qp {
    /// A request packet for this EEC; `target` is the entry its BTH DestQP names.
    pub(crate) fn eec_handle_request(
        &mut self,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        sh: &mut Shared,
        target: Option<&mut Qp>,
    ) {
        if pkt.bth.opcode.operation() == Operation::Resync {
            self.eec_resync(pkt);
            return;
        }
        if self.eec().is_some_and(|e| e.await_resync) {
            self.counters.rd_awaiting_resync_drops += 1;
            return;
        }
        let refusal = self.refusal(target.as_deref(), pkt);
        let in_sequence = pkt.bth.psn == self.resp.epsn;
        match (target, refusal) {
            (Some(t), None) => {
                self.lend(t, pkt);
                self.rc_handle_request(meta, pkt, sh);
                self.give_back(t);
            }
            (_, Some(why)) if in_sequence => {
                match why {
                    Refusal::UnknownQp => self.counters.rd_unknown_qp += 1,
                    Refusal::OtherDomain => self.counters.rd_bad_rdd += 1,
                    Refusal::WrongQkey => self.counters.rd_bad_qkey += 1,
                }
                // The message in progress (if any) belongs to the QP this packet should
                // have named as well: it cannot finish.
                self.abort_recv_message(sh, WcStatus::RemInvRdReqErr);
                self.nak_fatal(sh, pkt.bth.psn, NakCode::InvalidRdRequest);
            }
            // Out of sequence: a sequence NAK or a duplicate's answer needs no QP.
            _ => self.rc_handle_request(meta, pkt, sh),
        }
    }

    /// Whether the request may be delivered to `target`.
    fn refusal(&self, target: Option<&Qp>, pkt: &PacketRepr<'_>) -> Option<Refusal> {
        let Some(t) = target.filter(|t| matches!(t.rd, Some(RdRole::Qp { .. }))) else {
            return Some(Refusal::UnknownQp);
        };
        if !matches!(
            t.state(),
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Some(Refusal::UnknownQp);
        }
        if t.rdd() != self.rdd() {
            return Some(Refusal::OtherDomain);
        }
        if pkt.deth.map(|d| d.qkey) != Some(t.attr.qkey) {
            return Some(Refusal::WrongQkey);
        }
        // A message in progress continues only at the QP it started at.
        match self.eec().and_then(|e| e.serving) {
            Some(s) if self.resp.msg.is_some() && s.qpn != t.qpn => Some(Refusal::UnknownQp),
            _ => None,
        }
    }

    /// Lends `t`'s receive side to this EEC for one packet.
    fn lend(&mut self, t: &mut Qp, pkt: &PacketRepr<'_>) {
        let src_qp = pkt.deth.map_or(0, |d| d.src_qp);
        self.pd = t.pd;
        self.recv_cq = t.recv_cq;
        self.srq = t.srq;
        self.attr.qp_access_flags = t.attr.qp_access_flags;
        std::mem::swap(&mut self.rq, &mut t.rq);
        if let Some(e) = self.eec_mut() {
            e.serving = Some(Serving { qpn: t.qpn, src_qp });
            e.reply_qpn = src_qp;
        }
    }

    /// Returns what [`Self::lend`] took; between messages the EEC has no receive side.
    fn give_back(&mut self, t: &mut Qp) {
        std::mem::swap(&mut self.rq, &mut t.rq);
        if self.resp.msg.is_none() {
            self.pd = NO_PD;
            self.recv_cq = NO_CQ;
            self.srq = None;
            self.attr.qp_access_flags = AccessFlags::empty();
            if let Some(e) = self.eec_mut() {
                e.serving = None;
            }
        }
    }

    /// RESYNC (opcode 0x55): the requester's PSN becomes the expected one; acknowledged.
    fn eec_resync(&mut self, pkt: &PacketRepr<'_>) {
        let p = pkt.bth.psn;
        let behind = psn::diff(p, self.resp.epsn);
        if let Some(d) = pkt.deth {
            if let Some(e) = self.eec_mut() {
                e.reply_qpn = d.src_qp;
            }
        }
        if (-RESYNC_DUPLICATE_WINDOW..0).contains(&behind) && !self.awaiting_resync() {
            // A copy of a RESYNC already applied (or older): answer, do not rewind.
            self.counters.duplicates_received += 1;
            self.queue_resync_ack(psn::add(self.resp.epsn, psn::PSN_MASK));
            return;
        }
        self.counters.resyncs_applied += 1;
        self.resp.msg = None;
        self.resp.nak_sent = false;
        self.resp.epsn = psn::add(p, 1);
        if let Some(e) = self.eec_mut() {
            e.await_resync = false;
            e.serving = None;
        }
        self.pd = NO_PD;
        self.recv_cq = NO_CQ;
        self.srq = None;
        self.queue_resync_ack(p);
    }

    fn awaiting_resync(&self) -> bool {
        self.eec().is_some_and(|e| e.await_resync)
    }

    fn queue_resync_ack(&mut self, p: u32) {
        let msn = self.resp.msn;
        self.resp.queue.push_back(crate::qp::Response::Ack {
            psn: p,
            syndrome: Syndrome::Ack {
                credit: CreditCode::UNLIMITED,
            },
            msn,
        });
    }

    /// The EEC form of a class C responder error: the NAK goes out, the message is
    /// abandoned, and requests wait for the requester's RESYNC; the EEC stays up for the
    /// other QPs (IBA §9.7.5.2.x: RD errors fail the message, not the context).
    pub(crate) fn eec_nak_error(&mut self, sh: &mut Shared, p: u32, code: NakCode) {
        self.abort_recv_message(sh, WcStatus::RemInvRdReqErr);
        self.queue_ack(p, Syndrome::Nak(code));
        self.give_back_between_messages();
        if let Some(e) = self.eec_mut() {
            e.await_resync = true;
        }
    }

    fn give_back_between_messages(&mut self) {
        self.resp.msg = None;
        self.pd = NO_PD;
        self.recv_cq = NO_CQ;
        self.srq = None;
        self.attr.qp_access_flags = AccessFlags::empty();
    }
}
