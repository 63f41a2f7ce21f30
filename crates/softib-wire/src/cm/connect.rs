//! ConnectRequest (REQ, IBA vol. 1 12.6.5, table 106) and ConnectReply (REP, 12.6.8,
//! table 110): the two messages that carry everything a QP needs to reach RTR.

use super::field::{array, check_data, Bits};
use crate::bytes;
use crate::{Error, Result};

/// Private data bytes in a REQ (IBA table 106: 92).
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
/// Private data bytes in a REP (IBA table 110: 196).
pub const REP_PRIVATE_DATA_LEN: usize = 196;

mod req_field {
    use crate::bytes::Field;
    use crate::cm::field::Bits;
    pub const LOCAL_COMM_ID: Field = 0..4;
    pub const SERVICE_ID: Field = 8..16;
    pub const LOCAL_CA_GUID: Field = 16..24;
    pub const LOCAL_QKEY: Field = 28..32;
    pub const LOCAL_QPN: Field = 32..35;
    pub const RESPONDER_RESOURCES: usize = 35;
    pub const LOCAL_EECN: Field = 36..39;
    pub const INITIATOR_DEPTH: usize = 39;
    pub const REMOTE_EECN: Field = 40..43;
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Bits = Bits::new(43, 0, 5);
    pub const TRANSPORT_SERVICE: Bits = Bits::new(43, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(43, 7, 1);
    pub const STARTING_PSN: Field = 44..47;
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Bits = Bits::new(47, 0, 5);
    pub const RETRY_COUNT: Bits = Bits::new(47, 5, 3);
    pub const PKEY: Field = 48..50;
    pub const PATH_MTU: Bits = Bits::new(50, 0, 4);
    pub const RDC_EXISTS: Bits = Bits::new(50, 4, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(50, 5, 3);
    pub const MAX_CM_RETRIES: Bits = Bits::new(51, 0, 4);
    pub const SRQ: Bits = Bits::new(51, 4, 1);
    pub const EXTENDED_TRANSPORT: Bits = Bits::new(51, 5, 3);
    pub const PRIMARY_PATH: usize = 52;
    pub const ALTERNATE_PATH: usize = 96;
    /// SAP supported: bit 5 of the alternate path's last byte (IBA 1.3, table 106).
    pub const SAP_SUPPORTED: Bits = Bits::new(139, 5, 1);
    pub const PRIVATE_DATA: usize = 140;
}

/// Offsets inside one 44-byte path description of a REQ (IBA table 106, primary and
/// alternate path fields).
mod path_field {
    pub const LOCAL_LID: usize = 0;
    pub const REMOTE_LID: usize = 2;
    pub const LOCAL_GID: usize = 4;
    pub const REMOTE_GID: usize = 20;
    /// FlowLabel:20 reserved:6 PacketRate:6, one 32-bit word.
    pub const FLOW_RATE_WORD: usize = 36;
    pub const TRAFFIC_CLASS: usize = 40;
    pub const HOP_LIMIT: usize = 41;
    /// SL:4 SubnetLocal:1 reserved:3.
    pub const SL_BYTE: usize = 42;
    /// LocalAckTimeout:5 reserved:3.
    pub const ACK_TIMEOUT_BYTE: usize = 43;
    pub const LEN: usize = 44;
}

/// The transport service a REQ asks for (IBA table 106, "Transport Service Type", plus the
/// "Extended Transport Type" for XRC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportService {
    /// Reliable Connection (0).
    Rc,
    /// Unreliable Connection (1).
    Uc,
    /// Reliable Datagram (2).
    Rd,
    /// Extended transport: type 3 with the extended type field 1 = XRC (IBA 1.2.1 A14).
    Xrc,
}

/// One path of a REQ: the address vector both ends program into their QPs (IBA table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmPath {
    /// The sender's LID (RoCE: 0xFFFF, the permissive LID, as Linux sends).
    pub local_lid: u16,
    /// The receiver's LID.
    pub remote_lid: u16,
    /// The sender's port GID.
    pub local_gid: [u8; 16],
    /// The receiver's port GID.
    pub remote_gid: [u8; 16],
    /// GRH flow label, 20 bits (Linux RoCEv2: a hash of the rdma_cm ports).
    pub flow_label: u32,
    /// Static rate, 6 bits (IBA table 205 encoding; 0 = port current rate).
    pub packet_rate: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// Service level, 4 bits.
    pub sl: u8,
    /// Both ends are on one subnet (no GRH needed on native IB).
    pub subnet_local: bool,
    /// Local ACK timeout exponent, 5 bits (4.096 us x 2^t, IBA 9.7.6.1.3).
    pub local_ack_timeout: u8,
}

