//! A fabric read from `ibnetdiscover` output (infiniband-diags), so an engineer can dump a
//! production fabric and simulate it; ibsim's net files use the same format and are read too.
//!
//! ```text
//! switchguid=0x5ef1b00000001400(5ef1b00000001400)
//! Switch  8 "S-5ef1b00000001400"      # "leaf3" base port 0 lid 20 lmc 0
//! [1]     "H-5ef1b00000000d00"[1](5ef1b00000000d01)   # "h12" lid 13 4xEDR
//!
//! caguid=0x5ef1b00000000d00
//! Ca      1 "H-5ef1b00000000d00"      # "h12"
//! [1](5ef1b00000000d01)   "S-5ef1b00000001400"[1]     # lid 13 lmc 0 "leaf3" lid 20 4xEDR
//! ```
//!
//! What is taken from the file:
//! - **Nodes:** `Switch`, `Ca` (ibsim writes `Hca`) with their port counts, in file order.
//!   Routers (`Rt`) are refused: the model has none.
//! - **Names:** a node is called by its NodeDescription (the quoted text after `#` on its
//!   header line) when no other node of the file has the same description, and by its
//!   quoted node id otherwise (real fabrics often have many unmanaged switches with one
//!   description). Flows, faults and reports use these names.
//! - **GUIDs:** NodeGUID from `switchguid=`/`caguid=` (or from an id of the form `S-<guid>` /
//!   `H-<guid>`), SystemImageGUID from `sysimgguid=`, PortGUIDs from the parenthesised
//!   GUIDs; the simulated management agents answer with them. A node with none gets derived
//!   GUIDs, as a generated topology's nodes do.
//! - **Cables:** every `[port] "remote"[port]` line. Each cable is normally listed at both
//!   ends; the two listings must agree. A cable listed at one end only is taken from it.
//! - **Rate:** the `<width>x<speed>` token in a port line's comment (`4xEDR`, `1xSDR`,
//!   `4xFDR10`, ...), or ibsim's `w=<lanes>` attribute for the width; otherwise the
//!   fabric's default rate.
//!
//! What is not: LIDs and LMC (softib's routing assigns LIDs, as an SM would), vendor and
//! device IDs (the agents report softib's, so tools do not ask for vendor attributes), and
//! ibsim's `include` and `do` directives, which are refused with their line.
//!
//! Every error names the 1-based line of the file and what is wrong with it.

use softib_fabric::link::{LinkRate, LinkSpeed, LinkWidth};
use softib_fabric::topology::{NodeGuids, NodeKind, PortAddr, Topology};
use std::collections::{BTreeMap, HashMap};

/// A line of an ibnetdiscover file that cannot be read, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ImportError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

fn err<T>(line: usize, reason: impl Into<String>) -> Result<T, ImportError> {
    Err(ImportError {
        line,
        reason: reason.into(),
    })
}

/// A node header and what the lines before and after it said of it.
struct RawNode {
    kind: NodeKind,
    ports: u8,
    id: String,
    description: Option<String>,
    node_guid: Option<u64>,
    system_image_guid: Option<u64>,
    /// PortGUIDs by port number (a switch's port 0 included).
    port_guids: BTreeMap<u8, u64>,
    line: usize,
}

/// One `[port] "remote"[port]` line.
struct RawPort {
    node: usize,
    port: u8,
    remote_id: String,
    remote_port: u8,
    rate: Option<LinkRate>,
    line: usize,
}

/// The `key=value` lines before a node header.
#[derive(Default)]
struct PendingGuids {
    node: Option<u64>,
    system_image: Option<u64>,
    port0: Option<u64>,
}

