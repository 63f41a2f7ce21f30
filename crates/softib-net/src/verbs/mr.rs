//! Memory registration: owned buffers (safe), caller memory (`unsafe`), and the slices
//! work requests name.
//!
//! An owned region keeps its buffer behind a reader-writer lock shared with the device: the
//! device takes it for each access (one packet's payload, one atomic) while it holds the
//! device lock, and the application takes it through [`MemoryRegion::read`] and
//! [`MemoryRegion::write`]. So a byte is never read and written at once, and the device
//! never touches freed memory (it owns a share of the buffer until deregistration). A
//! thread that holds a guard must not call verbs (the device might be waiting for that very
//! region while holding the lock the verb needs); doing so panics with a message rather
//! than deadlocking, as `RefCell` does for a double borrow.

use std::marker::PhantomData;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use softib_transport::{AccessFlags, Memory, MrKeys, Sge, VerbsError};

use super::ProtectionDomain;
use crate::context::MemoryRegion as RegionInfo;
use crate::oob::endpoint::RemoteRegion;
use crate::region_guard::{guard_dropped, guard_held, guard_taken};

/// A buffer that can be registered: bytes with a fixed length that the device may read and
/// write from its own thread (`Vec<u8>`, `Box<[u8]>`, `[u8; N]`, ...).
pub trait Buffer: AsRef<[u8]> + AsMut<[u8]> + Send + Sync + 'static {}

impl<B: AsRef<[u8]> + AsMut<[u8]> + Send + Sync + 'static> Buffer for B {}

/// The device's share of an owned buffer.
struct Shared<B> {
    buf: Arc<RwLock<B>>,
    len: usize,
}

impl<B: Buffer> Shared<B> {
    fn read_lock(&self) -> RwLockReadGuard<'_, B> {
        self.buf.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, B> {
        self.buf.write().unwrap_or_else(|p| p.into_inner())
    }
}

// The engine checks every access against the registered length before calling these; the
// `get` calls only keep a buffer whose `as_ref` changed length from panicking the device.
impl<B: Buffer> Memory for Shared<B> {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        let g = self.read_lock();
        if let Some(s) = g.as_ref().get(offset..offset + dst.len()) {
            dst.copy_from_slice(s);
        }
    }

    fn write(&mut self, offset: usize, src: &[u8]) {
        let mut g = self.write_lock();
        if let Some(d) = g.as_mut().get_mut(offset..offset + src.len()) {
            d.copy_from_slice(src);
        }
    }

    fn compare_swap(&mut self, offset: usize, compare: u64, swap: u64) -> u64 {
        let mut g = self.write_lock();
        let Some(w) = g.as_mut().get_mut(offset..offset + 8) else {
            return 0;
        };
        let orig = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        if orig == compare {
            w.copy_from_slice(&swap.to_le_bytes());
        }
        orig
    }

    fn fetch_add(&mut self, offset: usize, add: u64) -> u64 {
        let mut g = self.write_lock();
        let Some(w) = g.as_mut().get_mut(offset..offset + 8) else {
            return 0;
        };
        let orig = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        w.copy_from_slice(&orig.wrapping_add(add).to_le_bytes());
        orig
    }
}

/// The half-open byte range `range` selects in `0..len`, if it fits.
fn resolve(range: impl RangeBounds<usize>, len: usize) -> Option<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1)?,
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start <= end && end <= len).then_some((start, end))
}

fn out_of_range(what: &str, start: Bound<&usize>, end: Bound<&usize>, len: usize) -> String {
    format!("range ({start:?}, {end:?}) is outside the {len} bytes of the {what}")
}

/// A registered region that owns its buffer (`ibv_mr` + the memory behind it).
///
/// Dropping it deregisters it; [`MemoryRegion::deregister`] also gives the buffer back.
pub struct MemoryRegion<B: Buffer> {
    pd: ProtectionDomain,
    info: RegionInfo,
    buf: Arc<RwLock<B>>,
    registered: bool,
}

impl<B: Buffer> std::fmt::Debug for MemoryRegion<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("keys", &self.info.keys)
            .field("addr", &self.info.addr)
            .field("len", &self.info.len)
            .finish()
    }
}

impl ProtectionDomain {
    /// Registers `buf` with local write and every remote access right; the region owns it.
    pub fn register<B: Buffer>(&self, buf: B) -> Result<MemoryRegion<B>, VerbsError> {
        self.register_with_access(
            buf,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        )
    }

    /// Registers `buf` with the given access rights (`ibv_reg_mr`).
    pub fn register_with_access<B: Buffer>(
        &self,
        mut buf: B,
        access: AccessFlags,
    ) -> Result<MemoryRegion<B>, VerbsError> {
        let len = buf.as_mut().len();
        let buf = Arc::new(RwLock::new(buf));
        let shared = Shared {
            buf: buf.clone(),
            len,
        };
        let ctx = self.context();
        let addr = ctx.alloc_iova(len);
        let info = ctx.reg_mr_at(self.handle(), Box::new(shared), addr, access)?;
        Ok(MemoryRegion {
            pd: self.clone(),
            info,
            buf,
            registered: true,
        })
    }

