//! The congestion control agent of a node (IBA vol. 1 Annex A10.4, management class 0x21,
//! class version 2): Get of ClassPortInfo, CongestionInfo, CongestionKeyInfo, CongestionLog
//! (switches), SwitchCongestionSetting, SwitchPortCongestionSetting, CACongestionSetting,
//! CongestionControlTable and Timestamp, as `ibccquery` asks for them; Set of the four
//! settings, as OpenSM's CC manager and `ibccconfig` write them.
//!
//! The values are the node's settings ([`crate::cc_state`]): the scenario's
//! `[congestion_control]` table in OpenSM's keys (what OpenSM would have pushed), the
//! power-on zeros without it or for a fabric held for an external SM, and then whatever an
//! SM's Sets wrote. With an external SM the data plane runs what the SM wrote
//! ([`crate::fabric::Fabric::program_subnet`]): the switches mark, and the CAs react to
//! BECNs, as their agents say. On a fabric frozen after its run a Set changes the served
//! settings only (the run is over).
//!
//! The CC MAD carries its attribute at byte 64 (after the common header, the CC_Key at 24
//! and 32 reserved bytes), except CongestionLog, which starts at byte 32 (A10.4.1). The
//! CC_Key is not checked (the agents hold key 0, unprotected). A switch's CongestionLog
//! reports how many packets its ports marked (LogEventsCounter, saturating at 16 bits) and
//! which ports marked (PortMap); the model counts marks per port but does not keep the
//! per-event SLID/DLID/timestamp entries, so the 15 entries are empty. A CA's
//! CongestionLog (the BECNs its QPs received) is not modelled: the fabric does not see the
//! engine's CN events, and the agent answers 0x0C rather than an invented empty log.

use super::mad::{method, put_u16, put_u32, status, Header, Mad, MAD_LEN};
use super::Subnet;
use crate::cc_state::{NodeCc, PortCcSetting, CA_CCT_ENTRIES};
use crate::cc_switch::SwitchCcConfig;
use crate::topology::NodeKind;
use softib_transport::cc::iba::{CaCongestionEntry, CctEntry};

/// Management class of congestion control (IBA A10.4.1).
pub const CLASS_CONGESTION_CONTROL: u8 = 0x21;

/// The class version this agent speaks (A10.4.1).
pub const CC_CLASS_VERSION: u8 = 2;

/// Congestion control attribute IDs (IBA A10.4.3, Table A10-4).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// CongestionInfo.
    pub const CONGESTION_INFO: u16 = 0x0011;
    /// CongestionKeyInfo.
    pub const CONGESTION_KEY_INFO: u16 = 0x0012;
    /// CongestionLog.
    pub const CONGESTION_LOG: u16 = 0x0013;
    /// SwitchCongestionSetting.
    pub const SWITCH_CONGESTION_SETTING: u16 = 0x0014;
    /// SwitchPortCongestionSetting.
    pub const SWITCH_PORT_CONGESTION_SETTING: u16 = 0x0015;
    /// CACongestionSetting.
    pub const CA_CONGESTION_SETTING: u16 = 0x0016;
    /// CongestionControlTable.
    pub const CONGESTION_CONTROL_TABLE: u16 = 0x0017;
    /// Timestamp.
    pub const TIMESTAMP: u16 = 0x0018;
}

/// Where a CC MAD's attribute data starts (A10.4.1).
const CC_DATA: usize = 64;
/// Where CongestionLog's data starts: the log data area after the CC_Key (A10.4.1).
const CC_LOG_DATA: usize = 32;

/// CCT entries per CongestionControlTable block (A10.4.3.9).
const CCT_BLOCK_ENTRIES: usize = 64;

/// ControlTableCap of a CA: 64-entry CCT blocks it holds (the engine's 128 entries).
const CA_CONTROL_TABLE_CAP: u8 =
    (softib_transport::cc::iba::CCT_MAX_ENTRIES / CCT_BLOCK_ENTRIES) as u8;

/// Switch ports per SwitchPortCongestionSetting block (A10.4.3.7).
const PORTS_PER_BLOCK: usize = 32;

/// One Timestamp / CurrentTimeStamp unit: 1.024 us (A10.4.3.10), in picoseconds.
const TIMESTAMP_UNIT_PS: u64 = 1_024_000;

