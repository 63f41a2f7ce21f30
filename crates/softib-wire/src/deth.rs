//! Datagram Extended Transport Header (IBA vol. 1, 9.3.2): carried by every UD packet and by
//! RD requests; names the sender's QP and the Q_Key the receiver checks.
//!
//! ```text
//!  0..4    Q_Key
//!  byte 4  reserved
//!  5..8    SrcQP (24 bits)
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the DETH in bytes.
pub const DETH_LEN: usize = crate::opcode::DETH_LEN;

mod field {
    use crate::bytes::Field;
    pub const QKEY: Field = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Field = 5..8;
}

/// A zero-copy view of a DETH.
#[derive(Debug, Clone)]
pub struct DethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DethPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        DethPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole DETH; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole DETH.
    pub fn check_len(&self) -> Result<()> {
        check("DETH", self.buffer.as_ref(), DETH_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Q_Key.
    pub fn qkey(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::QKEY) as u32
    }
    /// The reserved byte (zero on the wire, ignored on receive).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
    /// SrcQP.
    pub fn src_qp(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::SRC_QP) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DethPacket<T> {
    /// Sets Q_Key.
    pub fn set_qkey(&mut self, v: u32) {
        bytes::put(self.buffer.as_mut(), field::QKEY, u64::from(v));
    }
    /// Clears the reserved byte.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED] = 0;
    }
    /// Sets SrcQP (low 24 bits).
    pub fn set_src_qp(&mut self, v: u32) {
        bytes::put(
            self.buffer.as_mut(),
            field::SRC_QP,
            u64::from(v & 0x00FF_FFFF),
        );
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Q_Key.
    pub qkey: u32,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// Parses a DETH from the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<DethRepr> {
        let p = DethPacket::new_checked(buf)?;
        Ok(DethRepr {
            qkey: p.qkey(),
            src_qp: p.src_qp(),
        })
    }
    /// Bytes [`DethRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        DETH_LEN
    }
    /// Writes the DETH to the start of `buf` (reserved byte zero); returns [`DETH_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, DETH_LEN)?;
        let mut p = DethPacket::new_unchecked(&mut buf[..DETH_LEN]);
        p.set_qkey(self.qkey);
        p.clear_reserved();
        p.set_src_qp(self.src_qp);
        Ok(DETH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    /// The DETH of the first UD SEND Only in testdata/captures/rxe-send_bw_ud.pcap.
    const BYTES: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x16];
    const REPR: DethRepr = DethRepr {
        qkey: 0x1111_1111,
        src_qp: 0x16,
    };

    #[test]
    fn parses_known_bytes() {
        assert_eq!(DethRepr::parse(&BYTES), Ok(REPR));
        let mut with_reserved = BYTES;
        with_reserved[4] = 0xFF;
        assert_eq!(DethRepr::parse(&with_reserved), Ok(REPR));
        assert_eq!(
            DethPacket::new_checked(&with_reserved[..])
                .unwrap()
                .reserved(),
            0xFF
        );
    }

    #[test]
    fn emits_known_bytes() {
        let mut buf = [0xFFu8; 8];
        assert_eq!(REPR.emit(&mut buf), Ok(DETH_LEN));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..DETH_LEN {
            assert!(matches!(
                DethRepr::parse(&BYTES[..n]),
                Err(Error::Truncated { header: "DETH", .. })
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
        fn emit_then_parse_is_identity(qkey: u32, src_qp in 0u32..1 << 24) {
            let repr = DethRepr { qkey, src_qp };
            let mut buf = [0u8; DETH_LEN];
            prop_assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
            prop_assert_eq!(DethRepr::parse(&buf), Ok(repr));
        }
    }
}
