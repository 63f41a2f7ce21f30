//! An output port's transmit decision (IBA 7.6.9, 7.9.4): a flow-control packet first
//! (they are not subject to VL arbitration), then a VL granted by the arbiter among the
//! queues whose head has credits, then the packet on the wire to the next port, where it is
//! accounted and routed when it starts (`transmit_to`), and the Annex A10 marking of a
//! switch output.

use super::{Event, Fabric, Forwarding, LRH_BYTES};
use crate::congestion::OutputState;
use crate::counters::data_words;
use crate::packet::{CrcState, PacketId};
use crate::port::{Source, WireItem, WireKind, NOT_WAITING, NO_PEER};
use crate::time::Picos;
use crate::vlarb::VL15;

impl Fabric {
    /// Schedules the port's transmit-completion event if it is not already scheduled.
    pub(super) fn schedule_done(&mut self, q: u32) {
        let p = &mut self.ports[q as usize];
        if !p.done_scheduled {
            p.done_scheduled = true;
            let at = p.busy_until;
            self.schedule(at, Event::TxDone(q));
        }
    }

    pub(super) fn try_send(&mut self, q: u32) {
        let now = self.now;
        let qi = q as usize;
        {
            let p = &self.ports[qi];
            if p.peer == NO_PEER || !p.link_up || (p.nonempty == 0 && p.fc_pending == 0) {
                return;
            }
            if now < p.busy_until {
                // Busy: come back when the link frees (the event is only scheduled when
                // there is something to send, which keeps idle reverse links event-free).
                self.schedule_done(q);
                return;
            }
        }
        // The last packet's input-buffer release is due now (its transmission ended), but
        // this call may run before that packet's TxDone event at the same instant: release
        // it here, or the next grant would overwrite it and the input would never get those
        // credits back.
        if let Some((ip, ivl, blocks)) = self.ports[qi].release_on_done.take() {
            self.release(ip, ivl, blocks);
        }
        self.apply_wire(q);
        // Link packets go first (IBA 7.9.4: flow-control packets are not subject to VL
        // arbitration).
        if let Some(fc) = self.ports[qi].send_fc(now) {
            let (peer, epoch) = (self.ports[qi].peer, self.ports[qi].epoch);
            self.send_fc(
                peer,
                WireItem {
                    at: fc.arrives,
                    epoch,
                    kind: WireKind::Fc {
                        vl: fc.vl,
                        fctbs: fc.fctbs,
                        fccl: fc.fccl,
                    },
                },
            );
            let p = &self.ports[qi];
            if p.nonempty != 0 || p.fc_pending != 0 {
                self.schedule_done(q);
            }
            return;
        }
        let nonempty = self.ports[qi].nonempty;
        let mut ready = 0u16;
        let mut retry = NOT_WAITING;
        let mut chosen = [0usize; 16];
        let mut m = nonempty;
        while m != 0 {
            let v = m.trailing_zeros() as usize;
            m &= m - 1;
            match self.pick(qi, v) {
                Ok(i) => {
                    ready |= 1 << v;
                    chosen[v] = i;
                }
                Err(Some(t)) => retry = retry.min(t),
                Err(None) => {
                    // A request waits for credits (empty queues are not in `nonempty`).
                    let p = &mut self.ports[qi];
                    if p.credit_stalled & (1 << v) == 0 {
                        p.credit_stalled |= 1 << v;
                        p.vls[v].credit_stalls += 1;
                    }
                }
            }
        }
        let grant = self.ports[qi].arb.select(ready);
        let Some(grant) = grant else {
            let p = &mut self.ports[qi];
            p.start_waits(now, 0);
            if p.fc_wake_at == NOT_WAITING {
                // Look at the credits again when the next flow-control packet arrives; if
                // none is on its way yet, its delivery schedules that (`deliver_fc`).
                let next_fc = p
                    .wire_in
                    .iter()
                    .find(|w| matches!(w.kind, WireKind::Fc { .. }))
                    .map(|w| w.at);
                match next_fc {
                    Some(t) => self.schedule_fc_wake(q, t),
                    None => p.fc_blocked = true,
                }
            }
            let p = &mut self.ports[qi];
            if retry != NOT_WAITING && p.xbar_retry_at != retry {
                p.xbar_retry_at = retry;
                self.schedule(retry, Event::XbarRetry(q));
            }
            return;
        };
        let vl = grant.vl;
        let p = &mut self.ports[qi];
        let queue = &mut p.vls[vl as usize].out_q;
        let src = if chosen[vl as usize] == 0 {
            queue.pop_front()
        } else {
            queue.remove(chosen[vl as usize])
        }
        .expect("granted VL has a request");
        p.queued -= 1;
        if p.vls[vl as usize].out_q.is_empty() {
            p.nonempty &= !(1 << vl);
        }
        p.credit_stalled &= !(1 << vl);
        // How long this VL waited, read before the grant stops its clock, for the marker.
        let since = p.vls[vl as usize].vl_wait_since;
        let waited = if since == NOT_WAITING { 0 } else { now - since };
        // Inputs contending for this output VL at this grant (the granted one included).
        let requests = p.vls[vl as usize].out_q.len() as u16 + 1;
        p.stop_waits(now, vl);
        p.start_waits(now, 1 << vl);
        if let Source::Input { port, .. } = src {
            let num = self.ports[port as usize].num;
            self.ports[qi].vls[vl as usize].rr_last = num;
        }
        let p = &mut self.ports[qi];
        let (id, from) = match src {
            Source::Local(id) => {
                p.refill = true;
                (id, None)
            }
            Source::Input { port, vl: ivl } => {
                let id = self.ports[port as usize].vls[ivl as usize]
                    .in_q
                    .pop_front()
                    .expect("requesting input has a head");
                (id, Some((port, ivl)))
            }
        };
        if let Some((ip, ivl)) = from {
            // Annex A10: the marking decision at the switch output, before the packet leaves.
            if vl != VL15 {
                let head_wait =
                    now.saturating_sub(self.ports[ip as usize].vls[ivl as usize].head_since);
                self.mark_congestion(qi, vl, id, now, (waited, requests, head_wait));
            }
            let blocks = self.pool.get(id).meta.blocks as u32;
            let p = &mut self.ports[qi];
            p.vls[vl as usize].queued_blocks =
                p.vls[vl as usize].queued_blocks.saturating_sub(blocks);
        }
        let p = &mut self.ports[qi];
        let pkt = self.pool.get_mut(id);
        let (blocks, len) = (pkt.meta.blocks, pkt.meta.len);
        let arrived_tail = pkt.tail_at;
        pkt.meta.vl = vl;
        p.arb.commit(grant, blocks);
        if vl != VL15 {
            p.vls[vl as usize].tx.on_send(blocks);
        }
        p.counters.port_xmit_pkts += 1;
        p.counters.port_xmit_data += data_words(len);
        let ser = p.ser.ps(len as u64);
        p.busy_until = now + ser;
        let (peer, delay, timing) = (p.peer, p.delay, p.ser);
        let tail = now + ser + delay;
        pkt.tail_at = tail;
        if let Some(errors) = p.errors.as_mut() {
            if let Some(bit) = errors.draw(len as usize) {
                crate::crc::flip_bit(pkt, bit);
            }
        }
        let meta = pkt.meta;
        pkt.epoch = p.epoch;
        pkt.accounted = false;
        pkt.rejected = false;
        if let Some(tap) = self.tap.as_mut() {
            let order = crate::event::EventOrder {
                event: self.event_key,
                entity: self.current,
            };
            tap.see(
                qi,
                peer as usize,
                (now + ser, tail),
                order,
                self.pool.get(id),
            );
        }
        self.transmit_to(
            peer,
            id,
            meta,
            (now + delay, now + delay + timing.ps(LRH_BYTES).min(ser)),
            tail,
        );
        if let Some((ip, ivl)) = from {
            let speedup = self.config.crossbar_speedup_permille as u64;
            let xfer = (ser * 1000).div_ceil(speedup).max(1);
            self.ports[ip as usize].xbar_free_at = now + xfer;
            let release = (now + xfer).max(arrived_tail);
            if release == now + ser {
                self.ports[qi].release_on_done = Some((ip, ivl, blocks));
            } else {
                self.schedule(
                    release,
                    Event::Release {
                        port: ip,
                        vl: ivl,
                        blocks,
                    },
                );
            }
            self.promote_head(ip, ivl);
        }
        let p = &self.ports[qi];
        if p.nonempty != 0 || p.fc_pending != 0 || p.release_on_done.is_some() {
            self.schedule_done(q);
        }
    }

