//! The IPv4 header (RFC 791 section 3.1), as RoCEv2 uses it (IBA Annex A17.4): 20 bytes, no
//! options, with its header checksum (RFC 1071).

use crate::{Error, Result};
use std::net::Ipv4Addr;

/// Length of an IPv4 header without options, the only form RoCEv2 uses.
pub const IPV4_HEADER_LEN: usize = 20;

/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

mod field {
    pub type Field = core::ops::Range<usize>;
    /// Version:4 IHL:4
    pub const VER_IHL: usize = 0;
    /// DSCP:6 ECN:2
    pub const TOS: usize = 1;
    pub const TOTAL_LEN: Field = 2..4;
    pub const IDENT: Field = 4..6;
    /// rsv:1 DF:1 MF:1 FragOffset:13
    pub const FLAGS_FRAG: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1FFF;

/// RFC 1071 Internet checksum of `bytes` (an IPv4 header with its checksum field included):
/// the value to store is this with the field zeroed; a correct header sums to zero.
pub fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// A zero-copy view of an IPv4 packet at the start of a buffer.
///
/// After [`Ipv4Packet::new_checked`] succeeds no accessor panics.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a header of the length IHL claims and
    /// that the total length fits the buffer (a longer buffer, e.g. Ethernet padding, is fine).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// See [`Ipv4Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let available = self.buffer.as_ref().len();
        if available < IPV4_HEADER_LEN {
            return Err(Error::Truncated {
                header: "IPv4",
                needed: IPV4_HEADER_LEN,
                available,
            });
        }
        let hl = self.header_len();
        if hl < IPV4_HEADER_LEN {
            return Err(Error::Malformed {
                header: "IPv4",
                reason: "IHL below 5 words",
            });
        }
        if available < hl {
            return Err(Error::Truncated {
                header: "IPv4",
                needed: hl,
                available,
            });
        }
        let total = usize::from(self.total_len());
        if total < hl || total > available {
            return Err(Error::BadLength {
                header: "IPv4",
                claimed: total,
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

    /// Version (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL x 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0F) * 4
    }

    /// Type of service byte (DSCP:6 ECN:2).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Total length (header + payload).
    pub fn total_len(&self) -> u16 {
        self.be16(field::TOTAL_LEN)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        self.be16(field::IDENT)
    }

    /// Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.be16(field::FLAGS_FRAG) & FLAG_DF != 0
    }

    /// More Fragments flag.
    pub fn more_frags(&self) -> bool {
        self.be16(field::FLAGS_FRAG) & FLAG_MF != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        self.be16(field::FLAGS_FRAG) & FRAG_OFFSET_MASK
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol (17 = UDP).
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum as stored.
    pub fn header_checksum(&self) -> u16 {
        self.be16(field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Whether the header checksum is correct (always true under `cfg(fuzzing)`).
    pub fn verify_checksum(&self) -> bool {
        cfg!(fuzzing) || checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// The payload: bytes after the header up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_be16(&mut self, f: field::Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets version 4 and IHL 5 (no options).
    pub fn set_ver_ihl(&mut self) {
        self.buffer.as_mut()[field::VER_IHL] = 0x45;
    }

    /// Sets the type of service byte.
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOS] = v;
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        self.set_be16(field::TOTAL_LEN, v)
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        self.set_be16(field::IDENT, v)
    }

    /// Sets flags and fragment offset (the reserved flag is written as zero).
    pub fn set_flags_frag(&mut self, df: bool, mf: bool, offset: u16) {
        let v = (if df { FLAG_DF } else { 0 })
            | (if mf { FLAG_MF } else { 0 })
            | (offset & FRAG_OFFSET_MASK);
        self.set_be16(field::FLAGS_FRAG, v)
    }

    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Computes and stores the header checksum over the 20-byte header.
    pub fn fill_checksum(&mut self) {
        self.set_be16(field::CHECKSUM, 0);
        let c = checksum(&self.buffer.as_ref()[..IPV4_HEADER_LEN]);
        self.set_be16(field::CHECKSUM, c);
    }
}

/// A parsed IPv4 header (without options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Type of service byte (DSCP:6 ECN:2).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment (RoCEv2 senders set it).
    pub dont_frag: bool,
    /// More Fragments.
    pub more_frags: bool,
    /// Fragment offset in 8-byte units.
    pub frag_offset: u16,
    /// Time to live.
    pub ttl: u8,
    /// Protocol (17 = UDP).
    pub protocol: u8,
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Bytes after the header (total length minus 20).
    pub payload_len: u16,
}

impl Ipv4Repr {
    /// Parses a header; rejects a version other than 4, options (RoCEv2 sends none), bad
    /// lengths and a wrong header checksum.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::BadVersion {
                header: "IPv4",
                version: packet.version(),
            });
        }
        if packet.header_len() != IPV4_HEADER_LEN {
            return Err(Error::Malformed {
                header: "IPv4",
                reason: "options present (RoCEv2 sends none)",
            });
        }
        if !packet.verify_checksum() {
            return Err(Error::Malformed {
                header: "IPv4",
                reason: "header checksum is wrong",
            });
        }
        Ok(Ipv4Repr {
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            frag_offset: packet.frag_offset(),
            ttl: packet.ttl(),
            protocol: packet.protocol(),
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            payload_len: packet.total_len() - IPV4_HEADER_LEN as u16,
        })
    }

    /// Bytes [`Ipv4Repr::emit`] writes (the header only).
    pub const fn buffer_len(&self) -> usize {
        IPV4_HEADER_LEN
    }

    /// Writes the header with a correct checksum; the payload is the caller's.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) -> Result<()> {
        let available = packet.buffer.as_ref().len();
        if available < IPV4_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: IPV4_HEADER_LEN,
                available,
            });
        }
        let Some(total) = self.payload_len.checked_add(IPV4_HEADER_LEN as u16) else {
            return Err(Error::Malformed {
                header: "IPv4",
                reason: "total length above 65535",
            });
        };
        if self.frag_offset > FRAG_OFFSET_MASK {
            return Err(Error::Malformed {
                header: "IPv4",
                reason: "fragment offset is 13 bits",
            });
        }
        packet.set_ver_ihl();
        packet.set_tos(self.tos);
        packet.set_total_len(total);
        packet.set_ident(self.ident);
        packet.set_flags_frag(self.dont_frag, self.more_frags, self.frag_offset);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A real header from the bundled rxe captures (ACK, 10.99.0.1 -> 10.99.0.2).
    const BYTES: [u8; 20] = [
        0x45, 0x00, 0x00, 0x30, 0x13, 0xf6, 0x40, 0x00, 0x40, 0x11, 0x11, 0xff, 10, 99, 0, 1, 10,
        99, 0, 2,
    ];

    fn repr() -> Ipv4Repr {
        Ipv4Repr {
            tos: 0,
            ident: 0x13f6,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            ttl: 64,
            protocol: PROTOCOL_UDP,
            src_addr: Ipv4Addr::new(10, 99, 0, 1),
            dst_addr: Ipv4Addr::new(10, 99, 0, 2),
            payload_len: 28,
        }
    }

    #[test]
    fn parse_byte_literal() {
        let mut b = BYTES.to_vec();
        b.resize(48, 0);
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap()).unwrap(),
            repr()
        );
    }

    #[test]
    fn emit_byte_literal_with_checksum() {
        let mut buf = [0u8; 20];
        repr()
            .emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn bad_checksum_length_and_options_are_errors() {
        let mut b = BYTES.to_vec();
        b.resize(48, 0);
        b[11] ^= 1;
        assert!(matches!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed { header: "IPv4", .. })
        ));
        assert!(matches!(
            Ipv4Packet::new_checked(&b[..40]),
            Err(Error::BadLength { .. })
        ));
        let mut o = BYTES.to_vec();
        o[0] = 0x46;
        o.resize(48, 0);
        assert!(Ipv4Repr::parse(&Ipv4Packet::new_checked(&o[..]).unwrap()).is_err());
        let mut short = BYTES.to_vec();
        short[0] = 0x44;
        assert!(Ipv4Packet::new_checked(&short[..]).is_err());
    }

    proptest! {
        #[test]
        fn emit_parse_identity(tos: u8, ident: u16, df: bool, mf: bool, off in 0u16..0x2000,
                               ttl: u8, proto: u8, src: [u8; 4], dst: [u8; 4], len in 0u16..64) {
            let r = Ipv4Repr { tos, ident, dont_frag: df, more_frags: mf, frag_offset: off, ttl,
                               protocol: proto, src_addr: src.into(), dst_addr: dst.into(),
                               payload_len: len };
            let mut buf = vec![0u8; 20 + usize::from(len)];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(Ipv4Repr::parse(&Ipv4Packet::new_checked(&buf[..]).unwrap()).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = Ipv4Packet::new_checked(&bytes[..]) {
                let _ = Ipv4Repr::parse(&p);
                let _ = p.payload();
            }
        }
    }
}
