//! CM time values (IBA vol. 1 12.6.5, 12.7.32): every CM timeout field is an exponent `t`
//! meaning 4.096 us x 2^t, the same encoding as the local ACK timeout (9.7.6.1.3).

/// Nanoseconds, as the driver's clock counts them.
pub type Nanos = u64;

/// 4.096 us x 2^t, in nanoseconds. Exponents above 31 are clamped (the fields are 5 bits).
pub const fn exponent_ns(t: u8) -> Nanos {
    let t = if t > 31 { 31 } else { t };
    4096u64 << t
}

/// How long a sender waits for the answer to a message before resending it (IBA 12.4.2):
/// the receiver's response time plus a round trip, taken as twice the packet life time.
pub const fn response_wait_ns(response_timeout: u8, packet_life_time: u8) -> Nanos {
    exponent_ns(response_timeout) + 2 * exponent_ns(packet_life_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_match_the_spec_examples() {
        assert_eq!(exponent_ns(0), 4096);
        assert_eq!(exponent_ns(20), 4_294_967_296); // the kernel's CMA_CM_RESPONSE_TIMEOUT
        assert_eq!(exponent_ns(40), exponent_ns(31));
        assert_eq!(response_wait_ns(10, 8), 4096 * 1024 + 2 * 4096 * 256);
    }
}