/// Parses ibnetdiscover (or ibsim net file) text into a topology. A cable whose line gives
/// only a width (ibsim's `w=`) takes its speed from `default_rate`.
pub fn parse(text: &str, default_rate: LinkRate) -> Result<Topology, ImportError> {
    let mut nodes: Vec<RawNode> = Vec::new();
    let mut ports: Vec<RawPort> = Vec::new();
    let mut pending = PendingGuids::default();
    let mut current: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() {
            current = None;
            continue;
        }
        if l.starts_with('#') {
            continue;
        }
        if let Some((key, value)) = key_value(l) {
            match key {
                "vendid" | "devid" => {}
                "sysimgguid" => pending.system_image = Some(hex_guid(value, line)?),
                "switchguid" | "caguid" => {
                    let (guid, port0) = match value.split_once('(') {
                        Some((g, rest)) => {
                            let p = rest.strip_suffix(')').ok_or_else(|| ImportError {
                                line,
                                reason: format!("`{value}`: no `)` after the port GUID"),
                            })?;
                            (hex_guid(g, line)?, Some(hex_guid(p, line)?))
                        }
                        None => (hex_guid(value, line)?, None),
                    };
                    pending.node = Some(guid);
                    pending.port0 = port0;
                }
                "rtguid" => return err(line, "routers are not modelled by softib"),
                other => return err(line, format!("unknown key `{other}`")),
            }
            continue;
        }
        let first = l.split_whitespace().next().unwrap_or("");
        match first {
            "Switch" | "Ca" | "Hca" | "Rt" => {
                let node = header(l, line, std::mem::take(&mut pending))?;
                if let Some(prev) = nodes.iter().find(|n| n.id == node.id) {
                    return err(
                        line,
                        format!("node \"{}\" is already defined at line {}", node.id, prev.line),
                    );
                }
                nodes.push(node);
                current = Some(nodes.len() - 1);
            }
            "include" | "do" => {
                return err(
                    line,
                    format!("ibsim's `{first}` directive is not supported: put the whole fabric in one file"),
                )
            }
            _ if l.starts_with('[') => {
                let Some(n) = current else {
                    return err(line, "a port line outside a node (no `Switch` or `Ca` line above it)");
                };
                let p = port_line(l, line, n, default_rate)?;
                if p.port == 0 || p.port > nodes[n].ports {
                    return err(
                        line,
                        format!(
                            "port {} of \"{}\", which has ports 1..={}",
                            p.port, nodes[n].id, nodes[n].ports
                        ),
                    );
                }
                if let Some(g) = local_port_guid(l, line)? {
                    nodes[n].port_guids.insert(p.port, g);
                }
                ports.push(p);
            }
            _ => {
                return err(
                    line,
                    format!("not a node, port or GUID line: `{}`", truncate(l)),
                )
            }
        }
    }
    build(nodes, ports)
}

fn truncate(l: &str) -> &str {
    match l.char_indices().nth(60) {
        Some((at, _)) => &l[..at],
        None => l,
    }
}

/// `key=value` (no spaces around `=`, key lowercase letters only), as ibnetdiscover writes.
fn key_value(l: &str) -> Option<(&str, &str)> {
    let (k, v) = l.split_once('=')?;
    (!k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase())).then_some((k, v.trim()))
}

fn hex_guid(text: &str, line: usize) -> Result<u64, ImportError> {
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    u64::from_str_radix(digits, 16).or_else(|_| err(line, format!("`{t}` is not a GUID")))
}

/// The quoted string at the start of `s`, and the rest after its closing quote.
fn quoted(s: &str) -> Option<(&str, &str)> {
    let s = s.strip_prefix('"')?;
    let end = s.find('"')?;
    Some((&s[..end], &s[end + 1..]))
}

