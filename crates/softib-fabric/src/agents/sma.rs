//! The subnet management agent of a node (IBA vol. 1 §14.2.5): Get of NodeInfo,
//! NodeDescription, PortInfo, SwitchInfo, GUIDInfo, P_KeyTable, SL2VLMappingTable,
//! VLArbitrationTable and LinearForwardingTable against a [`Subnet`] snapshot.
//!
//! Without an external SM the snapshot is what an SM would have configured: every cabled
//! port whose link is up is Active with its LID, uncabled ports are Down (Polling). With one
//! ([`Subnet::unconfigured`]) ports start in Init without LIDs. An SM's Sets of PortInfo,
//! SwitchInfo (LinearFDBTop), LinearForwardingTable, SL2VLMappingTable,
//! VLArbitrationTable and P_KeyTable blocks change the snapshot; Sets of other attributes
//! get status 0x0C.

use super::mad::{data_mut, method, put_u16, put_u32, put_u64, status, Header, Mad};
use super::{Subnet, VENDOR_ID};
use crate::link::{LinkSpeed, LinkWidth};
use crate::qos::Sl2Vl;
use crate::routing::NO_ROUTE;
use crate::topology::NodeKind;
use crate::vlarb::ArbEntry;

/// SMP attribute IDs (IBA §14.2.5, Table 145).
pub mod attr {
    /// NodeDescription.
    pub const NODE_DESCRIPTION: u16 = 0x0010;
    /// NodeInfo.
    pub const NODE_INFO: u16 = 0x0011;
    /// SwitchInfo.
    pub const SWITCH_INFO: u16 = 0x0012;
    /// GUIDInfo.
    pub const GUID_INFO: u16 = 0x0014;
    /// PortInfo.
    pub const PORT_INFO: u16 = 0x0015;
    /// P_KeyTable.
    pub const P_KEY_TABLE: u16 = 0x0016;
    /// SL2VLMappingTable.
    pub const SL2VL_MAPPING_TABLE: u16 = 0x0017;
    /// VLArbitrationTable.
    pub const VL_ARBITRATION_TABLE: u16 = 0x0018;
    /// LinearForwardingTable.
    pub const LINEAR_FORWARDING_TABLE: u16 = 0x0019;
}

