//! The UDP header (RFC 768), as RoCEv2 uses it (IBA Annex A17.4): destination port 4791, a
//! per-flow source port, and a checksum that Linux Soft-RoCE leaves at zero because the ICRC
//! already protects the payload. The checksum is therefore neither computed nor verified here.

use crate::{Error, Result};

/// Length of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// A zero-copy view of a UDP datagram at the start of a buffer.
///
/// After [`UdpPacket::new_checked`] succeeds no accessor panics.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps a buffer after checking that it holds the header and that the length field
    /// covers at least the header and at most the buffer.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// See [`UdpPacket::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let available = self.buffer.as_ref().len();
        if available < UDP_HEADER_LEN {
            return Err(Error::Truncated {
                header: "UDP",
                needed: UDP_HEADER_LEN,
                available,
            });
        }
        let len = usize::from(self.len());
        if len < UDP_HEADER_LEN || len > available {
            return Err(Error::BadLength {
                header: "UDP",
                claimed: len,
                available,
            });
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn be16(&self, f: field::Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.be16(field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.be16(field::DST_PORT)
    }

    /// Length of header plus payload.
    pub fn len(&self) -> u16 {
        self.be16(field::LENGTH)
    }

    /// Whether the datagram carries no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= UDP_HEADER_LEN
    }

    /// Checksum as stored (0 = none).
    pub fn checksum(&self) -> u16 {
        self.be16(field::CHECKSUM)
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[UDP_HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    fn set_be16(&mut self, f: field::Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.set_be16(field::SRC_PORT, v)
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.set_be16(field::DST_PORT, v)
    }

    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        self.set_be16(field::LENGTH, v)
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_be16(field::CHECKSUM, v)
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port (4791 for RoCEv2).
    pub dst_port: u16,
    /// Checksum as carried (0 = none, as Linux RoCEv2 sends).
    pub checksum: u16,
    /// Payload bytes (the length field minus 8).
    pub payload_len: u16,
}

impl UdpRepr {
    /// Parses a header and checks its length field.
    pub fn parse<T: AsRef<[u8]>>(packet: &UdpPacket<T>) -> Result<UdpRepr> {
        packet.check_len()?;
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            checksum: packet.checksum(),
            payload_len: packet.len() - UDP_HEADER_LEN as u16,
        })
    }

    /// Bytes [`UdpRepr::emit`] writes (the header only).
    pub const fn buffer_len(&self) -> usize {
        UDP_HEADER_LEN
    }

    /// Writes the header with the stored checksum value (0 for RoCEv2).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut UdpPacket<T>) -> Result<()> {
        let available = packet.buffer.as_ref().len();
        if available < UDP_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: UDP_HEADER_LEN,
                available,
            });
        }
        let Some(len) = self.payload_len.checked_add(UDP_HEADER_LEN as u16) else {
            return Err(Error::Malformed {
                header: "UDP",
                reason: "length above 65535",
            });
        };
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        packet.set_checksum(self.checksum);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // From the bundled rxe captures: source port 49494, RoCEv2 port, 28 bytes, no checksum.
    const BYTES: [u8; 8] = [0xc1, 0x56, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00];
    const REPR: UdpRepr = UdpRepr {
        src_port: 49494,
        dst_port: 4791,
        checksum: 0,
        payload_len: 20,
    };

    #[test]
    fn parse_byte_literal() {
        let mut b = BYTES.to_vec();
        b.resize(28, 0xAA);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p).unwrap(), REPR);
        assert_eq!(p.payload().len(), 20);
    }

    #[test]
    fn emit_byte_literal() {
        let mut buf = [0xFFu8; 8];
        REPR.emit(&mut UdpPacket::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn length_field_out_of_range_is_bad_length() {
        assert!(matches!(
            UdpPacket::new_checked(&BYTES[..]),
            Err(Error::BadLength { .. })
        ));
        let mut b = BYTES;
        b[5] = 4;
        assert!(matches!(
            UdpPacket::new_checked(&b[..]),
            Err(Error::BadLength { .. })
        ));
    }

    proptest! {
        #[test]
        fn emit_parse_identity(s: u16, d: u16, c: u16, len in 0u16..64) {
            let r = UdpRepr { src_port: s, dst_port: d, checksum: c, payload_len: len };
            let mut buf = vec![0u8; 8 + usize::from(len)];
            r.emit(&mut UdpPacket::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(UdpRepr::parse(&UdpPacket::new_checked(&buf[..]).unwrap()).unwrap(), r);
        }
    }
}
