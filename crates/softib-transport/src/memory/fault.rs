//! Why a memory access was refused: the faults the region and window checks return, each
//! mapped by the caller to a NAK code (remote) or a completion status (local).

/// Why a remote access was refused; each maps to a NAK code at the responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteAccessFault {
    /// No region has this R_Key (unknown index or wrong key byte), or it was invalidated.
    BadRkey,
    /// The region belongs to another PD than the QP.
    PdMismatch,
    /// [va, va+len) is not inside the region.
    OutOfBounds,
    /// The region lacks the access flag the operation needs.
    AccessDenied,
    /// An atomic's VA is not 8-byte aligned (IBA 9.4.5: invalid request, not access error).
    Misaligned,
    /// The R_Key names a type 2 window bound to another QP (IBA 10.6.7.3).
    OtherQp,
}

/// Why a local SGE was refused (completion status LOC_PROT_ERR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalAccessFault {
    /// No region has this lkey.
    BadLkey,
    /// The region belongs to another PD than the QP.
    PdMismatch,
    /// The SGE leaves the region.
    OutOfBounds,
    /// The HCA must write but the region lacks LOCAL_WRITE.
    NoLocalWrite,
}
