//! RC requester (IBA 9.7.2-9.7.6 requester side): PSN assignment, the send window, AckReq
//! placement, go-back-N retransmission regenerated from the WQE and its source memory,
//! the local ACK timer with retry_cnt, RNR NAK handling with rnr_retry, max_rd_atomic,
//! fences, read-response placement with partial-read retry, atomic responses, and error
//! completions.

use softib_wire::{AethRepr, AtomicEthRepr, NakCode, Operation, PacketRepr, RethRepr, Syndrome};

use crate::dma;
use crate::emit;
use crate::psn;
use crate::qp::send_queue::SendWqe;
use crate::qp::{Qp, TimerKind};
use crate::rc::recovery::Burst;
use crate::shared::{Shared, Transmit, ZeroPayload};
use crate::time::{local_ack_timeout, Nanos};
use crate::verbs::{QpState, VendorErr, WcStatus, WrOpcode};

/// Why the requester goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RetryCause {
    Timeout,
    SeqNak,
    /// A response showed that earlier READ/atomic responses were lost (IBA 9.7.5.1.5).
    Implicit,
}

/// PSNs a message of `length` bytes occupies at `mtu`: at least one.
pub(crate) fn packets_for(length: u64, mtu: u32) -> u32 {
    length.div_ceil(mtu as u64).max(1) as u32
}

impl Qp {
    fn window(&self, sh: &Shared) -> u32 {
        let max = sh.config.max_unacked_psns.max(1);
        // READ and atomic requests are not paced: their PSN span says nothing about the
        // bytes they put on the wire, and a READ's responses are re-requested as a whole.
        let at_request = self.req.tx_idx < self.sq.started
            && self.sq.wqes[self.req.tx_idx].opcode.is_read_or_atomic();
        if at_request {
            max
        } else {
            self.rc_effective_window(max)
        }
    }

    fn window_open(&self, psn_: u32, sh: &Shared) -> bool {
        psn_ == self.req.una || (psn::diff(psn_, self.req.una) as i64) < self.window(sh) as i64
    }

    fn max_rd_atomic(&self) -> u32 {
        (self.attr.max_rd_atomic as u32).max(1)
    }

    /// Can the next unstarted WQE start now? (fence: after prior READs/atomics complete,
    /// IBA 10.8.3.3; READs/atomics: at most max_rd_atomic outstanding, IBA 9.7.6.1.x;
    /// end-to-end credits for messages that consume a receive WQE, IBA 9.7.7.2.)
    fn can_start(&self, w: &SendWqe) -> bool {
        // An EEC has one message in progress: the next starts once the last completed.
        if self.is_eec() && self.sq.started > 0 {
            return false;
        }
        if w.fence && self.req.rd_atomic_out > 0 {
            return false;
        }
        // A message that consumes a receive WQE may go when its SSN <= LSN + 1: one message
        // beyond the advertised credits is allowed, so a requester with no credits still
        // learns new ones from that message's ACK (or RNR NAK).
        let consumes_wqe = matches!(
            w.opcode,
            WrOpcode::Send
                | WrOpcode::SendWithImm
                | WrOpcode::SendWithInv
                | WrOpcode::RdmaWriteWithImm
        );
        if consumes_wqe
            && self.req.credits_known
            && !self.req.unlimited_credit
            && psn::diff(self.req.ssn, self.req.lsn) > 0
        {
            return false;
        }
        !(w.opcode.is_read_or_atomic() && self.req.rd_atomic_out >= self.max_rd_atomic())
    }

