//! RC requester recovery without blind resends. Go-back-N stays the rule (IBA 9.7.5.1.3:
//! the responder discards every packet after a gap, so the requester resends from the
//! PSN a sequence NAK names, or from the oldest unacknowledged PSN after a local ACK
//! timeout, IBA 9.7.6.1.3), but two things the specification leaves to the requester are
//! done with care:
//!
//! - Which gap signals start a resend. A responder sends one sequence NAK per gap
//!   (IBA 9.7.5.2.2) and a requester sees READ response gaps directly (IBA 9.7.5.1.6), but a
//!   signal that left the responder before the last resend could have reached it says
//!   nothing new: that resend repairs the gap. Such a signal (a NAK or response gap for a
//!   PSN already resent less than a guard time ago, or a second NAK for the PSN the resend
//!   started from) is set aside; a `GapCheck` timer goes back after all if the responder
//!   has not confirmed that PSN by the end of the guard time (the resend was lost too:
//!   the responder will not NAK the same gap again).
//! - How fast a resend goes. A resend pass (up to the highest PSN sent before it) may
//!   have only `cwnd` packets beyond the oldest unacknowledged PSN, starting small and
//!   growing by every packet acknowledged, like TCP slow start (RFC 5681). An ACK that
//!   shows the responder already has later packets (the gap was only reordering) moves
//!   the cursor past them, so a reorder costs a few packets, not the whole window; a slow
//!   responder is not flooded after a timeout. AckReq goes on the packet that fills
//!   `cwnd` (see `rc_poll_request`), so the ACK that opens it comes back.
//!
//! - A resend pass that stalls. Until the responder has acknowledged the whole pass, every
//!   resent packet and every acknowledgement arms `GapCheck` one guard time ahead; if it
//!   expires with nothing acknowledged meanwhile, a resent packet (or the ACK that would
//!   open `cwnd`) was lost and the responder, having NAKed that gap once, stays silent: go
//!   back to the oldest unacknowledged PSN instead of waiting for the local ACK timeout.
//!
//! The guard time is the smoothed round-trip time plus four deviations (RFC 6298), at
//! least twice the smoothed RTT, measured from one probe packet at a time (timed from its
//! latest copy).
//! Before the first sample there is no guard: every gap signal goes back at once.

use crate::psn;
use crate::qp::{Qp, TimerKind};
use crate::shared::Shared;
use crate::time::{local_ack_timeout, Nanos};
use crate::verbs::QpState;

/// Packets a resend after a sequence NAK or a READ response gap may have out at first.
const NAK_BURST: u32 = 16;
/// Packets a resend after a local ACK timeout may have out at first: the peer may be slow
/// (that is one reason for a timeout), so start gently.
const TIMEOUT_BURST: u32 = 4;

/// Why the requester goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Burst {
    /// After a sequence NAK, a READ response gap or an implicit NAK.
    Gap,
    /// After a local ACK timeout.
    Timeout,
}

impl Qp {
    /// The send window now: `max_unacked` normally, at most `cwnd` during a resend pass.
    pub(crate) fn rc_effective_window(&self, max_unacked: u32) -> u32 {
        let r = &self.req.rec;
        if r.paced && r.at.is_some() && psn::diff(self.req.tx_psn, r.end) < 0 {
            max_unacked.min(r.cwnd.max(1))
        } else {
            max_unacked
        }
    }

    /// How long after a go-back a gap signal may still predate it.
    fn rc_guard(&self) -> Nanos {
        let r = &self.req.rec;
        if r.srtt == 0 {
            return 0;
        }
        let g = r.srtt.saturating_add(4 * r.rttvar).max(2 * r.srtt);
        match local_ack_timeout(self.attr.timeout) {
            Some(t) => g.min(t / 2),
            None => g,
        }
    }

