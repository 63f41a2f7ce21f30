//! The congestion control settings each node holds (IBA vol. 1 Annex A10.4.3): what its
//! congestion control agent answers Get with, what a Set (OpenSM's CC manager,
//! `ibccconfig`) changes, and what the data plane then runs with: a switch's marking
//! (SwitchCongestionSetting, refined per port by SwitchPortCongestionSetting) and a CA's
//! reaction to BECNs (CACongestionSetting per SL and its CongestionControlTable).
//!
//! A node powers up with every setting zero (A10.4.3: Threshold 0 never marks, an empty
//! Control_Map applies no SL entry, a CCT of one 0:0 entry never delays), as a fabric no SM
//! configured for CC. A scenario's `[congestion_control]` table is the same setting on
//! every node, as OpenSM pushes it ([`NodeCc::from_opensm`]).
//!
//! Merging a Set (A10.4.3.6, A10.4.3.8): Control_Map says which fields of the MAD are
//! valid; only those are taken, the others keep the node's value, and the node's
//! Control_Map becomes the union (a field once written stays valid).

use crate::cc_switch::{
    OpensmCc, SwitchCcConfig, CONTROL_MARKING_RATE, CONTROL_THRESHOLD, CONTROL_VICTIM_MASK,
};
use crate::topology::NodeKind;
use softib_transport::cc::iba::{CaCongestionEntry, Cct, CctEntry, IbaCcConfig, PortControl};
use softib_transport::cc::OpensmCa;

/// The largest CCT a CA holds: its ControlTableCap (2) blocks of 64 entries.
pub const CA_CCT_ENTRIES: usize = softib_transport::cc::iba::CCT_MAX_ENTRIES;

/// One SwitchPortCongestionSetting element (A10.4.3.7): a port's own marking parameters,
/// used instead of the switch-wide ones while Valid is set and Control_Type is 0
/// (congestion; 1 is credit starvation, not modelled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCcSetting {
    /// Valid: the element applies.
    pub valid: bool,
    /// Control_Type: 0 congestion, 1 credit starvation.
    pub control_type: u8,
    /// Threshold (4 bits).
    pub threshold: u8,
    /// Packet_Size (64-byte blocks).
    pub packet_size: u8,
    /// Cong_Parm: the Marking_Rate for Control_Type 0.
    pub marking_rate: u16,
}

/// A switch's congestion control settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchCc {
    /// SwitchCongestionSetting: the fields Control_Map names, the others at power-on.
    pub setting: SwitchCcConfig,
    /// SwitchPortCongestionSetting of ports 0..=N.
    pub ports: Vec<PortCcSetting>,
}

impl SwitchCc {
    /// The marking parameters port `port` runs with: the switch-wide setting, with the
    /// port's own Threshold, Packet_Size and Marking_Rate when its element is valid.
    pub fn port_effective(&self, port: u8) -> SwitchCcConfig {
        let mut c = self.setting.effective();
        if let Some(p) = self.ports.get(port as usize) {
            if p.valid && p.control_type == 0 {
                c.threshold = p.threshold;
                c.packet_size = p.packet_size;
                c.marking_rate = p.marking_rate;
            }
        }
        c
    }

    /// Takes a SwitchCongestionSetting Set: the fields its Control_Map names.
    pub fn merge(&mut self, set: &SwitchCcConfig) {
        let m = set.control_map;
        let s = &mut self.setting;
        if m & CONTROL_VICTIM_MASK != 0 {
            s.victim_mask = set.victim_mask;
        }
        if m & CONTROL_THRESHOLD != 0 {
            s.threshold = set.threshold;
            s.packet_size = set.packet_size;
        }
        if m & CONTROL_MARKING_RATE != 0 {
            s.marking_rate = set.marking_rate;
        }
        s.control_map |= m;
    }

    /// Some port marks (an effective Threshold above 0).
    pub fn marks(&self) -> bool {
        (0..self.ports.len()).any(|p| self.port_effective(p as u8).threshold > 0)
    }
}

/// A CA's congestion control settings (one set for all its ports, as OpenSM writes them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaCc {
    /// Port_Control bit 0: 1 per-SL state, 0 per-QP.
    pub port_control: u16,
    /// Control_Map: the SLs whose entries are valid.
    pub control_map: u16,
    /// The CACongestionSetting entry of each SL.
    pub entries: [CaCongestionEntry; 16],
    /// CCTI_Limit of the CongestionControlTable.
    pub ccti_limit: u16,
    /// The table's storage, both blocks ([`CA_CCT_ENTRIES`] entries).
    pub cct: Vec<CctEntry>,
}

impl Default for CaCc {
    fn default() -> Self {
        CaCc {
            port_control: 0,
            control_map: 0,
            entries: [CaCongestionEntry::default(); 16],
            ccti_limit: 0,
            cct: vec![CctEntry::default(); CA_CCT_ENTRIES],
        }
    }
}

impl CaCc {
    /// The CA side of OpenSM's keys.
    pub fn from_opensm(ca: &OpensmCa) -> CaCc {
        let c = &ca.config;
        let mut out = CaCc {
            port_control: matches!(c.port_control, PortControl::Sl) as u16,
            control_map: ca.control_map.unwrap_or(u16::MAX),
            entries: c.entries,
            ccti_limit: c.cct.ccti_limit(),
            ..CaCc::default()
        };
        for (i, e) in c.cct.entries().iter().enumerate().take(CA_CCT_ENTRIES) {
            out.cct[i] = *e;
        }
        out
    }

    /// Takes a CACongestionSetting Set: Port_Control, and the entries of the SLs its
    /// Control_Map names.
    pub fn merge(&mut self, port_control: u16, control_map: u16, entries: &[CaCongestionEntry]) {
        self.port_control = port_control;
        for (sl, e) in entries.iter().enumerate().take(16) {
            if control_map & (1 << sl) != 0 {
                self.entries[sl] = *e;
            }
        }
        self.control_map |= control_map;
    }

