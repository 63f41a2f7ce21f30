//! The congestion control agent of a node (IBA vol. 1 Annex A10.4, management class 0x21,
//! class version 2): Get of ClassPortInfo, CongestionInfo, CongestionKeyInfo, CongestionLog
//! (switches), SwitchCongestionSetting, SwitchPortCongestionSetting, CACongestionSetting,
//! CongestionControlTable and Timestamp, as `ibccquery` asks for them.
//!
//! The values are the congestion control the simulated fabric runs with: the scenario's
//! `[congestion_control]` table in OpenSM's keys, which is what OpenSM would have pushed.
//! Without it, or with `congestion_control = false`, the agents report the power-on
//! values (every setting zero: no marking, no rate control), as a fabric no SM configured
//! for CC does.
//!
//! The CC MAD carries its attribute at byte 64 (after the common header, the CC_Key at 24
//! and 32 reserved bytes), except CongestionLog, which starts at byte 32 (A10.4.1). A
//! switch's CongestionLog reports how many packets its ports marked (LogEventsCounter,
//! saturating at 16 bits) and which ports marked (PortMap); the model counts marks per port
//! but does not keep the per-event SLID/DLID/timestamp entries, so the 15 entries are empty.
//! A CA's CongestionLog (its CNP events) is not modelled and is answered with status 0x0C,
//! as are Sets: the snapshot's CC settings are the scenario's.

use super::mad::{method, put_u16, put_u32, status, Header, Mad, MAD_LEN};
use super::Subnet;
use crate::topology::NodeKind;

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
const PORTS_PER_BLOCK: u32 = 32;

/// One Timestamp / CurrentTimeStamp unit: 1.024 us (A10.4.3.10), in picoseconds.
const TIMESTAMP_UNIT_PS: u64 = 1_024_000;

/// Answers congestion control MAD `m` at node `node`; returns the status.
pub fn answer(subnet: &Subnet, node: usize, m: &mut Mad) -> u16 {
    let h = Header::parse(m);
    if h.class_version != CC_CLASS_VERSION {
        return status::BAD_VERSION;
    }
    match h.method {
        method::GET => {}
        method::SET => return status::METHOD_ATTR_UNSUPPORTED,
        _ => return status::METHOD_UNSUPPORTED,
    }
    let n = &subnet.nodes[node];
    let switch = n.kind == NodeKind::Switch;
    let cc = subnet.cc.as_ref().filter(|c| c.enabled);
    let mut out = [0u8; 224];
    let mut at = CC_DATA;
    let st = match h.attr_id {
        attr::CLASS_PORT_INFO => {
            out[0] = 1; // BaseVersion
            out[1] = CC_CLASS_VERSION;
            put_u32(&mut out, 4, 18); // CapabilityMask2 0, RespTimeValue 18
            status::OK
        }
        attr::CONGESTION_INFO => {
            // CongestionInfo bit 0 (credit starvation) is 0: not modelled.
            out[2] = if switch { 0 } else { CA_CONTROL_TABLE_CAP };
            status::OK
        }
        // CC_Key 0, not protected, no lease, no violations: the simulated fabric has no keys.
        attr::CONGESTION_KEY_INFO => status::OK,
        attr::CONGESTION_LOG if switch => {
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
        attr::SWITCH_CONGESTION_SETTING if switch => {
            if let Some(cc) = cc {
                let s = cc.switch.effective();
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
            }
            status::OK
        }
        attr::SWITCH_PORT_CONGESTION_SETTING if switch => {
            // Every element Valid = 0: each port runs the switch-wide setting.
            if h.attr_mod * PORTS_PER_BLOCK >= n.ports.len() as u32 {
                status::INVALID_FIELD
            } else {
                status::OK
            }
        }
        attr::CA_CONGESTION_SETTING if !switch => {
            if let Some(cc) = cc {
                let c = &cc.ca.config;
                let per_sl = matches!(c.port_control, softib_transport::cc::PortControl::Sl);
                put_u16(&mut out, 0, per_sl as u16);
                let map = cc.ca.control_map.unwrap_or(u16::MAX);
                put_u16(&mut out, 2, map);
                for (sl, e) in c.entries.iter().enumerate() {
                    let o = 4 + sl * 8;
                    put_u16(&mut out, o, e.ccti_timer);
                    out[o + 2] = e.ccti_increase;
                    out[o + 3] = e.trigger_threshold;
                    out[o + 4] = e.ccti_min;
                }
            }
            status::OK
        }
        attr::CONGESTION_CONTROL_TABLE if !switch => {
            let block = h.attr_mod as usize;
            if block >= CA_CONTROL_TABLE_CAP as usize {
                status::INVALID_FIELD
            } else {
                if let Some(cc) = cc {
                    let cct = &cc.ca.config.cct;
                    put_u16(&mut out, 0, cct.ccti_limit());
                    let entries = cct.entries().iter().skip(block * CCT_BLOCK_ENTRIES);
                    for (i, e) in entries.take(CCT_BLOCK_ENTRIES).enumerate() {
                        put_u16(
                            &mut out,
                            4 + 2 * i,
                            ((e.shift as u16) << 14) | (e.multiplier & 0x3FFF),
                        );
                    }
                }
                status::OK
            }
        }
        attr::TIMESTAMP => {
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

/// The snapshot's instant in 1.024 us units, wrapping at 32 bits as the counter does.
fn timestamp(subnet: &Subnet) -> u32 {
    (subnet.at / TIMESTAMP_UNIT_PS) as u32
}
