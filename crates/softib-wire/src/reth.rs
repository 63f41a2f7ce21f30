//! RDMA Extended Transport Header (IBA vol. 1, 9.3.3): the remote buffer of an RDMA WRITE
//! (first/only packet) or RDMA READ Request.
//!
//! ```text
//!  0..8    VA       virtual address of the remote buffer
//!  8..12   R_Key    remote key authorising the access
//!  12..16  DMALen   length of the whole transfer in bytes
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the RETH in bytes.
pub const RETH_LEN: usize = crate::opcode::RETH_LEN;

mod field {
    use crate::bytes::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const DMA_LEN: Field = 12..16;
}

/// A zero-copy view of a RETH.
#[derive(Debug, Clone)]
pub struct RethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        RethPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole RETH; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole RETH.
    pub fn check_len(&self) -> Result<()> {
        check("RETH", self.buffer.as_ref(), RETH_LEN)
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
    /// DMALen.
    pub fn dma_len(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::DMA_LEN) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RethPacket<T> {
    /// Sets VA.
    pub fn set_va(&mut self, va: u64) {
        bytes::put(self.buffer.as_mut(), field::VA, va);
    }
    /// Sets R_Key.
    pub fn set_rkey(&mut self, rkey: u32) {
        bytes::put(self.buffer.as_mut(), field::RKEY, u64::from(rkey));
    }
    /// Sets DMALen.
    pub fn set_dma_len(&mut self, len: u32) {
        bytes::put(self.buffer.as_mut(), field::DMA_LEN, u64::from(len));
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole RDMA transfer in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parses a RETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<RethRepr> {
        let p = RethPacket::new_checked(buf)?;
        Ok(RethRepr {
            va: p.va(),
            rkey: p.rkey(),
            dma_len: p.dma_len(),
        })
    }
    /// Bytes [`RethRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        RETH_LEN
    }
    /// Writes the RETH to the start of `buf`; returns [`RETH_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, RETH_LEN)?;
        let mut p = RethPacket::new_unchecked(&mut buf[..RETH_LEN]);
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_dma_len(self.dma_len);
        Ok(RETH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    /// The RETH of the first RDMA WRITE First in testdata/captures/rxe-write_bw.pcap.
    const BYTES: [u8; 16] = [
        0x00, 0x00, 0x56, 0x42, 0x8B, 0x5A, 0xB0, 0x00, 0x00, 0x00, 0x03, 0x6C, 0x00, 0x00, 0x10,
        0x00,
    ];
    const REPR: RethRepr = RethRepr {
        va: 0x0000_5642_8B5A_B000,
        rkey: 0x36C,
        dma_len: 4096,
    };

    #[test]
    fn parses_known_bytes() {
        assert_eq!(RethRepr::parse(&BYTES), Ok(REPR));
        let p = RethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (p.va(), p.rkey(), p.dma_len()),
            (REPR.va, REPR.rkey, REPR.dma_len)
        );
    }

    #[test]
    fn emits_known_bytes() {
        let mut buf = [0xA5u8; 16];
        assert_eq!(REPR.emit(&mut buf), Ok(RETH_LEN));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..RETH_LEN {
            assert!(matches!(
                RethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated { header: "RETH", .. })
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
        fn emit_then_parse_is_identity(va: u64, rkey: u32, dma_len: u32) {
            let repr = RethRepr { va, rkey, dma_len };
            let mut buf = [0u8; RETH_LEN];
            prop_assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
            prop_assert_eq!(RethRepr::parse(&buf), Ok(repr));
        }
    }
}
