//! The short CM messages: MRA, REJ, RTU, DREQ, DREP (IBA vol. 1 12.6.6-12.6.11, tables
//! 107, 108, 111, 112, 113) and the service ID resolution pair SIDR_REQ / SIDR_REP (12.11,
//! tables 119, 120).

use super::field::{array, check_data, Bits, CM_DATA_LEN};
use crate::bytes::{self, check_emit};
use crate::Result;

/// Private data bytes in an MRA (table 107).
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
/// Additional rejection information bytes in a REJ (table 108).
pub const REJ_ARI_LEN: usize = 72;
/// Private data bytes in a REJ (table 108).
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// Private data bytes in an RTU (table 111).
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes in a DREQ (table 112).
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
/// Private data bytes in a DREP (table 113).
pub const DREP_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes in a SIDR_REQ (table 119).
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
/// Additional information bytes in a SIDR_REP (table 120).
pub const SIDR_REP_INFO_LEN: usize = 72;
/// Private data bytes in a SIDR_REP (table 120).
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;

const LOCAL_COMM_ID: bytes::Field = 0..4;
const REMOTE_COMM_ID: bytes::Field = 4..8;

fn ids(d: &[u8]) -> (u32, u32) {
    (
        bytes::get(d, LOCAL_COMM_ID) as u32,
        bytes::get(d, REMOTE_COMM_ID) as u32,
    )
}

fn put_ids(d: &mut [u8], local: u32, remote: u32) {
    bytes::put(d, LOCAL_COMM_ID, u64::from(local));
    bytes::put(d, REMOTE_COMM_ID, u64::from(remote));
}

/// Which message an MRA acknowledges (table 107, "Message MRAed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MraMessage {
    /// 0: the REQ.
    Req,
    /// 1: the REP.
    Rep,
    /// 2: a LAP.
    Lap,
    /// 3: reserved (kept so that a parse-emit round trip loses nothing).
    Reserved,
}

/// MsgRcptAck (IBA 12.6.6): "I have your message, my answer will take longer".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmMra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (0 when MRAing a REQ whose ID we just learnt... no:
    /// the REQ's local ID is known, so it is always filled).
    pub remote_comm_id: u32,
    /// The message acknowledged.
    pub message: MraMessage,
    /// How much longer the sender needs, exponent (4.096 us x 2^t), 5 bits.
    pub service_timeout: u8,
    /// Consumer private data.
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

impl CmMra {
    const MESSAGE: Bits = Bits::new(8, 0, 2);
    const SERVICE_TIMEOUT: Bits = Bits::new(9, 0, 5);
    const PRIVATE_DATA: usize = 10;

    /// Parses the class data of an MRA.
    pub fn parse(d: &[u8]) -> Result<CmMra> {
        check_data("CM MRA", d)?;
        let (local_comm_id, remote_comm_id) = ids(d);
        Ok(CmMra {
            local_comm_id,
            remote_comm_id,
            message: match Self::MESSAGE.get(d) {
                0 => MraMessage::Req,
                1 => MraMessage::Rep,
                2 => MraMessage::Lap,
                _ => MraMessage::Reserved,
            },
            service_timeout: Self::SERVICE_TIMEOUT.get(d),
            private_data: array(d, Self::PRIVATE_DATA),
        })
    }

