//! Communication Management messages (IBA vol. 1, chapter 12.6): the class data of CM MADs
//! (management class 0x07, class version 2, method Send), as Linux's ib_cm and rdma_cm put
//! them on the wire.
//!
//! Each message is a plain `Repr` over the 232 bytes after the common MAD header
//! ([`crate::mad`]): `parse` reads the class data of a checked MAD, `emit` writes it, and
//! [`CmMessage`] ties them to their attribute IDs (IBA 12.6.1, table 104). Offsets in every
//! `field` module are bytes from the start of the class data, exactly as IBA's tables 106 to
//! 120 count them; a sub-byte field is a [`Bits`] (byte, offset from the byte's most
//! significant bit, width), the way IBA numbers bits.
//!
//! Private data is always carried at its full length (92 bytes in a REQ, 196 in a REP...):
//! the wire has no length field, and the kernel hands consumers the whole field, zero-padded.

mod connect;
mod field;
mod ip_header;
mod messages;

pub use connect::{
    CmPath, CmRep, CmReq, TransportService, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN,
};
pub use field::CM_DATA_LEN;
pub use ip_header::{CmaIpHeader, CMA_IP_HEADER_LEN, CMA_VERSION};
pub use messages::{
    CmDrep, CmDreq, CmMra, CmRej, CmRtu, CmSidrRep, CmSidrReq, MraMessage, RejMessage,
    RejectReason, SidrStatus, DREP_PRIVATE_DATA_LEN, DREQ_PRIVATE_DATA_LEN, MRA_PRIVATE_DATA_LEN,
    REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN, SIDR_REP_INFO_LEN,
    SIDR_REP_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};

use crate::mad::{
    MadHeader, MadPacket, CM_CLASS_VERSION, MAD_BASE_VERSION, MAD_HEADER_LEN, MAD_LEN,
    MGMT_CLASS_CM,
};
use crate::{Error, Result};

/// CM attribute IDs: which message a CM MAD carries (IBA 12.6.1, table 104).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResReq.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResReqResp.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath.
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse.
    pub const APR: u16 = 0x001A;
}

/// One CM message of any kind, as found in a MAD.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum CmMessage {
    /// ConnectRequest (IBA 12.6.5).
    Req(CmReq),
    /// MsgRcptAck (IBA 12.6.6).
    Mra(CmMra),
    /// ConnectReject (IBA 12.6.7).
    Rej(CmRej),
    /// ConnectReply (IBA 12.6.8).
    Rep(CmRep),
    /// ReadyToUse (IBA 12.6.9).
    Rtu(CmRtu),
    /// DisconnectRequest (IBA 12.6.10).
    Dreq(CmDreq),
    /// DisconnectReply (IBA 12.6.11).
    Drep(CmDrep),
    /// ServiceIDResReq (IBA 12.11.1).
    SidrReq(CmSidrReq),
    /// ServiceIDResReqResp (IBA 12.11.2).
    SidrRep(CmSidrRep),
}

impl CmMessage {
    /// The attribute ID that says which message this is.
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Parses a whole CM MAD (256 bytes or more; bytes past 256 are ignored). Refuses other
    /// classes, base versions other than 1, class versions other than 2, methods other than
    /// Send, and attribute IDs this crate does not decode (LAP, APR, ClassPortInfo).
    pub fn parse(mad: &[u8]) -> Result<(MadHeader, CmMessage)> {
        let p = MadPacket::new_checked(mad)?;
        let h = MadHeader::parse(&p);
        if h.base_version != MAD_BASE_VERSION {
            return Err(Error::BadVersion {
                header: "MAD",
                version: h.base_version,
            });
        }
        if h.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::Malformed {
                header: "CM MAD",
                reason: "management class is not CM (0x07)",
            });
        }
        if h.class_version != CM_CLASS_VERSION {
            return Err(Error::BadVersion {
                header: "CM MAD",
                version: h.class_version,
            });
        }
        if h.method != crate::mad::method::SEND {
            return Err(Error::Malformed {
                header: "CM MAD",
                reason: "CM messages use method Send (0x03)",
            });
        }
        let d = p.data();
        let m = match h.attribute_id {
            attr::REQ => CmMessage::Req(CmReq::parse(d)?),
            attr::MRA => CmMessage::Mra(CmMra::parse(d)?),
            attr::REJ => CmMessage::Rej(CmRej::parse(d)?),
            attr::REP => CmMessage::Rep(CmRep::parse(d)?),
            attr::RTU => CmMessage::Rtu(CmRtu::parse(d)?),
            attr::DREQ => CmMessage::Dreq(CmDreq::parse(d)?),
            attr::DREP => CmMessage::Drep(CmDrep::parse(d)?),
            attr::SIDR_REQ => CmMessage::SidrReq(CmSidrReq::parse(d)?),
            attr::SIDR_REP => CmMessage::SidrRep(CmSidrRep::parse(d)?),
            _ => {
                return Err(Error::Malformed {
                    header: "CM MAD",
                    reason: "attribute ID is not a CM message softib decodes",
                })
            }
        };
        Ok((h, m))
    }

    /// Writes the whole 256-byte MAD: a CM Send header with this message's attribute ID and
    /// `transaction_id`, then the class data. Bytes past 256 are left alone.
    pub fn emit(&self, transaction_id: u64, mad: &mut [u8]) -> Result<()> {
        crate::bytes::check_emit(mad, MAD_LEN)?;
        MadHeader::cm_send(self.attribute_id(), transaction_id).emit(mad)?;
        let d = &mut mad[MAD_HEADER_LEN..MAD_LEN];
        d.fill(0);
        match self {
            CmMessage::Req(m) => m.emit(d),
            CmMessage::Mra(m) => m.emit(d),
            CmMessage::Rej(m) => m.emit(d),
            CmMessage::Rep(m) => m.emit(d),
            CmMessage::Rtu(m) => m.emit(d),
            CmMessage::Dreq(m) => m.emit(d),
            CmMessage::Drep(m) => m.emit(d),
            CmMessage::SidrReq(m) => m.emit(d),
            CmMessage::SidrRep(m) => m.emit(d),
        }
    }

    /// The MAD as a fresh 256-byte array.
    pub fn to_mad(&self, transaction_id: u64) -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        // A 256-byte buffer is what emit needs, so this cannot fail.
        let _ = self.emit(transaction_id, &mut mad);
        mad
    }
}

