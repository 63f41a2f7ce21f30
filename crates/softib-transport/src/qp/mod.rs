//! Queue pairs: the per-QP state the protocol modules (`rc`, `uc`, `ud`) work on.

pub(crate) mod local_ops;
pub(crate) mod modify;
pub(crate) mod recv_queue;
pub(crate) mod send_queue;
pub(crate) mod state;
pub(crate) mod write_cursor;

use std::collections::VecDeque;

use softib_wire::Syndrome;

use crate::counters::QpCounters;
use crate::events::AsyncEvent;
use crate::shared::{PathInfo, RxMeta, Shared, Transmit};
use crate::time::Nanos;
use crate::verbs::{
    CqHandle, PdHandle, QpAttr, QpInitAttr, QpState, QpType, SrqHandle, VendorErr, WcFlags,
    WcOpcode, WcStatus, WorkCompletion,
};
use recv_queue::{RecvQueue, RecvWqe};
use send_queue::{SendQueue, SendWqe};

/// The per-QP timers (quinn-proto style: a fixed table indexed by an enum; the device keeps
/// a heap over all QPs' entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// RC local ACK timeout (IBA 9.7.6.1.3).
    Retransmit = 0,
    /// RC RNR wait before retrying (IBA 9.7.5.2.8).
    Rnr = 1,
    /// Congestion control: paced packets wait until it expires (`cc/engine.rs`).
    Pacing = 2,
    /// RC: a gap signal was set aside as older than the last go-back; when this expires
    /// the requester checks whether the go-back repaired that gap (`rc/recovery.rs`).
    GapCheck = 3,
}

impl TimerKind {
    pub const COUNT: usize = 4;
    pub const ALL: [TimerKind; 4] = [
        TimerKind::Retransmit,
        TimerKind::Rnr,
        TimerKind::Pacing,
        TimerKind::GapCheck,
    ];
}

/// RC/UC/UD requester progress (the send side).
#[derive(Clone, Debug, Default)]
pub(crate) struct Requester {
    /// Next PSN to assign to a new message.
    pub sq_psn: u32,
    /// Oldest PSN not yet acknowledged (RC).
    pub una: u32,
    /// WQE index of the next packet to transmit.
    pub tx_idx: usize,
    /// PSN of the next packet to transmit.
    pub tx_psn: u32,
    /// One past the highest PSN ever transmitted (anything below is a retransmission).
    pub max_sent: u32,
    /// Transport retries left (reset on forward progress).
    pub retry_left: u8,
    /// RNR retries left (reset on forward progress; 7 means infinite).
    pub rnr_left: u8,
    /// Started RDMA READs and atomics not yet completed (bounded by max_rd_atomic).
    pub rd_atomic_out: u32,
    /// Waiting for the RNR timer: nothing is sent.
    pub rnr_wait: bool,
    /// Packets since the last AckReq (for periodic AckReq in long messages).
    pub since_ack_req: u32,
    /// Went back already: out-of-order responses are ignored until the expected PSN
    /// arrives, so one loss causes one rewind (not one per later packet).
    pub recovering: bool,
    /// The next WQE failed its local buffer check; it fails once it reaches the head.
    pub blocked_local_error: bool,
    /// Send sequence number of the last started WQE (IBA 9.7.7.2: every WQE has one).
    pub ssn: u32,
    /// Limit sequence number: the last AETH's MSN + its credit count.
    pub lsn: u32,
    /// Everything before this PSN is known to have reached the responder.
    pub confirmed: u32,
    /// An AETH with a credit count arrived: until then the requester cannot know the
    /// responder's receive queue and does not throttle (the first RNR NAK or ACK teaches it).
    pub credits_known: bool,
    /// The responder advertised credit code 31 (no end-to-end flow control, e.g. an SRQ).
    pub unlimited_credit: bool,
    /// Go-back-N pacing and gap-signal bookkeeping (`rc/recovery.rs`).
    pub rec: crate::rc::recovery_state::Recovery,
}

/// A message being received by the responder.
#[derive(Clone, Debug)]
pub(crate) enum InMessage {
    /// SEND: the receive WQE it fills, and how far.
    Send { wqe: RecvWqe, offset: u64 },
    /// RDMA WRITE: the region (by key) and where the next byte goes.
    Write(write_cursor::WriteCursor),
}

