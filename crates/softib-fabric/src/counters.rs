//! Port counters with their IBA names and units (IBA 16.1.3.5 PortCounters, 16.1.4.11
//! PortCountersExtended).
//!
//! The simulator keeps every counter 64 bits wide and exact; [`PortCounters::classic`] gives
//! the saturating widths of the PortCounters attribute (32-bit data/packet counters, 16-bit
//! and 8-bit error counters, stopping at their maximum as hardware does).
//!
//! PortXmitData and PortRcvData count 4-byte words of data packets, LRH through ICRC (the
//! 2-byte VCRC and all link packets excluded). PortXmitWait counts ticks in which the port had
//! a data packet queued but sent none (no credits, or the crossbar input was busy); the tick is
//! a fabric setting ([`crate::fabric::FabricConfig::xmit_wait_tick_ps`]). The simulator keeps
//! the waiting time in picoseconds and converts on read, so the tick length never changes the
//! simulation.

use crate::time::Picos;

/// Every counter of one port, exact and 64-bit.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortCounters {
    /// PortXmitData: words (4 bytes) of data packets sent, LRH through ICRC.
    pub port_xmit_data: u64,
    /// PortRcvData: words of data packets received, LRH through ICRC.
    pub port_rcv_data: u64,
    /// PortXmitPkts.
    pub port_xmit_pkts: u64,
    /// PortRcvPkts.
    pub port_rcv_pkts: u64,
    /// Time the port had data queued and sent none, in picoseconds (see `port_xmit_wait`).
    pub xmit_wait_ps: u64,
    /// Per data VL (and VL15 at index 15): time the VL had a packet queued and was not
    /// transmitting, in picoseconds.
    pub vl_xmit_wait_ps: [u64; 16],
    /// Flow-control packets sent (not an IBA counter; link packets are excluded from the
    /// data counters).
    pub fc_packets_sent: u64,
    /// Flow-control packets received.
    pub fc_packets_rcvd: u64,
    /// Packets this (switch) port marked with FECN (vendor counters call this e.g.
    /// `marked_fecn`; not a PortCounters field).
    pub fecn_marked: u64,
    /// SymbolErrorCounter.
    pub symbol_error_counter: u64,
    /// LinkErrorRecoveryCounter.
    pub link_error_recovery_counter: u64,
    /// LinkDownedCounter.
    pub link_downed_counter: u64,
    /// PortRcvErrors: packets received with errors (bad VCRC/ICRC, malformed).
    pub port_rcv_errors: u64,
    /// PortRcvRemotePhysicalErrors: packets received marked bad (EBP) by an upstream switch.
    pub port_rcv_remote_physical_errors: u64,
    /// PortRcvSwitchRelayErrors: packets a switch could not forward (no route, SL2VL to VL15,
    /// non-operational VL, loop).
    pub port_rcv_switch_relay_errors: u64,
    /// PortXmitDiscards: packets discarded at the output (link down, bad VL).
    pub port_xmit_discards: u64,
    /// PortXmitConstraintErrors.
    pub port_xmit_constraint_errors: u64,
    /// PortRcvConstraintErrors.
    pub port_rcv_constraint_errors: u64,
    /// LocalLinkIntegrityErrors.
    pub local_link_integrity_errors: u64,
    /// ExcessiveBufferOverrunErrors: a packet arrived with no buffer room, i.e. the sender
    /// broke the credit rule. Never non-zero unless something is wrong.
    pub excessive_buffer_overrun_errors: u64,
    /// VL15Dropped: management packets dropped for lack of VL15 buffer.
    pub vl15_dropped: u64,
}

/// The PortCounters attribute with its field widths, saturating.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassicCounters {
    /// PortXmitData (32-bit).
    pub port_xmit_data: u32,
    /// PortRcvData (32-bit).
    pub port_rcv_data: u32,
    /// PortXmitPkts (32-bit).
    pub port_xmit_pkts: u32,
    /// PortRcvPkts (32-bit).
    pub port_rcv_pkts: u32,
    /// PortXmitWait (32-bit).
    pub port_xmit_wait: u32,
    /// SymbolErrorCounter (16-bit).
    pub symbol_error_counter: u16,
    /// LinkErrorRecoveryCounter (8-bit).
    pub link_error_recovery_counter: u8,
    /// LinkDownedCounter (8-bit).
    pub link_downed_counter: u8,
    /// PortRcvErrors (16-bit).
    pub port_rcv_errors: u16,
    /// PortRcvRemotePhysicalErrors (16-bit).
    pub port_rcv_remote_physical_errors: u16,
    /// PortRcvSwitchRelayErrors (16-bit).
    pub port_rcv_switch_relay_errors: u16,
    /// PortXmitDiscards (16-bit).
    pub port_xmit_discards: u16,
    /// PortXmitConstraintErrors (8-bit).
    pub port_xmit_constraint_errors: u8,
    /// PortRcvConstraintErrors (8-bit).
    pub port_rcv_constraint_errors: u8,
    /// LocalLinkIntegrityErrors (4-bit, held in a byte).
    pub local_link_integrity_errors: u8,
    /// ExcessiveBufferOverrunErrors (4-bit, held in a byte).
    pub excessive_buffer_overrun_errors: u8,
    /// VL15Dropped (16-bit).
    pub vl15_dropped: u16,
}