    /// Asks the congestion marker about a data packet a switch output `qi` grants on `vl`.
    pub(super) fn mark_congestion(
        &mut self,
        qi: usize,
        vl: u8,
        id: PacketId,
        now: Picos,
        (waited, requests, head_wait): (Picos, u16, Picos),
    ) {
        let Some(marker) = self.marker.as_mut() else {
            return;
        };
        let p = &self.ports[qi];
        let state = OutputState {
            now,
            node: p.node,
            port: p.num,
            vl,
            queued_blocks: p.vls[vl as usize].queued_blocks,
            head_wait_ps: head_wait,
            head_wait_blocks: (head_wait / p.ser.ps(64).max(1)).min(u32::MAX as u64) as u32,
            credit_stalls: p.vls[vl as usize].credit_stalls,
            credits: p.vls[vl as usize].tx.available(),
            waited_ps: waited,
            requests,
        };
        let pkt = self.pool.get_mut(id);
        if marker.mark(&state, &pkt.meta) && crate::congestion::set_fecn(pkt.bytes_mut()) {
            // FECN is outside the ICRC (masked) but inside the VCRC: materialised CRCs are
            // stale now and will be recomputed when next needed.
            if pkt.meta.crc == CrcState::Materialized {
                pkt.meta.crc = CrcState::Implicit;
            }
            self.ports[qi].counters.fecn_marked += 1;
        }
    }

