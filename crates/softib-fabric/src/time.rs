//! Simulated time.
//!
//! The simulator counts time in integer **picoseconds** (`Picos`). Nanoseconds are too coarse:
//! at 4x NDR (400 Gb/s of data) one byte takes 20 ps and a 64-byte credit block 1.28 ns, and
//! at 4x FDR one byte takes 146.67 ps, so a nanosecond clock would round every packet's
//! serialization time and the error would accumulate over millions of back-to-back packets.
//! A `u64` of picoseconds still spans 213 days of simulated time.
//!
//! The transport engine counts in nanoseconds (`softib_transport` uses `u64` ns, see
//! `docs/design/engine-api.md`); [`to_engine_nanos`] and [`from_engine_nanos`] convert at that
//! boundary. No wall clock is read anywhere in this crate.

/// Simulated time or duration in picoseconds.
pub type Picos = u64;

/// Picoseconds per nanosecond.
pub const PS_PER_NS: Picos = 1_000;
/// Picoseconds per microsecond.
pub const PS_PER_US: Picos = 1_000_000;
/// Picoseconds per millisecond.
pub const PS_PER_MS: Picos = 1_000_000_000;
/// Picoseconds per second.
pub const PS_PER_S: Picos = 1_000_000_000_000;

/// The engine's view of a simulated instant: whole nanoseconds, rounded down, so the engine
/// never sees a time later than the simulator's.
pub fn to_engine_nanos(t: Picos) -> u64 {
    t / PS_PER_NS
}

/// A time the engine asked for (a timer expiry in nanoseconds) as simulator time. Saturates
/// instead of overflowing for "never"-like values.
pub fn from_engine_nanos(ns: u64) -> Picos {
    ns.saturating_mul(PS_PER_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_time_round_trips_whole_nanoseconds() {
        assert_eq!(to_engine_nanos(from_engine_nanos(12_345)), 12_345);
        assert_eq!(to_engine_nanos(1_999), 1);
        assert_eq!(from_engine_nanos(u64::MAX), u64::MAX);
    }
}
