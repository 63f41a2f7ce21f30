//! `modify_qp`: attribute validation per transition and the side effects of each state.

use crate::error::VerbsError;
use crate::qp::state::transition_rule;
use crate::qp::{Qp, Requester, Responder, TimerKind};
use crate::shared::Shared;
use crate::time::Nanos;
use crate::verbs::{QpAttr, QpAttrMask as M, QpState};

/// Largest 24-bit value (QPNs, PSNs).
const MAX_24: u32 = 0x00FF_FFFF;

fn bad(attr: &'static str, reason: impl Into<String>) -> VerbsError {
    VerbsError::InvalidAttribute {
        attr,
        reason: reason.into(),
    }
}

impl Qp {
    /// Applies `ibv_modify_qp` semantics (IBA 11.2.5.2): checks the transition exists, that
    /// every required attribute is present and no unexpected one is, validates values, and
    /// only then changes anything.
    pub fn modify(
        &mut self,
        _now: Nanos,
        attr: &QpAttr,
        mask: M,
        sh: &mut Shared,
    ) -> Result<(), VerbsError> {
        let from = self.state();
        let to = if mask.contains(M::STATE) {
            attr.qp_state
        } else {
            from
        };
        if mask.contains(M::CUR_STATE) && attr.cur_qp_state != from {
            return Err(VerbsError::CurrentStateMismatch {
                qpn: self.qpn,
                claimed: attr.cur_qp_state,
                actual: from,
            });
        }
        // An EEC's attributes are an RC connection's (IBA 10.2.7 modify EEC: path, PSNs,
        // timeout, retry counts, destination EEC number in `dest_qp_num`).
        let rules_for = if self.is_eec() {
            crate::verbs::QpType::Rc
        } else {
            self.qp_type
        };
        let rule = transition_rule(rules_for, from, to).ok_or(VerbsError::InvalidTransition {
            qpn: self.qpn,
            from,
            to,
        })?;
        let given = mask.difference(M::STATE);
        if let Some(missing) = rule.required.difference(given).names().next() {
            return Err(VerbsError::MissingAttribute {
                attr: missing,
                from,
                to,
                qp_type: self.qp_type,
            });
        }
        let allowed = rule.required | rule.optional | M::CUR_STATE;
        if let Some(extra) = given.difference(allowed).names().next() {
            return Err(VerbsError::UnexpectedAttribute {
                attr: extra,
                from,
                to,
                qp_type: self.qp_type,
            });
        }
        if from == QpState::Sqd && to == QpState::Sqd && !self.drained {
            return Err(bad(
                "qp_state",
                "SQD->SQD attribute changes are only allowed once the send queue drained",
            ));
        }
        self.validate_values(attr, given, sh)?;

        // Everything checked: apply.
        self.apply_values(attr, given);
        if to != from || mask.contains(M::STATE) {
            self.enter_state(from, to, sh);
        }
        Ok(())
    }

