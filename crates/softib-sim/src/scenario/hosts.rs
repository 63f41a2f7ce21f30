//! Per-host behaviour of engine HCAs in scenario files: `[[host]]` tables (a receive
//! processing delay: the slow responder) and the `responder_stall` faults of `[[fault]]`.
//!
//! ```toml
//! [[host]]
//! name = "h1"
//! responder_delay_ns = 10000000   # every packet h1 receives reaches its engine 10 ms late
//! responder_jitter_ns = 5000000   # plus 0..=5 ms, uniform, from the scenario's seed
//! responder_service_ns = 2000     # h1 processes one received packet at a time, 2 us each
//! atomic_service_ns = 500         # each atomic request holds h1's atomic unit 500 ns
//!
//! [[fault]]
//! kind = "responder_stall"        # h1 processes nothing it receives from 100 us to 300 us
//! node = "h1"
//! start_us = 100
//! duration_us = 200
//! ```
//!
//! The delay applies to everything the host's transport engine receives (requests, and the
//! ACKs and responses of its own requests) while its HCA keeps taking packets off the link:
//! link credits are unaffected, and a requester whose local ACK timeout is shorter than the
//! delay retransmits although nothing was lost ([`softib_fabric::engine_hca::EngineHca::set_rx_delay`]).

use super::faults::{FaultEntry, FaultKind};
use super::flows::FlowPlan;
use super::source::{ScenarioError, Source};
use serde::Deserialize;
use softib_fabric::engine_hca::{EngineHca, RxTiming};
use softib_fabric::fabric::Fabric;
use softib_fabric::rng::{SeedTree, StreamKind};
use softib_fabric::time::{Picos, PS_PER_NS, PS_PER_US};
use std::collections::BTreeMap;
use toml::Spanned;

/// A `[[host]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostEntry {
    /// The HCA.
    pub name: Spanned<String>,
    /// Fixed delay from a packet's arrival to its processing by the engine, ns.
    pub responder_delay_ns: Option<u64>,
    /// Extra delay drawn uniformly from 0..=jitter per packet, ns.
    pub responder_jitter_ns: Option<u64>,
    /// Time the host spends on each received packet, one at a time, ns: its processing
    /// capacity, which duplicates use up like originals.
    pub responder_service_ns: Option<u64>,
    /// Time the HCA's atomic unit spends on each atomic request, ns; requests are served
    /// one at a time, so a counter hotspot saturates at one per this time.
    pub atomic_service_ns: Option<u64>,
}

/// A host's receive processing model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RxModel {
    /// Shortest delay.
    pub min_ps: Picos,
    /// Longest delay.
    pub max_ps: Picos,
    /// Windows [start, end) in which nothing received is processed.
    pub stalls: Vec<(Picos, Picos)>,
    /// Serial processing costs.
    pub timing: RxTiming,
}

/// The receive models of the hosts that have one, checked (hosts must run `[[flow]]`
/// traffic: the delay is the transport engine's); errors name key and line.
/// `flows` gives the plan of the `[[flow]]` tables; it is asked only when there is a
/// `[[host]]` or a responder stall to check.
pub fn models(
    entries: &[HostEntry],
    faults: &[FaultEntry],
    flows: &dyn Fn() -> Result<Vec<FlowPlan>, ScenarioError>,
    src: &Source,
) -> Result<BTreeMap<String, RxModel>, ScenarioError> {
    let stalls = faults
        .iter()
        .any(|f| f.kind.as_ref().map(|k| *k.get_ref()) == Some(FaultKind::ResponderStall));
    if entries.is_empty() && !stalls {
        return Ok(BTreeMap::new());
    }
    let flows = flows()?;
    let engine_host = |h: &str| flows.iter().any(|f| f.src == h || f.dst == h);
    let mut out: BTreeMap<String, RxModel> = BTreeMap::new();
    let check = |key: &str, name: &Spanned<String>| -> Result<(), ScenarioError> {
        if engine_host(name.get_ref()) {
            Ok(())
        } else {
            Err(src.error_at(
                key,
                name.span(),
                format!(
                    "`{}` runs no [[flow]]: a responder delay or stall applies to a host's transport engine",
                    name.get_ref()
                ),
            ))
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    for (i, h) in entries.iter().enumerate() {
        let key = format!("host[{i}].name");
        check(&key, &h.name)?;
        let m = out.entry(h.name.get_ref().clone()).or_default();
        if !seen.insert(h.name.get_ref().as_str()) {
            return Err(src.error_at(
                &key,
                h.name.span(),
                format!("`{}` has a [[host]] table already", h.name.get_ref()),
            ));
        }
        m.min_ps = h.responder_delay_ns.unwrap_or(0) * PS_PER_NS;
        m.max_ps = m.min_ps + h.responder_jitter_ns.unwrap_or(0) * PS_PER_NS;
        m.timing = RxTiming {
            service: h.responder_service_ns.unwrap_or(0) * PS_PER_NS,
            atomic: h.atomic_service_ns.unwrap_or(0) * PS_PER_NS,
        };
    }
    for (i, f) in faults.iter().enumerate() {
        if f.kind.as_ref().map(|k| *k.get_ref()) != Some(FaultKind::ResponderStall) {
            continue;
        }
        let key = |k: &str| format!("fault[{i}].{k}");
        let (Some(node), Some(start), Some(len)) = (&f.node, &f.start_us, &f.duration_us) else {
            return Err(src.error_at(
                &format!("fault[{i}]"),
                f.kind.as_ref().map_or(0..0, |k| k.span()),
                "a responder_stall needs node, start_us and duration_us".into(),
            ));
        };
        check(&key("node"), node)?;
        let us = |v: &Spanned<f64>, k: &str| -> Result<Picos, ScenarioError> {
            let x = *v.get_ref();
            if x.is_finite() && x >= 0.0 {
                Ok((x * PS_PER_US as f64).round() as Picos)
            } else {
                Err(src.error_at(&key(k), v.span(), "must be >= 0".into()))
            }
        };
        let (s, d) = (us(start, "start_us")?, us(len, "duration_us")?);
        if d == 0 {
            return Err(src.error_at(
                &key("duration_us"),
                len.span(),
                "a stall lasts more than 0 us".into(),
            ));
        }
        out.entry(node.get_ref().clone())
            .or_default()
            .stalls
            .push((s, s + d));
    }
    Ok(out)
}

/// Installs the receive models on the engine HCAs of `fabric` (attached by
/// [`crate::setup::attach_flows`]).
pub fn apply(models: BTreeMap<String, RxModel>, seed: u64, fabric: &mut Fabric) {
    let seeds = SeedTree::new(seed);
    for (host, m) in models {
        let lid = fabric.lid(&host).unwrap_or(0);
        if let Some(hca) = fabric.endpoint_mut::<EngineHca>(&host, 1) {
            hca.set_rx_delay(
                m.min_ps,
                m.max_ps,
                m.stalls,
                m.timing,
                seeds.derive(StreamKind::ResponderDelay, lid as u64),
            );
        }
    }
}