fn sat32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}
fn sat16(v: u64) -> u16 {
    v.min(u16::MAX as u64) as u16
}
fn sat8(v: u64) -> u8 {
    v.min(u8::MAX as u64) as u8
}
fn sat4(v: u64) -> u8 {
    v.min(15) as u8
}

impl PortCounters {
    /// PortXmitWait in ticks of `tick_ps`.
    pub fn port_xmit_wait(&self, tick_ps: Picos) -> u64 {
        self.xmit_wait_ps / tick_ps.max(1)
    }

    /// Per-VL transmit wait in ticks of `tick_ps`.
    pub fn vl_xmit_wait(&self, vl: u8, tick_ps: Picos) -> u64 {
        self.vl_xmit_wait_ps[(vl & 15) as usize] / tick_ps.max(1)
    }

    /// Sum of every error counter (a quick "is anything wrong" check).
    pub fn errors(&self) -> u64 {
        self.symbol_error_counter
            + self.link_error_recovery_counter
            + self.link_downed_counter
            + self.port_rcv_errors
            + self.port_rcv_remote_physical_errors
            + self.port_rcv_switch_relay_errors
            + self.port_xmit_discards
            + self.port_xmit_constraint_errors
            + self.port_rcv_constraint_errors
            + self.local_link_integrity_errors
            + self.excessive_buffer_overrun_errors
            + self.vl15_dropped
    }

    /// The PortCounters attribute as a subnet manager would read it.
    pub fn classic(&self, tick_ps: Picos) -> ClassicCounters {
        ClassicCounters {
            port_xmit_data: sat32(self.port_xmit_data),
            port_rcv_data: sat32(self.port_rcv_data),
            port_xmit_pkts: sat32(self.port_xmit_pkts),
            port_rcv_pkts: sat32(self.port_rcv_pkts),
            port_xmit_wait: sat32(self.port_xmit_wait(tick_ps)),
            symbol_error_counter: sat16(self.symbol_error_counter),
            link_error_recovery_counter: sat8(self.link_error_recovery_counter),
            link_downed_counter: sat8(self.link_downed_counter),
            port_rcv_errors: sat16(self.port_rcv_errors),
            port_rcv_remote_physical_errors: sat16(self.port_rcv_remote_physical_errors),
            port_rcv_switch_relay_errors: sat16(self.port_rcv_switch_relay_errors),
            port_xmit_discards: sat16(self.port_xmit_discards),
            port_xmit_constraint_errors: sat8(self.port_xmit_constraint_errors),
            port_rcv_constraint_errors: sat8(self.port_rcv_constraint_errors),
            local_link_integrity_errors: sat4(self.local_link_integrity_errors),
            excessive_buffer_overrun_errors: sat4(self.excessive_buffer_overrun_errors),
            vl15_dropped: sat16(self.vl15_dropped),
        }
    }
}

