//! Positive acknowledgements held back to leave after the data they would delay.
//!
//! In an RC ping-pong each side receives a request and answers it: the engine makes the
//! ACK of the request at once, and the application's answer (a SEND, say) a moment later.
//! Sent as made, the ACK costs a `sendmmsg` of its own on the critical path, and on loopback
//! a send runs the whole receive path of the peer before it returns: the answer waits for
//! it. So the driver diverts positive ACKs (opcode Acknowledge with an ACK syndrome) into
//! this fixed buffer while it drains the engine and queues them after everything else of
//! the same flush: they travel in the same `sendmmsg` as the answer, behind it (as the last,
//! shorter segment of its UDP GSO group when they go to the same peer).
//!
//! Reordering them is harmless: an ACK belongs to the responder's half of a QP and a request
//! to the requester's half, each with its own PSN space (IBA vol. 1 §9.7.5.1), and an ACK
//! only confirms what the responder already executed, so its arrival a few hundred
//! nanoseconds later than possible changes nothing but when the requester's send completes.
//! NAKs, ATOMIC Acknowledges and READ responses are never held: someone waits for them.
//!
//! How long: a flush releases what it held unless its caller says an answer is likely to
//! follow at once ([`crate::driver::Driver::process_then_answer`], the polling application
//! that just received completions), and then only until the next flush that sends anything
//! else, a poll that finds nothing, a device-thread turn, or [`HOLD_FOR`] across the
//! application's turns. Nothing is allocated: a full buffer is released first.

use std::net::SocketAddr;

use softib_transport::Nanos;
use softib_wire::{Opcode, Operation, BTH_LEN};

/// Bytes of a held acknowledgement (BTH + AETH = 16; room for a larger variant).
const HELD_LEN: usize = 32;

/// ACKs held at most at once; a flush that finds the buffer full releases it first.
pub(crate) const HELD_MAX: usize = 16;

/// How long (ns) held ACKs may wait across a polling application's turns for its answer.
/// A ping-pong side often receives the request and, a turn later, the ACK of its own last
/// send, which it waits for before answering; 20 us covers that many times over and
/// delays a receive-only stream's ACKs by no more than a few packets' time.
pub(crate) const HOLD_FOR: Nanos = 20_000;

/// One held ACK: the transport packet (no ICRC yet: it is sealed when it joins a batch,
/// because the ICRC covers the IPv4 Identification its place in the batch decides) and
/// where it goes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeldAck {
    /// UDP destination.
    pub dest: SocketAddr,
    /// Traffic class, `None` for the socket default.
    pub tos: Option<u8>,
    len: u8,
    bytes: [u8; HELD_LEN],
}

impl HeldAck {
    /// The transport packet (BTH through AETH).
    pub fn packet(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The fixed buffer of held ACKs, in the order the engine made them.
#[derive(Debug)]
pub(crate) struct AckHold {
    held: [Option<HeldAck>; HELD_MAX],
    count: usize,
    /// When the oldest held ACK was held (engine nanoseconds).
    since: Nanos,
}

impl Default for AckHold {
    fn default() -> AckHold {
        AckHold {
            held: [None; HELD_MAX],
            count: 0,
            since: 0,
        }
    }
}

/// Whether `packet` (BTH and up, no ICRC) is a positive acknowledgement that may wait: an
/// Acknowledge (RC, XRC) whose AETH syndrome is an ACK (IBA vol. 1 §9.3.5: `000` in bits
/// 7:5), not a NAK or RNR NAK.
pub(crate) fn is_plain_ack(packet: &[u8]) -> bool {
    let (Some(&op), Some(&syndrome)) = (packet.first(), packet.get(BTH_LEN)) else {
        return false;
    };
    Opcode::from_u8(op).is_ok_and(|o| o.operation() == Operation::Acknowledge)
        && syndrome >> 5 == 0
        && packet.len() <= HELD_LEN
}

impl AckHold {
    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// How many ACKs are held.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether the oldest held ACK has waited longer than [`HOLD_FOR`] at `now`.
    pub fn overdue(&self, now: Nanos) -> bool {
        self.count > 0 && now.saturating_sub(self.since) > HOLD_FOR
    }

    /// Whether another ACK fits.
    pub fn has_room(&self) -> bool {
        self.count < HELD_MAX
    }

    /// Holds a copy of `packet` (a plain ACK, see [`is_plain_ack`]); false (nothing held)
    /// when the buffer is full or the packet does not fit a slot.
    pub fn hold(&mut self, now: Nanos, dest: SocketAddr, tos: Option<u8>, packet: &[u8]) -> bool {
        if self.count >= HELD_MAX || packet.len() > HELD_LEN {
            return false;
        }
        if self.count == 0 {
            self.since = now;
        }
        let mut bytes = [0u8; HELD_LEN];
        bytes[..packet.len()].copy_from_slice(packet);
        self.held[self.count] = Some(HeldAck {
            dest,
            tos,
            len: packet.len() as u8,
            bytes,
        });
        self.count += 1;
        true
    }

    /// The `k`-th held ACK (from 0, in order); they stay held until [`AckHold::clear`].
    pub fn get(&self, k: usize) -> Option<HeldAck> {
        self.held[..self.count].get(k).copied().flatten()
    }

    /// Forgets the held ACKs (after they joined a batch).
    pub fn clear(&mut self) {
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(op: u8, syndrome: u8) -> [u8; 16] {
        let mut p = [0u8; 16];
        p[0] = op;
        p[BTH_LEN] = syndrome;
        p
    }

    #[test]
    fn only_positive_acknowledges_may_wait() {
        // RC and XRC Acknowledge with an ACK syndrome (credit code 0x1F).
        assert!(is_plain_ack(&ack(0x11, 0x1F)));
        assert!(is_plain_ack(&ack(0xB1, 0x00)));
        // NAK (sequence error) and RNR NAK go at once.
        assert!(!is_plain_ack(&ack(0x11, 0x60)));
        assert!(!is_plain_ack(&ack(0x11, 0x21)));
        // ATOMIC Acknowledge, READ response Only, SEND Only: someone waits for them.
        assert!(!is_plain_ack(&ack(0x12, 0x1F)));
        assert!(!is_plain_ack(&ack(0x10, 0x1F)));
        assert!(!is_plain_ack(&ack(0x04, 0x00)));
        // A runt is no ACK.
        assert!(!is_plain_ack(&[0x11; 4]));
    }

    #[test]
    fn holds_in_order_up_to_its_capacity() {
        let dest: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut h = AckHold::default();
        for i in 0..HELD_MAX {
            let mut p = ack(0x11, 0x1F);
            p[11] = i as u8;
            assert!(h.hold(i as u64, dest, None, &p));
        }
        assert!(!h.has_room());
        assert!(!h.hold(99, dest, None, &ack(0x11, 0x1F)));
        assert!(!h.overdue(HOLD_FOR));
        assert!(h.overdue(HOLD_FOR + 1), "timed from the oldest");
        let psns: Vec<u8> = (0..h.count())
            .map(|k| h.get(k).unwrap().packet()[11])
            .collect();
        assert_eq!(psns, (0..HELD_MAX as u8).collect::<Vec<_>>());
        h.clear();
        assert!(h.is_empty());
        assert!(h.get(0).is_none());
    }
}
