//! One physical port (IBA 7.6, 7.9): the transmit side (per-VL output queues, credits, VL
//! arbiter, flow-control packets sent and taken, transmit-wait accounting) and the receive side (per-VL buffers
//! with their credit state, input FIFOs of a switch port).

use crate::counters::PortCounters;
use crate::credits::{RxCredits, TxCredits, FC_PACKET_BYTES};
use crate::link::{LinkRate, SerTiming};
use crate::packet::{PacketId, MAX_PACKET_BYTES};
use crate::qos::Sl2Vl;
use crate::time::Picos;
use crate::vlarb::VlArbiter;
use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// Data VLs a port can have (VL0..VL14).
pub const DATA_VLS: usize = 15;
/// "No peer" marker.
pub(crate) const NO_PEER: u32 = u32::MAX;
/// "Not waiting" marker for wait-since timestamps.
pub(crate) const NOT_WAITING: Picos = Picos::MAX;

/// Where the packet an output queue entry stands for is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// In this (HCA) port's own send queue.
    Local(PacketId),
    /// At the head of a switch input port's FIFO for that input VL.
    Input { port: u32, vl: u8 },
}

/// Something the peer sent that takes effect at this port at a later time: the receive
/// side's accounting of a data packet whose head has reached the port, or a flow-control
/// packet that has fully arrived. Items are kept in the order the peer sent them and applied
/// lazily, before the port next reads or changes its credit state
/// (`Fabric::apply_wire`).
///
/// Everything one node does to another goes through these items (or an arrival event), at
/// least the link's propagation delay after it was sent: that is what lets a partition of
/// the fabric run ahead of its neighbours by that delay and still compute exactly what one
/// partition would (`crate::parallel`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WireItem {
    /// When it takes effect here.
    pub at: Picos,
    /// The sender's link epoch when it was sent: items of an earlier epoch were lost on the
    /// wire when the link went down (both ends' epochs change together).
    pub epoch: u32,
    /// What it is.
    pub kind: WireKind,
}

/// The two kinds of [`WireItem`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum WireKind {
    /// A data packet's head reached the port: its blocks are accounted in the VL's buffer
    /// (IBA 7.9.4.3, ABR) and `arrive` is when it is whole (cut-through: its eligibility).
    Data {
        id: PacketId,
        vl: u8,
        blocks: u16,
        arrive: Picos,
    },
    /// A flow-control packet arrived: ABR := FCTBS for the receive side, the FCCL for the
    /// transmit side (IBA 7.9.4.2, 7.9.4.3).
    Fc { vl: u8, fctbs: u16, fccl: u16 },
}

/// A flow-control packet on the wire (IBA 7.9.4.2), from [`Port::send_fc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FcPacket {
    /// The VL whose credits it carries.
    pub vl: u8,
    /// The sender's Flow Control Total Blocks Sent on that VL.
    pub fctbs: u16,
    /// The sender's Flow Control Credit Limit for that VL.
    pub fccl: u16,
    /// When it has fully arrived at the peer.
    pub arrives: Picos,
}

/// One VL's state at a port: its transmit side (output queue, credits, arbitration and
/// marking inputs) and its receive side (buffer credits, input FIFO), in one struct.
///
/// A packet's hop reads and writes most of these for its VL. Kept in per-field arrays they
/// were a dozen cache lines apart in a 3 KB `Port`, each a miss on a large fabric; together
/// they are three lines. VL15 (index 15) uses only the queues, `rr_last`, `queued_blocks`
/// and the waiting clock: it has no link-level credits (IBA 7.9.4), so its `tx` and `rx`
/// stay as built.
pub(crate) struct VlState {
    // Transmit side.
    pub out_q: VecDeque<Source>,
    pub tx: TxCredits,
    /// Of a switch output VL, blocks of the packets routed to it and not yet sent.
    pub queued_blocks: u32,
    /// How many times this output VL was found blocked on credits (counted once per
    /// blocked spell, for the congestion marker's root/victim test).
    pub credit_stalls: u64,
    /// When this VL started waiting to send (NOT_WAITING: it is not waiting).
    pub vl_wait_since: Picos,
    /// When the last flow-control packet for this VL was sent.
    pub fc_last: Picos,
    /// The input port number served last (round-robin among inputs).
    pub rr_last: u8,
    // Receive side.
    pub rx: RxCredits,
    pub in_q: VecDeque<PacketId>,
    /// Of a switch input VL, when the FIFO's current head requested its output.
    pub head_since: Picos,
    /// Packets accounted in `rx` that are still on the wire: (arrival time, blocks), kept
    /// only for buffers above the 2048-block window (see `RxCredits::fccl_with_in_flight`).
    pub in_flight: VecDeque<(Picos, u16)>,
    pub in_flight_blocks: u32,
}

