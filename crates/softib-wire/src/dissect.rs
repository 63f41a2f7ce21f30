//! One captured frame to what a decoder shows: its encapsulation (RoCEv2 over IPv4/IPv6, or
//! native InfiniBand), the transport packet, and the CRC verdicts.
//!
//! This is the library half of `softib decode` (and of any tool that reads softib's pcaps):
//! it never allocates and never panics, whatever the frame holds.

use std::net::IpAddr;

use crate::erf::{self, ErfType};
use crate::native::NativePacket;
use crate::packet::PacketRepr;
use crate::pcap::LinkType;
use crate::roce::{IpRepr, RoceFrame};
use crate::{Error, Result};

/// How the transport packet travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encapsulation<'a> {
    /// RoCEv2: (Ethernet +) IPv4/IPv6 + UDP 4791 (IBA Annex A17).
    RoceV2(RoceFrame<'a>),
    /// Native InfiniBand: LRH (+ GRH) ... ICRC + VCRC (IBA 7.7, 7.8).
    Native(NativePacket<'a>),
}

/// A dissected RoCEv2 or InfiniBand frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dissection<'a> {
    /// The headers below the BTH and the CRCs.
    pub encapsulation: Encapsulation<'a>,
    /// The transport packet (BTH and up). An error here means the frame was well framed
    /// (its CRCs can still be judged) but the transport headers are malformed.
    pub packet: Result<PacketRepr<'a>>,
}

/// Endpoint addresses of a dissected frame, for display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// IP addresses and UDP ports (RoCEv2).
    Ip {
        /// Source address and UDP port.
        src: (IpAddr, u16),
        /// Destination address and UDP port.
        dst: (IpAddr, u16),
    },
    /// Local identifiers (native IB), with GIDs when a GRH is present.
    Lid {
        /// Source LID.
        slid: u16,
        /// Destination LID.
        dlid: u16,
    },
}

/// Dissects one frame of a capture with the given link type. Frames that are not RoCEv2 or
/// IBA transport packets give [`Error::NotInfiniBand`] (decoders skip and count them); any
/// other error means the frame claims to be RoCEv2/IB but its lower headers are malformed.
pub fn dissect(linktype: LinkType, frame: &[u8]) -> Result<Dissection<'_>> {
    let encapsulation = match linktype {
        LinkType::Ethernet => Encapsulation::RoceV2(RoceFrame::parse_ethernet(frame)?),
        LinkType::Raw => Encapsulation::RoceV2(RoceFrame::parse_ip(frame)?),
        LinkType::InfiniBand => Encapsulation::Native(NativePacket::parse(frame)?),
        LinkType::Erf => {
            let record = erf::parse(frame)?;
            match record.ty {
                ErfType::InfiniBand => Encapsulation::Native(NativePacket::parse(record.packet)?),
                ErfType::InfiniBandLink => {
                    return Err(Error::NotInfiniBand("an InfiniBand link packet"))
                }
                ErfType::Other(_) => {
                    return Err(Error::NotInfiniBand("ERF record type is not decoded"))
                }
            }
        }
        LinkType::Other(_) => return Err(Error::NotInfiniBand("link type is not decoded")),
    };
    let transport = match &encapsulation {
        Encapsulation::RoceV2(f) => f.transport,
        Encapsulation::Native(p) => p.transport,
    };
    Ok(Dissection {
        encapsulation,
        packet: PacketRepr::parse(transport),
    })
}

impl Dissection<'_> {
    /// Whether the invariant CRC is correct.
    pub fn icrc_ok(&self) -> bool {
        match &self.encapsulation {
            Encapsulation::RoceV2(f) => f.icrc_ok(),
            Encapsulation::Native(p) => p.icrc_ok(),
        }
    }

    /// Whether the variant CRC is correct; `None` for RoCEv2, which has none.
    pub fn vcrc_ok(&self) -> Option<bool> {
        match &self.encapsulation {
            Encapsulation::RoceV2(_) => None,
            Encapsulation::Native(p) => Some(p.vcrc_ok()),
        }
    }

    /// The addresses to show for this frame.
    pub fn endpoints(&self) -> Endpoints {
        match &self.encapsulation {
            Encapsulation::RoceV2(f) => {
                let (src, dst) = match f.ip {
                    IpRepr::V4(ip) => (IpAddr::V4(ip.src_addr), IpAddr::V4(ip.dst_addr)),
                    IpRepr::V6(ip) => (IpAddr::V6(ip.src_addr), IpAddr::V6(ip.dst_addr)),
                };
                Endpoints::Ip {
                    src: (src, f.udp.src_port),
                    dst: (dst, f.udp.dst_port),
                }
            }
            Encapsulation::Native(p) => Endpoints::Lid {
                slid: p.lrh.slid,
                dlid: p.lrh.dlid,
            },
        }
    }

    /// The ECN codepoint of the IP header (RoCEv2 only; 3 = congestion experienced).
    pub fn ecn(&self) -> Option<u8> {
        match &self.encapsulation {
            Encapsulation::RoceV2(f) => Some(match f.ip {
                IpRepr::V4(ip) => ip.tos & 3,
                IpRepr::V6(ip) => ip.traffic_class & 3,
            }),
            Encapsulation::Native(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::CaptureReader;

    fn capture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/captures")
            .join(name)
    }

    #[test]
    fn bundled_capture_dissects_with_valid_icrc_and_skips_the_rest() {
        let mut reader = CaptureReader::open(capture("rxe-write_bw.pcap")).unwrap();
        let (mut roce, mut skipped) = (0, 0);
        while let Some(record) = reader.next_record() {
            let record = record.unwrap();
            match dissect(record.linktype, &record.data) {
                Ok(d) => {
                    assert!(d.icrc_ok());
                    assert!(d.packet.is_ok());
                    assert_eq!(d.vcrc_ok(), None);
                    roce += 1;
                }
                Err(Error::NotInfiniBand(_)) => skipped += 1,
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        // 100 WRITE_FIRST + 200 WRITE_MIDDLE + 100 WRITE_LAST + 100 ACK (README of the capture).
        assert_eq!(roce, 500);
        assert!(skipped > 0);
    }

    #[test]
    fn a_flipped_payload_bit_is_reported_as_bad_icrc() {
        let mut reader = CaptureReader::open(capture("rxe-write_bw.pcap")).unwrap();
        while let Some(record) = reader.next_record() {
            let mut data = record.unwrap().data;
            if dissect(LinkType::Ethernet, &data).is_ok() {
                let last = data.len() - 5;
                data[last] ^= 0x10;
                let d = dissect(LinkType::Ethernet, &data).unwrap();
                assert!(!d.icrc_ok());
                return;
            }
        }
        panic!("no RoCEv2 frame in the capture");
    }

    #[test]
    fn other_link_types_are_skipped_not_errors() {
        assert!(matches!(
            dissect(LinkType::Other(105), &[0u8; 64]),
            Err(Error::NotInfiniBand(_))
        ));
    }
}
