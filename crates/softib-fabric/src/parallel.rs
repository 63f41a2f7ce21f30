//! Conservative parallel simulation on threads: one [`Fabric`] per partition of a
//! [`Partitioning`], each on its own thread, advancing in windows of the lookahead.
//!
//! Every partition holds the whole fabric but runs only the nodes it owns. Whatever one
//! node does to another takes effect at least the link's propagation delay later (see the
//! fabric's `wire` module), so with windows no longer than the shortest delay of a cut link
//! nothing a partition receives at a window's end can concern a moment it has already
//! simulated. Between windows the partitions swap what crossed and agree on where the next
//! window starts (the earliest pending event anywhere, so idle stretches are skipped).
//!
//! Events at one picosecond are ordered by the entity that scheduled them and that entity's
//! own count ([`crate::event::Tie`]), never by the order a partition interleaved them, so
//! the run is the same event for event, counter for counter, at every partition count and
//! equal to an unpartitioned run (`tests/parallel.rs`). The wall clock is the caller's
//! business: nothing here reads one.

use crate::fabric::{BuildError, Cross, Fabric, Partitioning};
use crate::time::Picos;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Why a partitioned run could not run. `E` is what the caller's build step may fail with.
#[derive(Debug, thiserror::Error)]
pub enum ParallelError<E: std::fmt::Display = BuildError> {
    /// A partition's fabric could not be built or partitioned.
    #[error("partition {part}: {error}")]
    Build {
        /// The partition.
        part: usize,
        /// Why.
        error: E,
    },
    /// A partition's thread panicked.
    #[error("partition {part} panicked")]
    Panicked {
        /// The partition.
        part: usize,
    },
}

/// Runs `partitioning.parts()` partitions on as many threads until simulated time `end`.
///
/// `build(i)` makes partition `i`'s fabric on its thread (with the endpoints of the hosts
/// that partition owns, see [`Fabric::owns`]; endpoints need not be `Send`, as they never
/// leave the thread that built them); it must build the same topology, settings and
/// scheduled link changes in every partition. `finish(i, fabric)` extracts what the caller
/// needs from partition `i` after the run. The results come back in partition order.
pub fn run_threads<R: Send>(
    partitioning: &Partitioning,
    end: Picos,
    build: impl Fn(usize) -> Result<Fabric, BuildError> + Sync,
    finish: impl Fn(usize, Fabric) -> R + Sync,
) -> Result<Vec<R>, ParallelError> {
    run_threads_stepped(
        partitioning,
        &[end],
        |i| build(i).map(|f| (f, ())),
        |_, _, _, _| {},
        |i, f, ()| finish(i, f),
    )
}

/// [`run_threads`] with stops: every partition stops at each of `checkpoints` (increasing;
/// the last is the end of the run) with every event up to and including it handled in
/// every partition and none after, and calls `at(i, fabric, state, t)` there (`fabric`
/// reads `now() == t`): what a serial run does between `run_until` calls, e.g. sampling
/// state. `build(i)` returns the partition's fabric and whatever state of its own the
/// caller keeps beside it on the partition's thread (shared recorders, not `Send`);
/// `finish(i, fabric, state)` turns them into the partition's result.
pub fn run_threads_stepped<S, R: Send, E: From<BuildError> + Send + std::fmt::Display>(
    partitioning: &Partitioning,
    checkpoints: &[Picos],
    build: impl Fn(usize) -> Result<(Fabric, S), E> + Sync,
    at: impl Fn(usize, &mut Fabric, &mut S, Picos) + Sync,
    finish: impl Fn(usize, Fabric, S) -> R + Sync,
) -> Result<Vec<R>, ParallelError<E>> {
    let n = partitioning.parts();
    let mail: Vec<Mutex<Vec<Cross>>> = (0..n * n).map(|_| Mutex::new(Vec::new())).collect();
    let next: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(Picos::MAX)).collect();
    let failed = AtomicBool::new(false);
    let barrier = SpinBarrier::new(n);
    let window = partitioning.lookahead().max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|me| {
                let (mail, next, failed, barrier) = (&mail, &next, &failed, &barrier);
                let (build, at, finish) = (&build, &at, &finish);
                scope.spawn(move || -> Result<Option<R>, E> {
                    let built = build(me).and_then(|(mut f, s)| {
                        f.set_partition(partitioning, me)?;
                        Ok((f, s))
                    });
                    if built.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    barrier.wait();
                    if failed.load(Ordering::SeqCst) {
                        return built.map(|_| None);
                    }
                    let (mut f, mut state) = built.unwrap_or_else(|_| unreachable!("checked"));
                    f.ensure_started();
                    let mut stops = checkpoints.iter().copied().peekable();
                    loop {
                        for (dest, msgs) in f.take_outbox().into_iter().enumerate() {
                            if !msgs.is_empty() {
                                mail[me * n + dest].lock().expect("mailbox").extend(msgs);
                            }
                        }
                        barrier.wait();
                        for src in 0..n {
                            let msgs =
                                std::mem::take(&mut *mail[src * n + me].lock().expect("mailbox"));
                            f.deliver_cross(msgs);
                        }
                        next[me].store(f.next_event_time().unwrap_or(Picos::MAX), Ordering::SeqCst);
                        barrier.wait();
                        let start = next
                            .iter()
                            .map(|t| t.load(Ordering::SeqCst))
                            .min()
                            .unwrap_or(Picos::MAX);
                        // Every stop before the next event anywhere has been reached.
                        while let Some(stop) = stops.next_if(|&t| t < start) {
                            f.finish_at(stop);
                            at(me, &mut f, &mut state, stop);
                        }
                        let Some(&stop) = stops.peek() else { break };
                        f.run_window(start.saturating_add(window - 1).min(stop));
                    }
                    Ok(Some(finish(me, f, state)))
                })
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        let mut first_error = None;
        for (part, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(Some(r))) => out.push(r),
                Ok(Ok(None)) => {}
                Ok(Err(error)) => {
                    first_error.get_or_insert(ParallelError::Build { part, error });
                }
                Err(_) => {
                    first_error.get_or_insert(ParallelError::Panicked { part });
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    })
}

