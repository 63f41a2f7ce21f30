//! What crosses a link from one node to another, and the order events are scheduled in.
//!
//! Two rules make a run independent of how the fabric is partitioned (`crate::parallel`):
//!
//! - **Ties by entity.** An event's [`Tie`] is the entity whose state the scheduling code
//!   changes (a node, or the fabric itself for samples and link-state changes) and that
//!   entity's own count of events. What a node does depends only on its own events, so its
//!   counts, and the order of every event at one picosecond, are the same whichever other
//!   nodes share its partition.
//! - **Nothing crosses a link faster than the link.** A node changes another node only by
//!   a [`WireItem`] that takes effect at least the link's propagation delay after it was
//!   sent (a data packet's head arrives, a flow-control packet arrives) or an arrival event
//!   at least that late. A neighbour in another partition that is at most that far ahead
//!   in time therefore cannot have seen the moment the item changes.
//!
//! Items reach the receiving port's `wire_in` at once when it is in the same partition and
//! at the next window boundary otherwise; either way it applies them, in the order sent,
//! before it next reads or changes its credit state (`apply_wire`), so when they were
//! delivered is invisible.

use super::cross::Cross;
use super::{Event, Fabric};
use crate::credits::MAX_WINDOW;
use crate::event::Tie;
use crate::packet::PacketId;
use crate::port::{WireItem, WireKind, NOT_WAITING};
use crate::time::Picos;

impl Fabric {
    /// The tie of the next event the current entity schedules.
    #[inline]
    pub(super) fn next_tie(&mut self) -> Tie {
        let e = self.current as usize;
        let count = self.scheduled_by[e];
        self.scheduled_by[e] = count + 1;
        Tie::new(self.current, count)
    }

    /// Schedules `ev` at `at` as the current entity.
    #[inline]
    pub(super) fn schedule(&mut self, at: Picos, ev: Event) {
        let tie = self.next_tie();
        self.queue.push(at, tie, ev);
    }

    /// The entity of port `q`'s node.
    #[inline]
    pub(super) fn entity_of_port(&self, q: u32) -> u32 {
        self.ports[q as usize].node + 1
    }

    /// The tie of port `q`'s flow-control wake, the same whichever code schedules it (the
    /// port, or the delivery of a flow-control packet from another partition): at most one
    /// is pending per port.
    fn fc_wake_tie(&self, q: u32) -> Tie {
        let p = &self.ports[q as usize];
        Tie::new(p.node + 1, Tie::RESERVED | p.num as u64)
    }

    /// Schedules port `q`'s flow-control wake at `at`.
    pub(super) fn schedule_fc_wake(&mut self, q: u32, at: Picos) {
        let p = &mut self.ports[q as usize];
        p.fc_wake_at = at;
        p.fc_blocked = false;
        let tie = self.fc_wake_tie(q);
        self.queue.push(at, tie, Event::FcWake(q));
    }

    /// A data packet starts on the wire towards port `r`: its head reaches `r` at
    /// `head_at` (when `r` accounts it) and it is eligible there at `arrive_at`.
    pub(super) fn send_data(
        &mut self,
        r: u32,
        id: PacketId,
        item: Option<WireItem>,
        arrive_at: Picos,
    ) {
        let tie = self.next_tie();
        match self.foreign_partition(r) {
            None => self.deliver_data(r, id, item, arrive_at, tie),
            Some(dest) => {
                let packet = self.pool.export(id);
                self.outbox(dest).push(Cross::Data {
                    port: r,
                    item,
                    arrive_at,
                    tie,
                    packet,
                });
            }
        }
    }

    /// A flow-control packet from the peer of port `r` is on its way.
    pub(super) fn send_fc(&mut self, r: u32, item: WireItem) {
        match self.foreign_partition(r) {
            None => self.deliver_fc(r, item),
            Some(dest) => self.outbox(dest).push(Cross::Fc { port: r, item }),
        }
    }

    pub(super) fn deliver_data(
        &mut self,
        r: u32,
        id: PacketId,
        item: Option<WireItem>,
        arrive_at: Picos,
        tie: Tie,
    ) {
        if let Some(mut item) = item {
            if let WireKind::Data { id: ref mut i, .. } = item.kind {
                *i = id;
            }
            self.ports[r as usize].wire_in.push_back(item);
        }
        self.queue.push(arrive_at, tie, Event::Arrive(r, id));
    }

    pub(super) fn deliver_fc(&mut self, r: u32, item: WireItem) {
        let p = &mut self.ports[r as usize];
        p.wire_in.push_back(item);
        if p.fc_blocked && p.fc_wake_at == NOT_WAITING {
            self.schedule_fc_wake(r, item.at);
        }
    }

    /// Applies what reached port `r` by now, in the order it was sent.
    ///
    /// Called before every read of a port's credit state, and most calls find nothing due:
    /// that test is inlined into the callers, the work is not.
    #[inline]
    pub(super) fn apply_wire(&mut self, r: u32) {
        if self.ports[r as usize]
            .wire_in
            .front()
            .is_some_and(|w| w.at <= self.now)
        {
            self.apply_wire_due(r);
        }
    }

    /// [`Self::apply_wire`] when something is due.
    #[inline(never)]
    fn apply_wire_due(&mut self, r: u32) {
        let now = self.now;
        let ri = r as usize;
        while let Some(&w) = self.ports[ri].wire_in.front() {
            if w.at > now {
                break;
            }
            let p = &mut self.ports[ri];
            p.wire_in.pop_front();
            if w.epoch != p.epoch {
                // Sent before the link went down: lost on the wire.
                continue;
            }
            match w.kind {
                WireKind::Fc { vl, fctbs, fccl } => {
                    p.counters.fc_packets_rcvd += 1;
                    if vl < p.op_vls {
                        // IBA 7.9.4.3: ABR := FCTBS. Every data packet the peer sent before
                        // this flow-control packet was accounted before it (items apply in
                        // the order sent), so none is written off wrongly.
                        p.vls[vl as usize].rx.on_fctbs(fctbs);
                        p.vls[vl as usize].tx.on_fccl(fccl);
                    }
                }
                WireKind::Data {
                    id,
                    vl,
                    blocks,
                    arrive,
                } => {
                    if vl >= p.op_vls {
                        p.counters.port_rcv_errors += 1;
                        self.pool.get_mut(id).rejected = true;
                        continue;
                    }
                    if p.vls[vl as usize].rx.on_receive(blocks).is_err() {
                        p.counters.excessive_buffer_overrun_errors += 1;
                        self.pool.get_mut(id).rejected = true;
                        continue;
                    }
                    if p.vls[vl as usize].rx.capacity() > MAX_WINDOW as u32 {
                        p.vls[vl as usize].in_flight.push_back((arrive, blocks));
                        p.vls[vl as usize].in_flight_blocks += blocks as u32;
                    }
                    self.pool.get_mut(id).accounted = true;
                }
            }
        }
    }
}
