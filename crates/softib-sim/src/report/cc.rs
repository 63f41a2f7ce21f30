//! The congestion-control loop of a run (IBA Annex A10), for runs whose scenario
//! turns `[congestion_control]` on: the CCTI of every `[[flow]]` requester QP (and of the
//! responders that were paced: the data sources of READ flows) and the
//! FECN/BECN counts of every port that marked or received one, sampled over time. Kept in
//! `summary.json` (`congestion_control`), written as `cc.csv` and drawn in `ccti.svg` and
//! `fecn_becn.svg`.
//!
//! The series come from [`crate::cc_trace::CcTrace`], which reads engine and port state
//! between simulation steps, so tracing does not change the run.

use super::decimals::round;
use super::decimals::us;
use crate::cc_trace::CcTrace;
use serde::Serialize;
use softib_fabric::time::{Picos, PS_PER_US};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Sources drawn at most in `ccti.svg` (the highest CCTIs); every one is in `cc.csv`.
pub const MAX_SOURCE_LINES: usize = 12;

/// The CCTI series of one QP of a flow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CcSourceSeries {
    /// Flow tag (as in `flows`).
    pub flow: u32,
    /// Flow name, with " (responder)" for the responder's QP.
    pub name: String,
    /// `requester` or `responder` (the data source of READ flows).
    pub role: &'static str,
    /// Host of the QP.
    pub host: String,
    /// QP number.
    pub qpn: u32,
    /// Highest CCTI sampled.
    pub max_ccti: u16,
    /// Mean CCTI over the samples.
    pub mean_ccti: f64,
    /// CCTI at each of `times_us` (IBA Annex A10 congestion control table index).
    pub ccti: Vec<u16>,
}

/// The cumulative FECN/BECN counts of one port.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CcPortSeries {
    /// `node:port`.
    pub port: String,
    /// Switch port: data packets it marked with FECN, at each sample.
    pub fecn_marked: Vec<u64>,
    /// HCA port: FECN-marked packets its engine received.
    pub fecn_received: Vec<u64>,
    /// HCA port: BECNs its engine received (in ACKs and CNPs).
    pub becn_received: Vec<u64>,
}

/// Time series of the congestion-control loop.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CcSummary {
    /// Sample times, microseconds.
    pub times_us: Vec<f64>,
    /// Sample times, exact (for `cc.csv`).
    #[serde(skip)]
    pub times_ps: Vec<Picos>,
    /// Every flow's requester QP, and its responder QP when that was paced (its CCTI rose
    /// above 0: the data source of READ flows), by flow tag.
    pub sources: Vec<CcSourceSeries>,
    /// Ports that marked or received a FECN or BECN, node then port order.
    pub ports: Vec<CcPortSeries>,
}

impl CcSummary {
    /// The summary of `trace`, whose source `i` is a QP of flow `roles[i].0`, its requester
    /// if `roles[i].1`; `names` maps flow tags to flow names. Responders whose CCTI stayed 0
    /// are left out.
    pub fn from_trace(
        trace: &CcTrace,
        roles: &[(u32, bool)],
        names: &BTreeMap<u32, String>,
    ) -> Self {
        let mut sources: Vec<CcSourceSeries> = trace
            .sources
            .iter()
            .zip(roles)
            .zip(&trace.ccti)
            .filter(|((_, &(_, requester)), ccti)| requester || ccti.iter().any(|&c| c > 0))
            .map(|((src, &(flow, requester)), ccti)| {
                let mean = if ccti.is_empty() {
                    0.0
                } else {
                    ccti.iter().map(|&c| c as f64).sum::<f64>() / ccti.len() as f64
                };
                let name = names.get(&flow).cloned().unwrap_or_default();
                CcSourceSeries {
                    flow,
                    name: if requester {
                        name
                    } else {
                        format!("{name} (responder)")
                    },
                    role: if requester { "requester" } else { "responder" },
                    host: src.host.clone(),
                    qpn: src.qpn,
                    max_ccti: ccti.iter().copied().max().unwrap_or(0),
                    mean_ccti: round(mean, 3),
                    ccti: ccti.clone(),
                }
            })
            .collect();
        sources.sort_by(|a, b| {
            (a.flow, a.role, &a.host, a.qpn).cmp(&(b.flow, b.role, &b.host, b.qpn))
        });
        CcSummary {
            times_us: trace
                .times
                .iter()
                .map(|&t| round(t as f64 / PS_PER_US as f64, 6))
                .collect(),
            times_ps: trace.times.clone(),
            sources,
            ports: trace
                .ports
                .iter()
                .map(|p| CcPortSeries {
                    port: format!("{}:{}", p.node, p.port),
                    fecn_marked: p.fecn_marked.clone(),
                    fecn_received: p.fecn_received.clone(),
                    becn_received: p.becn_received.clone(),
                })
                .collect(),
        }
    }
}

/// Header of `cc.csv`.
pub const CC_HEADER: &str = "time_us,series,name,value";

/// `cc.csv`: one row per sample and series value, in time order: `ccti` per source (named by
/// its flow, responders with " (responder)"), then `fecn_marked`, `fecn_received` and `becn_received` per port
/// (cumulative counts; zero series of a port are left out).
pub fn csv(cc: &CcSummary) -> String {
    let mut out = String::new();
    out.push_str(CC_HEADER);
    out.push('\n');
    for (k, &t) in cc.times_ps.iter().enumerate() {
        let t = us(t);
        for s in &cc.sources {
            if let Some(c) = s.ccti.get(k) {
                let _ = writeln!(out, "{t},ccti,{},{c}", s.name);
            }
        }
        for p in &cc.ports {
            for (series, v) in [
                ("fecn_marked", &p.fecn_marked),
                ("fecn_received", &p.fecn_received),
                ("becn_received", &p.becn_received),
            ] {
                if v.last().copied().unwrap_or(0) == 0 {
                    continue;
                }
                if let Some(x) = v.get(k) {
                    let _ = writeln!(out, "{t},{series},{},{x}", p.port);
                }
            }
        }
    }
    out
}
