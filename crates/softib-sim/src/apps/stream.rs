//! The packet generator of `[[stream]]` tables: UD SEND-only packets from an HCA port,
//! with no QP behind them, as fast as the port's send queue takes them or paced
//! ([`crate::scenario::streams`] has the schema and the plan).

use crate::report::flows::SharedRecorder;
use crate::scenario::streams::SourcePlan;
use softib_fabric::hca::{Endpoint, HcaTx, TRAILER_BYTES};
use softib_fabric::packet::Packet;
use softib_fabric::time::Picos;
use softib_fabric::vlarb::VL15;
use softib_wire::lrh::{Lnh, LrhPacket, LrhRepr, LRH_LEN};
use softib_wire::{BthRepr, DethRepr, Opcode, BTH_LEN, DETH_LEN};

/// DestQP and source QP the generator writes (there is no QP behind them).
pub const NOMINAL_QPN: u32 = 0x100;
/// Q_Key the generator writes.
pub const NOMINAL_QKEY: u32 = 0x1111_1111;

/// A stream source at run time.
#[derive(Clone, Debug)]
struct Active {
    dlids: Vec<u16>,
    next: usize,
    remaining: Option<u64>,
    flow: u32,
    payload: u32,
    start: Picos,
    sl: u8,
    psn: u32,
    interval: Option<Picos>,
    management: bool,
    /// Earliest time of the next packet (paced sources).
    next_at: Picos,
}

/// The endpoint of one HCA port: its stream sources, served round-robin. Every UD
/// SEND-only packet it receives is one completed message of its payload, recorded in the
/// flow recorder if it has one (packet-level figures come from
/// [`crate::report::flows::Metered`]).
#[derive(Clone, Default)]
pub struct Generator {
    sources: Vec<Active>,
    /// The time of the last callback.
    now: Picos,
    rr: usize,
    recorder: Option<SharedRecorder>,
}

impl Generator {
    /// A generator with no sources (a pure sink).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records received messages in `recorder`.
    pub fn with_recorder(recorder: SharedRecorder) -> Self {
        Generator {
            recorder: Some(recorder),
            ..Self::default()
        }
    }

    /// Adds a source sending to `dlids` in turn.
    pub fn add(&mut self, plan: &SourcePlan, dlids: Vec<u16>) {
        self.sources.push(Active {
            dlids,
            next: 0,
            remaining: plan.packets,
            flow: plan.flow,
            payload: plan.payload,
            start: plan.start_ps,
            sl: plan.sl,
            psn: 0,
            interval: plan.interval_ps,
            management: plan.management,
            next_at: plan.start_ps,
        });
    }

    fn fill(&mut self, tx: &mut HcaTx<'_>) {
        let n = self.sources.len();
        if n == 0 {
            return;
        }
        let now = tx.now();
        self.now = now;
        loop {
            let mut sent = false;
            for k in 0..n {
                let i = (self.rr + k) % n;
                let s = &mut self.sources[i];
                let room = if s.management {
                    tx.has_management_room()
                } else {
                    tx.has_room(s.sl)
                };
                if now < s.start
                    || now < s.next_at
                    || s.remaining == Some(0)
                    || s.dlids.is_empty()
                    || !room
                {
                    continue;
                }
                let dlid = s.dlids[s.next % s.dlids.len()];
                let pad = (4 - s.payload % 4) % 4;
                let body = LRH_LEN + BTH_LEN + DETH_LEN + (s.payload + pad) as usize;
                let len = body + TRAILER_BYTES;
                let lrh = LrhRepr {
                    vl: if s.management { VL15 } else { tx.vl_for(s.sl) },
                    lver: 0,
                    sl: s.sl,
                    lnh: Lnh::Bth,
                    dlid,
                    pkt_len_words: ((len - 2) / 4) as u16,
                    slid: tx.lid(),
                };
                let bth = BthRepr {
                    opcode: Opcode::UD_SEND_ONLY,
                    solicited: false,
                    mig_req: false,
                    pad_count: pad as u8,
                    tver: 0,
                    pkey: 0xffff,
                    fecn: false,
                    becn: false,
                    // Subnet management goes to QP0 (IBA 13.5.1).
                    dest_qp: if s.management { 0 } else { NOMINAL_QPN },
                    ack_req: false,
                    psn: s.psn,
                };
                let deth = DethRepr {
                    qkey: if s.management { 0 } else { NOMINAL_QKEY },
                    src_qp: if s.management { 0 } else { NOMINAL_QPN },
                };
                let write = |b: &mut [u8]| {
                    // The buffer is exactly `body` bytes: these writes cannot fail.
                    let _ = lrh.emit(&mut LrhPacket::new_unchecked(&mut b[..LRH_LEN]));
                    let _ = bth.emit(&mut b[LRH_LEN..]);
                    let _ = deth.emit(&mut b[LRH_LEN + BTH_LEN..]);
                    b[LRH_LEN + BTH_LEN + DETH_LEN..].fill(0);
                };
                let r = if s.management {
                    tx.send_management(dlid, len, s.flow, write)
                } else {
                    tx.send(dlid, s.sl, len, s.flow, write)
                };
                if r.is_err() {
                    // The SL maps to no operational VL: counted in PortXmitDiscards by the
                    // port; this source stops rather than spin.
                    s.remaining = Some(0);
                    continue;
                }
                s.next += 1;
                s.psn = (s.psn + 1) & 0xff_ffff;
                if let Some(iv) = s.interval {
                    // Paced from the schedule, not from when the packet could go, so a
                    // source held up by a full queue catches up rather than drifting.
                    s.next_at += iv;
                }
                if let Some(r) = &mut s.remaining {
                    *r -= 1;
                }
                sent = true;
            }
            self.rr = (self.rr + 1) % n;
            if !sent {
                return;
            }
        }
    }
}

impl Endpoint for Generator {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        self.fill(tx);
    }

    fn on_receive(&mut self, packet: &Packet, tx: &mut HcaTx<'_>) {
        let Some(rec) = &self.recorder else { return };
        let bytes = packet.bytes();
        let Some(bth) = bytes.get(LRH_LEN..).and_then(|b| BthRepr::parse(b).ok()) else {
            return;
        };
        if bth.opcode != Opcode::UD_SEND_ONLY {
            return;
        }
        let headers = LRH_LEN + BTH_LEN + DETH_LEN + bth.pad_count as usize + TRAILER_BYTES;
        let payload = bytes.len().saturating_sub(headers) as u64;
        let m = &packet.meta;
        rec.borrow_mut()
            .record_message(m.flow, tx.now(), payload, m.injected_at);
    }

    fn next_wakeup(&self) -> Option<Picos> {
        // Only start times need a timer: afterwards the port's transmit-ready calls drive
        // the sources. A start already passed is served by those calls.
        self.sources
            .iter()
            .filter(|s| s.remaining != Some(0))
            .map(|s| s.start.max(s.next_at))
            // A time already passed is served by the port's transmit-ready calls (the
            // source waits for queue room).
            .filter(|&t| t > self.now)
            .min()
    }

    fn on_timer(&mut self, tx: &mut HcaTx<'_>) {
        let now = tx.now();
        self.fill(tx);
        // Started sources no longer need their timer.
        for s in &mut self.sources {
            if s.start <= now {
                s.start = 0;
            }
        }
    }
}
