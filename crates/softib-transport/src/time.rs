//! Virtual time: the driver passes nanoseconds in; the engine never reads a clock.

/// Nanoseconds since an epoch the driver chooses (ARCHITECTURE.md, "sans-IO engine contract").
pub type Nanos = u64;

/// The local ACK timeout for the 5-bit `timeout` attribute: 4.096 us x 2^timeout,
/// where 0 means "never time out" (IBA 9.7.6.1.3, "local ACK timeout").
///
/// Returns `None` for 0 (no timeout). Values above 31 are clamped to 31, the largest
/// value the 5-bit field can hold (`modify_qp` rejects them before they get here).
pub fn local_ack_timeout(timeout: u8) -> Option<Nanos> {
    if timeout == 0 {
        None
    } else {
        Some(4096u64 << timeout.min(31))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ack_timeout_matches_the_spec_formula() {
        assert_eq!(local_ack_timeout(0), None);
        assert_eq!(local_ack_timeout(10), Some(4_194_304));
        assert_eq!(local_ack_timeout(14), Some(67_108_864));
        assert_eq!(local_ack_timeout(16), Some(268_435_456));
        assert_eq!(local_ack_timeout(31), Some(4096u64 << 31));
    }
}
