//! The ports to look at once the running event is handled: a FIFO that is emptied after
//! every event (`Fabric::drain_kicks`).
//!
//! A vector read with a cursor and cleared when the cursor reaches its end: the same order
//! as a `VecDeque`, without the ring's index wrapping on every push and pop (a few of each
//! per event; the deque's arithmetic was about 2% of a 1 -> 1 run's instructions).

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Kicks {
    ports: Vec<u32>,
    /// Entries before it were taken.
    head: usize,
}

impl Kicks {
    /// Adds port `q` at the back.
    #[inline]
    pub(super) fn push_back(&mut self, q: u32) {
        self.ports.push(q);
    }

    /// Takes the port at the front, if any; the storage is reused once all are taken.
    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<u32> {
        let q = *self.ports.get(self.head)?;
        self.head += 1;
        if self.head == self.ports.len() {
            self.ports.clear();
            self.head = 0;
        }
        Some(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn pops_in_push_order_like_a_deque_through_interleaved_pushes_and_pops() {
        let mut k = Kicks::default();
        let mut d = VecDeque::new();
        let mut next = 0u32;
        // A fixed pattern of pushes and pops, draining fully now and then.
        for round in 0..200u32 {
            for _ in 0..(round % 5) {
                k.push_back(next);
                d.push_back(next);
                next += 1;
            }
            for _ in 0..(round % 3) {
                assert_eq!(k.pop_front(), d.pop_front());
            }
            if round % 17 == 0 {
                while let Some(q) = d.pop_front() {
                    assert_eq!(k.pop_front(), Some(q));
                }
                assert_eq!(k.pop_front(), None);
                assert_eq!(k.head, 0, "storage reused once drained");
            }
        }
        while let Some(q) = d.pop_front() {
            assert_eq!(k.pop_front(), Some(q));
        }
        assert_eq!(k.pop_front(), None);
    }
}
