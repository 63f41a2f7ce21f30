//! Device memory (ibv_alloc_dm(3)): on a NIC, a small on-chip memory the host reaches
//! through `ibv_memcpy_to_dm`/`ibv_memcpy_from_dm` and peers through a zero-based memory
//! region (`ibv_reg_dm_mr`). softib's "chip" is the host: a device-memory buffer is a
//! zeroed heap allocation owned by the DM object, never visible to the application except
//! through those verbs. The device has [`MAX_DM_SIZE`] bytes in all (ConnectX-5's MEMIC
//! size), and the copies follow mlx5's rules: offset and length multiples of 4, inside
//! the allocation.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ptr::NonNull;

use softib_net::raw_memory::RawMemory;

/// Device memory of the whole device, in bytes (`max_dm_size`).
pub const MAX_DM_SIZE: usize = 128 * 1024;

/// The largest `log_align_req` accepted (a 4 KiB page).
pub const MAX_LOG_ALIGN: u32 = 12;

/// Why a copy to or from device memory is refused (mlx5's errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmAccessError {
    /// `offset + length` leaves the allocation: EFAULT.
    OutOfRange,
    /// Offset or length not a multiple of 4: EINVAL.
    Misaligned,
}

impl DmAccessError {
    /// The errno mlx5's `memcpy_to_dm`/`memcpy_from_dm` return.
    pub fn errno(self) -> i32 {
        match self {
            DmAccessError::OutOfRange => libc::EFAULT,
            DmAccessError::Misaligned => libc::EINVAL,
        }
    }
}

/// One device-memory allocation.
#[derive(Debug)]
pub struct DmBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is plain bytes owned by this value; concurrent copies of the
// application and the engine race as they would on a NIC's memory, never out of bounds.
unsafe impl Send for DmBuffer {}
// SAFETY: as above; every access goes through bounds-checked raw copies.
unsafe impl Sync for DmBuffer {}

impl DmBuffer {
    /// A zeroed buffer of `len` bytes aligned to `2^log_align`, or None (bad size).
    pub fn new(len: usize, log_align: u32) -> Option<DmBuffer> {
        if len == 0 || log_align > MAX_LOG_ALIGN {
            return None;
        }
        let layout = Layout::from_size_align(len, 1 << log_align).ok()?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some(DmBuffer { ptr, layout })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false (a zero-length DM is refused at allocation).
    pub fn is_empty(&self) -> bool {
        false
    }

    fn check(&self, offset: u64, n: usize) -> Result<usize, DmAccessError> {
        let end = offset
            .checked_add(n as u64)
            .ok_or(DmAccessError::OutOfRange)?;
        if end > self.len() as u64 {
            return Err(DmAccessError::OutOfRange);
        }
        if offset % 4 != 0 || n % 4 != 0 {
            return Err(DmAccessError::Misaligned);
        }
        Ok(offset as usize)
    }

    /// `ibv_memcpy_to_dm`.
    pub fn copy_in(&self, offset: u64, src: &[u8]) -> Result<(), DmAccessError> {
        let at = self.check(offset, src.len())?;
        // SAFETY: at + src.len() <= len (checked); `src` is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(at), src.len())
        };
        Ok(())
    }

    /// `ibv_memcpy_from_dm`.
    pub fn copy_out(&self, offset: u64, dst: &mut [u8]) -> Result<(), DmAccessError> {
        let at = self.check(offset, dst.len())?;
        // SAFETY: as in copy_in.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// The engine's view of `length` bytes at `offset` for `ibv_reg_dm_mr`, or None when the
    /// range leaves the allocation.
    pub fn region(&self, offset: u64, length: usize) -> Option<RawMemory> {
        let end = offset.checked_add(length as u64)?;
        if end > self.len() as u64 {
            return None;
        }
        // SAFETY: the range is inside the allocation, which outlives every MR on it (the
        // DM refuses to be freed while MRs use it).
        Some(unsafe { RawMemory::new(self.ptr.as_ptr().add(offset as usize), length) })
    }
}

impl Drop for DmBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_transport::Memory;

    #[test]
    fn copies_follow_mlx5s_alignment_and_bounds() {
        let dm = DmBuffer::new(100, 6).unwrap();
        assert_eq!(dm.ptr.as_ptr() as usize % 64, 0);
        dm.copy_in(4, b"abcdefgh").unwrap();
        let mut out = [0u8; 8];
        dm.copy_out(4, &mut out).unwrap();
        assert_eq!(&out, b"abcdefgh");
        assert_eq!(dm.copy_in(3, b"abcd"), Err(DmAccessError::Misaligned));
        assert_eq!(dm.copy_in(4, b"abc"), Err(DmAccessError::Misaligned));
        assert_eq!(dm.copy_in(104, b"abcd"), Err(DmAccessError::OutOfRange));
        assert_eq!(
            dm.copy_out(0, &mut [0; 104]),
            Err(DmAccessError::OutOfRange)
        );
        assert_eq!(
            dm.copy_in(u64::MAX - 1, b"abcd"),
            Err(DmAccessError::OutOfRange)
        );
        assert_eq!(DmAccessError::OutOfRange.errno(), libc::EFAULT);
    }

    #[test]
    fn a_region_sees_the_same_bytes_zero_based() {
        let dm = DmBuffer::new(64, 0).unwrap();
        let mut r = dm.region(16, 16).unwrap();
        r.write(0, b"wxyz");
        let mut out = [0u8; 4];
        dm.copy_out(16, &mut out).unwrap();
        assert_eq!(&out, b"wxyz");
        assert!(dm.region(60, 8).is_none());
        assert!(DmBuffer::new(0, 0).is_none());
        assert!(DmBuffer::new(8, 13).is_none());
    }
}
