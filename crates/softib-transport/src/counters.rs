//! Per-QP and per-device counters: what the engine counts, by QP and for the device as a
//! whole. Each struct is declared through [`counters!`], which also gives it the list of
//! its counters by name, so a counter added here reaches every table that prints them
//! (`softib counters`, the simulator's reports) without a second list to keep in step.

/// Declares a struct of `u64` counters (optionally led by one `sum` field of another
/// counter struct) and, from the same field list, `named()` (every counter with its field
/// name, in declaration order) and, for a plain struct, `accumulate()`.
macro_rules! counters {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident: u64, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: u64, )*
        }

        impl $name {
            /// Every counter with its field name, in declaration order.
            pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$( (stringify!($field), self.$field) ),*].into_iter()
            }

            /// Adds every counter of `other` to `self`.
            pub fn accumulate(&mut self, other: &$name) {
                $( self.$field += other.$field; )*
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(#[$smeta:meta])* sum $sum:ident: $sum_ty:ty,
            $( $(#[$fmeta:meta])* pub $field:ident: u64, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $(#[$smeta])* pub $sum: $sum_ty,
            $( $(#[$fmeta])* pub $field: u64, )*
        }

        impl $name {
            /// This struct's own counters (not the summed field) with their field names,
            /// in declaration order.
            pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$( (stringify!($field), self.$field) ),*].into_iter()
            }
        }
    };
}

counters! {

/// Counters of one QP. Every field counts events since the QP was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Transport packets handed to the driver.
    pub packets_sent: u64,
    /// Payload bytes in them.
    pub bytes_sent: u64,
    /// Transport packets accepted for this QP.
    pub packets_received: u64,
    /// Payload bytes in them.
    pub bytes_received: u64,
    /// Packets sent again (go-back-N after a timeout or NAK, or re-requested reads).
    pub retransmitted_packets: u64,
    /// Local ACK timer expiries that caused a retry.
    pub local_ack_timeouts: u64,
    /// PSN-sequence NAKs this responder sent.
    pub seq_naks_sent: u64,
    /// PSN-sequence NAKs this requester received.
    pub seq_naks_received: u64,
    /// RNR NAKs this responder sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs this requester received.
    pub rnr_naks_received: u64,
    /// Duplicate requests the responder received (re-ACKed, replayed or answered from saved state).
    pub duplicates_received: u64,
    /// Packets dropped because their PSN was ahead of the expected PSN (or a UC gap).
    pub out_of_sequence_drops: u64,
    /// Remote access errors (NAKs sent as responder, or received as requester).
    pub remote_access_errors: u64,
    /// Invalid request errors (NAKs sent as responder, or received as requester).
    pub invalid_requests: u64,
    /// Remote operational errors (sent or received).
    pub remote_operational_errors: u64,
    /// ACK / response packets the requester ignored (stale, ghost or duplicate).
    pub stale_responses: u64,
    /// Packets received with the FECN bit set.
    pub fecn_received: u64,
    /// Packets received with the BECN bit set.
    pub becn_received: u64,
    /// Packets whose IP header carried ECN Congestion Experienced (RoCEv2, from `RxMeta`).
    pub ecn_ce_received: u64,
    /// Congestion notification packets sent.
    pub cnps_sent: u64,
    /// Congestion notification packets received.
    pub cnps_received: u64,
    /// RC responses this QP sent with BECN set (answering FECN-marked requests).
    pub becns_sent: u64,
    /// Nanoseconds congestion control held this QP's packets back while it had work.
    pub throttled_ns: u64,
    /// Packets dropped because the QP was in a state that does not accept them.
    pub wrong_state_drops: u64,
    /// Packets dropped for a P_Key mismatch.
    pub bad_pkey_drops: u64,
    /// UD packets dropped for a Q_Key mismatch.
    pub bad_qkey_drops: u64,
    /// XRC requests whose XRCETH named no XRC SRQ of the target QP's domain (NAKed).
    pub xrc_bad_srq: u64,
    /// EEC responder: requests for a QP that is not an RD QP (or not ready), NAKed "invalid
    /// RD request" (IBA §9.7.5.2.x).
    pub rd_unknown_qp: u64,
    /// EEC responder: requests for an RD QP of another reliable datagram domain (NAKed).
    pub rd_bad_rdd: u64,
    /// EEC responder: requests whose DETH Q_Key is not the RD QP's (NAKed).
    pub rd_bad_qkey: u64,
    /// EEC responder: requests dropped while waiting for the requester's RESYNC.
    pub rd_awaiting_resync_drops: u64,
    /// EEC requester: RESYNC requests queued (after an error NAK, or `resync_eec`).
    pub resyncs_sent: u64,
    /// EEC responder: RESYNCs that set the expected PSN.
    pub resyncs_applied: u64,
}
}