    /// A data packet starts on the wire towards port `r`: its first bit reaches `r` at
    /// `first`, its LRH at `head` and its tail at `tail`. The receiver accounts its blocks when
    /// its first bit arrives (a [`WireItem`] applied in order with the flow-control packets
    /// from the same link, which keeps the FCTBS resynchronisation exact; IBA 7.9.4.3). A
    /// switch's routing is decided now, from its static tables, so a hop needs a single
    /// arrival event, at the time the packet becomes eligible for forwarding.
    pub(super) fn transmit_to(
        &mut self,
        r: u32,
        id: PacketId,
        meta: crate::packet::PacketMeta,
        (first, head): (Picos, Picos),
        tail: Picos,
    ) {
        let ri = r as usize;
        let arrive = match (self.ports[ri].switch, self.config.forwarding) {
            (Some(_), Forwarding::CutThrough) => head,
            _ => tail,
        };
        let item = (meta.vl != VL15).then(|| WireItem {
            at: first,
            epoch: self.pool.get(id).epoch,
            kind: WireKind::Data {
                id,
                vl: meta.vl,
                blocks: meta.blocks,
                arrive,
            },
        });
        let at = match self.ports[ri].switch {
            None => tail,
            Some(s) => {
                let latency = self.config.switch_latency_ps;
                match self.route(s, ri, &meta) {
                    Some((op, ovl)) => {
                        let ser_out = self.ports[op as usize].ser.ps(meta.len as u64);
                        let pkt = self.pool.get_mut(id);
                        pkt.out_port = op;
                        pkt.out_vl = ovl;
                        // Cut-through may not start so early that the output would run past
                        // the bytes still arriving.
                        (arrive + latency).max((tail + latency).saturating_sub(ser_out))
                    }
                    None => {
                        let pkt = self.pool.get_mut(id);
                        pkt.out_port = NO_PEER;
                        arrive + latency
                    }
                }
            }
        };
        self.send_data(r, id, item, at);
    }
}