/// An RC responder output, kept in PSN order (ACKs must not overtake read responses).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Response {
    /// ACK, NAK or RNR NAK for `psn`.
    Ack {
        psn: u32,
        syndrome: Syndrome,
        msn: u32,
    },
    /// A stream of read response packets: next PSN `psn`, last `last_psn`, from region
    /// `key` at `offset` (`remaining` bytes left); `first` if the next one starts the stream.
    Read {
        psn: u32,
        last_psn: u32,
        key: u32,
        offset: u64,
        remaining: u64,
        first: bool,
        msn: u32,
        /// Answers a duplicate request (does not count against max_dest_rd_atomic).
        replay: bool,
    },
    /// ATOMIC ACKNOWLEDGE with the original value.
    Atomic {
        psn: u32,
        orig: u64,
        msn: u32,
        /// Answers a duplicate request.
        replay: bool,
    },
}

/// A saved READ / atomic (responder resource, IBA 9.7.5.1.4 / max_dest_rd_atomic), kept
/// to answer duplicates without executing them again.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Resource {
    Read {
        first_psn: u32,
        last_psn: u32,
    },
    Atomic {
        psn: u32,
        orig: u64,
    },
    /// An ATOMIC WRITE already carried out: a duplicate is answered, never applied again.
    AtomicWrite {
        psn: u32,
    },
}

/// Responder progress (the receive side).
#[derive(Clone, Debug, Default)]
pub(crate) struct Responder {
    /// Expected PSN.
    pub epsn: u32,
    /// Message sequence number: messages completed (IBA 9.7.6.1.1).
    pub msn: u32,
    /// A PSN-sequence or RNR NAK was sent for the current gap; stay quiet until `epsn` arrives.
    pub nak_sent: bool,
    /// The first packet arrived (CommEstablished raised).
    pub established: bool,
    pub msg: Option<InMessage>,
    pub queue: VecDeque<Response>,
    pub resources: VecDeque<Resource>,
}

/// One queue pair.
pub(crate) struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: PdHandle,
    pub send_cq: CqHandle,
    pub recv_cq: CqHandle,
    pub srq: Option<SrqHandle>,
    /// XRC target QPs: their domain (the SRQ, PD and CQ come per request from the XRCETH).
    pub xrcd: Option<crate::verbs::XrcdHandle>,
    pub sq_sig_all: bool,
    /// Current attributes; `attr.qp_state` is the state.
    pub attr: QpAttr,
    pub sq: SendQueue,
    pub rq: RecvQueue,
    pub req: Requester,
    pub resp: Responder,
    pub counters: QpCounters,
    /// Deadline of each timer.
    pub timers: [Option<Nanos>; TimerKind::COUNT],
    /// Earliest deadline this QP has in the device heap per timer (lazy invalidation).
    pub heap_time: [Option<Nanos>; TimerKind::COUNT],
    /// In the device's transmit round-robin.
    pub scheduled: bool,
    /// SQD finished draining and the event (if asked) went out.
    pub drained: bool,
    /// Congestion control state (pacing, CCA / DCQCN, pending CNP / BECN).
    pub cc: crate::cc::QpCc,
    /// Reliable datagram: an RD QP's domain, or an EEC's state (`rd/`).
    pub rd: Option<crate::rd::state::RdRole>,
}

impl Qp {
    pub fn new(qpn: u32, pd: PdHandle, init: &QpInitAttr) -> Self {
        let attr = QpAttr {
            cap: init.cap,
            ..QpAttr::default()
        };
        Qp {
            qpn,
            qp_type: init.qp_type,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            xrcd: None,
            sq_sig_all: init.sq_sig_all,
            attr,
            sq: SendQueue::new(init.cap.max_send_wr),
            rq: RecvQueue::new(if init.srq.is_some() {
                0
            } else {
                init.cap.max_recv_wr
            }),
            req: Requester::default(),
            resp: Responder::default(),
            counters: QpCounters::default(),
            timers: [None; TimerKind::COUNT],
            heap_time: [None; TimerKind::COUNT],
            scheduled: false,
            drained: false,
            cc: crate::cc::QpCc::default(),
            rd: None,
        }
    }

