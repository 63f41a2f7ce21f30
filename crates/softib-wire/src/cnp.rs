//! The body of a RoCEv2 congestion notification packet (IBA Annex A17, "CNP"): after a BTH
//! with opcode 0x81 (BECN set, DestQP = the QP to slow down, PSN 0) come 16 reserved bytes,
//! then the ICRC. The receiver ignores the reserved bytes; the sender writes zeros.

use crate::bytes::{check, check_emit};
use crate::Result;

/// Length of the CNP body (the reserved bytes after the BTH).
pub const CNP_BODY_LEN: usize = crate::opcode::CNP_BODY_LEN;

/// A zero-copy view of a CNP body.
#[derive(Debug, Clone)]
pub struct CnpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> CnpPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        CnpPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole CNP body; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds the 16-byte CNP body.
    pub fn check_len(&self) -> Result<()> {
        check("CNP", self.buffer.as_ref(), CNP_BODY_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The reserved bytes as received.
    pub fn reserved(&self) -> &[u8] {
        &self.buffer.as_ref()[..CNP_BODY_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CnpPacket<T> {
    /// Zeroes the reserved bytes.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[..CNP_BODY_LEN].fill(0);
    }
}

/// A parsed CNP body. It carries no information: everything a CNP says is in its BTH.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CnpRepr;

impl CnpRepr {
    /// Checks that `buf` starts with a whole CNP body.
    pub fn parse(buf: &[u8]) -> Result<CnpRepr> {
        CnpPacket::new_checked(buf)?;
        Ok(CnpRepr)
    }
    /// Bytes [`CnpRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        CNP_BODY_LEN
    }
    /// Writes 16 zero bytes to the start of `buf`; returns [`CNP_BODY_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, CNP_BODY_LEN)?;
        CnpPacket::new_unchecked(&mut buf[..CNP_BODY_LEN]).clear_reserved();
        Ok(CNP_BODY_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn parses_any_16_bytes_and_emits_zeros() {
        let bytes = [0xEEu8; 16];
        assert_eq!(CnpRepr::parse(&bytes), Ok(CnpRepr));
        assert_eq!(
            CnpPacket::new_checked(&bytes[..]).unwrap().reserved(),
            &bytes
        );
        let mut buf = [0xFFu8; 16];
        assert_eq!(CnpRepr.emit(&mut buf), Ok(CNP_BODY_LEN));
        assert_eq!(buf, [0u8; 16]);
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..CNP_BODY_LEN {
            assert!(matches!(
                CnpRepr::parse(&[0u8; 16][..n]),
                Err(Error::Truncated { header: "CNP", .. })
            ));
            let mut buf = vec![0u8; n];
            assert!(matches!(
                CnpRepr.emit(&mut buf),
                Err(Error::BufferTooSmall { .. })
            ));
        }
    }
}
