//! LID assignment and linear forwarding tables (IBA 18.2.4.3.2: a switch forwards on the DLID
//! through its LinearForwardingTable).
//!
//! LIDs are assigned densely from 1: every HCA port in node order, then one LID per switch
//! (its management port 0), with LMC 0.
//!
//! Tables are always min-hop; two engines break the ties among shortest-path ports
//! deterministically:
//! - [`RoutingEngine::MinHop`], the scheme of OpenSM's `minhop`: for each destination LID in
//!   ascending order, every switch picks the candidate port that has been given the fewest
//!   destinations so far (lowest port number on a tie). It spreads consecutive hosts of a
//!   leaf over the uplinks, but on a fat tree it sends destinations 12 LIDs apart through the
//!   same port of an aggregation switch, so shift permutations collide there.
//! - [`RoutingEngine::Ftree`], destination-mod-k in the spirit of OpenSM's `ftree`: switches
//!   are ranked by their distance from the HCAs (leaf 0, aggregation 1, ...); a switch of rank
//!   r picks candidate `(d / D_r) mod m` for destination ordinal d (its index among HCA
//!   ports), where m is its number of candidates and D_r the product of the uplink counts of
//!   the ranks below. On a k-ary fat tree every shift permutation is then contention-free.

use crate::topology::{NodeKind, PortAddr, Topology};
use std::collections::VecDeque;

/// Marks an LFT entry with no route (IBA: port 255 in a LinearForwardingTable block).
pub const NO_ROUTE: u8 = 255;

/// Who owns a LID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LidOwner {
    /// An HCA port.
    HcaPort(PortAddr),
    /// A switch (node index), reached on its port 0.
    Switch(usize),
}

/// The LID plan of a fabric.
#[derive(Clone, Debug, Default)]
pub struct Addressing {
    /// Owner of each LID; index 0 is unused (LID 0 is reserved).
    pub owners: Vec<Option<LidOwner>>,
    /// Base LID of each node's ports: `port_lid[node][port]` (0 where none).
    pub port_lid: Vec<Vec<u16>>,
    /// LID of each switch node (0 for HCAs).
    pub switch_lid: Vec<u16>,
}

impl Addressing {
    /// Assigns LIDs: HCA ports first (node order, then port order), then switches.
    pub fn assign(topo: &Topology) -> Self {
        let mut a = Addressing {
            owners: vec![None],
            port_lid: topo
                .nodes
                .iter()
                .map(|n| vec![0; n.ports as usize + 1])
                .collect(),
            switch_lid: vec![0; topo.nodes.len()],
        };
        for (i, n) in topo.nodes.iter().enumerate() {
            if n.kind == NodeKind::Hca {
                for p in 1..=n.ports {
                    a.port_lid[i][p as usize] = a.owners.len() as u16;
                    a.owners
                        .push(Some(LidOwner::HcaPort(PortAddr { node: i, port: p })));
                }
            }
        }
        for (i, n) in topo.nodes.iter().enumerate() {
            if n.kind == NodeKind::Switch {
                a.switch_lid[i] = a.owners.len() as u16;
                a.owners.push(Some(LidOwner::Switch(i)));
            }
        }
        a
    }

    /// Number of LIDs in use plus one (the LFT length).
    pub fn lid_space(&self) -> usize {
        self.owners.len()
    }

    /// The LID of an HCA port.
    pub fn lid_of(&self, at: PortAddr) -> u16 {
        self.port_lid[at.node][at.port as usize]
    }
}

/// Peer of every port: `peers[node][port]`.
pub fn peers(topo: &Topology) -> Vec<Vec<Option<PortAddr>>> {
    let mut p: Vec<Vec<Option<PortAddr>>> = topo
        .nodes
        .iter()
        .map(|n| vec![None; n.ports as usize + 1])
        .collect();
    for l in &topo.links {
        p[l.a.node][l.a.port as usize] = Some(l.b);
        p[l.b.node][l.b.port as usize] = Some(l.a);
    }
    p
}

/// How ties among shortest-path ports are broken (OpenSM's `routing_engine` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutingEngine {
    /// Least-loaded port, destinations in LID order (OpenSM `minhop`).
    #[default]
    MinHop,
    /// Destination-mod-k by switch rank (OpenSM `ftree`-like).
    Ftree,
}

/// Computes every switch's linear forwarding table: `lft[node]` is the table of a switch
/// (indexed by DLID, giving the output port, [`NO_ROUTE`] if unreachable), empty for HCAs.
pub fn compute_lfts(topo: &Topology, addr: &Addressing) -> Vec<Vec<u8>> {
    compute_lfts_with(topo, addr, RoutingEngine::MinHop)
}

