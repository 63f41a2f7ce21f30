//! RC responder (IBA 9.7.3-9.7.6 responder side): expected PSN, duplicates (re-ACK,
//! READ replay, saved atomic results), one PSN-sequence NAK per gap, coalesced ACKs, MSN,
//! RNR NAKs, end-to-end credits, responder resources, and the protection checks that
//! precede any memory access.

use softib_wire::{
    AethRepr, AtomicAckEthRepr, CreditCode, NakCode, Operation, PacketRepr, RnrTimer, Syndrome,
};

use crate::dma;
use crate::emit;
use crate::events::AsyncEvent;
use crate::memory::{RemoteAccessFault, RemoteTarget};
use crate::psn;
use crate::qp::write_cursor::WriteCursor;
use crate::qp::{InMessage, Qp, Resource, Response};
use crate::rc::requester::packets_for;
use crate::shared::{RxMeta, Shared, Transmit, ZeroPayload};
use crate::verbs::{AccessFlags, QpState, VendorErr, WcFlags, WcOpcode, WcStatus};

/// Largest message in bytes (the device's max_msg_sz, as Linux reports 2^31).
const MAX_MESSAGE: u64 = 1 << 31;

impl Qp {
    /// End-to-end credits to advertise (IBA 9.7.7.2): receive WQEs posted, or "unlimited"
    /// (code 31) when an SRQ feeds the QP (always for an XRC target).
    fn credit(&self) -> CreditCode {
        // An XRC target always receives into an SRQ (Annex A14), also between messages.
        // RD has no end-to-end credits (IBA 9.7.7.2 is RC's): an EEC serves many QPs.
        if self.srq.is_some() || self.qp_type == crate::verbs::QpType::XrcRecv || self.is_eec() {
            CreditCode::UNLIMITED
        } else {
            CreditCode::for_wqes(self.rq.len() as u32)
        }
    }

    /// Queues an ACK/NAK. Positive ACKs coalesce with a positive ACK still waiting at the
    /// tail (IBA 9.7.5.1.2: one ACK may acknowledge many packets).
    pub(crate) fn queue_ack(&mut self, psn_: u32, syndrome: Syndrome) {
        let msn = self.resp.msn;
        if syndrome.is_ack() {
            if let Some(Response::Ack {
                psn: p,
                syndrome: s,
                msn: m,
            }) = self.resp.queue.back_mut()
            {
                if s.is_ack() {
                    *p = psn_;
                    *s = syndrome;
                    *m = msn;
                    return;
                }
            }
        }
        self.resp.queue.push_back(Response::Ack {
            psn: psn_,
            syndrome,
            msn,
        });
    }

    /// A class C responder error (IBA 9.9.3.1.2): NAK, then the QP goes to ERR.
    pub(crate) fn nak_fatal(&mut self, sh: &mut Shared, psn_: u32, code: NakCode) {
        match code {
            NakCode::RemoteAccessError => self.counters.remote_access_errors += 1,
            NakCode::RemoteOperationalError => self.counters.remote_operational_errors += 1,
            _ => self.counters.invalid_requests += 1,
        }
        if self.is_eec() {
            self.eec_nak_error(sh, psn_, code);
            return;
        }
        self.queue_ack(psn_, Syndrome::Nak(code));
        self.enter_error(sh, true);
    }

    fn fault_nak(&mut self, sh: &mut Shared, psn_: u32, f: RemoteAccessFault) {
        let code = match f {
            RemoteAccessFault::Misaligned => NakCode::InvalidRequest,
            _ => NakCode::RemoteAccessError,
        };
        self.nak_fatal(sh, psn_, code);
    }

    /// The packet was accepted in order: advance the expected PSN and acknowledge if asked.
    fn accept(&mut self, pkt: &PacketRepr<'_>) {
        self.resp.epsn = psn::add(pkt.bth.psn, 1);
        if pkt.bth.ack_req {
            // The credit count is filled in when the ACK leaves (it is then current).
            self.queue_ack(
                pkt.bth.psn,
                Syndrome::Ack {
                    credit: CreditCode(0),
                },
            );
        }
    }

