//! The engine's view of an application buffer registered with `ibv_reg_mr`: a raw pointer
//! and a length. This module and `sys`/`ffi` are the only places with `unsafe` code.
//!
//! Contract (ibv_reg_mr(3), the same one hardware imposes): the application keeps the
//! buffer mapped until `ibv_dereg_mr`; the engine touches it only through [`Memory`], whose
//! callers have checked keys, access rights and bounds (docs/design/engine-api.md). The
//! bounds are checked once more here, so no byte outside the region is ever read or written.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use softib_transport::Memory;

/// `len` bytes of application memory at `base`.
#[derive(Debug)]
pub struct RawMemory {
    base: *mut u8,
    len: usize,
}

// SAFETY: the region is plain memory owned by the application; the engine only touches it
// while holding the device lock, so moving the handle to the device thread is sound.
unsafe impl Send for RawMemory {}

impl RawMemory {
    /// Wraps an application buffer.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped and writable (for regions the engine writes)
    /// until this value is dropped (at `ibv_dereg_mr`).
    pub unsafe fn new(base: *mut u8, len: usize) -> RawMemory {
        RawMemory { base, len }
    }

    fn fits(&self, offset: usize, n: usize) -> bool {
        offset.checked_add(n).is_some_and(|end| end <= self.len)
    }
}

impl Memory for RawMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        if !self.fits(offset, dst.len()) {
            return;
        }
        // SAFETY: offset + dst.len() <= len (checked above), and the region is mapped per
        // the registration contract; `dst` is a distinct Rust buffer, so no overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(offset), dst.as_mut_ptr(), dst.len()) }
    }

    fn write(&mut self, offset: usize, src: &[u8]) {
        if !self.fits(offset, src.len()) {
            return;
        }
        // SAFETY: as in `read`, with the region writable per the registration contract.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(offset), src.len()) }
    }

    fn compare_swap(&mut self, offset: usize, compare: u64, swap: u64) -> u64 {
        self.atomic(
            offset,
            |a| match a.compare_exchange(
                compare.to_le(),
                swap.to_le(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(v) | Err(v) => u64::from_le(v),
            },
            |old| if old == compare { swap } else { old },
        )
    }

    fn fetch_add(&mut self, offset: usize, add: u64) -> u64 {
        self.atomic(
            offset,
            // A wrapping add of a little-endian value is only a native add on LE hosts.
            |a| {
                if cfg!(target_endian = "little") {
                    a.fetch_add(add, Ordering::SeqCst)
                } else {
                    let mut old = a.load(Ordering::SeqCst);
                    loop {
                        let new = (u64::from_le(old).wrapping_add(add)).to_le();
                        match a.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst) {
                            Ok(v) => return u64::from_le(v),
                            Err(v) => old = v,
                        }
                    }
                }
            },
            |old| old.wrapping_add(add),
        )
    }

    /// ATOMIC WRITE: a release store of the word when the address is 8-byte aligned, so
    /// the application's threads see the old or the new value and every earlier write of
    /// the engine before it (IBA 1.5 orders the ATOMIC WRITE after prior operations);
    /// otherwise a plain copy (the responder refuses misaligned VAs before this point).
    fn atomic_store(&mut self, offset: usize, value: [u8; 8]) {
        if !self.fits(offset, 8) {
            return;
        }
        // SAFETY: offset + 8 <= len (checked above).
        let p = unsafe { self.base.add(offset) };
        if (p as usize) % 8 == 0 {
            // SAFETY: `p` is 8-byte aligned and inside the mapped region; the bytes are
            // stored as given (native order of the bytes in memory, not a number).
            let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
            a.store(u64::from_ne_bytes(value), Ordering::Release);
        } else {
            self.write(offset, &value);
        }
    }
}

impl RawMemory {
    /// Runs an 8-byte atomic at `offset`: a CPU atomic when the address is 8-byte aligned
    /// (so the application's own atomics on the word stay coherent with the HCA's, as
    /// IBA 10.7.2.4 expects of a host), otherwise a plain read-modify-write (the responder
    /// refuses misaligned atomics before this point; this path only keeps a bad call safe).
    fn atomic(
        &mut self,
        offset: usize,
        aligned: impl FnOnce(&AtomicU64) -> u64,
        modify: impl FnOnce(u64) -> u64,
    ) -> u64 {
        if !self.fits(offset, 8) {
            return 0;
        }
        // SAFETY: offset + 8 <= len (checked above).
        let p = unsafe { self.base.add(offset) };
        if (p as usize) % 8 == 0 {
            // SAFETY: `p` is 8-byte aligned, inside the mapped region, and only accessed
            // atomically by the engine for the duration of this call.
            let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
            aligned(a)
        } else {
            // SAFETY: in bounds (checked above); unaligned accesses use the unaligned calls.
            let old = u64::from_le(unsafe { std::ptr::read_unaligned(p.cast::<u64>()) });
            // SAFETY: as above.
            unsafe { std::ptr::write_unaligned(p.cast::<u64>(), modify(old).to_le()) };
            old
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_and_atomics_stay_inside_the_region() {
        let mut buf = vec![0u8; 32];
        // SAFETY: `buf` outlives `m` and is not touched while `m` is used.
        let mut m = unsafe { RawMemory::new(buf.as_mut_ptr().wrapping_add(8), 16) };
        m.write(0, &[1, 2, 3]);
        m.write(14, &[9, 9, 9]); // would leave the region: ignored
        let mut out = [0u8; 3];
        m.read(0, &mut out);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(m.fetch_add(8, 5), 0);
        assert_eq!(m.compare_swap(8, 5, 42), 5);
        assert_eq!(m.compare_swap(8, 5, 7), 42);
        assert_eq!(
            m.fetch_add(1, 1),
            u64::from_le_bytes([2, 3, 0, 0, 0, 0, 0, 42])
        );
        let _ = m;
        assert_eq!(&buf[..8], &[0; 8]);
        assert_eq!(&buf[24..], &[0; 8]);
        assert_eq!(buf[16], 42);
    }

    #[test]
    fn atomic_store_writes_the_bytes_as_given_and_stays_inside_the_region() {
        let mut buf = vec![0u64; 4];
        // SAFETY: `buf` outlives `m` and is not touched while `m` is used.
        let mut m = unsafe { RawMemory::new(buf.as_mut_ptr().cast::<u8>().wrapping_add(8), 16) };
        m.atomic_store(8, [1, 2, 3, 4, 5, 6, 7, 8]);
        let mut word = [0u8; 8];
        m.read(8, &mut word);
        assert_eq!(word, [1, 2, 3, 4, 5, 6, 7, 8], "bytes as given");
        m.atomic_store(12, [0xFF; 8]); // would leave the region: ignored
        let _ = m;
        assert_eq!(buf[2].to_ne_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
        // SAFETY: as above.
        let mut m = unsafe { RawMemory::new(buf.as_mut_ptr().cast::<u8>().wrapping_add(8), 16) };
        m.atomic_store(3, [7; 8]); // unaligned: a plain copy
        let _ = m;
        assert_eq!(buf[2].to_ne_bytes(), [7, 7, 7, 4, 5, 6, 7, 8]);
        assert_eq!(buf[1].to_ne_bytes(), [0, 0, 0, 7, 7, 7, 7, 7]);
        assert_eq!(buf[3], 0);
        assert_eq!(buf[0], 0);
    }
}
