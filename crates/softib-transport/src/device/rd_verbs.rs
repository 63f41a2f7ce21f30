//! The reliable datagram verbs of the `Device` (IBA vol. 1 §10.2.7, §11.2.x): domains,
//! RD QPs, EE contexts, RD sends, and the demultiplexing of RD packets by their RDETH.
//! The protocol itself lives in `rd/` and RC's modules.

use softib_wire::PacketRepr;

use super::{unknown, Device};
use crate::error::VerbsError;
use crate::qp::Qp;
use crate::rc::xrc::{NO_CQ, NO_PD};
use crate::rd::{EecCtx, RdRole, RdWqe};
use crate::shared::RxMeta;
use crate::time::Nanos;
use crate::verbs::{
    PdHandle, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RddHandle, SendWr, VendorErr,
    WcStatus,
};
use crate::ResendPolicy;

/// `a` mutably and, when it is another slot, `b` too.
fn two_mut(v: &mut [Option<Qp>], a: usize, b: Option<usize>) -> (&mut Qp, Option<&mut Qp>) {
    match b {
        Some(b) if b != a => {
            let (lo, hi) = v.split_at_mut(a.max(b));
            let (x, y) = if a < b {
                (lo[a].as_mut(), hi[0].as_mut())
            } else {
                (hi[0].as_mut(), lo[b].as_mut())
            };
            (x.expect("slot checked"), y)
        }
        _ => (v[a].as_mut().expect("slot checked"), None),
    }
}

impl Device {
    /// Allocates a reliable datagram domain (IBA §10.2.7, "Allocate Reliable Datagram
    /// Domain").
    pub fn alloc_rdd(&mut self) -> RddHandle {
        self.rdds += 1;
        RddHandle(self.rdds)
    }

    fn check_rdd(&self, rdd: RddHandle) -> Result<(), VerbsError> {
        if rdd.0 == 0 || rdd.0 > self.rdds || self.dead_rdds.contains(&rdd.0) {
            return Err(unknown("RDD", rdd.0));
        }
        Ok(())
    }

    /// Releases a domain; refused (busy) while an RD QP or EEC belongs to it.
    pub fn dealloc_rdd(&mut self, rdd: RddHandle) -> Result<(), VerbsError> {
        self.check_rdd(rdd)?;
        if self.qps.iter().flatten().any(|q| q.rdd() == Some(rdd)) {
            return Err(VerbsError::InUse {
                kind: "RDD",
                value: rdd.0,
                reason: "an RD QP or EEC still belongs to it",
            });
        }
        self.dead_rdds.push(rdd.0);
        Ok(())
    }

    /// Creates an RD QP of domain `rdd` in RESET (`init.qp_type` must be [`QpType::Rd`]).
    /// Its states and attributes are UD's (P_Key index, port, Q_Key; IBA §10.2.7): it is
    /// connectionless, the EECs carry the connections.
    pub fn create_rd_qp(
        &mut self,
        pd: PdHandle,
        rdd: RddHandle,
        init: QpInitAttr,
    ) -> Result<u32, VerbsError> {
        self.check_rdd(rdd)?;
        if init.qp_type != QpType::Rd {
            return Err(VerbsError::InvalidAttribute {
                attr: "qp_type",
                reason: format!("create_rd_qp creates RD QPs, not {:?}", init.qp_type),
            });
        }
        let qpn = self.create_qp_in(pd, init)?;
        let i = self.qp_index(qpn).expect("just created");
        self.qps[i].as_mut().expect("just created").rd = Some(RdRole::Qp { rdd });
        Ok(qpn)
    }