    pub(crate) fn rc_has_request_work(&self, sh: &Shared) -> bool {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) || self.req.rnr_wait {
            return false;
        }
        if self.req.tx_idx < self.sq.started {
            return self.window_open(self.req.tx_psn, sh);
        }
        self.state() == QpState::Rts
            && self.sq.has_unstarted()
            && !(self.req.blocked_local_error && self.sq.started > 0)
            && self.can_start(&self.sq.wqes[self.sq.started])
            && self.window_open(self.req.sq_psn, sh)
    }

    /// Starts the next WQE: checks its local buffers and assigns its PSNs.
    /// Returns false if it cannot start (yet).
    fn rc_start_next(&mut self, sh: &mut Shared) -> bool {
        let idx = self.sq.started;
        let w = &self.sq.wqes[idx];
        if self.runs_at_head(w.opcode) {
            // Runs once every earlier WR has completed (qp/local_ops.rs).
            self.req.blocked_local_error = true;
            return false;
        }
        let write = w.opcode.writes_local();
        if let Err(fault) = dma::check_sges(&sh.mrs, w.pd_or(self.pd), &w.sges, write) {
            if idx == 0 {
                // Local protection error: complete in error, QP to ERR (IBA 10.8.3.1 class B).
                let w = self.sq.pop_head().expect("head exists");
                self.complete_send(sh, &w, WcStatus::LocProtErr, local_vendor(fault));
                self.enter_error(sh, true);
            } else {
                // Let the earlier WQEs complete first so completions stay in order.
                self.req.blocked_local_error = true;
            }
            return false;
        }
        self.req.blocked_local_error = false;
        let mtu = self.attr.path_mtu.bytes();
        let w = &mut self.sq.wqes[idx];
        w.first_psn = self.req.sq_psn;
        w.npsn = match w.opcode {
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicWrite => 1,
            _ => packets_for(w.length, mtu),
        };
        w.read_done = 0;
        self.req.ssn = psn::add(self.req.ssn, 1);
        if w.opcode.is_read_or_atomic() {
            self.req.rd_atomic_out += 1;
        }
        self.req.sq_psn = psn::add(w.first_psn, w.npsn);
        self.sq.started += 1;
        self.req.tx_idx = idx;
        self.req.tx_psn = w.first_psn;
        true
    }

    /// Produces the next request packet (new or retransmitted).
    pub(crate) fn rc_poll_request(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        sh: &mut Shared,
    ) -> Option<Transmit> {
        self.run_local_ops(sh);
        if !self.rc_has_request_work(sh) {
            return None;
        }
        if self.req.tx_idx >= self.sq.started && !self.rc_start_next(sh) {
            return None;
        }
        let idx = self.req.tx_idx;
        let p = self.req.tx_psn;
        let pkey = self.pkey(sh);
        let mtu = self.attr.path_mtu.bytes();
        let window = self.window(sh);
        let interval = sh.config.ack_req_interval.max(1);
        let w = &self.sq.wqes[idx];
        let dest = w.rd.map_or(self.attr.dest_qp_num, |r| r.dest_qpn);
        let pd = w.pd_or(self.pd);
        let k = psn::diff(p, w.first_psn).max(0) as u32;
        let last = k + 1 >= w.npsn;
        let mut repr = PacketRepr::new(emit::bth(
            emit::opcode(self.rc_service(), Operation::Acknowledge),
            pkey,
            dest,
            p,
        ));
        let (op, payload_off, payload_len) = match w.opcode {
            _ if w.rd.is_some_and(|r| r.resync) => (Operation::Resync, 0, 0),
            WrOpcode::RdmaRead => {
                let done = (w.read_done as u64) * mtu as u64;
                repr.reth = Some(RethRepr {
                    va: w.remote_addr.wrapping_add(done),
                    rkey: w.rkey,
                    dma_len: (w.length - done.min(w.length)) as u32,
                });
                repr.bth.psn = psn::add(w.first_psn, w.read_done);
                (Operation::ReadRequest, 0, 0)
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let (swap_or_add, compare) = if w.opcode == WrOpcode::AtomicCmpAndSwp {
                    (w.swap, w.compare_add)
                } else {
                    (w.compare_add, 0)
                };
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: w.remote_addr,
                    rkey: w.rkey,
                    swap_or_add,
                    compare,
                });
                let op = if w.opcode == WrOpcode::AtomicCmpAndSwp {
                    Operation::CompareSwap
                } else {
                    Operation::FetchAdd
                };
                (op, 0, 0)
            }
            WrOpcode::AtomicWrite => {
                // IBA 1.5 ATOMIC WRITE: a RETH for the 8 target bytes, then those 8 bytes.
                repr.reth = Some(RethRepr {
                    va: w.remote_addr,
                    rkey: w.rkey,
                    dma_len: 8,
                });
                (Operation::AtomicWrite, 0, w.length as usize)
            }
            _ => {
                let off = k as u64 * mtu as u64;
                let len = (w.length - off.min(w.length)).min(mtu as u64) as usize;
                let first = k == 0;
                let op = data_operation(w, first, last, &mut repr);
                (op, off, len)
            }
        };
        repr.bth.opcode = emit::opcode(self.rc_service(), op);
        if self.qp_type == crate::verbs::QpType::XrcSend {
            // Every XRC request names the remote XRC SRQ, right after the BTH (Annex A14).
            repr.xrceth = Some(softib_wire::XrcethRepr {
                xrc_srq: w.xrc_srqn,
            });
        }
        if let Some(rd) = w.rd {
            // Every RD request names the remote EEC (RDETH) and carries the Q_Key and the
            // source QP (DETH), IBA 9.3.1-9.3.2.
            self.rd_add_rdeth(&mut repr);
            repr.deth = Some(softib_wire::DethRepr {
                qkey: rd.qkey,
                src_qp: rd.src_qp,
            });
        }
        let is_read_or_atomic = w.opcode.is_read_or_atomic();
        let next_psn = if w.opcode == WrOpcode::RdmaRead {
            psn::add(w.last_psn(), 1)
        } else {
            psn::add(p, 1)
        };
        // AckReq on the last packet of a message, periodically within long ones, and when
        // the window is about to close so the ACK that reopens it is never withheld.
        let window_closing = psn::diff(next_psn, self.req.una) as i64 >= window as i64;
        repr.bth.ack_req =
            last || is_read_or_atomic || self.req.since_ack_req + 1 >= interval || window_closing;
        repr.bth.solicited = last && w.solicited;
        let sent_psn = repr.bth.psn;
        let (head, slot) = emit::layout(buf, &repr, payload_len)?;
        let mut zero_payload = None;
        if payload_len > 0 {
            match dma::gather(
                &sh.mrs,
                pd,
                &w.sges,
                w.inline.as_deref(),
                payload_off,
                slot,
                sh.describe_zeros,
            ) {
                Ok(described) => {
                    zero_payload = described.then_some(ZeroPayload {
                        offset: head.len(),
                        len: payload_len,
                    });
                }
                Err(fault) => {
                    // The region vanished or changed under an executing WR.
                    if idx == 0 {
                        let w = self.sq.pop_head().expect("head exists");
                        self.complete_send(sh, &w, WcStatus::LocProtErr, local_vendor(fault));
                        self.enter_error(sh, true);
                    } else {
                        self.req.blocked_local_error = true;
                    }
                    return None;
                }
            }
        }
        let len = emit::finish(head, &repr, payload_len)?;

        // Advance the cursor.
        let wqe_done = w.opcode == WrOpcode::RdmaRead || last;
        if wqe_done {
            self.req.tx_idx = idx + 1;
        }
        self.req.tx_psn = next_psn;
        self.req.since_ack_req = if repr.bth.ack_req {
            0
        } else {
            self.req.since_ack_req + 1
        };
        if psn::diff(sent_psn, self.req.max_sent) < 0 {
            self.counters.retransmitted_packets += 1;
            self.rc_note_resent(now, sent_psn, next_psn);
            if repr.bth.ack_req {
                self.rc_arm_stall_check(now);
            }
        } else {
            self.req.max_sent = next_psn;
            self.rc_note_new_packet(now, sent_psn);
        }
        if self.timer(TimerKind::Retransmit).is_none() {
            if let Some(t) = local_ack_timeout(self.attr.timeout) {
                self.set_timer(TimerKind::Retransmit, Some(now.saturating_add(t)));
            }
        }
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

    /// Handles ACK / NAK / read response / atomic acknowledge (IBA 9.7.5.1 requester side).
    pub(crate) fn rc_handle_response(&mut self, now: Nanos, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) {
            self.counters.wrong_state_drops += 1;
            return;
        }
        let p = pkt.bth.psn;
        // Responses for PSNs never sent ("ghosts") or already acknowledged are ignored.
        if psn::diff(p, self.req.max_sent) >= 0 || psn::diff(p, self.req.una) < 0 {
            self.counters.stale_responses += 1;
            return;
        }
        if let Some(aeth) = pkt.aeth {
            self.update_credits(aeth);
        }
        let op = pkt.bth.opcode.operation();
        match op {
            Operation::Acknowledge => {
                let Some(aeth) = pkt.aeth else { return };
                match aeth.syndrome {
                    Syndrome::Ack { .. } => {
                        self.note_responder_progress(psn::add(p, 1));
                        self.rc_ack_through(now, p, sh);
                    }
                    Syndrome::RnrNak { timer } => {
                        self.counters.rnr_naks_received += 1;
                        self.rc_ack_through(now, psn::add(p, psn::PSN_MASK), sh);
                        if self.state() == QpState::Err {
                            return;
                        }
                        if self.req.rnr_left == 0 {
                            self.fail_head(sh, WcStatus::RnrRetryExcErr, VendorErr::RnrNak);
                            return;
                        }
                        // rnr_retry 7 means "retry forever" (IBA 9.7.5.2.8 / 11.2.4.2).
                        if self.attr.rnr_retry != 7 {
                            self.req.rnr_left -= 1;
                        }
                        self.rewind_to(p);
                        self.req.rnr_wait = true;
                        self.set_timer(TimerKind::Retransmit, None);
                        self.set_timer(TimerKind::Rnr, Some(now.saturating_add(timer.nanos())));
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        self.counters.seq_naks_received += 1;
                        self.note_responder_progress(p);
                        self.rc_ack_through(now, psn::add(p, psn::PSN_MASK), sh);
                        if self.state() != QpState::Err && !self.rc_gap_already_handled(now, p) {
                            self.rc_retry(now, p, RetryCause::SeqNak, sh);
                        }
                    }
                    Syndrome::Nak(code) => {
                        self.rc_ack_through(now, psn::add(p, psn::PSN_MASK), sh);
                        if self.state() == QpState::Err {
                            return;
                        }
                        let status = match code {
                            NakCode::RemoteAccessError => {
                                self.counters.remote_access_errors += 1;
                                WcStatus::RemAccessErr
                            }
                            NakCode::RemoteOperationalError => {
                                self.counters.remote_operational_errors += 1;
                                WcStatus::RemOpErr
                            }
                            NakCode::InvalidRdRequest => {
                                self.counters.invalid_requests += 1;
                                WcStatus::RemInvRdReqErr
                            }
                            _ => {
                                self.counters.invalid_requests += 1;
                                WcStatus::RemInvReqErr
                            }
                        };
                        if self.is_eec() {
                            // RD: the message fails, the EEC carries on after a RESYNC.
                            self.eec_fail_message(sh, status);
                        } else {
                            self.fail_head(sh, status, VendorErr::RemoteNak);
                        }
                    }
                    Syndrome::Reserved(_) => self.counters.stale_responses += 1,
                }
            }
            Operation::ReadResponseFirst
            | Operation::ReadResponseMiddle
            | Operation::ReadResponseLast
            | Operation::ReadResponseOnly => self.rc_read_response(now, pkt, sh),
            Operation::AtomicAcknowledge => self.rc_atomic_ack(now, pkt, sh),
            _ => self.counters.stale_responses += 1,
        }
        self.check_drained(sh);
    }

    /// The responder confirmed receiving everything before `confirmed` (an ACK for
    /// `confirmed - 1`, or a sequence NAK expecting `confirmed`). If that is further than
    /// before, the connection makes progress even when completions cannot (an earlier READ
    /// is still missing responses), so the retry counter starts again (IBA 9.7.6.1.3 counts
    /// retries without progress).
    fn note_responder_progress(&mut self, confirmed: u32) {
        if psn::diff(confirmed, self.req.confirmed) > 0 {
            self.req.confirmed = confirmed;
            self.req.retry_left = self.attr.retry_cnt;
        }
    }

    /// Takes the end-to-end credits of a positive AETH: LSN = MSN + credits (IBA 9.7.7.2),
    /// never moving backwards; code 31 switches credit checks off.
    fn update_credits(&mut self, aeth: AethRepr) {
        let Syndrome::Ack { credit } = aeth.syndrome else {
            return;
        };
        match credit.wqes() {
            None => self.req.unlimited_credit = true,
            Some(n) => {
                let lsn = psn::add(aeth.msn, n);
                if !self.req.credits_known || psn::diff(lsn, self.req.lsn) > 0 {
                    self.req.lsn = lsn;
                }
                self.req.credits_known = true;
            }
        }
    }

    /// Completes every WQE whose PSNs are all <= `p` (IBA 9.7.5.1.2: an ACK acknowledges
    /// all earlier PSNs). A fully covered READ/atomic without its response means the
    /// response was lost: go back to it (implicit NAK).
    fn rc_ack_through(&mut self, now: Nanos, p: u32, sh: &mut Shared) {
        let before = self.req.una;
        while self.sq.started > 0 {
            let w = &self.sq.wqes[0];
            if psn::diff(w.last_psn(), p) > 0 {
                if !w.opcode.is_read_or_atomic() && psn::diff(p, w.first_psn) >= 0 {
                    self.req.una = psn::add(p, 1);
                }
                break;
            }
            if w.opcode.is_read_or_atomic() {
                let resume = psn::add(w.first_psn, w.read_done);
                if !self.req.recovering {
                    self.rc_retry(now, resume, RetryCause::Implicit, sh);
                }
                break;
            }
            let w = self.sq.pop_head().expect("started > 0");
            self.req.una = psn::add(w.last_psn(), 1);
            self.req.tx_idx = self.req.tx_idx.saturating_sub(1);
            self.retire_send(sh, w, WcStatus::Success, VendorErr::None);
        }
        if self.req.una != before {
            self.progress(now);
        }
    }

    /// Forward progress: reset the retry counters, restart the ACK timer, and move a cursor
    /// that fell behind the acknowledged point.
    fn progress(&mut self, now: Nanos) {
        self.req.recovering = false;
        self.rc_note_progress(now, u32::MAX);
        if psn::diff(self.req.una, self.req.confirmed) > 0 {
            self.req.confirmed = self.req.una;
        }
        self.req.retry_left = self.attr.retry_cnt;
        self.req.rnr_left = self.attr.rnr_retry;
        if psn::diff(self.req.tx_psn, self.req.una) < 0 {
            self.rewind_to(self.req.una);
        }
        let outstanding = psn::diff(self.req.max_sent, self.req.una) > 0;
        let t = if outstanding && !self.req.rnr_wait {
            local_ack_timeout(self.attr.timeout).map(|t| now.saturating_add(t))
        } else {
            None
        };
        self.set_timer(TimerKind::Retransmit, t);
        self.rc_arm_stall_check(now);
    }

    /// Points the transmit cursor at PSN `p` (go-back-N; IBA 9.7.5.1.3), but never past
    /// the oldest unacknowledged PSN: a NAK for a later PSN cannot skip an earlier READ
    /// whose responses are still missing.
    fn rewind_to(&mut self, p: u32) {
        let p = if psn::diff(p, self.req.una) > 0 {
            self.req.una
        } else {
            p
        };
        for i in 0..self.sq.started {
            let w = &self.sq.wqes[i];
            let d = psn::diff(p, w.first_psn);
            if d >= 0 && (d as u32) < w.npsn {
                self.req.tx_idx = i;
                self.req.tx_psn = if w.opcode == WrOpcode::RdmaRead {
                    psn::add(w.first_psn, w.read_done)
                } else {
                    p
                };
                return;
            }
        }
        self.req.tx_idx = self.sq.started;
        self.req.tx_psn = self.req.sq_psn;
    }

    /// Goes back to `q` for a deferred sequence NAK, counting the retry it stands for.
    pub(crate) fn rc_go_back_for_nak(&mut self, now: Nanos, q: u32, sh: &mut Shared) {
        self.rc_retry(now, q, RetryCause::SeqNak, sh);
    }

    /// Resends from `q` (at most the oldest unacknowledged PSN) for a deferred gap or a
    /// stalled resend pass (`rc/recovery.rs`), without counting a retry or touching the
    /// local ACK timer.
    pub(crate) fn rc_resend_quietly(&mut self, now: Nanos, q: u32) {
        self.rewind_to(q);
        self.req.recovering = true;
        let from = self.req.tx_psn;
        self.rc_note_go_back(now, from, Burst::Gap);
    }

    /// Retries from `p`, or fails the head WQE when retry_cnt is exhausted (IBA 9.7.6.1.3).
    /// The resend is paced (`rc/recovery.rs`).
    fn rc_retry(&mut self, now: Nanos, p: u32, cause: RetryCause, sh: &mut Shared) {
        if self.req.retry_left == 0 {
            let vendor = if cause == RetryCause::Timeout {
                VendorErr::AckTimeout
            } else {
                VendorErr::RemoteNak
            };
            self.fail_head(sh, WcStatus::RetryExcErr, vendor);
            return;
        }
        self.req.retry_left -= 1;
        self.rewind_to(p);
        self.req.recovering = true;
        let burst = if cause == RetryCause::Timeout {
            Burst::Timeout
        } else {
            Burst::Gap
        };
        let from = self.req.tx_psn;
        self.rc_note_go_back(now, from, burst);
        // Re-armed by the first retransmitted packet.
        self.set_timer(TimerKind::Retransmit, None);
    }

    /// The local ACK timer expired.
    pub(crate) fn rc_ack_timeout(&mut self, now: Nanos, sh: &mut Shared) {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd)
            || psn::diff(self.req.max_sent, self.req.una) <= 0
        {
            return;
        }
        self.counters.local_ack_timeouts += 1;
        let una = self.req.una;
        self.rc_retry(now, una, RetryCause::Timeout, sh);
    }

    /// The RNR wait is over: resume sending from the RNR NAKed PSN.
    pub(crate) fn rc_rnr_timer_expired(&mut self) {
        self.req.rnr_wait = false;
    }

    /// Completes the head WQE with `status` and moves the QP to ERR (which flushes the rest).
    fn fail_head(&mut self, sh: &mut Shared, status: WcStatus, vendor: VendorErr) {
        if let Some(w) = self.sq.pop_head() {
            self.complete_send(sh, &w, status, vendor);
        }
        self.enter_error(sh, true);
    }

    /// Places one RDMA READ response packet (IBA 9.7.5.1.6 / 9.4.4 ordering rules).
    fn rc_read_response(&mut self, now: Nanos, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        let p = pkt.bth.psn;
        // A read response implicitly acknowledges everything before it.
        self.rc_ack_through(now, psn::add(p, psn::PSN_MASK), sh);
        if self.state() == QpState::Err || self.sq.started == 0 {
            return;
        }
        if self.sq.wqes[0].opcode == WrOpcode::AtomicWrite {
            self.rc_atomic_write_response(now, pkt, sh);
            return;
        }
        let mtu = self.attr.path_mtu.bytes();
        let w = &self.sq.wqes[0];
        let d = psn::diff(p, w.first_psn);
        if w.opcode != WrOpcode::RdmaRead || d < 0 || d as u32 >= w.npsn {
            self.counters.stale_responses += 1;
            return;
        }
        let expected = psn::add(w.first_psn, w.read_done);
        let gap = psn::diff(p, expected);
        if gap < 0 {
            self.counters.stale_responses += 1;
            return;
        }
        if gap > 0 {
            // A response was lost: re-request the read from the missing PSN, once.
            self.counters.out_of_sequence_drops += 1;
            if !self.req.recovering {
                self.rc_retry(now, expected, RetryCause::SeqNak, sh);
            }
            return;
        }
        self.req.recovering = false;
        let is_last = p == w.last_psn();
        let done_bytes = w.read_done as u64 * mtu as u64;
        let want_len = if is_last {
            w.length - done_bytes.min(w.length)
        } else {
            mtu as u64
        };
        let op = pkt.bth.opcode.operation();
        let op_ok = if is_last {
            matches!(
                op,
                Operation::ReadResponseLast | Operation::ReadResponseOnly
            )
        } else {
            matches!(
                op,
                Operation::ReadResponseFirst | Operation::ReadResponseMiddle
            )
        };
        if !op_ok || pkt.payload.len() as u64 != want_len {
            self.fail_head(sh, WcStatus::BadRespErr, VendorErr::ReadResponseLength);
            return;
        }
        if let Err(fault) = dma::scatter(
            &mut sh.mrs,
            w.pd_or(self.pd),
            &w.sges,
            done_bytes,
            pkt.payload,
        ) {
            self.fail_head(sh, WcStatus::LocProtErr, local_vendor(fault));
            return;
        }
        let w = &mut self.sq.wqes[0];
        w.read_done += 1;
        self.req.una = psn::add(p, 1);
        if is_last {
            let w = self.sq.pop_head().expect("head exists");
            self.req.tx_idx = self.req.tx_idx.saturating_sub(1);
            self.req.rd_atomic_out = self.req.rd_atomic_out.saturating_sub(1);
            self.complete_send(sh, &w, WcStatus::Success, VendorErr::None);
        }
        self.progress(now);
    }

    /// Completes an ATOMIC WRITE at the head of the queue on its response: an RDMA READ
    /// response Only without payload for the request's PSN (IBA 1.5; rxe answers so).
    /// Anything else for that PSN is a bad response.
    fn rc_atomic_write_response(&mut self, now: Nanos, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        let p = pkt.bth.psn;
        if self.sq.wqes[0].first_psn != p {
            self.counters.stale_responses += 1;
            return;
        }
        if pkt.bth.opcode.operation() != Operation::ReadResponseOnly || !pkt.payload.is_empty() {
            self.fail_head(sh, WcStatus::BadRespErr, VendorErr::ReadResponseLength);
            return;
        }
        self.req.recovering = false;
        let w = self.sq.pop_head().expect("head exists");
        self.req.tx_idx = self.req.tx_idx.saturating_sub(1);
        self.req.rd_atomic_out = self.req.rd_atomic_out.saturating_sub(1);
        self.req.una = psn::add(p, 1);
        self.complete_send(sh, &w, WcStatus::Success, VendorErr::None);
        self.progress(now);
    }

    /// Stores an atomic's original value into the local buffer (little-endian, as the
    /// host CPU would) and completes it.
    fn rc_atomic_ack(&mut self, now: Nanos, pkt: &PacketRepr<'_>, sh: &mut Shared) {
        let p = pkt.bth.psn;
        self.rc_ack_through(now, psn::add(p, psn::PSN_MASK), sh);
        if self.state() == QpState::Err || self.sq.started == 0 {
            return;
        }
        let w = &self.sq.wqes[0];
        let Some(ack) = pkt.atomic_ack_eth else {
            return;
        };
        if !w.opcode.is_atomic() || w.first_psn != p {
            self.counters.stale_responses += 1;
            return;
        }
        self.req.recovering = false;
        let bytes = ack.orig_remote_data.to_le_bytes();
        if let Err(fault) = dma::scatter(&mut sh.mrs, w.pd_or(self.pd), &w.sges, 0, &bytes) {
            self.fail_head(sh, WcStatus::LocProtErr, local_vendor(fault));
            return;
        }
        let w = self.sq.pop_head().expect("head exists");
        self.req.tx_idx = self.req.tx_idx.saturating_sub(1);
        self.req.rd_atomic_out = self.req.rd_atomic_out.saturating_sub(1);
        self.req.una = psn::add(p, 1);
        self.complete_send(sh, &w, WcStatus::Success, VendorErr::None);
        self.progress(now);
    }
}