/// LinearFDBCap of every simulated switch: the unicast LID space (IBA §14.2.5.4).
pub const LINEAR_FDB_CAP: u16 = 0xC000;
/// P_Key table entries per port (PartitionCap): one block.
pub const PARTITION_CAP: u16 = 32;
/// The default partition's full-member key (IBA §10.9.1.2).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// Answers SMP `m` at node `node`, which received it on port `in_port`, and returns the
/// status to put in the response; the attribute data is written into `m`. A Set of a
/// settable attribute is applied to the snapshot and answered as a Get of the result
/// (IBA §13.4.6.2: the response to a Set carries the attribute's new value).
pub fn answer(subnet: &mut Subnet, node: usize, in_port: u8, m: &mut Mad) -> u16 {
    let h = Header::parse(m);
    if h.class_version != 1 {
        return status::BAD_VERSION;
    }
    match h.method {
        method::GET => {}
        method::SET => {
            let st = set(subnet, node, in_port, &h, m);
            if st != status::OK {
                return st;
            }
        }
        _ => return status::METHOD_UNSUPPORTED,
    }
    let subnet = &*subnet;
    let n = &subnet.nodes[node];
    let switch = n.kind == NodeKind::Switch;
    let mut out = [0u8; 64];
    let st = match h.attr_id {
        attr::NODE_DESCRIPTION => {
            let b = n.name.as_bytes();
            let len = b.len().min(64);
            out[..len].copy_from_slice(&b[..len]);
            status::OK
        }
        attr::NODE_INFO => {
            node_info(subnet, node, in_port, &mut out);
            status::OK
        }
        attr::PORT_INFO => {
            // IBA §14.2.5.6: the modifier is the port; on a CA 0 means the receiving port.
            // Bits 7:0 name the port; OpenSM sets bit 31 on switch ports (a later IBA
            // revision's option this SMA does not offer), which is ignored.
            let p = match (switch, h.attr_mod & 0xff) {
                (false, 0) => in_port,
                (_, m) => m as u8,
            };
            if p as usize >= n.ports.len() || (!switch && p == 0) {
                status::INVALID_FIELD
            } else {
                port_info(subnet, node, p, in_port, &mut out);
                status::OK
            }
        }
        attr::SWITCH_INFO if switch => {
            switch_info(subnet, node, &mut out);
            status::OK
        }
        attr::LINEAR_FORWARDING_TABLE if switch => {
            let block = h.attr_mod as usize;
            if block >= LINEAR_FDB_CAP as usize / 64 {
                status::INVALID_FIELD
            } else {
                for (k, e) in out.iter_mut().enumerate() {
                    *e = n.lft.get(block * 64 + k).copied().unwrap_or(NO_ROUTE);
                }
                status::OK
            }
        }
        attr::GUID_INFO => {
            // GUIDCap 1: block 0 holds the port GUID, every other entry is unassigned.
            if h.attr_mod != 0 {
                status::INVALID_FIELD
            } else {
                let p = if switch { 0 } else { in_port };
                put_u64(&mut out, 0, subnet.port_guid(node, p));
                status::OK
            }
        }
        attr::P_KEY_TABLE => {
            // IBA §14.2.5.7: modifier bits 15:0 block, 31:16 port (switches).
            let block = h.attr_mod & 0xffff;
            let port = if switch { h.attr_mod >> 16 } else { 0 };
            if block as u16 >= PARTITION_CAP.div_ceil(32) || port as usize >= n.ports.len() {
                status::INVALID_FIELD
            } else {
                let p = if switch {
                    port as usize
                } else {
                    in_port as usize
                };
                for (k, key) in n.ports[p].pkeys.iter().enumerate() {
                    put_u16(&mut out, 2 * k, *key);
                }
                status::OK
            }
        }
        attr::SL2VL_MAPPING_TABLE => {
            // IBA §14.2.5.8: on a switch, bits 15:8 the input port, 7:0 the output port.
            let out_port = if switch {
                (h.attr_mod & 0xff) as u8
            } else {
                in_port
            };
            let in_p = if switch { (h.attr_mod >> 8) & 0xff } else { 0 };
            if out_port as usize >= n.ports.len() || in_p as usize >= n.ports.len() {
                status::INVALID_FIELD
            } else {
                let t = n.sl2vl(in_p as u8, out_port).0;
                for k in 0..8 {
                    out[k] = (t[2 * k] << 4) | (t[2 * k + 1] & 0x0f);
                }
                status::OK
            }
        }
        attr::VL_ARBITRATION_TABLE => vl_arbitration(subnet, node, in_port, h.attr_mod, &mut out),
        _ => status::METHOD_ATTR_UNSUPPORTED,
    };
    if st == status::OK {
        data_mut(m)[..64].copy_from_slice(&out);
    }
    st
}

