//! Immediate Data Extended Transport Header (IBA vol. 1, 9.3.7): 4 bytes the sender hands to
//! the receiver's completion, carried by the "with Immediate" SEND and RDMA WRITE opcodes.
//!
//! ```text
//!  0..4    Immediate data (opaque to the transport)
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the ImmDt header in bytes.
pub const IMMDT_LEN: usize = crate::opcode::IMMDT_LEN;

mod field {
    use crate::bytes::Field;
    pub const IMMEDIATE: Field = 0..4;
}

/// A zero-copy view of an ImmDt header.
#[derive(Debug, Clone)]
pub struct ImmDtPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImmDtPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        ImmDtPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole ImmDt; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole ImmDt.
    pub fn check_len(&self) -> Result<()> {
        check("ImmDt", self.buffer.as_ref(), IMMDT_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The immediate data, as the 32-bit big-endian value on the wire.
    pub fn immediate(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::IMMEDIATE) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDtPacket<T> {
    /// Sets the immediate data.
    pub fn set_immediate(&mut self, v: u32) {
        bytes::put(self.buffer.as_mut(), field::IMMEDIATE, u64::from(v));
    }
}

/// Parsed immediate data.
///
/// The value is the big-endian interpretation of the 4 wire bytes; verbs hand it to the
/// application in network byte order (`imm_data` is `__be32` in libibverbs), so a caller that
/// wants those bytes uses `to_be_bytes()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImmDt(pub u32);

impl ImmDt {
    /// Parses an ImmDt from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<ImmDt> {
        Ok(ImmDt(ImmDtPacket::new_checked(buf)?.immediate()))
    }
    /// Bytes [`ImmDt::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        IMMDT_LEN
    }
    /// Writes the ImmDt to the start of `buf`; returns [`IMMDT_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, IMMDT_LEN)?;
        ImmDtPacket::new_unchecked(&mut buf[..IMMDT_LEN]).set_immediate(self.0);
        Ok(IMMDT_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    const BYTES: [u8; 4] = [0xCA, 0xFE, 0xBA, 0xBE];

    #[test]
    fn parses_known_bytes() {
        assert_eq!(ImmDt::parse(&BYTES), Ok(ImmDt(0xCAFE_BABE)));
    }

    #[test]
    fn emits_known_bytes() {
        let mut buf = [0u8; 4];
        assert_eq!(ImmDt(0xCAFE_BABE).emit(&mut buf), Ok(IMMDT_LEN));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..IMMDT_LEN {
            assert!(matches!(
                ImmDt::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: "ImmDt",
                    ..
                })
            ));
            let mut buf = vec![0u8; n];
            assert!(matches!(
                ImmDt(1).emit(&mut buf),
                Err(Error::BufferTooSmall { .. })
            ));
        }
    }

    proptest! {
        #[test]
        fn emit_then_parse_is_identity(v: u32) {
            let mut buf = [0u8; IMMDT_LEN];
            prop_assert_eq!(ImmDt(v).emit(&mut buf), Ok(IMMDT_LEN));
            prop_assert_eq!(ImmDt::parse(&buf), Ok(ImmDt(v)));
        }
    }
}
