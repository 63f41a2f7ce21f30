//! Reliable Datagram Extended Transport Header (IBA vol. 1, 9.3.1): names the end-to-end
//! context an RD packet belongs to; carried by every RD packet.
//!
//! ```text
//!  byte 0  reserved
//!  1..4    EE-Context (24 bits)
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the RDETH in bytes.
pub const RDETH_LEN: usize = crate::opcode::RDETH_LEN;

mod field {
    use crate::bytes::Field;
    pub const RESERVED: usize = 0;
    pub const EE_CONTEXT: Field = 1..4;
}

/// A zero-copy view of an RDETH.
#[derive(Debug, Clone)]
pub struct RdethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RdethPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        RdethPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole RDETH; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole RDETH.
    pub fn check_len(&self) -> Result<()> {
        check("RDETH", self.buffer.as_ref(), RDETH_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The reserved byte (zero on the wire, ignored on receive).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
    /// EE-Context.
    pub fn ee_context(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::EE_CONTEXT) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RdethPacket<T> {
    /// Clears the reserved byte.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED] = 0;
    }
    /// Sets EE-Context (low 24 bits).
    pub fn set_ee_context(&mut self, v: u32) {
        bytes::put(
            self.buffer.as_mut(),
            field::EE_CONTEXT,
            u64::from(v & 0x00FF_FFFF),
        );
    }
}

/// A parsed RDETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdethRepr {
    /// The end-to-end context number (24 bits).
    pub ee_context: u32,
}

impl RdethRepr {
    /// Parses an RDETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<RdethRepr> {
        let p = RdethPacket::new_checked(buf)?;
        Ok(RdethRepr {
            ee_context: p.ee_context(),
        })
    }
    /// Bytes [`RdethRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        RDETH_LEN
    }
    /// Writes the RDETH to the start of `buf` (reserved byte zero); returns [`RDETH_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, RDETH_LEN)?;
        let mut p = RdethPacket::new_unchecked(&mut buf[..RDETH_LEN]);
        p.clear_reserved();
        p.set_ee_context(self.ee_context);
        Ok(RDETH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    const BYTES: [u8; 4] = [0x00, 0x12, 0x34, 0x56];
    const REPR: RdethRepr = RdethRepr {
        ee_context: 0x12_3456,
    };

    #[test]
    fn parses_known_bytes() {
        assert_eq!(RdethRepr::parse(&BYTES), Ok(REPR));
        let with_reserved = [0xFF, 0x12, 0x34, 0x56];
        assert_eq!(RdethRepr::parse(&with_reserved), Ok(REPR));
        assert_eq!(
            RdethPacket::new_checked(&with_reserved[..])
                .unwrap()
                .reserved(),
            0xFF
        );
    }

    #[test]
    fn emits_known_bytes() {
        let mut buf = [0xFFu8; 4];
        assert_eq!(REPR.emit(&mut buf), Ok(RDETH_LEN));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..RDETH_LEN {
            assert!(matches!(
                RdethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: "RDETH",
                    ..
                })
            ));
            let mut buf = vec![0u8; n];
            assert!(matches!(
                REPR.emit(&mut buf),
                Err(Error::BufferTooSmall { .. })
            ));
        }
    }

    proptest! {
        #[test]
        fn emit_then_parse_is_identity(ee_context in 0u32..1 << 24) {
            let repr = RdethRepr { ee_context };
            let mut buf = [0u8; RDETH_LEN];
            prop_assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
            prop_assert_eq!(RdethRepr::parse(&buf), Ok(repr));
        }
    }
}
