//! QP number allocation (IBA vol. 1 §10.2.5: QPNs 0 and 1 are the SMI and GSI; the CA
//! chooses the others). Sequential numbers (0x11, 0x12, ...) are what the simulator keeps,
//! so its runs stay as they were. On a real network they are a gift to an attacker: a
//! third host that guesses a live QPN can make the QP count duplicates or NAK its peer. So
//! a device may scramble them, as some HCAs do: the n-th QP gets `FIRST_QPN + p(n)`, where
//! `p` is a keyed permutation of the 22-bit slot space (a four-round Feistel network), so
//! numbers never repeat, look unrelated to each other, and map back to their slot in O(1)
//! without a table. The key comes from the device's seed, so a seeded run is repeatable.
//!
//! A device may also keep fixed high bits of the offset ([`QpnPrefix`]): softib-net gives
//! each process sharing one device address a slot and puts it there, so the process that
//! owns the UDP port finds the process a datagram's DestQP belongs to without a table
//! (docs/design/net.md, "Several processes on one address"). The permutation then runs
//! over the remaining bits only.

/// How a device numbers its QPs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QpnAllocation {
    /// 0x11, 0x12, ... in creation order (the simulator, tests that name QPNs).
    #[default]
    Sequential,
    /// A keyed permutation of the slot numbers: hard to guess from outside (real networks).
    Scrambled,
}

/// Bits of the slot space: 2^22 QPs, so `FIRST_QPN + slot` stays below 2^24 (BTH DestQP).
pub const SLOT_BITS: u32 = 22;
const ROUNDS: usize = 4;

/// Fixed high bits of every QPN offset a device gives out: `value` in the top `bits` of the
/// [`SLOT_BITS`]-bit offset. `bits` must be even and below `SLOT_BITS` (the permutation
/// splits the rest into two equal halves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpnPrefix {
    /// How many high bits are fixed.
    pub bits: u32,
    /// Their value (`< 2^bits`).
    pub value: u32,
}

impl QpnPrefix {
    /// The prefix of `offset` (the fixed bits' value), if `offset` is in the slot space.
    pub fn of_offset(bits: u32, offset: u32) -> Option<u32> {
        (offset >> SLOT_BITS == 0).then(|| offset >> (SLOT_BITS - bits))
    }
}

/// The bijection between QP slots (creation order) and the offsets above `FIRST_QPN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpnMap {
    round_keys: Option<[u64; ROUNDS]>,
    /// Bits below the prefix: the space the slots are numbered in.
    free_bits: u32,
    /// The prefix, already shifted into place.
    prefix: u32,
}

impl QpnMap {
    /// The map for `allocation`, keyed from `seed` (ignored for sequential numbers).
    pub fn new(allocation: QpnAllocation, seed: u64) -> QpnMap {
        QpnMap::with_prefix(allocation, seed, None)
    }

    /// The map for `allocation` whose offsets all carry `prefix` in their high bits.
    /// A prefix with an odd or too large bit count, or a value that does not fit, is
    /// clamped into range (the fixed bits are then fewer than asked, never wrong).
    pub fn with_prefix(allocation: QpnAllocation, seed: u64, prefix: Option<QpnPrefix>) -> QpnMap {
        let round_keys = match allocation {
            QpnAllocation::Sequential => None,
            QpnAllocation::Scrambled => {
                let mut state = seed ^ 0x5150_6e5f_6b65_7931; // "QPn_key1"
                Some(std::array::from_fn(|_| splitmix64(&mut state)))
            }
        };
        let (bits, value) = prefix.map_or((0, 0), |p| {
            let bits = (p.bits & !1).min(SLOT_BITS - 2);
            (bits, p.value & ((1 << bits) - 1))
        });
        let free_bits = SLOT_BITS - bits;
        QpnMap {
            round_keys,
            free_bits,
            prefix: value << free_bits,
        }
    }

    /// How many QPs the map numbers (`2^(SLOT_BITS - prefix bits)`).
    pub fn capacity(&self) -> u32 {
        1 << self.free_bits
    }

