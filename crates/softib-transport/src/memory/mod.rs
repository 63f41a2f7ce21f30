//! Registered memory: the `Memory` trait the drivers back with real buffers, and the
//! memory-region table with its protection checks (IBA 10.6: keys, bounds, PD, access).
//!
//! Every check is a pure function that returns the exact error before any byte moves; the
//! data path calls `read`/`write`/atomics only with ranges a check accepted.

mod fault;
mod key;
pub mod mw;

pub use fault::{LocalAccessFault, RemoteAccessFault};
pub(crate) use key::key_index;
use key::{is_window_key, MW_INDEX_BASE};

use crate::verbs::{AccessFlags, PdHandle, Sge};

/// Byte storage behind a memory region. The engine checks bounds, keys and access flags
/// before calling any method, so implementations may assume `offset + len <= self.len()`.
pub trait Memory: Send {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True when the region has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]);
    /// Copies `src` to `offset`.
    fn write(&mut self, offset: usize, src: &[u8]);
    /// 8-byte compare-and-swap, little-endian in memory (what rxe does on x86 hosts).
    /// Returns the original value.
    fn compare_swap(&mut self, offset: usize, compare: u64, swap: u64) -> u64;
    /// 8-byte fetch-and-add, little-endian in memory, wrapping. Returns the original value.
    fn fetch_add(&mut self, offset: usize, add: u64) -> u64;
    /// Stores the 8 bytes of an ATOMIC WRITE at `offset` (8-byte aligned in the region's
    /// address space) as one indivisible store, so a CPU reading the word sees the old or
    /// the new value, never a mix (IBA 1.5 ATOMIC WRITE). Memory only the engine touches
    /// keeps the default, a plain copy; memory shared with application threads overrides
    /// it with a CPU atomic store.
    fn atomic_store(&mut self, offset: usize, value: [u8; 8]) {
        self.write(offset, &value);
    }
    /// True when `len` bytes at `offset` (inside the region) can be read, and written when
    /// `write`, right now. Memory that is always there (a buffer, a pinned registration)
    /// keeps the default; memory that may be absent inside its bounds (an on-demand-paging
    /// registration of the whole address space) says no for a hole, and the access fails
    /// as one outside the region would (IBA 10.6.3: protection check before any byte moves).
    fn accessible(&self, offset: usize, len: usize, write: bool) -> bool {
        let _ = (offset, len, write);
        true
    }
    /// True when every byte of the region reads as zero and always will (what is written is
    /// discarded), so a payload gathered from it is known without reading it: with
    /// [`crate::Device::poll_transmit_described`] such a payload is described ("so many
    /// zero bytes here") instead of copied. Memory that holds data keeps the default.
    fn reads_as_zeros(&self) -> bool {
        false
    }
}

/// An owned buffer: what the simulator and the tests register.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VecMemory(pub Vec<u8>);

impl VecMemory {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        VecMemory(vec![0; len])
    }

    fn word(&self, offset: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[offset..offset + 8]);
        u64::from_le_bytes(b)
    }
}

impl Memory for VecMemory {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.0[offset..offset + dst.len()]);
    }
    fn write(&mut self, offset: usize, src: &[u8]) {
        self.0[offset..offset + src.len()].copy_from_slice(src);
    }
    fn compare_swap(&mut self, offset: usize, compare: u64, swap: u64) -> u64 {
        let orig = self.word(offset);
        if orig == compare {
            self.0[offset..offset + 8].copy_from_slice(&swap.to_le_bytes());
        }
        orig
    }
    fn fetch_add(&mut self, offset: usize, add: u64) -> u64 {
        let orig = self.word(offset);
        self.0[offset..offset + 8].copy_from_slice(&orig.wrapping_add(add).to_le_bytes());
        orig
    }
}

/// One registered region.
pub(crate) struct MemoryRegion {
    pub pd: PdHandle,
    pub iova: u64,
    pub access: AccessFlags,
    /// The full 32-bit key (index << 8 | key byte); lkey and rkey are equal, as in rxe.
    pub key: u32,
    /// False once a SEND_WITH_INV or LOCAL_INV invalidated the rkey (IBA 10.6.6); remote
    /// access and binding windows to it then fail.
    pub valid: bool,
    /// Memory windows bound to the region: while any are, it can be neither deregistered
    /// (IBA 10.6.7.2.6; rxe_dereg_mr) nor invalidated.
    pub bound_windows: u32,
    pub memory: Box<dyn Memory>,
}

/// Where an accepted remote access lands: the region (by its key) and the offset in it.
/// For an R_Key naming a window, the region is the one the window lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RemoteTarget {
    /// Key of the region the bytes live in.
    pub key: u32,
    /// Offset into that region.
    pub offset: usize,
}

