//! Native InfiniBand packets (IBA vol. 1 chapter 7-8) as the fabric simulator puts them on a
//! link and `LINKTYPE_INFINIBAND` (247) captures hold them:
//!
//! ```text
//! LRH (8) | [GRH (40) when LNH = 3] | BTH .. payload .. pad | ICRC (4, LE) | VCRC (2, LE)
//! ```
//!
//! LRH PktLen counts 4-byte words from the LRH through the ICRC (IBA 7.7.8); GRH PayLen counts
//! bytes after the GRH through the ICRC (IBA 8.3.3). The ICRC follows [`crate::icrc`], the VCRC
//! [`crate::vcrc`] (over LRH through ICRC).

use crate::grh::{GrhPacket, GrhRepr, GRH_LEN, NXT_HDR_IBA};
use crate::icrc::{self, icrc_native, ICRC_LEN};
use crate::lrh::{Lnh, LrhPacket, LrhRepr, LRH_LEN, MAX_PKT_LEN_WORDS};
use crate::vcrc::{vcrc, VCRC_LEN};
use crate::{Error, Result};

/// Bytes [`emit`] writes for a transport packet (BTH through pad) of `transport_len` bytes.
pub fn buffer_len(with_grh: bool, transport_len: usize) -> usize {
    LRH_LEN + if with_grh { GRH_LEN } else { 0 } + transport_len + ICRC_LEN + VCRC_LEN
}

/// Writes a native IB packet: LRH, the GRH if given, the transport packet (BTH through pad),
/// ICRC and VCRC. Returns the bytes written.
///
/// The LRH's LNH and PktLen and the GRH's PayLen are derived from what is emitted (the values
/// in the reprs are ignored), so the length fields always agree with the bytes.
pub fn emit(
    lrh: &LrhRepr,
    grh: Option<&GrhRepr>,
    transport: &[u8],
    buf: &mut [u8],
) -> Result<usize> {
    if transport.len() % 4 != 0 {
        return Err(Error::Malformed {
            header: "transport packet",
            reason: "length is not a multiple of 4 bytes (pad missing)",
        });
    }
    let needed = buffer_len(grh.is_some(), transport.len());
    if buf.len() < needed {
        return Err(Error::BufferTooSmall {
            needed,
            available: buf.len(),
        });
    }
    let words = (needed - VCRC_LEN) / 4;
    if words > usize::from(MAX_PKT_LEN_WORDS) {
        return Err(Error::Malformed {
            header: "LRH",
            reason: "packet longer than PktLen can express (8188 bytes)",
        });
    }
    let lrh = LrhRepr {
        lnh: if grh.is_some() { Lnh::Grh } else { Lnh::Bth },
        pkt_len_words: words as u16,
        ..*lrh
    };
    lrh.emit(&mut LrhPacket::new_unchecked(&mut buf[..LRH_LEN]))?;
    let mut at = LRH_LEN;
    if let Some(g) = grh {
        let g = GrhRepr {
            payload_len: (transport.len() + ICRC_LEN) as u16,
            ..*g
        };
        g.emit(&mut GrhPacket::new_unchecked(&mut buf[at..at + GRH_LEN]))?;
        at += GRH_LEN;
    }
    buf[at..at + transport.len()].copy_from_slice(transport);
    let crc = icrc_of(&buf[..at + transport.len()], grh.is_some());
    at += transport.len();
    buf[at..at + ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
    at += ICRC_LEN;
    let v = vcrc(&buf[..at]);
    buf[at..at + VCRC_LEN].copy_from_slice(&v.to_le_bytes());
    Ok(needed)
}

/// ICRC over `packet` = LRH [GRH] transport (no CRCs). The caller guarantees the headers fit.
fn icrc_of(packet: &[u8], with_grh: bool) -> u32 {
    let mut lrh = [0u8; LRH_LEN];
    lrh.copy_from_slice(&packet[..LRH_LEN]);
    if with_grh {
        let mut grh = [0u8; GRH_LEN];
        grh.copy_from_slice(&packet[LRH_LEN..LRH_LEN + GRH_LEN]);
        icrc_native(&lrh, Some(&grh), &packet[LRH_LEN + GRH_LEN..])
    } else {
        icrc_native(&lrh, None, &packet[LRH_LEN..])
    }
}

/// A parsed native IB packet with its CRC status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativePacket<'a> {
    /// The LRH.
    pub lrh: LrhRepr,
    /// The GRH, when LNH = 3.
    pub grh: Option<GrhRepr>,
    /// The transport packet: BTH through pad.
    pub transport: &'a [u8],
    /// The ICRC carried.
    pub icrc: u32,
    /// The ICRC computed.
    pub computed_icrc: u32,
    /// The VCRC carried.
    pub vcrc: u16,
    /// The VCRC computed.
    pub computed_vcrc: u16,
}

