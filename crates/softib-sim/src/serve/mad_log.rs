//! The MAD log of a served run, and its replay: every request a tool sent, from which node
//! and port, to which LID, with the response the agents gave (or why none). Replaying the
//! log against the same scenario frozen at the same instant must give every response again
//! bit for bit, without the tools.
//!
//! Format (text, one exchange a line after a header):
//! `# softib mad-log 1 scenario=NAME at_ps=T`, then
//! `NODE PORT DLID REQUEST_HEX RESPONSE_HEX|-REASON`, and between them the events that
//! change what later MADs see:
//! - `# issm NODE PORT 0|1`: a client declared (or withdrew) an SM behind its port;
//! - `# sm-up`: with an external SM, every port is Active: the SM's tables are taken here;
//! - `# ran at_ps=T`: the scenario, run with those tables, replaced the snapshot here.

use softib_fabric::agents::delivery::{deliver, Dropped};
use softib_fabric::agents::Subnet;
use softib_fabric::fabric::SubnetProgram;
use softib_fabric::time::Picos;
use softib_fabric::topology::PortAddr;
use std::fmt::Write as _;

/// The header's first words.
const MAGIC: &str = "# softib mad-log 1";

/// One logged exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The node the client was attached to (its NodeDescription).
    pub node: String,
    /// Its port.
    pub port: u8,
    /// The request's DLID.
    pub dlid: u16,
    /// The request.
    pub request: [u8; 256],
    /// The response, or why there was none.
    pub response: Result<[u8; 256], String>,
}

/// Answers `request` from `from` against `subnet`: what the server sends back and logs.
pub fn answer(
    subnet: &mut Subnet,
    from: PortAddr,
    dlid: u16,
    request: &[u8; 256],
) -> Result<[u8; 256], Dropped> {
    deliver(subnet, from, dlid, request).map(|r| *r)
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<[u8; 256]> {
    if s.len() != 512 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 256];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The header line of a log of scenario `name` frozen at `at`.
pub fn header(name: &str, at: Picos) -> String {
    format!("{MAGIC} scenario={name} at_ps={at}\n")
}

/// One exchange as a log line.
pub fn line(e: &Exchange) -> String {
    let resp = match &e.response {
        Ok(r) => hex(r),
        Err(why) => format!("-{}", why.replace(char::is_whitespace, "_")),
    };
    format!(
        "{} {} {} {} {}\n",
        e.node,
        e.port,
        e.dlid,
        hex(&e.request),
        resp
    )
}

/// One line of the log after its header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A MAD and its response.
    Exchange(Box<Exchange>),
    /// A client's SET_ISSM: an SM behind port `port` of node `node` (or no more).
    IsSm {
        /// The node's NodeDescription.
        node: String,
        /// Its port.
        port: u8,
        /// IsSM set or cleared.
        on: bool,
    },
    /// Every port Active: the external SM's tables are taken for the run.
    SmUp,
    /// The run with those tables replaced the snapshot; it was frozen at `at_ps`.
    Ran {
        /// The instant the run was frozen at.
        at_ps: Picos,
    },
}

impl Entry {
    /// The entry as a log line.
    pub fn line(&self) -> String {
        match self {
            Entry::Exchange(e) => line(e),
            Entry::IsSm { node, port, on } => format!("# issm {node} {port} {}\n", *on as u8),
            Entry::SmUp => "# sm-up\n".into(),
            Entry::Ran { at_ps } => format!("# ran at_ps={at_ps}\n"),
        }
    }
}

/// A parsed log: the scenario name, the instant, the exchanges and events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log {
    /// Scenario name of the served run.
    pub scenario: String,
    /// The instant it was frozen at (0 for a fabric held for an external SM).
    pub at_ps: Picos,
    /// The exchanges and events in order.
    pub entries: Vec<Entry>,
}

/// Parses a log, naming the line of the first error.
pub fn parse(text: &str) -> Result<Log, String> {
    let mut lines = text.lines();
    let head = lines.next().ok_or("empty MAD log")?;
    let rest = head
        .strip_prefix(MAGIC)
        .ok_or_else(|| format!("not a softib MAD log (first line `{head}`)"))?;
    let mut scenario = None;
    let mut at_ps = None;
    for w in rest.split_whitespace() {
        if let Some(v) = w.strip_prefix("scenario=") {
            scenario = Some(v.to_string());
        } else if let Some(v) = w.strip_prefix("at_ps=") {
            at_ps = v.parse().ok();
        }
    }
    let mut entries = Vec::new();
    for (i, l) in lines.enumerate() {
        let bad = || format!("MAD log line {}: malformed", i + 2);
        if let Some(ev) = l.strip_prefix("# ") {
            let f: Vec<&str> = ev.split(' ').collect();
            entries.push(match f.as_slice() {
                ["issm", node, port, on] => Entry::IsSm {
                    node: node.to_string(),
                    port: port.parse().map_err(|_| bad())?,
                    on: *on == "1",
                },
                ["sm-up"] => Entry::SmUp,
                ["ran", at] => Entry::Ran {
                    at_ps: at
                        .strip_prefix("at_ps=")
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(bad)?,
                },
                _ => return Err(bad()),
            });
            continue;
        }
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() != 5 {
            return Err(bad());
        }
        let response = match f[4].strip_prefix('-') {
            Some(why) => Err(why.to_string()),
            None => Ok(unhex(f[4]).ok_or_else(bad)?),
        };
        entries.push(Entry::Exchange(Box::new(Exchange {
            node: f[0].to_string(),
            port: f[1].parse().map_err(|_| bad())?,
            dlid: f[2].parse().map_err(|_| bad())?,
            request: unhex(f[3]).ok_or_else(bad)?,
            response,
        })));
    }
    Ok(Log {
        scenario: scenario.ok_or("MAD log header has no scenario=")?,
        at_ps: at_ps.ok_or("MAD log header has no at_ps=")?,
        entries,
    })
}

