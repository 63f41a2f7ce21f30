//! The event queue: events ordered by (time, tie), where the tie is chosen by the caller.
//!
//! The fabric's tie is (entity that scheduled the event, that entity's own count of events
//! scheduled so far), see [`Tie`]. Two events at the same picosecond so run in an order that
//! depends only on what each entity did, not on the order in which a partition of the
//! fabric happened to interleave the entities: a run is a pure function of the scenario and
//! its seed, and the same whether the fabric runs as one partition or several
//! (`crate::parallel`). An earlier version broke ties by a global insertion counter, which a
//! partitioned run cannot reproduce.
//!
//! Structure: a calendar of `BUCKETS` buckets of `2^WIDTH_SHIFT` ps (about 1 ns, 4.2 us of
//! horizon) in front of a binary heap for events beyond the horizon (flow-control refreshes,
//! engine timers). A later bucket is an unsorted list of chunks of four entries, threaded
//! through one shared slab (`heads[bucket]` -> chunk being filled -> full chunk ...; freed
//! chunks are reused last in, first out); when a bucket's turn comes its entries are moved
//! into the active run, sorted once and read front to back with a cursor (an event
//! scheduled into the running nanosecond is inserted at its place, nearly always the back).
//! A two-level bitmap finds the next non-empty bucket. Scheduling an event into a sparse
//! bucket so touches the 16 KiB head array and a recently freed, cache-hot chunk; a dense
//! bucket (tens of thousands of events pending on a large fabric) is read a chunk, two or
//! three cache lines, at a time. The earlier version kept one vector per bucket, 4096 separate
//! heap buffers visited in rotation, and scheduling was 14% of a 1 -> 1 run's time
//! (`perf record`), nearly all cache misses. A large fabric keeps tens of thousands of
//! events pending, nearly all within a microsecond (serialization, propagation, flow
//! control), where one global heap spends most of the run sifting; a small one has about
//! one event per bucket, where a per-bucket heap cost more than the sort of a one-element
//! run (the first version kept the running bucket as a binary heap: 27% of a 1 -> 1 run's
//! time was the queue).

use crate::time::Picos;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

const WIDTH_SHIFT: u32 = 10;
const BUCKETS: usize = 4096;
const WORDS: usize = BUCKETS / 64;
/// End of a bucket's list and of the free list.
const NIL: u32 = u32::MAX;

/// The order of events at one picosecond: bits 40..64 name the entity that scheduled the
/// event (0 = the fabric itself, node n = n + 1), bits 0..40 count that entity's events.
/// Counts at or above [`Tie::RESERVED`] are keys an entity's event has whatever code
/// schedules it (see the fabric's flow-control wake).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tie(pub u64);

impl Tie {
    /// Bits of the per-entity count.
    pub const COUNT_BITS: u32 = 40;
    /// First count of the reserved range (2^39): ordinary counts stay below it.
    pub const RESERVED: u64 = 1 << (Self::COUNT_BITS - 1);

    /// The tie of `entity`'s event number `count`.
    pub fn new(entity: u32, count: u64) -> Tie {
        debug_assert!(
            entity < 1 << (64 - Self::COUNT_BITS),
            "entity {entity} too large"
        );
        debug_assert!(count < 1 << Self::COUNT_BITS);
        Tie((entity as u64) << Self::COUNT_BITS | count)
    }
}

/// Where in a run's order something happened, for whatever records what the fabric does
/// (a packet capture): the event being handled (`time << 64 | tie`, plus one; 0 while the
/// fabric starts) and the entity whose state the handling code changes. The order depends
/// only on the scenario, never on how the fabric was partitioned, so records taken in
/// several partitions, sorted by it, come out in the order one unpartitioned fabric
/// would have taken them.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct EventOrder {
    /// The event's key plus one (0: the fabric's start, before any event).
    pub event: u128,
    /// The entity (0 = the fabric itself, node n = n + 1).
    pub entity: u32,
}

/// (time, tie) packed into one integer, so that an entry comparison is a single 128-bit
/// compare on the hot path.
#[derive(Clone, Copy)]
struct Entry<E> {
    key: u128,
    event: E,
}

