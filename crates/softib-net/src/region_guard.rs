//! The per-thread count of live memory-region guards (`MemoryRegion::read`/`write`): a
//! thread that holds one must not call a verb, because the device may be waiting for that
//! very region while holding the lock the verb needs. Every verb asks here first and
//! panics with a message instead of deadlocking (as `RefCell` does for a double borrow).
//! Its own module so `context.rs` and `verbs/` both ask it without importing each other.

use std::cell::Cell;

thread_local! {
    /// Region guards alive in this thread.
    static GUARDS: Cell<usize> = const { Cell::new(0) };
}

/// Panics if this thread holds a region guard (called by every verb before it locks the
/// device).
pub(crate) fn assert_no_guard_held() {
    if GUARDS.with(Cell::get) != 0 {
        panic!(
            "softib: a verb was called while this thread holds a MemoryRegion read()/write() \
             guard; drop the guard first (the device may be waiting for that region)"
        );
    }
}

/// Whether this thread holds a region guard. Dropping an object then leaves it in the
/// device (a leak, not a deadlock: the device thread may be waiting for the guarded region
/// while it holds the lock destruction needs); only a raw region cannot be left behind.
pub(crate) fn guard_held() -> bool {
    GUARDS.with(Cell::get) != 0
}

/// A guard was created on this thread.
pub(crate) fn guard_taken() {
    GUARDS.with(|g| g.set(g.get() + 1));
}

/// A guard of this thread was dropped.
pub(crate) fn guard_dropped() {
    GUARDS.with(|g| g.set(g.get().saturating_sub(1)));
}