    /// A go-back from `from` starts now: a new resend pass.
    pub(crate) fn rc_note_go_back(&mut self, now: Nanos, from: u32, burst: Burst) {
        let r = &mut self.req.rec;
        r.from = from;
        r.at = Some(now);
        r.end = self.req.max_sent;
        r.cwnd = match burst {
            Burst::Gap => NAK_BURST,
            Burst::Timeout => TIMEOUT_BURST,
        };
        r.grown_at = self.req.una;
        if r.deferred.is_some_and(|d| psn::diff(d, from) >= 0) {
            r.deferred = None;
            self.set_timer(TimerKind::GapCheck, None);
        }
    }

    /// Acknowledged progress: grow `cwnd` by the packets acknowledged and take an RTT
    /// sample if the probe is acknowledged.
    pub(crate) fn rc_note_progress(&mut self, now: Nanos, max_unacked: u32) {
        let una = self.req.una;
        let r = &mut self.req.rec;
        let acked = psn::diff(una, r.grown_at);
        if acked > 0 {
            r.cwnd = r.cwnd.saturating_add(acked as u32).min(max_unacked.max(1));
            r.grown_at = una;
        }
        if let Some((p, sent)) = r.probe {
            if psn::diff(una, p) > 0 {
                r.probe = None;
                let sample = now.saturating_sub(sent);
                if r.srtt == 0 {
                    r.srtt = sample;
                    r.rttvar = sample / 2;
                } else {
                    let dev = r.srtt.abs_diff(sample);
                    r.rttvar = (3 * r.rttvar + dev) / 4;
                    r.srtt = (7 * r.srtt + sample) / 8;
                }
            }
        }
    }

    /// Packets `p..next` are being sent again at `now`. A probe among them is timed from
    /// this copy: the acknowledgement cannot tell which copy it answers (Karn), and
    /// dropping the probe instead would leave a connection that goes back on every burst
    /// (heavy reordering) without any sample, so without a guard. An early original can
    /// make the sample short; the guard's floor of twice the smoothed RTT absorbs that.
    pub(crate) fn rc_note_resent(&mut self, now: Nanos, p: u32, next: u32) {
        if let Some((probe, _)) = self.req.rec.probe {
            if psn::diff(probe, p) >= 0 && psn::diff(probe, next) < 0 {
                self.req.rec.probe = Some((probe, now));
            }
        }
    }

    /// A new (never sent before) packet left at `now`: it becomes the RTT probe if none is
    /// out. Any acknowledgement or sequence NAK confirming it ends the measurement (an
    /// ACK withheld until a later AckReq packet only lengthens the sample: a longer guard).
    pub(crate) fn rc_note_new_packet(&mut self, now: Nanos, p: u32) {
        if self.req.rec.probe.is_none() {
            self.req.rec.probe = Some((p, now));
        }
    }

    /// Does a gap signal for PSN `q` (a sequence NAK expecting it, or a READ response or
    /// implicit NAK showing it missing) say nothing the current resend pass does not
    /// already repair? True for a PSN this pass resent less than a guard time ago, and for
    /// a repeated NAK of the PSN the pass started from (one NAK per gap, IBA 9.7.5.2.2: a
    /// second one is a duplicate on the wire). Such a signal is deferred, not acted on.
    pub(crate) fn rc_gap_already_handled(&mut self, now: Nanos, q: u32) -> bool {
        let r = self.req.rec;
        let Some(at) = r.at.filter(|_| r.paced) else {
            return false;
        };
        // Not for a READ or atomic at the head: `rc_gap_check` does not resend those.
        if self.head_waits_for_responses() {
            return false;
        }
        // Resent by this pass: from where it went back up to its cursor, but never beyond
        // its end; a PSN past the end went out for the first time after the go-back, so a
        // gap signal for it cannot predate the pass.
        let cursor = if psn::diff(self.req.tx_psn, r.end) < 0 {
            self.req.tx_psn
        } else {
            r.end
        };
        let resent = psn::diff(q, r.from) >= 0 && psn::diff(q, cursor) < 0;
        if !resent {
            return false;
        }
        let guard = self.rc_guard();
        let check_at = if now < at.saturating_add(guard) {
            at.saturating_add(guard)
        } else if q == r.from && self.req.recovering {
            now.saturating_add(guard)
        } else {
            return false;
        };
        // Keep the latest signal: a sequence NAK expecting `q` confirms every PSN before
        // it, so an earlier deferred PSN is repaired and only `q` can still be missing
        // (a resend goes back to the oldest unacknowledged PSN in any case, so a later
        // READ response gap loses nothing either).
        let d = match r.deferred {
            Some(d) if psn::diff(d, q) > 0 => d,
            _ => q,
        };
        self.req.rec.deferred = Some(d);
        if self.timer(TimerKind::GapCheck).is_none_or(|t| t > check_at) {
            self.set_timer(TimerKind::GapCheck, Some(check_at));
        }
        true
    }

