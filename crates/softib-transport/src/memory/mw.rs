//! Memory windows (IBA vol. 1 §10.6.7): a window is an R_Key onto a byte range of a
//! registered region, with its own remote access rights, that can be bound, moved and
//! invalidated without re-registering the region.
//!
//! - Type 1 windows are valid from allocation on and bound by the Bind Memory Window verb
//!   (softib, like rxe, executes that verb as a BIND_MW work request on the QP the verb
//!   names); any QP of the window's PD may use them; binding with length 0 unbinds them;
//!   they cannot be invalidated (o10-37.2.26) and cannot be zero-based (o10-36.2.2).
//! - Type 2 windows start free and are bound by a BIND_MW work request; only the QP that
//!   bound them may use them (IBA 10.6.7.2.x "QP association"); LOCAL_INV or a SEND with
//!   Invalidate arriving on that QP frees them again.
//!
//! Window keys share the 32-bit key space with region keys: the 24-bit index of a window
//! is at or above [`MW_INDEX_BASE`] (as rxe keeps separate index ranges for its MR and MW
//! pools), so a key says by itself which table to look in. Every rule is a pure check on
//! the tables that returns the exact fault before anything changes.

use super::fault::RemoteAccessFault;
use super::key::{is_window_key, key_index, MW_INDEX_BASE};
use super::MrTable;
use crate::verbs::{AccessFlags, MwBind, MwType, PdHandle};

/// The rights a window may grant remotely (LOCAL_WRITE and MW_BIND mean nothing on a
/// window and are ignored, as rxe ignores them).
const WINDOW_REMOTE_RIGHTS: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);

/// Where a window is in its life (rxe's RXE_MW_STATE_*; IBA 10.6.7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MwState {
    /// A type 2 window not bound (after allocation or invalidation).
    Free,
    /// Usable: a type 1 window always (with length 0 when unbound), a bound type 2 window.
    Valid,
}

/// One allocated window.
#[derive(Clone, Debug)]
pub(crate) struct MemoryWindow {
    pub pd: PdHandle,
    pub kind: MwType,
    pub state: MwState,
    /// The full key (index << 8 | key byte); the key byte changes with every bind.
    pub key: u32,
    /// The key `alloc_mw` returned (what `ibv_mw::rkey` keeps for a type 2 window, whose
    /// binds the application tracks itself).
    pub alloc_key: u32,
    /// The region the window lies in, while bound with a non-zero length.
    pub mr_key: Option<u32>,
    /// First byte of the window (a VA of the region).
    pub addr: u64,
    /// Bytes; 0 = not bound.
    pub length: u64,
    /// Remote rights (and ZERO_BASED).
    pub access: AccessFlags,
    /// Type 2: the QP it was bound by, the only one that may use it.
    pub qpn: Option<u32>,
}

/// Why a bind failed (completion status `IBV_WC_MW_BIND_ERR`; the QP goes to ERR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MwBindFault {
    /// `mw_rkey` names no window (unknown index, or not the window's current key).
    UnknownWindow,
    /// The new R_Key's index part is not the window's (only the 8-bit key part may change,
    /// IBA 10.6.7.2.4).
    KeyIndexChanged,
    /// A type 2 window that is already bound (o10-37.2.30: it must be invalidated first).
    NotFree,
    /// A type 2 window bound through a QP of another PD (C10-72).
    QpPdMismatch,
    /// A type 2 window bound with length 0 (o10-37.2.40: type 2 windows are freed by
    /// invalidation, not by a zero-length bind).
    ZeroLength,
    /// A zero-based type 1 window (o10-36.2.2).
    ZeroBasedType1,
    /// `mr_lkey` names no region, or one that was invalidated.
    UnknownRegion,
    /// The region belongs to another PD than the window.
    RegionPdMismatch,
    /// The region was registered without MW_BIND (C10-73).
    NoBindRight,
    /// REMOTE_WRITE or REMOTE_ATOMIC on a window over a region without LOCAL_WRITE (C10-74).
    WritableWithoutLocalWrite,
    /// The window leaves the region (C10-75).
    OutsideRegion,
}

/// Why an invalidation (LOCAL_INV, or a SEND with Invalidate at the responder) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidateFault {
    /// No window or region has this key.
    UnknownKey,
    /// Type 1 windows cannot be invalidated (o10-37.2.26).
    Type1Window,
    /// The type 2 window is not bound.
    NotBound,
    /// The window or region belongs to another PD than the QP.
    PdMismatch,
    /// A SEND with Invalidate names a type 2 window bound to another QP: only the QP the
    /// window is associated with may invalidate it remotely (IBA 10.6.7.2.x).
    OtherQp,
    /// A region with windows bound to it cannot be invalidated (rxe_invalidate_mr).
    RegionHasWindows,
}

