//! The common MAD header (IBA vol. 1, 13.4.2): the first 24 bytes of every 256-byte
//! management datagram a GSI or SMI exchanges.
//!
//! ```text
//!  byte 0    BaseVersion (1)
//!  byte 1    MgmtClass   (0x07 = Communication Management)
//!  byte 2    ClassVersion (CM: 2)
//!  byte 3    R:1 Method:7 (R = response bit)
//!  4..6      Status
//!  6..8      ClassSpecific
//!  8..16     TransactionID
//!  16..18    AttributeID
//!  18..20    reserved
//!  20..24    AttributeModifier
//!  24..256   class data
//! ```

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// A MAD is always 256 bytes (IBA 13.4.1); GSI datagrams carry exactly one.
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// The only base version defined (IBA 13.4.2).
pub const MAD_BASE_VERSION: u8 = 1;
/// The management class of the Communication Manager (IBA 13.4.4, table 132).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version IBA 1.2 onwards and Linux use (IBA 12.6.1).
pub const CM_CLASS_VERSION: u8 = 2;
/// The Q_Key every GSI (QP1) uses (IBA 13.5.2: 0x80010000, a controlled Q_Key).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The queue pair of the General Services Interface (IBA 13.5.1).
pub const GSI_QPN: u32 = 1;

/// MAD methods (IBA 13.4.5, table 133). The response bit (0x80) is part of the value.
pub mod method {
    /// Get: read an attribute.
    pub const GET: u8 = 0x01;
    /// Set: write an attribute.
    pub const SET: u8 = 0x02;
    /// Send: a datagram that needs no response MAD (all CM messages use it).
    pub const SEND: u8 = 0x03;
    /// Trap.
    pub const TRAP: u8 = 0x05;
    /// GetResp: the answer to Get or Set.
    pub const GET_RESP: u8 = 0x81;
    /// The response bit of the method byte.
    pub const RESPONSE: u8 = 0x80;
}

/// MAD status bits (IBA 13.4.7, table 134).
pub mod status {
    /// Bad base or class version.
    pub const BAD_VERSION: u16 = 0x0004;
    /// Method not supported.
    pub const UNSUPPORTED_METHOD: u16 = 0x0008;
    /// Method/attribute combination not supported.
    pub const UNSUPPORTED_METHOD_ATTRIBUTE: u16 = 0x000C;
    /// One or more attribute fields invalid.
    pub const INVALID_FIELD: u16 = 0x001C;
}

mod field {
    use crate::bytes::Field;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: Field = 4..6;
    pub const CLASS_SPECIFIC: Field = 6..8;
    pub const TID: Field = 8..16;
    pub const ATTR_ID: Field = 16..18;
    pub const RESERVED: Field = 18..20;
    pub const ATTR_MOD: Field = 20..24;
}

/// A zero-copy view of a MAD (header and class data).
#[derive(Debug, Clone)]
pub struct MadPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MadPacket<T> {
    /// Wraps a buffer without checking it; accessors may panic on fewer than
    /// [`MAD_HEADER_LEN`] bytes. Use [`MadPacket::new_checked`] for untrusted bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        MadPacket { buffer }
    }

    /// Wraps a buffer after checking it holds a whole 256-byte MAD; no accessor panics
    /// afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        check("MAD", p.buffer.as_ref(), MAD_LEN)?;
        Ok(p)
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// BaseVersion (IBA 13.4.2): 1.
    pub fn base_version(&self) -> u8 {
        self.b()[field::BASE_VERSION]
    }
    /// MgmtClass: which class agent the MAD is for (IBA 13.4.4).
    pub fn mgmt_class(&self) -> u8 {
        self.b()[field::MGMT_CLASS]
    }
    /// ClassVersion: the version of the class's MAD format.
    pub fn class_version(&self) -> u8 {
        self.b()[field::CLASS_VERSION]
    }
    /// Method, including the response bit (IBA 13.4.5).
    pub fn method(&self) -> u8 {
        self.b()[field::METHOD]
    }
    /// Status (IBA 13.4.7); 0 in requests.
    pub fn status(&self) -> u16 {
        bytes::get(self.b(), field::STATUS) as u16
    }
    /// ClassSpecific.
    pub fn class_specific(&self) -> u16 {
        bytes::get(self.b(), field::CLASS_SPECIFIC) as u16
    }
    /// TransactionID: chosen by the requester, echoed in responses (IBA 13.4.6.4).
    pub fn transaction_id(&self) -> u64 {
        bytes::get(self.b(), field::TID)
    }
    /// AttributeID: for CM, which message this is (IBA 12.6.1, table 104).
    pub fn attribute_id(&self) -> u16 {
        bytes::get(self.b(), field::ATTR_ID) as u16
    }
    /// AttributeModifier.
    pub fn attribute_modifier(&self) -> u32 {
        bytes::get(self.b(), field::ATTR_MOD) as u32
    }
    /// The 232 bytes of class data after the header.
    pub fn data(&self) -> &[u8] {
        &self.b()[MAD_HEADER_LEN..MAD_LEN]
    }
}