/// CounterSelect bits of the PortCounters attribute (IBA vol. 1 §16.1.3.5, Table 247): which
/// counters a Set clears. Bit 0 of CounterSelect2 selects PortXmitWait.
pub mod counter_select {
    /// SymbolErrorCounter.
    pub const SYMBOL_ERROR: u16 = 1 << 0;
    /// LinkErrorRecoveryCounter.
    pub const LINK_ERROR_RECOVERY: u16 = 1 << 1;
    /// LinkDownedCounter.
    pub const LINK_DOWNED: u16 = 1 << 2;
    /// PortRcvErrors.
    pub const RCV_ERRORS: u16 = 1 << 3;
    /// PortRcvRemotePhysicalErrors.
    pub const RCV_REMOTE_PHYSICAL_ERRORS: u16 = 1 << 4;
    /// PortRcvSwitchRelayErrors.
    pub const RCV_SWITCH_RELAY_ERRORS: u16 = 1 << 5;
    /// PortXmitDiscards.
    pub const XMIT_DISCARDS: u16 = 1 << 6;
    /// PortXmitConstraintErrors.
    pub const XMIT_CONSTRAINT_ERRORS: u16 = 1 << 7;
    /// PortRcvConstraintErrors.
    pub const RCV_CONSTRAINT_ERRORS: u16 = 1 << 8;
    /// LocalLinkIntegrityErrors.
    pub const LOCAL_LINK_INTEGRITY_ERRORS: u16 = 1 << 9;
    /// ExcessiveBufferOverrunErrors.
    pub const EXCESSIVE_BUFFER_OVERRUN_ERRORS: u16 = 1 << 10;
    /// VL15Dropped.
    pub const VL15_DROPPED: u16 = 1 << 11;
    /// PortXmitData.
    pub const XMIT_DATA: u16 = 1 << 12;
    /// PortRcvData.
    pub const RCV_DATA: u16 = 1 << 13;
    /// PortXmitPkts.
    pub const XMIT_PKTS: u16 = 1 << 14;
    /// PortRcvPkts.
    pub const RCV_PKTS: u16 = 1 << 15;
    /// CounterSelect2 bit 0: PortXmitWait.
    pub const SELECT2_XMIT_WAIT: u8 = 1 << 0;
}

/// CounterSelect bits of the PortCountersExtended attribute (IBA vol. 1 §16.1.4.11).
pub mod extended_counter_select {
    /// PortXmitData.
    pub const XMIT_DATA: u16 = 1 << 0;
    /// PortRcvData.
    pub const RCV_DATA: u16 = 1 << 1;
    /// PortXmitPkts.
    pub const XMIT_PKTS: u16 = 1 << 2;
    /// PortRcvPkts.
    pub const RCV_PKTS: u16 = 1 << 3;
    /// PortUnicastXmitPkts.
    pub const UNICAST_XMIT_PKTS: u16 = 1 << 4;
    /// PortUnicastRcvPkts.
    pub const UNICAST_RCV_PKTS: u16 = 1 << 5;
    /// PortMulticastXmitPkts.
    pub const MULTICAST_XMIT_PKTS: u16 = 1 << 6;
    /// PortMulticastRcvPkts.
    pub const MULTICAST_RCV_PKTS: u16 = 1 << 7;
}

impl PortCounters {
    /// Clears the counters a PortCounters Set selects (IBA §16.1.3.5): `select` is
    /// CounterSelect, `select2` CounterSelect2.
    ///
    /// The model keeps one exact counter behind each classic field and its extended twin
    /// (as ConnectX hardware does), so clearing PortXmitData here clears the extended
    /// PortXmitData too. The per-VL transmit wait is a different attribute
    /// (PortVLXmitWaitCounters) and is left alone.
    pub fn clear_selected(&mut self, select: u16, select2: u8) {
        use counter_select as s;
        let fields: [(u16, &mut u64); 16] = [
            (s::SYMBOL_ERROR, &mut self.symbol_error_counter),
            (
                s::LINK_ERROR_RECOVERY,
                &mut self.link_error_recovery_counter,
            ),
            (s::LINK_DOWNED, &mut self.link_downed_counter),
            (s::RCV_ERRORS, &mut self.port_rcv_errors),
            (
                s::RCV_REMOTE_PHYSICAL_ERRORS,
                &mut self.port_rcv_remote_physical_errors,
            ),
            (
                s::RCV_SWITCH_RELAY_ERRORS,
                &mut self.port_rcv_switch_relay_errors,
            ),
            (s::XMIT_DISCARDS, &mut self.port_xmit_discards),
            (
                s::XMIT_CONSTRAINT_ERRORS,
                &mut self.port_xmit_constraint_errors,
            ),
            (
                s::RCV_CONSTRAINT_ERRORS,
                &mut self.port_rcv_constraint_errors,
            ),
            (
                s::LOCAL_LINK_INTEGRITY_ERRORS,
                &mut self.local_link_integrity_errors,
            ),
            (
                s::EXCESSIVE_BUFFER_OVERRUN_ERRORS,
                &mut self.excessive_buffer_overrun_errors,
            ),
            (s::VL15_DROPPED, &mut self.vl15_dropped),
            (s::XMIT_DATA, &mut self.port_xmit_data),
            (s::RCV_DATA, &mut self.port_rcv_data),
            (s::XMIT_PKTS, &mut self.port_xmit_pkts),
            (s::RCV_PKTS, &mut self.port_rcv_pkts),
        ];
        for (bit, counter) in fields {
            if select & bit != 0 {
                *counter = 0;
            }
        }
        if select2 & s::SELECT2_XMIT_WAIT != 0 {
            self.xmit_wait_ps = 0;
        }
    }

