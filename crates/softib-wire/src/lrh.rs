//! Local Route Header (LRH), IBA vol. 1 7.7: the 8-byte link-layer header of every native
//! InfiniBand packet.
//!
//! ```text
//! byte 0: VL:4 LVer:4   byte 1: SL:4 rsv:2 LNH:2   bytes 2-3: DLID
//! bytes 4-5: rsv:5 PktLen:11 (4-byte words, LRH through ICRC)   bytes 6-7: SLID
//! ```

use crate::{Error, Result};

/// Length of the LRH.
pub const LRH_LEN: usize = 8;

/// Largest PktLen the 11-bit field can carry (IBA 7.7.8).
pub const MAX_PKT_LEN_WORDS: u16 = 0x07FF;

mod field {
    pub type Field = core::ops::Range<usize>;
    /// VL:4 LVer:4
    pub const VL_LVER: usize = 0;
    /// SL:4 rsv:2 LNH:2
    pub const SL_LNH: usize = 1;
    pub const DLID: Field = 2..4;
    /// rsv:5 PktLen:11
    pub const PKT_LEN: Field = 4..6;
    pub const SLID: Field = 6..8;
}

/// Link Next Header (IBA 7.7.5): what follows the LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lnh {
    /// 0: raw packet, no IBA transport and no ICRC.
    Raw,
    /// 1: raw packet carrying a non-IBA IP header.
    IpNonIba,
    /// 2: IBA local: a BTH follows.
    Bth,
    /// 3: IBA global: a GRH follows.
    Grh,
}

impl Lnh {
    /// Decodes the 2-bit field.
    pub fn from_bits(bits: u8) -> Lnh {
        match bits & 0x3 {
            0 => Lnh::Raw,
            1 => Lnh::IpNonIba,
            2 => Lnh::Bth,
            _ => Lnh::Grh,
        }
    }

    /// The 2-bit field value.
    pub fn bits(self) -> u8 {
        match self {
            Lnh::Raw => 0,
            Lnh::IpNonIba => 1,
            Lnh::Bth => 2,
            Lnh::Grh => 3,
        }
    }

    /// Whether an IBA transport header (and so an ICRC) follows.
    pub fn is_iba(self) -> bool {
        matches!(self, Lnh::Bth | Lnh::Grh)
    }
}

