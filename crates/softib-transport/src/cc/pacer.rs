//! Turns a congestion state (an IBA inter-packet delay or a DCQCN rate) into the earliest
//! time a QP may transmit its next packet. No allocation, no clock: times come in.

use crate::time::Nanos;

/// Nanoseconds `bytes` take on a link of `rate_mbps` Mb/s, rounded up.
pub fn wire_time(bytes: u64, rate_mbps: u64) -> Nanos {
    let bits = bytes as u128 * 8 * 1_000;
    bits.div_ceil(rate_mbps.max(1) as u128) as Nanos
}

/// Start-to-start spacing of packets of `bytes` sent at `rate_bps` bit/s, rounded up.
pub fn gap_at_rate(bytes: u64, rate_bps: u64) -> Nanos {
    let bits = bytes as u128 * 8 * 1_000_000_000;
    bits.div_ceil(rate_bps.max(1) as u128) as Nanos
}

/// The pacing schedule of one QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pacer {
    next: Nanos,
}

impl Pacer {
    /// The earliest time the next packet may leave.
    pub fn earliest(&self) -> Nanos {
        self.next
    }

    /// True if a packet may leave at `now`.
    pub fn ready(&self, now: Nanos) -> bool {
        now >= self.next
    }

    /// A packet left at `now`; the next one may leave `gap` after this one's slot. The slot
    /// is the scheduled time if the driver polled less than one gap late (so a late poll
    /// does not lower the rate), otherwise `now` (an idle QP earns no burst). Returns the
    /// earliest time of the next packet.
    pub fn on_transmit(&mut self, now: Nanos, gap: Nanos) -> Nanos {
        let slot = if now < self.next.saturating_add(gap) {
            self.next.min(now)
        } else {
            now
        };
        self.next = slot.saturating_add(gap).max(now);
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_time_and_rate_gaps_round_up() {
        // 1000 bytes at 100 Gb/s: 80 ns.
        assert_eq!(wire_time(1000, 100_000), 80);
        // 1001 bytes: 80.08 ns -> 81.
        assert_eq!(wire_time(1001, 100_000), 81);
        assert_eq!(wire_time(4096, 1), 32_768_000);
        assert_eq!(gap_at_rate(1000, 50_000_000_000), 160);
        assert_eq!(gap_at_rate(1000, 3), 2_666_666_666_667);
        assert_eq!(
            gap_at_rate(1, 0),
            8_000_000_000,
            "a zero rate counts as 1 bit/s"
        );
    }

    #[test]
    fn schedule_keeps_the_rate_when_polled_late_but_never_bursts() {
        let mut p = Pacer::default();
        assert!(p.ready(0));
        assert_eq!(p.on_transmit(1_000, 100), 1_100);
        assert!(!p.ready(1_099));
        assert!(p.ready(1_100));
        // Polled 30 ns late: the next slot still counts from 1_100.
        assert_eq!(p.on_transmit(1_130, 100), 1_200);
        // On time.
        assert_eq!(p.on_transmit(1_200, 100), 1_300);
        // A long pause: no credit, the schedule restarts at now.
        assert_eq!(p.on_transmit(9_000, 100), 9_100);
        // A packet the gate did not hold (gap 0) leaves the schedule at now.
        assert_eq!(p.on_transmit(9_100, 0), 9_100);
    }
}
