//! QP number allocation (IBA vol. 1 §10.2.5: QPNs 0 and 1 are the SMI and GSI; the CA
//! chooses the others). Sequential numbers (0x11, 0x12, ...) are what the simulator keeps,
//! so its runs stay as they were. On a real network they are a gift to an attacker: a
//! third host that guesses a live QPN can make the QP count duplicates or NAK its peer. So
//! a device may scramble them, as some HCAs do: the n-th QP gets `FIRST_QPN + p(n)`, where
//! `p` is a keyed permutation of the 22-bit slot space (a four-round Feistel network), so
//! numbers never repeat, look unrelated to each other, and map back to their slot in O(1)
//! without a table. The key comes from the device's seed, so a seeded run is repeatable.

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
const HALF_BITS: u32 = SLOT_BITS / 2;
const HALF_MASK: u32 = (1 << HALF_BITS) - 1;
const ROUNDS: usize = 4;

/// The bijection between QP slots (creation order) and the offsets above `FIRST_QPN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpnMap {
    round_keys: Option<[u64; ROUNDS]>,
}

impl QpnMap {
    /// The map for `allocation`, keyed from `seed` (ignored for sequential numbers).
    pub fn new(allocation: QpnAllocation, seed: u64) -> QpnMap {
        let round_keys = match allocation {
            QpnAllocation::Sequential => None,
            QpnAllocation::Scrambled => {
                let mut state = seed ^ 0x5150_6e5f_6b65_7931; // "QPn_key1"
                Some(std::array::from_fn(|_| splitmix64(&mut state)))
            }
        };
        QpnMap { round_keys }
    }

    /// The offset above `FIRST_QPN` of the QP in `slot` (`slot < 2^SLOT_BITS`).
    pub fn offset_of_slot(&self, slot: u32) -> u32 {
        let Some(keys) = self.round_keys else {
            return slot;
        };
        let (mut left, mut right) = (slot >> HALF_BITS, slot & HALF_MASK);
        for key in keys {
            (left, right) = (right, left ^ round(right, key));
        }
        (left << HALF_BITS) | right
    }

    /// The slot whose QP has `offset` above `FIRST_QPN`, if `offset` is in the slot space.
    pub fn slot_of_offset(&self, offset: u32) -> Option<u32> {
        if offset >> SLOT_BITS != 0 {
            return None;
        }
        let Some(keys) = self.round_keys else {
            return Some(offset);
        };
        let (mut left, mut right) = (offset >> HALF_BITS, offset & HALF_MASK);
        for key in keys.into_iter().rev() {
            (left, right) = (right ^ round(left, key), left);
        }
        Some((left << HALF_BITS) | right)
    }
}

fn round(half: u32, key: u64) -> u32 {
    let mut state = key ^ u64::from(half);
    (splitmix64(&mut state) as u32) & HALF_MASK
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
