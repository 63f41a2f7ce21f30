//! The performance management agent of a node (IBA vol. 1 §16.1): Get of ClassPortInfo,
//! PortCounters (PortXmitWait included) and PortCountersExtended from the model's port
//! counters as of the [`Subnet`] snapshot, and Set of PortCounters and PortCountersExtended,
//! which clears the counters its CounterSelect names (`perfquery -R`).
//!
//! PortCounters fields saturate at their width as IBA requires (§16.1.3.5); the data
//! counters are in 4-byte words, LRH through ICRC. A Set changes the snapshot (as an SM's
//! SMA Sets do), so a later Get reads the cleared counters; the response to a Set carries
//! the attribute as it is after the Set (IBA §13.4.6.1: GetResp to a Set returns the
//! attribute's new value). The model keeps one counter behind a classic field and its
//! extended twin, so clearing one clears both ([`crate::counters::PortCounters::clear_selected`]).

use super::mad::{data_mut, method, put_u16, put_u32, put_u64, status, Header, Mad};
use super::Subnet;
use crate::topology::NodeKind;

/// PMA attribute IDs (IBA §16.1.2, Table 207; PortCountersExtended §16.1.4.11).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// PortCounters.
    pub const PORT_COUNTERS: u16 = 0x0012;
    /// PortCountersExtended.
    pub const PORT_COUNTERS_EXTENDED: u16 = 0x001D;
}

/// ClassPortInfo CapabilityMask bits of the PMA (IBA §16.1.2.1): IsExtendedWidthSupported
/// (bit 9, PortCountersExtended) and IsPortXmitWaitSupported (bit 12).
pub const PMA_CAPABILITIES: u16 = (1 << 9) | (1 << 12);

/// Byte offset of the attribute data in a PerfMgt MAD (after the 24-byte common header and
/// 40 reserved bytes, IBA §16.1.1).
const PERF_DATA: usize = 64;

/// Answers PerfMgt MAD `m` at node `node`, received on port `in_port`; returns the status.
pub fn answer(subnet: &mut Subnet, node: usize, in_port: u8, m: &mut Mad) -> u16 {
    let h = Header::parse(m);
    if h.class_version != 1 {
        return status::BAD_VERSION;
    }
    let is_set = match h.method {
        method::GET => false,
        method::SET => true,
        _ => return status::METHOD_UNSUPPORTED,
    };
    let select = m[PERF_DATA + 1];
    let port = {
        let n = &subnet.nodes[node];
        // PortSelect names a physical port; an HCA's agent also takes 0 for the port the
        // MAD came in on. 0xFF (AllPortSelect) is not offered in the capability mask.
        let p = match (n.kind, select) {
            (NodeKind::Hca, 0) => in_port,
            (_, p) => p,
        };
        (p >= 1 && (p as usize) < n.ports.len()).then_some(p)
    };
    let counter_select = u16::from_be_bytes([m[PERF_DATA + 2], m[PERF_DATA + 3]]);
    if is_set {
        let Some(p) = port else {
            return status::INVALID_FIELD;
        };
        let counters = &mut subnet.nodes[node].ports[p as usize].counters;
        match h.attr_id {
            attr::PORT_COUNTERS => {
                counters.clear_selected(counter_select, m[PERF_DATA + 18]);
            }
            attr::PORT_COUNTERS_EXTENDED => counters.clear_selected_extended(counter_select),
            _ => return status::METHOD_ATTR_UNSUPPORTED,
        }
    }
    let n = &subnet.nodes[node];
    let mut out = [0u8; 192];
    let st = match h.attr_id {
        attr::CLASS_PORT_INFO => {
            out[0] = 1; // BaseVersion
            out[1] = 1; // ClassVersion
            put_u16(&mut out, 2, PMA_CAPABILITIES);
            put_u32(&mut out, 4, 18); // CapabilityMask2 0, RespTimeValue 18
            status::OK
        }
        attr::PORT_COUNTERS => match port {
            None => status::INVALID_FIELD,
            Some(p) => {
                let c = n.ports[p as usize]
                    .counters
                    .classic(subnet.xmit_wait_tick_ps);
                out[1] = p;
                out[2..4].copy_from_slice(&m[PERF_DATA + 2..PERF_DATA + 4]); // CounterSelect
                out[18] = m[PERF_DATA + 18]; // CounterSelect2
                put_u16(&mut out, 4, c.symbol_error_counter);
                out[6] = c.link_error_recovery_counter;
                out[7] = c.link_downed_counter;
                put_u16(&mut out, 8, c.port_rcv_errors);
                put_u16(&mut out, 10, c.port_rcv_remote_physical_errors);
                put_u16(&mut out, 12, c.port_rcv_switch_relay_errors);
                put_u16(&mut out, 14, c.port_xmit_discards);
                out[16] = c.port_xmit_constraint_errors;
                out[17] = c.port_rcv_constraint_errors;
                out[19] = (c.local_link_integrity_errors << 4)
                    | (c.excessive_buffer_overrun_errors & 0x0f);
                put_u16(&mut out, 22, c.vl15_dropped);
                put_u32(&mut out, 24, c.port_xmit_data);
                put_u32(&mut out, 28, c.port_rcv_data);
                put_u32(&mut out, 32, c.port_xmit_pkts);
                put_u32(&mut out, 36, c.port_rcv_pkts);
                put_u32(&mut out, 40, c.port_xmit_wait);
                status::OK
            }
        },
        attr::PORT_COUNTERS_EXTENDED => match port {
            None => status::INVALID_FIELD,
            Some(p) => {
                let c = &n.ports[p as usize].counters;
                out[1] = p;
                out[2..4].copy_from_slice(&m[PERF_DATA + 2..PERF_DATA + 4]);
                put_u64(&mut out, 8, c.port_xmit_data);
                put_u64(&mut out, 16, c.port_rcv_data);
                put_u64(&mut out, 24, c.port_xmit_pkts);
                put_u64(&mut out, 32, c.port_rcv_pkts);
                // Every data packet of the model is unicast (multicast is not modelled).
                put_u64(&mut out, 40, c.port_xmit_pkts);
                put_u64(&mut out, 48, c.port_rcv_pkts);
                status::OK
            }
        },
        _ => status::METHOD_ATTR_UNSUPPORTED,
    };
    if st == status::OK {
        data_mut(m)[..192].copy_from_slice(&out);
    }
    st
}
