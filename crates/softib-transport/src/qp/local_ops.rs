//! Local send-queue operations: BIND_MW and LOCAL_INV (IBA 10.6.7.2, 10.8.2). They put
//! nothing on the wire and take no PSN, so they cannot be acknowledged; softib runs one
//! when it reaches the head of the send queue (every earlier WR has completed), which
//! keeps completions in posting order with no state beyond the queue itself, and
//! completes it at once. A failure completes the WR in error (`IBV_WC_MW_BIND_ERR`,
//! `IBV_WC_LOC_QP_OP_ERR` for LOCAL_INV, as rxe reports them) and moves the QP to ERR,
//! flushing the rest (rxe does the same for any failed local operation).
//!
//! A WR whose operation the QP's service does not carry ([`crate::QpType::carries`]: an
//! atomic on UC, an RDMA READ on UD) runs here too. The kernel accepts it at post time, and
//! rxe's requester fails it when it reaches it (`next_opcode` finds no opcode for the
//! service): IBV_WC_LOC_QP_OP_ERR, the QP to ERR, the rest flushed. softib does the same,
//! so a program sees what it sees on rxe.

use crate::qp::Qp;
use crate::shared::Shared;
use crate::verbs::{QpState, VendorErr, WcStatus, WrOpcode};

impl Qp {
    /// True for the WRs that run at the head of the send queue, once every earlier WR has
    /// completed: the local operations, and the operations this QP's service does not carry.
    pub(crate) fn runs_at_head(&self, opcode: WrOpcode) -> bool {
        opcode.is_local() || !self.qp_type.carries(opcode)
    }

    /// Runs the local operations waiting at the head of the send queue, until the head is
    /// a WR for the wire (or the queue is empty, or a failure moved the QP to ERR).
    pub(crate) fn run_local_ops(&mut self, sh: &mut Shared) {
        while self.state() == QpState::Rts
            && self.sq.started == 0
            && self
                .sq
                .wqes
                .front()
                .is_some_and(|w| self.runs_at_head(w.opcode))
        {
            let w = self.sq.pop_head().expect("head checked");
            let outcome = match w.opcode {
                op if !self.qp_type.carries(op) => {
                    Err((WcStatus::LocQpOpErr, VendorErr::OpcodeForService))
                }
                WrOpcode::BindMw => match w.bind {
                    Some(bind) => sh
                        .mrs
                        .bind_window(self.pd, self.qpn, &bind)
                        .map(|_| ())
                        .map_err(|_| (WcStatus::MwBindErr, VendorErr::MwBind)),
                    None => Err((WcStatus::MwBindErr, VendorErr::MwBind)),
                },
                _ => sh
                    .mrs
                    .invalidate(w.inv_rkey, self.pd, self.qpn, false)
                    .map_err(|_| (WcStatus::LocQpOpErr, VendorErr::Invalidate)),
            };
            match outcome {
                Ok(()) => self.complete_send(sh, &w, WcStatus::Success, VendorErr::None),
                Err((status, vendor)) => {
                    self.complete_send(sh, &w, status, vendor);
                    self.enter_error(sh, true);
                }
            }
        }
    }
}
