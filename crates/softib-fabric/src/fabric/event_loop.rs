//! The event loop: runs events in (time, insertion order) until a time, dispatches each to
//! the port, switch or HCA it concerns, and calls the endpoints of the HCAs.

use super::{CounterSample, Event, Fabric};
use crate::hca::{Endpoint, HcaTx};
use crate::port::{DATA_VLS, NOT_WAITING, NO_PEER};
use crate::time::Picos;

impl Fabric {
    /// Runs the simulation until simulated time `end` (events at exactly `end` included).
    pub fn run_until(&mut self, end: Picos) {
        if !self.started {
            self.start();
        }
        while let Some(t) = self.queue.peek_time() {
            if t > end {
                break;
            }
            let (t, ev) = self.queue.pop().expect("peeked");
            self.now = t;
            self.events += 1;
            self.handle(t, ev);
            self.drain_kicks();
        }
        self.now = self.now.max(end);
    }

    pub(super) fn start(&mut self) {
        self.started = true;
        for q in 0..self.ports.len() {
            let p = &mut self.ports[q];
            if p.peer == NO_PEER {
                continue;
            }
            // Link bring-up: each side advertises its receive buffers (IBA 7.9.4.1).
            p.fc_pending = p.data_vl_mask();
            let at = p.fc_interval;
            self.queue.push(at, Event::FcRefresh(q as u32));
            self.kicks.push_back(q as u32);
        }
        for h in 0..self.hcas.len() as u32 {
            self.call_endpoint(h, |ep, tx| ep.on_transmit_ready(tx));
        }
        if let Some(iv) = self.config.sample_interval_ps {
            self.queue.push(iv.max(1), Event::Sample);
        }
        self.drain_kicks();
    }

    pub(super) fn drain_kicks(&mut self) {
        while let Some(q) = self.kicks.pop_front() {
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
                let peer = self.ports[port as usize].peer;
                if peer != NO_PEER && self.ports[port as usize].link_up != up {
                    for q in [port, peer] {
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
                    self.queue.push(next, Event::FcRefresh(q));
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
                for p in &self.ports {
                    if p.peer == NO_PEER {
                        continue;
                    }
                    self.samples.push(CounterSample {
                        time: t,
                        node: p.node,
                        port: p.num,
                        counters: p.counters_at(t),
                        rx_blocks_used: p.vls[..DATA_VLS].iter().map(|v| v.rx.occupied()).sum(),
                    });
                }
                if let Some(iv) = self.config.sample_interval_ps {
                    self.queue.push(t + iv.max(1), Event::Sample);
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
                self.queue.push(wake, Event::HcaWake(h));
            }
        }
        if self.ports[gp as usize].nonempty != 0 {
            self.kicks.push_back(gp);
        }
    }
}