    /// The configuration the engine's CCA runs: entries of SLs outside Control_Map are
    /// zero (never increase), the CCT is entries 0..=CCTI_Limit.
    pub fn config(&self) -> IbaCcConfig {
        let mut entries = [CaCongestionEntry::default(); 16];
        for (sl, e) in entries.iter_mut().enumerate() {
            if self.control_map & (1 << sl) != 0 {
                *e = self.entries[sl];
            }
        }
        let limit = (self.ccti_limit as usize).min(CA_CCT_ENTRIES - 1);
        IbaCcConfig {
            port_control: if self.port_control & 1 != 0 {
                PortControl::Sl
            } else {
                PortControl::Qp
            },
            entries,
            cct: Cct::new(self.cct[..=limit].to_vec()).unwrap_or_default(),
        }
    }

    /// The CA reacts to BECNs: some SL entry is valid and raises the CCTI.
    pub fn active(&self) -> bool {
        self.config().entries.iter().any(|e| e.ccti_increase > 0)
    }

    /// As OpenSM's CA keys, for the engine HCAs ([`OpensmCc::device_cc`]).
    pub fn opensm(&self) -> OpensmCc {
        OpensmCc {
            enabled: true,
            switch: SwitchCcConfig::default(),
            ca: OpensmCa {
                enabled: true,
                control_map: Some(self.control_map),
                config: self.config(),
            },
        }
    }
}

/// The congestion control settings of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeCc {
    /// A switch's.
    Switch(SwitchCc),
    /// A CA's.
    Ca(CaCc),
}

impl NodeCc {
    /// The power-on settings of a node of `kind` with `ports` ports: all zero.
    pub fn power_on(kind: NodeKind, ports: u8) -> NodeCc {
        match kind {
            NodeKind::Switch => NodeCc::Switch(SwitchCc {
                setting: SwitchCcConfig {
                    control_map: 0,
                    victim_mask: [0; 4],
                    threshold: 0,
                    packet_size: 0,
                    marking_rate: 0,
                },
                ports: vec![PortCcSetting::default(); ports as usize + 1],
            }),
            NodeKind::Hca => NodeCc::Ca(CaCc::default()),
        }
    }

    /// The settings OpenSM pushes from keys `cc` (`congestion_control FALSE`: power-on).
    pub fn from_opensm(cc: &OpensmCc, kind: NodeKind, ports: u8) -> NodeCc {
        if !cc.enabled {
            return NodeCc::power_on(kind, ports);
        }
        match kind {
            NodeKind::Switch => NodeCc::Switch(SwitchCc {
                setting: cc.switch.effective(),
                ports: vec![PortCcSetting::default(); ports as usize + 1],
            }),
            NodeKind::Hca => NodeCc::Ca(CaCc::from_opensm(&cc.ca)),
        }
    }
}

/// Every switch port's effective marking setting, one list per topology node (`cc[i]` of
/// node `i`; a CA's list is empty): what `A10Marker::for_ports` marks with.
pub fn switch_port_settings(cc: &[NodeCc]) -> Vec<Vec<SwitchCcConfig>> {
    cc.iter()
        .map(|n| match n {
            NodeCc::Switch(sw) => (0..sw.ports.len())
                .map(|p| sw.port_effective(p as u8))
                .collect(),
            NodeCc::Ca(_) => Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_takes_only_the_fields_its_control_map_names() {
        let NodeCc::Switch(mut sw) = NodeCc::power_on(NodeKind::Switch, 8) else {
            unreachable!()
        };
        assert!(!sw.marks());
        sw.merge(&SwitchCcConfig {
            control_map: CONTROL_MARKING_RATE,
            victim_mask: [0; 4],
            threshold: 9,
            packet_size: 3,
            marking_rate: 7,
        });
        assert_eq!((sw.setting.threshold, sw.setting.marking_rate), (0, 7));
        assert!(!sw.marks(), "Threshold not written: still 0");
        sw.merge(&SwitchCcConfig {
            control_map: CONTROL_THRESHOLD,
            victim_mask: [0; 4],
            threshold: 9,
            packet_size: 3,
            marking_rate: 0,
        });
        let e = sw.port_effective(2);
        assert_eq!((e.threshold, e.packet_size, e.marking_rate), (9, 3, 7));
        // A valid port element overrides port 2 only.
        sw.ports[2] = PortCcSetting {
            valid: true,
            control_type: 0,
            threshold: 0,
            packet_size: 0,
            marking_rate: 0,
        };
        assert_eq!(sw.port_effective(2).threshold, 0);
        assert_eq!(sw.port_effective(3).threshold, 9);
    }

    #[test]
    fn a_ca_set_merges_per_sl_and_the_cct_follows_its_limit() {
        let mut ca = CaCc::default();
        assert!(!ca.active());
        let e = CaCongestionEntry {
            ccti_timer: 150,
            ccti_increase: 2,
            trigger_threshold: 3,
            ccti_min: 0,
        };
        ca.merge(1, 0b10, &[e; 16]);
        let c = ca.config();
        assert_eq!(c.entries[0], CaCongestionEntry::default());
        assert_eq!(c.entries[1], e);
        assert_eq!(c.port_control, PortControl::Sl);
        assert!(ca.active());
        ca.cct[1] = CctEntry {
            shift: 1,
            multiplier: 10,
        };
        ca.ccti_limit = 1;
        assert_eq!(ca.config().cct.ccti_limit(), 1);
        assert_eq!(ca.config().cct.entry(1).multiplier, 10);
    }
}
