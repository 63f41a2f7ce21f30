//! The requester half of an EEC beyond RC's: a message NAKed with an error fails alone,
//! and a RESYNC realigns the responder before the next one (IBA vol. 1 §9.7.x RESYNC).

use crate::qp::send_queue::SendWqe;
use crate::qp::{Qp, TimerKind};
use crate::rc::xrc::{NO_CQ, NO_PD};
use crate::rd::RdWqe;
use crate::verbs::{VendorErr, WcStatus, WrOpcode};

impl Qp {
    /// The responder NAKed the message in progress with an error: its WR completes with
    /// `status` at its QP, the rest of it is not sent, and a RESYNC goes first before the
    /// next message (the responder drops requests until then).
    pub(crate) fn eec_fail_message(&mut self, sh: &mut crate::shared::Shared, status: WcStatus) {
        if let Some(w) = self.sq.pop_head() {
            self.complete_send(sh, &w, status, VendorErr::RemoteNak);
        }
        // One message in progress: nothing else was started.
        self.req.una = self.req.sq_psn;
        self.req.tx_idx = 0;
        self.req.tx_psn = self.req.sq_psn;
        self.req.rd_atomic_out = 0;
        self.req.recovering = false;
        self.req.rnr_wait = false;
        self.set_timer(TimerKind::Retransmit, None);
        self.set_timer(TimerKind::Rnr, None);
        self.queue_resync();
    }

    /// Puts a RESYNC at the head of this EEC's send queue (before any unstarted message).
    pub(crate) fn queue_resync(&mut self) {
        self.counters.resyncs_sent += 1;
        let sges = self.sq.take_sge_list();
        let at = self.sq.started;
        self.sq.wqes.insert(
            at,
            SendWqe {
                wr_id: 0,
                opcode: WrOpcode::Send,
                sges,
                inline: None,
                signaled: false,
                solicited: false,
                fence: false,
                imm: None,
                inv_rkey: 0,
                remote_addr: 0,
                rkey: 0,
                compare_add: 0,
                swap: 0,
                ud: None,
                bind: None,
                xrc_srqn: 0,
                rd: Some(RdWqe {
                    src_qp: 0,
                    pd: NO_PD,
                    send_cq: NO_CQ,
                    sq_sig_all: false,
                    dest_qpn: 0,
                    qkey: 0,
                    resync: true,
                }),
                length: 0,
                first_psn: 0,
                npsn: 0,
                read_done: 0,
            },
        );
    }
}