impl VlState {
    fn new(rx_blocks: u32) -> Self {
        VlState {
            out_q: VecDeque::new(),
            tx: TxCredits::new(),
            queued_blocks: 0,
            credit_stalls: 0,
            vl_wait_since: NOT_WAITING,
            fc_last: 0,
            rr_last: 0,
            rx: RxCredits::new(rx_blocks),
            in_q: VecDeque::new(),
            head_since: 0,
            in_flight: VecDeque::new(),
            in_flight_blocks: 0,
        }
    }
}

pub(crate) struct Port {
    pub node: u32,
    pub num: u8,
    /// Switch index if this is a switch port.
    pub switch: Option<u32>,
    /// HCA index if this is an HCA port.
    pub hca: Option<u32>,
    pub peer: u32,
    /// The link is up (data and flow-control packets may be sent).
    pub link_up: bool,
    /// Incremented at every link down: packets and flow-control packets sent in an earlier
    /// epoch are lost on arrival.
    pub epoch: u32,
    /// The link rate (timing uses `ser`).
    pub rate: LinkRate,
    /// `rate`'s serialization arithmetic, precomputed.
    pub ser: SerTiming,
    pub delay: Picos,
    /// Operational data VLs (VL0..op_vls-1).
    pub op_vls: u8,
    /// SL2VL of an HCA port (switches keep theirs per (in, out) pair).
    pub sl2vl: Sl2Vl,
    /// The state of each VL (VL0..VL14, then VL15), transmit and receive side together.
    pub vls: [VlState; 16],

    // Transmit side.
    /// The link is busy (a packet or flow-control packet is being serialized) until then.
    pub busy_until: Picos,
    /// A `TxDone` event is scheduled at `busy_until`.
    pub done_scheduled: bool,
    /// Input buffer (port, VL, blocks) to free when the current transmission completes
    /// (its crossbar transfer ends exactly then).
    pub release_on_done: Option<(u32, u8, u16)>,
    pub nonempty: u16,
    /// Entries in all the output queues together (an HCA's backlog, read before every
    /// packet its engine is asked for).
    pub queued: u32,
    /// Output VLs found blocked on credits with a request waiting, since their last grant.
    pub credit_stalled: u16,
    pub arb: VlArbiter,
    pub fc_pending: u16,
    pub fc_interval: Picos,
    /// What the peer sent that has not taken effect here yet, in the order it was sent.
    pub wire_in: VecDeque<WireItem>,
    /// An `FcWake` event is scheduled at this time (NOT_WAITING: none).
    pub fc_wake_at: Picos,
    /// The port found requests it could not grant, no flow-control packet on its way and no
    /// wake pending: the next flow-control packet delivered to it schedules a wake at its
    /// arrival. Cleared when a wake is scheduled.
    pub fc_blocked: bool,
    pub xbar_retry_at: Picos,
    pub wait_since: Picos,
    /// A local packet left the send queue: the HCA endpoint may refill.
    pub refill: bool,

    // Receive side.
    pub vl15_held: u32,
    pub vl15_cap: u32,
    pub xbar_free_at: Picos,

    pub counters: PortCounters,
    /// Bit errors injected on this port's transmit direction, if its cable has any.
    pub errors: Option<Box<LinkErrors>>,
}

/// Bit-error injection on one link direction.
pub(crate) struct LinkErrors {
    ber: f64,
    rng: ChaCha8Rng,
    /// Probability x 2^64 that a packet of n bytes has at least one bit error, per n
    /// (computed on first use; `u64::MAX` = not yet).
    thresholds: Vec<u64>,
}

impl LinkErrors {
    pub fn new(ber: f64, rng: ChaCha8Rng) -> Self {
        LinkErrors {
            ber,
            rng,
            thresholds: vec![u64::MAX; MAX_PACKET_BYTES + 1],
        }
    }

    /// Which bit of a packet of `len` bytes the link flips, if any.
    pub fn draw(&mut self, len: usize) -> Option<usize> {
        let t = &mut self.thresholds[len.min(MAX_PACKET_BYTES)];
        if *t == u64::MAX {
            // P(at least one error in 8 len bits) = 1 - (1 - ber)^(8 len), computed once
            // per length at configuration precision; the per-packet draw is integer.
            let p = -((-self.ber).ln_1p() * 8.0 * len as f64).exp_m1();
            *t = (p.clamp(0.0, 1.0) * u64::MAX as f64) as u64;
            if *t == u64::MAX {
                *t -= 1;
            }
        }
        if self.rng.next_u64() < *t {
            Some(self.rng.gen_range(0..len * 8))
        } else {
            None
        }
    }
}