/// Applies a Set: PortInfo, SwitchInfo (LinearFDBTop), LinearForwardingTable,
/// SL2VLMappingTable, VLArbitrationTable and P_KeyTable blocks. Anything else is read-only.
/// A Set with an invalid value changes nothing and gets status 0x1C.
fn set(subnet: &mut Subnet, node: usize, in_port: u8, h: &Header, m: &Mad) -> u16 {
    let switch = subnet.nodes[node].kind == NodeKind::Switch;
    let d = &m[64..128];
    let ports = subnet.nodes[node].ports.len();
    match h.attr_id {
        attr::PORT_INFO => set_port_info(subnet, node, in_port, h.attr_mod, d),
        attr::SWITCH_INFO if switch => {
            subnet.nodes[node].linear_fdb_top = u16::from_be_bytes([d[6], d[7]]);
            status::OK
        }
        attr::LINEAR_FORWARDING_TABLE if switch => {
            let block = h.attr_mod as usize;
            if block >= LINEAR_FDB_CAP as usize / 64 {
                return status::INVALID_FIELD;
            }
            let lft = &mut subnet.nodes[node].lft;
            if lft.len() < (block + 1) * 64 {
                lft.resize((block + 1) * 64, NO_ROUTE);
            }
            lft[block * 64..(block + 1) * 64].copy_from_slice(d);
            status::OK
        }
        attr::SL2VL_MAPPING_TABLE => {
            // IBA §14.2.5.8: on a switch, bits 15:8 the input port, 7:0 the output port; a
            // CA's table is that of the receiving port.
            let (input, output) = if switch {
                (
                    ((h.attr_mod >> 8) & 0xff) as usize,
                    (h.attr_mod & 0xff) as usize,
                )
            } else {
                (0, in_port as usize)
            };
            if input >= ports || output >= ports || h.attr_mod >> 16 != 0 {
                return status::INVALID_FIELD;
            }
            let mut t = [0u8; 16];
            for k in 0..8 {
                t[2 * k] = d[k] >> 4;
                t[2 * k + 1] = d[k] & 0x0f;
            }
            *subnet.nodes[node].sl2vl_mut(input as u8, output as u8) = Sl2Vl(t);
            status::OK
        }
        attr::VL_ARBITRATION_TABLE => {
            let block = h.attr_mod >> 16;
            let port = if switch {
                (h.attr_mod & 0xffff) as usize
            } else {
                in_port as usize
            };
            if !(1..=4).contains(&block) || port >= ports {
                return status::INVALID_FIELD;
            }
            let arb = &mut subnet.nodes[node].ports[port].vlarb;
            let table = if block <= 2 {
                &mut arb.low
            } else {
                &mut arb.high
            };
            let first = if block % 2 == 1 { 0 } else { 32 };
            if table.len() < first + 32 {
                table.resize(first + 32, ArbEntry { vl: 0, weight: 0 });
            }
            for k in 0..32 {
                table[first + k] = ArbEntry {
                    vl: d[2 * k] & 0x0f,
                    weight: d[2 * k + 1],
                };
            }
            status::OK
        }
        attr::P_KEY_TABLE => {
            let block = h.attr_mod & 0xffff;
            let port = if switch {
                (h.attr_mod >> 16) as usize
            } else {
                in_port as usize
            };
            if block as u16 >= PARTITION_CAP.div_ceil(32) || port >= ports {
                return status::INVALID_FIELD;
            }
            let keys = &mut subnet.nodes[node].ports[port].pkeys;
            for (k, key) in keys.iter_mut().enumerate() {
                *key = u16::from_be_bytes([d[2 * k], d[2 * k + 1]]);
            }
            status::OK
        }
        _ => status::METHOD_ATTR_UNSUPPORTED,
    }
}

/// PortInfo Set (IBA §14.2.5.6): LID and LMC (a CA port or switch port 0), MasterSMLID and
/// MasterSMSL, NeighborMTU, VLHighLimit, OperationalVLs, PortState and PortPhysicalState.
/// PortState moves as IBA §7.2 allows an SM to move it: Armed only from Init, Active only
/// from Armed, Down from any state (the link then retrains, so the port is back in Init);
/// Init or an unknown value is refused, as is any value outside the port's capabilities.
fn set_port_info(subnet: &mut Subnet, node: usize, in_port: u8, modifier: u32, d: &[u8]) -> u16 {
    let switch = subnet.nodes[node].kind == NodeKind::Switch;
    // Bits 7:0 name the port; OpenSM sets bit 31 on switch ports (a later IBA revision's
    // option this SMA does not offer), which is ignored.
    let p = match (switch, modifier & 0xff) {
        (false, 0) => in_port,
        (_, m) => m as u8,
    };
    let ports = subnet.nodes[node].ports.len();
    if p as usize >= ports || (!switch && p == 0) {
        return status::INVALID_FIELD;
    }
    let pv = &subnet.nodes[node].ports[p as usize];
    let up = pv.link_up && (p == 0 || pv.peer.is_some());
    let state = match (d[32] & 0x0f, pv.state) {
        (0, s) => s,
        (1, _) => 2,
        (3, 2 | 3) if up => 3,
        (4, 3 | 4) if up => 4,
        _ => return status::INVALID_FIELD,
    };
    // PortPhysicalState: 0 no change, 2 Polling (retrain), 3 Disabled.
    let phys = d[33] >> 4;
    if !matches!(phys, 0 | 2 | 3) {
        return status::INVALID_FIELD;
    }
    let mtu = d[36] >> 4;
    if mtu > 5 {
        return status::INVALID_FIELD;
    }
    let op_vls = match d[43] >> 4 {
        0 => pv.op_vls,
        c @ 1..=5 => {
            let vls = if c == 5 { 15 } else { 1 << (c - 1) };
            if vls > pv.vl_cap.max(1) {
                return status::INVALID_FIELD;
            }
            vls
        }
        _ => return status::INVALID_FIELD,
    };
    let lid = u16::from_be_bytes([d[16], d[17]]);
    if (!switch || p == 0) && lid >= 0xC000 {
        return status::INVALID_FIELD;
    }
    if !switch || p == 0 {
        subnet.set_lid(node, p, lid);
        subnet.sm_lid = Some(u16::from_be_bytes([d[18], d[19]]));
    }
    let pv = &mut subnet.nodes[node].ports[p as usize];
    pv.state = if phys != 0 { 2 } else { state };
    if mtu != 0 {
        pv.neighbor_mtu = mtu;
    }
    pv.op_vls = op_vls;
    pv.vlarb.high_limit = d[38];
    status::OK
}