/// The table of memory regions, indexed by the 24-bit index part of the key.
#[derive(Default)]
pub(crate) struct MrTable {
    slots: Vec<Option<MemoryRegion>>,
    live: u32,
    /// The memory windows (`mw.rs`), here because an R_Key may name either.
    pub windows: mw::MwTable,
}

impl MrTable {
    /// Heap bytes of the table's slots (the registered memory itself is the application's).
    pub fn heap_bytes(&self) -> usize {
        crate::footprint::slots::<Option<MemoryRegion>>(self.slots.capacity())
            + self.windows.heap_bytes()
    }

    /// True when a live region belongs to `pd`.
    pub fn any_in_pd(&self, pd: PdHandle) -> bool {
        self.slots.iter().flatten().any(|mr| mr.pd == pd)
    }

    /// Number of live regions.
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Inserts a region and returns its key, built from a free index and `key_byte`.
    pub fn insert(
        &mut self,
        pd: PdHandle,
        memory: Box<dyn Memory>,
        iova: u64,
        access: AccessFlags,
        key_byte: u8,
    ) -> Option<u32> {
        let index = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                if self.slots.len() >= MW_INDEX_BASE {
                    return None;
                }
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let key = ((index as u32) << 8) | key_byte as u32;
        self.slots[index] = Some(MemoryRegion {
            pd,
            iova,
            access,
            key,
            valid: true,
            bound_windows: 0,
            memory,
        });
        self.live += 1;
        Some(key)
    }

    /// Removes the region whose lkey is `key`.
    pub fn remove(&mut self, key: u32) -> Option<MemoryRegion> {
        let slot = self.slots.get_mut(key_index(key))?;
        if slot.as_ref().is_some_and(|mr| mr.key == key) {
            self.live -= 1;
            slot.take()
        } else {
            None
        }
    }

    /// The region whose full key is `key`.
    pub fn get(&self, key: u32) -> Option<&MemoryRegion> {
        self.slots
            .get(key_index(key))?
            .as_ref()
            .filter(|mr| mr.key == key)
    }

    /// Mutable access to the region whose full key is `key`.
    pub fn get_mut(&mut self, key: u32) -> Option<&mut MemoryRegion> {
        self.slots
            .get_mut(key_index(key))?
            .as_mut()
            .filter(|mr| mr.key == key)
    }

