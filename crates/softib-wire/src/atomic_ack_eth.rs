//! Atomic Acknowledge Extended Transport Header (IBA vol. 1, 9.3.6): the value the target
//! location held before a CmpSwap or FetchAdd, returned in the ATOMIC Acknowledge.
//!
//! ```text
//!  0..8    OrigRemDt   original remote data
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the AtomicAckETH in bytes.
pub const ATOMIC_ACK_ETH_LEN: usize = crate::opcode::ATOMIC_ACK_ETH_LEN;

mod field {
    use crate::bytes::Field;
    pub const ORIG_REMOTE_DATA: Field = 0..8;
}

/// A zero-copy view of an AtomicAckETH.
#[derive(Debug, Clone)]
pub struct AtomicAckEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicAckEthPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        AtomicAckEthPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole AtomicAckETH; no accessor panics
    /// afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole AtomicAckETH.
    pub fn check_len(&self) -> Result<()> {
        check("AtomicAckETH", self.buffer.as_ref(), ATOMIC_ACK_ETH_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// OrigRemDt.
    pub fn orig_remote_data(&self) -> u64 {
        bytes::get(self.buffer.as_ref(), field::ORIG_REMOTE_DATA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEthPacket<T> {
    /// Sets OrigRemDt.
    pub fn set_orig_remote_data(&mut self, v: u64) {
        bytes::put(self.buffer.as_mut(), field::ORIG_REMOTE_DATA, v);
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// The 8-byte value at the target address before the atomic operation.
    pub orig_remote_data: u64,
}

impl AtomicAckEthRepr {
    /// Parses an AtomicAckETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<AtomicAckEthRepr> {
        let p = AtomicAckEthPacket::new_checked(buf)?;
        Ok(AtomicAckEthRepr {
            orig_remote_data: p.orig_remote_data(),
        })
    }
    /// Bytes [`AtomicAckEthRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }
    /// Writes the AtomicAckETH to the start of `buf`; returns [`ATOMIC_ACK_ETH_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, ATOMIC_ACK_ETH_LEN)?;
        AtomicAckEthPacket::new_unchecked(&mut buf[..ATOMIC_ACK_ETH_LEN])
            .set_orig_remote_data(self.orig_remote_data);
        Ok(ATOMIC_ACK_ETH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    const BYTES: [u8; 8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF];
    const REPR: AtomicAckEthRepr = AtomicAckEthRepr {
        orig_remote_data: 0x0123_4567_89AB_CDEF,
    };

    #[test]
    fn parses_known_bytes() {
        assert_eq!(AtomicAckEthRepr::parse(&BYTES), Ok(REPR));
    }

    #[test]
    fn emits_known_bytes() {
        let mut buf = [0u8; 8];
        assert_eq!(REPR.emit(&mut buf), Ok(ATOMIC_ACK_ETH_LEN));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..ATOMIC_ACK_ETH_LEN {
            assert!(matches!(
                AtomicAckEthRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: "AtomicAckETH",
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
        fn emit_then_parse_is_identity(orig_remote_data: u64) {
            let repr = AtomicAckEthRepr { orig_remote_data };
            let mut buf = [0u8; ATOMIC_ACK_ETH_LEN];
            prop_assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
            prop_assert_eq!(AtomicAckEthRepr::parse(&buf), Ok(repr));
        }
    }
}
