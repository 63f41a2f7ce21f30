//! The switch crossbar (IBA 18.2): the input FIFOs per VL, routing of their head packets
//! (LFT on the DLID, SL2VL of the (in, out) pair), the request each head makes at its
//! output, round-robin service of the inputs requesting a VL, and the release of input
//! buffer credits when a packet has crossed.

use super::{Fabric, Forwarding};
use crate::counters::data_words;
use crate::packet::{CrcState, PacketId};
use crate::port::{Source, NOT_WAITING, NO_PEER};
use crate::routing::NO_ROUTE;
use crate::time::Picos;
use crate::vlarb::VL15;

impl Fabric {
    /// The request of output queue `vl` of port `q` that may be sent now (its index in the
    /// queue), or the time the earliest blocked crossbar input frees.
    ///
    /// An HCA's queue is FIFO. A switch output serves the inputs requesting this VL
    /// round-robin by input port number, starting after the input it served last (skipping
    /// inputs whose crossbar port is busy), so an input that stops requesting for a moment
    /// does not lose its turn to inputs that re-requested earlier.
    pub(super) fn pick(&self, q: usize, vl: usize) -> Result<usize, Option<Picos>> {
        let p = &self.ports[q];
        let queue = &p.vls[vl].out_q;
        let (index, id) = match queue.front() {
            None => return Err(None),
            Some(&Source::Local(id)) => (0, id),
            Some(_) => {
                let last = p.vls[vl].rr_last as u32;
                let mut best: Option<(u32, usize)> = None;
                let mut retry = NOT_WAITING;
                for (i, src) in queue.iter().enumerate() {
                    let Source::Input { port, .. } = *src else {
                        continue;
                    };
                    let ip = &self.ports[port as usize];
                    if ip.xbar_free_at > self.now {
                        retry = retry.min(ip.xbar_free_at);
                        continue;
                    }
                    // Distance after the last served input, in port-number order.
                    let d = (ip.num as u32 + 256 - last - 1) % 256;
                    if best.is_none_or(|(bd, _)| d < bd) {
                        best = Some((d, i));
                    }
                }
                let Some((_, i)) = best else {
                    return Err(Some(retry));
                };
                let Source::Input { port, vl: ivl } = queue[i] else {
                    unreachable!("switch queues hold inputs")
                };
                let head = *self.ports[port as usize].vls[ivl as usize]
                    .in_q
                    .front()
                    .expect("requesting input has a head");
                (i, head)
            }
        };
        if vl == VL15 as usize || p.vls[vl].tx.can_send(self.pool.get(id).meta.blocks) {
            Ok(index)
        } else {
            Err(None)
        }
    }

    /// Where switch `s` forwards a packet that came in on global port `ri`: output port and
    /// VL, or `None` if it is consumed by the switch (its own LID) or cannot be forwarded.
    pub(super) fn route(
        &mut self,
        s: u32,
        ri: usize,
        meta: &crate::packet::PacketMeta,
    ) -> Option<(u32, u8)> {
        let sw = &self.switches[s as usize];
        let in_num = self.ports[ri].num;
        let out_num = sw.lft.get(meta.dlid as usize).copied().unwrap_or(NO_ROUTE);
        if out_num == 0 || out_num == NO_ROUTE || out_num > sw.nports || out_num == in_num {
            return None;
        }
        let op = sw.first_port + out_num as u32 - 1;
        let n = sw.nports as usize + 1;
        let ovl = if meta.vl == VL15 {
            VL15
        } else if let Some(t) = sw.uniform_sl2vl {
            t.vl(meta.sl)
        } else {
            sw.sl2vl[in_num as usize * n + out_num as usize].vl(meta.sl)
        };
        let out_vls = sw.out_vls[out_num as usize];
        let vl_ok = (ovl == VL15) == (meta.vl == VL15) && (ovl == VL15 || ovl < out_vls);
        if out_vls == 0 || !vl_ok {
            return None;
        }
        // An output whose link is down is still the route: the packet is discarded there
        // when it arrives (PortXmitDiscards, see `arrive`).
        Some((op, ovl))
    }