/// Rank of every switch: hops to the nearest HCA minus one (leaf 0); `u16::MAX` for HCAs
/// and switches with no HCA in reach.
fn switch_ranks(topo: &Topology, peers: &[Vec<Option<PortAddr>>]) -> Vec<u16> {
    let mut rank = vec![u16::MAX; topo.nodes.len()];
    let mut queue = VecDeque::new();
    for h in topo.hcas() {
        for peer in peers[h].iter().flatten() {
            if topo.nodes[peer.node].kind == NodeKind::Switch && rank[peer.node] == u16::MAX {
                rank[peer.node] = 0;
                queue.push_back(peer.node);
            }
        }
    }
    while let Some(u) = queue.pop_front() {
        for peer in peers[u].iter().flatten() {
            let v = peer.node;
            if topo.nodes[v].kind == NodeKind::Switch && rank[v] == u16::MAX {
                rank[v] = rank[u] + 1;
                queue.push_back(v);
            }
        }
    }
    rank
}

/// Computes the tables with the given tie-breaking engine.
pub fn compute_lfts_with(
    topo: &Topology,
    addr: &Addressing,
    engine: RoutingEngine,
) -> Vec<Vec<u8>> {
    let n = topo.nodes.len();
    let peers = peers(topo);
    let switches: Vec<usize> = topo.switches().collect();
    let mut sw_index = vec![usize::MAX; n];
    for (i, &s) in switches.iter().enumerate() {
        sw_index[s] = i;
    }
    // Switch-to-switch hop counts, one BFS per switch.
    let ns = switches.len();
    let mut dist = vec![u16::MAX; ns * ns];
    let mut queue = VecDeque::new();
    for (si, &s) in switches.iter().enumerate() {
        dist[si * ns + si] = 0;
        queue.push_back(s);
        while let Some(u) = queue.pop_front() {
            let du = dist[si * ns + sw_index[u]];
            for peer in peers[u].iter().flatten() {
                let v = peer.node;
                if topo.nodes[v].kind == NodeKind::Switch && dist[si * ns + sw_index[v]] == u16::MAX
                {
                    dist[si * ns + sw_index[v]] = du + 1;
                    queue.push_back(v);
                }
            }
        }
    }
    let mut lft: Vec<Vec<u8>> = topo
        .nodes
        .iter()
        .map(|nd| match nd.kind {
            NodeKind::Switch => vec![NO_ROUTE; addr.lid_space()],
            NodeKind::Hca => Vec::new(),
        })
        .collect();
    // Ftree divisors: D_0 = 1, D_{r+1} = D_r x (most uplinks of a rank-r switch).
    let rank = switch_ranks(topo, &peers);
    let max_rank = switches
        .iter()
        .map(|&s| rank[s])
        .filter(|&r| r != u16::MAX)
        .max()
        .unwrap_or(0);
    let mut uplinks = vec![1u64; max_rank as usize + 1];
    for &s in &switches {
        if rank[s] == u16::MAX {
            continue;
        }
        let ups = peers[s]
            .iter()
            .flatten()
            .filter(|p| topo.nodes[p.node].kind == NodeKind::Switch && rank[p.node] == rank[s] + 1)
            .count() as u64;
        let r = rank[s] as usize;
        uplinks[r] = uplinks[r].max(ups.max(1));
    }
    let mut divisor = vec![1u64; max_rank as usize + 1];
    for r in 1..divisor.len() {
        divisor[r] = divisor[r - 1] * uplinks[r - 1];
    }
    let mut ordinal = 0u64;
    // Candidate ports of every switch towards each target switch, computed once per target
    // when its first LID comes up: they depend on the (switch, target) pair only, and a
    // leaf carries many LIDs (12 hosts per leaf on a 24-port fat tree).
    let mut candidates_to: Vec<Option<Candidates>> = (0..ns).map(|_| None).collect();
    // Destinations routed through each (switch, port) so far, for balancing.
    let mut load: Vec<Vec<u32>> = topo
        .nodes
        .iter()
        .map(|nd| vec![0; nd.ports as usize + 1])
        .collect();
    #[allow(clippy::needless_range_loop)] // the LID is the index into every switch's table
    for lid in 1..addr.lid_space() {
        // The switch the destination hangs off, and the port there (0 = the switch itself).
        let (target, target_port) = match addr.owners[lid] {
            Some(LidOwner::Switch(s)) => (s, 0u8),
            Some(LidOwner::HcaPort(pa)) => match peers[pa.node][pa.port as usize] {
                Some(peer) if topo.nodes[peer.node].kind == NodeKind::Switch => {
                    (peer.node, peer.port)
                }
                _ => continue, // unconnected, or cabled straight to another HCA
            },
            None => continue,
        };
        let dest_ordinal = ordinal;
        if matches!(addr.owners[lid], Some(LidOwner::HcaPort(_))) {
            ordinal += 1;
        }
        let ti = sw_index[target];
        let to_target = candidates_to[ti].get_or_insert_with(|| {
            Candidates::towards(topo, &peers, &switches, &sw_index, &dist, ti)
        });
        for (si, &s) in switches.iter().enumerate() {
            if s == target {
                lft[s][lid] = target_port;
                continue;
            }
            let candidates = to_target.of(si);
            let chosen = match engine {
                _ if candidates.is_empty() => continue,
                RoutingEngine::Ftree if rank[s] != u16::MAX => {
                    let m = candidates.len() as u64;
                    candidates[((dest_ordinal / divisor[rank[s] as usize]) % m) as usize]
                }
                _ => *candidates
                    .iter()
                    .min_by_key(|&&p| (load[s][p as usize], p))
                    .expect("non-empty"),
            };
            lft[s][lid] = chosen;
            load[s][chosen as usize] += 1;
        }
    }
    lft
}