impl CmPath {
    fn parse(d: &[u8], at: usize) -> CmPath {
        use path_field as f;
        let word = bytes::get(d, at + f::FLOW_RATE_WORD..at + f::FLOW_RATE_WORD + 4) as u32;
        CmPath {
            local_lid: bytes::get(d, at + f::LOCAL_LID..at + f::LOCAL_LID + 2) as u16,
            remote_lid: bytes::get(d, at + f::REMOTE_LID..at + f::REMOTE_LID + 2) as u16,
            local_gid: array(d, at + f::LOCAL_GID),
            remote_gid: array(d, at + f::REMOTE_GID),
            flow_label: word >> 12,
            packet_rate: (word & 0x3f) as u8,
            traffic_class: d[at + f::TRAFFIC_CLASS],
            hop_limit: d[at + f::HOP_LIMIT],
            sl: Bits::new(at + f::SL_BYTE, 0, 4).get(d),
            subnet_local: Bits::new(at + f::SL_BYTE, 4, 1).get(d) != 0,
            local_ack_timeout: Bits::new(at + f::ACK_TIMEOUT_BYTE, 0, 5).get(d),
        }
    }

    fn emit(&self, d: &mut [u8], at: usize) {
        use path_field as f;
        bytes::put(
            d,
            at + f::LOCAL_LID..at + f::LOCAL_LID + 2,
            u64::from(self.local_lid),
        );
        bytes::put(
            d,
            at + f::REMOTE_LID..at + f::REMOTE_LID + 2,
            u64::from(self.remote_lid),
        );
        d[at + f::LOCAL_GID..at + f::LOCAL_GID + 16].copy_from_slice(&self.local_gid);
        d[at + f::REMOTE_GID..at + f::REMOTE_GID + 16].copy_from_slice(&self.remote_gid);
        let word = ((self.flow_label & 0xF_FFFF) << 12) | u32::from(self.packet_rate & 0x3f);
        bytes::put(
            d,
            at + f::FLOW_RATE_WORD..at + f::FLOW_RATE_WORD + 4,
            u64::from(word),
        );
        d[at + f::TRAFFIC_CLASS] = self.traffic_class;
        d[at + f::HOP_LIMIT] = self.hop_limit;
        Bits::new(at + f::SL_BYTE, 0, 4).put(d, self.sl);
        Bits::new(at + f::SL_BYTE, 4, 1).put(d, u8::from(self.subnet_local));
        Bits::new(at + f::ACK_TIMEOUT_BYTE, 0, 5).put(d, self.local_ack_timeout);
    }

    /// An unused path: every field zero, as a REQ without an alternate path carries.
    pub fn is_empty(&self) -> bool {
        *self == CmPath::default()
    }
}

const _: () = assert!(path_field::LEN == req_field::ALTERNATE_PATH - req_field::PRIMARY_PATH);