    /// READ/atomic responses still queued; `new_only` leaves out answers to duplicates, so
    /// replays never make a legitimate new request look like a max_dest_rd_atomic violation.
    fn pending_rd_atomic(&self, new_only: bool) -> usize {
        self.resp
            .queue
            .iter()
            .filter(|r| match r {
                Response::Ack { .. } => false,
                Response::Read { replay, .. } | Response::Atomic { replay, .. } => {
                    !(new_only && *replay)
                }
            })
            .count()
    }

    fn save_resource(&mut self, r: Resource) {
        let cap = (self.attr.max_dest_rd_atomic as usize).max(1);
        while self.resp.resources.len() >= cap {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(r);
    }

    /// A request packet (anything but a response) for this RC QP.
    pub(crate) fn rc_handle_request(
        &mut self,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        sh: &mut Shared,
    ) {
        if self.state() == QpState::Rtr && !self.resp.established {
            self.resp.established = true;
            sh.events.push_back(AsyncEvent::CommEstablished(self.qpn));
        }
        let p = pkt.bth.psn;
        let d = psn::diff(p, self.resp.epsn);
        if d > 0 {
            // A gap: one PSN-sequence NAK per gap (IBA 9.7.5.2.2), then silence until the
            // expected PSN arrives.
            self.counters.out_of_sequence_drops += 1;
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                self.counters.seq_naks_sent += 1;
                let epsn = self.resp.epsn;
                self.queue_ack(epsn, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        }
        if d < 0 {
            self.rc_duplicate(pkt, sh);
            return;
        }
        self.resp.nak_sent = false;
        use Operation as O;
        let op = pkt.bth.opcode.operation();
        let sequence_ok = match (&self.resp.msg, op) {
            (
                Some(InMessage::Send { .. }),
                O::SendMiddle | O::SendLast | O::SendLastImm | O::SendLastInv,
            ) => true,
            (Some(InMessage::Write(_)), O::WriteMiddle | O::WriteLast | O::WriteLastImm) => true,
            (None, o) => matches!(
                o,
                O::SendFirst
                    | O::SendOnly
                    | O::SendOnlyImm
                    | O::SendOnlyInv
                    | O::WriteFirst
                    | O::WriteOnly
                    | O::WriteOnlyImm
                    | O::ReadRequest
                    | O::CompareSwap
                    | O::FetchAdd
                    | O::AtomicWrite
            ),
            _ => false,
        };
        if !sequence_ok {
            // IBA 9.7.5.2.4: an opcode out of sequence is an invalid request.
            self.abort_recv_message(sh, WcStatus::RemInvReqErr);
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let mtu = self.attr.path_mtu.bytes() as usize;
        let len = pkt.payload.len();
        let length_ok = match op {
            O::SendFirst | O::SendMiddle | O::WriteFirst | O::WriteMiddle => len == mtu,
            O::SendLast | O::SendLastImm | O::SendLastInv | O::WriteLast | O::WriteLastImm => {
                len > 0 && len <= mtu
            }
            _ => len <= mtu,
        };
        if !length_ok {
            // IBA 9.7.5.2.4 / C9-112: wrong payload length for the position.
            self.abort_recv_message(sh, WcStatus::RemInvReqErr);
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        match op {
            O::SendFirst
            | O::SendMiddle
            | O::SendLast
            | O::SendLastImm
            | O::SendLastInv
            | O::SendOnly
            | O::SendOnlyImm
            | O::SendOnlyInv => self.rc_send(meta, pkt, sh),
            O::WriteFirst
            | O::WriteMiddle
            | O::WriteLast
            | O::WriteLastImm
            | O::WriteOnly
            | O::WriteOnlyImm => self.rc_write(meta, pkt, sh),
            O::ReadRequest => self.rc_read_request(pkt, sh),
            O::CompareSwap | O::FetchAdd => self.rc_atomic(pkt, sh),
            O::AtomicWrite => self.rc_atomic_write(pkt, sh),
            _ => self.nak_fatal(sh, p, NakCode::InvalidRequest),
        }
    }

    /// Completes a half-received SEND's receive WQE in error (before a fatal NAK).
    pub(crate) fn abort_recv_message(&mut self, sh: &mut Shared, status: WcStatus) {
        if let Some(InMessage::Send { wqe, .. }) = self.resp.msg.take() {
            let src = self.peer_qpn();
            self.complete_recv(
                sh,
                wqe.wr_id,
                status,
                WcOpcode::Recv,
                0,
                WcFlags::empty(),
                None,
                None,
                src,
                0,
                0,
                VendorErr::RemoteNak,
            );
        }
        self.resp.msg = None;
    }

    fn rnr_nak(&mut self, p: u32) {
        self.counters.rnr_naks_sent += 1;
        // Like a sequence NAK, stay quiet about the rest of the message until `p` is resent.
        self.resp.nak_sent = true;
        let timer = RnrTimer(self.attr.min_rnr_timer);
        self.queue_ack(p, Syndrome::RnrNak { timer });
    }

    fn rc_send(&mut self, meta: &RxMeta, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        use Operation as O;
        let p = pkt.bth.psn;
        let op = pkt.bth.opcode.operation();
        if matches!(
            op,
            O::SendFirst | O::SendOnly | O::SendOnlyImm | O::SendOnlyInv
        ) {
            let Some(wqe) = self.take_recv(sh) else {
                self.rnr_nak(p);
                return;
            };
            self.resp.msg = Some(InMessage::Send { wqe, offset: 0 });
        }
        let Some(InMessage::Send { wqe, offset }) = &mut self.resp.msg else {
            return;
        };
        let len = pkt.payload.len() as u64;
        if *offset + len > wqe.capacity {
            self.abort_recv_message(sh, WcStatus::LocLenErr);
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        if dma::scatter(&mut sh.mrs, self.pd, &wqe.sges, *offset, pkt.payload).is_err() {
            self.abort_recv_message(sh, WcStatus::LocProtErr);
            self.nak_fatal(sh, p, NakCode::RemoteOperationalError);
            return;
        }
        *offset += len;
        if matches!(
            op,
            O::SendLast
                | O::SendLastImm
                | O::SendLastInv
                | O::SendOnly
                | O::SendOnlyImm
                | O::SendOnlyInv
        ) {
            let Some(InMessage::Send { wqe, offset }) = self.resp.msg.take() else {
                return;
            };
            let mut flags = WcFlags::empty();
            if pkt.bth.solicited {
                flags |= WcFlags::SOLICITED;
            }
            if pkt.immdt.is_some() {
                flags |= WcFlags::WITH_IMM;
            }
            let mut inv = None;
            if let Some(rkey) = pkt.ieth {
                // SEND with Invalidate (IBA 9.4.1.1 / 10.6.6): the named rkey stops working.
                // A window must be a bound type 2 window associated with this QP
                // (IBA 10.6.7.2.5; mw.rs); a region must have no windows bound.
                match sh.mrs.invalidate(rkey, self.pd, self.serving_qpn(), true) {
                    Ok(()) => {
                        flags |= WcFlags::WITH_INV;
                        inv = Some(rkey);
                    }
                    Err(_) => {
                        // rxe's class J: the receive completes with "remote invalid
                        // request" and the QP enters ERR.
                        let src = self.peer_qpn();
                        self.complete_recv(
                            sh,
                            wqe.wr_id,
                            WcStatus::RemInvReqErr,
                            WcOpcode::Recv,
                            0,
                            flags,
                            None,
                            None,
                            src,
                            meta.slid,
                            meta.sl,
                            VendorErr::Invalidate,
                        );
                        self.nak_fatal(sh, p, NakCode::InvalidRequest);
                        return;
                    }
                }
            }
            self.resp.msn = psn::add(self.resp.msn, 1);
            let src = self.peer_qpn();
            self.complete_recv(
                sh,
                wqe.wr_id,
                WcStatus::Success,
                WcOpcode::Recv,
                offset as u32,
                flags,
                pkt.immdt,
                inv,
                src,
                meta.slid,
                meta.sl,
                VendorErr::None,
            );
            sh.pools.recycle_sges(wqe.sges);
        }
        self.accept(pkt);
    }

    fn rc_write(&mut self, meta: &RxMeta, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        use Operation as O;
        let p = pkt.bth.psn;
        let op = pkt.bth.opcode.operation();
        let starts = matches!(op, O::WriteFirst | O::WriteOnly | O::WriteOnlyImm);
        let ends = matches!(
            op,
            O::WriteLast | O::WriteLastImm | O::WriteOnly | O::WriteOnlyImm
        );
        let imm = matches!(op, O::WriteLastImm | O::WriteOnlyImm);
        if starts {
            if !self
                .attr
                .qp_access_flags
                .contains(AccessFlags::REMOTE_WRITE)
            {
                self.nak_fatal(sh, p, NakCode::InvalidRequest);
                return;
            }
            let Some(reth) = pkt.reth else { return };
            let total = reth.dma_len as u64;
            if total > MAX_MESSAGE {
                // Longer than the largest message softib supports (2^31 bytes, the IBA maximum).
                self.nak_fatal(sh, p, NakCode::InvalidRequest);
                return;
            }
            let only = matches!(op, O::WriteOnly | O::WriteOnlyImm);
            if (only && pkt.payload.len() as u64 != total)
                || (!only && total <= self.attr.path_mtu.bytes() as u64)
            {
                self.nak_fatal(sh, p, NakCode::InvalidRequest);
                return;
            }
            let target = if total == 0 {
                RemoteTarget {
                    key: reth.rkey,
                    offset: 0,
                }
            } else {
                match sh.mrs.check_remote(
                    reth.rkey,
                    self.pd,
                    self.serving_qpn(),
                    reth.va,
                    total,
                    AccessFlags::REMOTE_WRITE,
                ) {
                    Ok(t) => t,
                    Err(f) => {
                        self.fault_nak(sh, p, f);
                        return;
                    }
                }
            };
            self.resp.msg = Some(InMessage::Write(WriteCursor {
                key: target.key,
                offset: target.offset as u64,
                remaining: total,
                total,
            }));
        }
        let Some(InMessage::Write(mut cursor)) = self.resp.msg.clone() else {
            return;
        };
        if !cursor.fits(pkt.payload.len() as u64, ends) {
            self.resp.msg = None;
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        // WRITE with immediate consumes a receive WQE (IBA 9.4.3): check before writing so
        // an RNR NAK leaves memory and state untouched for the retry.
        let recv = if imm {
            match self.take_recv(sh) {
                Some(w) => Some(w),
                None => {
                    if starts {
                        self.resp.msg = None;
                    }
                    self.rnr_nak(p);
                    return;
                }
            }
        } else {
            None
        };
        if !cursor.place(&mut sh.mrs, pkt.payload) {
            self.resp.msg = None;
            self.nak_fatal(sh, p, NakCode::RemoteAccessError);
            return;
        }
        if ends {
            self.finish_write(sh, meta, pkt, recv, cursor.total);
        } else {
            self.resp.msg = Some(InMessage::Write(cursor));
        }
        self.accept(pkt);
    }

    fn rc_read_request(&mut self, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        let p = pkt.bth.psn;
        if !self.attr.qp_access_flags.contains(AccessFlags::REMOTE_READ) {
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let Some(reth) = pkt.reth else { return };
        if self.pending_rd_atomic(true) >= (self.attr.max_dest_rd_atomic as usize).max(1) {
            // More outstanding READs/atomics than max_dest_rd_atomic (IBA 9.7.5.2.4 C9-...).
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let total = reth.dma_len as u64;
        if total > MAX_MESSAGE {
            // Longer than the largest message softib supports (2^31 bytes, the IBA maximum).
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let target = if total == 0 {
            RemoteTarget {
                key: reth.rkey,
                offset: 0,
            }
        } else {
            match sh.mrs.check_remote(
                reth.rkey,
                self.pd,
                self.serving_qpn(),
                reth.va,
                total,
                AccessFlags::REMOTE_READ,
            ) {
                Ok(t) => t,
                Err(f) => {
                    self.fault_nak(sh, p, f);
                    return;
                }
            }
        };
        let npsn = packets_for(total, self.attr.path_mtu.bytes());
        let last_psn = psn::add(p, npsn - 1);
        self.resp.msn = psn::add(self.resp.msn, 1);
        self.save_resource(Resource::Read {
            first_psn: p,
            last_psn,
        });
        self.resp.queue.push_back(Response::Read {
            psn: p,
            last_psn,
            key: target.key,
            offset: target.offset as u64,
            remaining: total,
            first: true,
            msn: self.resp.msn,
            replay: false,
        });
        self.resp.epsn = psn::add(p, npsn);
    }

    fn rc_atomic(&mut self, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        let p = pkt.bth.psn;
        if !self
            .attr
            .qp_access_flags
            .contains(AccessFlags::REMOTE_ATOMIC)
        {
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let Some(a) = pkt.atomic_eth else { return };
        if a.va & 7 != 0 {
            // IBA 9.4.5: atomics must be naturally aligned; misalignment is an invalid request.
            self.fault_nak(sh, p, RemoteAccessFault::Misaligned);
            return;
        }
        if self.pending_rd_atomic(true) >= (self.attr.max_dest_rd_atomic as usize).max(1) {
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let target = match sh.mrs.check_remote(
            a.rkey,
            self.pd,
            self.serving_qpn(),
            a.va,
            8,
            AccessFlags::REMOTE_ATOMIC,
        ) {
            Ok(t) => t,
            Err(f) => {
                self.fault_nak(sh, p, f);
                return;
            }
        };
        let offset = target.offset;
        let Some(mr) = sh.mrs.get_mut(target.key) else {
            return;
        };
        // The engine is single-threaded, so this is atomic with respect to every other
        // atomic on the device (IBA 9.4.5 "atomicity").
        let orig = if pkt.bth.opcode.operation() == Operation::CompareSwap {
            mr.memory.compare_swap(offset, a.compare, a.swap_or_add)
        } else {
            mr.memory.fetch_add(offset, a.swap_or_add)
        };
        self.resp.msn = psn::add(self.resp.msn, 1);
        self.save_resource(Resource::Atomic { psn: p, orig });
        self.resp.queue.push_back(Response::Atomic {
            psn: p,
            orig,
            msn: self.resp.msn,
            replay: false,
        });
        self.resp.epsn = psn::add(p, 1);
    }

    /// ATOMIC WRITE (IBA vol. 1 release 1.5): the 8-byte payload is stored at the RETH's VA
    /// as one indivisible store. The checks and their order follow rxe (Linux 6.2+
    /// rxe_resp.c): the QP must grant REMOTE_WRITE (there is no separate access right for
    /// it; else invalid request), a responder resource must be free, the RETH must ask for
    /// exactly the 8 bytes the packet carries (else invalid request), the R_Key must grant
    /// REMOTE_WRITE over them (else remote access error), and the VA must be 8-byte aligned
    /// (else invalid request, as for the atomics of IBA 9.4.5). Every earlier request has
    /// been carried out already (the engine executes in PSN order), which is the ordering
    /// IBA asks of it. The answer is an RDMA READ response Only with no payload, and the
    /// request is saved as a responder resource so a duplicate is answered without being
    /// applied again.
    fn rc_atomic_write(&mut self, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        let p = pkt.bth.psn;
        if !self
            .attr
            .qp_access_flags
            .contains(AccessFlags::REMOTE_WRITE)
        {
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let Some(reth) = pkt.reth else { return };
        if self.pending_rd_atomic(true) >= (self.attr.max_dest_rd_atomic as usize).max(1) {
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let Ok(value) = <[u8; 8]>::try_from(pkt.payload) else {
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        };
        if reth.dma_len != 8 {
            self.nak_fatal(sh, p, NakCode::InvalidRequest);
            return;
        }
        let target = match sh.mrs.check_remote(
            reth.rkey,
            self.pd,
            self.serving_qpn(),
            reth.va,
            8,
            AccessFlags::REMOTE_WRITE,
        ) {
            Ok(t) => t,
            Err(f) => {
                self.fault_nak(sh, p, f);
                return;
            }
        };
        if reth.va & 7 != 0 {
            self.fault_nak(sh, p, RemoteAccessFault::Misaligned);
            return;
        }
        let Some(mr) = sh.mrs.get_mut(target.key) else {
            return;
        };
        mr.memory.atomic_store(target.offset, value);
        self.resp.msn = psn::add(self.resp.msn, 1);
        self.save_resource(Resource::AtomicWrite { psn: p });
        self.resp.queue.push_back(Response::Read {
            psn: p,
            last_psn: p,
            key: target.key,
            offset: target.offset as u64,
            remaining: 0,
            first: true,
            msn: self.resp.msn,
            replay: false,
        });
        self.resp.epsn = psn::add(p, 1);
    }

    /// A request with a PSN before the expected one (IBA 9.7.5.1.4 "duplicate requests").
    fn rc_duplicate(&mut self, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        self.counters.duplicates_received += 1;
        let p = pkt.bth.psn;
        match pkt.bth.opcode.operation() {
            Operation::ReadRequest => {
                // Replay from the requested PSN, re-checking the (possibly shortened) request.
                let Some(reth) = pkt.reth else { return };
                let found = self.resp.resources.iter().rev().find_map(|r| match *r {
                    Resource::Read {
                        first_psn,
                        last_psn,
                    } if psn::diff(p, first_psn) >= 0 && psn::diff(p, last_psn) <= 0 => {
                        Some(last_psn)
                    }
                    _ => None,
                });
                let Some(last_psn) = found else { return };
                let total = reth.dma_len as u64;
                let npsn = packets_for(total, self.attr.path_mtu.bytes());
                let new_last = psn::add(p, npsn - 1);
                if psn::diff(new_last, last_psn) > 0
                    || self.pending_rd_atomic(false)
                        > 2 * (self.attr.max_dest_rd_atomic as usize).max(1)
                {
                    return;
                }
                let target = if total == 0 {
                    RemoteTarget {
                        key: reth.rkey,
                        offset: 0,
                    }
                } else {
                    match sh.mrs.check_remote(
                        reth.rkey,
                        self.pd,
                        self.serving_qpn(),
                        reth.va,
                        total,
                        AccessFlags::REMOTE_READ,
                    ) {
                        Ok(t) => t,
                        Err(_) => return,
                    }
                };
                let msn = self.resp.msn;
                self.resp.queue.push_back(Response::Read {
                    psn: p,
                    last_psn: new_last,
                    key: target.key,
                    offset: target.offset as u64,
                    remaining: total,
                    first: true,
                    msn,
                    replay: true,
                });
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                // Never execute twice: answer from the saved original value.
                let saved = self.resp.resources.iter().rev().find_map(|r| match *r {
                    Resource::Atomic { psn: rp, orig } if rp == p => Some(orig),
                    _ => None,
                });
                if let Some(orig) = saved {
                    let msn = self.resp.msn;
                    self.resp.queue.push_back(Response::Atomic {
                        psn: p,
                        orig,
                        msn,
                        replay: true,
                    });
                }
            }
            Operation::AtomicWrite => {
                // Applied once already: answer again from the saved resource, never store
                // again (a later request may have changed the word since). A duplicate
                // whose resource was recycled is dropped (class D); the requester retries.
                let saved = self
                    .resp
                    .resources
                    .iter()
                    .any(|r| matches!(*r, Resource::AtomicWrite { psn: rp } if rp == p));
                if saved
                    && self.pending_rd_atomic(false)
                        <= 2 * (self.attr.max_dest_rd_atomic as usize).max(1)
                {
                    let msn = self.resp.msn;
                    self.resp.queue.push_back(Response::Read {
                        psn: p,
                        last_psn: p,
                        key: 0,
                        offset: 0,
                        remaining: 0,
                        first: true,
                        msn,
                        replay: true,
                    });
                }
            }
            _ => {
                // SEND / WRITE: acknowledge everything received so far.
                if pkt.bth.ack_req {
                    let last = psn::add(self.resp.epsn, psn::PSN_MASK);
                    self.queue_ack(
                        last,
                        Syndrome::Ack {
                            credit: CreditCode(0),
                        },
                    );
                }
            }
        }
    }

    /// Emits the next queued response (ACK/NAK, atomic ACK or read response packet).
    pub(crate) fn rc_poll_response(&mut self, buf: &mut [u8], sh: &mut Shared) -> Option<Transmit> {
        let front = *self.resp.queue.front()?;
        let pkey = self.pkey(sh);
        // An EEC answers the QP that sent the request (RD responses carry an RDETH, IBA 9.3.1).
        let dest = self.eec().map_or(self.attr.dest_qp_num, |e| e.reply_qpn);
        let mut repr = PacketRepr::new(emit::bth(
            emit::opcode(self.rc_service(), Operation::Acknowledge),
            pkey,
            dest,
            0,
        ));
        self.rd_add_rdeth(&mut repr);
        let mut zero_payload = None;
        let len = match front {
            Response::Ack { psn, syndrome, msn } => {
                let syndrome = if syndrome.is_ack() {
                    Syndrome::Ack {
                        credit: self.credit(),
                    }
                } else {
                    syndrome
                };
                repr.bth.psn = psn;
                repr.aeth = Some(AethRepr {
                    syndrome,
                    msn: msn & psn::PSN_MASK,
                });
                let n = emit::emit_bare(buf, &repr)?;
                self.resp.queue.pop_front();
                n
            }
            Response::Atomic { psn, orig, msn, .. } => {
                repr.bth.opcode = emit::opcode(self.rc_service(), Operation::AtomicAcknowledge);
                repr.bth.psn = psn;
                repr.aeth = Some(AethRepr {
                    syndrome: Syndrome::Ack {
                        credit: self.credit(),
                    },
                    msn: msn & psn::PSN_MASK,
                });
                repr.atomic_ack_eth = Some(AtomicAckEthRepr {
                    orig_remote_data: orig,
                });
                let n = emit::emit_bare(buf, &repr)?;
                self.resp.queue.pop_front();
                n
            }
            Response::Read {
                psn,
                last_psn,
                key,
                offset,
                remaining,
                first,
                msn,
                ..
            } => {
                let mtu = self.attr.path_mtu.bytes() as u64;
                let is_last = psn == last_psn;
                let op = match (first, is_last) {
                    (true, true) => Operation::ReadResponseOnly,
                    (true, false) => Operation::ReadResponseFirst,
                    (false, true) => Operation::ReadResponseLast,
                    (false, false) => Operation::ReadResponseMiddle,
                };
                repr.bth.opcode = emit::opcode(self.rc_service(), op);
                repr.bth.psn = psn;
                if op != Operation::ReadResponseMiddle {
                    repr.aeth = Some(AethRepr {
                        syndrome: Syndrome::Ack {
                            credit: self.credit(),
                        },
                        msn: msn & psn::PSN_MASK,
                    });
                }
                let n = remaining.min(mtu) as usize;
                let (head, slot) = emit::layout(buf, &repr, n)?;
                if n > 0 {
                    match sh.mrs.get(key) {
                        Some(mr) if offset + n as u64 <= mr.memory.len() as u64 => {
                            if sh.describe_zeros && mr.memory.reads_as_zeros() {
                                zero_payload = Some(ZeroPayload {
                                    offset: head.len(),
                                    len: n,
                                });
                            } else {
                                mr.memory.read(offset as usize, slot)
                            }
                        }
                        _ => {
                            // The region went away mid-stream: stop; the requester retries
                            // and gets a remote access NAK.
                            self.resp.queue.pop_front();
                            return None;
                        }
                    }
                }
                let len = emit::finish(head, &repr, n)?;
                if is_last {
                    self.resp.queue.pop_front();
                } else if let Some(Response::Read {
                    psn: p,
                    offset: o,
                    remaining: r,
                    first: f,
                    ..
                }) = self.resp.queue.front_mut()
                {
                    *p = psn::add(*p, 1);
                    *o += n as u64;
                    *r -= n as u64;
                    *f = false;
                }
                len
            }
        };
        Some(Transmit {
            len,
            src_qpn: self.qpn,
            dest_qpn: dest,
            path: self.path(),
            ecn_capable: true,
            batchable: false, // derived by Device::poll_transmit
            zero_payload,
        })
    }
}
