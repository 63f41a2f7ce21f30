//! Seeded fault injection on the send path: drop, duplicate, reorder and corrupt datagrams,
//! so users can test how their application (and softib's transport) behaves on a bad
//! network, and so the test suite can produce duplication and reordering, which the Linux
//! kernel here cannot (no netem).
//!
//! Spelled like the command-line knob: `drop=0.01,dup=0.01,reorder=0.2,corrupt=0.005,seed=7`
//! (probabilities per datagram; every key optional; `seed` defaults to 0). The same seed
//! and the same sequence of datagrams give the same faults: every datagram consumes exactly
//! four draws from a ChaCha8 stream (plus one for the bit to flip when corrupted), so a
//! fault pattern does not depend on timing.
//!
//! What each fault does:
//! - `drop`: the datagram is not sent.
//! - `corrupt`: one random bit of the UDP payload (BTH through ICRC) is flipped after the
//!   ICRC was computed; the kernel computes the UDP checksum over the corrupted bytes, so
//!   the receiver's ICRC check (not the kernel) must catch it.
//! - `dup`: the datagram is sent twice.
//! - `reorder`: the datagram is held back and sent after the next one (or after
//!   [`REORDER_HOLD_NS`] if no other datagram comes), so it arrives out of order.
//!
//! No allocation per datagram: the held datagram lives in a buffer allocated once.

use std::net::SocketAddr;
use std::str::FromStr;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Where the injector sends the datagrams that go out: `(destination, traffic class, bytes)`.
pub type Emit<'a> = dyn FnMut(SocketAddr, Option<u8>, &[u8]) + 'a;

/// How long a reordered datagram waits for a successor before it is sent anyway, ns.
pub const REORDER_HOLD_NS: u64 = 200_000;

/// Fault probabilities and seed, parsed from `drop=..,dup=..,reorder=..,corrupt=..,seed=..`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultSpec {
    /// Probability a datagram is dropped.
    pub drop: f64,
    /// Probability a datagram is sent twice.
    pub dup: f64,
    /// Probability a datagram is sent after its successor.
    pub reorder: f64,
    /// Probability one bit of a datagram is flipped.
    pub corrupt: f64,
    /// RNG seed.
    pub seed: u64,
}

/// A fault specification that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    /// A key other than drop, dup, reorder, corrupt, seed.
    #[error("unknown fault key {0:?}: use drop, dup, reorder, corrupt or seed (e.g. drop=0.01,reorder=0.2)")]
    UnknownKey(String),
    /// An item without `=`.
    #[error("fault item {0:?} is not key=value")]
    NotKeyValue(String),
    /// A value that is not a probability (or, for seed, not an integer).
    #[error("fault key {key:?}: {value:?} is not {expected}")]
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What it should have been.
        expected: &'static str,
    },
    /// A key given twice.
    #[error("fault key {0:?} given twice")]
    Duplicate(String),
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<FaultSpec, FaultSpecError> {
        let mut spec = FaultSpec::default();
        let mut seen = [false; 5];
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| FaultSpecError::NotKeyValue(item.to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            let idx = match key {
                "drop" => 0,
                "dup" => 1,
                "reorder" => 2,
                "corrupt" => 3,
                "seed" => 4,
                _ => return Err(FaultSpecError::UnknownKey(key.to_string())),
            };
            if std::mem::replace(&mut seen[idx], true) {
                return Err(FaultSpecError::Duplicate(key.to_string()));
            }
            let bad = |expected| FaultSpecError::BadValue {
                key: key.to_string(),
                value: value.to_string(),
                expected,
            };
            if idx == 4 {
                spec.seed = value.parse().map_err(|_| bad("an unsigned integer"))?;
                continue;
            }
            let p: f64 = value
                .parse()
                .map_err(|_| bad("a probability between 0 and 1"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(bad("a probability between 0 and 1"));
            }
            match idx {
                0 => spec.drop = p,
                1 => spec.dup = p,
                2 => spec.reorder = p,
                _ => spec.corrupt = p,
            }
        }
        Ok(spec)
    }
}

impl std::fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "drop={},dup={},reorder={},corrupt={},seed={}",
            self.drop, self.dup, self.reorder, self.corrupt, self.seed
        )
    }
}