impl Port {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node: u32,
        num: u8,
        rate: LinkRate,
        delay: Picos,
        op_vls: u8,
        rx_blocks: u32,
        vl15_cap: u32,
        arb: VlArbiter,
        sl2vl: Sl2Vl,
    ) -> Self {
        let vls =
            std::array::from_fn(|v| VlState::new(if v < op_vls as usize { rx_blocks } else { 0 }));
        Port {
            node,
            num,
            switch: None,
            hca: None,
            peer: NO_PEER,
            link_up: true,
            epoch: 0,
            rate,
            ser: rate.timing(),
            delay,
            op_vls,
            sl2vl,
            vls,
            busy_until: 0,
            done_scheduled: false,
            release_on_done: None,
            nonempty: 0,
            queued: 0,
            credit_stalled: 0,
            arb,
            fc_pending: 0,
            fc_interval: 0,
            wire_in: VecDeque::new(),
            fc_wake_at: NOT_WAITING,
            fc_blocked: false,
            xbar_retry_at: NOT_WAITING,
            wait_since: NOT_WAITING,
            refill: false,
            vl15_held: 0,
            vl15_cap,
            xbar_free_at: 0,
            counters: PortCounters::default(),
            errors: None,
        }
    }

    /// Sends the next flow-control packet this port owes, if any, at `now` (the caller has
    /// checked the link is idle): the lowest VL with a pending packet, carrying that VL's
    /// FCTBS and the FCCL it advertises now (IBA 7.9.4.2). The link is busy for the
    /// packet's serialisation; it reaches the peer as a [`WireItem`].
    #[inline]
    pub fn send_fc(&mut self, now: Picos) -> Option<FcPacket> {
        if self.fc_pending == 0 {
            return None;
        }
        let vl = self.fc_pending.trailing_zeros() as u8;
        self.fc_pending &= !(1 << vl);
        let fctbs = self.vls[vl as usize].tx.fctbs();
        let fccl = self.advertise(vl as usize, now);
        self.vls[vl as usize].fc_last = now;
        self.counters.fc_packets_sent += 1;
        let ser = self.ser.ps(FC_PACKET_BYTES);
        self.busy_until = now + ser;
        Some(FcPacket {
            vl,
            fctbs,
            fccl,
            arrives: now + ser + self.delay,
        })
    }

    /// The FCCL to advertise for `vl` at `now`.
    pub fn advertise(&mut self, vl: usize, now: Picos) -> u16 {
        let q = &mut self.vls[vl].in_flight;
        while let Some(&(t, b)) = q.front() {
            if t > now {
                break;
            }
            q.pop_front();
            self.vls[vl].in_flight_blocks -= b as u32;
        }
        self.vls[vl]
            .rx
            .fccl_with_in_flight(self.vls[vl].in_flight_blocks)
    }

    /// Mask of the operational data VLs.
    pub fn data_vl_mask(&self) -> u16 {
        ((1u32 << self.op_vls) - 1) as u16
    }

    pub fn enqueue(&mut self, vl: u8, s: Source) {
        self.vls[vl as usize].out_q.push_back(s);
        self.queued += 1;
        self.nonempty |= 1 << vl;
    }

    /// Starts the waiting clocks of every queued VL (and of the port) that are not running.
    pub fn start_waits(&mut self, now: Picos, except: u16) {
        if self.wait_since == NOT_WAITING && except == 0 && self.nonempty != 0 {
            self.wait_since = now;
        }
        let mut m = self.nonempty & !except;
        while m != 0 {
            let v = m.trailing_zeros() as usize;
            m &= m - 1;
            if self.vls[v].vl_wait_since == NOT_WAITING {
                self.vls[v].vl_wait_since = now;
            }
        }
    }

    /// Stops the port's and `vl`'s waiting clocks: a data packet of `vl` starts now.
    pub fn stop_waits(&mut self, now: Picos, vl: u8) {
        if self.wait_since != NOT_WAITING {
            self.counters.xmit_wait_ps += now - self.wait_since;
            self.wait_since = NOT_WAITING;
        }
        let v = vl as usize;
        if self.vls[v].vl_wait_since != NOT_WAITING {
            self.counters.vl_xmit_wait_ps[v] += now - self.vls[v].vl_wait_since;
            self.vls[v].vl_wait_since = NOT_WAITING;
        }
    }

    /// Closes the running waiting clocks at `now` (the port stops being able to send).
    pub fn close_waits(&mut self, now: Picos) {
        if self.wait_since != NOT_WAITING {
            self.counters.xmit_wait_ps += now - self.wait_since;
            self.wait_since = NOT_WAITING;
        }
        for v in 0..16 {
            if self.vls[v].vl_wait_since != NOT_WAITING {
                self.counters.vl_xmit_wait_ps[v] += now - self.vls[v].vl_wait_since;
                self.vls[v].vl_wait_since = NOT_WAITING;
            }
        }
    }

    /// Counters as of `now`, with running waits included.
    pub fn counters_at(&self, now: Picos) -> PortCounters {
        let mut c = self.counters.clone();
        c.fc_packets_rcvd += self
            .wire_in
            .iter()
            .take_while(|w| w.at <= now)
            .filter(|w| w.epoch == self.epoch && matches!(w.kind, WireKind::Fc { .. }))
            .count() as u64;
        if self.wait_since != NOT_WAITING {
            c.xmit_wait_ps += now - self.wait_since;
        }
        for v in 0..16 {
            if self.vls[v].vl_wait_since != NOT_WAITING {
                c.vl_xmit_wait_ps[v] += now - self.vls[v].vl_wait_since;
            }
        }
        c
    }
}