    /// The memory this QP's state holds ([`crate::footprint`]).
    pub fn footprint(&self) -> crate::footprint::QpFootprint {
        use crate::footprint::slots;
        crate::footprint::QpFootprint {
            fixed: std::mem::size_of::<Qp>(),
            send_queue: self.sq.heap_bytes(),
            recv_queue: self.rq.heap_bytes(),
            responder: slots::<Response>(self.resp.queue.capacity())
                + slots::<Resource>(self.resp.resources.capacity()),
            congestion: self.cc.heap_bytes(),
        }
    }

    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// True when a received packet of a connected service (RC, UC, XRC) comes from this
    /// QP's peer: with a GRH (RoCEv2,
    /// routed IB) its source GID is the address vector's destination GID and its
    /// destination GID is the device's own (any, for a device bound to the unspecified
    /// address); without one (native IB in a subnet) its SLID is the address vector's DLID.
    /// RoCEv2 senders choose their UDP source port, so it is not part of the rule.
    pub fn is_from_peer(&self, config: &crate::config::DeviceConfig, meta: &RxMeta) -> bool {
        match (self.attr.ah_attr.grh, meta.grh) {
            (Some(av), Some(rx)) => {
                rx.sgid == av.dgid && (rx.dgid == config.gid || is_unspecified(&config.gid))
            }
            (None, None) => meta.slid == self.attr.ah_attr.dlid,
            // A GRH where the peer sends none, or none where it must: not the peer.
            _ => false,
        }
    }

    /// The BTH service of this QP's RC-style packets: XRC QPs send XRC opcodes (requests
    /// and responses, IBA Annex A14), RC QPs RC ones.
    pub fn rc_service(&self) -> softib_wire::Service {
        if self.is_eec() {
            softib_wire::Service::Rd
        } else if self.qp_type.is_xrc() {
            softib_wire::Service::Xrc
        } else {
            softib_wire::Service::Rc
        }
    }

    /// The peer's address for RC/UC packets.
    pub fn path(&self) -> PathInfo {
        PathInfo {
            dlid: self.attr.ah_attr.dlid,
            sl: self.attr.ah_attr.sl,
            grh: self.attr.ah_attr.grh,
        }
    }

    pub fn set_timer(&mut self, kind: TimerKind, at: Option<Nanos>) {
        self.timers[kind as usize] = at;
    }

    pub fn timer(&self, kind: TimerKind) -> Option<Nanos> {
        self.timers[kind as usize]
    }

    /// True when `poll_transmit` may produce a packet for this QP now.
    pub fn has_work(&self, sh: &Shared) -> bool {
        if self.cc_unpaced_work() {
            return true;
        }
        if self.cc_gated() {
            return false;
        }
        if !self.resp.queue.is_empty() {
            return true;
        }
        match self.qp_type {
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv => self.rc_has_request_work(sh),
            QpType::Uc | QpType::Ud => self.unreliable_has_work(),
            // An RD QP sends nothing itself: its WQEs wait on their EECs.
            QpType::Rd => self.is_eec() && self.rc_has_request_work(sh),
        }
    }

    /// Produces the next packet of this QP into `buf`.
    pub fn poll_transmit(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        sh: &mut Shared,
    ) -> Option<Transmit> {
        if self.cc_gated() {
            // Paced: only acknowledgements leave (the CNP is sent by the device).
            if self.cc_unpaced_response() {
                return self.rc_poll_response(buf, sh);
            }
            return None;
        }
        if self.runs_rc() {
            if let Some(t) = self.rc_poll_response(buf, sh) {
                return Some(t);
            }
            self.rc_poll_request(now, buf, sh)
        } else {
            self.unreliable_poll_send(buf, sh)
        }
    }

    /// A timer of this QP expired.
    pub fn handle_timer(&mut self, now: Nanos, kind: TimerKind, sh: &mut Shared) {
        self.set_timer(kind, None);
        match kind {
            TimerKind::Pacing => self.cc_pacing_expired(now, sh),
            TimerKind::Retransmit if self.runs_rc() => self.rc_ack_timeout(now, sh),
            TimerKind::Rnr if self.runs_rc() => self.rc_rnr_timer_expired(),
            TimerKind::GapCheck if self.runs_rc() => self.rc_gap_check(now, sh),
            TimerKind::Retransmit | TimerKind::Rnr | TimerKind::GapCheck => {}
        }
    }

    /// [`Qp::complete_send`] for a WQE that left the send queue for good: its inline buffer
    /// goes back to the device's pool (`wqe_pool.rs`) instead of being freed on the receive
    /// path of the ACK that finished it.
    pub fn retire_send(
        &mut self,
        sh: &mut Shared,
        w: SendWqe,
        status: WcStatus,
        vendor: VendorErr,
    ) {
        self.complete_send(sh, &w, status, vendor);
        if let Some(buffer) = w.inline {
            sh.pools.recycle_inline(buffer);
        }
    }

