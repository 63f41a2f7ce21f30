//! ERF records (Endace's Extensible Record Format, carried in pcap as `LINKTYPE_ERF`, 197):
//! the encapsulation in which stock Wireshark and tshark 4.0 decode native InfiniBand
//! packets from a file as it is. Their pcap reader maps `LINKTYPE_INFINIBAND` (247) to no
//! dissector, but it hands an ERF record of type INFINIBAND (21) to its `infiniband`
//! dissector, LRH first, and type INFINIBAND_LINK (25) to `infiniband_link`.
//!
//! ```text
//! 0      8      9     10       12       14       16
//! | ts:8 | type | flags | rlen:2 | lctr:2 | wlen:2 | [extension headers] | packet ...
//! ```
//!
//! `ts` is little-endian fixed point: whole seconds in the upper 32 bits, the binary
//! fraction of a second in the lower 32 (a step of 2^-32 s, about 0.23 ns, so simulated
//! picoseconds survive to a quarter of a nanosecond). Every other field is big-endian.
//! `rlen` is the record length, this header included; `wlen` is the packet's length on the
//! wire; bit 7 of `type` says an 8-byte extension header follows, and bit 7 of each
//! extension header's first byte says another does. Flags bit 2 marks a varying-length
//! record, as every capture writes it.

use crate::{Error, Result};

/// Length of the ERF record header without extension headers.
pub const ERF_HEADER_LEN: usize = 16;

/// Length of one ERF extension header.
const EXTENSION_HEADER_LEN: usize = 8;

/// Bit 7 of the type byte (and of an extension header's first byte): another extension
/// header follows.
const MORE_EXTENSIONS: u8 = 0x80;

/// Flags bit 2: the record's length varies (it is not padded to a fixed snap length).
const FLAG_VARYING_LENGTH: u8 = 0x04;

/// The ERF record types softib reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErfType {
    /// `TYPE_INFINIBAND` (21): a native InfiniBand data packet, LRH through VCRC.
    InfiniBand,
    /// `TYPE_INFINIBAND_LINK` (25): an InfiniBand link packet (flow control).
    InfiniBandLink,
    /// Any other record type, by number (extension bit cleared).
    Other(u8),
}

impl ErfType {
    /// The type number (extension bit clear).
    pub fn value(self) -> u8 {
        match self {
            ErfType::InfiniBand => 21,
            ErfType::InfiniBandLink => 25,
            ErfType::Other(v) => v & !MORE_EXTENSIONS,
        }
    }

    /// The type for a number (the extension bit is ignored).
    pub fn from_value(v: u8) -> ErfType {
        match v & !MORE_EXTENSIONS {
            21 => ErfType::InfiniBand,
            25 => ErfType::InfiniBandLink,
            other => ErfType::Other(other),
        }
    }
}

/// Picoseconds in a second.
const PS_PER_SECOND: u64 = 1_000_000_000_000;

/// The ERF timestamp of `ps` picoseconds (since the capture's epoch): whole seconds above,
/// the fraction of a second as a 32-bit binary fraction below, rounded down.
pub fn timestamp_from_picos(ps: u64) -> u64 {
    let seconds = ps / PS_PER_SECOND;
    let rest = ps % PS_PER_SECOND;
    let fraction = ((rest as u128) << 32) / PS_PER_SECOND as u128;
    (seconds << 32) | fraction as u64
}

/// The header of a record of type `ty` holding a packet of `packet_len` bytes captured
/// whole, at ERF timestamp `ts`. `None` if the record would exceed the 16-bit `rlen`.
pub fn header(ts: u64, ty: ErfType, packet_len: usize) -> Option<[u8; ERF_HEADER_LEN]> {
    let rlen = u16::try_from(ERF_HEADER_LEN + packet_len).ok()?;
    let wlen = packet_len as u16;
    let mut h = [0u8; ERF_HEADER_LEN];
    h[0..8].copy_from_slice(&ts.to_le_bytes());
    h[8] = ty.value();
    h[9] = FLAG_VARYING_LENGTH;
    h[10..12].copy_from_slice(&rlen.to_be_bytes());
    // lctr (records lost before this one) stays 0: a full capture counts its own drops.
    h[14..16].copy_from_slice(&wlen.to_be_bytes());
    Some(h)
}

