//! The event loop: runs events in (time, tie) order until a time, dispatches each to the
//! port, switch or HCA it concerns, and calls the endpoints of the HCAs. The code handling
//! an event schedules as the entity whose state it changes (see `wire`).

use super::{CounterSample, Event, Fabric};
use crate::hca::{Endpoint, HcaTx};
use crate::port::{DATA_VLS, NOT_WAITING, NO_PEER};
use crate::time::Picos;

impl Fabric {
    /// Runs the simulation until simulated time `end` (events at exactly `end` included).
    ///
    /// A partitioned fabric (`set_partition`) runs through `crate::parallel` instead.
    pub fn run_until(&mut self, end: Picos) {
        assert!(
            self.part.is_none(),
            "a partitioned fabric runs through softib_fabric::parallel"
        );
        if !self.started {
            self.start();
        }
        self.run_events(end);
        self.now = self.now.max(end);
    }

    /// Runs the events up to and including `end`.
    pub(super) fn run_events(&mut self, end: Picos) {
        while let Some((key, ev)) = self.queue.pop_until(end) {
            let t = (key >> 64) as Picos;
            self.event_key = key + 1;
            self.now = t;
            self.events += 1;
            self.handle(t, ev);
            self.drain_kicks();
        }
    }

    pub(super) fn start(&mut self) {
        self.started = true;
        self.event_key = 0;
        for q in 0..self.ports.len() {
            let node = self.ports[q].node;
            if self.ports[q].peer == NO_PEER || !self.owns_node(node as usize) {
                continue;
            }
            self.current = node + 1;
            let p = &mut self.ports[q];
            // Link bring-up: each side advertises its receive buffers (IBA 7.9.4.1).
            p.fc_pending = p.data_vl_mask();
            let at = p.fc_interval;
            self.schedule(at, Event::FcRefresh(q as u32));
            self.kicks.push_back(q as u32);
        }
        for h in 0..self.hcas.len() as u32 {
            let gp = self.hcas[h as usize].port;
            if self.owns_node(self.ports[gp as usize].node as usize) {
                self.current = self.entity_of_port(gp);
                self.call_endpoint(h, |ep, tx| ep.on_transmit_ready(tx));
            }
        }
        if let Some(iv) = self.config.sample_interval_ps {
            self.current = 0;
            self.schedule(iv.max(1), Event::Sample);
        }
        self.drain_kicks();
    }

    pub(super) fn drain_kicks(&mut self) {
        while let Some(q) = self.kicks.pop_front() {
            self.current = self.entity_of_port(q);
            self.try_send(q);
            let p = &mut self.ports[q as usize];
            if p.refill {
                p.refill = false;
                if let Some(h) = p.hca {
                    self.call_endpoint(h, |ep, tx| ep.on_transmit_ready(tx));
                }
            }
        }
    }