    /// Writes the class data of an MRA.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        check_emit(d, CM_DATA_LEN)?;
        d[..Self::PRIVATE_DATA].fill(0);
        put_ids(d, self.local_comm_id, self.remote_comm_id);
        let m = match self.message {
            MraMessage::Req => 0,
            MraMessage::Rep => 1,
            MraMessage::Lap => 2,
            MraMessage::Reserved => 3,
        };
        Self::MESSAGE.put(d, m);
        Self::SERVICE_TIMEOUT.put(d, self.service_timeout);
        d[Self::PRIVATE_DATA..CM_DATA_LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// Which message a REJ rejects (table 108, "Message REJected").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejMessage {
    /// 0: the REQ.
    Req,
    /// 1: the REP.
    Rep,
    /// 2: no message (e.g. a timeout or a stale connection).
    Other,
    /// 3: reserved.
    Reserved,
}

/// REJ reason codes (IBA 12.6.7.2, table 109).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// 1: no QP available.
    NoQp,
    /// 2: no EEC available.
    NoEec,
    /// 3: no resources available.
    NoResources,
    /// 4: timeout (the sender gave up waiting).
    Timeout,
    /// 5: unsupported request.
    UnsupportedRequest,
    /// 6: invalid communication ID.
    InvalidCommId,
    /// 7: invalid communication instance.
    InvalidCommInstance,
    /// 8: invalid service ID (no listener).
    InvalidServiceId,
    /// 9: invalid transport service type.
    InvalidTransportType,
    /// 10: stale connection.
    StaleConnection,
    /// 26: invalid path MTU.
    InvalidMtu,
    /// 27: insufficient responder resources.
    InsufficientResponderResources,
    /// 28: consumer reject.
    ConsumerReject,
    /// 30: duplicate local communication ID.
    DuplicateLocalCommId,
    /// 31: unsupported class version.
    InvalidClassVersion,
    /// Any other code (11-25, 29, 32, 33: path field rejections, RNR retry, flow labels).
    Other(u16),
}

impl RejectReason {
    /// The code on the wire.
    pub fn code(self) -> u16 {
        match self {
            RejectReason::NoQp => 1,
            RejectReason::NoEec => 2,
            RejectReason::NoResources => 3,
            RejectReason::Timeout => 4,
            RejectReason::UnsupportedRequest => 5,
            RejectReason::InvalidCommId => 6,
            RejectReason::InvalidCommInstance => 7,
            RejectReason::InvalidServiceId => 8,
            RejectReason::InvalidTransportType => 9,
            RejectReason::StaleConnection => 10,
            RejectReason::InvalidMtu => 26,
            RejectReason::InsufficientResponderResources => 27,
            RejectReason::ConsumerReject => 28,
            RejectReason::DuplicateLocalCommId => 30,
            RejectReason::InvalidClassVersion => 31,
            RejectReason::Other(c) => c,
        }
    }

    /// The reason a code names.
    pub fn from_code(code: u16) -> RejectReason {
        match code {
            1 => RejectReason::NoQp,
            2 => RejectReason::NoEec,
            3 => RejectReason::NoResources,
            4 => RejectReason::Timeout,
            5 => RejectReason::UnsupportedRequest,
            6 => RejectReason::InvalidCommId,
            7 => RejectReason::InvalidCommInstance,
            8 => RejectReason::InvalidServiceId,
            9 => RejectReason::InvalidTransportType,
            10 => RejectReason::StaleConnection,
            26 => RejectReason::InvalidMtu,
            27 => RejectReason::InsufficientResponderResources,
            28 => RejectReason::ConsumerReject,
            30 => RejectReason::DuplicateLocalCommId,
            31 => RejectReason::InvalidClassVersion,
            c => RejectReason::Other(c),
        }
    }
}

