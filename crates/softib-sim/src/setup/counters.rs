//! The engines' counters after a run, for the report: per host, per flow QP, and the
//! atomic flows' target counters.

use crate::apps::flow::FlowHost;
use crate::report::summary::{FlowQp, HostTransport};
use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::Fabric;
use softib_fabric::time::PS_PER_US;
use std::collections::BTreeMap;

/// The transport counters of the engines on `hosts` (as attached by [`super::attach_flows`])
/// that `fabric` runs (in a partition, the hosts it owns).
pub fn transport_counters(fabric: &mut Fabric, hosts: &[String]) -> Vec<HostTransport> {
    let owned: Vec<&String> = hosts.iter().filter(|h| fabric.owns(h)).collect();
    owned
        .into_iter()
        .filter_map(|h| {
            let hca = fabric.endpoint_mut::<EngineHca>(h, 1)?;
            let mut t = HostTransport::new(
                h,
                &hca.device().counters(),
                hca.encap_counters().rx_malformed,
            )
            .with_footprint(&hca.device().footprint());
            let e = hca.encap_counters();
            if e.rx_processed > 0 {
                t.rx_wait_mean_us = crate::report::decimals::round(
                    e.rx_wait_ps as f64 / e.rx_processed as f64 / PS_PER_US as f64,
                    3,
                );
            }
            t.rx_backlog_peak = e.rx_backlog_peak;
            Some(t)
        })
        .collect()
}

/// Per flow, the counters of its requester and responder QPs (hosts as attached by
/// [`super::attach_flows`]) on the hosts `fabric` runs (in a partition, the sides it owns;
/// [`FlowQp::absorb`] adds the other partitions').
pub fn flow_qp_counters(fabric: &mut Fabric, hosts: &[String]) -> BTreeMap<u32, FlowQp> {
    let mut out: BTreeMap<u32, FlowQp> = BTreeMap::new();
    let owned: Vec<&String> = hosts.iter().filter(|h| fabric.owns(h)).collect();
    for h in owned {
        let Some(hca) = fabric.endpoint_mut::<EngineHca>(h, 1) else {
            continue;
        };
        let Some(app) = hca.app::<FlowHost>() else {
            continue;
        };
        for (flow, qpn, requester) in app.qps() {
            let Some(c) = hca.device().qp_counters(qpn) else {
                continue;
            };
            let e = out.entry(flow).or_default();
            if requester {
                e.set_requester(c);
            } else {
                e.set_responder(c);
            }
        }
    }
    out
}

/// The 8-byte counter that the atomic flows of table `table` target on `host`, as it is
/// now (the simulator's memory holds it little-endian, as an x86 host would).
pub fn atomic_counter(fabric: &mut Fabric, host: &str, table: usize) -> Option<u64> {
    let hca = fabric.endpoint_mut::<EngineHca>(host, 1)?;
    let app = hca.app::<FlowHost>()?;
    let &(_, lkey, _) = app.counters.iter().find(|c| c.0 == table)?;
    let mut b = [0u8; 8];
    hca.device().memory(lkey)?.read(0, &mut b);
    Some(u64::from_le_bytes(b))
}

/// The memory regions (lkeys) the flows of table `table` share on `host`, in the order they
/// were registered: what a test fills before a run and reads after it (the flows move
/// bytes through them; the report counts them).
pub fn flow_buffers(fabric: &mut Fabric, host: &str, table: usize) -> Vec<u32> {
    fabric
        .endpoint_mut::<EngineHca>(host, 1)
        .and_then(|hca| hca.app::<FlowHost>())
        .map(|app| {
            app.buffers
                .iter()
                .filter(|b| b.0 == table)
                .map(|b| b.1)
                .collect()
        })
        .unwrap_or_default()
}