    pub(super) fn arrive(&mut self, q: u32, id: PacketId) {
        let qi = q as usize;
        self.apply_wire(q);
        let meta = self.pool.get(id).meta;
        let vl = meta.vl;
        let pkt = self.pool.get(id);
        if pkt.rejected {
            // Refused when its head arrived (and counted then).
            self.pool.free(id);
            return;
        }
        if pkt.epoch != self.ports[qi].epoch {
            // On the wire when the link went down: lost. If its head had arrived it was
            // accounted in the receive buffer; take it out again.
            let accounted = pkt.accounted;
            let p = &mut self.ports[qi];
            if accounted && vl != VL15 && vl < p.op_vls {
                p.vls[vl as usize].rx.on_lost(meta.blocks);
            }
            self.pool.free(id);
            return;
        }
        let p = &mut self.ports[qi];
        let cut_through_switch =
            p.switch.is_some() && self.config.forwarding == Forwarding::CutThrough;
        if meta.ebp {
            // Already found bad and marked by an upstream cut-through switch.
            p.counters.port_rcv_remote_physical_errors += 1;
            if !cut_through_switch {
                self.drop_received(q, id, &meta);
                return;
            }
        } else if meta.crc == CrcState::Corrupted && !crate::crc::crcs_valid(self.pool.get(id)) {
            p.counters.port_rcv_errors += 1;
            if cut_through_switch && self.pool.get(id).out_port != NO_PEER {
                // Its head is already on the way out: it can only be marked bad (EBP).
                self.pool.get_mut(id).meta.ebp = true;
            } else {
                self.drop_received(q, id, &meta);
                return;
            }
        }
        let p = &mut self.ports[qi];
        if vl == VL15 {
            if p.vl15_held >= p.vl15_cap {
                p.counters.vl15_dropped += 1;
                self.pool.free(id);
                return;
            }
            p.vl15_held += 1;
        }
        p.counters.port_rcv_pkts += 1;
        p.counters.port_rcv_data += data_words(meta.len);
        if let Some(h) = p.hca {
            // The HCA consumes at line rate: the buffer frees at once.
            let mut pkt = self.pool.take(id);
            self.call_endpoint(h, |ep, tx| {
                if pkt.meta.zero_payload.is_some() && !ep.takes_described_payloads() {
                    pkt.materialize_payload();
                }
                ep.on_receive(&pkt, tx)
            });
            self.pool.put_back(id, pkt);
            self.pool.free(id);
            self.delivered += 1;
            self.release(q, vl, meta.blocks);
            return;
        }
        if self.pool.get(id).out_port == NO_PEER {
            // Addressed to the switch itself (consumed by its management agent) or not
            // forwardable (PortRcvSwitchRelayErrors).
            let sw = &self.switches[p.switch.expect("switch port") as usize];
            if sw.lft.get(meta.dlid as usize).copied() != Some(0) {
                p.counters.port_rcv_switch_relay_errors += 1;
            }
            self.pool.free(id);
            self.release(q, vl, meta.blocks);
            return;
        }
        let (op, ovl) = {
            let pkt = self.pool.get(id);
            (pkt.out_port, pkt.out_vl)
        };
        if !self.ports[op as usize].link_up {
            // The output went down after the packet was routed.
            self.ports[op as usize].counters.port_xmit_discards += 1;
            self.pool.free(id);
            self.release(q, vl, meta.blocks);
            return;
        }
        self.ports[op as usize].vls[ovl as usize].queued_blocks += meta.blocks as u32;
        let p = &mut self.ports[qi];
        p.vls[vl as usize].in_q.push_back(id);
        if p.vls[vl as usize].in_q.len() == 1 {
            self.request_head(q, vl);
        }
    }

    /// Drops a packet that failed its CRC at port `q`: it does not count as received, and
    /// the sender's next FCTBS writes its blocks off (IBA 7.9.4.3).
    pub(super) fn drop_received(&mut self, q: u32, id: PacketId, meta: &crate::packet::PacketMeta) {
        self.apply_wire(q);
        let p = &mut self.ports[q as usize];
        if meta.vl != VL15 && meta.vl < p.op_vls {
            p.vls[meta.vl as usize].rx.on_drop(meta.blocks);
            p.fc_pending |= 1 << meta.vl;
            self.kicks.push_back(q);
        }
        self.pool.free(id);
    }

    pub(super) fn release(&mut self, q: u32, vl: u8, blocks: u16) {
        self.apply_wire(q);
        let p = &mut self.ports[q as usize];
        if vl == VL15 {
            p.vl15_held = p.vl15_held.saturating_sub(1);
        } else {
            p.vls[vl as usize].rx.on_release(blocks);
            // Tell the upstream transmitter (IBA 7.9.4.2: when credits free up).
            p.fc_pending |= 1 << vl;
            self.kicks.push_back(q);
        }
    }

    /// The next packet of input FIFO (`ip`, `ivl`) became its head: it requests its output.
    /// Packets enter a FIFO only when eligible, so a new head is always ready to go.
    pub(super) fn promote_head(&mut self, ip: u32, ivl: u8) {
        if !self.ports[ip as usize].vls[ivl as usize].in_q.is_empty() {
            self.request_head(ip, ivl);
        }
    }

    /// The head of (`ip`, `ivl`) requests its output. Heads for an output whose link is
    /// down are discarded (PortXmitDiscards at that output) and the next head tries.
    pub(super) fn request_head(&mut self, ip: u32, ivl: u8) {
        while let Some(&id) = self.ports[ip as usize].vls[ivl as usize].in_q.front() {
            let pkt = self.pool.get(id);
            let (op, ovl, blocks) = (pkt.out_port, pkt.out_vl, pkt.meta.blocks);
            if self.ports[op as usize].link_up {
                self.ports[op as usize].enqueue(ovl, Source::Input { port: ip, vl: ivl });
                // Its wait for the output starts when its input's crossbar port is free:
                // before that it waits for its own input, not for the output.
                let input = &mut self.ports[ip as usize];
                input.vls[ivl as usize].head_since = self.now.max(input.xbar_free_at);
                self.kicks.push_back(op);
                return;
            }
            self.discard_head(ip, ivl, op, ovl, blocks);
        }
    }

    /// Drops the head of input FIFO (`ip`, `ivl`), routed to output `op`/`ovl`.
    pub(super) fn discard_head(&mut self, ip: u32, ivl: u8, op: u32, ovl: u8, blocks: u16) {
        let id = self.ports[ip as usize].vls[ivl as usize]
            .in_q
            .pop_front()
            .expect("discarding a head that exists");
        let out = &mut self.ports[op as usize];
        out.counters.port_xmit_discards += 1;
        out.vls[ovl as usize].queued_blocks = out.vls[ovl as usize]
            .queued_blocks
            .saturating_sub(blocks as u32);
        self.pool.free(id);
        self.release(ip, ivl, blocks);
    }
}