/// ConnectReject (IBA 12.6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRej {
    /// The sender's communication ID (0 if it never made one, e.g. no listener).
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The message rejected.
    pub message: RejMessage,
    /// Bytes of `ari` that mean something, 7 bits.
    pub ari_length: u8,
    /// Why.
    pub reason: RejectReason,
    /// Additional rejection information (its meaning depends on the reason).
    pub ari: [u8; REJ_ARI_LEN],
    /// Consumer private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl CmRej {
    const MESSAGE: Bits = Bits::new(8, 0, 2);
    const ARI_LENGTH: Bits = Bits::new(9, 0, 7);
    const REASON: bytes::Field = 10..12;
    const ARI: usize = 12;
    const PRIVATE_DATA: usize = 84;

    /// Parses the class data of a REJ.
    pub fn parse(d: &[u8]) -> Result<CmRej> {
        check_data("CM REJ", d)?;
        let (local_comm_id, remote_comm_id) = ids(d);
        Ok(CmRej {
            local_comm_id,
            remote_comm_id,
            message: match Self::MESSAGE.get(d) {
                0 => RejMessage::Req,
                1 => RejMessage::Rep,
                2 => RejMessage::Other,
                _ => RejMessage::Reserved,
            },
            ari_length: Self::ARI_LENGTH.get(d),
            reason: RejectReason::from_code(bytes::get(d, Self::REASON) as u16),
            ari: array(d, Self::ARI),
            private_data: array(d, Self::PRIVATE_DATA),
        })
    }

    /// Writes the class data of a REJ.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        check_emit(d, CM_DATA_LEN)?;
        d[..Self::ARI].fill(0);
        put_ids(d, self.local_comm_id, self.remote_comm_id);
        let m = match self.message {
            RejMessage::Req => 0,
            RejMessage::Rep => 1,
            RejMessage::Other => 2,
            RejMessage::Reserved => 3,
        };
        Self::MESSAGE.put(d, m);
        Self::ARI_LENGTH.put(d, self.ari_length);
        bytes::put(d, Self::REASON, u64::from(self.reason.code()));
        d[Self::ARI..Self::PRIVATE_DATA].copy_from_slice(&self.ari);
        d[Self::PRIVATE_DATA..CM_DATA_LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// Defines a message made of the two communication IDs and private data (RTU, DREP).
macro_rules! id_pair_message {
    ($(#[$doc:meta])* $name:ident, $label:literal, $len:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            /// The sender's communication ID.
            pub local_comm_id: u32,
            /// The receiver's communication ID.
            pub remote_comm_id: u32,
            /// Consumer private data.
            pub private_data: [u8; $len],
        }

        impl $name {
            /// Parses the class data.
            pub fn parse(d: &[u8]) -> Result<$name> {
                check_data($label, d)?;
                let (local_comm_id, remote_comm_id) = ids(d);
                Ok($name {
                    local_comm_id,
                    remote_comm_id,
                    private_data: array(d, 8),
                })
            }

            /// Writes the class data.
            pub fn emit(&self, d: &mut [u8]) -> Result<()> {
                check_emit(d, CM_DATA_LEN)?;
                put_ids(d, self.local_comm_id, self.remote_comm_id);
                d[8..CM_DATA_LEN].copy_from_slice(&self.private_data);
                Ok(())
            }
        }
    };
}

id_pair_message!(
    /// ReadyToUse (IBA 12.6.9): the requester's QP is in RTS; the replier may send.
    CmRtu,
    "CM RTU",
    RTU_PRIVATE_DATA_LEN
);
id_pair_message!(
    /// DisconnectReply (IBA 12.6.11).
    CmDrep,
    "CM DREP",
    DREP_PRIVATE_DATA_LEN
);

/// DisconnectRequest (IBA 12.6.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmDreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QP number (so it can find the QP to move to error), 24 bits.
    pub remote_qpn: u32,
    /// Consumer private data.
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl CmDreq {
    const REMOTE_QPN: bytes::Field = 8..11;
    const PRIVATE_DATA: usize = 12;

    /// Parses the class data of a DREQ.
    pub fn parse(d: &[u8]) -> Result<CmDreq> {
        check_data("CM DREQ", d)?;
        let (local_comm_id, remote_comm_id) = ids(d);
        Ok(CmDreq {
            local_comm_id,
            remote_comm_id,
            remote_qpn: bytes::get(d, Self::REMOTE_QPN) as u32,
            private_data: array(d, Self::PRIVATE_DATA),
        })
    }

    /// Writes the class data of a DREQ.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        check_emit(d, CM_DATA_LEN)?;
        put_ids(d, self.local_comm_id, self.remote_comm_id);
        bytes::put(d, 8..12, u64::from(self.remote_qpn) << 8);
        d[Self::PRIVATE_DATA..CM_DATA_LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// ServiceIDResReq (IBA 12.11.1): asks which UD QP serves a service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmSidrReq {
    /// The requester's ID for this request.
    pub request_id: u32,
    /// The partition the answer must be on.
    pub pkey: u16,
    /// The service asked for.
    pub service_id: u64,
    /// Consumer private data (rdma_cm: its IP addressing header first).
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

impl CmSidrReq {
    const REQUEST_ID: bytes::Field = 0..4;
    const PKEY: bytes::Field = 4..6;
    const SERVICE_ID: bytes::Field = 8..16;
    const PRIVATE_DATA: usize = 16;

    /// Parses the class data of a SIDR_REQ.
    pub fn parse(d: &[u8]) -> Result<CmSidrReq> {
        check_data("CM SIDR_REQ", d)?;
        Ok(CmSidrReq {
            request_id: bytes::get(d, Self::REQUEST_ID) as u32,
            pkey: bytes::get(d, Self::PKEY) as u16,
            service_id: bytes::get(d, Self::SERVICE_ID),
            private_data: array(d, Self::PRIVATE_DATA),
        })
    }

    /// Writes the class data of a SIDR_REQ.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        check_emit(d, CM_DATA_LEN)?;
        d[..Self::PRIVATE_DATA].fill(0);
        bytes::put(d, Self::REQUEST_ID, u64::from(self.request_id));
        bytes::put(d, Self::PKEY, u64::from(self.pkey));
        bytes::put(d, Self::SERVICE_ID, self.service_id);
        d[Self::PRIVATE_DATA..CM_DATA_LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

/// SIDR_REP status (IBA 12.11.2, table 121).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidrStatus {
    /// 0: QPN and Q_Key are valid.
    Valid,
    /// 1: service ID not supported.
    ServiceIdNotSupported,
    /// 2: rejected by the service provider.
    Rejected,
    /// 3: no QP available.
    NoQp,
    /// 4: redirect (ClassPortInfo in the additional information).
    Redirect,
    /// 5: unsupported class version.
    UnsupportedVersion,
    /// Any other value.
    Other(u8),
}

impl SidrStatus {
    /// The code on the wire.
    pub fn code(self) -> u8 {
        match self {
            SidrStatus::Valid => 0,
            SidrStatus::ServiceIdNotSupported => 1,
            SidrStatus::Rejected => 2,
            SidrStatus::NoQp => 3,
            SidrStatus::Redirect => 4,
            SidrStatus::UnsupportedVersion => 5,
            SidrStatus::Other(c) => c,
        }
    }
    /// The status a code names.
    pub fn from_code(c: u8) -> SidrStatus {
        match c {
            0 => SidrStatus::Valid,
            1 => SidrStatus::ServiceIdNotSupported,
            2 => SidrStatus::Rejected,
            3 => SidrStatus::NoQp,
            4 => SidrStatus::Redirect,
            5 => SidrStatus::UnsupportedVersion,
            c => SidrStatus::Other(c),
        }
    }
}

/// ServiceIDResReqResp (IBA 12.11.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmSidrRep {
    /// The request ID of the SIDR_REQ answered.
    pub request_id: u32,
    /// The answer.
    pub status: SidrStatus,
    /// Bytes of `additional_info` that mean something.
    pub additional_info_length: u8,
    /// The UD QP serving the service, 24 bits.
    pub qpn: u32,
    /// The service ID (echoed).
    pub service_id: u64,
    /// The Q_Key to use.
    pub qkey: u32,
    /// Additional information (e.g. a ClassPortInfo for redirects).
    pub additional_info: [u8; SIDR_REP_INFO_LEN],
    /// Consumer private data.
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

impl CmSidrRep {
    const REQUEST_ID: bytes::Field = 0..4;
    const STATUS: usize = 4;
    const INFO_LENGTH: usize = 5;
    const QPN: bytes::Field = 8..11;
    const SERVICE_ID: bytes::Field = 12..20;
    const QKEY: bytes::Field = 20..24;
    const INFO: usize = 24;
    const PRIVATE_DATA: usize = 96;

    /// Parses the class data of a SIDR_REP.
    pub fn parse(d: &[u8]) -> Result<CmSidrRep> {
        check_data("CM SIDR_REP", d)?;
        Ok(CmSidrRep {
            request_id: bytes::get(d, Self::REQUEST_ID) as u32,
            status: SidrStatus::from_code(d[Self::STATUS]),
            additional_info_length: d[Self::INFO_LENGTH],
            qpn: bytes::get(d, Self::QPN) as u32,
            service_id: bytes::get(d, Self::SERVICE_ID),
            qkey: bytes::get(d, Self::QKEY) as u32,
            additional_info: array(d, Self::INFO),
            private_data: array(d, Self::PRIVATE_DATA),
        })
    }

    /// Writes the class data of a SIDR_REP.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        check_emit(d, CM_DATA_LEN)?;
        d[..Self::INFO].fill(0);
        bytes::put(d, Self::REQUEST_ID, u64::from(self.request_id));
        d[Self::STATUS] = self.status.code();
        d[Self::INFO_LENGTH] = self.additional_info_length;
        bytes::put(d, Self::QPN, u64::from(self.qpn));
        bytes::put(d, Self::SERVICE_ID, self.service_id);
        bytes::put(d, Self::QKEY, u64::from(self.qkey));
        d[Self::INFO..Self::PRIVATE_DATA].copy_from_slice(&self.additional_info);
        d[Self::PRIVATE_DATA..CM_DATA_LEN].copy_from_slice(&self.private_data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::capture;
    use super::*;
    use crate::mad::MAD_HEADER_LEN;

    #[test]
    fn parses_the_kernel_rtu_dreq_drep() {
        let rtu = CmRtu::parse(&capture::mad(capture::RTU)[MAD_HEADER_LEN..]).unwrap();
        assert_eq!(
            (rtu.local_comm_id, rtu.remote_comm_id),
            (0xa0eb_9a6e, 0xed0b_2b6b)
        );
        let dreq = CmDreq::parse(&capture::mad(capture::DREQ)[MAD_HEADER_LEN..]).unwrap();
        assert_eq!(
            (dreq.local_comm_id, dreq.remote_comm_id),
            (0xa1eb_9a6e, 0xef0b_2b6b)
        );
        assert_eq!(dreq.remote_qpn, 0x1b);
        let drep = CmDrep::parse(&capture::mad(capture::DREP)[MAD_HEADER_LEN..]).unwrap();
        assert_eq!(
            (drep.local_comm_id, drep.remote_comm_id),
            (0xef0b_2b6b, 0xa1eb_9a6e)
        );
    }

    #[test]
    fn rej_mra_and_sidr_emit_the_table_layout() {
        let mut d = [0u8; CM_DATA_LEN];
        let mut rej = CmRej {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            message: RejMessage::Req,
            ari_length: 0,
            reason: RejectReason::InvalidServiceId,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        };
        rej.private_data[0] = 0xEE;
        rej.emit(&mut d).unwrap();
        assert_eq!(&d[..12], &[1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x00, 0x00, 0x08]);
        assert_eq!(d[84], 0xEE);
        assert_eq!(CmRej::parse(&d).unwrap(), rej);

        let mra = CmMra {
            local_comm_id: 9,
            remote_comm_id: 10,
            message: MraMessage::Rep,
            service_timeout: 21,
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        };
        mra.emit(&mut d).unwrap();
        assert_eq!(&d[8..10], &[0x40, 21 << 3]);
        assert_eq!(CmMra::parse(&d).unwrap(), mra);

        let rep = CmSidrRep {
            request_id: 0xAABB_CCDD,
            status: SidrStatus::ServiceIdNotSupported,
            additional_info_length: 0,
            qpn: 0x12_3456,
            service_id: 0x0000_0000_0111_1234,
            qkey: 0x0123_4567,
            additional_info: [0; SIDR_REP_INFO_LEN],
            private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
        };
        rep.emit(&mut d).unwrap();
        assert_eq!(
            &d[..12],
            &[0xAA, 0xBB, 0xCC, 0xDD, 1, 0, 0, 0, 0x12, 0x34, 0x56, 0]
        );
        assert_eq!(CmSidrRep::parse(&d).unwrap(), rep);
    }
}