impl<E> Entry<E> {
    fn time(&self) -> Picos {
        (self.key >> 64) as Picos
    }
    fn bucket(&self) -> u64 {
        self.time() >> WIDTH_SHIFT
    }
}

/// Entries per chunk of a bucket's list.
const CHUNK: usize = 4;

/// A piece of a bucket's list: up to `CHUNK` entries side by side (a dense bucket of a large
/// fabric is read a few cache lines at a time, not one line per entry) and the bucket's
/// previous, full chunk.
#[derive(Clone, Copy)]
struct Chunk<E> {
    entries: [Entry<E>; CHUNK],
    len: u32,
    next: u32,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    // Reversed so that `BinaryHeap` (a max-heap) pops the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

/// A deterministic priority queue of events of type `E`.
pub struct EventQueue<E> {
    /// Absolute bucket number (time >> WIDTH_SHIFT) of the bucket in `active`.
    base: u64,
    /// Entries of bucket `base` and earlier, in (time, seq) order; those before `head`
    /// were popped.
    active: Vec<Entry<E>>,
    head: usize,
    /// Entries of buckets base+1 .. base+BUCKETS-1, at index bucket % BUCKETS.
    /// The chunk each bucket's list starts with (the one being filled), `NIL` when the
    /// bucket is empty.
    heads: Vec<u32>,
    /// The lists' chunks; free ones are chained from `free`.
    chunks: Vec<Chunk<E>>,
    free: u32,
    bitmap: [u64; WORDS],
    /// Bit w set when `bitmap[w]` is non-zero: finding the next bucket is two bit scans.
    summary: u64,
    ring_len: usize,
    /// Entries at or beyond bucket base + BUCKETS.
    overflow: BinaryHeap<Entry<E>>,
    scheduled: u64,
}

impl<E: Copy> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

/// Events are small `Copy` values (the fabric's are a few integers), so the running bucket
/// is read by copying entries out rather than moving them.
impl<E: Copy> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            base: 0,
            active: Vec::new(),
            head: 0,
            heads: vec![NIL; BUCKETS],
            chunks: Vec::new(),
            free: NIL,
            bitmap: [0; WORDS],
            summary: 0,
            ring_len: 0,
            overflow: BinaryHeap::new(),
            scheduled: 0,
        }
    }

    /// Schedules `event` at `time`. Events at equal times pop in `tie` order; two events
    /// with the same time and tie pop in an unspecified order (give them distinct ties).
    pub fn push(&mut self, time: Picos, tie: Tie, event: E) {
        self.scheduled += 1;
        let e = Entry {
            key: (time as u128) << 64 | tie.0 as u128,
            event,
        };
        self.place(e);
    }

    fn place(&mut self, e: Entry<E>) {
        let b = e.bucket();
        if b <= self.base {
            // Nearly always the latest key: appended.
            if self.active.last().is_none_or(|last| last.key < e.key) {
                self.active.push(e);
            } else {
                let at = self.head + self.active[self.head..].partition_point(|x| x.key < e.key);
                self.active.insert(at, e);
            }
        } else if b < self.base + BUCKETS as u64 {
            let i = (b % BUCKETS as u64) as usize;
            let h = self.heads[i];
            if h != NIL && (self.chunks[h as usize].len as usize) < CHUNK {
                let c = &mut self.chunks[h as usize];
                c.entries[c.len as usize] = e;
                c.len += 1;
            } else {
                let c = if self.free != NIL {
                    // A reused chunk: only its first entry and its links are written (the
                    // other entries are dead until `len` covers them).
                    let c = self.free;
                    let chunk = &mut self.chunks[c as usize];
                    self.free = chunk.next;
                    chunk.entries[0] = e;
                    chunk.len = 1;
                    chunk.next = h;
                    c
                } else {
                    self.chunks.push(Chunk {
                        entries: [e; CHUNK],
                        len: 1,
                        next: h,
                    });
                    (self.chunks.len() - 1) as u32
                };
                self.heads[i] = c;
            }
            self.bitmap[i / 64] |= 1 << (i % 64);
            self.summary |= 1 << (i / 64);
            self.ring_len += 1;
        } else {
            self.overflow.push(e);
        }
    }

    /// Makes `active` hold the earliest events, if there are any. Nearly always the running
    /// bucket still has one: that test is inlined, the bucket change is not (its register
    /// saves cost more than the test, about 1% of a 1 -> 1 run).
    #[inline]
    fn advance(&mut self) {
        if self.head == self.active.len() {
            self.advance_bucket();
        }
    }

    /// [`Self::advance`] once the running bucket is spent.
    #[inline(never)]
    fn advance_bucket(&mut self) {
        while self.head == self.active.len() {
            self.active.clear();
            self.head = 0;
            if self.ring_len == 0 {
                let Some(first) = self.overflow.peek() else {
                    return;
                };
                self.base = first.bucket();
            } else {
                let start = ((self.base + 1) % BUCKETS as u64) as usize;
                let i = self.next_set(start);
                let offset = (i + BUCKETS - start) % BUCKETS;
                self.base += 1 + offset as u64;
                self.bitmap[i / 64] &= !(1 << (i % 64));
                if self.bitmap[i / 64] == 0 {
                    self.summary &= !(1 << (i / 64));
                }
                // The bucket's list becomes the run (in the spent run's emptied buffer); its
                // chunks go back to the free list.
                let mut c = std::mem::replace(&mut self.heads[i], NIL);
                while c != NIL {
                    let chunk = &mut self.chunks[c as usize];
                    self.active
                        .extend_from_slice(&chunk.entries[..chunk.len as usize]);
                    let next = chunk.next;
                    chunk.next = self.free;
                    self.free = c;
                    c = next;
                }
                self.ring_len -= self.active.len();
                if self.active.len() > 1 {
                    self.active.sort_unstable_by_key(|e| e.key);
                }
            }
            // The horizon moved: bring in overflow entries that are now within it.
            while let Some(first) = self.overflow.peek() {
                if first.bucket() >= self.base + BUCKETS as u64 {
                    break;
                }
                let e = self.overflow.pop().expect("peeked");
                self.place(e);
            }
        }
    }

    /// The first set bitmap position at or after `start`, wrapping (the ring is non-empty).
    fn next_set(&self, start: usize) -> usize {
        let (w0, b0) = (start / 64, start % 64);
        let first = self.bitmap[w0] & (!0u64 << b0);
        if first != 0 {
            return w0 * 64 + first.trailing_zeros() as usize;
        }
        // Words after w0, then (wrapping) words from 0 up to and including w0.
        let after = if w0 + 1 < WORDS {
            self.summary & (!0u64 << (w0 + 1))
        } else {
            0
        };
        let w = if after != 0 {
            after.trailing_zeros() as usize
        } else {
            let before = self.summary & (u64::MAX >> (63 - w0));
            debug_assert!(before != 0, "ring_len > 0 but no bucket is marked");
            before.trailing_zeros() as usize
        };
        // Back in w0 after wrapping: only the bits below b0 are still unvisited.
        let bits = if w == w0 {
            self.bitmap[w] & !(!0u64 << b0)
        } else {
            self.bitmap[w]
        };
        w * 64 + bits.trailing_zeros() as usize
    }

    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<(Picos, E)> {
        self.pop_keyed().map(|(key, e)| ((key >> 64) as Picos, e))
    }

    /// Removes and returns the earliest event with its key, `time << 64 | tie`: the place
    /// of the event in the run's order (see [`EventOrder`]).
    pub fn pop_keyed(&mut self) -> Option<(u128, E)> {
        self.advance();
        let e = *self.active.get(self.head)?;
        self.head += 1;
        Some((e.key, e.event))
    }

    /// Removes and returns the earliest event with its key (as [`EventQueue::pop_keyed`])
    /// if it is due at or before `end` (one look at the queue per event where `peek_time`
    /// then `pop` take two).
    #[inline]
    pub fn pop_until(&mut self, end: Picos) -> Option<(u128, E)> {
        self.advance();
        let e = *self.active.get(self.head)?;
        if e.time() > end {
            return None;
        }
        self.head += 1;
        Some((e.key, e.event))
    }

    /// The time of the earliest event, if any.
    pub fn peek_time(&mut self) -> Option<Picos> {
        self.advance();
        self.active.get(self.head).map(|e| e.time())
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.active.len() - self.head + self.ring_len + self.overflow.len()
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held by the queue's storage (capacity, not just pending events).
    pub fn memory_bytes(&self) -> usize {
        let entry = std::mem::size_of::<Entry<E>>();
        (self.active.capacity() + self.overflow.capacity()) * entry
            + self.chunks.capacity() * std::mem::size_of::<Chunk<E>>()
            + self.heads.len() * std::mem::size_of::<u32>()
    }

    /// How many events were ever scheduled (a cheap progress and cost measure).
    pub fn scheduled_total(&self) -> u64 {
        self.scheduled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn pops_by_time_then_tie() {
        let mut q = EventQueue::new();
        q.push(30, Tie::new(1, 0), "c");
        q.push(10, Tie::new(2, 0), "a3");
        q.push(20, Tie::new(1, 1), "b");
        q.push(10, Tie::new(1, 5), "a2");
        q.push(10, Tie::new(0, 9), "a1");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(10, "a1"), (10, "a2"), (10, "a3"), (20, "b"), (30, "c")]
        );
        assert!(q.is_empty());
        assert_eq!(q.scheduled_total(), 5);
    }

    #[test]
    fn pop_until_stops_at_its_end_and_keeps_what_is_later() {
        let mut q = EventQueue::new();
        q.push(5_000, Tie::new(1, 0), "b");
        q.push(10, Tie::new(1, 1), "a");
        q.push(9_000_000_000, Tie::new(1, 2), "c");
        assert_eq!(q.pop_until(9), None);
        assert_eq!(
            q.pop_until(5_000).map(|(k, e)| ((k >> 64) as Picos, e)),
            Some((10, "a"))
        );
        assert_eq!(
            q.pop_until(5_000).map(|(k, e)| ((k >> 64) as Picos, e)),
            Some((5_000, "b"))
        );
        assert_eq!(q.pop_until(5_000), None);
        assert_eq!(q.len(), 1);
        assert_eq!(
            q.pop_until(Picos::MAX)
                .map(|(k, e)| ((k >> 64) as Picos, e)),
            Some((9_000_000_000, "c"))
        );
        assert_eq!(q.pop_until(Picos::MAX), None);
    }

    #[test]
    fn interleaved_push_pop_keeps_tie_order_among_equal_times() {
        let mut q = EventQueue::new();
        q.push(5, Tie::new(1, 0), 0u32);
        q.push(5, Tie::new(1, 1), 1);
        assert_eq!(q.pop(), Some((5, 0)));
        q.push(5, Tie::new(1, 2), 2);
        assert_eq!(q.peek_time(), Some(5));
        assert_eq!(q.pop(), Some((5, 1)));
        assert_eq!(q.pop(), Some((5, 2)));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn matches_a_reference_ordering_across_buckets_ring_wraps_and_overflow() {
        // A simulation-like workload: pops interleaved with pushes at now + delays from
        // picoseconds to milliseconds; compared against sorting by (time, seq).
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut q = EventQueue::new();
        let mut reference = std::collections::BTreeSet::new();
        let mut seq = 0u64;
        let mut now = 0u64;
        for _ in 0..2_000 {
            let t = now + rng.gen_range(0..50_000);
            q.push(t, Tie(seq), seq);
            reference.insert((t, seq));
            seq += 1;
        }
        for step in 0..200_000u64 {
            if step % 3 != 0 || q.is_empty() {
                let delay = match rng.gen_range(0..10) {
                    0 => rng.gen_range(0..1_000_000_000),
                    1 => 0,
                    2..=4 => rng.gen_range(0..5_000_000),
                    _ => rng.gen_range(0..400_000),
                };
                q.push(now + delay, Tie(seq), seq);
                reference.insert((now + delay, seq));
                seq += 1;
            } else {
                let (t, s) = q.pop().unwrap();
                let first = *reference.iter().next().unwrap();
                assert_eq!((t, s), first, "step {step}");
                reference.remove(&first);
                assert!(t >= now);
                now = t;
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some((t, s)) = q.pop() {
            let first = *reference.iter().next().unwrap();
            assert_eq!((t, s), first);
            reference.remove(&first);
        }
        assert!(reference.is_empty());
    }
}