    /// The offset above `FIRST_QPN` of the QP in `slot` (`slot < capacity()`).
    pub fn offset_of_slot(&self, slot: u32) -> u32 {
        let slot = slot & (self.capacity() - 1);
        let Some(keys) = self.round_keys else {
            return self.prefix | slot;
        };
        let half = self.free_bits / 2;
        let mask = (1 << half) - 1;
        let (mut left, mut right) = (slot >> half, slot & mask);
        for key in keys {
            (left, right) = (right, left ^ round(right, key, mask));
        }
        self.prefix | (left << half) | right
    }

    /// The slot whose QP has `offset` above `FIRST_QPN`, if `offset` is in the slot space
    /// and carries this map's prefix.
    pub fn slot_of_offset(&self, offset: u32) -> Option<u32> {
        if offset >> SLOT_BITS != 0 || offset & !(self.capacity() - 1) != self.prefix {
            return None;
        }
        let offset = offset & (self.capacity() - 1);
        let Some(keys) = self.round_keys else {
            return Some(offset);
        };
        let half = self.free_bits / 2;
        let mask = (1 << half) - 1;
        let (mut left, mut right) = (offset >> half, offset & mask);
        for key in keys.into_iter().rev() {
            (left, right) = (right ^ round(left, key, mask), left);
        }
        Some((left << half) | right)
    }
}

fn round(half: u32, key: u64, mask: u32) -> u32 {
    let mut state = key ^ u64::from(half);
    (splitmix64(&mut state) as u32) & mask
}

/// SplitMix64 (Steele, Lea and Flood 2014): a fast, well-mixed 64-bit step.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_numbers_are_the_slots() {
        let m = QpnMap::new(QpnAllocation::Sequential, 7);
        assert_eq!(m.offset_of_slot(0), 0);
        assert_eq!(m.offset_of_slot(5), 5);
        assert_eq!(m.slot_of_offset(5), Some(5));
    }

    #[test]
    fn scrambled_numbers_map_back_to_their_slots_and_never_repeat() {
        let m = QpnMap::new(QpnAllocation::Scrambled, 42);
        let mut seen = std::collections::HashSet::new();
        for slot in (0..5000).chain([(1 << SLOT_BITS) - 1]) {
            let off = m.offset_of_slot(slot);
            assert!(
                off >> SLOT_BITS == 0,
                "offset {off:#x} outside the slot space"
            );
            assert!(seen.insert(off), "offset {off:#x} given twice");
            assert_eq!(m.slot_of_offset(off), Some(slot));
        }
        assert_eq!(m.slot_of_offset(1 << SLOT_BITS), None);
    }

    #[test]
    fn prefixed_numbers_keep_their_prefix_and_map_back() {
        for allocation in [QpnAllocation::Sequential, QpnAllocation::Scrambled] {
            let prefix = QpnPrefix { bits: 6, value: 37 };
            let m = QpnMap::with_prefix(allocation, 9, Some(prefix));
            assert_eq!(m.capacity(), 1 << 16);
            let mut seen = std::collections::HashSet::new();
            for slot in (0..3000).chain([(1 << 16) - 1]) {
                let off = m.offset_of_slot(slot);
                assert_eq!(QpnPrefix::of_offset(6, off), Some(37), "{off:#x}");
                assert!(seen.insert(off), "offset {off:#x} given twice");
                assert_eq!(m.slot_of_offset(off), Some(slot));
            }
            // Another prefix's numbers are not this map's.
            let other = QpnMap::with_prefix(allocation, 9, Some(QpnPrefix { bits: 6, value: 36 }));
            assert_eq!(m.slot_of_offset(other.offset_of_slot(5)), None);
        }
    }

    #[test]
    fn scrambled_numbers_are_not_consecutive_and_follow_the_seed() {
        let a = QpnMap::new(QpnAllocation::Scrambled, 1);
        let b = QpnMap::new(QpnAllocation::Scrambled, 2);
        let first: Vec<u32> = (0..8).map(|s| a.offset_of_slot(s)).collect();
        let consecutive = first.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert_eq!(consecutive, 0, "{first:x?}");
        assert_eq!(
            first,
            (0..8).map(|s| a.offset_of_slot(s)).collect::<Vec<_>>()
        );
        assert_ne!(
            first,
            (0..8).map(|s| b.offset_of_slot(s)).collect::<Vec<_>>()
        );
    }
}
