//! Unreliable Connected service (IBA 9.8.2) and the shared send path of UC and UD:
//! no ACKs, a send WR completes when its last packet leaves; at the receiver a PSN gap
//! drops the rest of the message and reception resumes at the next FIRST/ONLY.

use softib_wire::{DethRepr, Operation, PacketRepr, RethRepr, Service};

use crate::dma;
use crate::emit;
use crate::memory::RemoteTarget;
use crate::psn;
use crate::qp::write_cursor::WriteCursor;
use crate::qp::{InMessage, Qp};
use crate::rc::requester::{local_vendor, packets_for};
use crate::shared::{RxMeta, Shared, Transmit, ZeroPayload};
use crate::verbs::{
    AccessFlags, QpState, QpType, VendorErr, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

impl Qp {
    pub(crate) fn unreliable_has_work(&self) -> bool {
        match self.state() {
            QpState::Rts => self.sq.started > 0 || self.sq.has_unstarted(),
            QpState::Sqd => self.sq.started > 0,
            _ => false,
        }
    }

    /// A send-side error on UC/UD: the WR completes in error and the QP enters SQE
    /// (IBA 10.3.1: the send queue stops, the receive side keeps working).
    fn unreliable_send_error(&mut self, sh: &mut Shared, status: WcStatus, vendor: VendorErr) {
        if let Some(w) = self.sq.pop_head() {
            self.complete_send(sh, &w, status, vendor);
        }
        self.attr.qp_state = QpState::Sqe;
        self.flush_send(sh);
    }

    /// Next UC or UD packet.
    pub(crate) fn unreliable_poll_send(
        &mut self,
        buf: &mut [u8],
        sh: &mut Shared,
    ) -> Option<Transmit> {
        self.run_local_ops(sh);
        if !self.unreliable_has_work() {
            return None;
        }
        let service = if self.qp_type == QpType::Ud {
            Service::Ud
        } else {
            Service::Uc
        };
        if self.sq.started == 0 {
            let w = &self.sq.wqes[0];
            if let Err(f) = dma::check_sges(&sh.mrs, self.pd, &w.sges, false) {
                self.unreliable_send_error(sh, WcStatus::LocProtErr, local_vendor(f));
                return None;
            }
            let mtu = if self.qp_type == QpType::Ud {
                sh.config.max_mtu.bytes()
            } else {
                self.attr.path_mtu.bytes()
            };
            let first = self.req.sq_psn;
            let w = &mut self.sq.wqes[0];
            w.first_psn = first;
            w.npsn = packets_for(w.length, mtu);
            self.req.sq_psn = psn::add(first, w.npsn);
            self.req.tx_psn = first;
            self.sq.started = 1;
        }
        let pkey = self.pkey(sh);
        let w = &self.sq.wqes[0];
        let p = self.req.tx_psn;
        let k = psn::diff(p, w.first_psn).max(0) as u32;
        let first = k == 0;
        let last = k + 1 >= w.npsn;
        let (dest_qp, path) = match w.ud {
            Some(t) => (t.qpn, t.path),
            None => (self.attr.dest_qp_num, self.path()),
        };
        let mut repr = PacketRepr::new(emit::bth(
            emit::opcode(service, Operation::SendOnly),
            pkey,
            dest_qp,
            p,
        ));
        let mtu = if self.qp_type == QpType::Ud {
            sh.config.max_mtu.bytes() as u64
        } else {
            self.attr.path_mtu.bytes() as u64
        };
        let off = k as u64 * mtu;
        let len = (w.length - off.min(w.length)).min(mtu) as usize;
        use Operation as O;
        let imm = matches!(w.opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
        let op = match w.opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                if first {
                    repr.reth = Some(RethRepr {
                        va: w.remote_addr,
                        rkey: w.rkey,
                        dma_len: w.length as u32,
                    });
                }
                match (first, last, imm) {
                    (true, true, false) => O::WriteOnly,
                    (true, true, true) => O::WriteOnlyImm,
                    (true, false, _) => O::WriteFirst,
                    (false, true, false) => O::WriteLast,
                    (false, true, true) => O::WriteLastImm,
                    _ => O::WriteMiddle,
                }
            }
            _ => match (first, last, imm) {
                (true, true, false) => O::SendOnly,
                (true, true, true) => O::SendOnlyImm,
                (true, false, _) => O::SendFirst,
                (false, true, false) => O::SendLast,
                (false, true, true) => O::SendLastImm,
                _ => O::SendMiddle,
            },
        };
        if last && imm {
            repr.immdt = w.imm;
        }
        if let Some(t) = w.ud {
            repr.deth = Some(DethRepr {
                qkey: t.qkey,
                src_qp: self.qpn,
            });
        }
        repr.bth.opcode = emit::opcode(service, op);
        repr.bth.solicited = last && w.solicited;
        let (head, slot) = emit::layout(buf, &repr, len)?;
        let mut zero_payload = None;
        if len > 0 {
            let inline = w.inline.as_deref();
            match dma::gather(
                &sh.mrs,
                self.pd,
                &w.sges,
                inline,
                off,
                slot,
                sh.describe_zeros,
            ) {
                Ok(described) => {
                    zero_payload = described.then_some(ZeroPayload {
                        offset: head.len(),
                        len,
                    });
                }
                Err(f) => {
                    self.unreliable_send_error(sh, WcStatus::LocProtErr, local_vendor(f));
                    return None;
                }
            }
        }
        let n = emit::finish(head, &repr, len)?;
        self.req.tx_psn = psn::add(p, 1);
        self.req.max_sent = self.req.tx_psn;
        if last {
            let w = self.sq.pop_head().expect("head exists");
            self.retire_send(sh, w, WcStatus::Success, VendorErr::None);
            self.check_drained(sh);
        }
        Some(Transmit {
            len: n,
            src_qpn: self.qpn,
            dest_qpn: dest_qp,
            path,
            ecn_capable: true,
            batchable: false, // derived by Device::poll_transmit
            zero_payload,
        })
    }

    /// Drops a half-received UC message; its receive WQE goes back for the next message.
    fn uc_abort_message(&mut self, sh: &mut Shared) {
        if let Some(InMessage::Send { wqe, .. }) = self.resp.msg.take() {
            self.return_recv(sh, wqe);
        }
    }

    /// A UC request packet.
    pub(crate) fn uc_handle_packet(
        &mut self,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        sh: &mut Shared,
    ) {
        use Operation as O;
        let p = pkt.bth.psn;
        let op = pkt.bth.opcode.operation();
        let starts = matches!(
            op,
            O::SendFirst
                | O::SendOnly
                | O::SendOnlyImm
                | O::WriteFirst
                | O::WriteOnly
                | O::WriteOnlyImm
        );
        if p != self.resp.epsn {
            // IBA 9.8.2.2: a gap ends the current message; wait for the next FIRST/ONLY.
            self.counters.out_of_sequence_drops += 1;
            self.uc_abort_message(sh);
            self.resp.msg = None;
        }
        self.resp.epsn = psn::add(p, 1);
        let continuing = matches!(
            (&self.resp.msg, op),
            (
                Some(InMessage::Send { .. }),
                O::SendMiddle | O::SendLast | O::SendLastImm
            ) | (
                Some(InMessage::Write(_)),
                O::WriteMiddle | O::WriteLast | O::WriteLastImm
            )
        );
        if starts {
            self.uc_abort_message(sh);
            self.resp.msg = None;
        } else if !continuing {
            self.counters.out_of_sequence_drops += 1;
            return;
        }
        let mtu = self.attr.path_mtu.bytes() as usize;
        let len = pkt.payload.len();
        let ends = !matches!(
            op,
            O::SendFirst | O::SendMiddle | O::WriteFirst | O::WriteMiddle
        );
        let length_ok = if !ends { len == mtu } else { len <= mtu };
        if !length_ok {
            self.counters.invalid_requests += 1;
            self.uc_abort_message(sh);
            self.resp.msg = None;
            return;
        }
        let is_send = matches!(
            op,
            O::SendFirst
                | O::SendMiddle
                | O::SendLast
                | O::SendLastImm
                | O::SendOnly
                | O::SendOnlyImm
        );
        if is_send {
            if starts {
                let Some(wqe) = self.take_recv(sh) else {
                    // No receive WQE: the message is silently dropped (IBA 9.8.2.2, no RNR on UC).
                    self.counters.out_of_sequence_drops += 1;
                    return;
                };
                self.resp.msg = Some(InMessage::Send { wqe, offset: 0 });
            }
            let Some(InMessage::Send { wqe, offset }) = &mut self.resp.msg else {
                return;
            };
            let l = len as u64;
            let too_long = *offset + l > wqe.capacity;
            if too_long
                || dma::scatter(&mut sh.mrs, self.pd, &wqe.sges, *offset, pkt.payload).is_err()
            {
                // The receive WQE completes in error; UC reports it locally only.
                let Some(InMessage::Send { wqe, .. }) = self.resp.msg.take() else {
                    return;
                };
                let (status, vendor) = if too_long {
                    (WcStatus::LocLenErr, VendorErr::RecvBufferTooSmall)
                } else {
                    (WcStatus::LocProtErr, VendorErr::NoLocalWrite)
                };
                let src = self.attr.dest_qp_num;
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
                    meta.slid,
                    meta.sl,
                    vendor,
                );
                return;
            }
            *offset += l;
            if ends {
                let Some(InMessage::Send { wqe, offset }) = self.resp.msg.take() else {
                    return;
                };
                let mut flags = WcFlags::empty();
                if pkt.immdt.is_some() {
                    flags |= WcFlags::WITH_IMM;
                }
                if pkt.bth.solicited {
                    flags |= WcFlags::SOLICITED;
                }
                self.resp.msn = psn::add(self.resp.msn, 1);
                let src = self.attr.dest_qp_num;
                self.complete_recv(
                    sh,
                    wqe.wr_id,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    offset as u32,
                    flags,
                    pkt.immdt,
                    None,
                    src,
                    meta.slid,
                    meta.sl,
                    VendorErr::None,
                );
                sh.pools.recycle_sges(wqe.sges);
            }
            return;
        }
        // RDMA WRITE.
        if starts {
            let Some(reth) = pkt.reth else { return };
            let total = reth.dma_len as u64;
            if !self
                .attr
                .qp_access_flags
                .contains(AccessFlags::REMOTE_WRITE)
            {
                self.counters.invalid_requests += 1;
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
                    self.qpn,
                    reth.va,
                    total,
                    AccessFlags::REMOTE_WRITE,
                ) {
                    Ok(t) => t,
                    Err(_) => {
                        // IBA 9.8.2.2 / class D: UC drops the message silently.
                        self.counters.remote_access_errors += 1;
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
        if !cursor.fits(len as u64, ends) {
            self.counters.invalid_requests += 1;
            self.resp.msg = None;
            return;
        }
        let imm = matches!(op, O::WriteLastImm | O::WriteOnlyImm);
        let recv = if imm {
            match self.take_recv(sh) {
                Some(w) => Some(w),
                None => {
                    self.counters.out_of_sequence_drops += 1;
                    self.resp.msg = None;
                    return;
                }
            }
        } else {
            None
        };
        if !cursor.place(&mut sh.mrs, pkt.payload) {
            self.counters.remote_access_errors += 1;
            self.resp.msg = None;
            return;
        }
        if ends {
            self.finish_write(sh, meta, pkt, recv, cursor.total);
        } else {
            self.resp.msg = Some(InMessage::Write(cursor));
        }
    }
}