/// Answers congestion control MAD `m` at node `node`; returns the status. A Set is taken
/// into the node's settings first and answered, as IBA §13.4.6.2 asks, with the
/// attribute's new value.
pub fn answer(subnet: &mut Subnet, node: usize, m: &mut Mad) -> u16 {
    let h = Header::parse(m);
    if h.class_version != CC_CLASS_VERSION {
        return status::BAD_VERSION;
    }
    match h.method {
        method::GET => {}
        method::SET => {
            let st = set(subnet, node, &h, m);
            if st != status::OK {
                return st;
            }
        }
        _ => return status::METHOD_UNSUPPORTED,
    }
    let n = &subnet.nodes[node];
    let switch = n.kind == NodeKind::Switch;
    let cc = &subnet.cc_nodes[node];
    let mut out = [0u8; 224];
    let mut at = CC_DATA;
    let st = match (h.attr_id, cc) {
        (attr::CLASS_PORT_INFO, _) => {
            out[0] = 1; // BaseVersion
            out[1] = CC_CLASS_VERSION;
            put_u32(&mut out, 4, 18); // CapabilityMask2 0, RespTimeValue 18
            status::OK
        }
        (attr::CONGESTION_INFO, _) => {
            // CongestionInfo bit 0 (credit starvation) is 0: not modelled.
            out[2] = if switch { 0 } else { CA_CONTROL_TABLE_CAP };
            status::OK
        }
        // CC_Key 0, not protected, no lease, no violations: the simulated fabric has no keys.
        (attr::CONGESTION_KEY_INFO, _) => status::OK,
        (attr::CONGESTION_LOG, NodeCc::Switch(_)) => {
            at = CC_LOG_DATA;
            out[0] = 1; // LogType: switch
            let mut events = 0u64;
            for (p, port) in n.ports.iter().enumerate().skip(1) {
                if port.counters.fecn_marked > 0 {
                    events += port.counters.fecn_marked;
                    // PortMap: bit p of a 256-bit big-endian map at byte 8.
                    out[8 + 31 - p / 8] |= 1 << (p % 8);
                }
            }
            put_u16(&mut out, 2, events.min(u16::MAX as u64) as u16);
            put_u32(&mut out, 4, timestamp(subnet));
            status::OK
        }
        (attr::SWITCH_CONGESTION_SETTING, NodeCc::Switch(sw)) => {
            let s = &sw.setting;
            put_u32(&mut out, 0, s.control_map);
            // Victim_Mask: 256 bits, port 255 first (big-endian), at byte 4.
            for (word, bits) in s.victim_mask.iter().enumerate() {
                let start = 4 + 32 - 8 * (word + 1);
                out[start..start + 8].copy_from_slice(&bits.to_be_bytes());
            }
            // Credit_Mask (bytes 36..68) stays 0: credit starvation is not modelled.
            out[68] = s.threshold << 4;
            out[69] = s.packet_size;
            put_u16(&mut out, 74, s.marking_rate);
            status::OK
        }
        (attr::SWITCH_PORT_CONGESTION_SETTING, NodeCc::Switch(sw)) => {
            let first = h.attr_mod as usize * PORTS_PER_BLOCK;
            if first >= sw.ports.len() {
                status::INVALID_FIELD
            } else {
                for (i, p) in sw
                    .ports
                    .iter()
                    .skip(first)
                    .take(PORTS_PER_BLOCK)
                    .enumerate()
                {
                    let o = 4 * i;
                    out[o] = (p.valid as u8) << 7 | (p.control_type & 1) << 6 | p.threshold & 0xF;
                    out[o + 1] = p.packet_size;
                    put_u16(&mut out, o + 2, p.marking_rate);
                }
                status::OK
            }
        }
        (attr::CA_CONGESTION_SETTING, NodeCc::Ca(ca)) => {
            put_u16(&mut out, 0, ca.port_control);
            put_u16(&mut out, 2, ca.control_map);
            for (sl, e) in ca.entries.iter().enumerate() {
                let o = 4 + sl * 8;
                put_u16(&mut out, o, e.ccti_timer);
                out[o + 2] = e.ccti_increase;
                out[o + 3] = e.trigger_threshold;
                out[o + 4] = e.ccti_min;
            }
            status::OK
        }
        (attr::CONGESTION_CONTROL_TABLE, NodeCc::Ca(ca)) => {
            let block = h.attr_mod as usize;
            if block >= CA_CONTROL_TABLE_CAP as usize {
                status::INVALID_FIELD
            } else {
                put_u16(&mut out, 0, ca.ccti_limit);
                // Entries beyond CCTI_Limit are not part of the table (A10.4.3.9): 0.
                let entries = ca.cct.iter().enumerate().take(ca.ccti_limit as usize + 1);
                for (i, e) in entries
                    .skip(block * CCT_BLOCK_ENTRIES)
                    .take(CCT_BLOCK_ENTRIES)
                {
                    put_u16(
                        &mut out,
                        4 + 2 * (i - block * CCT_BLOCK_ENTRIES),
                        ((e.shift as u16) << 14) | (e.multiplier & 0x3FFF),
                    );
                }
                status::OK
            }
        }
        (attr::TIMESTAMP, _) => {
            put_u32(&mut out, 0, timestamp(subnet));
            status::OK
        }
        _ => status::METHOD_ATTR_UNSUPPORTED,
    };
    if st == status::OK {
        let len = MAD_LEN - at;
        m[at..].copy_from_slice(&out[..len]);
    }
    st
}

fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

/// Takes a Set into node `node`'s settings (nothing changes unless the whole Set is valid);
/// returns the status. Settable: SwitchCongestionSetting (the fields its Control_Map names;
/// Credit_Mask and the CS_* fields are not modelled and ignored),
/// SwitchPortCongestionSetting (a block of 32 ports, the ports the switch lacks ignored),
/// CACongestionSetting (the SL entries its Control_Map names) and a CongestionControlTable
/// block (CCTI_Limit at most 127, the table's 128 entries). The rest are read-only: 0x0C.
fn set(subnet: &mut Subnet, node: usize, h: &Header, m: &Mad) -> u16 {
    let d = &m[CC_DATA..];
    match (h.attr_id, &mut subnet.cc_nodes[node]) {
        (attr::SWITCH_CONGESTION_SETTING, NodeCc::Switch(sw)) => {
            let mut mask = [0u64; 4];
            for (word, bits) in mask.iter_mut().enumerate() {
                let start = 4 + 32 - 8 * (word + 1);
                *bits = u64::from_be_bytes(d[start..start + 8].try_into().expect("8 bytes"));
            }
            sw.merge(&SwitchCcConfig {
                control_map: u32::from_be_bytes([d[0], d[1], d[2], d[3]]),
                victim_mask: mask,
                threshold: d[68] >> 4,
                packet_size: d[69],
                marking_rate: be16(d, 74),
            });
            status::OK
        }
        (attr::SWITCH_PORT_CONGESTION_SETTING, NodeCc::Switch(sw)) => {
            let first = h.attr_mod as usize * PORTS_PER_BLOCK;
            if first >= sw.ports.len() {
                return status::INVALID_FIELD;
            }
            for (i, p) in sw
                .ports
                .iter_mut()
                .skip(first)
                .take(PORTS_PER_BLOCK)
                .enumerate()
            {
                let o = 4 * i;
                *p = PortCcSetting {
                    valid: d[o] & 0x80 != 0,
                    control_type: (d[o] >> 6) & 1,
                    threshold: d[o] & 0xF,
                    packet_size: d[o + 1],
                    marking_rate: be16(d, o + 2),
                };
            }
            status::OK
        }
        (attr::CA_CONGESTION_SETTING, NodeCc::Ca(ca)) => {
            let entries: Vec<CaCongestionEntry> = (0..16)
                .map(|sl| {
                    let o = 4 + sl * 8;
                    CaCongestionEntry {
                        ccti_timer: be16(d, o),
                        ccti_increase: d[o + 2],
                        trigger_threshold: d[o + 3],
                        ccti_min: d[o + 4],
                    }
                })
                .collect();
            ca.merge(be16(d, 0), be16(d, 2), &entries);
            status::OK
        }
        (attr::CONGESTION_CONTROL_TABLE, NodeCc::Ca(ca)) => {
            let block = h.attr_mod as usize;
            let limit = be16(d, 0);
            if block >= CA_CONTROL_TABLE_CAP as usize || limit as usize >= CA_CCT_ENTRIES {
                return status::INVALID_FIELD;
            }
            for i in 0..CCT_BLOCK_ENTRIES {
                let v = be16(d, 4 + 2 * i);
                ca.cct[block * CCT_BLOCK_ENTRIES + i] = CctEntry {
                    shift: (v >> 14) as u8,
                    multiplier: v & 0x3FFF,
                };
            }
            ca.ccti_limit = limit;
            status::OK
        }
        _ => status::METHOD_ATTR_UNSUPPORTED,
    }
}

/// The snapshot's instant in 1.024 us units, wrapping at 32 bits as the counter does.
fn timestamp(subnet: &Subnet) -> u32 {
    (subnet.at / TIMESTAMP_UNIT_PS) as u32
}
