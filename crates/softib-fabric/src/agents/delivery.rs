//! Delivering a MAD to the agent it is for, and its response back (IBA vol. 1 §14.2.2
//! directed-route SMPs, §14.2.1.1 LID-routed SMPs, §13.5 GMPs by LID): which node and which
//! of its ports receive the request, walked over the snapshot's cables and forwarding
//! tables. A MAD that no node would receive (a directed route through a missing or down
//! cable, a LID no one owns, a loop) gets no response, as on a fabric; the reason is returned
//! for the caller to count.

use super::mad::{self, class, method, Header, Mad, DR_INITIAL_PATH, DR_RETURN_PATH, MAX_HOPS};
use super::{cca, pma, sma, Subnet};
use crate::routing::{LidOwner, NO_ROUTE};
use crate::topology::{NodeKind, PortAddr};

/// The permissive LID (IBA §7.11.1).
pub const PERMISSIVE_LID: u16 = 0xFFFF;

/// Why a MAD got no response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dropped {
    /// The MAD is malformed (BaseVersion, D bit, hop pointer, hop count); counted.
    Malformed(&'static str),
    /// A response or trap repress: nothing answers it.
    Response,
    /// No node receives it (directed route or LID route ends nowhere).
    NoRoute,
    /// Directed-route SMPs with a LID-routed part (DrSLID/DrDLID not permissive) are not
    /// supported yet.
    DrLidRouted,
    /// No agent of this class on the destination (e.g. the SA, which needs an SM).
    NoAgent(u8),
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::Malformed(why) => write!(f, "malformed MAD: {why}"),
            Dropped::Response => write!(f, "response or trap repress: nothing to answer"),
            Dropped::NoRoute => write!(f, "no node receives it (route ends nowhere)"),
            Dropped::DrLidRouted => write!(f, "directed route with a LID-routed part"),
            Dropped::NoAgent(c) => write!(f, "no agent for management class {c:#04x}"),
        }
    }
}

/// Delivers request `m`, sent from the port `from` to `dlid` (the LRH DLID: permissive for
/// a directed-route SMP), and returns the response to hand back to the sender.
pub fn deliver(
    subnet: &mut Subnet,
    from: PortAddr,
    dlid: u16,
    m: &Mad,
) -> Result<Box<Mad>, Dropped> {
    let h = Header::parse(m);
    if h.base_version != 1 {
        return Err(Dropped::Malformed("BaseVersion is not 1"));
    }
    if h.response || h.method == method::TRAP_REPRESS {
        return Err(Dropped::Response);
    }
    let mut r = Box::new(*m);
    let st = match h.class {
        class::SUBN_DIRECTED_ROUTE => {
            let (node, in_port) = directed_route(subnet, from, &mut r)?;
            sma::answer(subnet, node, in_port, &mut r)
        }
        class::SUBN_LID_ROUTED => {
            let (node, in_port) = lid_route(subnet, from, dlid).ok_or(Dropped::NoRoute)?;
            sma::answer(subnet, node, in_port, &mut r)
        }
        class::PERF_MGT => {
            let (node, in_port) = lid_route(subnet, from, dlid).ok_or(Dropped::NoRoute)?;
            pma::answer(subnet, node, in_port, &mut r)
        }
        cca::CLASS_CONGESTION_CONTROL => {
            let (node, _) = lid_route(subnet, from, dlid).ok_or(Dropped::NoRoute)?;
            cca::answer(subnet, node, &mut r)
        }
        c => return Err(Dropped::NoAgent(c)),
    };
    mad::make_response(&mut r, st);
    Ok(r)
}

