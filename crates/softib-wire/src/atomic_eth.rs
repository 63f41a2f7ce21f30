//! Atomic Extended Transport Header (IBA vol. 1, 9.3.4): operands of CmpSwap and FetchAdd.
//!
//! ```text
//!  0..8    VA            8-byte aligned remote address
//!  8..12   R_Key
//!  12..20  Swap (CmpSwap) or Add (FetchAdd) data
//!  20..28  Compare data (CmpSwap; ignored by FetchAdd)
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the AtomicETH in bytes.
pub const ATOMIC_ETH_LEN: usize = crate::opcode::ATOMIC_ETH_LEN;

mod field {
    use crate::bytes::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const SWAP_OR_ADD: Field = 12..20;
    pub const COMPARE: Field = 20..28;
}

/// A zero-copy view of an AtomicETH.
#[derive(Debug, Clone)]
pub struct AtomicEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicEthPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        AtomicEthPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole AtomicETH; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole AtomicETH.
    pub fn check_len(&self) -> Result<()> {
        check("AtomicETH", self.buffer.as_ref(), ATOMIC_ETH_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// VA.
    pub fn va(&self) -> u64 {
        bytes::get(self.buffer.as_ref(), field::VA)
    }
    /// R_Key.
    pub fn rkey(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::RKEY) as u32
    }
    /// Swap (CmpSwap) or Add (FetchAdd) data.
    pub fn swap_or_add(&self) -> u64 {
        bytes::get(self.buffer.as_ref(), field::SWAP_OR_ADD)
    }
    /// Compare data.
    pub fn compare(&self) -> u64 {
        bytes::get(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEthPacket<T> {
    /// Sets VA.
    pub fn set_va(&mut self, v: u64) {
        bytes::put(self.buffer.as_mut(), field::VA, v);
    }
    /// Sets R_Key.
    pub fn set_rkey(&mut self, v: u32) {
        bytes::put(self.buffer.as_mut(), field::RKEY, u64::from(v));
    }
    /// Sets the Swap/Add data.
    pub fn set_swap_or_add(&mut self, v: u64) {
        bytes::put(self.buffer.as_mut(), field::SWAP_OR_ADD, v);
    }
    /// Sets the Compare data.
    pub fn set_compare(&mut self, v: u64) {
        bytes::put(self.buffer.as_mut(), field::COMPARE, v);
    }
}

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Remote virtual address (8-byte aligned for a valid request; the engine checks that).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (CmpSwap) or addend (FetchAdd).
    pub swap_or_add: u64,
    /// Compare value (CmpSwap).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parses an AtomicETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<AtomicEthRepr> {
        let p = AtomicEthPacket::new_checked(buf)?;
        Ok(AtomicEthRepr {
            va: p.va(),
            rkey: p.rkey(),
            swap_or_add: p.swap_or_add(),
            compare: p.compare(),
        })
    }
    /// Bytes [`AtomicEthRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }
    /// Writes the AtomicETH to the start of `buf`; returns [`ATOMIC_ETH_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, ATOMIC_ETH_LEN)?;
        let mut p = AtomicEthPacket::new_unchecked(&mut buf[..ATOMIC_ETH_LEN]);
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_swap_or_add(self.swap_or_add);
        p.set_compare(self.compare);
        Ok(ATOMIC_ETH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    const BYTES: [u8; 28] = [
        0x00, 0x00, 0x7F, 0x12, 0x34, 0x56, 0x78, 0x80, // VA
        0xDE, 0xAD, 0xBE, 0xEF, // R_Key
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2A, // swap/add
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, // compare
    ];
    const REPR: AtomicEthRepr = AtomicEthRepr {
        va: 0x0000_7F12_3456_7880,
        rkey: 0xDEAD_BEEF,
        swap_or_add: 42,
        compare: 0xFFFF_FFFF_FFFF_FFFE,
    };

    #[test]
    fn parses_known_bytes() {
        assert_eq!(AtomicEthRepr::parse(&BYTES), Ok(REPR));
    }

    #[test]
    fn emits_known_bytes() {
        let mut buf = [0x11u8; 28];
        assert_eq!(REPR.emit(&mut buf), Ok(ATOMIC_ETH_LEN));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..ATOMIC_ETH_LEN {
            assert!(matches!(
                AtomicEthRepr::parse(&BYTES[..n]),
                Err(Error::Truncated {
                    header: "AtomicETH",
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
        fn emit_then_parse_is_identity(va: u64, rkey: u32, swap_or_add: u64, compare: u64) {
            let repr = AtomicEthRepr { va, rkey, swap_or_add, compare };
            let mut buf = [0u8; ATOMIC_ETH_LEN];
            prop_assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
            prop_assert_eq!(AtomicEthRepr::parse(&buf), Ok(repr));
        }
    }
}
