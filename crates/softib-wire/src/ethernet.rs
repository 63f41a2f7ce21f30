//! Ethernet II framing (IEEE 802.3 with an EtherType), with an optional IEEE 802.1Q VLAN tag,
//! as RoCEv2 frames use it. The frame check sequence is not part of captured frames and is not
//! handled here.

use crate::{Error, Result};

/// Length of an untagged Ethernet II header.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// Length of an 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType (TPID) of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of RoCE v1 (a GRH directly in Ethernet, IBA Annex A16); recognised, not decoded.
pub const ETHERTYPE_ROCE_V1: u16 = 0x8915;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    /// Tag control information after a 0x8100 TPID: PCP:3 DEI:1 VID:12
    pub const TCI: Field = 14..16;
    pub const INNER_ETHERTYPE: Field = 16..18;
}

/// A 48-bit MAC address.
pub type MacAddr = [u8; 6];

/// A zero-copy view of an Ethernet II frame.
///
/// After [`EthernetFrame::new_checked`] succeeds no accessor panics.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer after checking that it holds the header, including the VLAN tag if
    /// the outer EtherType announces one.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// See [`EthernetFrame::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let available = self.buffer.as_ref().len();
        if available < ETHERNET_HEADER_LEN {
            return Err(Error::Truncated {
                header: "Ethernet",
                needed: ETHERNET_HEADER_LEN,
                available,
            });
        }
        if self.header_len() > available {
            return Err(Error::Truncated {
                header: "802.1Q tag",
                needed: self.header_len(),
                available,
            });
        }
        Ok(())
    }

    fn be16(&self, f: field::Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Destination MAC.
    pub fn dst_addr(&self) -> MacAddr {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// Source MAC.
    pub fn src_addr(&self) -> MacAddr {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// The EtherType in the untagged position (0x8100 for a tagged frame).
    pub fn outer_ethertype(&self) -> u16 {
        self.be16(field::ETHERTYPE)
    }

    /// Whether an 802.1Q tag follows the addresses.
    pub fn is_tagged(&self) -> bool {
        self.outer_ethertype() == ETHERTYPE_VLAN
    }

    /// Header length: 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            ETHERNET_HEADER_LEN + VLAN_TAG_LEN
        } else {
            ETHERNET_HEADER_LEN
        }
    }

    /// The VLAN tag, if any.
    pub fn vlan(&self) -> Option<VlanTag> {
        self.is_tagged()
            .then(|| VlanTag::from_tci(self.be16(field::TCI)))
    }

    /// The EtherType of the payload (after the tag, if any).
    pub fn ethertype(&self) -> u16 {
        if self.is_tagged() {
            self.be16(field::INNER_ETHERTYPE)
        } else {
            self.outer_ethertype()
        }
    }

    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a);
    }

    /// Sets the source MAC.
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a);
    }
}

/// An IEEE 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// Priority code point (3 bits); RoCE maps the IB service level here.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0FFF,
        }
    }

    fn tci(&self) -> u16 {
        (u16::from(self.pcp & 0x7) << 13)
            | (if self.dei { 0x1000 } else { 0 })
            | (self.vid & 0x0FFF)
    }
}

/// A parsed Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst_addr: MacAddr,
    /// Source MAC.
    pub src_addr: MacAddr,
    /// 802.1Q tag, if present.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses the header.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            dst_addr: frame.dst_addr(),
            src_addr: frame.src_addr(),
            vlan: frame.vlan(),
            ethertype: frame.ethertype(),
        })
    }

    /// Bytes [`EthernetRepr::emit`] writes: 14, or 18 with a VLAN tag.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            ETHERNET_HEADER_LEN + VLAN_TAG_LEN
        } else {
            ETHERNET_HEADER_LEN
        }
    }

    /// Writes the header.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let needed = self.buffer_len();
        if buf.len() < needed {
            return Err(Error::BufferTooSmall {
                needed,
                available: buf.len(),
            });
        }
        if self.vlan.is_some_and(|v| v.pcp > 7 || v.vid > 0x0FFF) {
            return Err(Error::Malformed {
                header: "802.1Q tag",
                reason: "PCP is 3 bits, VID 12 bits",
            });
        }
        buf[field::DST].copy_from_slice(&self.dst_addr);
        buf[field::SRC].copy_from_slice(&self.src_addr);
        match self.vlan {
            None => buf[field::ETHERTYPE].copy_from_slice(&self.ethertype.to_be_bytes()),
            Some(tag) => {
                buf[field::ETHERTYPE].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
                buf[field::TCI].copy_from_slice(&tag.tci().to_be_bytes());
                buf[field::INNER_ETHERTYPE].copy_from_slice(&self.ethertype.to_be_bytes());
            }
        }
        Ok(needed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // From the bundled rxe captures.
    const BYTES: [u8; 14] = [
        0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x52, 0x54, 0x00, 0x99, 0x00, 0x01, 0x08, 0x00,
    ];
    const REPR: EthernetRepr = EthernetRepr {
        dst_addr: [0x52, 0x54, 0x00, 0x99, 0x00, 0x02],
        src_addr: [0x52, 0x54, 0x00, 0x99, 0x00, 0x01],
        vlan: None,
        ethertype: ETHERTYPE_IPV4,
    };

    #[test]
    fn parse_byte_literal() {
        assert_eq!(
            EthernetRepr::parse(&EthernetFrame::new_checked(&BYTES[..]).unwrap()).unwrap(),
            REPR
        );
    }

    #[test]
    fn emit_byte_literal() {
        let mut buf = [0u8; 14];
        assert_eq!(REPR.emit(&mut buf).unwrap(), 14);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn vlan_tagged_frame_both_ways() {
        let bytes = [
            0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x52, 0x54, 0x00, 0x99, 0x00, 0x01, 0x81, 0x00,
            0x60, 0x64, 0x86, 0xdd, 0xAA,
        ];
        let f = EthernetFrame::new_checked(&bytes[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(
            r.vlan,
            Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100
            })
        );
        assert_eq!(r.ethertype, ETHERTYPE_IPV6);
        assert_eq!(f.payload(), &[0xAA]);
        let mut out = [0u8; 18];
        assert_eq!(r.emit(&mut out).unwrap(), 18);
        assert_eq!(&out[..], &bytes[..18]);
        assert!(matches!(
            EthernetFrame::new_checked(&bytes[..16]),
            Err(Error::Truncated { .. })
        ));
    }

    proptest! {
        #[test]
        fn emit_parse_identity(dst: [u8; 6], src: [u8; 6], et in 0x0600u16..0xFFFF,
                               tag: Option<(u8, bool, u16)>) {
            prop_assume!(et != ETHERTYPE_VLAN);
            let r = EthernetRepr { dst_addr: dst, src_addr: src, ethertype: et,
                vlan: tag.map(|(p, d, v)| VlanTag { pcp: p & 7, dei: d, vid: v & 0xFFF }) };
            let mut buf = [0u8; 18];
            let n = r.emit(&mut buf).unwrap();
            prop_assert_eq!(EthernetRepr::parse(&EthernetFrame::new_checked(&buf[..n]).unwrap()).unwrap(), r);
        }
    }
}