/// What the injector did, for the device counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Datagrams offered.
    pub offered: u64,
    /// Dropped.
    pub dropped: u64,
    /// Sent twice.
    pub duplicated: u64,
    /// Held back behind a successor.
    pub reordered: u64,
    /// One bit flipped.
    pub corrupted: u64,
}

/// The send-path fault injector. Pass every outgoing datagram through [`Injector::apply`];
/// it calls `emit` zero, one or two times (plus once more for a released held datagram).
#[derive(Debug)]
pub struct Injector {
    spec: FaultSpec,
    rng: ChaCha8Rng,
    held: Vec<u8>,
    held_len: usize,
    held_meta: Option<(SocketAddr, Option<u8>, u64)>,
    scratch: Vec<u8>,
    counters: FaultCounters,
}

/// Turns a 64-bit draw into a uniform value in [0, 1).
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

impl Injector {
    /// An injector for datagrams of at most `max_datagram` bytes.
    pub fn new(spec: FaultSpec, max_datagram: usize) -> Injector {
        Injector {
            spec,
            rng: ChaCha8Rng::seed_from_u64(spec.seed),
            held: vec![0; max_datagram],
            held_len: 0,
            held_meta: None,
            scratch: vec![0; max_datagram],
            counters: FaultCounters::default(),
        }
    }

    /// The specification in force.
    pub fn spec(&self) -> FaultSpec {
        self.spec
    }

    /// What has been done so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// Offers one datagram at time `now` (ns); `emit(dest, tos, bytes)` is called for each
    /// datagram that should go out now, in order. A datagram larger than the injector's
    /// buffers is passed through untouched.
    pub fn apply(
        &mut self,
        now: u64,
        dest: SocketAddr,
        tos: Option<u8>,
        datagram: &[u8],
        emit: &mut Emit<'_>,
    ) {
        self.counters.offered += 1;
        let (d_drop, d_corrupt, d_dup, d_reorder) = (
            unit(self.rng.next_u64()),
            unit(self.rng.next_u64()),
            unit(self.rng.next_u64()),
            unit(self.rng.next_u64()),
        );
        let len = datagram.len();
        if len > self.scratch.len() || len == 0 {
            emit(dest, tos, datagram);
            self.release(emit);
            return;
        }
        if d_drop < self.spec.drop {
            self.counters.dropped += 1;
            return;
        }
        self.scratch[..len].copy_from_slice(datagram);
        if d_corrupt < self.spec.corrupt {
            let bit = (self.rng.next_u64() % (len as u64 * 8)) as usize;
            self.scratch[bit / 8] ^= 1 << (bit % 8);
            self.counters.corrupted += 1;
        }
        let copies = if d_dup < self.spec.dup {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        if d_reorder < self.spec.reorder && self.held_meta.is_none() {
            // Hold this one; it goes out after the next datagram (or on timeout).
            self.counters.reordered += 1;
            self.held[..len].copy_from_slice(&self.scratch[..len]);
            self.held_len = len;
            self.held_meta = Some((dest, tos, now + REORDER_HOLD_NS));
            if copies == 2 {
                emit(dest, tos, &self.scratch[..len]);
            }
            return;
        }
        for _ in 0..copies {
            emit(dest, tos, &self.scratch[..len]);
        }
        self.release(emit);
    }

    /// Sends the held datagram, if any.
    fn release(&mut self, emit: &mut Emit<'_>) {
        if let Some((dest, tos, _)) = self.held_meta.take() {
            emit(dest, tos, &self.held[..self.held_len]);
        }
    }

    /// When the held datagram must go out if nothing else is sent, ns.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.held_meta.map(|(_, _, due)| due)
    }