    /// Clears the counters a PortCountersExtended Set selects (IBA §16.1.4.11). The model
    /// has no multicast, so its unicast packet counters are its packet counters: clearing
    /// either clears both; the multicast bits clear nothing (they always read 0).
    pub fn clear_selected_extended(&mut self, select: u16) {
        use extended_counter_select as e;
        if select & e::XMIT_DATA != 0 {
            self.port_xmit_data = 0;
        }
        if select & e::RCV_DATA != 0 {
            self.port_rcv_data = 0;
        }
        if select & (e::XMIT_PKTS | e::UNICAST_XMIT_PKTS) != 0 {
            self.port_xmit_pkts = 0;
        }
        if select & (e::RCV_PKTS | e::UNICAST_RCV_PKTS) != 0 {
            self.port_rcv_pkts = 0;
        }
    }
}

/// Words counted by PortXmitData/PortRcvData for a data packet of `len` bytes LRH through
/// VCRC: the VCRC is excluded.
pub fn data_words(len: u16) -> u64 {
    (len as u64).saturating_sub(2) / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_counters_saturate_at_their_widths() {
        let c = PortCounters {
            port_xmit_data: 5_000_000_000,
            port_rcv_errors: 70_000,
            link_downed_counter: 300,
            excessive_buffer_overrun_errors: 16,
            xmit_wait_ps: 10_000,
            ..Default::default()
        };
        let k = c.classic(1_000);
        assert_eq!(k.port_xmit_data, u32::MAX);
        assert_eq!(k.port_rcv_errors, u16::MAX);
        assert_eq!(k.link_downed_counter, 255);
        assert_eq!(k.excessive_buffer_overrun_errors, 15);
        assert_eq!(k.port_xmit_wait, 10);
    }

    fn busy_port() -> PortCounters {
        PortCounters {
            port_xmit_data: 100,
            port_rcv_data: 200,
            port_xmit_pkts: 3,
            port_rcv_pkts: 4,
            xmit_wait_ps: 5_000,
            vl_xmit_wait_ps: [7; 16],
            symbol_error_counter: 1,
            port_rcv_errors: 2,
            vl15_dropped: 6,
            ..Default::default()
        }
    }

    #[test]
    fn a_set_clears_only_the_selected_counters() {
        let mut c = busy_port();
        c.clear_selected(counter_select::XMIT_DATA | counter_select::RCV_ERRORS, 0);
        assert_eq!(c.port_xmit_data, 0);
        assert_eq!(c.port_rcv_errors, 0);
        assert_eq!(c.port_rcv_data, 200);
        assert_eq!(c.symbol_error_counter, 1);
        assert_eq!(c.vl15_dropped, 6);
        assert_eq!(c.xmit_wait_ps, 5_000, "PortXmitWait needs CounterSelect2");
        c.clear_selected(0, counter_select::SELECT2_XMIT_WAIT);
        assert_eq!(c.xmit_wait_ps, 0);
        assert_eq!(c.vl_xmit_wait_ps, [7; 16], "a different attribute");
        let mut all = busy_port();
        all.clear_selected(u16::MAX, u8::MAX);
        assert_eq!(all.errors(), 0);
        assert_eq!(
            (
                all.port_xmit_data,
                all.port_rcv_data,
                all.port_xmit_pkts,
                all.port_rcv_pkts
            ),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn an_extended_set_clears_data_and_packets_with_unicast_as_packets() {
        let mut c = busy_port();
        c.clear_selected_extended(extended_counter_select::UNICAST_RCV_PKTS);
        assert_eq!((c.port_rcv_pkts, c.port_xmit_pkts), (0, 3));
        c.clear_selected_extended(extended_counter_select::MULTICAST_XMIT_PKTS);
        assert_eq!(
            c.port_xmit_pkts, 3,
            "multicast counters are not the packet counters"
        );
        c.clear_selected_extended(extended_counter_select::RCV_DATA);
        assert_eq!((c.port_rcv_data, c.port_xmit_data), (0, 100));
        assert_eq!(
            c.symbol_error_counter, 1,
            "the extended Set touches no error counter"
        );
    }

    #[test]
    fn data_words_exclude_the_vcrc() {
        // LRH 8 + BTH 12 + 4096 payload + ICRC 4 = 4120 bytes = 1030 words, + VCRC 2.
        assert_eq!(data_words(4122), 1030);
    }
}