/// A zero-copy view of an LRH at the start of a buffer.
///
/// After [`LrhPacket::new_checked`] succeeds no accessor panics.
#[derive(Debug, Clone)]
pub struct LrhPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> LrhPacket<T> {
    /// Wraps a buffer without checking its length; accessors may panic if it is short.
    pub fn new_unchecked(buffer: T) -> Self {
        LrhPacket { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole LRH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds a whole LRH.
    pub fn check_len(&self) -> Result<()> {
        let available = self.buffer.as_ref().len();
        if available < LRH_LEN {
            return Err(Error::Truncated {
                header: "LRH",
                needed: LRH_LEN,
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

    /// Virtual lane (4 bits).
    pub fn vl(&self) -> u8 {
        self.buffer.as_ref()[field::VL_LVER] >> 4
    }

    /// Link version (4 bits; 0 is the only one defined, IBA 7.7.2).
    pub fn lver(&self) -> u8 {
        self.buffer.as_ref()[field::VL_LVER] & 0x0F
    }

    /// Service level (4 bits).
    pub fn sl(&self) -> u8 {
        self.buffer.as_ref()[field::SL_LNH] >> 4
    }

    /// Link next header.
    pub fn lnh(&self) -> Lnh {
        Lnh::from_bits(self.buffer.as_ref()[field::SL_LNH])
    }

    /// Destination LID.
    pub fn dlid(&self) -> u16 {
        self.be16(field::DLID)
    }

    /// Packet length in 4-byte words, LRH through ICRC (11 bits).
    pub fn pkt_len_words(&self) -> u16 {
        self.be16(field::PKT_LEN) & MAX_PKT_LEN_WORDS
    }

    /// Source LID.
    pub fn slid(&self) -> u16 {
        self.be16(field::SLID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> LrhPacket<T> {
    fn set_be16(&mut self, f: field::Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets VL and LVer (each masked to 4 bits).
    pub fn set_vl_lver(&mut self, vl: u8, lver: u8) {
        self.buffer.as_mut()[field::VL_LVER] = (vl << 4) | (lver & 0x0F);
    }

    /// Sets SL and LNH; the two reserved bits are written as zero.
    pub fn set_sl_lnh(&mut self, sl: u8, lnh: Lnh) {
        self.buffer.as_mut()[field::SL_LNH] = (sl << 4) | lnh.bits();
    }

    /// Sets the destination LID.
    pub fn set_dlid(&mut self, v: u16) {
        self.set_be16(field::DLID, v)
    }

    /// Sets PktLen (masked to 11 bits; the reserved bits are written as zero).
    pub fn set_pkt_len_words(&mut self, v: u16) {
        self.set_be16(field::PKT_LEN, v & MAX_PKT_LEN_WORDS)
    }

    /// Sets the source LID.
    pub fn set_slid(&mut self, v: u16) {
        self.set_be16(field::SLID, v)
    }
}

/// A parsed LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LrhRepr {
    /// Virtual lane, 0..=15 (15 = subnet management).
    pub vl: u8,
    /// Link version, 0.
    pub lver: u8,
    /// Service level, 0..=15.
    pub sl: u8,
    /// What follows the LRH.
    pub lnh: Lnh,
    /// Destination LID.
    pub dlid: u16,
    /// Packet length in 4-byte words from the LRH through the ICRC (IBA 7.7.8).
    pub pkt_len_words: u16,
    /// Source LID.
    pub slid: u16,
}

impl LrhRepr {
    /// Parses an LRH; rejects a link version other than 0 (IBA 7.7.2).
    pub fn parse<T: AsRef<[u8]>>(packet: &LrhPacket<T>) -> Result<LrhRepr> {
        packet.check_len()?;
        if packet.lver() != 0 {
            return Err(Error::BadVersion {
                header: "LRH",
                version: packet.lver(),
            });
        }
        Ok(LrhRepr {
            vl: packet.vl(),
            lver: packet.lver(),
            sl: packet.sl(),
            lnh: packet.lnh(),
            dlid: packet.dlid(),
            pkt_len_words: packet.pkt_len_words(),
            slid: packet.slid(),
        })
    }

    /// Bytes [`LrhRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LRH_LEN
    }

    /// Writes the LRH; values wider than their fields are rejected rather than truncated.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut LrhPacket<T>) -> Result<()> {
        let available = packet.buffer.as_ref().len();
        if available < LRH_LEN {
            return Err(Error::BufferTooSmall {
                needed: LRH_LEN,
                available,
            });
        }
        if self.vl > 15 || self.lver > 15 || self.sl > 15 {
            return Err(Error::Malformed {
                header: "LRH",
                reason: "VL, LVer and SL are 4-bit fields",
            });
        }
        if self.pkt_len_words > MAX_PKT_LEN_WORDS {
            return Err(Error::Malformed {
                header: "LRH",
                reason: "PktLen is an 11-bit field",
            });
        }
        packet.set_vl_lver(self.vl, self.lver);
        packet.set_sl_lnh(self.sl, self.lnh);
        packet.set_dlid(self.dlid);
        packet.set_pkt_len_words(self.pkt_len_words);
        packet.set_slid(self.slid);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BYTES: [u8; 8] = [0xF0, 0x32, 0xFF, 0xFF, 0x00, 0x19, 0x00, 0x01];
    const REPR: LrhRepr = LrhRepr {
        vl: 15,
        lver: 0,
        sl: 3,
        lnh: Lnh::Bth,
        dlid: 0xFFFF,
        pkt_len_words: 25,
        slid: 1,
    };

    #[test]
    fn parse_byte_literal() {
        assert_eq!(
            LrhRepr::parse(&LrhPacket::new_checked(&BYTES[..]).unwrap()).unwrap(),
            REPR
        );
    }

    #[test]
    fn emit_byte_literal() {
        let mut buf = [0xAAu8; 8];
        REPR.emit(&mut LrhPacket::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn reserved_bits_ignored_on_parse() {
        let mut b = BYTES;
        b[1] |= 0x0C;
        b[4] |= 0xF8;
        assert_eq!(
            LrhRepr::parse(&LrhPacket::new_unchecked(&b[..])).unwrap(),
            REPR
        );
    }

    #[test]
    fn bad_lver_and_short_buffer_are_errors() {
        let mut b = BYTES;
        b[0] = 0xF1;
        assert!(matches!(
            LrhRepr::parse(&LrhPacket::new_unchecked(&b[..])),
            Err(Error::BadVersion {
                header: "LRH",
                version: 1
            })
        ));
        assert!(matches!(
            LrhPacket::new_checked(&b[..7]),
            Err(Error::Truncated { .. })
        ));
        let mut small = [0u8; 7];
        assert!(REPR
            .emit(&mut LrhPacket::new_unchecked(&mut small[..]))
            .is_err());
    }

    proptest! {
        #[test]
        fn emit_parse_identity(vl in 0u8..16, sl in 0u8..16, lnh in 0u8..4, dlid: u16,
                               len in 0u16..2048, slid: u16) {
            let r = LrhRepr { vl, lver: 0, sl, lnh: Lnh::from_bits(lnh), dlid, pkt_len_words: len, slid };
            let mut buf = [0u8; 8];
            r.emit(&mut LrhPacket::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(LrhRepr::parse(&LrhPacket::new_checked(&buf[..]).unwrap()).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Ok(p) = LrhPacket::new_checked(&bytes[..]) {
                let _ = LrhRepr::parse(&p);
            }
        }
    }
}