    /// Releases the held datagram if its time has come.
    pub fn handle_timeout(&mut self, now: u64, emit: &mut Emit<'_>) {
        if self.held_meta.is_some_and(|(_, _, due)| due <= now) {
            self.release(emit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: FaultSpec, n: u32) -> (Vec<Vec<u8>>, FaultCounters) {
        let dest: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let mut inj = Injector::new(spec, 64);
        let mut out = Vec::new();
        for i in 0..n {
            let mut pkt = [0u8; 8];
            pkt[..4].copy_from_slice(&i.to_be_bytes());
            pkt[4..].copy_from_slice(&i.to_be_bytes());
            inj.apply(u64::from(i), dest, None, &pkt, &mut |_, _, b| {
                out.push(b.to_vec())
            });
        }
        inj.handle_timeout(u64::MAX, &mut |_, _, b| out.push(b.to_vec()));
        (out, inj.counters())
    }

    #[test]
    fn parses_the_documented_spec_and_names_bad_keys() {
        let s: FaultSpec = "drop=0.01,dup=0.01,reorder=0.2,corrupt=0.005"
            .parse()
            .unwrap();
        assert_eq!(
            (s.drop, s.dup, s.reorder, s.corrupt, s.seed),
            (0.01, 0.01, 0.2, 0.005, 0)
        );
        assert_eq!(s.to_string().parse::<FaultSpec>().unwrap(), s);
        let e = "drop=0.1,lose=0.2".parse::<FaultSpec>().unwrap_err();
        assert_eq!(e, FaultSpecError::UnknownKey("lose".into()));
        assert!(e.to_string().contains("\"lose\""));
        let e = "reorder=1.5".parse::<FaultSpec>().unwrap_err().to_string();
        assert!(e.contains("reorder") && e.contains("probability"), "{e}");
        assert!(matches!(
            "drop".parse::<FaultSpec>(),
            Err(FaultSpecError::NotKeyValue(_))
        ));
        assert!(matches!(
            "drop=0.1,drop=0.2".parse::<FaultSpec>(),
            Err(FaultSpecError::Duplicate(_))
        ));
        assert!(matches!(
            "seed=-1".parse::<FaultSpec>(),
            Err(FaultSpecError::BadValue { .. })
        ));
        assert_eq!("".parse::<FaultSpec>().unwrap(), FaultSpec::default());
    }

    #[test]
    fn no_faults_pass_everything_in_order() {
        let (out, c) = run(FaultSpec::default(), 1000);
        assert_eq!(out.len(), 1000);
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, b)| b[..4] == (i as u32).to_be_bytes()));
        assert_eq!(c.offered, 1000);
    }

    #[test]
    fn same_seed_same_faults_different_seed_different_faults() {
        let spec: FaultSpec = "drop=0.05,dup=0.05,reorder=0.2,corrupt=0.05,seed=42"
            .parse()
            .unwrap();
        let a = run(spec, 5000);
        assert_eq!(a, run(spec, 5000));
        let b = run(FaultSpec { seed: 43, ..spec }, 5000);
        assert_ne!(a.0, b.0);
    }

    #[test]
    fn rates_match_the_spec_and_every_fault_is_visible() {
        let spec: FaultSpec = "drop=0.03,dup=0.01,reorder=0.2,corrupt=0.005,seed=1"
            .parse()
            .unwrap();
        let n = 100_000u32;
        let (out, c) = run(spec, n);
        let rate = |k: u64| k as f64 / f64::from(n);
        assert!((rate(c.dropped) - 0.03).abs() < 0.005, "{c:?}");
        assert!((rate(c.duplicated) - 0.01 * 0.97).abs() < 0.003, "{c:?}");
        assert!((rate(c.corrupted) - 0.005 * 0.97).abs() < 0.002, "{c:?}");
        assert!(rate(c.reordered) > 0.1, "{c:?}");
        assert_eq!(out.len() as u64, u64::from(n) - c.dropped + c.duplicated);
        // A corrupted datagram's two copies of its number differ in exactly one bit.
        let halves = |b: &Vec<u8>| {
            (
                u32::from_be_bytes(b[..4].try_into().unwrap()),
                u32::from_be_bytes(b[4..].try_into().unwrap()),
            )
        };
        let damaged: Vec<(u32, u32)> = out.iter().map(halves).filter(|(a, b)| a != b).collect();
        assert!(damaged.iter().all(|(a, b)| (a ^ b).count_ones() == 1));
        assert!(damaged.len() as u64 >= c.corrupted && damaged.len() as u64 <= 2 * c.corrupted);
        // Out-of-order arrivals exist.
        let seq: Vec<u32> = out.iter().map(|b| halves(b).1).collect();
        assert!(seq.windows(2).filter(|w| w[1] < w[0]).count() as u64 >= c.reordered / 2);
    }
}
