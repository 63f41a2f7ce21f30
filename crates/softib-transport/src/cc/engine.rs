//! The glue between the congestion control mechanisms and the engine. The `Device` calls
//! in at three places: a packet was accepted for a QP (`cc_on_receive`: notification point
//! rules and the source's BECN/CNP reaction), a QP produced a packet (`cc_poll_cnp` first,
//! then `cc_after_transmit`: BECN into RC responses, pacing), and a QP's `Pacing` timer
//! expired (`cc_pacing_expired`). A paced QP reports no work except acknowledgements,
//! which are never held back: delaying them would stall the peer's send window.

use softib_wire::{Opcode, Operation, PacketRepr, Service};

use super::dcqcn::DcqcnState;
use super::iba::{CaCongestionEntry, CcaState, PortControl};
use super::np::{notification, Notify};
use super::pacer::{gap_at_rate, wire_time};
use super::qp_state::{PendingCnp, MAX_PENDING_CNPS};
use super::{CcAlgorithm, CcStatus};
use crate::emit;
use crate::qp::{Qp, Response, TimerKind};
use crate::shared::{PathInfo, RxMeta, Shared, Transmit};
use crate::time::Nanos;
use crate::verbs::{GlobalRoute, QpType};

impl Qp {
    /// The service level whose CCA state applies to traffic of this QP (UD: the packet's).
    fn cc_sl(&self, packet_sl: u8) -> u8 {
        if self.qp_type == QpType::Ud {
            packet_sl & 0xF
        } else {
            self.attr.ah_attr.sl & 0xF
        }
    }

    /// True while the `Pacing` timer holds the QP's paced packets back.
    pub(crate) fn cc_gated(&self) -> bool {
        self.timer(TimerKind::Pacing).is_some()
    }

    /// Work that goes out even while gated: a CNP, or an ACK / atomic ACK at the head of
    /// the responder queue.
    pub(crate) fn cc_unpaced_work(&self) -> bool {
        !self.cc.cnp.is_empty() || self.cc_unpaced_response()
    }

    pub(crate) fn cc_unpaced_response(&self) -> bool {
        matches!(
            self.resp.queue.front(),
            Some(Response::Ack { .. } | Response::Atomic { .. })
        )
    }

    /// A packet was accepted for this QP: destination rules (IBA Annex A10 / A17) and the
    /// source's reaction to BECN / CNP.
    pub(crate) fn cc_on_receive(
        &mut self,
        now: Nanos,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        sh: &mut Shared,
    ) {
        let cfg = &sh.config.cc;
        if cfg.notify {
            match notification(pkt.bth.opcode, pkt.bth.fecn, meta.ecn_ce) {
                Notify::Nothing => {}
                Notify::BecnInAck => self.cc.becn_pending = true,
                Notify::Cnp => {
                    let min = cfg.min_time_between_cnps as Nanos * 1_000;
                    if self.cc.cnp.len() < MAX_PENDING_CNPS && self.cc.limiter.allow(now, min) {
                        let target = self.cnp_target(meta, pkt);
                        self.cc.cnp.push_back(target);
                    }
                }
            }
        }
        let is_cnp = pkt.bth.opcode.service() == Service::Cnp;
        if !(pkt.bth.becn || is_cnp) {
            return;
        }
        let sl = self.cc_sl(meta.sl);
        match &sh.config.cc.algorithm {
            CcAlgorithm::None => {}
            CcAlgorithm::Iba(c) => {
                let entry = *c.entry(sl);
                let limit = c.cct.ccti_limit();
                let state = match c.port_control {
                    PortControl::Qp => &mut self.cc.cca,
                    PortControl::Sl => &mut sh.cc.sl[sl as usize],
                };
                state
                    .get_or_insert_with(|| CcaState::new(&entry))
                    .on_becn(now, &entry, limit);
            }
            CcAlgorithm::Dcqcn(c) => {
                let line = sh.config.cc.link_rate_mbps;
                self.cc
                    .dcqcn
                    .get_or_insert_with(|| DcqcnState::new(c, line, now))
                    .on_cnp(now, c);
            }
        }
    }

    /// Where a CNP answering `pkt` goes: the sender's QP. UD names it in the DETH and the
    /// path comes from the packet's own addressing; connected QPs know their peer.
    fn cnp_target(&self, meta: &RxMeta, pkt: &PacketRepr<'_>) -> PendingCnp {
        match (self.qp_type, pkt.deth) {
            (QpType::Ud, Some(d)) => PendingCnp {
                dest_qpn: d.src_qp,
                path: PathInfo {
                    dlid: meta.slid,
                    sl: meta.sl,
                    grh: meta.grh.map(|g| GlobalRoute {
                        dgid: g.sgid,
                        flow_label: g.flow_label,
                        sgid_index: 0,
                        hop_limit: 64,
                        traffic_class: g.traffic_class,
                    }),
                },
            },
            _ => PendingCnp {
                dest_qpn: self.attr.dest_qp_num,
                path: self.path(),
            },
        }
    }

