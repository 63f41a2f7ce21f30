//! Test fixtures: a raw-packet source and a counting sink. These are NOT a transport
//! engine: they exercise the link layer (credits, arbitration, switching) with packets whose
//! only meaningful header is the LRH, so link-layer figures can be computed exactly.
#![allow(dead_code)]

use softib_fabric::hca::{Endpoint, HcaTx};
use softib_fabric::packet::Packet;
use softib_fabric::time::Picos;
use softib_wire::lrh::{Lnh, LrhPacket, LrhRepr};
use std::cell::RefCell;
use std::rc::Rc;

/// LRH (8) + BTH (12) + ICRC (4) + VCRC (2).
pub const OVERHEAD: usize = 26;

/// One received packet.
#[derive(Clone, Copy, Debug)]
pub struct Rx {
    pub at: Picos,
    pub flow: u32,
    pub len: u16,
    pub vl: u8,
    pub injected_at: Picos,
}

#[derive(Default, Debug)]
pub struct Log {
    pub rx: Vec<Rx>,
    pub sent: u64,
}

pub type Shared = Rc<RefCell<Log>>;

pub fn shared() -> Shared {
    Rc::new(RefCell::new(Log::default()))
}

/// Sends `count` packets of `payload` bytes (plus LRH, BTH, ICRC, VCRC) to `dlid` on `sl`
/// from `start`, as fast as the send queue takes them.
pub struct RawSource {
    pub dlid: u16,
    pub sl: u8,
    pub payload: usize,
    pub remaining: u64,
    pub flow: u32,
    pub start: Picos,
    pub management: bool,
    pub started: bool,
    pub log: Shared,
}

impl RawSource {
    pub fn new(dlid: u16, sl: u8, payload: usize, count: u64, flow: u32, log: Shared) -> Self {
        RawSource {
            dlid,
            sl,
            payload,
            remaining: count,
            flow,
            start: 0,
            management: false,
            started: false,
            log,
        }
    }

    fn fill(&mut self, tx: &mut HcaTx<'_>) {
        if tx.now() < self.start {
            return;
        }
        let len = self.payload + OVERHEAD;
        while self.remaining > 0
            && if self.management {
                tx.has_management_room()
            } else {
                tx.has_room(self.sl)
            }
        {
            let slid = tx.lid();
            let lrh = LrhRepr {
                vl: if self.management {
                    15
                } else {
                    tx.vl_for(self.sl)
                },
                lver: 0,
                sl: self.sl,
                lnh: Lnh::Bth,
                dlid: self.dlid,
                pkt_len_words: ((len - 2) / 4) as u16,
                slid,
            };
            let write = |b: &mut [u8]| {
                lrh.emit(&mut LrhPacket::new_unchecked(&mut b[..])).unwrap();
                b[8..].fill(0x5A);
            };
            let r = if self.management {
                tx.send_management(self.dlid, len, self.flow, write)
            } else {
                tx.send(self.dlid, self.sl, len, self.flow, write)
            };
            r.expect("room was checked");
            self.remaining -= 1;
            self.log.borrow_mut().sent += 1;
        }
    }
}

impl Endpoint for RawSource {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        self.fill(tx);
    }
    fn on_receive(&mut self, _packet: &Packet, _tx: &mut HcaTx<'_>) {}
    fn next_wakeup(&self) -> Option<Picos> {
        (!self.started && self.remaining > 0).then_some(self.start)
    }
    fn on_timer(&mut self, tx: &mut HcaTx<'_>) {
        self.started = true;
        self.fill(tx);
    }
}

/// Records every packet it receives.
pub struct Sink {
    pub log: Shared,
}

impl Endpoint for Sink {
    fn on_transmit_ready(&mut self, _tx: &mut HcaTx<'_>) {}
    fn on_receive(&mut self, packet: &Packet, tx: &mut HcaTx<'_>) {
        self.log.borrow_mut().rx.push(Rx {
            at: tx.now(),
            flow: packet.meta.flow,
            len: packet.meta.len,
            vl: packet.meta.vl,
            injected_at: packet.meta.injected_at,
        });
    }
    fn next_wakeup(&self) -> Option<Picos> {
        None
    }
    fn on_timer(&mut self, _tx: &mut HcaTx<'_>) {}
}

/// Sends `per_dest` packets to each of `dlids`, cycling through them.
pub struct SprayingSource {
    pub dlids: Vec<u16>,
    pub payload: usize,
    pub next: usize,
    pub remaining: u64,
    pub flow: u32,
    pub log: Shared,
}

impl SprayingSource {
    pub fn new(dlids: Vec<u16>, payload: usize, per_dest: u64, flow: u32, log: Shared) -> Self {
        let remaining = per_dest * dlids.len() as u64;
        SprayingSource {
            dlids,
            payload,
            next: 0,
            remaining,
            flow,
            log,
        }
    }
}

impl Endpoint for SprayingSource {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        let len = self.payload + OVERHEAD;
        while self.remaining > 0 && tx.has_room(0) {
            let dlid = self.dlids[self.next % self.dlids.len()];
            self.next += 1;
            let slid = tx.lid();
            let lrh = LrhRepr {
                vl: 0,
                lver: 0,
                sl: 0,
                lnh: Lnh::Bth,
                dlid,
                pkt_len_words: ((len - 2) / 4) as u16,
                slid,
            };
            tx.send(dlid, 0, len, self.flow, |b| {
                lrh.emit(&mut LrhPacket::new_unchecked(&mut b[..])).unwrap();
            })
            .expect("room was checked");
            self.remaining -= 1;
            self.log.borrow_mut().sent += 1;
        }
    }
    fn on_receive(&mut self, packet: &Packet, tx: &mut HcaTx<'_>) {
        self.log.borrow_mut().rx.push(Rx {
            at: tx.now(),
            flow: packet.meta.flow,
            len: packet.meta.len,
            vl: packet.meta.vl,
            injected_at: packet.meta.injected_at,
        });
    }
    fn next_wakeup(&self) -> Option<Picos> {
        None
    }
    fn on_timer(&mut self, _tx: &mut HcaTx<'_>) {}
}