impl<'a> NativePacket<'a> {
    /// Parses a packet (LRH through VCRC) and checks its length fields: LRH PktLen must equal
    /// the bytes from LRH through ICRC, GRH PayLen the bytes after the GRH through the ICRC.
    /// Raw packets (LNH 0/1, no IBA transport) give [`Error::NotInfiniBand`]. CRC mismatches
    /// are reported by [`NativePacket::check`], not here, so a decoder can still show the packet.
    pub fn parse(bytes: &'a [u8]) -> Result<NativePacket<'a>> {
        let lrh = LrhRepr::parse(&LrhPacket::new_checked(bytes)?)?;
        if !lrh.lnh.is_iba() {
            return Err(Error::NotInfiniBand("raw packet (LRH LNH 0 or 1)"));
        }
        let claimed = usize::from(lrh.pkt_len_words) * 4 + VCRC_LEN;
        if claimed != bytes.len() {
            return Err(Error::BadLength {
                header: "LRH",
                claimed,
                available: bytes.len(),
            });
        }
        let mut at = LRH_LEN;
        let grh = if lrh.lnh == Lnh::Grh {
            let g = GrhRepr::parse(&GrhPacket::new_checked(&bytes[at..])?)?;
            if g.next_header != NXT_HDR_IBA {
                return Err(Error::NotInfiniBand(
                    "GRH next header is not the IBA transport (0x1B)",
                ));
            }
            at += GRH_LEN;
            let after = bytes.len() - at - VCRC_LEN;
            if usize::from(g.payload_len) != after {
                return Err(Error::BadLength {
                    header: "GRH",
                    claimed: usize::from(g.payload_len),
                    available: after,
                });
            }
            Some(g)
        } else {
            None
        };
        let min = at + ICRC_LEN + VCRC_LEN;
        if bytes.len() < min {
            return Err(Error::Truncated {
                header: "ICRC",
                needed: min,
                available: bytes.len(),
            });
        }
        let icrc_at = bytes.len() - VCRC_LEN - ICRC_LEN;
        let transport = &bytes[at..icrc_at];
        let i = &bytes[icrc_at..icrc_at + ICRC_LEN];
        let v = &bytes[icrc_at + ICRC_LEN..];
        Ok(NativePacket {
            lrh,
            grh,
            transport,
            icrc: icrc::read_icrc([i[0], i[1], i[2], i[3]]),
            computed_icrc: icrc_of(&bytes[..icrc_at], grh.is_some()),
            vcrc: u16::from_le_bytes([v[0], v[1]]),
            computed_vcrc: vcrc(&bytes[..bytes.len() - VCRC_LEN]),
        })
    }

    /// [`NativePacket::parse`] followed by [`NativePacket::check`].
    pub fn parse_checked(bytes: &'a [u8]) -> Result<NativePacket<'a>> {
        let p = Self::parse(bytes)?;
        p.check()?;
        Ok(p)
    }

    /// Whether the VCRC is correct (always under `cfg(fuzzing)`).
    pub fn vcrc_ok(&self) -> bool {
        self.vcrc == self.computed_vcrc || cfg!(fuzzing)
    }

    /// Whether the ICRC is correct (always under `cfg(fuzzing)`).
    pub fn icrc_ok(&self) -> bool {
        self.icrc == self.computed_icrc || cfg!(fuzzing)
    }

    /// Checks the VCRC (a link error, checked first as a receiving port does), then the ICRC.
    pub fn check(&self) -> Result<()> {
        if !self.vcrc_ok() {
            return Err(Error::VcrcMismatch {
                received: self.vcrc,
                computed: self.computed_vcrc,
            });
        }
        icrc::check(self.icrc, self.computed_icrc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lrh() -> LrhRepr {
        LrhRepr {
            vl: 0,
            lver: 0,
            sl: 0,
            lnh: Lnh::Bth,
            dlid: 2,
            pkt_len_words: 0,
            slid: 1,
        }
    }

    fn grh() -> GrhRepr {
        GrhRepr {
            traffic_class: 0,
            flow_label: 0,
            payload_len: 0,
            next_header: NXT_HDR_IBA,
            hop_limit: 255,
            sgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            dgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        }
    }

    /// An RC SEND_ONLY (opcode 0x04), P_Key 0xFFFF, DestQP 0x12, PSN 5, 4-byte payload.
    const TRANSPORT: [u8; 16] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x05, 1, 2, 3, 4,
    ];

    #[test]
    fn local_packet_layout_and_round_trip() {
        let mut buf = [0u8; 64];
        let n = emit(&lrh(), None, &TRANSPORT, &mut buf).unwrap();
        assert_eq!(n, 8 + 16 + 4 + 2);
        // LRH: VL 0 LVer 0, SL 0 LNH 2, DLID 2, PktLen 7 words, SLID 1.
        assert_eq!(&buf[..8], &[0x00, 0x02, 0x00, 0x02, 0x00, 0x07, 0x00, 0x01]);
        assert_eq!(&buf[8..24], &TRANSPORT);
        let p = NativePacket::parse_checked(&buf[..n]).unwrap();
        assert_eq!(p.transport, &TRANSPORT);
        assert_eq!(p.lrh.pkt_len_words, 7);
        assert!(p.grh.is_none());
    }

    #[test]
    fn global_packet_round_trip() {
        let mut buf = [0u8; 128];
        let n = emit(&lrh(), Some(&grh()), &TRANSPORT, &mut buf).unwrap();
        assert_eq!(n, 8 + 40 + 16 + 4 + 2);
        let p = NativePacket::parse_checked(&buf[..n]).unwrap();
        assert_eq!(p.lrh.lnh, Lnh::Grh);
        assert_eq!(p.grh.unwrap().payload_len, 20);
        assert_eq!(p.transport, &TRANSPORT);
    }

    #[test]
    fn switch_may_change_vl_and_fecn_without_breaking_icrc() {
        let mut buf = [0u8; 64];
        let n = emit(&lrh(), None, &TRANSPORT, &mut buf).unwrap();
        buf[0] = 0x30; // VL 3
        buf[8 + 4] |= 0x80; // FECN
        let v = vcrc(&buf[..n - 2]);
        buf[n - 2..n].copy_from_slice(&v.to_le_bytes());
        NativePacket::parse_checked(&buf[..n]).unwrap();
    }

    #[test]
    fn flipped_bit_fails_vcrc_and_icrc() {
        let mut buf = [0u8; 64];
        let n = emit(&lrh(), None, &TRANSPORT, &mut buf).unwrap();
        buf[20] ^= 0x08;
        assert!(matches!(
            NativePacket::parse_checked(&buf[..n]),
            Err(Error::VcrcMismatch { .. })
        ));
        // With the VCRC recomputed (a corrupting switch), the ICRC still catches it.
        let v = vcrc(&buf[..n - 2]);
        buf[n - 2..n].copy_from_slice(&v.to_le_bytes());
        assert!(matches!(
            NativePacket::parse_checked(&buf[..n]),
            Err(Error::IcrcMismatch { .. })
        ));
    }

    #[test]
    fn length_and_kind_errors() {
        let mut buf = [0u8; 64];
        let n = emit(&lrh(), None, &TRANSPORT, &mut buf).unwrap();
        assert!(matches!(
            NativePacket::parse(&buf[..n + 4]),
            Err(Error::BadLength { header: "LRH", .. })
        ));
        let mut raw = buf;
        raw[1] = 0x00;
        assert!(matches!(
            NativePacket::parse(&raw[..n]),
            Err(Error::NotInfiniBand(_))
        ));
        assert!(emit(&lrh(), None, &TRANSPORT[..15], &mut buf).is_err());
        for len in 0..n {
            assert!(NativePacket::parse_checked(&buf[..len]).is_err());
        }
    }

    proptest! {
        #[test]
        fn emit_parse_identity(vl in 0u8..16, sl in 0u8..16, dlid: u16, slid: u16, global: bool,
                               words in 3usize..64, seed: u8) {
            let transport: Vec<u8> = (0..words * 4).map(|i| (i as u8).wrapping_mul(seed)).collect();
            let l = LrhRepr { vl, lver: 0, sl, lnh: Lnh::Bth, dlid, pkt_len_words: 0, slid };
            let g = grh();
            let mut buf = vec![0u8; buffer_len(global, transport.len())];
            emit(&l, global.then_some(&g), &transport, &mut buf).unwrap();
            let p = NativePacket::parse_checked(&buf).unwrap();
            prop_assert_eq!(p.transport, &transport[..]);
            prop_assert_eq!((p.lrh.vl, p.lrh.sl, p.lrh.dlid, p.lrh.slid), (vl, sl, dlid, slid));
            prop_assert_eq!(p.grh.is_some(), global);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = NativePacket::parse(&bytes);
        }
    }
}