/// Every switch's shortest-path ports towards one target switch, in port order (empty for
/// the target itself and for switches that cannot reach it).
struct Candidates {
    /// `ports[start[si]..start[si + 1]]` are switch `si`'s candidate ports.
    start: Vec<u32>,
    ports: Vec<u8>,
}

impl Candidates {
    /// The candidates towards switch `ti` (an index into `switches`), from the switch-to-
    /// switch hop counts `dist` (`ns` x `ns`, row = from).
    fn towards(
        topo: &Topology,
        peers: &[Vec<Option<PortAddr>>],
        switches: &[usize],
        sw_index: &[usize],
        dist: &[u16],
        ti: usize,
    ) -> Self {
        let ns = switches.len();
        let mut start = Vec::with_capacity(ns + 1);
        let mut ports = Vec::new();
        for (si, &s) in switches.iter().enumerate() {
            start.push(ports.len() as u32);
            let d = dist[si * ns + ti];
            if si == ti || d == u16::MAX {
                continue;
            }
            for (port, peer) in peers[s].iter().enumerate().skip(1) {
                let Some(peer) = peer else { continue };
                if topo.nodes[peer.node].kind != NodeKind::Switch {
                    continue;
                }
                if dist[sw_index[peer.node] * ns + ti] + 1 != d {
                    continue;
                }
                ports.push(port as u8);
            }
        }
        start.push(ports.len() as u32);
        Candidates { start, ports }
    }