/// ConnectRequest (IBA 12.6.5, table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReq {
    /// The sender's communication ID for this connection.
    pub local_comm_id: u32,
    /// The service the connection is for (rdma_cm: `(port space << 16) | port`).
    pub service_id: u64,
    /// The sender's channel adapter GUID (its node GUID).
    pub local_ca_guid: u64,
    /// The sender's Q_Key (RD only; Linux sends 0 for RC).
    pub local_qkey: u32,
    /// The sender's QP number, 24 bits.
    pub local_qpn: u32,
    /// RDMA READ / atomic requests the sender accepts as responder (its max_dest_rd_atomic).
    pub responder_resources: u8,
    /// The sender's EE context (RD only), 24 bits.
    pub local_eecn: u32,
    /// RDMA READ / atomic requests the sender keeps outstanding (its max_rd_atomic).
    pub initiator_depth: u8,
    /// The receiver's EE context (RD only), 24 bits.
    pub remote_eecn: u32,
    /// How long the receiver may take to answer, exponent (4.096 us x 2^t), 5 bits.
    pub remote_cm_response_timeout: u8,
    /// The transport service.
    pub transport_service: TransportService,
    /// End-to-end flow control (credits in the AETH).
    pub end_to_end_flow_control: bool,
    /// The PSN the sender expects to receive first, i.e. the receiver's first send PSN, 24
    /// bits (Linux: the active side's rq_psn and the passive side's sq_psn; kernel
    /// `ib_send_cm_req`, confirmed by the rxe capture's first SENDs).
    pub starting_psn: u32,
    /// How long the sender takes to answer, exponent, 5 bits.
    pub local_cm_response_timeout: u8,
    /// Transport retry count for the QPs, 3 bits.
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU, the IBA encoding (1 = 256 ... 5 = 4096), 4 bits.
    pub path_mtu: u8,
    /// RD only: an RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count, 3 bits (7 = infinite).
    pub rnr_retry_count: u8,
    /// CM retries the sender will make, 4 bits.
    pub max_cm_retries: u8,
    /// The sender's QP uses an SRQ.
    pub srq: bool,
    /// The primary path.
    pub primary_path: CmPath,
    /// The alternate path (all zero when there is none).
    pub alternate_path: CmPath,
    /// The sender supports symmetric alternate paths (IBA 1.3).
    pub sap_supported: bool,
    /// Consumer private data (rdma_cm: its IP addressing header first, 36 bytes).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl CmReq {
    /// Parses the class data of a REQ MAD.
    pub fn parse(d: &[u8]) -> Result<CmReq> {
        use req_field as f;
        check_data("CM REQ", d)?;
        let transport_service = match (f::TRANSPORT_SERVICE.get(d), f::EXTENDED_TRANSPORT.get(d)) {
            (0, _) => TransportService::Rc,
            (1, _) => TransportService::Uc,
            (2, _) => TransportService::Rd,
            (3, 1) => TransportService::Xrc,
            _ => {
                return Err(Error::Malformed {
                    header: "CM REQ",
                    reason: "reserved transport service type",
                })
            }
        };
        Ok(CmReq {
            local_comm_id: bytes::get(d, f::LOCAL_COMM_ID) as u32,
            service_id: bytes::get(d, f::SERVICE_ID),
            local_ca_guid: bytes::get(d, f::LOCAL_CA_GUID),
            local_qkey: bytes::get(d, f::LOCAL_QKEY) as u32,
            local_qpn: bytes::get(d, f::LOCAL_QPN) as u32,
            responder_resources: d[f::RESPONDER_RESOURCES],
            local_eecn: bytes::get(d, f::LOCAL_EECN) as u32,
            initiator_depth: d[f::INITIATOR_DEPTH],
            remote_eecn: bytes::get(d, f::REMOTE_EECN) as u32,
            remote_cm_response_timeout: f::REMOTE_CM_RESPONSE_TIMEOUT.get(d),
            transport_service,
            end_to_end_flow_control: f::END_TO_END_FLOW_CONTROL.get(d) != 0,
            starting_psn: bytes::get(d, f::STARTING_PSN) as u32,
            local_cm_response_timeout: f::LOCAL_CM_RESPONSE_TIMEOUT.get(d),
            retry_count: f::RETRY_COUNT.get(d),
            pkey: bytes::get(d, f::PKEY) as u16,
            path_mtu: f::PATH_MTU.get(d),
            rdc_exists: f::RDC_EXISTS.get(d) != 0,
            rnr_retry_count: f::RNR_RETRY_COUNT.get(d),
            max_cm_retries: f::MAX_CM_RETRIES.get(d),
            srq: f::SRQ.get(d) != 0,
            primary_path: CmPath::parse(d, f::PRIMARY_PATH),
            alternate_path: CmPath::parse(d, f::ALTERNATE_PATH),
            sap_supported: f::SAP_SUPPORTED.get(d) != 0,
            private_data: array(d, f::PRIVATE_DATA),
        })
    }

    /// Writes the class data (232 bytes) of a REQ.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        use req_field as f;
        crate::bytes::check_emit(d, super::CM_DATA_LEN)?;
        bytes::put(d, f::LOCAL_COMM_ID, u64::from(self.local_comm_id));
        bytes::put(d, 4..8, 0);
        bytes::put(d, f::SERVICE_ID, self.service_id);
        bytes::put(d, f::LOCAL_CA_GUID, self.local_ca_guid);
        bytes::put(d, 24..28, 0);
        bytes::put(d, f::LOCAL_QKEY, u64::from(self.local_qkey));
        bytes::put(d, f::LOCAL_QPN, u64::from(self.local_qpn));
        d[f::RESPONDER_RESOURCES] = self.responder_resources;
        bytes::put(d, f::LOCAL_EECN, u64::from(self.local_eecn));
        d[f::INITIATOR_DEPTH] = self.initiator_depth;
        bytes::put(d, f::REMOTE_EECN, u64::from(self.remote_eecn));
        d[43] = 0;
        f::REMOTE_CM_RESPONSE_TIMEOUT.put(d, self.remote_cm_response_timeout);
        let (ts, ext) = match self.transport_service {
            TransportService::Rc => (0, 0),
            TransportService::Uc => (1, 0),
            TransportService::Rd => (2, 0),
            TransportService::Xrc => (3, 1),
        };
        f::TRANSPORT_SERVICE.put(d, ts);
        f::END_TO_END_FLOW_CONTROL.put(d, u8::from(self.end_to_end_flow_control));
        bytes::put(d, f::STARTING_PSN, u64::from(self.starting_psn));
        d[47] = 0;
        f::LOCAL_CM_RESPONSE_TIMEOUT.put(d, self.local_cm_response_timeout);
        f::RETRY_COUNT.put(d, self.retry_count);
        bytes::put(d, f::PKEY, u64::from(self.pkey));
        d[50] = 0;
        f::PATH_MTU.put(d, self.path_mtu);
        f::RDC_EXISTS.put(d, u8::from(self.rdc_exists));
        f::RNR_RETRY_COUNT.put(d, self.rnr_retry_count);
        d[51] = 0;
        f::MAX_CM_RETRIES.put(d, self.max_cm_retries);
        f::SRQ.put(d, u8::from(self.srq));
        f::EXTENDED_TRANSPORT.put(d, ext);
        d[f::PRIMARY_PATH..f::PRIVATE_DATA].fill(0);
        self.primary_path.emit(d, f::PRIMARY_PATH);
        self.alternate_path.emit(d, f::ALTERNATE_PATH);
        f::SAP_SUPPORTED.put(d, u8::from(self.sap_supported));
        d[f::PRIVATE_DATA..f::PRIVATE_DATA + REQ_PRIVATE_DATA_LEN]
            .copy_from_slice(&self.private_data);
        Ok(())
    }

    /// Bytes of class data a REQ takes.
    pub const fn buffer_len(&self) -> usize {
        super::CM_DATA_LEN
    }
}