#[cfg(test)]
pub(crate) mod capture {
    //! The CM MADs of testdata/captures/cm/rxe-write_bw_rdmacm-cm.pcap (Linux 6.1 rxe, rdma-core
    //! 44, `ib_write_bw -R`; client 10.99.0.2, server 10.99.0.1), as hex.

    /// Frame 1: the client's REQ.
    pub const REQ: &str = "0107020300000000000000026e9aeba00010000000000000a0eb9a6e000000000000000001064853505400fffe990002000000000000000000001b0000000000000000a0e92f1ea7ffff37f0ffffffff00000000000000000000ffff0a63000200000000000000000000ffff0a630001601ad0000040009800000000000000000000000000000000000000000000000000000000000000000000000000000000000000000040b3660000000000000000000000000a6300020000000000000000000000000a6300010000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
    /// Frame 2: the server's REP.
    pub const REP: &str = "0107020300000000000000026e9aeba00013000000000000ed0b2b6ba0eb9a6e0000000000001a00000000002343be00000078e0505400fffe990001";
    /// Frame 3: the client's RTU.
    pub const RTU: &str = "0107020300000000000000026e9aeba00014000000000000a0eb9a6eed0b2b6b";
    /// Frame 571: the client's DREQ (second connection).
    pub const DREQ: &str =
        "0107020300000000000000026e9aeba10015000000000000a1eb9a6eef0b2b6b00001b00";
    /// Frame 572: the server's DREP.
    pub const DREP: &str = "0107020300000000000000026e9aeba10016000000000000ef0b2b6ba1eb9a6e";

    /// A 256-byte MAD from hex, zero-padded (the captures' MADs end in zeros).
    pub fn mad(hex: &str) -> [u8; 256] {
        let mut out = [0u8; 256];
        for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
            let s = core::str::from_utf8(chunk).unwrap();
            out[i] = u8::from_str_radix(s, 16).unwrap();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_captured_mad_reemits_byte_for_byte() {
        for hex in [
            capture::REQ,
            capture::REP,
            capture::RTU,
            capture::DREQ,
            capture::DREP,
        ] {
            let mad = capture::mad(hex);
            let (h, m) = CmMessage::parse(&mad).unwrap();
            assert_eq!(m.to_mad(h.transaction_id), mad, "{m:?}");
        }
    }

    #[test]
    fn non_cm_and_bad_versions_are_refused() {
        let mut mad = capture::mad(capture::RTU);
        mad[2] = 1;
        assert!(matches!(
            CmMessage::parse(&mad),
            Err(Error::BadVersion { .. })
        ));
        let mut mad = capture::mad(capture::RTU);
        mad[1] = 0x04;
        assert!(CmMessage::parse(&mad).is_err());
        let mut mad = capture::mad(capture::RTU);
        mad[17] = 0x19;
        assert!(CmMessage::parse(&mad).is_err());
        assert!(CmMessage::parse(&mad[..100]).is_err());
    }

    #[test]
    fn no_input_panics() {
        // A cheap stand-in for the fuzzer: every attribute ID with every byte pattern.
        for attr_id in 0x0010u16..=0x001a {
            for fill in [0x00u8, 0xff, 0x5a, 0xa5] {
                let mut mad = [fill; 256];
                mad[..24].copy_from_slice(&MadHeader::cm_send(attr_id, 7).to_bytes());
                if let Ok((h, m)) = CmMessage::parse(&mad) {
                    let again = m.to_mad(h.transaction_id);
                    assert_eq!(CmMessage::parse(&again).unwrap().1, m);
                }
            }
        }
    }
}