    /// Posts a completion for a send WQE (when signaled, or always for errors).
    pub fn complete_send(
        &mut self,
        sh: &mut Shared,
        wqe: &SendWqe,
        status: WcStatus,
        vendor: VendorErr,
    ) {
        // An EEC completes a WQE at the RD QP that posted it (its CQ, its number).
        let (qp_num, cq, sig_all, src_qp) = match wqe.rd {
            Some(rd) if rd.resync => return,
            Some(rd) => (rd.src_qp, rd.send_cq, rd.sq_sig_all, rd.dest_qpn),
            None => (
                self.qpn,
                self.send_cq,
                self.sq_sig_all,
                self.attr.dest_qp_num,
            ),
        };
        if status == WcStatus::Success && !(wqe.signaled || sig_all) {
            return;
        }
        let wc = WorkCompletion {
            wr_id: wqe.wr_id,
            status,
            opcode: wqe.opcode.wc_opcode(),
            byte_len: if status == WcStatus::Success {
                wqe.length as u32
            } else {
                0
            },
            imm_data: None,
            invalidated_rkey: None,
            qp_num,
            src_qp,
            slid: 0,
            sl: 0,
            wc_flags: WcFlags::empty(),
            vendor_err: vendor as u32,
        };
        sh.complete(cq, wc);
    }

    /// Posts a completion for a receive WQE.
    #[allow(clippy::too_many_arguments)]
    pub fn complete_recv(
        &mut self,
        sh: &mut Shared,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        flags: WcFlags,
        imm: Option<u32>,
        inv: Option<u32>,
        src_qp: u32,
        slid: u16,
        sl: u8,
        vendor: VendorErr,
    ) {
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm_data: imm,
            invalidated_rkey: inv,
            qp_num: self.serving_qpn(),
            src_qp,
            slid,
            sl,
            wc_flags: flags,
            vendor_err: vendor as u32,
        };
        sh.complete(self.recv_cq, wc);
    }

    /// Takes the next receive WQE from the SRQ or the QP's own queue.
    pub fn take_recv(&mut self, sh: &mut Shared) -> Option<RecvWqe> {
        match self.srq {
            Some(srq) => sh.take_srq_wqe(srq),
            None => self.rq.pop(),
        }
    }

    /// Puts back a receive WQE a UC message started to use but abandoned (IBA 9.8.2.2: the
    /// WQE is reused by the next message).
    pub fn return_recv(&mut self, sh: &mut Shared, wqe: RecvWqe) {
        match self.srq {
            Some(srq) => sh.return_srq_wqe(srq, wqe),
            None => self.rq.push_front(wqe),
        }
    }

    /// A packet of this QP could not be sent and never will be (see
    /// `Device::transmit_refused`): the oldest outstanding send WR completes with
    /// `LocQpOpErr`, then the QP moves to ERR.
    pub fn fail_transmit(&mut self, sh: &mut Shared) {
        if let Some(w) = self.sq.pop_head() {
            self.complete_send(sh, &w, WcStatus::LocQpOpErr, VendorErr::TransmitRefused);
        }
        self.enter_error(sh, true);
    }

    /// Moves the QP to ERR: every outstanding WR completes with WR_FLUSH_ERR (IBA 10.3.1,
    /// "Error state"). `fatal` raises `AsyncEvent::QpFatal` (a transport error, not a
    /// `modify_qp` by the user).
    pub fn enter_error(&mut self, sh: &mut Shared, fatal: bool) {
        if self.state() == QpState::Err {
            return;
        }
        self.attr.qp_state = QpState::Err;
        self.flush_send(sh);
        self.flush_recv(sh);
        // Only pending ACK/NAKs may still leave (a class C NAK tells the requester why);
        // read responses and atomics stop.
        self.resp
            .queue
            .retain(|r| matches!(r, Response::Ack { .. }));
        self.timers = [None; TimerKind::COUNT];
        if fatal {
            sh.events.push_back(AsyncEvent::QpFatal(self.qpn));
        }
        if self.srq.is_some() {
            sh.events.push_back(AsyncEvent::LastWqeReached(self.qpn));
        }
    }

    /// Completes every send WQE with WR_FLUSH_ERR, oldest first.
    pub fn flush_send(&mut self, sh: &mut Shared) {
        let wqes: Vec<SendWqe> = self.sq.clear().collect();
        for w in &wqes {
            self.complete_send(sh, w, WcStatus::WrFlushErr, VendorErr::Flushed);
        }
        self.req.tx_idx = 0;
        self.req.rd_atomic_out = 0;
        self.req.rnr_wait = false;
        self.req.recovering = false;
    }

    /// Completes every receive WQE of the QP's own queue (and a half-filled one) with WR_FLUSH_ERR.
    pub fn flush_recv(&mut self, sh: &mut Shared) {
        let mut wqes: Vec<RecvWqe> = Vec::new();
        if let Some(InMessage::Send { wqe, .. }) = self.resp.msg.take() {
            wqes.push(wqe);
        }
        wqes.extend(self.rq.drain());
        for w in wqes {
            self.complete_recv(
                sh,
                w.wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                0,
                WcFlags::empty(),
                None,
                None,
                self.peer_qpn(),
                0,
                0,
                VendorErr::Flushed,
            );
        }
    }

    /// Called when send WQEs completed: raises `SqDrained` once the SQD drain finishes.
    pub fn check_drained(&mut self, sh: &mut Shared) {
        if self.state() == QpState::Sqd && !self.drained && self.sq.started == 0 {
            self.drained = true;
            self.attr.sq_draining = false;
            if self.attr.en_sqd_async_notify {
                sh.events.push_back(AsyncEvent::SqDrained(self.qpn));
            }
        }
    }

    /// P_Key match rule (IBA 10.9.3): the low 15 bits equal and at least one full member.
    pub fn pkey_matches(&self, sh: &Shared, pkey: u16) -> bool {
        let Some(&own) = sh.config.pkeys.get(self.attr.pkey_index as usize) else {
            return false;
        };
        (own & 0x7FFF) == (pkey & 0x7FFF) && (own | pkey) & 0x8000 != 0 && own & 0x7FFF != 0
    }

    /// The P_Key this QP sends.
    pub fn pkey(&self, sh: &Shared) -> u16 {
        sh.config
            .pkeys
            .get(self.attr.pkey_index as usize)
            .copied()
            .unwrap_or(0xFFFF)
    }
}

