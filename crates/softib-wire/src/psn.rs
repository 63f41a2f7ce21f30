//! 24-bit packet sequence numbers (BTH PSN, IBA vol. 1, 9.2) and their modular arithmetic.
//!
//! PSNs wrap at 2^24. Comparing two PSNs only makes sense within half the space: the
//! responder treats the 2^23 PSNs before the expected one as duplicates and the rest as
//! "ahead" (IBA 9.7.5), so [`Psn::distance`] maps every difference into -2^23..2^23.

/// Mask of the 24 PSN bits.
pub const PSN_MASK: u32 = 0x00FF_FFFF;

/// Half the PSN space: the largest forward distance [`Psn::distance`] reports is
/// `PSN_HALF - 1`, the largest backward one `-PSN_HALF`.
pub const PSN_HALF: u32 = 1 << 23;

/// A 24-bit packet sequence number. Always holds a value below 2^24.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    /// The PSN of the low 24 bits of `v`.
    pub const fn new(v: u32) -> Psn {
        Psn(v & PSN_MASK)
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The following PSN (2^24 - 1 wraps to 0).
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// `n` PSNs later, modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `n` PSNs earlier, modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// How far `other` is ahead of `self`: positive when `other` comes later, negative when
    /// it comes earlier, in -2^23..2^23 (so `a.add(n).distance(a) == -n` for small `n`, and
    /// `a.distance(a.add(n)) == n`).
    pub const fn distance(self, other: Psn) -> i32 {
        let d = other.0.wrapping_sub(self.0) & PSN_MASK;
        if d >= PSN_HALF {
            d as i32 - (1 << 24)
        } else {
            d as i32
        }
    }

    /// `self` comes strictly before `other` (within half the PSN space).
    pub const fn precedes(self, other: Psn) -> bool {
        self.distance(other) > 0
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

impl core::fmt::Display for Psn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_masks_to_24_bits() {
        assert_eq!(Psn::new(0x0123_4567).value(), 0x23_4567);
    }

    #[test]
    fn next_wraps_at_2_pow_24() {
        assert_eq!(Psn::new(PSN_MASK).next(), Psn::new(0));
        assert_eq!(Psn::new(5).sub(6), Psn::new(PSN_MASK));
    }

    #[test]
    fn distance_is_signed_and_wraps() {
        let a = Psn::new(PSN_MASK - 1);
        assert_eq!(a.distance(Psn::new(3)), 5);
        assert_eq!(Psn::new(3).distance(a), -5);
        assert_eq!(
            Psn::new(0).distance(Psn::new(PSN_HALF - 1)),
            (PSN_HALF - 1) as i32
        );
        assert_eq!(Psn::new(0).distance(Psn::new(PSN_HALF)), -(PSN_HALF as i32));
        assert!(Psn::new(PSN_MASK).precedes(Psn::new(0)));
        assert!(!Psn::new(7).precedes(Psn::new(7)));
    }
}
