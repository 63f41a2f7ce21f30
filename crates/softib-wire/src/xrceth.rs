//! XRC Extended Transport Header (IBA Annex A14): names the shared receive queue an XRC
//! request targets; carried right after the BTH by XRC requests.
//!
//! ```text
//!  byte 0  reserved
//!  1..4    XRCSRQ (24 bits)
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the XRCETH in bytes.
pub const XRCETH_LEN: usize = crate::opcode::XRCETH_LEN;

mod field {
    use crate::bytes::Field;
    pub const RESERVED: usize = 0;
    pub const XRC_SRQ: Field = 1..4;
}

/// A zero-copy view of an XRCETH.
#[derive(Debug, Clone)]
pub struct XrcethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> XrcethPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        XrcethPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole XRCETH; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole XRCETH.
    pub fn check_len(&self) -> Result<()> {
        check("XRCETH", self.buffer.as_ref(), XRCETH_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The reserved byte (zero on the wire, ignored on receive).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
    /// XRCSRQ.
    pub fn xrc_srq(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::XRC_SRQ) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> XrcethPacket<T> {
    /// Clears the reserved byte.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED] = 0;
    }
    /// Sets XRCSRQ (low 24 bits).
    pub fn set_xrc_srq(&mut self, v: u32) {
        bytes::put(
            self.buffer.as_mut(),
            field::XRC_SRQ,
            u64::from(v & 0x00FF_FFFF),
        );
    }
}

/// A parsed XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcethRepr {
    /// The target XRC SRQ number (24 bits).
    pub xrc_srq: u32,
}

impl XrcethRepr {
    /// Parses an XRCETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<XrcethRepr> {
        let p = XrcethPacket::new_checked(buf)?;
        Ok(XrcethRepr {
            xrc_srq: p.xrc_srq(),
        })
    }
    /// Bytes [`XrcethRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        XRCETH_LEN
    }
    /// Writes the XRCETH to the start of `buf` (reserved byte zero); returns [`XRCETH_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, XRCETH_LEN)?;
        let mut p = XrcethPacket::new_unchecked(&mut buf[..XRCETH_LEN]);
        p.clear_reserved();
        p.set_xrc_srq(self.xrc_srq);
        Ok(XRCETH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    const BYTES: [u8; 4] = [0x00, 0x12, 0x34, 0x56];
    const REPR: XrcethRepr = XrcethRepr { xrc_srq: 0x12_3456 };

    #[test]
    fn parses_known_bytes() {
        assert_eq!(XrcethRepr::parse(&BYTES), Ok(REPR));
        let with_reserved = [0xFF, 0x12, 0x34, 0x56];
        assert_eq!(XrcethRepr::parse(&with_reserved), Ok(REPR));
        assert_eq!(
            XrcethPacket::new_checked(&with_reserved[..])
                .unwrap()
                .reserved(),
            0xFF
        );
    }

    #[test]
    fn emits_known_bytes() {
        let mut buf = [0xFFu8; 4];
        assert_eq!(REPR.emit(&mut buf), Ok(XRCETH_LEN));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..XRCETH_LEN {
            assert!(matches!(
                XrcethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: "XRCETH",
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
        fn emit_then_parse_is_identity(xrc_srq in 0u32..1 << 24) {
            let repr = XrcethRepr { xrc_srq };
            let mut buf = [0u8; XRCETH_LEN];
            prop_assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
            prop_assert_eq!(XrcethRepr::parse(&buf), Ok(repr));
        }
    }
}