/// The all-zero GID, or the IPv4-mapped 0.0.0.0: a device bound to no particular address.
fn is_unspecified(gid: &[u8; 16]) -> bool {
    gid.iter().all(|&b| b == 0)
        || gid[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff] && gid[12..] == [0; 4]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceConfig;
    use crate::shared::RxGrh;
    use crate::verbs::{CqHandle, GlobalRoute, PdHandle, QpCap, QpInitAttr, QpType};

    fn qp_with_peer(lid: u16, grh: Option<GlobalRoute>) -> Qp {
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: CqHandle(0),
            recv_cq: CqHandle(0),
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        };
        let mut qp = Qp::new(0x11, PdHandle(0), &init);
        qp.attr.ah_attr.dlid = lid;
        qp.attr.ah_attr.grh = grh;
        qp
    }

    #[test]
    fn the_peer_is_its_gid_with_a_grh_and_its_lid_without() {
        let own = DeviceConfig {
            gid: [1; 16],
            ..DeviceConfig::default()
        };
        let peer_gid = [2; 16];
        let routed = qp_with_peer(
            7,
            Some(GlobalRoute {
                dgid: peer_gid,
                ..GlobalRoute::default()
            }),
        );
        let rx = |sgid, dgid, slid| RxMeta {
            slid,
            grh: Some(RxGrh {
                sgid,
                dgid,
                ..RxGrh::default()
            }),
            ..RxMeta::default()
        };
        assert!(routed.is_from_peer(&own, &rx(peer_gid, own.gid, 0)));
        assert!(
            !routed.is_from_peer(&own, &rx([3; 16], own.gid, 0)),
            "a third host"
        );
        assert!(
            !routed.is_from_peer(&own, &rx(peer_gid, [3; 16], 0)),
            "not our address"
        );
        assert!(!routed.is_from_peer(&own, &RxMeta::default()), "no GRH");
        let unbound = DeviceConfig::default();
        assert!(routed.is_from_peer(&unbound, &rx(peer_gid, [3; 16], 0)));

        let local = qp_with_peer(7, None);
        let from_lid = |slid| RxMeta {
            slid,
            ..RxMeta::default()
        };
        assert!(local.is_from_peer(&own, &from_lid(7)));
        assert!(!local.is_from_peer(&own, &from_lid(8)), "another LID");
        assert!(
            !local.is_from_peer(&own, &rx(peer_gid, own.gid, 7)),
            "a GRH it never asked for"
        );
    }
}