    /// Switch `si`'s candidate ports.
    fn of(&self, si: usize) -> &[u8] {
        &self.ports[self.start[si] as usize..self.start[si + 1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Follows the tables from `src` HCA port to `dst` LID; returns the switch hops.
    fn walk(topo: &Topology, lft: &[Vec<u8>], src: usize, dst_lid: u16) -> Option<usize> {
        let peers = peers(topo);
        let mut at = peers[src][1]?;
        let mut hops = 0;
        loop {
            if topo.nodes[at.node].kind == NodeKind::Hca {
                return Some(hops);
            }
            hops += 1;
            if hops > 64 {
                return None;
            }
            let out = lft[at.node][dst_lid as usize];
            if out == NO_ROUTE || out == 0 {
                return None;
            }
            at = peers[at.node][out as usize]?;
        }
    }

    #[test]
    fn lids_are_dense_hcas_first() {
        let t = Topology::single_switch(3, 8).unwrap();
        let a = Addressing::assign(&t);
        assert_eq!(a.lid_of(PortAddr { node: 1, port: 1 }), 1);
        assert_eq!(a.lid_of(PortAddr { node: 3, port: 1 }), 3);
        assert_eq!(a.switch_lid[0], 4);
        assert_eq!(a.lid_space(), 5);
    }

    #[test]
    fn single_switch_routes_each_host_to_its_port() {
        let t = Topology::single_switch(8, 36).unwrap();
        let a = Addressing::assign(&t);
        let lft = compute_lfts(&t, &a);
        for h in 0..8u16 {
            assert_eq!(lft[0][h as usize + 1], h as u8 + 1);
        }
        assert_eq!(lft[0][a.switch_lid[0] as usize], 0);
    }

    #[test]
    fn two_level_fat_tree_is_min_hop_and_spreads_over_spines() {
        let k = 8u8;
        let t = Topology::fat_tree_2(k, 32).unwrap();
        let a = Addressing::assign(&t);
        let lft = compute_lfts(&t, &a);
        let hcas: Vec<usize> = t.hcas().collect();
        for &s in &hcas {
            for &d in &hcas {
                if s == d {
                    continue;
                }
                let lid = a.lid_of(PortAddr { node: d, port: 1 });
                let same_leaf = (s / 4) == (d / 4);
                assert_eq!(walk(&t, &lft, s, lid), Some(if same_leaf { 1 } else { 3 }));
            }
        }
        // Every leaf sends the 4 hosts of another leaf over 4 different spines.
        let leaf0 = t.node_by_name("leaf0").unwrap();
        for other in 1..8 {
            let mut ups: Vec<u8> = (0..4)
                .map(|i| lft[leaf0][(other * 4 + i + 1) as usize])
                .collect();
            ups.sort();
            assert_eq!(ups, vec![5, 6, 7, 8]);
        }
        // And each uplink carries the same number of destinations.
        let mut per_port = [0; 9];
        for &h in &hcas[4..] {
            per_port[lft[leaf0][a.lid_of(PortAddr { node: h, port: 1 }) as usize] as usize] += 1;
        }
        assert_eq!(&per_port[5..], &[7, 7, 7, 7]);
    }

    #[test]
    fn three_level_fat_tree_reaches_everyone_in_at_most_five_switches() {
        let t = Topology::fat_tree_3(4).unwrap();
        let a = Addressing::assign(&t);
        let lft = compute_lfts(&t, &a);
        let hcas: Vec<usize> = t.hcas().collect();
        assert_eq!(hcas.len(), 16);
        for &s in &hcas {
            for &d in &hcas {
                if s != d {
                    let hops = walk(&t, &lft, s, a.lid_of(PortAddr { node: d, port: 1 }));
                    let expect = if s / 2 == d / 2 {
                        1
                    } else if s / 4 == d / 4 {
                        3
                    } else {
                        5
                    };
                    assert_eq!(hops, Some(expect), "{s} -> {d}");
                }
            }
        }
    }

    /// Flows of a shift permutation crossing each directed switch-to-switch link.
    fn max_link_load(topo: &Topology, lft: &[Vec<u8>], a: &Addressing, shift: usize) -> usize {
        let peers = peers(topo);
        let hcas: Vec<usize> = topo.hcas().collect();
        let n = hcas.len();
        let mut load = std::collections::HashMap::new();
        for i in 0..n {
            let lid = a.lid_of(PortAddr {
                node: hcas[(i + shift) % n],
                port: 1,
            });
            let mut at = peers[hcas[i]][1].unwrap();
            while topo.nodes[at.node].kind == NodeKind::Switch {
                let out = lft[at.node][lid as usize];
                *load.entry((at.node, out)).or_insert(0) += 1;
                at = peers[at.node][out as usize].unwrap();
            }
        }
        load.values().copied().max().unwrap_or(0)
    }

    #[test]
    fn ftree_makes_shift_permutations_contention_free_where_minhop_collides() {
        let t = Topology::fat_tree_3(8).unwrap();
        let a = Addressing::assign(&t);
        let ftree = compute_lfts_with(&t, &a, RoutingEngine::Ftree);
        let minhop = compute_lfts_with(&t, &a, RoutingEngine::MinHop);
        let n = t.hcas().count();
        for shift in [1, 4, 16, n / 2] {
            assert_eq!(
                max_link_load(&t, &ftree, &a, shift),
                1,
                "ftree, shift {shift}"
            );
        }
        assert!(max_link_load(&t, &minhop, &a, n / 2) > 1);
        // Both are min-hop.
        let hcas: Vec<usize> = t.hcas().collect();
        for &s in &hcas[..8] {
            for &d in &hcas {
                if s != d {
                    let lid = a.lid_of(PortAddr { node: d, port: 1 });
                    assert_eq!(walk(&t, &ftree, s, lid), walk(&t, &minhop, s, lid));
                }
            }
        }
    }

    #[test]
    fn tables_are_deterministic() {
        let t = Topology::fat_tree_3(6).unwrap();
        let a = Addressing::assign(&t);
        assert_eq!(compute_lfts(&t, &a), compute_lfts(&t, &a));
    }
}