    /// Creates an EE context of domain `rdd` in RESET; returns its number (EECN, from the
    /// QP number space). `max_send_wr` bounds the messages of all RD QPs queued on it.
    /// Bring it up like an RC QP (`modify_eec`): the remote EECN goes in `dest_qp_num`.
    pub fn create_eec(&mut self, rdd: RddHandle, max_send_wr: u32) -> Result<u32, VerbsError> {
        self.check_rdd(rdd)?;
        let max = self.sh.config.max_qp_wr;
        if max_send_wr == 0 || max_send_wr > max {
            return Err(VerbsError::InvalidAttribute {
                attr: "max_send_wr",
                reason: format!("{max_send_wr} is not in 1..={max}"),
            });
        }
        let eecn = self.next_qpn()?;
        let init = QpInitAttr {
            qp_type: QpType::Rd,
            send_cq: NO_CQ,
            recv_cq: NO_CQ,
            srq: None,
            cap: QpCap {
                max_send_wr,
                max_recv_wr: 0,
                max_send_sge: self.sh.config.max_sge,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let mut eec = Qp::new(eecn, NO_PD, &init);
        eec.req.rec.paced = self.sh.config.resend == ResendPolicy::Paced;
        eec.rd = Some(RdRole::Eec(EecCtx {
            rdd,
            serving: None,
            await_resync: false,
            reply_qpn: 0,
        }));
        self.push_qp(eec);
        Ok(eecn)
    }

    fn eec_index(&self, eecn: u32) -> Result<usize, VerbsError> {
        self.qp_index(eecn)
            .filter(|&i| self.qps[i].as_ref().is_some_and(|q| q.is_eec()))
            .ok_or(unknown("EEC", eecn))
    }

    /// Modifies an EE context (IBA §11.2.x "Modify EE Context"): RC's transitions and
    /// attributes, with the remote EECN in `dest_qp_num`. [`Device::modify_qp`] does the
    /// same on an EECN.
    pub fn modify_eec(
        &mut self,
        now: Nanos,
        eecn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        self.eec_index(eecn)?;
        self.modify_qp(now, eecn, attr, mask)
    }

    /// Queries an EE context.
    pub fn query_eec(&self, eecn: u32) -> Result<QpAttr, VerbsError> {
        self.eec_index(eecn)?;
        self.query_qp(eecn)
    }

    /// Destroys an EE context; messages queued on it vanish without completions.
    pub fn destroy_eec(&mut self, eecn: u32) -> Result<(), VerbsError> {
        self.eec_index(eecn)?;
        self.destroy_qp(eecn)
    }

    /// Sends a RESYNC on an EEC in RTS (IBA §9.7.x): before the next message, the
    /// responder's expected PSN becomes this EEC's send PSN. Use it after the EEC was
    /// reset and brought up again with a new `sq_psn` while the far end kept its context.
    pub fn resync_eec(&mut self, eecn: u32) -> Result<(), VerbsError> {
        let i = self.eec_index(eecn)?;
        let eec = self.qps[i].as_mut().expect("index checked");
        if eec.state() != QpState::Rts {
            return Err(VerbsError::WrongState {
                qpn: eecn,
                state: eec.state(),
                queue: "send",
                wr_id: 0,
            });
        }
        eec.queue_resync();
        self.after_qp(i);
        Ok(())
    }

    /// True when `eecn` is an EE context of this device.
    pub fn is_eec(&self, eecn: u32) -> bool {
        self.eec_index(eecn).is_ok()
    }

    /// Posts a send WR on the RD QP in slot `i`: checked as any send WR, then queued on
    /// the EEC it names. An EEC that does not exist, is of another domain or is not ready
    /// to send fails the WR with a completion (IBA §10.8.3 / §11.4.x; libibverbs' names).
    pub(super) fn rd_post_send(&mut self, i: usize, wr: &SendWr) -> Result<(), VerbsError> {
        let qp = self.qps[i].as_ref().expect("index checked");
        let dest = wr.rd.ok_or_else(|| VerbsError::InvalidWr {
            wr_id: wr.wr_id,
            reason: "an RD send needs `rd` (EEC, remote QPN, Q_Key)".into(),
        })?;
        let mut wqe = self.build_send_wqe(qp, wr, Vec::new())?;
        let (qpn, rdd) = (qp.qpn, qp.rdd());
        let status = match self.eec_index(dest.eec) {
            _ if matches!(qp.state(), QpState::Err | QpState::Sqe) => Some(WcStatus::WrFlushErr),
            Err(_) => Some(WcStatus::InvEecnErr),
            Ok(j) => {
                let eec = self.qps[j].as_ref().expect("index checked");
                if eec.rdd() != rdd {
                    Some(WcStatus::LocRddViolErr)
                } else if !matches!(eec.state(), QpState::Rts | QpState::Sqd) {
                    Some(WcStatus::InvEecStateErr)
                } else if eec.sq.is_full() {
                    return Err(VerbsError::QueueFull {
                        queue: "send",
                        owner: format!("EEC {:#x}", dest.eec),
                        depth: eec.sq.depth(),
                        wr_id: wr.wr_id,
                    });
                } else {
                    None
                }
            }
        };
        if let Some(status) = status {
            let vendor = if status == WcStatus::WrFlushErr {
                VendorErr::Flushed
            } else {
                VendorErr::None
            };
            let qp = self.qps[i].as_mut().expect("index checked");
            qp.complete_send(&mut self.sh, &wqe, status, vendor);
            return Ok(());
        }
        let j = self.eec_index(dest.eec).expect("checked above");
        let qp = self.qps[i].as_ref().expect("index checked");
        // IBA 10.2.5: a WR Q_Key with the high bit set means "use the QP's Q_Key".
        let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
            qp.attr.qkey
        } else {
            dest.remote_qkey
        };
        wqe.rd = Some(RdWqe {
            src_qp: qpn,
            pd: qp.pd,
            send_cq: qp.send_cq,
            sq_sig_all: qp.sq_sig_all,
            dest_qpn: dest.remote_qpn & crate::psn::PSN_MASK,
            qkey,
            resync: false,
        });
        let eec = self.qps[j].as_mut().expect("index checked");
        if wqe.inline.is_none() {
            let mut sges = eec.sq.take_sge_list();
            sges.extend_from_slice(&wr.sg_list);
            wqe.sges = sges;
        }
        eec.sq.wqes.push_back(wqe);
        self.after_qp(j);
        Ok(())
    }

    /// An RD packet: to the EEC its RDETH names, or dropped and counted.
    pub(super) fn rd_demux(&mut self, now: Nanos, meta: &RxMeta, pkt: &PacketRepr<'_>) {
        let Some(rdeth) = pkt.rdeth else {
            self.sh.counters.malformed_drops += 1;
            return;
        };
        match self.eec_index(rdeth.ee_context) {
            Ok(i) => self.deliver(now, meta, pkt, i),
            // IBA 9.7.1: a packet for an EE context that does not exist is dropped.
            Err(_) => self.sh.counters.unknown_eec_drops += 1,
        }
    }

    /// A request for the EEC in slot `i`, with the QP its BTH names.
    pub(super) fn rd_eec_request(&mut self, meta: &RxMeta, pkt: &PacketRepr<'_>, i: usize) {
        let j = self.qp_index(pkt.bth.dest_qp);
        let (eec, target) = two_mut(&mut self.qps, i, j);
        eec.eec_handle_request(meta, pkt, &mut self.sh, target);
    }
}
