//! A fabric's share of a partitioned run: which nodes each partition owns, what one sends
//! another across a cut link, and the per-window steps a runner (`crate::parallel`) drives.
//!
//! Every partition holds a whole [`Fabric`] built from the same topology and settings (the
//! static tables are needed to route a packet towards another partition's switch) but runs
//! only the events of the nodes it owns; the state of the other nodes stays as built.

use super::cross::{Cross, PartitionState};
use super::{BuildError, Fabric};
use crate::packet::PacketId;
use crate::time::Picos;
use crate::topology::{NodeKind, Topology};
use std::sync::Arc;

/// Which partition owns each node, and the lookahead that follows from it.
#[derive(Clone, Debug)]
pub struct Partitioning {
    owner: Arc<[u16]>,
    parts: usize,
    lookahead: Picos,
}

impl Partitioning {
    /// Splits `topo` into `parts` partitions: each leaf switch with its hosts stays whole,
    /// the leaf groups are cut into contiguous runs of about equal port count (the nodes of
    /// a pod of a generated fat tree are contiguous), and every other switch goes where
    /// most of its already placed neighbours are, the least loaded partition on a tie. The
    /// cut links are then the ones above the leaves.
    ///
    /// `link_delay_ps` is the delay of links that do not set one. Fails if a cut link has
    /// no propagation delay (there is no lookahead across it).
    pub fn by_leaf_groups(
        topo: &Topology,
        parts: usize,
        link_delay_ps: Picos,
    ) -> Result<Self, BuildError> {
        let parts = parts.clamp(1, u16::MAX as usize);
        let n = topo.nodes.len();
        let peers = crate::routing::peers(topo);
        let neighbours = |i: usize| -> Vec<usize> {
            peers[i]
                .iter()
                .flatten()
                .map(|p| p.node)
                .collect::<Vec<_>>()
        };
        const UNSET: u16 = u16::MAX;
        let mut owner = vec![UNSET; n];
        // Groups: a leaf (a switch with hosts) with its hosts, or a host on its own.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut grouped = vec![false; n];
        for i in 0..n {
            if topo.nodes[i].kind != NodeKind::Switch {
                continue;
            }
            let hosts: Vec<usize> = neighbours(i)
                .into_iter()
                .filter(|&h| topo.nodes[h].kind == NodeKind::Hca && !grouped[h])
                .collect();
            if hosts.is_empty() {
                continue;
            }
            let mut g = vec![i];
            grouped[i] = true;
            for h in hosts {
                if !grouped[h] {
                    grouped[h] = true;
                    g.push(h);
                }
            }
            groups.push(g);
        }
        for (i, done) in grouped.iter_mut().enumerate() {
            if topo.nodes[i].kind == NodeKind::Hca && !*done {
                *done = true;
                groups.push(vec![i]);
            }
        }
        let weight = |i: usize| topo.nodes[i].ports as u64;
        let total: u64 = groups.iter().flatten().map(|&i| weight(i)).sum();
        let mut load = vec![0u64; parts];
        let mut done = 0u64;
        for g in &groups {
            let w: u64 = g.iter().map(|&i| weight(i)).sum();
            // The partition whose share of the groups' weight this group's middle falls in.
            let mid = done + w / 2;
            let p = ((mid as u128 * parts as u128) / total.max(1) as u128) as usize;
            let p = p.min(parts - 1);
            for &i in g {
                owner[i] = p as u16;
            }
            load[p] += w;
            done += w;
        }
        // The other switches, nearest the leaves first (breadth-first from the placed nodes).
        let mut frontier: Vec<usize> = (0..n).filter(|&i| owner[i] != UNSET).collect();
        while owner.contains(&UNSET) {
            let mut next: Vec<usize> = Vec::new();
            for &i in &frontier {
                for j in neighbours(i) {
                    if owner[j] == UNSET && !next.contains(&j) {
                        next.push(j);
                    }
                }
            }
            if next.is_empty() {
                // Nodes no placed node reaches: the least loaded partition.
                next.push(owner.iter().position(|&o| o == UNSET).expect("unset"));
            }
            next.sort_unstable();
            for &j in &next {
                let mut votes = vec![0u32; parts];
                for k in neighbours(j) {
                    if owner[k] != UNSET {
                        votes[owner[k] as usize] += 1;
                    }
                }
                let best = (0..parts)
                    .max_by(|&a, &b| votes[a].cmp(&votes[b]).then(load[b].cmp(&load[a])))
                    .expect("at least one partition");
                owner[j] = best as u16;
                load[best] += weight(j);
            }
            frontier = next;
        }
        Self::from_owners(topo, owner, parts, link_delay_ps)
    }

    /// A partitioning from an explicit owner per node (`owner[node]` < `parts`).
    pub fn from_owners(
        topo: &Topology,
        owner: Vec<u16>,
        parts: usize,
        link_delay_ps: Picos,
    ) -> Result<Self, BuildError> {
        if owner.len() != topo.nodes.len() || owner.iter().any(|&o| o as usize >= parts) {
            return Err(BuildError::Setting {
                key: "partitions",
                reason: format!(
                    "need one owner below {parts} for each of {} nodes",
                    topo.nodes.len()
                ),
            });
        }
        let mut lookahead = Picos::MAX;
        for l in &topo.links {
            if owner[l.a.node] != owner[l.b.node] {
                let d = l.delay_ps.unwrap_or(link_delay_ps);
                if d == 0 {
                    return Err(BuildError::Setting {
                        key: "partitions",
                        reason: format!(
                            "the link {}/{} - {}/{} crosses partitions and has no propagation delay, so there is no lookahead across it",
                            topo.nodes[l.a.node].name, l.a.port, topo.nodes[l.b.node].name, l.b.port
                        ),
                    });
                }
                lookahead = lookahead.min(d);
            }
        }
        Ok(Partitioning {
            owner: owner.into(),
            parts,
            lookahead,
        })
    }

