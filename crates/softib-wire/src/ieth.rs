//! Invalidate Extended Transport Header (IBA vol. 1, 9.3.8): the R_Key the receiver
//! invalidates on completion of a "SEND with Invalidate".
//!
//! ```text
//!  0..4    R_Key to invalidate
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the IETH in bytes.
pub const IETH_LEN: usize = crate::opcode::IETH_LEN;

mod field {
    use crate::bytes::Field;
    pub const RKEY: Field = 0..4;
}

/// A zero-copy view of an IETH.
#[derive(Debug, Clone)]
pub struct IethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IethPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        IethPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole IETH; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole IETH.
    pub fn check_len(&self) -> Result<()> {
        check("IETH", self.buffer.as_ref(), IETH_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::RKEY) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IethPacket<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, v: u32) {
        bytes::put(self.buffer.as_mut(), field::RKEY, u64::from(v));
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ieth {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl Ieth {
    /// Parses an IETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Ieth> {
        Ok(Ieth {
            rkey: IethPacket::new_checked(buf)?.rkey(),
        })
    }
    /// Bytes [`Ieth::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        IETH_LEN
    }
    /// Writes the IETH to the start of `buf`; returns [`IETH_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, IETH_LEN)?;
        IethPacket::new_unchecked(&mut buf[..IETH_LEN]).set_rkey(self.rkey);
        Ok(IETH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    const BYTES: [u8; 4] = [0x00, 0x00, 0x03, 0x6C];

    #[test]
    fn parses_known_bytes() {
        assert_eq!(Ieth::parse(&BYTES), Ok(Ieth { rkey: 0x36C }));
    }

    #[test]
    fn emits_known_bytes() {
        let mut buf = [0xFFu8; 4];
        assert_eq!(Ieth { rkey: 0x36C }.emit(&mut buf), Ok(IETH_LEN));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..IETH_LEN {
            assert!(matches!(
                Ieth::parse(&BYTES[..n]),
                Err(Error::Truncated { header: "IETH", .. })
            ));
            let mut buf = vec![0u8; n];
            assert!(matches!(
                Ieth { rkey: 1 }.emit(&mut buf),
                Err(Error::BufferTooSmall { .. })
            ));
        }
    }

    proptest! {
        #[test]
        fn emit_then_parse_is_identity(rkey: u32) {
            let mut buf = [0u8; IETH_LEN];
            prop_assert_eq!(Ieth { rkey }.emit(&mut buf), Ok(IETH_LEN));
            prop_assert_eq!(Ieth::parse(&buf), Ok(Ieth { rkey }));
        }
    }
}
