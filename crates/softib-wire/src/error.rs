//! The one error type of the wire layer. Every variant says what was wrong, where, and
//! (when it helps) what was expected, so a user reading `softib decode` output can act on it.

/// A header or packet that could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the named header does.
    #[error("truncated {header}: need {needed} bytes, have {available}")]
    Truncated {
        /// Which header was being read, e.g. "BTH" or "RETH".
        header: &'static str,
        /// Bytes the header (or packet) needs.
        needed: usize,
        /// Bytes that were there.
        available: usize,
    },
    /// A version field holds a value this crate does not speak (BTH TVer, LRH LVer, IP version).
    #[error("unsupported {header} version {version}")]
    BadVersion {
        /// Which header carries the version field.
        header: &'static str,
        /// The version found.
        version: u8,
    },
    /// The BTH opcode is reserved or vendor-defined and not one softib understands.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// PadCnt claims more pad bytes than the packet carries payload, or the packet
    /// length is not a multiple of 4 bytes (IBA 9.2.3: payload is padded to a 4-byte multiple).
    #[error("bad pad: PadCnt {pad_count} with {available} bytes after the headers")]
    BadPad {
        /// The BTH PadCnt value.
        pad_count: u8,
        /// Bytes after the transport headers (payload plus pad).
        available: usize,
    },
    /// The invariant CRC does not match the packet contents.
    #[error("ICRC mismatch: packet carries {received:#010x}, computed {computed:#010x}")]
    IcrcMismatch {
        /// The ICRC value found in the packet.
        received: u32,
        /// The ICRC computed over the packet.
        computed: u32,
    },
    /// The variant CRC (native IB only) does not match.
    #[error("VCRC mismatch: packet carries {received:#06x}, computed {computed:#06x}")]
    VcrcMismatch {
        /// The VCRC value found in the packet.
        received: u16,
        /// The VCRC computed over the packet.
        computed: u16,
    },
    /// A length field disagrees with the bytes present (LRH PktLen, IP total length, UDP length).
    #[error("{header} length field says {claimed} bytes, {available} present")]
    BadLength {
        /// Which header carries the length field.
        header: &'static str,
        /// The length the field claims.
        claimed: usize,
        /// The bytes actually present.
        available: usize,
    },
    /// A field holds a value the specification reserves or forbids in this position.
    #[error("malformed {header}: {reason}")]
    Malformed {
        /// Which header is malformed.
        header: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The frame is not a RoCEv2 / InfiniBand packet at all (other EtherType, IP protocol or
    /// UDP port). Decoders skip and count these rather than report them as errors.
    #[error("not an InfiniBand/RoCEv2 packet: {0}")]
    NotInfiniBand(&'static str),
    /// An emit buffer is smaller than `buffer_len()`.
    #[error("emit buffer too small: need {needed} bytes, have {available}")]
    BufferTooSmall {
        /// Bytes the emit needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
}

/// Result alias for the wire layer.
pub type Result<T> = core::result::Result<T, Error>;
