//! The IPv6 header (RFC 8200 section 3), as RoCEv2 uses it (IBA Annex A17.4): a fixed 40-byte
//! header directly followed by UDP. Extension headers are not used by RoCEv2 and are reported
//! as "not RoCEv2" by the encapsulation layer.

use crate::{Error, Result};
use std::net::Ipv6Addr;

/// Length of the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;

mod field {
    pub type Field = core::ops::Range<usize>;
    /// Version:4 TrafficClass:8 FlowLabel:20
    pub const VER_TC_FLOW: Field = 0..4;
    pub const PAYLOAD_LEN: Field = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
}

/// A zero-copy view of an IPv6 header at the start of a buffer.
///
/// After [`Ipv6Packet::new_checked`] succeeds no accessor panics.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds the fixed header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the fixed header.
    pub fn check_len(&self) -> Result<()> {
        let available = self.buffer.as_ref().len();
        if available < IPV6_HEADER_LEN {
            return Err(Error::Truncated {
                header: "IPv6",
                needed: IPV6_HEADER_LEN,
                available,
            });
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// IP version (6).
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// Traffic class (DSCP:6 ECN:2).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000F_FFFF
    }

    /// Payload length: bytes after the fixed header.
    pub fn payload_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PAYLOAD_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Next header (17 = UDP).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv6Addr::from(a)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version 6, the traffic class and the flow label (masked to 20 bits).
    pub fn set_ver_tc_flow(&mut self, tc: u8, flow: u32) {
        let w = (6u32 << 28) | (u32::from(tc) << 20) | (flow & 0x000F_FFFF);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::PAYLOAD_LEN].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
}

/// A parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Traffic class (DSCP:6 ECN:2).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Bytes after the fixed header.
    pub payload_len: u16,
    /// Next header (17 = UDP).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
}

impl Ipv6Repr {
    /// Parses the fixed header; rejects a version other than 6 and a payload length that
    /// runs past the buffer.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error::BadVersion {
                header: "IPv6",
                version: packet.version(),
            });
        }
        let available = packet.buffer.as_ref().len() - IPV6_HEADER_LEN;
        if usize::from(packet.payload_len()) > available {
            return Err(Error::BadLength {
                header: "IPv6",
                claimed: usize::from(packet.payload_len()),
                available,
            });
        }
        Ok(Ipv6Repr {
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
            payload_len: packet.payload_len(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
        })
    }

    /// Bytes [`Ipv6Repr::emit`] writes (the fixed header only).
    pub const fn buffer_len(&self) -> usize {
        IPV6_HEADER_LEN
    }

    /// Writes the fixed header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) -> Result<()> {
        let available = packet.buffer.as_ref().len();
        if available < IPV6_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: IPV6_HEADER_LEN,
                available,
            });
        }
        if self.flow_label > 0x000F_FFFF {
            return Err(Error::Malformed {
                header: "IPv6",
                reason: "the flow label is 20 bits",
            });
        }
        packet.set_ver_tc_flow(self.traffic_class, self.flow_label);
        packet.set_payload_len(self.payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> Vec<u8> {
        let mut b = vec![0x60, 0x21, 0x23, 0x45, 0x00, 0x04, 0x11, 0x40];
        b.extend_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets());
        b.extend_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets());
        b.extend_from_slice(&[1, 2, 3, 4]);
        b
    }

    fn repr() -> Ipv6Repr {
        Ipv6Repr {
            traffic_class: 0x02,
            flow_label: 0x12345,
            payload_len: 4,
            next_header: 17,
            hop_limit: 64,
            src_addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            dst_addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        }
    }

    #[test]
    fn parse_byte_literal() {
        let b = bytes();
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap(),
            repr()
        );
    }

    #[test]
    fn emit_byte_literal() {
        let mut buf = [0u8; 40];
        repr()
            .emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(&buf[..], &bytes()[..40]);
    }

    #[test]
    fn payload_length_past_buffer_is_bad_length() {
        let b = bytes();
        assert!(matches!(
            Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..42]).unwrap()),
            Err(Error::BadLength {
                header: "IPv6",
                claimed: 4,
                available: 2
            })
        ));
    }

    proptest! {
        #[test]
        fn emit_parse_identity(tc: u8, flow in 0u32..0x10_0000, nh: u8, hop: u8,
                               src: [u8; 16], dst: [u8; 16], len in 0u16..64) {
            let r = Ipv6Repr { traffic_class: tc, flow_label: flow, payload_len: len,
                               next_header: nh, hop_limit: hop,
                               src_addr: src.into(), dst_addr: dst.into() };
            let mut buf = vec![0u8; 40 + usize::from(len)];
            r.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_checked(&buf[..]).unwrap()).unwrap(), r);
        }
    }
}
