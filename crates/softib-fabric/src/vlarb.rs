//! VL arbitration at an output port (IBA 7.6.9).
//!
//! VL15 always goes first. Data VLs are served from two tables of up to 64 (VL, weight)
//! entries, high and low priority. Within a table the arbiter stays on the current entry while
//! its VL can send and its weight (64-byte units) is not used up; a packet that overruns the
//! remaining weight is still sent whole; an entry whose VL cannot send, or whose weight is 0,
//! is skipped and its remaining weight forfeited. The high table is preferred, but once it has
//! sent Limit of High Priority x 4096 bytes (counted in 64-byte units, the last packet
//! completing) a ready low-priority packet gets one turn, after which the count restarts. A
//! limit of 0 lets one high-priority packet through per turn; 255 never yields to low
//! priority.

/// The management virtual lane.
pub const VL15: u8 = 15;
/// Entries per arbitration table (IBA 7.6.9: VLArbitrationTable has up to 64 entries).
pub const MAX_ENTRIES: usize = 64;
/// The Limit of High Priority that means "unbounded".
pub const HIGH_LIMIT_UNBOUNDED: u8 = 255;

/// One arbitration table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArbEntry {
    /// Data VL (0..=14).
    pub vl: u8,
    /// Weight in 64-byte units; 0 means the entry is skipped.
    pub weight: u8,
}

/// The arbitration configuration of one output port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VlArbConfig {
    /// High-priority table.
    pub high: Vec<ArbEntry>,
    /// Low-priority table.
    pub low: Vec<ArbEntry>,
    /// Limit of High Priority, in 4096-byte units; 255 = unbounded.
    pub high_limit: u8,
}

impl VlArbConfig {
    /// One data VL, served from the low table: what a port with a single data VL uses.
    pub fn single_vl() -> Self {
        VlArbConfig {
            high: Vec::new(),
            low: vec![ArbEntry { vl: 0, weight: 255 }],
            high_limit: 0,
        }
    }
}

/// Which table a grant came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// VL15, outside both tables.
    Management,
    /// The high-priority table, at this entry index.
    High(usize),
    /// The low-priority table, at this entry index.
    Low(usize),
}

/// The arbiter's decision: send the head packet of `vl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// VL to send from.
    pub vl: u8,
    /// Where the grant came from.
    pub table: Table,
}

#[derive(Clone, Copy, Debug, Default)]
struct TableState {
    cursor: usize,
    remaining: u32,
    /// Whether `remaining` belongs to the entry at `cursor` (false after a skip or at start).
    active: bool,
}

impl TableState {
    /// The entry that would be served given `ready` (bit per VL), without changing state.
    fn peek(&self, entries: &[ArbEntry], ready: u16) -> Option<usize> {
        if entries.is_empty() {
            return None;
        }
        let cur = self.cursor.min(entries.len() - 1);
        if self.active && self.remaining > 0 && ready & (1 << entries[cur].vl) != 0 {
            return Some(cur);
        }
        // Next entries in order, wrapping back to the current one with a fresh weight.
        (1..=entries.len())
            .map(|k| (cur + k) % entries.len())
            .find(|&i| entries[i].weight > 0 && ready & (1 << entries[i].vl) != 0)
    }

    fn commit(&mut self, entries: &[ArbEntry], index: usize, units: u32) {
        if !(self.active && self.cursor == index && self.remaining > 0) {
            self.cursor = index;
            self.remaining = entries[index].weight as u32;
            self.active = true;
        }
        self.remaining = self.remaining.saturating_sub(units);
    }
}

/// Arbitration state of one output port.
#[derive(Clone, Debug)]
pub struct VlArbiter {
    config: VlArbConfig,
    high: TableState,
    low: TableState,
    high_units: u32,
    /// Data VLs named in a table with non-zero weight (others can never be sent).
    served: u16,
    /// When a single low-priority entry (index, VL) is the only one with a weight (the
    /// one-VL configuration without QoS), the choice depends on nothing but whether that VL
    /// is ready: `select` and `commit` then skip the tables, which live in their own heap
    /// allocations, a cache miss per decision on a large fabric.
    solo: Option<(usize, u8)>,
}

