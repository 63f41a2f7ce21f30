//! The keys that say who sends to whom, shared by `[[stream]]` and `[[flow]]` tables:
//! `pattern`, `src`, `srcs`, `dst`, `shift`, and the `sl` and `start_us` keys both have.
//!
//! Patterns: `one-to-one` (`src` to `dst`); `incast` (each of `srcs` to `dst`); `all-to-all`
//! (every host sends to every other host in turn); `permutation` (host i to host
//! (i + `shift`) mod N, `shift` default N/2); `ring` (`[[flow]]` only: each host to the next).

use super::source::{ScenarioError, Source};
use serde::Deserialize;
use softib_fabric::time::{Picos, PS_PER_US};
use softib_fabric::topology::Topology;
use toml::Spanned;

/// Who sends to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// `src` to `dst`.
    OneToOne,
    /// Each of `srcs` to `dst`.
    Incast,
    /// Every host to every other host, round-robin.
    AllToAll,
    /// Host i to host (i + shift) mod N.
    Permutation,
    /// Each host (of `srcs` in that order, or every host) to the next, the last to the
    /// first.
    Ring,
}

/// The who-sends-to-whom keys shared by `[[stream]]` and `[[flow]]` tables.
pub(crate) struct PatternKeys<'a> {
    pub(crate) pattern: Pattern,
    pub(crate) src: &'a Option<Spanned<String>>,
    pub(crate) srcs: &'a Option<Vec<Spanned<String>>>,
    pub(crate) dst: &'a Option<Spanned<String>>,
    pub(crate) shift: &'a Option<Spanned<usize>>,
}

/// The HCAs of a topology, in node order.
pub(crate) fn host_names(topo: &Topology) -> Vec<String> {
    topo.hcas().map(|i| topo.nodes[i].name.clone()).collect()
}

/// Resolves a pattern of table `table` (e.g. `stream[0]`) to (source, destinations)
/// pairs over `hosts`; errors name the key and line.
pub(crate) fn resolve_pattern(
    src: &Source,
    table: &str,
    k: PatternKeys<'_>,
    hosts: &[String],
) -> Result<Vec<(String, Vec<String>)>, ScenarioError> {
    let key = |name: &str| format!("{table}.{name}");
    let is_host = |s: &Spanned<String>, key: &str| -> Result<String, ScenarioError> {
        if hosts.iter().any(|h| h == s.get_ref()) {
            Ok(s.get_ref().clone())
        } else {
            Err(src.error_at(
                key,
                s.span(),
                format!(
                    "no HCA called `{}` (hosts are {})",
                    s.get_ref(),
                    host_list(hosts)
                ),
            ))
        }
    };
    let need = |field: &Option<Spanned<String>>, name: &str| -> Result<String, ScenarioError> {
        match field {
            Some(s) => is_host(s, &key(name)),
            None => Err(src.error_at(
                table,
                0..0,
                format!("pattern {:?} needs `{name}`", k.pattern),
            )),
        }
    };
    let pairs: Vec<(String, Vec<String>)> = match k.pattern {
        Pattern::OneToOne => {
            let (s, d) = (need(k.src, "src")?, need(k.dst, "dst")?);
            if s == d {
                return Err(src.error_at(
                    &key("dst"),
                    k.dst.as_ref().map_or(0..0, |d| d.span()),
                    "a host does not send to itself over the fabric".into(),
                ));
            }
            vec![(s, vec![d])]
        }
        Pattern::Incast => {
            let d = need(k.dst, "dst")?;
            let srcs = match k.srcs {
                Some(v) => v
                    .iter()
                    .map(|s| is_host(s, &key("srcs")))
                    .collect::<Result<Vec<_>, _>>()?,
                None => hosts.iter().filter(|h| **h != d).cloned().collect(),
            };
            if let Some(bad) = k.srcs.iter().flatten().find(|s| *s.get_ref() == d) {
                return Err(src.error_at(
                    &key("srcs"),
                    bad.span(),
                    format!("`{d}` is the destination"),
                ));
            }
            srcs.into_iter().map(|s| (s, vec![d.clone()])).collect()
        }
        Pattern::AllToAll => hosts
            .iter()
            .enumerate()
            .map(|(me, s)| {
                // Start after oneself, so that not every host hits the same first
                // destination.
                let dests = (1..hosts.len())
                    .map(|j| hosts[(me + j) % hosts.len()].clone())
                    .collect();
                (s.clone(), dests)
            })
            .collect(),
        Pattern::Ring => {
            let ring = match k.srcs {
                Some(v) => v
                    .iter()
                    .map(|s| is_host(s, &key("srcs")))
                    .collect::<Result<Vec<_>, _>>()?,
                None => hosts.to_vec(),
            };
            for (j, h) in ring.iter().enumerate() {
                if ring[..j].contains(h) {
                    let span = k.srcs.as_ref().map_or(0..0, |v| v[j].span());
                    return Err(src.error_at(
                        &key("srcs"),
                        span,
                        format!("`{h}` appears twice in the ring"),
                    ));
                }
            }
            if ring.len() < 2 {
                return Err(src.error_at(
                    &key("srcs"),
                    k.srcs
                        .as_ref()
                        .map_or(0..0, |v| v.first().map_or(0..0, |s| s.span())),
                    "a ring needs at least 2 hosts".into(),
                ));
            }
            let n = ring.len();
            (0..n)
                .map(|j| (ring[j].clone(), vec![ring[(j + 1) % n].clone()]))
                .collect()
        }
        Pattern::Permutation => {
            let n = hosts.len();
            let shift = match k.shift {
                Some(s) if *s.get_ref() % n.max(1) == 0 => {
                    return Err(src.error_at(
                        &key("shift"),
                        s.span(),
                        format!(
                            "a shift of {} maps every host to itself ({n} hosts)",
                            s.get_ref()
                        ),
                    ))
                }
                Some(s) => *s.get_ref() % n,
                None => n / 2,
            };
            hosts
                .iter()
                .enumerate()
                .map(|(j, s)| (s.clone(), vec![hosts[(j + shift) % n].clone()]))
                .collect()
        }
    };
    if pairs.is_empty() || hosts.len() < 2 {
        return Err(src.error_at(
            table,
            0..0,
            "the pattern has no sender in this topology".into(),
        ));
    }
    Ok(pairs)
}

/// An `sl` key: 0..=15, default 0.
pub(crate) fn sl_key(
    src: &Source,
    key: &str,
    v: &Option<Spanned<u8>>,
) -> Result<u8, ScenarioError> {
    match v {
        Some(s) if *s.get_ref() > 15 => Err(src.error_at(key, s.span(), "SLs are 0..=15".into())),
        Some(s) => Ok(*s.get_ref()),
        None => Ok(0),
    }
}

/// A `start_us` key: >= 0, default 0.
pub(crate) fn start_key(
    src: &Source,
    key: &str,
    v: &Option<Spanned<f64>>,
) -> Result<Picos, ScenarioError> {
    match v {
        Some(s) if !(s.get_ref().is_finite() && *s.get_ref() >= 0.0) => {
            Err(src.error_at(key, s.span(), "must be >= 0".into()))
        }
        Some(s) => Ok((s.get_ref() * PS_PER_US as f64).round() as Picos),
        None => Ok(0),
    }
}

fn host_list(hosts: &[String]) -> String {
    match hosts.len() {
        0 => "none".into(),
        1..=4 => hosts.join(", "),
        n => format!("{} .. {} ({n})", hosts[0], hosts[n - 1]),
    }
}