    /// Checks a remote access of `len` bytes at `va` under `rkey` for QP `qpn` in `pd`
    /// that needs `need` (IBA 10.6.3 / 9.7.4.1.x; for windows IBA 10.6.7.3). Returns where
    /// the bytes are. Zero-length accesses are checked by the caller's rules (they touch
    /// no memory).
    pub fn check_remote(
        &self,
        rkey: u32,
        pd: PdHandle,
        qpn: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<RemoteTarget, RemoteAccessFault> {
        if is_window_key(rkey) {
            let (key, offset) = self.check_window(rkey, pd, qpn, va, len, need)?;
            return Ok(RemoteTarget { key, offset });
        }
        let mr = self.get(rkey).ok_or(RemoteAccessFault::BadRkey)?;
        let offset = check_region(mr, pd, va, len, need).map_err(|f| match f {
            RegionFault::Pd => RemoteAccessFault::PdMismatch,
            RegionFault::Bounds => RemoteAccessFault::OutOfBounds,
            RegionFault::Access => RemoteAccessFault::AccessDenied,
            RegionFault::Invalid => RemoteAccessFault::BadRkey,
        })?;
        Ok(RemoteTarget { key: rkey, offset })
    }

    /// Checks a local SGE for a QP in `pd`; `write` when the HCA writes into it.
    /// Returns the offset into the region.
    pub fn check_local(
        &self,
        sge: &Sge,
        pd: PdHandle,
        write: bool,
    ) -> Result<usize, LocalAccessFault> {
        let mr = self.get(sge.lkey).ok_or(LocalAccessFault::BadLkey)?;
        let need = if write {
            AccessFlags::LOCAL_WRITE
        } else {
            AccessFlags::empty()
        };
        // Local access does not depend on rkey invalidation, only on the region existing.
        check_region_local(mr, pd, sge.addr, sge.length as u64, need).map_err(|f| match f {
            RegionFault::Pd => LocalAccessFault::PdMismatch,
            RegionFault::Bounds => LocalAccessFault::OutOfBounds,
            RegionFault::Access | RegionFault::Invalid => LocalAccessFault::NoLocalWrite,
        })
    }
}

enum RegionFault {
    Pd,
    Bounds,
    Access,
    Invalid,
}

fn check_region(
    mr: &MemoryRegion,
    pd: PdHandle,
    va: u64,
    len: u64,
    need: AccessFlags,
) -> Result<usize, RegionFault> {
    if !mr.valid {
        return Err(RegionFault::Invalid);
    }
    check_region_local(mr, pd, va, len, need)
}

fn check_region_local(
    mr: &MemoryRegion,
    pd: PdHandle,
    va: u64,
    len: u64,
    need: AccessFlags,
) -> Result<usize, RegionFault> {
    if mr.pd != pd {
        return Err(RegionFault::Pd);
    }
    let start = va.checked_sub(mr.iova).ok_or(RegionFault::Bounds)?;
    let end = start.checked_add(len).ok_or(RegionFault::Bounds)?;
    if end > mr.memory.len() as u64 {
        return Err(RegionFault::Bounds);
    }
    if !mr.access.contains(need) {
        return Err(RegionFault::Access);
    }
    let write = need.intersects(
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    if len > 0 && !mr.memory.accessible(start as usize, len as usize, write) {
        return Err(RegionFault::Bounds);
    }
    Ok(start as usize)
}

/// Walks a scatter/gather list as one contiguous message: calls `f(sge, offset_in_sge, len)`
/// for each piece of the byte range [`msg_offset`, `msg_offset + len`).
pub(crate) fn for_each_sge_piece(
    sges: &[Sge],
    mut msg_offset: u64,
    mut len: u64,
    mut f: impl FnMut(&Sge, u64, u64),
) {
    for sge in sges {
        if len == 0 {
            break;
        }
        let sl = sge.length as u64;
        if msg_offset >= sl {
            msg_offset -= sl;
            continue;
        }
        let take = (sl - msg_offset).min(len);
        f(sge, msg_offset, take);
        len -= take;
        msg_offset = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (MrTable, u32) {
        let mut t = MrTable::default();
        let key = t
            .insert(
                PdHandle(1),
                Box::new(VecMemory::zeroed(64)),
                0x1000,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                0xab,
            )
            .unwrap();
        (t, key)
    }

    #[test]
    fn remote_checks_key_pd_bounds_and_access() {
        let (t, key) = table();
        assert_eq!(key & 0xff, 0xab);
        let r = AccessFlags::REMOTE_READ;
        assert_eq!(
            t.check_remote(key, PdHandle(1), 0x11, 0x1010, 16, r),
            Ok(RemoteTarget { key, offset: 0x10 })
        );
        assert_eq!(
            t.check_remote(key ^ 1, PdHandle(1), 0x11, 0x1010, 16, r),
            Err(RemoteAccessFault::BadRkey)
        );
        assert_eq!(
            t.check_remote(key, PdHandle(2), 0x11, 0x1010, 16, r),
            Err(RemoteAccessFault::PdMismatch)
        );
        assert_eq!(
            t.check_remote(key, PdHandle(1), 0x11, 0x1039, 8, r),
            Err(RemoteAccessFault::OutOfBounds)
        );
        assert_eq!(
            t.check_remote(key, PdHandle(1), 0x11, 0xfff, 1, r),
            Err(RemoteAccessFault::OutOfBounds)
        );
        assert_eq!(
            t.check_remote(key, PdHandle(1), 0x11, u64::MAX, 2, r),
            Err(RemoteAccessFault::OutOfBounds)
        );
        assert_eq!(
            t.check_remote(key, PdHandle(1), 0x11, 0x1000, 8, AccessFlags::REMOTE_WRITE),
            Err(RemoteAccessFault::AccessDenied)
        );
    }

    #[test]
    fn sge_walk_splits_a_range_across_elements() {
        let sges = [
            Sge {
                addr: 0,
                length: 10,
                lkey: 1,
            },
            Sge {
                addr: 100,
                length: 5,
                lkey: 2,
            },
            Sge {
                addr: 200,
                length: 20,
                lkey: 3,
            },
        ];
        let mut pieces = Vec::new();
        for_each_sge_piece(&sges, 8, 10, |s, o, l| pieces.push((s.lkey, o, l)));
        assert_eq!(pieces, vec![(1, 8, 2), (2, 0, 5), (3, 0, 3)]);
    }

    #[test]
    fn vec_memory_atomics_are_little_endian() {
        let mut m = VecMemory::zeroed(16);
        assert_eq!(m.fetch_add(8, 5), 0);
        assert_eq!(m.0[8], 5);
        assert_eq!(m.compare_swap(8, 5, 0x0102), 5);
        assert_eq!(&m.0[8..10], &[2, 1]);
        assert_eq!(m.compare_swap(8, 7, 9), 0x0102);
        assert_eq!(m.fetch_add(8, 0), 0x0102);
    }
}