/// A node header: `Switch 8 "id" # "description" ...`.
fn header(l: &str, line: usize, pending: PendingGuids) -> Result<RawNode, ImportError> {
    let (word, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
    let kind = match word {
        "Switch" => NodeKind::Switch,
        "Ca" | "Hca" => NodeKind::Hca,
        _ => return err(line, "routers (`Rt`) are not modelled by softib"),
    };
    let rest = rest.trim_start();
    let (count, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let ports = match count.parse::<u8>() {
        Ok(p) if p >= 1 => p,
        _ => return err(line, format!("`{count}` is not a port count (1 to 255)")),
    };
    let Some((id, rest)) = quoted(rest.trim_start()) else {
        return err(
            line,
            "the node id must follow its port count in double quotes",
        );
    };
    if id.is_empty() {
        return err(line, "an empty node id");
    }
    let description = rest
        .split_once('#')
        .and_then(|(_, c)| quoted(c.trim_start()))
        .map(|(d, _)| d.to_string())
        .filter(|d| !d.is_empty());
    // ibnetdiscover names nodes it has no description for "S-<guid>" / "H-<guid>".
    let guid_in_id = id
        .strip_prefix("S-")
        .or_else(|| id.strip_prefix("H-"))
        .filter(|g| g.len() == 16)
        .and_then(|g| u64::from_str_radix(g, 16).ok());
    let node_guid = pending.node.or(guid_in_id);
    let mut port_guids = BTreeMap::new();
    if let (NodeKind::Switch, Some(p0)) = (kind, pending.port0.or(node_guid)) {
        port_guids.insert(0, p0);
    }
    Ok(RawNode {
        kind,
        ports,
        id: id.to_string(),
        description,
        node_guid,
        system_image_guid: pending.system_image,
        port_guids,
        line,
    })
}

/// `[N]` at the start of `s`: the port number and the rest.
fn bracketed_port<'a>(s: &'a str, line: usize, what: &str) -> Result<(u8, &'a str), ImportError> {
    let Some(body) = s.strip_prefix('[') else {
        return err(line, format!("no `[port]` for the {what}"));
    };
    let Some((n, rest)) = body.split_once(']') else {
        return err(line, format!("no `]` after the {what}'s port number"));
    };
    match n.trim().parse::<u8>() {
        Ok(p) => Ok((p, rest)),
        Err(_) => err(line, format!("`{n}` is not a port number ({what})")),
    }
}

/// An optional `(guid)` at the start of `s`: the GUID and the rest.
fn parenthesised_guid(s: &str, line: usize) -> Result<(Option<u64>, &str), ImportError> {
    let Some(body) = s.strip_prefix('(') else {
        return Ok((None, s));
    };
    let Some((g, rest)) = body.split_once(')') else {
        return err(line, "no `)` after a port GUID");
    };
    Ok((Some(hex_guid(g, line)?), rest))
}

/// The local port's GUID of a port line, `[1](guid) ...`, if it has one.
fn local_port_guid(l: &str, line: usize) -> Result<Option<u64>, ImportError> {
    let (_, rest) = bracketed_port(l, line, "local port")?;
    Ok(parenthesised_guid(rest, line)?.0)
}

/// `[p](guid)? "remote"[rp](guid)? attributes # comment`.
fn port_line(
    l: &str,
    line: usize,
    node: usize,
    default_rate: LinkRate,
) -> Result<RawPort, ImportError> {
    let (port, rest) = bracketed_port(l, line, "local port")?;
    let (_, rest) = parenthesised_guid(rest, line)?;
    let Some((remote_id, rest)) = quoted(rest.trim_start()) else {
        return err(
            line,
            "the remote node's id must follow the port in double quotes",
        );
    };
    let (remote_port, rest) = bracketed_port(rest, line, "remote port")?;
    let (_, rest) = parenthesised_guid(rest, line)?;
    let (attributes, comment) = rest.split_once('#').unwrap_or((rest, ""));
    let mut width = None;
    for a in attributes.split_whitespace() {
        match a.split_once('=') {
            Some(("w", v)) => width = Some(width_of(v, line)?),
            // ibsim's speed attributes take register encodings; the comment's rate is the
            // readable form, so only the width attribute is read.
            Some(("s" | "e", _)) => {}
            _ => {
                return err(
                    line,
                    format!("unknown attribute `{a}` after the remote port"),
                )
            }
        }
    }
    let mut rate = None;
    for token in comment.split_whitespace() {
        if let Some(r) = rate_token(token, line)? {
            rate = Some(r);
        }
    }
    if let Some(w) = width {
        rate = Some(match rate {
            Some(r) => LinkRate::new(w, r.speed),
            None => LinkRate::new(w, default_rate.speed),
        });
    }
    Ok(RawPort {
        node,
        port,
        remote_id: remote_id.to_string(),
        remote_port,
        rate,
        line,
    })
}

fn width_of(lanes: &str, line: usize) -> Result<LinkWidth, ImportError> {
    Ok(match lanes {
        "1" => LinkWidth::X1,
        "2" => LinkWidth::X2,
        "4" => LinkWidth::X4,
        "8" => LinkWidth::X8,
        "12" => LinkWidth::X12,
        _ => {
            return err(
                line,
                format!("`{lanes}` is not a link width (1, 2, 4, 8 or 12)"),
            )
        }
    })
}

/// `4xEDR` and the like; `None` for a token that is not a rate (a LID, a description).
fn rate_token(token: &str, line: usize) -> Result<Option<LinkRate>, ImportError> {
    let Some((lanes, speed)) = token.split_once('x') else {
        return Ok(None);
    };
    if lanes.is_empty()
        || !lanes.bytes().all(|b| b.is_ascii_digit())
        || speed.is_empty()
        || !speed
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    {
        return Ok(None);
    }
    let width = width_of(lanes, line)?;
    let speed = match speed {
        "SDR" => LinkSpeed::Sdr,
        "DDR" => LinkSpeed::Ddr,
        "QDR" => LinkSpeed::Qdr,
        "FDR10" => LinkSpeed::Fdr10,
        "FDR" => LinkSpeed::Fdr,
        "EDR" => LinkSpeed::Edr,
        "HDR" => LinkSpeed::Hdr,
        "NDR" => LinkSpeed::Ndr,
        other => {
            return err(
                line,
                format!("link speed `{other}` in `{token}` is not one softib models (SDR to NDR)"),
            )
        }
    };
    Ok(Some(LinkRate::new(width, speed)))
}

/// Turns the parsed records into a topology: names, GUIDs and one link per cable.
fn build(nodes: Vec<RawNode>, ports: Vec<RawPort>) -> Result<Topology, ImportError> {
    if nodes.is_empty() {
        return err(1, "no `Switch` or `Ca` node in the file");
    }
    let by_id: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let mut descriptions: HashMap<&str, usize> = HashMap::new();
    for n in &nodes {
        if let Some(d) = &n.description {
            *descriptions.entry(d.as_str()).or_default() += 1;
        }
    }
    let mut topo = Topology::new();
    for n in &nodes {
        let name = match &n.description {
            Some(d) if descriptions[d.as_str()] == 1 && !by_id.contains_key(d.as_str()) => {
                d.clone()
            }
            _ => n.id.clone(),
        };
        if let Some(other) = topo.node_by_name(&name) {
            return err(
                n.line,
                format!(
                    "node name `{name}` is also the name of the node at line {}",
                    nodes[other].line
                ),
            );
        }
        let idx = topo.add_node(name, n.kind, n.ports);
        if let Some(node) = n.node_guid {
            let mut port_guids = vec![0u64; n.ports as usize + 1];
            for (&p, &g) in &n.port_guids {
                if let Some(slot) = port_guids.get_mut(p as usize) {
                    *slot = g;
                }
            }
            topo.nodes[idx].guids = Some(NodeGuids {
                node,
                system_image: n.system_image_guid.unwrap_or(node),
                ports: port_guids,
            });
        }
    }
    // Each cable once, keyed by its lower end; the other end's listing must agree.
    let mut cabled: HashMap<PortAddr, (PortAddr, usize, Option<LinkRate>)> = HashMap::new();
    for p in &ports {
        let Some(&remote) = by_id.get(p.remote_id.as_str()) else {
            return err(
                p.line,
                format!("\"{}\" is not a node of this file", p.remote_id),
            );
        };
        let r = &nodes[remote];
        if p.remote_port == 0 || p.remote_port > r.ports {
            return err(
                p.line,
                format!(
                    "port {} of \"{}\", which has ports 1..={}",
                    p.remote_port, r.id, r.ports
                ),
            );
        }
        let here = PortAddr {
            node: p.node,
            port: p.port,
        };
        let there = PortAddr {
            node: remote,
            port: p.remote_port,
        };
        if here == there {
            return err(p.line, "a port cabled to itself");
        }
        for (end, partner) in [(here, there), (there, here)] {
            if let Some(&(known, at, rate)) = cabled.get(&end) {
                if known != partner {
                    let n = |a: PortAddr| format!("\"{}\"[{}]", nodes[a.node].id, a.port);
                    return err(
                        p.line,
                        format!(
                            "{} goes to {} here, but to {} at line {at}",
                            n(end),
                            n(partner),
                            n(known)
                        ),
                    );
                }
                if let (Some(a), Some(b)) = (rate, p.rate) {
                    if a != b {
                        return err(
                            p.line,
                            format!("this cable is {b:?} here but {a:?} at line {at}"),
                        );
                    }
                }
            }
        }
        if cabled.contains_key(&here) {
            continue;
        }
        cabled.insert(here, (there, p.line, p.rate));
        cabled.insert(there, (here, p.line, p.rate));
        let link = topo.connect(here.node, here.port, there.node, there.port);
        link.rate = p.rate;
    }
    // A rate given only at the second listing of a cable still applies.
    for p in &ports {
        if let Some(rate) = p.rate {
            if let Some(l) = topo.links.iter_mut().find(|l| {
                (l.a.node == p.node && l.a.port == p.port)
                    || (l.b.node == p.node && l.b.port == p.port)
            }) {
                l.rate.get_or_insert(rate);
            }
        }
    }
    topo.validate().or_else(|e| err(1, e.to_string()))?;
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EDR: LinkRate = LinkRate {
        width: LinkWidth::X4,
        speed: LinkSpeed::Edr,
    };

    const TWO_SWITCHES: &str = "\
# ibsim style, both ends listed, no GUIDs
Switch\t8 \"Switch1\"
[1]\t\"Hca1\"[1]\t\t# lid 1 4xEDR
[3]\t\"Switch2\"[3]\tw=4

Switch 8 \"Switch2\"
[3]\t\"Switch1\"[3]

Hca\t2 \"Hca1\"
[1]\t\"Switch1\"[1]
";

    #[test]
    fn an_ibsim_net_file_gives_its_nodes_and_cables_once() {
        let t = parse(TWO_SWITCHES, EDR).unwrap();
        let names: Vec<_> = t
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.kind, n.ports))
            .collect();
        assert_eq!(
            names,
            [
                ("Switch1", NodeKind::Switch, 8),
                ("Switch2", NodeKind::Switch, 8),
                ("Hca1", NodeKind::Hca, 2)
            ]
        );
        assert_eq!(t.links.len(), 2);
        let hca_link = t
            .links
            .iter()
            .find(|l| l.b.node == 2 || l.a.node == 2)
            .unwrap();
        assert_eq!(
            hca_link.rate,
            Some(LinkRate::new(LinkWidth::X4, LinkSpeed::Edr))
        );
        assert!(t.nodes.iter().all(|n| n.guids.is_none()));
    }

    #[test]
    fn guids_and_descriptions_come_from_ibnetdiscover_lines() {
        let text = "\
vendid=0x2c9
sysimgguid=0x1111
switchguid=0xabc0(abc0)
Switch\t2 \"S-000000000000abc0\"\t\t# \"leaf\" base port 0 lid 3 lmc 0
[1]\t\"H-000000000000d000\"[1](d001) \t\t# \"node1 mlx5_0\" lid 1 4xHDR

caguid=0xd000
Ca\t1 \"H-000000000000d000\"\t\t# \"node1 mlx5_0\"
[1](d001) \t\"S-000000000000abc0\"[1]\t\t# lid 1 lmc 0 \"leaf\" lid 3 4xHDR
";
        let t = parse(text, EDR).unwrap();
        assert_eq!(t.nodes[0].name, "leaf");
        assert_eq!(t.nodes[1].name, "node1 mlx5_0");
        let sw = t.nodes[0].guids.as_ref().unwrap();
        assert_eq!(
            (sw.node, sw.system_image, sw.port(NodeKind::Switch, 2)),
            (0xabc0, 0x1111, 0xabc0)
        );
        let ca = t.nodes[1].guids.as_ref().unwrap();
        assert_eq!(
            (ca.node, ca.system_image, ca.port(NodeKind::Hca, 1)),
            (0xd000, 0xd000, 0xd001)
        );
        assert_eq!(t.links.len(), 1);
        assert_eq!(
            t.links[0].rate,
            Some(LinkRate::new(LinkWidth::X4, LinkSpeed::Hdr))
        );
    }

    #[test]
    fn shared_descriptions_fall_back_to_the_node_ids() {
        let text = "\
Switch 2 \"S-1\" # \"Mellanox Technologies Aggregation Node\"
[1] \"S-2\"[1]

Switch 2 \"S-2\" # \"Mellanox Technologies Aggregation Node\"
[1] \"S-1\"[1]
";
        let t = parse(text, EDR).unwrap();
        assert_eq!(t.nodes[0].name, "S-1");
        assert_eq!(t.nodes[1].name, "S-2");
    }

    #[test]
    fn every_error_names_its_line() {
        let cases: [(&str, usize, &str); 10] = [
            ("Switch 8 Switch1\n", 1, "double quotes"),
            ("Switch 0 \"a\"\n", 1, "port count"),
            ("Rt 2 \"r\"\n", 1, "routers"),
            ("rtguid=0x1\n", 1, "routers"),
            ("[1] \"x\"[1]\n", 1, "outside a node"),
            ("Switch 2 \"a\"\n[3] \"a\"[1]\n", 2, "ports 1..=2"),
            (
                "Switch 2 \"a\"\n[1] \"b\"[1]\n",
                2,
                "not a node of this file",
            ),
            (
                "Switch 2 \"a\"\n[1] \"b\"[1] # 4xXDR\n\nSwitch 2 \"b\"\n",
                2,
                "XDR",
            ),
            ("include other.net\n", 1, "include"),
            (
                "Switch 2 \"a\"\n[1] \"b\"[1]\n[2] \"b\"[1]\n\nSwitch 2 \"b\"\n",
                3,
                "at line 2",
            ),
        ];
        for (text, line, what) in cases {
            let e = parse(text, EDR).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
        }
        let e = parse(
            "Switch 2 \"a\"\n[1] \"b\"[1] # 4xEDR\n\nSwitch 2 \"b\"\n[1] \"a\"[1] # 4xHDR\n",
            EDR,
        )
        .unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        let e = parse("Switch 2 \"a\"\n\nSwitch 4 \"a\"\n", EDR).unwrap_err();
        assert!(e.to_string().contains("already defined at line 1"), "{e}");
        assert_eq!(parse("# nothing\n", EDR).unwrap_err().line, 1);
    }
}