impl VlArbiter {
    /// An arbiter with `config`; entries beyond 64 and VLs above 14 are ignored.
    pub fn new(mut config: VlArbConfig) -> Self {
        config.high.truncate(MAX_ENTRIES);
        config.low.truncate(MAX_ENTRIES);
        config.high.retain(|e| e.vl < VL15);
        config.low.retain(|e| e.vl < VL15);
        let served = config
            .high
            .iter()
            .chain(config.low.iter())
            .filter(|e| e.weight > 0)
            .fold(0u16, |m, e| m | 1 << e.vl);
        let weighted = |t: &[ArbEntry]| {
            t.iter()
                .enumerate()
                .filter(|(_, e)| e.weight > 0)
                .map(|(i, e)| (i, e.vl))
                .collect::<Vec<_>>()
        };
        let solo = match (
            weighted(&config.high).len(),
            weighted(&config.low).as_slice(),
        ) {
            (0, &[only]) => Some(only),
            _ => None,
        };
        VlArbiter {
            config,
            high: TableState::default(),
            low: TableState::default(),
            high_units: 0,
            served,
            solo,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &VlArbConfig {
        &self.config
    }

    /// Bit mask of data VLs that some table entry can serve.
    pub fn served_vls(&self) -> u16 {
        self.served
    }

    /// Chooses the VL to send next. `ready` has bit `v` set when VL `v` has a packet that may
    /// go now (queued, credits available); bit 15 is VL15.
    pub fn select(&self, ready: u16) -> Option<Grant> {
        if ready & (1 << VL15) != 0 {
            return Some(Grant {
                vl: VL15,
                table: Table::Management,
            });
        }
        if let Some((index, vl)) = self.solo {
            // Entries without weight are never chosen, so the table state cannot matter.
            return (ready & (1 << vl) != 0).then_some(Grant {
                vl,
                table: Table::Low(index),
            });
        }
        let high = self.high.peek(&self.config.high, ready);
        let low = self.low.peek(&self.config.low, ready);
        let limit = self.config.high_limit;
        let high_may = limit == HIGH_LIMIT_UNBOUNDED
            || self.high_units == 0
            || self.high_units < limit as u32 * (4096 / 64);
        match (high, low) {
            (Some(h), None) => Some(self.grant_high(h)),
            (Some(h), Some(_)) if high_may => Some(self.grant_high(h)),
            (_, Some(l)) => Some(Grant {
                vl: self.config.low[l].vl,
                table: Table::Low(l),
            }),
            (None, None) => None,
        }
    }

    fn grant_high(&self, index: usize) -> Grant {
        Grant {
            vl: self.config.high[index].vl,
            table: Table::High(index),
        }
    }

    /// Records that the granted packet of `units` 64-byte blocks was sent.
    pub fn commit(&mut self, grant: Grant, units: u16) {
        let units = units as u32;
        match grant.table {
            Table::Management => {}
            Table::High(i) => {
                if self.high_units >= self.limit_units() {
                    // Low priority had its opportunity (nothing was ready): start a new count.
                    self.high_units = 0;
                }
                self.high.commit(&self.config.high, i, units);
                self.high_units += units;
            }
            Table::Low(i) => {
                if self.solo.is_none() {
                    self.low.commit(&self.config.low, i, units);
                }
                self.high_units = 0;
            }
        }
    }

    fn limit_units(&self) -> u32 {
        match self.config.high_limit {
            HIGH_LIMIT_UNBOUNDED => u32::MAX,
            0 => 1,
            l => l as u32 * 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(vl: u8, weight: u8) -> ArbEntry {
        ArbEntry { vl, weight }
    }

    /// Runs a saturated port (every VL in `ready` always has packets of `units`) for `n`
    /// grants and returns the units sent per VL.
    fn saturate(arb: &mut VlArbiter, ready: u16, units: u16, n: usize) -> [u64; 16] {
        let mut sent = [0u64; 16];
        for _ in 0..n {
            let g = arb.select(ready).expect("saturated port always sends");
            arb.commit(g, units);
            sent[g.vl as usize] += units as u64;
        }
        sent
    }

    #[test]
    fn a_single_weighted_entry_decides_like_the_tables() {
        // One weighted low entry among zero-weight ones: the shortcut must grant exactly what
        // walking the tables grants, whatever is ready.
        let config = VlArbConfig {
            high: vec![e(1, 0), e(2, 0)],
            low: vec![e(0, 0), e(3, 10), e(5, 0)],
            high_limit: 0,
        };
        let mut fast = VlArbiter::new(config.clone());
        assert_eq!(fast.solo, Some((1, 3)));
        let mut slow = VlArbiter::new(config);
        slow.solo = None;
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let ready = (x & 0xffff) as u16 & 0b1000_0000_0010_1111;
            let (g, h) = (fast.select(ready), slow.select(ready));
            assert_eq!(g, h, "ready {ready:#b}");
            if let Some(g) = g {
                let units = 1 + (x >> 20) as u16 % 70;
                fast.commit(g, units);
                slow.commit(g, units);
            }
        }
        assert_eq!(VlArbiter::new(VlArbConfig::single_vl()).solo, Some((0, 0)));
        let two = VlArbConfig {
            high: vec![],
            low: vec![e(0, 1), e(1, 1)],
            high_limit: 0,
        };
        assert_eq!(VlArbiter::new(two).solo, None);
    }

    #[test]
    fn weights_share_a_saturated_port_in_proportion() {
        // VL0 weight 200, VL1 weight 100, VL2 weight 50; packets of 5 units.
        // Per round: VL0 sends ceil(200/5)=40 packets, VL1 20, VL2 10.
        let mut arb = VlArbiter::new(VlArbConfig {
            high: vec![],
            low: vec![e(0, 200), e(1, 100), e(2, 50)],
            high_limit: 0,
        });
        let sent = saturate(&mut arb, 0b111, 5, 70 * 100);
        assert_eq!(sent[0], 100 * 40 * 5);
        assert_eq!(sent[1], 100 * 20 * 5);
        assert_eq!(sent[2], 100 * 10 * 5);
    }

    #[test]
    fn a_packet_overrunning_the_weight_is_sent_whole() {
        // Weight 3 units, packets of 65 units (4 KiB MTU): one packet per turn each, so equal
        // shares even with unequal weights as long as both are below one packet.
        let mut arb = VlArbiter::new(VlArbConfig {
            high: vec![],
            low: vec![e(0, 3), e(1, 64)],
            high_limit: 0,
        });
        let sent = saturate(&mut arb, 0b11, 65, 1000);
        assert_eq!(sent[0], sent[1]);
    }

    #[test]
    fn idle_vl_forfeits_its_turn_and_others_use_the_port() {
        let mut arb = VlArbiter::new(VlArbConfig {
            high: vec![],
            low: vec![e(0, 10), e(1, 10)],
            high_limit: 0,
        });
        let sent = saturate(&mut arb, 0b10, 5, 100);
        assert_eq!(sent[1], 500);
        assert_eq!(sent[0], 0);
    }

    #[test]
    fn high_priority_preempts_within_its_limit() {
        // Limit 1 = 4096 bytes = 64 units. High packets of 16 units: 4 per turn, then one low.
        let mut arb = VlArbiter::new(VlArbConfig {
            high: vec![e(1, 255)],
            low: vec![e(0, 255)],
            high_limit: 1,
        });
        let mut seq = Vec::new();
        for _ in 0..10 {
            let g = arb.select(0b11).unwrap();
            arb.commit(g, 16);
            seq.push(g.vl);
        }
        assert_eq!(seq, vec![1, 1, 1, 1, 0, 1, 1, 1, 1, 0]);
    }

    #[test]
    fn limit_zero_lets_one_high_packet_per_low_turn() {
        let mut arb = VlArbiter::new(VlArbConfig {
            high: vec![e(1, 255)],
            low: vec![e(0, 255)],
            high_limit: 0,
        });
        let seq: Vec<u8> = (0..6)
            .map(|_| {
                let g = arb.select(0b11).unwrap();
                arb.commit(g, 65);
                g.vl
            })
            .collect();
        assert_eq!(seq, vec![1, 0, 1, 0, 1, 0]);
    }

    #[test]
    fn limit_255_starves_low_priority() {
        let mut arb = VlArbiter::new(VlArbConfig {
            high: vec![e(1, 1)],
            low: vec![e(0, 255)],
            high_limit: HIGH_LIMIT_UNBOUNDED,
        });
        let sent = saturate(&mut arb, 0b11, 65, 10_000);
        assert_eq!(sent[0], 0);
        assert_eq!(sent[1], 650_000);
        // Once high priority has nothing, low goes.
        assert_eq!(arb.select(0b01).map(|g| g.vl), Some(0));
    }

    #[test]
    fn high_keeps_going_past_its_limit_when_low_has_nothing() {
        let mut arb = VlArbiter::new(VlArbConfig {
            high: vec![e(1, 255)],
            low: vec![e(0, 255)],
            high_limit: 1,
        });
        for _ in 0..10 {
            let g = arb.select(0b10).unwrap();
            assert_eq!(g.vl, 1);
            arb.commit(g, 65);
        }
        // Low becomes ready: high has used its limit in the current turn, so low goes next,
        // then high again.
        let g = arb.select(0b11).unwrap();
        assert_eq!(g.vl, 0);
        arb.commit(g, 65);
        assert_eq!(arb.select(0b11).unwrap().vl, 1);
    }

    #[test]
    fn vl15_always_first_and_unlisted_vls_never_sent() {
        let arb = VlArbiter::new(VlArbConfig {
            high: vec![e(1, 255)],
            low: vec![e(0, 255)],
            high_limit: 255,
        });
        assert_eq!(arb.select(0x8003).unwrap().vl, VL15);
        assert_eq!(arb.select(0b100), None);
        assert_eq!(arb.served_vls(), 0b11);
    }
}
