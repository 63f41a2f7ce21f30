//! Raw packet streams: a packet generator at the HCAs, for loading the link layer without a
//! transport engine (scenario `[[stream]]` tables).
//!
//! A stream sends UD SEND-only packets (LRH, BTH, DETH, payload; ICRC and VCRC are the
//! fabric's) as fast as its HCA port's send queue takes them, from a start time, for a
//! number of packets or until the end of the run. There are no QPs behind them: nothing is
//! acknowledged or retransmitted, so what a stream measures is the fabric alone (credits,
//! arbitration, switching). Transport-level traffic (RC WRITE bandwidth and the like) is the
//! transport engine's, run by the HCA adapter.
//!
//! ```toml
//! [[stream]]
//! pattern = "incast"        # one-to-one, incast, all-to-all, permutation
//! dst = "h0"                # one-to-one, incast
//! srcs = ["h1", "h2"]       # incast (default: every other host); one-to-one: src = "h1"
//! payload_bytes = 4096      # 0..=4096
//! packets = 1000            # per source; default: until the end of the run
//! start_us = 0
//! sl = 0
//! interval_ns = 1000        # one packet per source every 1 us (default: as fast as it goes)
//! kind = "data"             # or "management": SMP-sized packets on VL15 (below)
//! ```
//!
//! A `management` stream sends subnet-management packets: 256-byte MADs to QP0 on VL15
//! (LRH, BTH, DETH, MAD: 290 bytes on the wire), which are not flow-controlled, win every
//! VL arbitration (IBA 7.6.9) and are dropped by a full VL15 buffer (VL15Dropped). With
//! `interval_ns` they model an SM's sweep or a management tool polling at a rate, whose
//! delivered rate and latency under data load the report gives per flow. `sl` has no
//! meaning for them (VL15 is not reached through SL2VL) and is refused.
//!
//! Patterns are those of [`super::pattern`]. Every source of every stream is one flow in
//! the report. The generator that sends them is [`crate::apps::stream::Generator`].

use super::pattern::{host_names, resolve_pattern, sl_key, start_key, Pattern, PatternKeys};
use super::source::{ScenarioError, Source};
use crate::report::flows::FlowInfo;
use serde::Deserialize;
use softib_fabric::time::{Picos, PS_PER_NS};
use softib_fabric::topology::Topology;
use toml::Spanned;

/// Largest payload: the IBA's largest MTU.
pub const MAX_PAYLOAD: u32 = 4096;

/// A `[[stream]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamEntry {
    /// Pattern.
    pub pattern: Pattern,
    /// Source (one-to-one).
    pub src: Option<Spanned<String>>,
    /// Sources (incast; default every host but `dst`).
    pub srcs: Option<Vec<Spanned<String>>>,
    /// Destination (one-to-one, incast).
    pub dst: Option<Spanned<String>>,
    /// Permutation shift (default hosts / 2).
    pub shift: Option<Spanned<usize>>,
    /// Payload bytes per packet (default 4096).
    pub payload_bytes: Option<Spanned<u32>>,
    /// Packets per source (default: until the end of the run).
    pub packets: Option<u64>,
    /// Start time, microseconds.
    pub start_us: Option<Spanned<f64>>,
    /// Service level.
    pub sl: Option<Spanned<u8>>,
    /// Time between two packets of a source, ns (default: back to back).
    pub interval_ns: Option<Spanned<f64>>,
    /// Data packets (default) or subnet management on VL15.
    pub kind: Option<Spanned<StreamKindEntry>>,
}

/// What a stream carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKindEntry {
    /// UD SENDs on the VL of `sl`.
    Data,
    /// Subnet-management packets (SMP-sized MADs to QP0) on VL15.
    Management,
}

/// Payload of a management packet: one MAD (IBA 13.4.2).
pub const MAD_BYTES: u32 = 256;

/// One source of one stream, resolved against the topology.
#[derive(Clone, Debug, PartialEq)]
pub struct SourcePlan {
    /// Flow tag.
    pub flow: u32,
    /// Flow identity for the report.
    pub info: FlowInfo,
    /// Sending host.
    pub host: String,
    /// Destination hosts, visited in turn.
    pub dests: Vec<String>,
    /// Payload bytes.
    pub payload: u32,
    /// Packets to send (`None`: until the end).
    pub packets: Option<u64>,
    /// Start time.
    pub start_ps: Picos,
    /// Service level.
    pub sl: u8,
    /// Pacing: time between two packets (`None`: back to back).
    pub interval_ps: Option<Picos>,
    /// Subnet management on VL15 rather than data.
    pub management: bool,
}

/// The sources of every `[[stream]]`, checked against the topology; errors name the
/// key and line.
pub fn stream_plan(
    entries: &[StreamEntry],
    topo: &Topology,
    src: &Source,
) -> Result<Vec<SourcePlan>, ScenarioError> {
    let hosts = host_names(topo);
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let table = format!("stream[{i}]");
        let key = |k: &str| format!("{table}.{k}");
        let management = e
            .kind
            .as_ref()
            .is_some_and(|k| *k.get_ref() == StreamKindEntry::Management);
        if let (true, Some(sl)) = (management, &e.sl) {
            return Err(src.error_at(
                &key("sl"),
                sl.span(),
                "management packets travel on VL15, which no SL maps to (IBA 7.6.6)".into(),
            ));
        }
        let interval_ps = match &e.interval_ns {
            Some(v) if !(v.get_ref().is_finite() && *v.get_ref() > 0.0) => {
                return Err(src.error_at(
                    &key("interval_ns"),
                    v.span(),
                    "must be > 0 (omit it to send back to back)".into(),
                ))
            }
            Some(v) => Some(((v.get_ref() * PS_PER_NS as f64).round() as Picos).max(1)),
            None => None,
        };
        let payload = match &e.payload_bytes {
            Some(p) if *p.get_ref() > MAX_PAYLOAD => {
                return Err(src.error_at(
                    &key("payload_bytes"),
                    p.span(),
                    format!(
                        "{} bytes: at most {MAX_PAYLOAD} (the largest MTU)",
                        p.get_ref()
                    ),
                ))
            }
            Some(p) => *p.get_ref(),
            None if management => MAD_BYTES,
            None => MAX_PAYLOAD,
        };
        let sl = sl_key(src, &key("sl"), &e.sl)?;
        let start_ps = start_key(src, &key("start_us"), &e.start_us)?;
        let pairs = resolve_pattern(
            src,
            &table,
            PatternKeys {
                pattern: e.pattern,
                src: &e.src,
                srcs: &e.srcs,
                dst: &e.dst,
                shift: &e.shift,
            },
            &hosts,
        )?;
        for (src, dests) in pairs {
            let flow = out.len() as u32;
            let to = if dests.len() == 1 {
                dests[0].clone()
            } else {
                "all".into()
            };
            let tag = if management { "mgmt " } else { "" };
            out.push(SourcePlan {
                flow,
                info: FlowInfo {
                    name: format!("s{i} {tag}{src}->{to}"),
                    src: src.clone(),
                    dst: to,
                    data_from: src.clone(),
                    management,
                },
                host: src,
                dests,
                payload,
                packets: e.packets,
                start_ps,
                sl,
                interval_ps,
                management,
            });
        }
    }
    Ok(out)
}
