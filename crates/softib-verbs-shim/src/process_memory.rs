//! The engine's view of an on-demand-paging registration (`IBV_ACCESS_ON_DEMAND`): a range
//! of the process's address space that need not be mapped, or not mapped for writing, when
//! it is registered or when a peer reaches it. The implicit ODP region (address NULL,
//! length SIZE_MAX) is the whole address space.
//!
//! Such memory cannot be touched through pointers: an access to a hole would fault and kill
//! the process. Every byte therefore moves through `process_vm_readv`/`process_vm_writev`
//! on the process's own pid, which the kernel carries out on the page tables with the
//! process's own permissions and which return `EFAULT` for an unmapped page or a write to
//! a read-only one instead of faulting. The own process needs no ptrace permission (the
//! kernel's access check passes for the caller's thread group). [`Memory::accessible`]
//! makes the engine refuse an access to a hole before any byte moves, so the peer gets a
//! remote access error (local SGEs: a local protection error), as an ODP NIC's page fault
//! on an unmapped address ends.
//!
//! Two honest limits: a mapping removed between the engine's check and the copy makes the
//! copy fail (nothing outside mapped memory is touched, never a crash, but those bytes are
//! not placed; the failure is counted in [`failed_copies`]); and atomics on
//! such memory are a read and a write under the device lock, atomic with respect to other
//! RDMA atomics but not to the CPU's own atomics on the word.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use softib_transport::Memory;

/// Bytes checked per system call when probing a range.
const PROBE_CHUNK: usize = 64 * 1024;

/// Copies into or out of ODP regions that failed after the engine's check, process-wide.
static FAILED_COPIES: AtomicU64 = AtomicU64::new(0);

/// Copies that failed after the engine's check (a mapping vanished in between); shown
/// with the device's counters under `SOFTIB_DEBUG=1`.
pub fn failed_copies() -> u64 {
    FAILED_COPIES.load(Ordering::Relaxed)
}

/// `len` bytes of the process's address space from `base`, reached by system calls.
#[derive(Debug)]
pub struct ProcessMemory {
    base: usize,
    len: usize,
}

impl ProcessMemory {
    /// The range `base..base + len` (for the implicit region: 0 and `usize::MAX`).
    pub fn new(base: usize, len: usize) -> ProcessMemory {
        ProcessMemory { base, len }
    }

    fn addr(&self, offset: usize) -> Option<usize> {
        self.base.checked_add(offset)
    }

    /// Reads `dst.len()` bytes at process address `addr`; true when all were read.
    fn read_at(addr: usize, dst: &mut [u8]) -> bool {
        if dst.is_empty() {
            return true;
        }
        let local = libc::iovec {
            iov_base: dst.as_mut_ptr().cast(),
            iov_len: dst.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: dst.len(),
        };
        // SAFETY: `local` describes `dst`, writable and owned by the caller; the remote
        // range is only read by the kernel, which checks it against the page tables and
        // returns EFAULT for a hole instead of faulting.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        n == dst.len() as isize
    }

    /// Writes `src` at process address `addr`; true when all were written.
    fn write_at(addr: usize, src: &[u8]) -> bool {
        if src.is_empty() {
            return true;
        }
        let local = libc::iovec {
            iov_base: src.as_ptr() as *mut libc::c_void,
            iov_len: src.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: src.len(),
        };
        // SAFETY: `local` describes `src`, only read by the kernel; the remote range is
        // written by the kernel under the process's page permissions (EFAULT for a hole or
        // a read-only page); the registration contract makes this memory the HCA's to write.
        let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        n == src.len() as isize
    }

    fn fits(&self, offset: usize, n: usize) -> bool {
        offset.checked_add(n).is_some_and(|end| end <= self.len)
    }

    fn word(&self, offset: usize) -> Option<(usize, u64)> {
        if !self.fits(offset, 8) {
            return None;
        }
        let addr = self.addr(offset)?;
        let mut b = [0u8; 8];
        Self::read_at(addr, &mut b).then_some((addr, u64::from_le_bytes(b)))
    }

