//! The device's configuration and limits ([`DeviceConfig`]), and the choices it makes:
//! the link layer that carries the packets and the RC resend policy. Plain data the
//! `Device` and every QP read.

use crate::qpn::QpnAllocation;
use crate::verbs::Mtu;

/// What carries the transport packets (decides the layout of the UD GRH area).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// RoCEv2: IP/UDP (softib-net).
    #[default]
    Ethernet,
    /// Native InfiniBand: LRH/GRH (softib-fabric).
    InfiniBand,
}

/// Device configuration and limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Port GID 0 (RoCEv2: the IPv6 or IPv4-mapped address).
    pub gid: [u8; 16],
    /// Port LID (native IB).
    pub lid: u16,
    /// Largest path MTU the port supports.
    pub max_mtu: Mtu,
    /// P_Key table; `pkey_index` indexes it.
    pub pkeys: Vec<u16>,
    /// QPs the device can hold (created over its lifetime; QPNs are not reused).
    pub max_qp: u32,
    /// CQs.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Memory windows (`max_mw`).
    pub max_mw: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// Shared receive queues.
    pub max_srq: u32,
    /// Address handles.
    pub max_ah: u32,
    /// WRs per queue.
    pub max_qp_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
    /// Upper bound for max_rd_atomic / max_dest_rd_atomic.
    pub max_qp_rd_atom: u8,
    /// RC send window: PSNs a requester may have unacknowledged.
    pub max_unacked_psns: u32,
    /// The requester sets AckReq at least every this many packets within a long message.
    pub ack_req_interval: u32,
    /// RoCEv2 or native IB.
    pub link_layer: LinkLayer,
    /// Congestion control: source algorithm (none, IBA CCA, DCQCN), destination
    /// notification, link rate (docs/design/engine.md, "Congestion control").
    pub cc: crate::cc::CcConfig,
    /// How an RC requester resends after a gap or a local ACK timeout
    /// (docs/design/engine.md, "RC recovery").
    pub resend: ResendPolicy,
    /// How QPs are numbered: sequential for the simulator, scrambled on real networks so a
    /// third host cannot guess a live QPN (qpn.rs).
    pub qpn_allocation: QpnAllocation,
    /// Fixed high bits of every QPN (qpn.rs): softib-net puts the slot of the process on a
    /// shared address there. `None`: all 22 bits are the allocation's.
    pub qpn_prefix: Option<crate::qpn::QpnPrefix>,
}

/// How an RC requester resends once it must go back (IBA 9.7.5.1.3 and 9.7.6.1.3 say from
/// which PSN, not how fast: that is the implementation's choice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResendPolicy {
    /// softib's recovery for lossy, reordering networks (RoCEv2 over UDP): a gap signal
    /// the current resend already repairs is set aside, resend passes grow from a small
    /// burst like TCP slow start, and a stalled pass resends without waiting for the ACK
    /// timer (rc/recovery.rs).
    #[default]
    Paced,
    /// What HCAs on a lossless fabric do: every sequence NAK and every local ACK timeout
    /// resends the whole outstanding window from the PSN named, at once. The fabric
    /// simulator uses it, so its field cases (e.g. a retransmission storm after a too-short
    /// local ACK timeout) show what hardware shows.
    WholeWindow,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            gid: [0; 16],
            lid: 1,
            max_mtu: Mtu::M4096,
            pkeys: vec![0xFFFF],
            max_qp: 1 << 16,
            max_cq: 1 << 16,
            max_cqe: 1 << 20,
            max_mr: 1 << 20,
            max_mw: 1 << 16,
            max_pd: 1 << 16,
            max_srq: 1 << 12,
            max_ah: 1 << 16,
            max_qp_wr: 1 << 14,
            max_sge: 32,
            max_inline_data: 1024,
            max_qp_rd_atom: 16,
            max_unacked_psns: 256,
            ack_req_interval: 64,
            link_layer: LinkLayer::Ethernet,
            cc: crate::cc::CcConfig::default(),
            resend: ResendPolicy::Paced,
            qpn_allocation: QpnAllocation::Sequential,
            qpn_prefix: None,
        }
    }
}
