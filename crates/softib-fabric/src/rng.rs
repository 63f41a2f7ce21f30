//! Seeded random streams.
//!
//! Every source of randomness in a run (bit errors on a link, marking decisions, traffic
//! start jitter, each engine's key and PSN choices) draws from its own ChaCha8 stream derived
//! from the scenario seed and a stable purpose/index pair. Adding a consumer therefore never
//! shifts the numbers another consumer sees, and the same scenario and seed give the same run.

use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// What a random stream is used for; part of the stream's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Seed handed to a transport engine (`Device::new(config, seed)`).
    Engine,
    /// Bit-error injection on a link.
    LinkErrors,
    /// Congestion-marking decisions at a switch port (Annex A10 Marking_Rate).
    Marking,
    /// Traffic generators (start jitter, random destinations).
    Traffic,
    /// A host's receive processing delay (`[[host]]` `responder_jitter_ns`).
    ResponderDelay,
}

impl StreamKind {
    fn tag(self) -> u64 {
        match self {
            StreamKind::Engine => 1,
            StreamKind::LinkErrors => 2,
            StreamKind::Marking => 3,
            StreamKind::Traffic => 4,
            StreamKind::ResponderDelay => 5,
        }
    }
}

/// Derives independent, reproducible random streams from one scenario seed.
#[derive(Clone, Debug)]
pub struct SeedTree {
    seed: u64,
}

impl SeedTree {
    /// The tree for a scenario seed.
    pub fn new(seed: u64) -> Self {
        SeedTree { seed }
    }

    /// The scenario seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// A 64-bit seed for stream (`kind`, `index`), e.g. the engine seed of HCA 17.
    pub fn derive(&self, kind: StreamKind, index: u64) -> u64 {
        // SplitMix64 finaliser over the three inputs: cheap, well mixed, stable across
        // platforms and releases (unlike `std::hash`).
        let mut z = self
            .seed
            .wrapping_add(kind.tag().wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .wrapping_add(index.wrapping_mul(0xD1B5_4A32_D192_ED03));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A ChaCha8 generator for stream (`kind`, `index`).
    pub fn rng(&self, kind: StreamKind, index: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.derive(kind, index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn same_seed_same_stream_and_streams_differ() {
        let t = SeedTree::new(42);
        let a: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(t.rng(StreamKind::LinkErrors, 3), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(t.rng(StreamKind::LinkErrors, 3), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(
            t.derive(StreamKind::LinkErrors, 3),
            t.derive(StreamKind::LinkErrors, 4)
        );
        assert_ne!(
            t.derive(StreamKind::LinkErrors, 3),
            t.derive(StreamKind::Marking, 3)
        );
        assert_ne!(
            SeedTree::new(1).derive(StreamKind::Engine, 0),
            SeedTree::new(2).derive(StreamKind::Engine, 0)
        );
    }
}