/// One parsed ERF record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErfRecord<'a> {
    /// The ERF timestamp (see [`timestamp_from_picos`]).
    pub timestamp: u64,
    /// The record type.
    pub ty: ErfType,
    /// The packet's length on the wire.
    pub wire_len: u16,
    /// The captured packet bytes (after the header and any extension headers).
    pub packet: &'a [u8],
}

/// Parses the ERF record in `frame` (one pcap frame of link type 197). Never panics.
pub fn parse(frame: &[u8]) -> Result<ErfRecord<'_>> {
    if frame.len() < ERF_HEADER_LEN {
        return Err(Error::Truncated {
            header: "ERF header",
            needed: ERF_HEADER_LEN,
            available: frame.len(),
        });
    }
    let timestamp = u64::from_le_bytes(frame[0..8].try_into().expect("8 bytes"));
    let type_byte = frame[8];
    let rlen = u16::from_be_bytes([frame[10], frame[11]]) as usize;
    let wire_len = u16::from_be_bytes([frame[14], frame[15]]);
    let mut at = ERF_HEADER_LEN;
    let mut more = type_byte & MORE_EXTENSIONS != 0;
    while more {
        let Some(ext) = frame.get(at..at + EXTENSION_HEADER_LEN) else {
            return Err(Error::Truncated {
                header: "ERF extension header",
                needed: at + EXTENSION_HEADER_LEN,
                available: frame.len(),
            });
        };
        more = ext[0] & MORE_EXTENSIONS != 0;
        at += EXTENSION_HEADER_LEN;
    }
    if rlen < at || rlen > frame.len() {
        return Err(Error::BadLength {
            header: "ERF record",
            claimed: rlen,
            available: frame.len(),
        });
    }
    Ok(ErfRecord {
        timestamp,
        ty: ErfType::from_value(type_byte),
        wire_len,
        packet: &frame[at..rlen],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let packet = [0xAB; 30];
        let ts = timestamp_from_picos(1_500_000_000_250);
        let h = header(ts, ErfType::InfiniBand, packet.len()).unwrap();
        let mut frame = h.to_vec();
        frame.extend_from_slice(&packet);
        let r = parse(&frame).unwrap();
        assert_eq!(r.ty, ErfType::InfiniBand);
        assert_eq!(r.wire_len, 30);
        assert_eq!(r.packet, &packet);
        assert_eq!(r.timestamp >> 32, 1, "whole seconds above");
        // 0.5 s + 250 ps as a 32-bit fraction: 2^31 + 250e-12 * 2^32 (1.07, rounded down).
        assert_eq!(r.timestamp & 0xFFFF_FFFF, (1 << 31) + 1);
        assert_eq!(
            &frame[10..12],
            &46u16.to_be_bytes(),
            "rlen counts the header"
        );
    }

    #[test]
    fn extension_headers_are_skipped() {
        let mut frame = header(0, ErfType::InfiniBand, 4).unwrap().to_vec();
        frame[8] |= MORE_EXTENSIONS;
        frame[10..12].copy_from_slice(&((16 + 16 + 4) as u16).to_be_bytes());
        frame.extend_from_slice(&[MORE_EXTENSIONS, 0, 0, 0, 0, 0, 0, 0]);
        frame.extend_from_slice(&[0; 8]);
        frame.extend_from_slice(&[1, 2, 3, 4]);
        let r = parse(&frame).unwrap();
        assert_eq!(r.packet, &[1, 2, 3, 4]);
        assert_eq!(r.ty, ErfType::InfiniBand);
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        assert!(matches!(parse(&[0; 15]), Err(Error::Truncated { .. })));
        let mut frame = header(0, ErfType::InfiniBand, 4).unwrap().to_vec();
        frame.extend_from_slice(&[0; 4]);
        frame[10..12].copy_from_slice(&100u16.to_be_bytes());
        assert!(matches!(parse(&frame), Err(Error::BadLength { .. })));
        frame[10..12].copy_from_slice(&8u16.to_be_bytes());
        assert!(matches!(parse(&frame), Err(Error::BadLength { .. })));
        let mut ext = header(0, ErfType::InfiniBand, 0).unwrap().to_vec();
        ext[8] |= MORE_EXTENSIONS;
        ext.extend_from_slice(&[MORE_EXTENSIONS; 8]);
        assert!(matches!(parse(&ext), Err(Error::Truncated { .. })));
        assert!(header(0, ErfType::InfiniBand, 70_000).is_none());
    }
}
