//! Registration of caller memory by raw pointer (`ibv_reg_mr` on an existing buffer): the
//! `unsafe` verbs [`Context::reg_mr_raw`](crate::context::Context::reg_mr_raw) and
//! [`ProtectionDomain::register_raw`](crate::verbs::ProtectionDomain::register_raw), in
//! their own module so the contract lives in one place and neither `context.rs` nor
//! `verbs/` needs to know about raw pointers. The memory itself is
//! [`crate::raw_memory::RawMemory`].
#![allow(unsafe_code)]

use crate::raw_memory::RawMemory;

impl crate::context::Context {
    /// Registers `len` bytes of the caller's memory at `ptr` (`ibv_reg_mr` on an existing
    /// buffer). The region's virtual address is the pointer itself, as with libibverbs, so
    /// a peer addresses byte `i` as `ptr as u64 + i`. Prefer the owned registration of
    /// [`crate::verbs::ProtectionDomain::register`], which needs no contract.
    ///
    /// # Safety
    /// Until the region is deregistered ([`crate::context::Context::dereg_mr`] or dropping
    /// the context), the device may read and write these bytes at any moment from its own
    /// thread (for posted work requests and for peers holding the R_Key). So for that whole
    /// time, `ptr..ptr + len` must stay allocated and valid for reads and writes, and the
    /// caller must not hold Rust references (`&`/`&mut`) to any of those bytes while an
    /// operation may touch them (between posting a work request that uses them and its
    /// completion, and at any time for bytes a peer may access remotely). Raw-pointer or
    /// FFI (C) access by the caller is a data race in that window only in the sense RDMA
    /// hardware has: the bytes may be torn, never out of bounds.
    pub unsafe fn reg_mr_raw(
        &self,
        pd: softib_transport::PdHandle,
        ptr: *mut u8,
        len: usize,
        access: softib_transport::AccessFlags,
    ) -> Result<crate::context::MemoryRegion, softib_transport::VerbsError> {
        let Some(p) = std::ptr::NonNull::new(ptr) else {
            return Err(softib_transport::VerbsError::InvalidAttribute {
                attr: "addr",
                reason: "a null pointer cannot be registered".into(),
            });
        };
        // SAFETY: this function's own contract is RawMemory::new's.
        let memory = unsafe { RawMemory::new(p.as_ptr(), len) };
        self.reg_mr_at(pd, Box::new(memory), ptr as u64, access)
    }
}

impl crate::verbs::ProtectionDomain {
    /// Registers `len` bytes of the caller's memory at `ptr`, with every access right
    /// (`ibv_reg_mr`). The region's virtual address is the pointer itself. The returned
    /// handle deregisters the memory when dropped; after that the device never touches it.
    ///
    /// # Safety
    /// As [`crate::context::Context::reg_mr_raw`]: until the returned region is dropped,
    /// `ptr..ptr + len` must stay allocated and valid for reads and writes, and must not be
    /// accessed through Rust references while an operation may touch it (the device
    /// accesses it from its own thread).
    pub unsafe fn register_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        access: softib_transport::AccessFlags,
    ) -> Result<crate::verbs::RawMemoryRegion, softib_transport::VerbsError> {
        // SAFETY: forwarded: this function's contract is reg_mr_raw's.
        let mr = unsafe { self.context().reg_mr_raw(self.handle(), ptr, len, access) }?;
        Ok(crate::verbs::RawMemoryRegion::new(self.clone(), mr))
    }
}