    pub(super) fn handle(&mut self, t: Picos, ev: Event) {
        self.current = match ev {
            Event::TxDone(q)
            | Event::Arrive(q, _)
            | Event::FcWake(q)
            | Event::Release { port: q, .. }
            | Event::FcRefresh(q)
            | Event::XbarRetry(q) => self.entity_of_port(q),
            Event::HcaWake(h) => self.entity_of_port(self.hcas[h as usize].port),
            Event::LinkState { .. } | Event::Sample => {
                // Every partition runs the fabric's own events (each for its own nodes);
                // they count once, in the first.
                if self.part.as_ref().is_some_and(|p| !p.is_first()) {
                    self.events -= 1;
                }
                0
            }
        };
        match ev {
            Event::TxDone(q) => {
                let p = &mut self.ports[q as usize];
                p.done_scheduled = false;
                if let Some((ip, ivl, blocks)) = p.release_on_done.take() {
                    self.release(ip, ivl, blocks);
                }
                self.kicks.push_back(q);
            }
            Event::Arrive(q, id) => self.arrive(q, id),
            Event::FcWake(q) => {
                self.ports[q as usize].fc_wake_at = NOT_WAITING;
                self.kicks.push_back(q);
            }
            Event::Release { port, vl, blocks } => self.release(port, vl, blocks),
            Event::LinkState { port, up } => {
                // Both ends change together; each partition changes the ends it owns.
                let peer = self.ports[port as usize].peer;
                if peer != NO_PEER {
                    for q in [port, peer] {
                        let node = self.ports[q as usize].node;
                        if !self.owns_node(node as usize) || self.ports[q as usize].link_up == up {
                            continue;
                        }
                        self.current = node + 1;
                        self.apply_wire(q);
                        if up {
                            self.link_up(q);
                        } else {
                            self.link_down(q);
                        }
                    }
                }
            }
            Event::FcRefresh(q) => {
                let p = &mut self.ports[q as usize];
                let mut next = Picos::MAX;
                for v in 0..p.op_vls as usize {
                    if p.fc_pending & (1 << v) != 0 {
                        next = next.min(t + p.fc_interval);
                    } else if t >= p.vls[v].fc_last + p.fc_interval {
                        p.fc_pending |= 1 << v;
                        next = next.min(t + p.fc_interval);
                    } else {
                        next = next.min(p.vls[v].fc_last + p.fc_interval);
                    }
                }
                if next != Picos::MAX {
                    self.schedule(next, Event::FcRefresh(q));
                }
                self.kicks.push_back(q);
            }
            Event::XbarRetry(q) => {
                self.ports[q as usize].xbar_retry_at = NOT_WAITING;
                self.kicks.push_back(q);
            }
            Event::HcaWake(h) => {
                if self.hcas[h as usize].wake_at == t {
                    self.hcas[h as usize].wake_at = NOT_WAITING;
                    self.call_endpoint(h, |ep, tx| ep.on_timer(tx));
                }
            }
            Event::Sample => {
                for q in 0..self.ports.len() as u32 {
                    let node = self.ports[q as usize].node as usize;
                    if self.ports[q as usize].peer == NO_PEER || !self.owns_node(node) {
                        continue;
                    }
                    self.apply_wire(q);
                    let p = &self.ports[q as usize];
                    self.samples.push(CounterSample {
                        time: t,
                        node: p.node,
                        port: p.num,
                        counters: p.counters_at(t),
                        rx_blocks_used: p.vls[..DATA_VLS].iter().map(|v| v.rx.occupied()).sum(),
                    });
                }
                if let Some(iv) = self.config.sample_interval_ps {
                    self.current = 0;
                    self.schedule(t + iv.max(1), Event::Sample);
                }
            }
        }
    }

    pub(super) fn call_endpoint(
        &mut self,
        h: u32,
        f: impl FnOnce(&mut dyn Endpoint, &mut HcaTx<'_>),
    ) {
        let hca = &mut self.hcas[h as usize];
        let Some(mut ep) = hca.endpoint.take() else {
            return;
        };
        let (gp, lid) = (hca.port, hca.lid);
        {
            let mut tx = HcaTx {
                now: self.now,
                order: crate::event::EventOrder {
                    event: self.event_key,
                    entity: self.current,
                },
                lid,
                depth: self.config.hca_send_queue_packets,
                pool: &mut self.pool,
                port: &mut self.ports[gp as usize],
            };
            f(ep.as_mut(), &mut tx);
        }
        let wake = ep.next_wakeup().map_or(NOT_WAITING, |w| w.max(self.now));
        let hca = &mut self.hcas[h as usize];
        hca.endpoint = Some(ep);
        if wake != hca.wake_at {
            hca.wake_at = wake;
            if wake != NOT_WAITING {
                self.schedule(wake, Event::HcaWake(h));
            }
        }
        if self.ports[gp as usize].nonempty != 0 {
            self.kicks.push_back(gp);
        }
    }
}