    /// Registers `len` zero bytes (`Vec<u8>`) with every access right.
    pub fn allocate(&self, len: usize) -> Result<MemoryRegion<Vec<u8>>, VerbsError> {
        self.register(vec![0u8; len])
    }
}

impl<B: Buffer> MemoryRegion<B> {
    /// Local and remote keys.
    pub fn keys(&self) -> MrKeys {
        self.info.keys
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.info.keys.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.info.keys.rkey
    }

    /// Virtual address of the first byte (what a peer puts in its RETH).
    pub fn addr(&self) -> u64 {
        self.info.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.info.len as usize
    }

    /// True for a region of no bytes.
    pub fn is_empty(&self) -> bool {
        self.info.len == 0
    }

    /// What a peer needs to access the region (for an [`crate::oob::endpoint::Endpoint`]).
    pub fn remote(&self) -> RemoteRegion {
        self.info.remote()
    }

    /// The region as the handle-based [`crate::context::Context`] API names it.
    pub fn info(&self) -> RegionInfo {
        self.info
    }

    /// Reads the bytes. The device waits for this guard to be dropped before it writes the
    /// region; keep it short and call no verbs while it lives.
    pub fn read(&self) -> MrRead<'_, B> {
        let g = self.buf.read().unwrap_or_else(|p| p.into_inner());
        guard_taken();
        MrRead { g, len: self.len() }
    }

    /// Writes the bytes. The device waits for this guard to be dropped before it reads or
    /// writes the region; keep it short and call no verbs while it lives.
    pub fn write(&self) -> MrWrite<'_, B> {
        let g = self.buf.write().unwrap_or_else(|p| p.into_inner());
        guard_taken();
        MrWrite { g, len: self.len() }
    }

    /// The bytes `range` for a work request.
    ///
    /// # Panics
    /// If `range` is not inside the region (as slice indexing does); [`MemoryRegion::get`]
    /// returns `None` instead.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> LocalSlice<'_> {
        let (s, e) = (range.start_bound(), range.end_bound());
        let msg = out_of_range("region", s, e, self.len());
        let (s, e) = (s.cloned(), e.cloned());
        self.get((s, e)).unwrap_or_else(|| panic!("{msg}"))
    }

    /// The bytes `range` for a work request, or `None` if they are not inside the region.
    pub fn get(&self, range: impl RangeBounds<usize>) -> Option<LocalSlice<'_>> {
        let (s, e) = resolve(range, self.len())?;
        Some(LocalSlice {
            sge: Sge {
                addr: self.info.addr + s as u64,
                length: u32::try_from(e - s).ok()?,
                lkey: self.info.keys.lkey,
            },
            _region: PhantomData,
        })
    }

    /// Deregisters the region and returns its buffer.
    pub fn deregister(mut self) -> Result<B, VerbsError> {
        self.registered = false;
        // The device's share is dropped with the registration, so ours is the last one.
        let lkey = self.info.keys.lkey;
        self.pd
            .context()
            .with_driver(|d| d.engine_mut().dereg_mr(lkey).map(drop))?;
        let buf = self.buf.clone();
        drop(self);
        match Arc::try_unwrap(buf) {
            Ok(lock) => Ok(lock.into_inner().unwrap_or_else(|p| p.into_inner())),
            Err(_) => Err(VerbsError::InUse {
                kind: "memory region",
                value: lkey,
                reason: "its buffer is still shared",
            }),
        }
    }
}

impl<B: Buffer> Drop for MemoryRegion<B> {
    fn drop(&mut self) {
        // Left registered, the device keeps its share of the buffer alive: safe.
        if self.registered && !guard_held() {
            let _ = self
                .pd
                .context()
                .with_driver(|d| d.engine_mut().dereg_mr(self.info.keys.lkey));
        }
    }
}

/// Read access to a region's bytes ([`MemoryRegion::read`]).
pub struct MrRead<'a, B: Buffer> {
    g: RwLockReadGuard<'a, B>,
    len: usize,
}

impl<B: Buffer> Deref for MrRead<'_, B> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let b = self.g.as_ref();
        &b[..self.len.min(b.len())]
    }
}

impl<B: Buffer> Drop for MrRead<'_, B> {
    fn drop(&mut self) {
        guard_dropped();
    }
}

/// Write access to a region's bytes ([`MemoryRegion::write`]).
pub struct MrWrite<'a, B: Buffer> {
    g: RwLockWriteGuard<'a, B>,
    len: usize,
}

impl<B: Buffer> Deref for MrWrite<'_, B> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let b = self.g.as_ref();
        &b[..self.len.min(b.len())]
    }
}

impl<B: Buffer> DerefMut for MrWrite<'_, B> {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        let b = self.g.as_mut();
        let n = len.min(b.len());
        &mut b[..n]
    }
}