/// Walks a directed-route SMP's InitialPath from `from` (IBA §14.2.2.2), filling its
/// ReturnPath with the receiving port of each hop; returns the destination node and the port
/// it received the SMP on. The response as the requester gets it has the hop pointer back
/// at 0 (§14.2.2.4).
fn directed_route(subnet: &Subnet, from: PortAddr, m: &mut Mad) -> Result<(usize, u8), Dropped> {
    if m[4] & 0x80 != 0 {
        return Err(Dropped::Malformed("D bit set in a request"));
    }
    if m[6] != 0 {
        return Err(Dropped::Malformed("hop pointer of a new request is not 0"));
    }
    let hops = m[7] & 0x3f;
    if m[7] > MAX_HOPS {
        return Err(Dropped::Malformed("hop count above 63"));
    }
    let dr_slid = u16::from_be_bytes([m[32], m[33]]);
    let dr_dlid = u16::from_be_bytes([m[34], m[35]]);
    if dr_slid != PERMISSIVE_LID || dr_dlid != PERMISSIVE_LID {
        return Err(Dropped::DrLidRouted);
    }
    let (mut node, mut in_port) = (from.node, from.port);
    for i in 1..=hops as usize {
        let n = &subnet.nodes[node];
        // A CA does not forward (IBA §14.2.2.2): only the first hop may leave a CA.
        if n.kind == NodeKind::Hca && i > 1 {
            return Err(Dropped::NoRoute);
        }
        let out = m[DR_INITIAL_PATH + i];
        let pv = n.ports.get(out as usize).filter(|_| out != 0);
        let peer = pv
            .filter(|p| p.link_up)
            .and_then(|p| p.peer)
            .ok_or(Dropped::NoRoute)?;
        m[DR_RETURN_PATH + i] = peer.port;
        node = peer.node;
        in_port = peer.port;
    }
    m[6] = 0;
    Ok((node, in_port))
}

/// Follows the forwarding tables from `from` to the owner of `dlid` (IBA §18.2.4.3.2);
/// returns the destination node and its receiving port (0 for a switch's own LID).
pub fn lid_route(subnet: &Subnet, from: PortAddr, dlid: u16) -> Option<(usize, u8)> {
    match subnet
        .addressing
        .owners
        .get(dlid as usize)
        .copied()
        .flatten()?
    {
        LidOwner::HcaPort(p) if p == from => return Some((p.node, p.port)),
        _ => {}
    }
    let src = &subnet.nodes[from.node];
    if src.kind == NodeKind::Switch {
        // A switch's own agent sends from port 0: start with its own table.
        return walk_switches(subnet, from.node, 0, dlid);
    }
    let pv = src.ports.get(from.port as usize)?;
    let peer = pv.peer.filter(|_| pv.link_up)?;
    match subnet.nodes[peer.node].kind {
        NodeKind::Hca => {
            let owner = subnet
                .addressing
                .owners
                .get(dlid as usize)
                .copied()
                .flatten()?;
            (owner == LidOwner::HcaPort(peer)).then_some((peer.node, peer.port))
        }
        NodeKind::Switch => walk_switches(subnet, peer.node, peer.port, dlid),
    }
}

fn walk_switches(
    subnet: &Subnet,
    mut node: usize,
    mut in_port: u8,
    dlid: u16,
) -> Option<(usize, u8)> {
    for _ in 0..=MAX_HOPS {
        let n = &subnet.nodes[node];
        if n.kind == NodeKind::Hca {
            let owner = subnet
                .addressing
                .owners
                .get(dlid as usize)
                .copied()
                .flatten()?;
            let me = PortAddr {
                node,
                port: in_port,
            };
            return (owner == LidOwner::HcaPort(me)).then_some((node, in_port));
        }
        if subnet.addressing.switch_lid[node] == dlid {
            return Some((node, in_port));
        }
        let out = *n.lft.get(dlid as usize)?;
        if out == NO_ROUTE || out == 0 {
            return None;
        }
        let pv = n.ports.get(out as usize)?;
        let peer = pv.peer.filter(|_| pv.link_up)?;
        node = peer.node;
        in_port = peer.port;
    }
    None
}
