//! The notification point (the destination of congested traffic): which received packets
//! are answered with a BECN, and how, and how often a QP may send a CNP.
//!
//! - IBA Annex A10: a packet with FECN set tells the destination that a switch on the way
//!   was congested; it returns BECN to the source, in the ACK for RC (the BECN bit of the
//!   ACK's BTH) and in a congestion notification packet (CNP) where no ACK goes back
//!   (UC, UD, and RDMA READ responses, which the requester never acknowledges).
//! - IBA Annex A17 (RoCEv2): a valid packet carrying ECN Congestion Experienced in its IP
//!   header is answered with a CNP (opcode 0x81), for every service; the HCA may send one
//!   CNP for several marked packets of a QP, so CNPs are rate limited per QP
//!   (`min_time_between_cnps`, as ConnectX NICs call it).
//! - Acknowledgements and CNPs never trigger a notification: they carry no data whose
//!   source could slow down, and answering them could loop.

use softib_wire::{Opcode, Operation, Service};

use crate::time::Nanos;

/// How the destination answers one received packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Notify {
    /// Not congested, or a packet that never triggers a notification.
    Nothing,
    /// Set BECN in the next ACK (or read/atomic response) of this RC QP.
    BecnInAck,
    /// Send a CNP to the source QP.
    Cnp,
}

/// The rule for a received packet with BTH opcode `opcode`, BTH FECN `fecn` and an ECN CE
/// mark `ecn_ce` (RoCEv2) from the driver.
pub fn notification(opcode: Opcode, fecn: bool, ecn_ce: bool) -> Notify {
    if !fecn && !ecn_ce {
        return Notify::Nothing;
    }
    if opcode.service() == Service::Cnp
        || matches!(
            opcode.operation(),
            Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    {
        return Notify::Nothing;
    }
    if ecn_ce {
        return Notify::Cnp;
    }
    if matches!(opcode.service(), Service::Rc | Service::Xrc) && !opcode.is_response() {
        Notify::BecnInAck
    } else {
        Notify::Cnp
    }
}

/// Per-QP CNP rate limiter: at most one CNP per `min_interval`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CnpLimiter {
    last: Option<Nanos>,
}

impl CnpLimiter {
    /// True (and the CNP counts as sent at `now`) if the last one is at least
    /// `min_interval` ago.
    pub fn allow(&mut self, now: Nanos, min_interval: Nanos) -> bool {
        match self.last {
            Some(t) if now.saturating_sub(t) < min_interval => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(v: u8) -> Opcode {
        Opcode::from_u8(v).unwrap()
    }

    #[test]
    fn rules_per_opcode() {
        use Notify::*;
        // RC SEND_ONLY (0x04) with FECN: BECN in the ACK; with CE: CNP.
        assert_eq!(notification(op(0x04), true, false), BecnInAck);
        assert_eq!(notification(op(0x04), false, true), Cnp);
        assert_eq!(notification(op(0x04), true, true), Cnp);
        assert_eq!(notification(op(0x04), false, false), Nothing);
        // RC READ REQUEST: answered by a response that carries the BECN.
        assert_eq!(notification(op(0x0C), true, false), BecnInAck);
        // RC READ RESPONSE FIRST/ONLY: nobody ACKs them -> CNP to the responder.
        assert_eq!(notification(op(0x0D), true, false), Cnp);
        assert_eq!(notification(op(0x10), true, false), Cnp);
        // UC SEND_ONLY and UD SEND_ONLY: CNP.
        assert_eq!(notification(op(0x24), true, false), Cnp);
        assert_eq!(notification(op(0x64), true, false), Cnp);
        // ACK, ATOMIC ACK, CNP: never.
        for v in [0x11, 0x12, 0x81] {
            assert_eq!(notification(op(v), true, true), Nothing, "opcode {v:#x}");
        }
    }

    #[test]
    fn limiter_allows_one_per_interval() {
        let mut l = CnpLimiter::default();
        assert!(l.allow(100, 50_000));
        assert!(!l.allow(100, 50_000));
        assert!(!l.allow(50_099, 50_000));
        assert!(l.allow(50_100, 50_000));
        assert!(l.allow(50_100, 0), "0 = no limit");
        assert!(l.allow(50_100, 0));
    }
}