    fn atomic(&mut self, offset: usize, modify: impl FnOnce(u64) -> u64) -> u64 {
        let Some((addr, old)) = self.word(offset) else {
            FAILED_COPIES.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        if !Self::write_at(addr, &modify(old).to_le_bytes()) {
            FAILED_COPIES.fetch_add(1, Ordering::Relaxed);
        }
        old
    }
}

impl Memory for ProcessMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        let ok = self.fits(offset, dst.len())
            && self.addr(offset).is_some_and(|a| Self::read_at(a, dst));
        if !ok {
            // Never stale bytes from an earlier message: a failed read sends zeros.
            dst.fill(0);
            FAILED_COPIES.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn write(&mut self, offset: usize, src: &[u8]) {
        let ok = self.fits(offset, src.len())
            && self.addr(offset).is_some_and(|a| Self::write_at(a, src));
        if !ok {
            FAILED_COPIES.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn compare_swap(&mut self, offset: usize, compare: u64, swap: u64) -> u64 {
        self.atomic(offset, |old| if old == compare { swap } else { old })
    }

    fn fetch_add(&mut self, offset: usize, add: u64) -> u64 {
        self.atomic(offset, |old| old.wrapping_add(add))
    }

    /// Probes the range: readable when every byte can be read; writable when the bytes
    /// read can be written back unchanged. Writing back the same bytes is sound: the probe
    /// runs only for an access that is about to overwrite exactly these bytes, so it adds
    /// nothing a concurrent writer would not race with anyway.
    fn accessible(&self, offset: usize, len: usize, write: bool) -> bool {
        if !self.fits(offset, len) {
            return false;
        }
        let Some(start) = self.addr(offset) else {
            return false;
        };
        let mut buf = vec![0u8; len.min(PROBE_CHUNK)];
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(PROBE_CHUNK);
            let Some(a) = start.checked_add(done) else {
                return false;
            };
            if !Self::read_at(a, &mut buf[..n]) || (write && !Self::write_at(a, &buf[..n])) {
                return false;
            }
            done += n;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous mapping of `pages` pages.
    fn map(pages: usize, prot: i32) -> *mut u8 {
        // SAFETY: a fresh anonymous mapping; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * 4096,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p.cast()
    }

    #[test]
    fn the_whole_address_space_without_faulting() {
        let mut m = ProcessMemory::new(0, usize::MAX);
        let rw = map(2, libc::PROT_READ | libc::PROT_WRITE);
        let ro = map(1, libc::PROT_READ);
        // A page nobody may touch, kept mapped (PROT_NONE) so that no other test thread's
        // mapping can land there, as it could in a freshly unmapped gap.
        let hole = map(1, libc::PROT_NONE);
        let (rw_a, ro_a, hole_a) = (rw as usize, ro as usize, hole as usize);

        assert!(m.accessible(rw_a, 8192, true));
        m.write(rw_a + 100, b"odp!");
        let mut out = [0u8; 4];
        m.read(rw_a + 100, &mut out);
        assert_eq!(&out, b"odp!");
        assert_eq!(m.fetch_add(rw_a + 200, 5), 0);
        assert_eq!(m.compare_swap(rw_a + 200, 5, 9), 5);
        m.read(rw_a + 200, &mut out);
        assert_eq!(out, [9, 0, 0, 0]);

        // A read-only page: readable, not writable, and a write changes nothing.
        assert!(m.accessible(ro_a, 16, false));
        assert!(!m.accessible(ro_a, 16, true));
        m.write(ro_a, b"nope");
        m.read(ro_a, &mut out);
        assert_eq!(out, [0; 4]);

        // A hole: neither; a read gives zeros; no crash.
        assert!(!m.accessible(hole_a, 1, false));
        assert!(!m.accessible(rw_a + 8190, 4, false) || rw_a + 8192 != hole_a);
        m.read(hole_a, &mut out);
        assert_eq!(out, [0; 4]);
        m.write(hole_a, b"gone");
        assert_eq!(m.fetch_add(hole_a, 1), 0);
        assert!(failed_copies() >= 4);
        assert!(
            !m.accessible(usize::MAX - 2, 4, false),
            "wraps past the end"
        );
        // SAFETY: our own mappings, no longer used.
        unsafe {
            libc::munmap(rw.cast(), 8192);
            libc::munmap(ro.cast(), 4096);
            libc::munmap(hole.cast(), 4096);
        }
    }
}