/// Why the driver dropped a packet before the engine saw it (it reports these through
/// `Device::count_driver_drop` so `softib counters` shows one table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DriverDrop {
    /// ICRC mismatch.
    Icrc,
    /// VCRC mismatch (native IB).
    Vcrc,
    /// A header below the BTH was malformed (IP, UDP, LRH, GRH).
    Format,
}

counters! {
/// Device-wide counters: the sum of all QPs' counters (also of destroyed ones) plus drops
/// that belong to no QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Sum over every QP (live and destroyed).
    sum qp: QpCounters,
    /// Packets whose transport headers did not parse (bad opcode, truncated, bad pad).
    pub malformed_drops: u64,
    /// Packets for a QPN with no QP.
    pub unknown_qp_drops: u64,
    /// RD packets whose RDETH names no EE context of this device (IBA §9.7: dropped).
    pub unknown_eec_drops: u64,
    /// Packets whose P_Key matched no entry of the QP (also counted per QP).
    pub bad_pkey_drops: u64,
    /// UD packets with a wrong Q_Key (also counted per QP).
    pub bad_qkey_drops: u64,
    /// Packets for a QP in a state that does not accept them (also counted per QP).
    pub wrong_state_drops: u64,
    /// Opcodes of a service the destination QP does not run (e.g. UC opcode to an RC QP).
    pub wrong_service_drops: u64,
    /// RC/UC packets whose source is not the QP's peer (another address, or another LID),
    /// or whose destination address is not this device's: a third host's packets, dropped
    /// before they touch the QP (not counted on it).
    pub foreign_source_drops: u64,
    /// ICRC failures reported by the driver.
    pub icrc_drops: u64,
    /// VCRC failures reported by the driver.
    pub vcrc_drops: u64,
    /// Malformed lower headers reported by the driver.
    pub format_drops: u64,
    /// Completions lost to full CQs (each also raised `AsyncEvent::CqOverflow`).
    pub cq_overflows: u64,
}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulate_adds_the_congestion_counters() {
        let one = QpCounters {
            fecn_received: 1,
            becn_received: 1,
            ecn_ce_received: 1,
            cnps_sent: 1,
            cnps_received: 1,
            becns_sent: 1,
            throttled_ns: 1,
            ..QpCounters::default()
        };
        let mut sum = one;
        sum.accumulate(&one);
        assert_eq!(
            sum,
            QpCounters {
                fecn_received: 2,
                becn_received: 2,
                ecn_ce_received: 2,
                cnps_sent: 2,
                cnps_received: 2,
                becns_sent: 2,
                throttled_ns: 2,
                ..QpCounters::default()
            }
        );
    }

    #[test]
    fn named_lists_every_counter_once_by_its_field_name() {
        let c = QpCounters {
            packets_sent: 3,
            resyncs_applied: 5,
            ..QpCounters::default()
        };
        let named: Vec<_> = c.named().collect();
        assert_eq!(named.len(), core::mem::size_of::<QpCounters>() / 8);
        assert_eq!(named[0], ("packets_sent", 3));
        assert_eq!(*named.last().unwrap(), ("resyncs_applied", 5));
        let d = DeviceCounters {
            qp: c,
            cq_overflows: 2,
            ..DeviceCounters::default()
        };
        let own: Vec<_> = d.named().collect();
        assert_eq!(
            own.len(),
            (core::mem::size_of::<DeviceCounters>() - core::mem::size_of::<QpCounters>()) / 8
        );
        assert_eq!(*own.last().unwrap(), ("cq_overflows", 2));
    }
}