/// The result of a replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// Exchanges replayed.
    pub replayed: usize,
    /// Those whose response came out identical.
    pub identical: usize,
    /// The first differences (line number in the log, what differed).
    pub differences: Vec<(usize, String)>,
}

/// How a served fabric held for an external SM runs once the SM has brought it up: given
/// the SM's tables, runs the scenario with them and returns the snapshot at the serving
/// instant (the CLI's closure; the same one serves and replays).
pub type RunWithSm<'a> = dyn FnMut(SubnetProgram) -> Result<Subnet, String> + 'a;

/// Replays `log` against `subnet` (the same scenario frozen at the same instant, or held
/// for its external SM), in the logged order, since an SM's Sets change what later requests
/// see. At `# sm-up` the SM's tables are taken and at `# ran` the run replaces the
/// snapshot, where the served run did; `run` does the run.
pub fn replay(subnet: &mut Subnet, log: &Log, run: &mut RunWithSm<'_>) -> Replay {
    let mut out = Replay::default();
    let mut program = None;
    for (i, entry) in log.entries.iter().enumerate() {
        let e = match entry {
            Entry::Exchange(e) => e,
            Entry::IsSm { node, port, on } => {
                match subnet.find_node(node) {
                    Some(n) => subnet.set_is_sm(
                        PortAddr {
                            node: n,
                            port: *port,
                        },
                        *on,
                    ),
                    None => out
                        .differences
                        .push((i + 2, format!("node `{node}` is not in this topology"))),
                }
                continue;
            }
            Entry::SmUp => {
                program = Some(subnet.program());
                continue;
            }
            Entry::Ran { at_ps } => {
                let Some(p) = program.take() else {
                    out.differences
                        .push((i + 2, "`# ran` without `# sm-up`".into()));
                    continue;
                };
                match run(p) {
                    Ok(mut ran) if ran.at == *at_ps => {
                        ran.keep_configuration(subnet);
                        *subnet = ran;
                    }
                    Ok(ran) => out.differences.push((
                        i + 2,
                        format!("the run stopped at {} ps, logged {at_ps}", ran.at),
                    )),
                    Err(why) => out
                        .differences
                        .push((i + 2, format!("the run failed: {why}"))),
                }
                continue;
            }
        };
        out.replayed += 1;
        let Some(node) = subnet.find_node(&e.node) else {
            out.differences
                .push((i + 2, format!("node `{}` is not in this topology", e.node)));
            continue;
        };
        let from = PortAddr { node, port: e.port };
        let got = answer(subnet, from, e.dlid, &e.request)
            .map_err(|d| d.to_string().replace(char::is_whitespace, "_"));
        if got == e.response {
            out.identical += 1;
        } else if out.differences.len() < 10 {
            let first = match (&got, &e.response) {
                (Ok(a), Ok(b)) => {
                    let k = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
                    format!("response byte {k}: {:#04x} now, {:#04x} logged", a[k], b[k])
                }
                (a, b) => format!("now {:?}, logged {:?}", a.as_ref().err(), b.as_ref().err()),
            };
            out.differences.push((i + 2, first));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_round_trips_and_bad_lines_are_named() {
        let e = Exchange {
            node: "h0".into(),
            port: 1,
            dlid: 65535,
            request: [7; 256],
            response: Ok([9; 256]),
        };
        let lost = Exchange {
            response: Err("no_route".into()),
            ..e.clone()
        };
        let events = [
            Entry::IsSm {
                node: "h0".into(),
                port: 1,
                on: true,
            },
            Entry::SmUp,
            Entry::Ran { at_ps: 77 },
        ];
        let text = header("fat", 5)
            + &line(&e)
            + &events.iter().map(Entry::line).collect::<String>()
            + &line(&lost);
        let log = parse(&text).unwrap();
        assert_eq!((log.scenario.as_str(), log.at_ps), ("fat", 5));
        let mut want = vec![Entry::Exchange(Box::new(e))];
        want.extend(events);
        want.push(Entry::Exchange(Box::new(lost)));
        assert_eq!(log.entries, want);
        let err = parse(&(header("fat", 5) + "# ran later\n")).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        let err = parse(&(header("fat", 5) + "h0 1 2 zz -x\n")).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert!(parse("hello\n").is_err());
    }
}