impl<B: Buffer> Drop for MrWrite<'_, B> {
    fn drop(&mut self) {
        guard_dropped();
    }
}

/// Caller memory registered with [`ProtectionDomain::register_raw`]; dropping it
/// deregisters the memory, after which the device never touches it.
#[derive(Debug)]
pub struct RawMemoryRegion {
    pd: ProtectionDomain,
    info: RegionInfo,
}

impl RawMemoryRegion {
    pub(crate) fn new(pd: ProtectionDomain, info: RegionInfo) -> RawMemoryRegion {
        RawMemoryRegion { pd, info }
    }

    /// The region as the handle-based API names it (keys, address = the pointer, length).
    pub fn info(&self) -> RegionInfo {
        self.info
    }

    /// What a peer needs to access the region.
    pub fn remote(&self) -> RemoteRegion {
        self.info.remote()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.info.len as usize
    }

    /// True for a region of no bytes.
    pub fn is_empty(&self) -> bool {
        self.info.len == 0
    }

    /// The bytes `range` for a work request, or `None` if they are not inside the region.
    pub fn get(&self, range: impl RangeBounds<usize>) -> Option<LocalSlice<'_>> {
        let (s, e) = resolve(range, self.len())?;
        Some(LocalSlice {
            sge: Sge {
                addr: self.info.addr + s as u64,
                length: u32::try_from(e - s).ok()?,
                lkey: self.info.keys.lkey,
            },
            _region: PhantomData,
        })
    }
}

impl Drop for RawMemoryRegion {
    fn drop(&mut self) {
        // Deregistration cannot fail for a registered key, and the engine drops its
        // pointer with it: the memory's owner may free it after this. It cannot be skipped
        // (the owner would free memory the device still writes), nor wait for a device that
        // may itself be waiting for a region this thread holds.
        if guard_held() {
            eprintln!(
                "softib: a RawMemoryRegion was dropped while this thread held a \
                 MemoryRegion guard; it cannot be deregistered safely, aborting"
            );
            std::process::abort();
        }
        let _ = self
            .pd
            .context()
            .with_driver(|d| d.engine_mut().dereg_mr(self.info.keys.lkey));
    }
}

/// Bytes of a registered region named by a work request; it cannot outlive the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalSlice<'a> {
    sge: Sge,
    _region: PhantomData<&'a ()>,
}

impl LocalSlice<'_> {
    /// The scatter/gather element.
    pub fn sge(&self) -> Sge {
        self.sge
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.sge.length as usize
    }

    /// True for no bytes.
    pub fn is_empty(&self) -> bool {
        self.sge.length == 0
    }
}

/// Bytes of a peer's region: the target of an RDMA WRITE, READ or atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSlice {
    /// Virtual address at the peer.
    pub addr: u64,
    /// The peer region's R_Key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteRegion {
    /// The bytes `range` (offsets into the region), or `None` if they are not inside it.
    pub fn get(&self, range: impl RangeBounds<usize>) -> Option<RemoteSlice> {
        let (s, e) = resolve(range, usize::try_from(self.len).ok()?)?;
        Some(RemoteSlice {
            addr: self.addr + s as u64,
            rkey: self.rkey,
            len: (e - s) as u64,
        })
    }

    /// The bytes `range` (offsets into the region).
    ///
    /// # Panics
    /// If `range` is not inside the region; [`RemoteRegion::get`] returns `None` instead.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> RemoteSlice {
        let (s, e) = (range.start_bound().cloned(), range.end_bound().cloned());
        self.get((s, e)).unwrap_or_else(|| {
            panic!(
                "{}",
                out_of_range("remote region", s.as_ref(), e.as_ref(), self.len as usize)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_inside_the_region_only() {
        assert_eq!(resolve(.., 10), Some((0, 10)));
        assert_eq!(resolve(2..5, 10), Some((2, 5)));
        assert_eq!(resolve(2..=9, 10), Some((2, 10)));
        assert_eq!(resolve(2..=10, 10), None);
        assert_eq!(resolve((Bound::Included(5), Bound::Excluded(4)), 10), None);
        assert_eq!(resolve(..=usize::MAX, 10), None);
    }

    #[test]
    fn shared_memory_does_the_engine_operations() {
        let mut m = Shared {
            buf: Arc::new(RwLock::new(vec![0u8; 16])),
            len: 16,
        };
        m.write(8, &5u64.to_le_bytes());
        assert_eq!(m.fetch_add(8, 3), 5);
        assert_eq!(m.compare_swap(8, 8, 100), 8);
        assert_eq!(m.compare_swap(8, 8, 7), 100);
        let mut out = [0u8; 8];
        m.read(8, &mut out);
        assert_eq!(u64::from_le_bytes(out), 100);
        // A buffer shorter than registered is left alone rather than panicking.
        m.len = 64;
        m.write(60, &[1, 2, 3, 4]);
        assert_eq!(m.fetch_add(60, 1), 0);
    }
}