fn node_info(subnet: &Subnet, node: usize, in_port: u8, out: &mut [u8; 64]) {
    let n = &subnet.nodes[node];
    let switch = n.kind == NodeKind::Switch;
    out[0] = 1; // BaseVersion
    out[1] = 1; // ClassVersion
    out[2] = if switch { 2 } else { 1 };
    out[3] = (n.ports.len() - 1) as u8;
    put_u64(out, 4, subnet.system_image_guid(node));
    put_u64(out, 12, subnet.node_guid(node));
    put_u64(
        out,
        20,
        subnet.port_guid(node, if switch { 0 } else { in_port }),
    );
    put_u16(out, 28, PARTITION_CAP);
    put_u16(out, 30, 0x5EF1); // DeviceID
    put_u32(out, 32, 0); // Revision
    out[36] = in_port;
    out[37..40].copy_from_slice(&VENDOR_ID.to_be_bytes()[1..]);
}

/// LinkWidth encoding of PortInfo (IBA §14.2.5.6, LinkWidthActive).
fn width_code(w: LinkWidth) -> u8 {
    match w {
        LinkWidth::X1 => 1,
        LinkWidth::X4 => 2,
        LinkWidth::X8 => 4,
        LinkWidth::X12 => 8,
        LinkWidth::X2 => 16,
    }
}

/// (LinkSpeedActive, LinkSpeedExtActive) of a speed. FDR and faster are extended speeds
/// (LinkSpeedActive then reads QDR, as on hardware); FDR10 is a vendor extension IBA's
/// fields cannot express, so it reads as QDR.
fn speed_codes(s: LinkSpeed) -> (u8, u8) {
    match s {
        LinkSpeed::Sdr => (1, 0),
        LinkSpeed::Ddr => (2, 0),
        LinkSpeed::Qdr | LinkSpeed::Fdr10 => (4, 0),
        LinkSpeed::Fdr => (4, 1),
        LinkSpeed::Edr => (4, 2),
        LinkSpeed::Hdr => (4, 4),
        LinkSpeed::Ndr => (4, 8),
    }
}

/// VLCap / OperationalVLs encoding (IBA §14.2.5.6): 1 = VL0, 2 = VL0-1, 3 = VL0-3,
/// 4 = VL0-7, 5 = VL0-14.
fn vls_code(vls: u8) -> u8 {
    match vls {
        0 | 1 => 1,
        2 => 2,
        3 | 4 => 3,
        5..=8 => 4,
        _ => 5,
    }
}