    fn validate_values(&self, a: &QpAttr, m: M, sh: &Shared) -> Result<(), VerbsError> {
        let cfg = &sh.config;
        if m.contains(M::ALT_PATH) {
            return Err(VerbsError::Unsupported {
                attr: "ALT_PATH (automatic path migration)",
            });
        }
        if m.contains(M::PKEY_INDEX) && a.pkey_index as usize >= cfg.pkeys.len() {
            return Err(bad(
                "pkey_index",
                format!(
                    "{} is beyond the P_Key table of {} entries",
                    a.pkey_index,
                    cfg.pkeys.len()
                ),
            ));
        }
        if m.contains(M::PORT) && a.port_num != 1 {
            return Err(bad(
                "port_num",
                format!("{} (the device has port 1 only)", a.port_num),
            ));
        }
        if m.contains(M::PATH_MTU) && a.path_mtu > cfg.max_mtu {
            return Err(bad(
                "path_mtu",
                format!(
                    "{} exceeds the port MTU {}",
                    a.path_mtu.bytes(),
                    cfg.max_mtu.bytes()
                ),
            ));
        }
        if m.contains(M::DEST_QPN) && a.dest_qp_num > MAX_24 {
            return Err(bad(
                "dest_qp_num",
                format!("{:#x} is wider than 24 bits", a.dest_qp_num),
            ));
        }
        if m.contains(M::RQ_PSN) && a.rq_psn > MAX_24 {
            return Err(bad(
                "rq_psn",
                format!("{:#x} is wider than 24 bits", a.rq_psn),
            ));
        }
        if m.contains(M::SQ_PSN) && a.sq_psn > MAX_24 {
            return Err(bad(
                "sq_psn",
                format!("{:#x} is wider than 24 bits", a.sq_psn),
            ));
        }
        if m.contains(M::TIMEOUT) && a.timeout > 31 {
            return Err(bad("timeout", format!("{} does not fit 5 bits", a.timeout)));
        }
        if m.contains(M::RETRY_CNT) && a.retry_cnt > 7 {
            return Err(bad(
                "retry_cnt",
                format!("{} does not fit 3 bits", a.retry_cnt),
            ));
        }
        if m.contains(M::RNR_RETRY) && a.rnr_retry > 7 {
            return Err(bad(
                "rnr_retry",
                format!("{} does not fit 3 bits", a.rnr_retry),
            ));
        }
        if m.contains(M::MIN_RNR_TIMER) && a.min_rnr_timer > 31 {
            return Err(bad(
                "min_rnr_timer",
                format!("{} does not fit 5 bits", a.min_rnr_timer),
            ));
        }
        if m.contains(M::MAX_QP_RD_ATOMIC) && a.max_rd_atomic > cfg.max_qp_rd_atom {
            return Err(bad(
                "max_rd_atomic",
                format!(
                    "{} exceeds the device limit {}",
                    a.max_rd_atomic, cfg.max_qp_rd_atom
                ),
            ));
        }
        if m.contains(M::MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > cfg.max_qp_rd_atom {
            return Err(bad(
                "max_dest_rd_atomic",
                format!(
                    "{} exceeds the device limit {}",
                    a.max_dest_rd_atomic, cfg.max_qp_rd_atom
                ),
            ));
        }
        if m.contains(M::AV) {
            if let Some(g) = a.ah_attr.grh {
                if g.flow_label > 0xF_FFFF {
                    return Err(bad("ah_attr.grh.flow_label", "wider than 20 bits"));
                }
            }
            if a.ah_attr.sl > 15 {
                return Err(bad(
                    "ah_attr.sl",
                    format!("{} does not fit 4 bits", a.ah_attr.sl),
                ));
            }
        }
        // UC QPs never see READ or atomic requests (they have no such opcodes), so
        // REMOTE_READ / REMOTE_ATOMIC in their access flags are accepted and unused, as Linux does.
        Ok(())
    }

    fn apply_values(&mut self, a: &QpAttr, m: M) {
        let t = &mut self.attr;
        if m.contains(M::EN_SQD_ASYNC_NOTIFY) {
            t.en_sqd_async_notify = a.en_sqd_async_notify;
        }
        if m.contains(M::ACCESS_FLAGS) {
            t.qp_access_flags = a.qp_access_flags;
        }
        if m.contains(M::PKEY_INDEX) {
            t.pkey_index = a.pkey_index;
        }
        if m.contains(M::PORT) {
            t.port_num = a.port_num;
        }
        if m.contains(M::QKEY) {
            t.qkey = a.qkey;
        }
        if m.contains(M::AV) {
            t.ah_attr = a.ah_attr;
        }
        if m.contains(M::PATH_MTU) {
            t.path_mtu = a.path_mtu;
        }
        if m.contains(M::TIMEOUT) {
            t.timeout = a.timeout;
        }
        if m.contains(M::RETRY_CNT) {
            t.retry_cnt = a.retry_cnt;
            self.req.retry_left = a.retry_cnt;
        }
        if m.contains(M::RNR_RETRY) {
            t.rnr_retry = a.rnr_retry;
            self.req.rnr_left = a.rnr_retry;
        }
        if m.contains(M::RQ_PSN) {
            t.rq_psn = a.rq_psn;
            self.resp.epsn = a.rq_psn;
        }
        if m.contains(M::MAX_QP_RD_ATOMIC) {
            t.max_rd_atomic = a.max_rd_atomic;
        }
        if m.contains(M::MIN_RNR_TIMER) {
            t.min_rnr_timer = a.min_rnr_timer;
        }
        if m.contains(M::SQ_PSN) {
            t.sq_psn = a.sq_psn;
            self.req.sq_psn = a.sq_psn;
            self.req.una = a.sq_psn;
            self.req.tx_psn = a.sq_psn;
            self.req.max_sent = a.sq_psn;
            self.req.confirmed = a.sq_psn;
        }
        if m.contains(M::MAX_DEST_RD_ATOMIC) {
            t.max_dest_rd_atomic = a.max_dest_rd_atomic;
        }
        if m.contains(M::PATH_MIG_STATE) {
            t.path_mig_state = a.path_mig_state;
        }
        if m.contains(M::DEST_QPN) {
            t.dest_qp_num = a.dest_qp_num;
        }
    }

    fn enter_state(&mut self, from: QpState, to: QpState, sh: &mut Shared) {
        match to {
            QpState::Reset => {
                // RESET discards everything without completions (IBA 10.3.1 "Reset state").
                let _ = self.sq.clear().count();
                let _ = self.rq.drain().count();
                let keep_cap = self.attr.cap;
                self.attr = QpAttr {
                    cap: keep_cap,
                    ..QpAttr::default()
                };
                // The resend policy is the device's, not the connection's.
                let paced = self.req.rec.paced;
                self.req = Requester::default();
                self.req.rec.paced = paced;
                self.resp = Responder::default();
                if self.qp_type == crate::verbs::QpType::XrcRecv {
                    // The SRQ of a message in progress is no longer borrowed (rc/xrc.rs).
                    self.srq = None;
                    self.pd = crate::rc::xrc::NO_PD;
                    self.recv_cq = crate::rc::xrc::NO_CQ;
                }
                self.timers = [None; TimerKind::COUNT];
                self.drained = false;
                self.cc = crate::cc::QpCc::default();
            }
            QpState::Err => self.enter_error(sh, false),
            QpState::Sqd => {
                self.attr.qp_state = QpState::Sqd;
                if from != QpState::Sqd {
                    self.drained = false;
                    self.attr.sq_draining = true;
                    self.check_drained(sh);
                }
            }
            QpState::Sqe => self.attr.qp_state = QpState::Sqe,
            QpState::Rts => {
                self.attr.qp_state = QpState::Rts;
                self.attr.sq_draining = false;
                self.drained = false;
                if from == QpState::Sqe {
                    // The WQEs after the failed one were flushed on entering SQE.
                    self.req.tx_idx = 0;
                }
            }
            QpState::Init | QpState::Rtr => self.attr.qp_state = to,
        }
    }
}