/// The common MAD header as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MadHeader {
    /// BaseVersion.
    pub base_version: u8,
    /// MgmtClass.
    pub mgmt_class: u8,
    /// ClassVersion.
    pub class_version: u8,
    /// Method (with the response bit).
    pub method: u8,
    /// Status.
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID.
    pub transaction_id: u64,
    /// AttributeID.
    pub attribute_id: u16,
    /// AttributeModifier.
    pub attribute_modifier: u32,
}

impl MadHeader {
    /// A CM Send header (IBA 12.6.1: every CM message is a Send with class version 2).
    pub const fn cm_send(attribute_id: u16, transaction_id: u64) -> MadHeader {
        MadHeader {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    /// Reads the header of a MAD (at least 256 bytes). The base version is not judged
    /// here: a GSI answers a bad version with a status, which needs the header.
    pub fn parse<T: AsRef<[u8]>>(p: &MadPacket<T>) -> MadHeader {
        MadHeader {
            base_version: p.base_version(),
            mgmt_class: p.mgmt_class(),
            class_version: p.class_version(),
            method: p.method(),
            status: p.status(),
            class_specific: p.class_specific(),
            transaction_id: p.transaction_id(),
            attribute_id: p.attribute_id(),
            attribute_modifier: p.attribute_modifier(),
        }
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        MAD_HEADER_LEN
    }

    /// The header as 24 bytes.
    pub fn to_bytes(&self) -> [u8; MAD_HEADER_LEN] {
        let mut out = [0u8; MAD_HEADER_LEN];
        // 24 bytes is exactly what emit needs.
        let _ = self.emit(&mut out);
        out
    }

    /// Writes the header (reserved bytes zero) into the first 24 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        check_emit(buf, MAD_HEADER_LEN)?;
        buf[field::BASE_VERSION] = self.base_version;
        buf[field::MGMT_CLASS] = self.mgmt_class;
        buf[field::CLASS_VERSION] = self.class_version;
        buf[field::METHOD] = self.method;
        bytes::put(buf, field::STATUS, u64::from(self.status));
        bytes::put(buf, field::CLASS_SPECIFIC, u64::from(self.class_specific));
        bytes::put(buf, field::TID, self.transaction_id);
        bytes::put(buf, field::ATTR_ID, u64::from(self.attribute_id));
        bytes::put(buf, field::RESERVED, 0);
        bytes::put(buf, field::ATTR_MOD, u64::from(self.attribute_modifier));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header of the REQ in testdata/captures/cm/rxe-write_bw_rdmacm-cm.pcap (frame 1).
    const REQ_HEADER: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x6e, 0x9a, 0xeb,
        0xa0, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parses_and_emits_the_kernel_req_header() {
        let mut mad = [0u8; MAD_LEN];
        mad[..24].copy_from_slice(&REQ_HEADER);
        let h = MadHeader::parse(&MadPacket::new_checked(&mad[..]).unwrap());
        assert_eq!(h, MadHeader::cm_send(0x0010, 0x0000_0002_6e9a_eba0));
        let mut out = [0xAAu8; 24];
        h.emit(&mut out).unwrap();
        assert_eq!(out, REQ_HEADER);
    }

    #[test]
    fn short_mads_are_refused() {
        assert!(MadPacket::new_checked(&[0u8; 255][..]).is_err());
        assert!(MadHeader::cm_send(1, 1).emit(&mut [0u8; 23]).is_err());
    }
}
