//! Heap buffers of finished work requests, kept for the next posts: a receive WQE's
//! scatter/gather list and a send WQE's inline data.
//!
//! A WQE owns its buffers from the post until its completion. Without reuse every message
//! costs an allocation at the post and a free when the packet that finishes it arrives, so
//! the receive path (`Device::handle_packet`) would reach the allocator once or twice per
//! message. Finished WQEs give their buffers here and posts take them back, so a device in
//! a steady exchange allocates nothing after warm-up. The pool is the device's (one per
//! engine, not per QP) and bounded; its heap is counted in the device's footprint.

use crate::verbs::Sge;

/// Buffers kept at most, per kind: a burst of completions beyond this frees the rest.
const KEEP: usize = 1024;
/// Inline buffers larger than this are freed rather than kept (the device allows up to its
/// `max_inline_data`; typical inline messages are tens of bytes).
const KEEP_INLINE_BYTES: usize = 1024;

/// The recycled buffers of one device.
#[derive(Debug, Default)]
pub(crate) struct WqePools {
    sge_lists: Vec<Vec<Sge>>,
    inline: Vec<Vec<u8>>,
}

impl WqePools {
    /// A copy of `sges` in a recycled list (allocates only when the pool is empty or the
    /// list longer than the one it hands out). A new list is sized exactly, as `to_vec`
    /// does: a queue full of posted receives holds no more heap than before the pool.
    pub fn sge_list(&mut self, sges: &[Sge]) -> Vec<Sge> {
        let mut v = self.sge_lists.pop().unwrap_or_default();
        v.clear();
        v.reserve_exact(sges.len());
        v.extend_from_slice(sges);
        v
    }

    /// A zeroed buffer of `len` bytes for inline data, recycled when one is kept.
    pub fn inline_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.inline.pop().unwrap_or_default();
        v.clear();
        v.reserve_exact(len);
        v.resize(len, 0);
        v
    }

    /// Takes back the scatter/gather list of a finished receive WQE.
    pub fn recycle_sges(&mut self, v: Vec<Sge>) {
        if self.sge_lists.len() < KEEP && v.capacity() > 0 {
            self.sge_lists.push(v);
        }
    }

    /// Takes back the inline data of a finished send WQE.
    pub fn recycle_inline(&mut self, v: Vec<u8>) {
        if self.inline.len() < KEEP && v.capacity() > 0 && v.capacity() <= KEEP_INLINE_BYTES {
            self.inline.push(v);
        }
    }

    /// Heap bytes: the pool's slots and the buffers it keeps.
    pub fn heap_bytes(&self) -> usize {
        use crate::footprint::slots;
        slots::<Vec<Sge>>(self.sge_lists.capacity())
            + self
                .sge_lists
                .iter()
                .map(|v| slots::<Sge>(v.capacity()))
                .sum::<usize>()
            + slots::<Vec<u8>>(self.inline.capacity())
            + self.inline.iter().map(Vec::capacity).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_list_is_reused_with_the_new_contents() {
        let mut p = WqePools::default();
        let a = Sge {
            addr: 1,
            length: 2,
            lkey: 3,
        };
        let v = p.sge_list(&[a, a]);
        assert_eq!(
            v.capacity(),
            2,
            "a new list is sized exactly (the footprint counts it)"
        );
        let ptr = v.as_ptr();
        p.recycle_sges(v);
        let b = Sge { addr: 9, ..a };
        let w = p.sge_list(&[b]);
        assert_eq!(w, [b]);
        assert_eq!(w.as_ptr(), ptr, "the same heap buffer came back");
    }

    #[test]
    fn inline_buffers_come_back_zeroed_and_large_ones_are_not_kept() {
        let mut p = WqePools::default();
        let mut v = p.inline_buffer(8);
        v.copy_from_slice(&[7; 8]);
        p.recycle_inline(v);
        assert_eq!(p.inline_buffer(4), [0; 4]);
        p.recycle_inline(vec![0; KEEP_INLINE_BYTES + 1]);
        assert!(
            p.inline.is_empty(),
            "a buffer above {KEEP_INLINE_BYTES} bytes is freed"
        );
    }
}