fn port_info(subnet: &Subnet, node: usize, port: u8, in_port: u8, out: &mut [u8; 64]) {
    let n = &subnet.nodes[node];
    let switch = n.kind == NodeKind::Switch;
    let pv = &n.ports[port as usize];
    // M_Key 0, GID prefix the default subnet prefix (IBA §4.1.1).
    put_u64(out, 8, 0xFE80_0000_0000_0000);
    put_u16(out, 16, pv.lid);
    // Without an external SM the SM is taken to run on the first HCA (MasterSMLID).
    let sm_lid = subnet.sm_lid.unwrap_or_else(|| {
        subnet
            .default_node()
            .map(|h| subnet.nodes[h].ports.get(1).map_or(0, |p| p.lid))
            .unwrap_or(0)
    });
    put_u16(out, 18, sm_lid);
    // CapabilityMask: IsSM (bit 1) behind an SM's port, IsSLMappingSupported (6),
    // IsExtendedSpeedsSupported (14), IsCapabilityMask2Supported (15).
    let is_sm = if pv.is_sm { 1 << 1 } else { 0 };
    let sl_map = if subnet.external_sm { 1 << 6 } else { 0 };
    put_u32(out, 20, is_sm | sl_map | (1 << 14) | (1 << 15));
    out[28] = if switch { in_port } else { port };
    // A simulated port supports exactly the width and speed of its cable (supported =
    // enabled = active), so tools never report that a link "could be" faster.
    let w = width_code(pv.rate.width);
    out[29] = w; // LinkWidthEnabled
    out[30] = w; // LinkWidthSupported
    out[31] = w; // LinkWidthActive
    let (speed, ext) = speed_codes(pv.rate.speed);
    // Supported speeds: every speed up to the active one (bit masks of §14.2.5.6).
    let speed_mask = (speed << 1) - 1;
    let ext_mask = if ext == 0 { 0 } else { (ext << 1) - 1 };
    let up = pv.link_up && (port == 0 || pv.peer.is_some());
    // PortState: 1 Down .. 4 Active; PortPhysicalState: 5 LinkUp, 2 Polling.
    let (state, phys) = if up { (pv.state, 5u8) } else { (1, 2) };
    out[32] = (speed_mask << 4) | state; // LinkSpeedSupported, PortState
    out[33] = (phys << 4) | 2; // LinkDownDefaultState Polling
    out[34] = 0; // M_KeyProtectBits 0, LMC 0
    out[35] = (if up { speed } else { 0 } << 4) | speed_mask; // LinkSpeedActive, Enabled
    out[36] = pv.neighbor_mtu << 4; // NeighborMTU, MasterSMSL 0
    out[37] = vls_code(pv.vl_cap) << 4; // VLCap, InitType
    out[38] = pv.vlarb.high_limit;
    out[39] = 32; // VLArbitrationHighCap
    out[40] = 32; // VLArbitrationLowCap
    out[41] = 5; // MTUCap 4096
    out[42] = (7 << 5) | 18; // VLStallCount, HOQLife
    out[43] = vls_code(pv.op_vls) << 4;
    out[50] = 1; // GUIDCap
    out[51] = 18; // SubnetTimeOut
    out[52] = 18; // RespTimeValue
                  // CapabilityMask2 (IBA §14.2.5.6, bit 10: IsLinkSpeedNDRSupported).
    put_u16(out, 60, 1 << 10);
    out[62] = (if up { ext } else { 0 } << 4) | ext_mask; // LinkSpeedExtActive, Supported
    out[63] = ext_mask; // LinkSpeedExtEnabled
}

fn switch_info(subnet: &Subnet, node: usize, out: &mut [u8; 64]) {
    let n = &subnet.nodes[node];
    put_u16(out, 0, LINEAR_FDB_CAP);
    put_u16(out, 2, 0); // RandomFDBCap
    put_u16(out, 4, 0); // MulticastFDBCap: multicast is not modelled
    put_u16(out, 6, n.linear_fdb_top); // LinearFDBTop
    out[8] = 0; // DefaultPort
    out[9] = 0;
    out[10] = 0;
    out[11] = 18 << 3; // LifeTimeValue
    put_u16(out, 12, 0); // LIDsPerPort
    put_u16(out, 14, PARTITION_CAP); // PartitionEnforcementCap
}

/// VLArbitrationTable (IBA §14.2.5.9): modifier bits 31:16 the block (1, 2: low priority
/// entries 0-31, 32-63; 3, 4: high priority), bits 15:0 the output port (switches).
fn vl_arbitration(
    subnet: &Subnet,
    node: usize,
    in_port: u8,
    modifier: u32,
    out: &mut [u8; 64],
) -> u16 {
    let n = &subnet.nodes[node];
    let block = modifier >> 16;
    let port = if n.kind == NodeKind::Switch {
        (modifier & 0xffff) as usize
    } else {
        in_port as usize
    };
    if !(1..=4).contains(&block) || port >= n.ports.len() {
        return status::INVALID_FIELD;
    }
    let arb = &n.ports[port].vlarb;
    let table = if block <= 2 { &arb.low } else { &arb.high };
    let first = if block % 2 == 1 { 0 } else { 32 };
    for k in 0..32 {
        if let Some(e) = table.get(first + k) {
            out[2 * k] = e.vl & 0x0f;
            out[2 * k + 1] = e.weight;
        }
    }
    status::OK
}
