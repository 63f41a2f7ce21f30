//! Scheduled faults in scenario files: `[[fault]]` tables.
//!
//! ```toml
//! [[fault]]
//! link = "sw0:2"     # either end of the cable, NODE:PORT (kind = "link", the default)
//! down_us = 50       # the link goes down at 50 us
//! up_us = 100        # and retrains at 100 us (omit: stays down)
//!
//! [[fault]]
//! kind = "responder_stall"   # the host processes nothing it receives for a while
//! node = "h1"
//! start_us = 100
//! duration_us = 200
//! ```
//!
//! Bit errors are a link property (`bit_error_rate` in `[fabric]` or per `[[topology.links]]`);
//! link down/up is applied with [`softib_fabric::fabric::Fabric::schedule_link_state`]; responder
//! stalls by [`super::hosts`] on the host's engine.

use super::source::{ScenarioError, Source};
use serde::Deserialize;
use softib_fabric::fabric::Fabric;
use softib_fabric::time::PS_PER_US;
use softib_fabric::topology::Topology;
use toml::Spanned;

/// What a `[[fault]]` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A cable goes down (and possibly up again).
    Link,
    /// A host's engine processes nothing it receives for a while.
    ResponderStall,
}

/// One `[[fault]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultEntry {
    /// What it does (default `link`).
    pub kind: Option<Spanned<FaultKind>>,
    /// Link: one end of the cable, `NODE:PORT`.
    pub link: Option<Spanned<String>>,
    /// Link: when it goes down, microseconds.
    pub down_us: Option<Spanned<u64>>,
    /// Link: when it comes back up, microseconds (after `down_us`).
    pub up_us: Option<Spanned<u64>>,
    /// Responder stall: the host.
    pub node: Option<Spanned<String>>,
    /// Responder stall: start, microseconds.
    pub start_us: Option<Spanned<f64>>,
    /// Responder stall: length, microseconds.
    pub duration_us: Option<Spanned<f64>>,
}

impl FaultEntry {
    fn is_link(&self) -> bool {
        self.kind
            .as_ref()
            .is_none_or(|k| *k.get_ref() == FaultKind::Link)
    }
}

/// Checks the `[[fault]]` tables against the topology.
pub fn check(entries: &[FaultEntry], topo: &Topology, src: &Source) -> Result<(), ScenarioError> {
    for (i, f) in entries.iter().enumerate() {
        let at = f.kind.as_ref().map_or(0..0, |k| k.span());
        if !f.is_link() {
            for (present, k) in [
                (f.link.as_ref().map(|x| x.span()), "link"),
                (f.down_us.as_ref().map(|x| x.span()), "down_us"),
                (f.up_us.as_ref().map(|x| x.span()), "up_us"),
            ] {
                if let Some(span) = present {
                    return Err(src.error_at(
                        &format!("fault[{i}].{k}"),
                        span,
                        "belongs to a link fault, not a responder_stall".into(),
                    ));
                }
            }
            continue;
        }
        for (present, k) in [
            (f.node.as_ref().map(|x| x.span()), "node"),
            (f.start_us.as_ref().map(|x| x.span()), "start_us"),
            (f.duration_us.as_ref().map(|x| x.span()), "duration_us"),
        ] {
            if let Some(span) = present {
                return Err(src.error_at(
                    &format!("fault[{i}].{k}"),
                    span,
                    "belongs to a responder_stall (set kind = \"responder_stall\")".into(),
                ));
            }
        }
        let (Some(link), Some(down)) = (&f.link, &f.down_us) else {
            return Err(src.error_at(
                &format!("fault[{i}]"),
                at,
                "a link fault needs link and down_us".into(),
            ));
        };
        let text = link.get_ref();
        let key = format!("fault[{i}].link");
        let Some((name, port)) = text.rsplit_once(':') else {
            return Err(src.error_at(&key, link.span(), format!("`{text}` is not NODE:PORT")));
        };
        let Some(node) = topo.node_by_name(name) else {
            return Err(src.error_at(&key, link.span(), format!("no node called `{name}`")));
        };
        let Ok(port) = port.parse::<u8>() else {
            return Err(src.error_at(&key, link.span(), format!("`{port}` is not a port number")));
        };
        let cabled = topo.links.iter().any(|l| {
            (l.a.node == node && l.a.port == port) || (l.b.node == node && l.b.port == port)
        });
        if !cabled {
            return Err(src.error_at(
                &key,
                link.span(),
                format!("port {port} of `{name}` has no cable"),
            ));
        }
        if let Some(up) = &f.up_us {
            if up.get_ref() <= down.get_ref() {
                return Err(src.error_at(
                    &format!("fault[{i}].up_us"),
                    up.span(),
                    format!(
                        "{} us is not after down_us = {} us",
                        up.get_ref(),
                        down.get_ref()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Schedules the link faults on a fabric built from this scenario (responder stalls
/// are the hosts': [`super::hosts::apply`]).
pub fn schedule(
    entries: &[FaultEntry],
    fabric: &mut Fabric,
    src: &Source,
) -> Result<(), ScenarioError> {
    for (i, f) in entries.iter().enumerate() {
        if !f.is_link() {
            continue;
        }
        let (Some(link), Some(down)) = (&f.link, &f.down_us) else {
            return Err(src.error_at(
                &format!("fault[{i}]"),
                0..0,
                "a link fault needs link and down_us".into(),
            ));
        };
        let parsed = link
            .get_ref()
            .rsplit_once(':')
            .and_then(|(name, port)| Some((name, port.parse::<u8>().ok()?)));
        let Some((name, port)) = parsed else {
            return Err(src.error_at(
                &format!("fault[{i}].link"),
                link.span(),
                format!("`{}` is not NODE:PORT", link.get_ref()),
            ));
        };
        fabric.schedule_link_state(name, port, down.get_ref() * PS_PER_US, false)?;
        if let Some(up) = &f.up_us {
            fabric.schedule_link_state(name, port, up.get_ref() * PS_PER_US, true)?;
        }
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use crate::scenario::Scenario;
    use softib_fabric::time::PS_PER_US;

    const BASE: &str = "[topology]\nkind = \"single-switch\"\nhosts = 2\nswitch_ports = 8\n";

    #[test]
    fn faults_are_scheduled_on_the_built_fabric() {
        let s = Scenario::parse(&format!(
            "{BASE}[[fault]]\nlink = \"h1:1\"\ndown_us = 5\nup_us = 9\n"
        ))
        .unwrap();
        let mut f = s.build().unwrap();
        f.run_until(20 * PS_PER_US);
        assert_eq!(f.port_counters("h1", 1).unwrap().link_downed_counter, 1);
        assert_eq!(f.port_counters("sw0", 2).unwrap().link_downed_counter, 1);
    }

    #[test]
    fn bad_faults_name_key_and_line() {
        let e = Scenario::parse(&format!("{BASE}[[fault]]\nlink = \"h1:2\"\ndown_us = 5\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("line 6: fault[0].link: port 2 of `h1`"),
            "{e}"
        );
        let e = Scenario::parse(&format!(
            "{BASE}[[fault]]\nlink = \"h1:1\"\ndown_us = 5\nup_us = 5\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("line 8: fault[0].up_us"), "{e}");
        let e = Scenario::parse(&format!("{BASE}[[fault]]\nlink = \"h1:1\"\ndown = 5\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("down") && e.contains("line 7"), "{e}");
    }
}