    /// Arms `GapCheck` one guard time from `now` while a resend pass is not yet
    /// acknowledged in full (a resent packet with AckReq left, or an acknowledgement
    /// arrived).
    pub(crate) fn rc_arm_stall_check(&mut self, now: Nanos) {
        let r = self.req.rec;
        let guard = self.rc_guard();
        if !r.paced || r.at.is_none() || guard == 0 || psn::diff(self.req.una, r.end) >= 0 {
            return;
        }
        self.req.rec.check_una = self.req.una;
        let at = now.saturating_add(guard);
        // A deferred gap keeps its earlier deadline.
        if r.deferred.is_none() || self.timer(TimerKind::GapCheck).is_none() {
            self.set_timer(TimerKind::GapCheck, Some(at));
        }
    }

    /// Is the oldest outstanding WQE a READ or atomic, answered from the responder's
    /// response queue?
    fn head_waits_for_responses(&self) -> bool {
        self.sq.started > 0 && self.sq.wqes[0].opcode.is_read_or_atomic()
    }

    /// The `GapCheck` timer: a deferred gap the responder still has not confirmed was
    /// not repaired by the resend (it was lost too), and the responder will not NAK it
    /// again, so go back to it now rather than wait for the local ACK timeout.
    pub(crate) fn rc_gap_check(&mut self, now: Nanos, sh: &mut Shared) {
        let una = self.req.una;
        if !matches!(self.state(), QpState::Rts | QpState::Sqd)
            || self.req.rnr_wait
            || psn::diff(self.req.max_sent, una) <= 0
        {
            self.req.rec.deferred = None;
            return;
        }
        // A READ or atomic at the head is answered from the responder's response queue,
        // behind every response queued before it (IBA 9.7.5.2.3 keeps them in order), so
        // its silence for a round trip proves no loss, and a resend would only queue one
        // more replay there: only a deferred NAK resends it, as that NAK would have.
        let head_waits = self.head_waits_for_responses();
        match self.req.rec.deferred.take() {
            Some(q) if psn::diff(una, q) <= 0 && head_waits => self.rc_go_back_for_nak(now, q, sh),
            // A deferred sequence NAK the responder has not confirmed yet, or no
            // acknowledgement since the check was armed (the pass stalled). Neither is a
            // local ACK timeout, and the NAK was already answered by the pass, so this
            // costs no retry (IBA 9.7.6.1.3 counts timeouts and NAKs) and leaves the ACK
            // timer running: a peer that stays silent still fails the WQE after retry_cnt
            // timeouts, and delayed responses cannot exhaust it early.
            Some(q) if psn::diff(una, q) <= 0 => self.rc_resend_quietly(now, q),
            _ if head_waits => {}
            _ if self.req.rec.check_una == una => self.rc_resend_quietly(now, una),
            _ => self.rc_arm_stall_check(now),
        }
        self.check_drained(sh);
    }
}
