//! What a consumer gives the CM: configuration, and the parameters of a connect or accept.

use softib_wire::cm::{
    CmPath, TransportService, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};

/// A port GID (RoCEv2: the IPv6 address, or `::ffff:a.b.c.d`).
pub type Gid = [u8; 16];

/// The CM's fixed settings.
#[derive(Debug, Clone)]
pub struct CmConfig {
    /// Our port GID: the local GID of every path we send.
    pub local_gid: Gid,
    /// Our CA (node) GUID, sent in REQ and REP.
    pub local_ca_guid: u64,
    /// Our CA's ACK delay exponent, sent as the REP's target ACK delay (rxe: 15).
    pub target_ack_delay: u8,
    /// Most passive connections between REQ and RTU (and SIDR requests being answered);
    /// further REQs are rejected with "no resources" so a flood never grows state.
    pub max_half_open: usize,
    /// Most connections in any state; `connect` fails and REQs are rejected beyond it.
    pub max_connections: usize,
    /// Most MADs waiting in the send queue; further ones are dropped and counted (the
    /// retry timers recover them).
    pub max_pending_transmits: usize,
    /// Most events waiting for the consumer; further ones are dropped and counted.
    pub max_pending_events: usize,
    /// Seeds communication IDs and transaction IDs, so runs repeat exactly.
    pub seed: u64,
    /// Fixed high bits of every local communication ID and SIDR request ID this CM gives
    /// out: `(bits, value)`. softib-net puts the slot of the process on a shared address
    /// there, so a REP, RTU, REJ, DREQ, DREP, MRA or SIDR_REP (which name the receiver's
    /// ID) reaches the process that owns the connection (docs/design/net.md). `None`: all
    /// 32 bits are scrambled.
    pub comm_id_prefix: Option<(u32, u32)>,
}

impl CmConfig {
    /// Defaults for a device with this GID and GUID.
    pub fn new(local_gid: Gid, local_ca_guid: u64) -> CmConfig {
        CmConfig {
            local_gid,
            local_ca_guid,
            target_ack_delay: 15,
            max_half_open: 1024,
            max_connections: 65536,
            max_pending_transmits: 4096,
            max_pending_events: 65536,
            seed: 0,
            comm_id_prefix: None,
        }
    }
}

/// What the active side asks for in its REQ (IBA 12.6.5, table 106).
#[derive(Debug, Clone)]
pub struct ConnectParams {
    /// Where to send the REQ (the primary path's remote GID).
    pub remote_gid: Gid,
    /// The service (rdma_cm: `(port space << 16) | port`).
    pub service_id: u64,
    /// Our QP.
    pub qpn: u32,
    /// The PSN our QP expects to receive first (its rq_psn): the REQ's Starting PSN is
    /// the PSN the passive side will send with (kernel `ib_send_cm_req`).
    pub starting_psn: u32,
    /// RC or UC.
    pub transport: TransportService,
    /// READ/atomic requests we take as responder.
    pub responder_resources: u8,
    /// READ/atomic requests we keep outstanding.
    pub initiator_depth: u8,
    /// Transport retry count for both QPs.
    pub retry_count: u8,
    /// RNR retry count the peer's QP should use.
    pub rnr_retry_count: u8,
    /// Path MTU, IBA encoding (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// Partition key.
    pub pkey: u16,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// The primary path. Its local and remote GIDs are filled in from the configuration
    /// and `remote_gid` if left zero.
    pub path: CmPath,
    /// How long the peer may take to answer, exponent (rdma_cm: 20).
    pub remote_cm_response_timeout: u8,
    /// How long we take, exponent (rdma_cm: 20).
    pub local_cm_response_timeout: u8,
    /// REQ resends before giving up (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// The path's packet life time exponent (rdma_cm on RoCE: 18), part of every wait.
    pub packet_life_time: u8,
    /// Private data (rdma_cm: its IP header, then the consumer's bytes).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl ConnectParams {
    /// rdma_cm's choices for an RC connection on RoCE (kernel cma.c and cm.c, Linux 6.1,
    /// checked against the rxe capture): response timeouts 20, 15 CM retries, packet life
    /// time 18 (so local ACK timeout 19), permissive LIDs, hop limit 64, P_Key 0xFFFF.
    pub fn rdma_cm_rc(remote_gid: Gid, service_id: u64, qpn: u32, starting_psn: u32) -> Self {
        ConnectParams {
            remote_gid,
            service_id,
            qpn,
            starting_psn,
            transport: TransportService::Rc,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            pkey: 0xffff,
            srq: false,
            path: CmPath {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                hop_limit: 64,
                local_ack_timeout: 19,
                ..CmPath::default()
            },
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 18,
            private_data: [0; REQ_PRIVATE_DATA_LEN],
        }
    }
}

/// What the passive side answers in its REP (IBA 12.6.8, table 110).
#[derive(Debug, Clone)]
pub struct AcceptParams {
    /// Our QP.
    pub qpn: u32,
    /// The PSN our QP expects to receive first (its rq_psn): the requester sends with it.
    /// Our QP sends with the REQ's Starting PSN.
    pub starting_psn: u32,
    /// READ/atomic requests we take as responder (at most the REQ's initiator depth).
    pub responder_resources: u8,
    /// READ/atomic requests we keep outstanding (at most the REQ's responder resources).
    pub initiator_depth: u8,
    /// RNR retry count the requester's QP should use.
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

/// A service ID resolution request (IBA 12.11): which UD QP serves `service_id` at
/// `remote_gid`.
#[derive(Debug, Clone)]
pub struct SidrParams {
    /// Where to ask.
    pub remote_gid: Gid,
    /// The service.
    pub service_id: u64,
    /// The partition.
    pub pkey: u16,
    /// How long the peer may take, exponent (rdma_cm: 20).
    pub timeout: u8,
    /// Resends before giving up.
    pub max_retries: u8,
    /// Private data (rdma_cm: its IP header first).
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}