/// The SEND / WRITE operation for a packet at position (first, last) of `w`, filling the
/// extension headers that go with it.
fn data_operation(w: &SendWqe, first: bool, last: bool, repr: &mut PacketRepr<'_>) -> Operation {
    use Operation as O;
    let only = first && last;
    match w.opcode {
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
            if first {
                repr.reth = Some(RethRepr {
                    va: w.remote_addr,
                    rkey: w.rkey,
                    dma_len: w.length as u32,
                });
            }
            let imm = w.opcode == WrOpcode::RdmaWriteWithImm;
            if last && imm {
                repr.immdt = w.imm;
            }
            match (only, first, last, imm) {
                (true, _, _, false) => O::WriteOnly,
                (true, _, _, true) => O::WriteOnlyImm,
                (false, true, _, _) => O::WriteFirst,
                (false, false, true, false) => O::WriteLast,
                (false, false, true, true) => O::WriteLastImm,
                _ => O::WriteMiddle,
            }
        }
        _ => {
            let imm = w.opcode == WrOpcode::SendWithImm;
            let inv = w.opcode == WrOpcode::SendWithInv;
            if last && imm {
                repr.immdt = w.imm;
            }
            if last && inv {
                repr.ieth = Some(w.inv_rkey);
            }
            match (only, first, last) {
                (true, _, _) if imm => O::SendOnlyImm,
                (true, _, _) if inv => O::SendOnlyInv,
                (true, _, _) => O::SendOnly,
                (false, true, _) => O::SendFirst,
                (false, false, true) if imm => O::SendLastImm,
                (false, false, true) if inv => O::SendLastInv,
                (false, false, true) => O::SendLast,
                _ => O::SendMiddle,
            }
        }
    }
}

/// The vendor error detail for a local protection fault.
pub(crate) fn local_vendor(f: crate::memory::LocalAccessFault) -> VendorErr {
    use crate::memory::LocalAccessFault as F;
    match f {
        F::BadLkey => VendorErr::BadLkey,
        F::PdMismatch => VendorErr::PdMismatch,
        F::OutOfBounds => VendorErr::SgeOutOfBounds,
        F::NoLocalWrite => VendorErr::NoLocalWrite,
    }
}
