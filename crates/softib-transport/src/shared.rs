//! What the `Device` and its QPs share: the per-packet metadata a driver hands in
//! ([`RxMeta`], [`RxGrh`]) and gets out ([`Transmit`], [`PathInfo`]), and [`Shared`], the
//! device state outside the QP table. These live apart from `device.rs` so the QP, RC, UC,
//! UD and CC modules depend on them without depending on the `Device` that drives them
//! (quinn-proto's `shared.rs` plays the same part).

use std::collections::VecDeque;

use crate::config::DeviceConfig;
use crate::counters::DeviceCounters;
use crate::cq::CompletionQueue;
use crate::events::AsyncEvent;
use crate::memory::MrTable;
use crate::qp::recv_queue::RecvWqe;
use crate::srq::SharedRecvQueue;
use crate::verbs::{AhAttr, CqHandle, GlobalRoute, PdHandle, SrqHandle, WorkCompletion};

/// What the driver saw below the BTH of a received packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxMeta {
    /// Source LID (native IB; 0 for RoCE).
    pub slid: u16,
    /// Service level (native IB; for RoCE the driver may derive it from DSCP).
    pub sl: u8,
    /// The GRH (native IB with GRH, or the IP header mapped to GRH fields for RoCEv2).
    pub grh: Option<RxGrh>,
    /// The packet carried an ECN Congestion Experienced mark.
    pub ecn_ce: bool,
}

/// GRH fields of a received packet (IBA 8.3); for RoCEv2 the IP header's equivalents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxGrh {
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

/// Where a transmitted packet goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathInfo {
    /// Destination LID (native IB).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// GRH fields (RoCEv2: destination address, DSCP, flow label).
    pub grh: Option<GlobalRoute>,
}

/// One packet `poll_transmit` wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written to the buffer (BTH through pad, no ICRC).
    pub len: usize,
    /// Sending QP.
    pub src_qpn: u32,
    /// Destination QP (also in the BTH).
    pub dest_qpn: u32,
    /// Where it goes.
    pub path: PathInfo,
    /// May be marked ECT in the IP header (RoCEv2).
    pub ecn_capable: bool,
    /// More packets of the same message follow (a FIRST or MIDDLE packet with payload), so a
    /// driver may hold this one briefly to send it with the next ones (UDP GSO, sendmmsg).
    /// False for everything someone is waiting for: a message's last or only packet, ACKs,
    /// NAKs, read requests, atomics and CNPs, which a driver should flush promptly.
    pub batchable: bool,
    /// Set only by [`crate::Device::poll_transmit_described`]: the payload is this many zero
    /// bytes, not written into the buffer (whatever the buffer held there is still there).
    pub zero_payload: Option<ZeroPayload>,
}

/// A payload of zero bytes that a packet carries by description rather than in its buffer
/// ([`crate::Device::poll_transmit_described`], [`crate::Device::handle_packet_described`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroPayload {
    /// Where the payload starts, in bytes from the BTH (the BTH and extension headers' length).
    pub offset: usize,
    /// Its length in bytes, without pad.
    pub len: usize,
}

/// The zeros a described payload stands for; no packet's payload is longer than the largest
/// MTU (IBA 9.6.2: PMTU at most 4096).
pub(crate) static ZERO_PAYLOAD_BYTES: [u8; 4096] = [0; 4096];

/// Device state the QPs share: everything except the QP table, so a QP can be borrowed
/// mutably next to it.
pub(crate) struct Shared {
    pub config: DeviceConfig,
    pub mrs: MrTable,
    pub cqs: Vec<Option<CompletionQueue>>,
    pub srqs: Vec<Option<SharedRecvQueue>>,
    pub ahs: Vec<Option<(PdHandle, AhAttr)>>,
    pub events: VecDeque<AsyncEvent>,
    pub counters: DeviceCounters,
    pub cc: crate::cc::DeviceCc,
    /// Set for the duration of [`crate::Device::poll_transmit_described`]: producers leave a
    /// payload that reads as zeros out of the buffer and say so in `Transmit::zero_payload`.
    pub describe_zeros: bool,
    /// Buffers of finished WQEs, reused by the next posts (`wqe_pool.rs`).
    pub pools: crate::wqe_pool::WqePools,
}

impl Shared {
    /// Adds a completion to a CQ, raising overflow / notification events.
    pub fn complete(&mut self, cq: CqHandle, wc: WorkCompletion) {
        let Some(Some(q)) = self.cqs.get_mut(cq.0 as usize) else {
            return;
        };
        let out = q.push(wc);
        if out.overflow {
            self.counters.cq_overflows += 1;
            self.events.push_back(AsyncEvent::CqOverflow(cq));
        }
        if out.notify {
            self.events.push_back(AsyncEvent::CqNotify(cq));
        }
    }

    pub fn take_srq_wqe(&mut self, srq: SrqHandle) -> Option<RecvWqe> {
        let s = self.srqs.get_mut(srq.0 as usize)?.as_mut()?;
        let (wqe, fire) = s.take()?;
        if fire {
            self.events.push_back(AsyncEvent::SrqLimitReached(srq));
        }
        Some(wqe)
    }

    pub fn return_srq_wqe(&mut self, srq: SrqHandle, wqe: RecvWqe) {
        if let Some(Some(s)) = self.srqs.get_mut(srq.0 as usize) {
            s.queue.push_front(wqe);
        }
    }
}