    /// Emits a pending CNP (RoCEv2 layout, IBA Annex A17: opcode 0x81, BECN set, DestQP =
    /// the QP to slow down, PSN 0, 16 reserved bytes). Used on native IB too.
    pub(crate) fn cc_poll_cnp(&mut self, buf: &mut [u8], sh: &Shared) -> Option<Transmit> {
        let cnp = *self.cc.cnp.front()?;
        let mut bth = emit::bth(Opcode::CNP, self.pkey(sh), cnp.dest_qpn, 0);
        bth.becn = true;
        bth.mig_req = false;
        let len = emit::emit_bare(buf, &PacketRepr::new(bth))?;
        self.cc.cnp.pop_front();
        self.counters.cnps_sent += 1;
        Some(Transmit {
            len,
            src_qpn: self.qpn,
            dest_qpn: cnp.dest_qpn,
            path: cnp.path,
            // CNPs are not ECN-capable: a congested switch must not mark them.
            ecn_capable: false,
            batchable: false, // derived by Device::poll_transmit
            zero_payload: None,
        })
    }

    /// This QP produced `t` (in `buf`) at `now`: put a pending BECN into an RC response, and
    /// pace data packets.
    pub(crate) fn cc_after_transmit(
        &mut self,
        now: Nanos,
        t: &Transmit,
        buf: &mut [u8],
        sh: &mut Shared,
    ) {
        let Ok(opcode) = Opcode::from_u8(buf[0]) else {
            return;
        };
        let unpaced = opcode.service() == Service::Cnp
            || matches!(
                opcode.operation(),
                Operation::Acknowledge | Operation::AtomicAcknowledge
            );
        if self.cc.becn_pending
            && matches!(opcode.service(), Service::Rc | Service::Xrc)
            && opcode.is_response()
        {
            // BTH byte 4 bit 6 (IBA 9.2): outside the ICRC, so the driver's CRC is unaffected.
            buf[4] |= 0x40;
            self.cc.becn_pending = false;
            self.counters.becns_sent += 1;
        }
        if unpaced {
            return;
        }
        let cfg = &sh.config.cc;
        let bytes = t.len as u64 + cfg.wire_overhead as u64;
        let gap = match &cfg.algorithm {
            CcAlgorithm::None => return,
            CcAlgorithm::Iba(c) => {
                let sl = self.cc_sl(t.path.sl);
                let entry: CaCongestionEntry = *c.entry(sl);
                let state = match c.port_control {
                    PortControl::Qp => self.cc.cca,
                    PortControl::Sl => sh.cc.sl[sl as usize],
                };
                let ccti = state.map_or(entry.ccti_min as u16, |s| s.ccti_at(now, &entry));
                let packet_time = wire_time(bytes, cfg.link_rate_mbps);
                let ipd = c.cct.entry(ccti).delay(packet_time);
                if ipd == 0 {
                    0
                } else {
                    packet_time + ipd
                }
            }
            CcAlgorithm::Dcqcn(c) => match self.cc.dcqcn.as_mut() {
                Some(s) => {
                    s.on_sent(now, bytes, c);
                    if s.limited() {
                        gap_at_rate(bytes, s.rate())
                    } else {
                        0
                    }
                }
                None => 0,
            },
        };
        let next = self.cc.pacer.on_transmit(now, gap);
        if next > now {
            self.cc.gate_since = now;
            self.set_timer(TimerKind::Pacing, Some(next));
        }
    }

    /// The pacing gate opened at `now`; time spent gated with work waiting counts as
    /// throttled.
    pub(crate) fn cc_pacing_expired(&mut self, now: Nanos, sh: &Shared) {
        if self.has_work(sh) {
            self.counters.throttled_ns += now.saturating_sub(self.cc.gate_since);
        }
    }

    /// The congestion state of this QP at `now`.
    pub(crate) fn cc_status(&self, now: Nanos, sh: &Shared) -> CcStatus {
        let mut st = CcStatus {
            paced_until: self.timer(TimerKind::Pacing),
            ..CcStatus::default()
        };
        match &sh.config.cc.algorithm {
            CcAlgorithm::None => {}
            CcAlgorithm::Iba(c) => {
                let sl = self.cc_sl(self.attr.ah_attr.sl);
                let entry = c.entry(sl);
                let state = match c.port_control {
                    PortControl::Qp => self.cc.cca,
                    PortControl::Sl => sh.cc.sl[sl as usize],
                };
                let ccti = state.map_or(entry.ccti_min as u16, |s| s.ccti_at(now, entry));
                st.ccti = Some(ccti);
                st.above_trigger =
                    entry.trigger_threshold > 0 && ccti >= entry.trigger_threshold as u16;
            }
            CcAlgorithm::Dcqcn(c) => {
                if let Some(s) = &self.cc.dcqcn {
                    let s = s.at(now, c);
                    st.rate_bps = Some(s.rate());
                    st.alpha = Some(s.alpha());
                }
            }
        }
        st
    }
}

/// The CCTI of service level `sl` at `now` under per-SL IBA CCA.
pub(crate) fn sl_ccti(sh: &Shared, now: Nanos, sl: u8) -> Option<u16> {
    let CcAlgorithm::Iba(c) = &sh.config.cc.algorithm else {
        return None;
    };
    let entry = c.entry(sl);
    Some(sh.cc.sl[(sl & 0xF) as usize].map_or(entry.ccti_min as u16, |s| s.ccti_at(now, entry)))
}
