//! A serialisable snapshot of a device's counters: the engine's device-wide and per-QP
//! counters and the driver's, by name, so tools can publish them (`softib counters`) and
//! compare runs. Names are the Rust field names; a counter added to the engine appears here
//! by itself (`QpCounters::named`), one added to the driver once it is listed below.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use softib_transport::cc::CcStatus;
use softib_transport::{DeviceCounters, QpCounters};

use crate::driver::DriverCounters;

/// Counters by name.
pub type CounterMap = BTreeMap<String, u64>;

/// The counters of one device at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// Engine counters summed over all QPs, plus drops that belong to no QP.
    pub device: CounterMap,
    /// Driver counters (socket, receive checks, fault injection).
    pub driver: CounterMap,
    /// Per-QP engine counters, by QP number.
    pub qps: BTreeMap<u32, CounterMap>,
}

macro_rules! put {
    ($map:expr, $prefix:expr, $src:expr, $($f:ident),* $(,)?) => {
        $( $map.insert(format!("{}{}", $prefix, stringify!($f)), $src.$f as u64); )*
    };
}

/// The per-QP counters by name.
pub fn qp_map(c: &QpCounters) -> CounterMap {
    c.named().map(|(name, v)| (name.to_string(), v)).collect()
}

/// The device-wide engine counters by name: the QP sums, then the device's own drop
/// counters (where a name is in both, the device's value wins: it also counts packets that
/// reached no QP).
pub fn device_map(c: &DeviceCounters) -> CounterMap {
    let mut m = qp_map(&c.qp);
    m.extend(c.named().map(|(name, v)| (name.to_string(), v)));
    m
}

/// A QP's congestion state by name: gauges, not counters (a diff shows their change).
/// `cc_rate_mbps` is the DCQCN current rate (present once a CNP created the QP's rate
/// limiter; the line rate once it recovered), `cc_alpha_ppm` DCQCN's alpha in millionths,
/// `cc_ccti` the IBA CCA index that paces the QP, `cc_paced` 1 while its pacing gate is
/// closed.
pub fn cc_map(s: &CcStatus, now: softib_transport::Nanos) -> CounterMap {
    let mut m = CounterMap::new();
    if let Some(r) = s.rate_bps {
        m.insert("cc_rate_mbps".into(), r / 1_000_000);
    }
    if let Some(a) = s.alpha {
        m.insert(
            "cc_alpha_ppm".into(),
            u64::from(a) * 1_000_000 / u64::from(softib_transport::cc::dcqcn::ALPHA_ONE),
        );
    }
    if let Some(c) = s.ccti {
        m.insert("cc_ccti".into(), u64::from(c));
    }
    m.insert(
        "cc_paced".into(),
        u64::from(s.paced_until.is_some_and(|t| t > now)),
    );
    m
}

/// The driver counters by name (booleans as 0/1).
pub fn driver_map(c: &DriverCounters) -> CounterMap {
    let mut m = CounterMap::new();
    put!(
        m,
        "",
        c,
        tx_datagrams,
        tx_bytes,
        rx_datagrams,
        rx_oversize,
        rx_bytes,
        tx_unroutable,
        pcap_errors,
        acks_behind_data,
        rx_answered_in_parts,
        qps_failed_msgsize,
        cc_link_rate_mbps,
        cc_wire_overhead,
    );
    put!(
        m,
        "rx_",
        c.rx,
        accepted,
        icrc_errors,
        runts,
        wrong_family,
        ipv4_ident_recovered,
        ecn_ce,
    );
    put!(
        m,
        "socket_",
        c.socket,
        gso,
        gro,
        gso_disabled_at_runtime,
        rx_truncated,
        rx_bad_source,
        tx_refused,
    );
    put!(m, "inject_", c.faults, offered, dropped, duplicated, reordered, corrupted,);
    m
}

impl CounterSnapshot {
    /// Builds a snapshot from the engine's and the driver's counters and the live QPs'.
    pub fn new<'a>(
        device: &DeviceCounters,
        driver: &DriverCounters,
        qps: impl IntoIterator<Item = (u32, &'a QpCounters)>,
    ) -> CounterSnapshot {
        CounterSnapshot {
            device: device_map(device),
            driver: driver_map(driver),
            qps: qps.into_iter().map(|(n, c)| (n, qp_map(c))).collect(),
        }
    }

    /// Adds each QP's congestion state ([`cc_map`]) at `now` to its counters.
    pub fn with_cc_status(
        mut self,
        now: softib_transport::Nanos,
        status: impl IntoIterator<Item = (u32, CcStatus)>,
    ) -> CounterSnapshot {
        for (qpn, s) in status {
            if let Some(m) = self.qps.get_mut(&qpn) {
                m.extend(cc_map(&s, now));
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_every_counter_and_round_trips_through_json() {
        let qp = QpCounters {
            retransmitted_packets: 3,
            ..QpCounters::default()
        };
        let dev = DeviceCounters {
            qp,
            icrc_drops: 2,
            ..DeviceCounters::default()
        };
        let drv = DriverCounters {
            socket: crate::socket::SocketStats {
                gso: true,
                ..Default::default()
            },
            faults: crate::inject::FaultCounters {
                dropped: 5,
                ..Default::default()
            },
            ..DriverCounters::default()
        };
        let s = CounterSnapshot::new(&dev, &drv, [(0x11, &qp)]);
        assert_eq!(s.device["retransmitted_packets"], 3);
        assert_eq!(s.device["icrc_drops"], 2);
        assert_eq!(s.driver["socket_gso"], 1);
        assert_eq!(s.driver["inject_dropped"], 5);
        assert_eq!(s.qps[&0x11]["retransmitted_packets"], 3);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<CounterSnapshot>(&json).unwrap(), s);
    }

    #[test]
    fn congestion_counters_and_state_are_in_the_snapshot() {
        let qp = QpCounters {
            ecn_ce_received: 4,
            cnps_sent: 3,
            cnps_received: 2,
            throttled_ns: 1_500,
            ..QpCounters::default()
        };
        let dev = DeviceCounters {
            qp,
            ..DeviceCounters::default()
        };
        let drv = DriverCounters {
            cc_link_rate_mbps: 10_000,
            cc_wire_overhead: 70,
            ..DriverCounters::default()
        };
        let status = CcStatus {
            rate_bps: Some(2_500_000_000),
            alpha: Some(1 << 19),
            paced_until: Some(200),
            ..CcStatus::default()
        };
        let s = CounterSnapshot::new(&dev, &drv, [(0x11, &qp), (0x12, &qp)])
            .with_cc_status(100, [(0x11, status), (0x99, status)]);
        assert_eq!(s.device["cnps_sent"], 3);
        assert_eq!(s.device["throttled_ns"], 1_500);
        assert_eq!(s.qps[&0x11]["ecn_ce_received"], 4);
        assert_eq!(s.qps[&0x11]["cc_rate_mbps"], 2_500);
        assert_eq!(s.qps[&0x11]["cc_alpha_ppm"], 500_000);
        assert_eq!(s.qps[&0x11]["cc_paced"], 1);
        assert!(!s.qps[&0x11].contains_key("cc_ccti"));
        assert!(!s.qps[&0x12].contains_key("cc_rate_mbps"));
        assert!(!s.qps.contains_key(&0x99));
        assert_eq!(s.driver["cc_link_rate_mbps"], 10_000);
        assert_eq!(s.driver["cc_wire_overhead"], 70);
    }
}