    /// Number of partitions.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// The partition owning node `node`.
    pub fn owner(&self, node: usize) -> usize {
        self.owner[node] as usize
    }

    /// The shortest propagation delay of a link between partitions (`Picos::MAX` if none):
    /// the length of a window in which the partitions run independently.
    pub fn lookahead(&self) -> Picos {
        self.lookahead
    }
}

impl Fabric {
    /// Makes this fabric partition `me` of `partitioning`: from now on it runs only the
    /// nodes that partition owns and sends what crosses to the others to its outbox. Call
    /// before the run starts. Port taps see what the ports this partition owns send (both ends
    /// of the cable), so every partition sees its share once.
    pub fn set_partition(
        &mut self,
        partitioning: &Partitioning,
        me: usize,
    ) -> Result<(), BuildError> {
        if self.started {
            return Err(BuildError::Setting {
                key: "partitions",
                reason: "the fabric has already started".into(),
            });
        }
        if partitioning.owner.len() != self.topo.nodes.len() || me >= partitioning.parts {
            return Err(BuildError::Setting {
                key: "partitions",
                reason: "the partitioning is for another topology".into(),
            });
        }
        self.part = Some(Box::new(PartitionState {
            owner: partitioning.owner.clone(),
            me: me as u16,
            outbox: (0..partitioning.parts).map(|_| Vec::new()).collect(),
        }));
        Ok(())
    }

    /// Drops the endpoints of the HCAs another partition owns: they never run here. A
    /// caller that set up every host in every partition (so that each host's QPNs, keys
    /// and addresses come out as in a serial run) frees their memory once it has what it
    /// needs from them. Call after [`Fabric::set_partition`].
    pub fn drop_foreign_endpoints(&mut self) {
        for h in 0..self.hcas.len() {
            let node = self.ports[self.hcas[h].port as usize].node as usize;
            if !self.owns_node(node) {
                self.hcas[h].endpoint = None;
            }
        }
    }

    /// Whether this fabric runs node `node` (always, unless partitioned).
    #[inline]
    pub(super) fn owns_node(&self, node: usize) -> bool {
        self.part.as_ref().is_none_or(|p| p.owner[node] == p.me)
    }

    /// Whether this fabric runs the node called `name`.
    pub fn owns(&self, name: &str) -> bool {
        self.node_by_name(name).is_some_and(|n| self.owns_node(n))
    }

    /// The partition that owns port `r`, if it is not this one.
    #[inline]
    pub(super) fn foreign_partition(&self, r: u32) -> Option<usize> {
        let p = self.part.as_ref()?;
        let o = p.owner[self.ports[r as usize].node as usize];
        (o != p.me).then_some(o as usize)
    }

    pub(super) fn outbox(&mut self, dest: usize) -> &mut Vec<Cross> {
        &mut self.part.as_mut().expect("partitioned").outbox[dest]
    }

    /// Starts the run if it has not started (link bring-up, endpoints' first transmit).
    pub(crate) fn ensure_started(&mut self) {
        if !self.started {
            self.start();
        }
    }

    /// What was sent to other partitions since the last call, per destination.
    pub(crate) fn take_outbox(&mut self) -> Vec<Vec<Cross>> {
        match self.part.as_mut() {
            None => Vec::new(),
            Some(p) => p.outbox.iter_mut().map(std::mem::take).collect::<Vec<_>>(),
        }
    }

    /// What was sent to other partitions since the last call, per destination, as bytes
    /// (for partitions in other processes).
    pub(crate) fn take_outbox_bytes(&mut self) -> Vec<Vec<u8>> {
        self.take_outbox()
            .iter()
            .map(|msgs| {
                let mut b = Vec::new();
                super::cross_codec::encode(msgs, &mut b);
                b
            })
            .collect()
    }

    /// Takes in the bytes another partition's [`Fabric::take_outbox_bytes`] gave.
    pub(crate) fn deliver_cross_bytes(
        &mut self,
        bytes: &[u8],
    ) -> Result<(), super::cross_codec::CodecError> {
        let msgs = super::cross_codec::decode(bytes)?;
        self.deliver_cross(msgs);
        Ok(())
    }

    /// Takes in what another partition sent.
    pub(crate) fn deliver_cross(&mut self, msgs: Vec<Cross>) {
        for m in msgs {
            match m {
                Cross::Data {
                    port,
                    item,
                    arrive_at,
                    tie,
                    packet,
                } => {
                    let id: PacketId = self.pool.import(packet);
                    self.deliver_data(port, id, item, arrive_at, tie);
                }
                Cross::Fc { port, item } => {
                    // The wake this may schedule belongs to the receiving port's node.
                    self.current = self.entity_of_port(port);
                    self.deliver_fc(port, item);
                }
            }
        }
    }

    /// The time of the earliest pending event.
    pub(crate) fn next_event_time(&mut self) -> Option<Picos> {
        self.queue.peek_time()
    }

    /// Runs the events up to and including `last` (one window), without moving the clock
    /// past the last event.
    pub(crate) fn run_window(&mut self, last: Picos) {
        self.run_events(last);
    }

    /// Ends a partitioned run at `end`.
    pub(crate) fn finish_at(&mut self, end: Picos) {
        self.now = self.now.max(end);
    }
}