/// The table of windows, indexed by key index - [`MW_INDEX_BASE`].
#[derive(Default)]
pub(crate) struct MwTable {
    slots: Vec<Option<MemoryWindow>>,
}

impl MwTable {
    /// Number of live windows.
    pub fn live(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// True when a live window belongs to `pd`.
    pub fn any_in_pd(&self, pd: PdHandle) -> bool {
        self.slots.iter().flatten().any(|w| w.pd == pd)
    }

    /// Heap bytes of the slots.
    pub fn heap_bytes(&self) -> usize {
        crate::footprint::slots::<Option<MemoryWindow>>(self.slots.capacity())
    }

    /// The window whose full key is `key`.
    pub fn get(&self, key: u32) -> Option<&MemoryWindow> {
        let i = key_index(key).checked_sub(MW_INDEX_BASE)?;
        self.slots.get(i)?.as_ref().filter(|w| w.key == key)
    }

    /// The window with the index part of `key`, whatever its key part (a bind posted
    /// before an earlier one ran names the key the earlier one will give).
    pub fn by_index(&self, key: u32) -> Option<&MemoryWindow> {
        let i = key_index(key).checked_sub(MW_INDEX_BASE)?;
        self.slots.get(i)?.as_ref()
    }

    /// The window whose current key or allocation key is `key` (how the verbs name the
    /// window object; a stale key of a deallocated window whose slot was reused matches
    /// only if the new window's random key byte happens to be the same).
    pub fn by_object_key(&self, key: u32) -> Option<&MemoryWindow> {
        self.by_index(key)
            .filter(|w| w.key == key || w.alloc_key == key)
    }

    fn get_mut(&mut self, key: u32) -> Option<&mut MemoryWindow> {
        let i = key_index(key).checked_sub(MW_INDEX_BASE)?;
        self.slots.get_mut(i)?.as_mut().filter(|w| w.key == key)
    }
}

/// The ibv_inc_rkey rule: the next 8-bit key part, same index.
pub fn next_rkey(rkey: u32) -> u32 {
    (rkey & !0xFF) | (rkey.wrapping_add(1) & 0xFF)
}

impl MrTable {
    /// Allocates a window in `pd` (`ibv_alloc_mw`) and returns its R_Key.
    pub fn alloc_window(&mut self, pd: PdHandle, kind: MwType, key_byte: u8) -> Option<u32> {
        let slots = &mut self.windows.slots;
        let i = match slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                if MW_INDEX_BASE + slots.len() >= (1 << 24) {
                    return None;
                }
                slots.push(None);
                slots.len() - 1
            }
        };
        let key = (((MW_INDEX_BASE + i) as u32) << 8) | key_byte as u32;
        slots[i] = Some(MemoryWindow {
            pd,
            kind,
            state: match kind {
                MwType::Type1 => MwState::Valid,
                MwType::Type2 => MwState::Free,
            },
            key,
            alloc_key: key,
            mr_key: None,
            addr: 0,
            length: 0,
            access: AccessFlags::empty(),
            qpn: None,
        });
        Some(key)
    }

    /// Deallocates a window (`ibv_dealloc_mw`); a bound window is unbound first (rxe
    /// allows deallocating bound windows). `key` is the window's current key or the one
    /// `alloc_mw` returned (verbs deallocate the object, whose `rkey` field a type 2 bind
    /// does not update). Returns false if `key` names no window.
    pub fn dealloc_window(&mut self, key: u32) -> bool {
        let Some(w) = self.windows.by_object_key(key).cloned() else {
            return false;
        };
        self.release_region(w.mr_key);
        let i = key_index(key) - MW_INDEX_BASE;
        self.windows.slots[i] = None;
        true
    }

    fn release_region(&mut self, mr_key: Option<u32>) {
        if let Some(mr) = mr_key.and_then(|k| self.get_mut(k)) {
            mr.bound_windows = mr.bound_windows.saturating_sub(1);
        }
    }

    /// Binds a window for a BIND_MW executed by QP `qpn` of PD `qp_pd` (IBA 10.6.7.2;
    /// the rule list of rxe_check_bind_mw). Returns the window's new R_Key.
    pub fn bind_window(
        &mut self,
        qp_pd: PdHandle,
        qpn: u32,
        bind: &MwBind,
    ) -> Result<u32, MwBindFault> {
        use MwBindFault as F;
        let w = self.windows.get(bind.mw_rkey).ok_or(F::UnknownWindow)?;
        if key_index(bind.new_rkey) != key_index(w.key) {
            return Err(F::KeyIndexChanged);
        }
        let zero_based = bind.access.contains(AccessFlags::ZERO_BASED);
        match w.kind {
            MwType::Type1 => {
                if zero_based {
                    return Err(F::ZeroBasedType1);
                }
            }
            MwType::Type2 => {
                if w.state != MwState::Free {
                    return Err(F::NotFree);
                }
                if w.pd != qp_pd {
                    return Err(F::QpPdMismatch);
                }
                if bind.length == 0 {
                    return Err(F::ZeroLength);
                }
            }
        }
        let (kind, pd) = (w.kind, w.pd);
        let mr_key = if bind.length == 0 {
            None
        } else {
            let mr = self
                .get(bind.mr_lkey)
                .filter(|mr| mr.valid)
                .ok_or(F::UnknownRegion)?;
            if mr.pd != pd {
                return Err(F::RegionPdMismatch);
            }
            if !mr.access.contains(AccessFlags::MW_BIND) {
                return Err(F::NoBindRight);
            }
            if bind
                .access
                .intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
                && !mr.access.contains(AccessFlags::LOCAL_WRITE)
            {
                return Err(F::WritableWithoutLocalWrite);
            }
            let len = mr.memory.len() as u64;
            // C10-75: a zero-based window's addr is still a VA of the region (rxe reads it
            // as the window's start); either way [addr, addr + length) must lie inside.
            let start = bind.addr.checked_sub(mr.iova).ok_or(F::OutsideRegion)?;
            if start.checked_add(bind.length).is_none_or(|end| end > len) {
                return Err(F::OutsideRegion);
            }
            Some(mr.key)
        };
        // All checks passed: move the window.
        let old_region = self.windows.get(bind.mw_rkey).and_then(|w| w.mr_key);
        self.release_region(old_region);
        if let Some(mr) = mr_key.and_then(|k| self.get_mut(k)) {
            mr.bound_windows += 1;
        }
        let w = self.windows.get_mut(bind.mw_rkey).expect("checked above");
        w.key = bind.new_rkey;
        w.state = MwState::Valid;
        w.mr_key = mr_key;
        w.addr = bind.addr;
        w.length = bind.length;
        w.access = bind.access & (WINDOW_REMOTE_RIGHTS | AccessFlags::ZERO_BASED);
        w.qpn = (kind == MwType::Type2).then_some(qpn);
        Ok(w.key)
    }

    /// Invalidates `key` for QP `qpn` of PD `qp_pd`: a type 2 window becomes free, a
    /// region's R_Key stops working (IBA 10.6.6, 10.6.7.2.5). `remote` for a SEND with
    /// Invalidate, which may only free a window associated with the receiving QP.
    pub fn invalidate(
        &mut self,
        key: u32,
        qp_pd: PdHandle,
        qpn: u32,
        remote: bool,
    ) -> Result<(), InvalidateFault> {
        use InvalidateFault as F;
        if is_window_key(key) {
            let w = self.windows.get(key).ok_or(F::UnknownKey)?;
            if w.kind == MwType::Type1 {
                return Err(F::Type1Window);
            }
            if w.state != MwState::Valid {
                return Err(F::NotBound);
            }
            if w.pd != qp_pd {
                return Err(F::PdMismatch);
            }
            if remote && w.qpn != Some(qpn) {
                return Err(F::OtherQp);
            }
            let region = w.mr_key;
            self.release_region(region);
            let w = self.windows.get_mut(key).expect("checked above");
            w.state = MwState::Free;
            w.mr_key = None;
            w.addr = 0;
            w.length = 0;
            w.access = AccessFlags::empty();
            w.qpn = None;
            return Ok(());
        }
        let mr = self.get_mut(key).ok_or(F::UnknownKey)?;
        if mr.pd != qp_pd {
            return Err(F::PdMismatch);
        }
        if mr.bound_windows > 0 {
            return Err(F::RegionHasWindows);
        }
        mr.valid = false;
        Ok(())
    }

    /// The remote-access check of an R_Key that names a window (IBA 10.6.7.3, rxe's
    /// rxe_lookup_mw plus the window's own range): key, state, PD, the QP association of
    /// type 2 windows, the rights and the range. Returns the region key and the offset
    /// into the region.
    pub(crate) fn check_window(
        &self,
        rkey: u32,
        pd: PdHandle,
        qpn: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(u32, usize), RemoteAccessFault> {
        use RemoteAccessFault as F;
        let w = self.windows.get(rkey).ok_or(F::BadRkey)?;
        if w.state != MwState::Valid || w.length == 0 {
            return Err(F::BadRkey);
        }
        if w.pd != pd {
            return Err(F::PdMismatch);
        }
        if w.kind == MwType::Type2 && w.qpn != Some(qpn) {
            return Err(F::OtherQp);
        }
        if !w.access.contains(need) {
            return Err(F::AccessDenied);
        }
        let start = if w.access.contains(AccessFlags::ZERO_BASED) {
            va
        } else {
            va.checked_sub(w.addr).ok_or(F::OutOfBounds)?
        };
        if start.checked_add(len).is_none_or(|end| end > w.length) {
            return Err(F::OutOfBounds);
        }
        let mr_key = w.mr_key.ok_or(F::BadRkey)?;
        let mr = self.get(mr_key).ok_or(F::BadRkey)?;
        let offset = w.addr - mr.iova + start;
        Ok((mr.key, offset as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;

    const PD: PdHandle = PdHandle(1);
    const RW: AccessFlags = AccessFlags::REMOTE_WRITE.union(AccessFlags::REMOTE_READ);

    fn table(mr_access: AccessFlags) -> (MrTable, u32) {
        let mut t = MrTable::default();
        let mr = t
            .insert(PD, Box::new(VecMemory::zeroed(256)), 0x1000, mr_access, 7)
            .unwrap();
        (t, mr)
    }

    fn bind(mw: u32, mr: u32, addr: u64, length: u64, access: AccessFlags) -> MwBind {
        MwBind {
            mw_rkey: mw,
            new_rkey: next_rkey(mw),
            mr_lkey: mr,
            addr,
            length,
            access,
        }
    }

    #[test]
    fn window_keys_live_above_region_keys() {
        let (mut t, mr) = table(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let mw = t.alloc_window(PD, MwType::Type1, 3).unwrap();
        assert!(is_window_key(mw) && !is_window_key(mr));
        assert_eq!(next_rkey(0x1234_56FF), 0x1234_5600);
    }

    #[test]
    fn bind_requires_the_regions_mw_bind_right_c10_73() {
        let (mut t, mr) = table(AccessFlags::LOCAL_WRITE);
        let mw = t.alloc_window(PD, MwType::Type1, 3).unwrap();
        assert_eq!(
            t.bind_window(PD, 0x11, &bind(mw, mr, 0x1000, 16, RW)),
            Err(MwBindFault::NoBindRight)
        );
    }

    #[test]
    fn writable_window_needs_local_write_on_the_region_c10_74() {
        let (mut t, mr) = table(AccessFlags::MW_BIND);
        let mw = t.alloc_window(PD, MwType::Type1, 3).unwrap();
        assert_eq!(
            t.bind_window(PD, 0x11, &bind(mw, mr, 0x1000, 16, RW)),
            Err(MwBindFault::WritableWithoutLocalWrite)
        );
        let read_only = bind(mw, mr, 0x1000, 16, AccessFlags::REMOTE_READ);
        assert!(t.bind_window(PD, 0x11, &read_only).is_ok());
    }

    #[test]
    fn window_must_lie_inside_the_region_c10_75() {
        let (mut t, mr) = table(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let mw = t.alloc_window(PD, MwType::Type1, 3).unwrap();
        for (addr, len) in [(0xfff, 16), (0x10f1, 16), (u64::MAX, 2)] {
            assert_eq!(
                t.bind_window(PD, 0x11, &bind(mw, mr, addr, len, RW)),
                Err(MwBindFault::OutsideRegion)
            );
        }
        assert!(t
            .bind_window(PD, 0x11, &bind(mw, mr, 0x10f0, 16, RW))
            .is_ok());
    }

    #[test]
    fn type2_rules_free_state_pd_and_nonzero_length() {
        let (mut t, mr) = table(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let mw = t.alloc_window(PD, MwType::Type2, 3).unwrap();
        assert_eq!(
            t.bind_window(PdHandle(2), 0x11, &bind(mw, mr, 0x1000, 16, RW)),
            Err(MwBindFault::QpPdMismatch)
        );
        assert_eq!(
            t.bind_window(PD, 0x11, &bind(mw, mr, 0x1000, 0, RW)),
            Err(MwBindFault::ZeroLength)
        );
        let key = t
            .bind_window(PD, 0x11, &bind(mw, mr, 0x1000, 16, RW))
            .unwrap();
        assert_eq!(
            t.bind_window(PD, 0x11, &bind(key, mr, 0x1000, 16, RW)),
            Err(MwBindFault::NotFree)
        );
        // Only the QP it is associated with may use it.
        let w = AccessFlags::REMOTE_WRITE;
        assert_eq!(t.check_window(key, PD, 0x11, 0x1000, 8, w), Ok((mr, 0)));
        assert_eq!(
            t.check_window(key, PD, 0x12, 0x1000, 8, w),
            Err(RemoteAccessFault::OtherQp)
        );
        // Remote invalidation from another QP is refused; from its own QP it frees it.
        assert_eq!(
            t.invalidate(key, PD, 0x12, true),
            Err(InvalidateFault::OtherQp)
        );
        assert_eq!(t.invalidate(key, PD, 0x11, true), Ok(()));
        assert_eq!(
            t.check_window(key, PD, 0x11, 0x1000, 8, w),
            Err(RemoteAccessFault::BadRkey)
        );
        assert_eq!(
            t.invalidate(key, PD, 0x11, false),
            Err(InvalidateFault::NotBound)
        );
    }

    #[test]
    fn zero_based_type2_window_addresses_from_zero_and_type1_refuses_it() {
        let (mut t, mr) = table(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let zb = RW | AccessFlags::ZERO_BASED;
        let mw1 = t.alloc_window(PD, MwType::Type1, 3).unwrap();
        assert_eq!(
            t.bind_window(PD, 0x11, &bind(mw1, mr, 0x1000, 16, zb)),
            Err(MwBindFault::ZeroBasedType1)
        );
        let mw2 = t.alloc_window(PD, MwType::Type2, 4).unwrap();
        let key = t
            .bind_window(PD, 0x11, &bind(mw2, mr, 0x1040, 32, zb))
            .unwrap();
        let r = AccessFlags::REMOTE_READ;
        assert_eq!(t.check_window(key, PD, 0x11, 8, 8, r), Ok((mr, 0x48)));
        assert_eq!(
            t.check_window(key, PD, 0x11, 0x1040, 8, r),
            Err(RemoteAccessFault::OutOfBounds)
        );
    }

    #[test]
    fn window_range_and_rights_are_the_windows_not_the_regions() {
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND | RW;
        let (mut t, mr) = table(all);
        let mw = t.alloc_window(PD, MwType::Type1, 3).unwrap();
        let read = AccessFlags::REMOTE_READ;
        let key = t
            .bind_window(PD, 0x11, &bind(mw, mr, 0x1010, 16, read))
            .unwrap();
        assert_eq!(key & 0xFF, 4, "the key part moved on");
        assert_eq!(
            t.check_window(key, PD, 0x99, 0x1010, 16, read),
            Ok((mr, 16))
        );
        assert_eq!(
            t.check_window(key, PD, 0x11, 0x1018, 16, read),
            Err(RemoteAccessFault::OutOfBounds)
        );
        assert_eq!(
            t.check_window(key, PD, 0x11, 0x1010, 8, AccessFlags::REMOTE_WRITE),
            Err(RemoteAccessFault::AccessDenied)
        );
        assert_eq!(
            t.check_window(mw, PD, 0x11, 0x1010, 8, read),
            Err(RemoteAccessFault::BadRkey),
            "the old key is gone"
        );
        assert_eq!(
            t.check_window(key, PdHandle(2), 0x11, 0x1010, 8, read),
            Err(RemoteAccessFault::PdMismatch)
        );
        // Type 1 cannot be invalidated; a zero-length bind unbinds it.
        assert_eq!(
            t.invalidate(key, PD, 0x11, false),
            Err(InvalidateFault::Type1Window)
        );
        let key2 = t
            .bind_window(PD, 0x11, &bind(key, mr, 0, 0, AccessFlags::empty()))
            .unwrap();
        assert_eq!(
            t.check_window(key2, PD, 0x11, 0x1010, 8, read),
            Err(RemoteAccessFault::BadRkey)
        );
    }

    #[test]
    fn region_with_bound_windows_cannot_be_invalidated_until_they_go() {
        let (mut t, mr) = table(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let mw = t.alloc_window(PD, MwType::Type1, 3).unwrap();
        let key = t
            .bind_window(PD, 0x11, &bind(mw, mr, 0x1000, 16, RW))
            .unwrap();
        assert_eq!(t.get(mr).unwrap().bound_windows, 1);
        assert_eq!(
            t.invalidate(mr, PD, 0x11, false),
            Err(InvalidateFault::RegionHasWindows)
        );
        assert!(t.dealloc_window(key));
        assert_eq!(t.get(mr).unwrap().bound_windows, 0);
        assert_eq!(t.invalidate(mr, PD, 0x11, false), Ok(()));
        assert_eq!(t.windows.live(), 0);
    }
}