/// How the partitions of a distributed run (one process each, e.g. an MPI rank) meet at a
/// window boundary.
pub trait Exchange {
    /// Sends `outgoing[p]` to partition `p` (this partition's own entry is empty) and
    /// returns what every partition sent this one, in partition order.
    fn all_to_all(&mut self, outgoing: Vec<Vec<u8>>) -> Vec<Vec<u8>>;
    /// The minimum of `t` over all partitions.
    fn min_over_partitions(&mut self, t: Picos) -> Picos;
}

/// Why a distributed run stopped.
#[derive(Debug, thiserror::Error)]
pub enum DistributedError {
    /// The fabric could not be partitioned.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// Another partition sent bytes this one cannot read.
    #[error(transparent)]
    Codec(#[from] crate::fabric::CodecError),
}

/// Runs partition `me` of `partitioning` in this process until `end`, meeting the other
/// partitions' processes through `exchange` at every window boundary. `fabric` is this
/// process's whole fabric with the endpoints of the hosts it owns; every process must build
/// the same topology, settings and scheduled link changes. Afterwards `fabric` holds this
/// partition's share of the results.
pub fn run_distributed(
    partitioning: &Partitioning,
    me: usize,
    fabric: &mut Fabric,
    end: Picos,
    exchange: &mut dyn Exchange,
) -> Result<(), DistributedError> {
    run_distributed_stepped(partitioning, me, fabric, &[end], exchange, &mut |_, _| {})
}

/// [`run_distributed`] with stops, as [`run_threads_stepped`]: at each of `checkpoints`
/// (increasing, the last is the end) every process has handled every event up to it and
/// none after, and calls `at(fabric, t)`.
pub fn run_distributed_stepped(
    partitioning: &Partitioning,
    me: usize,
    fabric: &mut Fabric,
    checkpoints: &[Picos],
    exchange: &mut dyn Exchange,
    at: &mut dyn FnMut(&mut Fabric, Picos),
) -> Result<(), DistributedError> {
    fabric.set_partition(partitioning, me)?;
    let window = partitioning.lookahead().max(1);
    fabric.ensure_started();
    let mut stops = checkpoints.iter().copied().peekable();
    loop {
        let incoming = exchange.all_to_all(fabric.take_outbox_bytes());
        for bytes in &incoming {
            fabric.deliver_cross_bytes(bytes)?;
        }
        let start = exchange.min_over_partitions(fabric.next_event_time().unwrap_or(Picos::MAX));
        while let Some(stop) = stops.next_if(|&t| t < start) {
            fabric.finish_at(stop);
            at(fabric, stop);
        }
        let Some(&stop) = stops.peek() else { break };
        fabric.run_window(start.saturating_add(window - 1).min(stop));
    }
    Ok(())
}

/// A reusable barrier that spins briefly and then yields: a window of a busy fabric lasts
/// microseconds, where a sleeping barrier's wake-up would cost as much as the window.
struct SpinBarrier {
    parties: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(parties: usize) -> Self {
        SpinBarrier {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::AcqRel);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if spins < 200 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}