mod rep_field {
    use crate::bytes::Field;
    use crate::cm::field::Bits;
    pub const LOCAL_COMM_ID: Field = 0..4;
    pub const REMOTE_COMM_ID: Field = 4..8;
    pub const LOCAL_QKEY: Field = 8..12;
    pub const LOCAL_QPN: Field = 12..15;
    pub const LOCAL_EECN: Field = 16..19;
    pub const STARTING_PSN: Field = 20..23;
    pub const RESPONDER_RESOURCES: usize = 24;
    pub const INITIATOR_DEPTH: usize = 25;
    pub const TARGET_ACK_DELAY: Bits = Bits::new(26, 0, 5);
    pub const FAILOVER_ACCEPTED: Bits = Bits::new(26, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(26, 7, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(27, 0, 3);
    pub const SRQ: Bits = Bits::new(27, 3, 1);
    pub const LOCAL_CA_GUID: Field = 28..36;
    pub const PRIVATE_DATA: usize = 36;
}

/// ConnectReply (IBA 12.6.8, table 110).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRep {
    /// The replier's communication ID.
    pub local_comm_id: u32,
    /// The requester's communication ID (from the REQ).
    pub remote_comm_id: u32,
    /// The replier's Q_Key (RD only).
    pub local_qkey: u32,
    /// The replier's QP number, 24 bits.
    pub local_qpn: u32,
    /// The replier's EE context (RD only), 24 bits.
    pub local_eecn: u32,
    /// The PSN the replier expects to receive first, i.e. the requester's first send PSN,
    /// 24 bits (the passive side's rq_psn, the active side's sq_psn).
    pub starting_psn: u32,
    /// READ/atomic requests the replier accepts as responder (at most the REQ's
    /// initiator depth).
    pub responder_resources: u8,
    /// READ/atomic requests the replier keeps outstanding (at most the REQ's responder
    /// resources).
    pub initiator_depth: u8,
    /// The replier's CA ACK delay exponent, 5 bits.
    pub target_ack_delay: u8,
    /// Failover accepted (0), rejected (1) or unsupported (2), 2 bits (IBA table 110).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count for the requester's QP, 3 bits.
    pub rnr_retry_count: u8,
    /// The replier's QP uses an SRQ.
    pub srq: bool,
    /// The replier's CA GUID.
    pub local_ca_guid: u64,
    /// Consumer private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl CmRep {
    /// Parses the class data of a REP MAD.
    pub fn parse(d: &[u8]) -> Result<CmRep> {
        use rep_field as f;
        check_data("CM REP", d)?;
        Ok(CmRep {
            local_comm_id: bytes::get(d, f::LOCAL_COMM_ID) as u32,
            remote_comm_id: bytes::get(d, f::REMOTE_COMM_ID) as u32,
            local_qkey: bytes::get(d, f::LOCAL_QKEY) as u32,
            local_qpn: bytes::get(d, f::LOCAL_QPN) as u32,
            local_eecn: bytes::get(d, f::LOCAL_EECN) as u32,
            starting_psn: bytes::get(d, f::STARTING_PSN) as u32,
            responder_resources: d[f::RESPONDER_RESOURCES],
            initiator_depth: d[f::INITIATOR_DEPTH],
            target_ack_delay: f::TARGET_ACK_DELAY.get(d),
            failover_accepted: f::FAILOVER_ACCEPTED.get(d),
            end_to_end_flow_control: f::END_TO_END_FLOW_CONTROL.get(d) != 0,
            rnr_retry_count: f::RNR_RETRY_COUNT.get(d),
            srq: f::SRQ.get(d) != 0,
            local_ca_guid: bytes::get(d, f::LOCAL_CA_GUID),
            private_data: array(d, f::PRIVATE_DATA),
        })
    }

    /// Writes the class data (232 bytes) of a REP.
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        use rep_field as f;
        crate::bytes::check_emit(d, super::CM_DATA_LEN)?;
        d[..f::PRIVATE_DATA].fill(0);
        bytes::put(d, f::LOCAL_COMM_ID, u64::from(self.local_comm_id));
        bytes::put(d, f::REMOTE_COMM_ID, u64::from(self.remote_comm_id));
        bytes::put(d, f::LOCAL_QKEY, u64::from(self.local_qkey));
        bytes::put(d, f::LOCAL_QPN, u64::from(self.local_qpn));
        bytes::put(d, f::LOCAL_EECN, u64::from(self.local_eecn));
        bytes::put(d, f::STARTING_PSN, u64::from(self.starting_psn));
        d[f::RESPONDER_RESOURCES] = self.responder_resources;
        d[f::INITIATOR_DEPTH] = self.initiator_depth;
        f::TARGET_ACK_DELAY.put(d, self.target_ack_delay);
        f::FAILOVER_ACCEPTED.put(d, self.failover_accepted);
        f::END_TO_END_FLOW_CONTROL.put(d, u8::from(self.end_to_end_flow_control));
        f::RNR_RETRY_COUNT.put(d, self.rnr_retry_count);
        f::SRQ.put(d, u8::from(self.srq));
        bytes::put(d, f::LOCAL_CA_GUID, self.local_ca_guid);
        d[f::PRIVATE_DATA..f::PRIVATE_DATA + REP_PRIVATE_DATA_LEN]
            .copy_from_slice(&self.private_data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::capture;
    use super::*;
    use crate::mad::MAD_HEADER_LEN;

    fn mapped(ip: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        g
    }

    #[test]
    fn parses_the_kernel_req_field_by_field() {
        let mad = capture::mad(capture::REQ);
        let r = CmReq::parse(&mad[MAD_HEADER_LEN..]).unwrap();
        assert_eq!(r.local_comm_id, 0xa0eb_9a6e);
        assert_eq!(r.service_id, 0x0000_0000_0106_4853); // RDMA_PS_TCP, port 18515
        assert_eq!(r.local_ca_guid, 0x5054_00ff_fe99_0002);
        assert_eq!(r.local_qkey, 0);
        assert_eq!(r.local_qpn, 0x1b);
        assert_eq!((r.responder_resources, r.initiator_depth), (0, 0));
        assert_eq!(r.remote_cm_response_timeout, 20);
        assert_eq!(r.transport_service, TransportService::Rc);
        assert!(!r.end_to_end_flow_control);
        assert_eq!(r.starting_psn, 0xe9_2f1e);
        assert_eq!(r.local_cm_response_timeout, 20);
        assert_eq!(r.retry_count, 7);
        assert_eq!(r.pkey, 0xffff);
        assert_eq!(r.path_mtu, 3);
        assert!(!r.rdc_exists);
        assert_eq!(r.rnr_retry_count, 7);
        assert_eq!(r.max_cm_retries, 15);
        assert!(!r.srq);
        let p = r.primary_path;
        assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
        assert_eq!(p.local_gid, mapped([10, 99, 0, 2]));
        assert_eq!(p.remote_gid, mapped([10, 99, 0, 1]));
        // 45926 * 31 + 18515 (the rdma_cm source and destination ports), 20 bits.
        assert_eq!(p.flow_label, 0x601ad);
        assert_eq!(p.packet_rate, 0);
        assert_eq!((p.traffic_class, p.hop_limit, p.sl), (0, 64, 0));
        assert!(!p.subnet_local);
        assert_eq!(p.local_ack_timeout, 19);
        assert!(r.alternate_path.is_empty());
        assert_eq!(&r.private_data[..4], &[0x00, 0x40, 0xb3, 0x66]);
        let mut out = [0u8; 232];
        r.emit(&mut out).unwrap();
        assert_eq!(out[..], mad[MAD_HEADER_LEN..]);
    }

    #[test]
    fn parses_the_kernel_rep_field_by_field() {
        let mad = capture::mad(capture::REP);
        let r = CmRep::parse(&mad[MAD_HEADER_LEN..]).unwrap();
        assert_eq!(r.local_comm_id, 0xed0b_2b6b);
        assert_eq!(r.remote_comm_id, 0xa0eb_9a6e);
        assert_eq!(r.local_qpn, 0x1a);
        assert_eq!(r.starting_psn, 0x23_43be);
        assert_eq!((r.responder_resources, r.initiator_depth), (0, 0));
        assert_eq!(r.target_ack_delay, 15);
        assert_eq!(r.failover_accepted, 0);
        assert!(!r.end_to_end_flow_control);
        assert_eq!(r.rnr_retry_count, 7);
        assert!(!r.srq);
        assert_eq!(r.local_ca_guid, 0x5054_00ff_fe99_0001);
        let mut out = [0u8; 232];
        r.emit(&mut out).unwrap();
        assert_eq!(out[..], mad[MAD_HEADER_LEN..]);
    }

    #[test]
    fn reserved_transport_types_are_refused() {
        let mut mad = capture::mad(capture::REQ);
        mad[MAD_HEADER_LEN + 43] |= 0b110; // type 3 with extended type 0
        assert!(CmReq::parse(&mad[MAD_HEADER_LEN..]).is_err());
        assert!(CmReq::parse(&mad[MAD_HEADER_LEN..200]).is_err());
    }
}
