//! Global Route Header (GRH), IBA vol. 1 8.3: the 40-byte network-layer header of routed
//! native InfiniBand packets (present when the LRH's LNH is 3). Its layout is the IPv6 header's.
//!
//! ```text
//! IPVer:4 TClass:8 FlowLabel:20 · PayLen:16 NxtHdr:8 HopLmt:8 · SGID:128 · DGID:128
//! ```

use crate::{Error, Result};

/// Length of the GRH.
pub const GRH_LEN: usize = 40;

/// NxtHdr value for an IBA transport header (BTH) following the GRH (IBA 8.3.6).
pub const NXT_HDR_IBA: u8 = 0x1B;

/// The only IPVer the GRH uses (IBA 8.3.1).
pub const GRH_IPVER: u8 = 6;

mod field {
    pub type Field = core::ops::Range<usize>;
    /// IPVer:4 TClass:8 FlowLabel:20
    pub const VER_TC_FLOW: Field = 0..4;
    pub const PAY_LEN: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LMT: usize = 7;
    pub const SGID: Field = 8..24;
    pub const DGID: Field = 24..40;
}

/// A zero-copy view of a GRH at the start of a buffer.
///
/// After [`GrhPacket::new_checked`] succeeds no accessor panics.
#[derive(Debug, Clone)]
pub struct GrhPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GrhPacket<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        GrhPacket { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole GRH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds a whole GRH.
    pub fn check_len(&self) -> Result<()> {
        let available = self.buffer.as_ref().len();
        if available < GRH_LEN {
            return Err(Error::Truncated {
                header: "GRH",
                needed: GRH_LEN,
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

    /// IP version (4 bits; 6 for a GRH).
    pub fn ip_ver(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000F_FFFF
    }

    /// Payload length: bytes after the GRH up to and including the ICRC (IBA 8.3.3).
    pub fn payload_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PAY_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Next header (0x1B = IBA transport).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LMT]
    }

    /// Source GID.
    pub fn sgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::SGID]);
        g
    }

    /// Destination GID.
    pub fn dgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::DGID]);
        g
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GrhPacket<T> {
    /// Sets IPVer, TClass and FlowLabel (the flow label is masked to 20 bits).
    pub fn set_ver_tc_flow(&mut self, ver: u8, tc: u8, flow: u32) {
        let w = (u32::from(ver & 0x0F) << 28) | (u32::from(tc) << 20) | (flow & 0x000F_FFFF);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets PayLen.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::PAY_LEN].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets NxtHdr.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    /// Sets HopLmt.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LMT] = v;
    }

    /// Sets the source GID.
    pub fn set_sgid(&mut self, g: &[u8; 16]) {
        self.buffer.as_mut()[field::SGID].copy_from_slice(g);
    }

    /// Sets the destination GID.
    pub fn set_dgid(&mut self, g: &[u8; 16]) {
        self.buffer.as_mut()[field::DGID].copy_from_slice(g);
    }
}

/// A parsed GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Bytes after the GRH up to and including the ICRC.
    pub payload_len: u16,
    /// Next header (0x1B for IBA transport).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination GID.
    pub dgid: [u8; 16],
}

impl GrhRepr {
    /// Parses a GRH; rejects an IPVer other than 6 (IBA 8.3.1).
    pub fn parse<T: AsRef<[u8]>>(packet: &GrhPacket<T>) -> Result<GrhRepr> {
        packet.check_len()?;
        if packet.ip_ver() != GRH_IPVER {
            return Err(Error::BadVersion {
                header: "GRH",
                version: packet.ip_ver(),
            });
        }
        Ok(GrhRepr {
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
            payload_len: packet.payload_len(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            sgid: packet.sgid(),
            dgid: packet.dgid(),
        })
    }

    /// Bytes [`GrhRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        GRH_LEN
    }

    /// Writes the GRH (IPVer 6).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut GrhPacket<T>) -> Result<()> {
        let available = packet.buffer.as_ref().len();
        if available < GRH_LEN {
            return Err(Error::BufferTooSmall {
                needed: GRH_LEN,
                available,
            });
        }
        if self.flow_label > 0x000F_FFFF {
            return Err(Error::Malformed {
                header: "GRH",
                reason: "FlowLabel is a 20-bit field",
            });
        }
        packet.set_ver_tc_flow(GRH_IPVER, self.traffic_class, self.flow_label);
        packet.set_payload_len(self.payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_sgid(&self.sgid);
        packet.set_dgid(&self.dgid);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> [u8; 40] {
        let mut b = [0u8; 40];
        b[..8].copy_from_slice(&[0x6A, 0xB1, 0x23, 0x45, 0x00, 0x20, 0x1B, 0x40]);
        b[8..24].copy_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        b[24..40].copy_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        b
    }

    fn repr() -> GrhRepr {
        let b = bytes();
        GrhRepr {
            traffic_class: 0xAB,
            flow_label: 0x12345,
            payload_len: 32,
            next_header: NXT_HDR_IBA,
            hop_limit: 64,
            sgid: b[8..24].try_into().unwrap(),
            dgid: b[24..40].try_into().unwrap(),
        }
    }

    #[test]
    fn parse_byte_literal() {
        let b = bytes();
        assert_eq!(
            GrhRepr::parse(&GrhPacket::new_checked(&b[..]).unwrap()).unwrap(),
            repr()
        );
    }

    #[test]
    fn emit_byte_literal() {
        let mut buf = [0x55u8; 40];
        repr()
            .emit(&mut GrhPacket::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, bytes());
    }

    #[test]
    fn wrong_version_and_truncation_are_errors() {
        let mut b = bytes();
        b[0] = 0x4A;
        assert!(matches!(
            GrhRepr::parse(&GrhPacket::new_unchecked(&b[..])),
            Err(Error::BadVersion {
                header: "GRH",
                version: 4
            })
        ));
        assert!(matches!(
            GrhPacket::new_checked(&b[..39]),
            Err(Error::Truncated { .. })
        ));
    }

    proptest! {
        #[test]
        fn emit_parse_identity(tc: u8, flow in 0u32..0x10_0000, len: u16, nh: u8, hop: u8,
                               sgid: [u8; 16], dgid: [u8; 16]) {
            let r = GrhRepr { traffic_class: tc, flow_label: flow, payload_len: len,
                              next_header: nh, hop_limit: hop, sgid, dgid };
            let mut buf = [0u8; 40];
            r.emit(&mut GrhPacket::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(GrhRepr::parse(&GrhPacket::new_checked(&buf[..]).unwrap()).unwrap(), r);
        }
    }
}
