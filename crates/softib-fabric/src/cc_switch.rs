//! Switch-side congestion marking of IBA Annex A10 (SwitchCongestionSetting and
//! SwitchPortCongestionSetting), on the [`CongestionMarker`] hook, configured with OpenSM's
//! keys.
//!
//! Annex A10 leaves the congestion *detection* to the implementation and gives the switch
//! knobs to tune it; softib models them as follows.
//!
//! - **Threshold** (4 bits, 0-15): 0 disables marking, 1 is the least and 15 the most
//!   aggressive. A10 speaks of the output VL's queue, which an input-queued switch does
//!   not have; softib measures its equivalent for each granted packet: how long the packet
//!   waited at the head of its input FIFO for this output (`OutputState::head_wait_blocks`,
//!   the wait in 64-byte blocks of the output's link time). In an output-queued switch
//!   that is the data queued ahead of the packet; time spent further back in the FIFO,
//!   behind packets bound elsewhere, is head-of-line blocking caused by *their* outputs
//!   and is not counted. The output VL is congested when the wait exceeds
//!   `reference x (16 - Threshold) / 16` blocks, the reference being one input buffer per
//!   VL (`FabricConfig::rx_buffer_bytes`): 15 marks once a packet waited more than 1/16 of
//!   a buffer's worth of link time (one 4 KiB packet with the 64 KiB default, i.e. it found
//!   another input's packet in the way), 8 half a buffer, 1 nearly a whole buffer. The
//!   scale is linear in the buffer because that is the only resource the threshold guards:
//!   beyond one buffer's worth the congestion has already spread upstream through credits.
//!
//!   Two simpler readings were tried on the victim test of `tests/cc_loop.rs` (an 8->1
//!   incast across two switches, with a victim flow sharing the inter-switch link and the
//!   second switch's input FIFO and leaving by an idle port) and failed it. Counting every
//!   packet routed to the output (an output-queued switch's queue, wherever the packets
//!   wait) also counts the victim's packets held behind hot heads in the shared FIFO, so
//!   the victim is marked at its own idle exit port and keeps about half of its share.
//!   Requiring two contending inputs at the grant instead misses four hot senders that
//!   reach the root through one inter-switch input (19% of the share). The head-of-line
//!   wait sees the contention of those four (their heads wait for the other inputs' and
//!   each other's packets) and never blames an output for packets stuck behind another.
//! - **Root or victim.** A10 distinguishes a port that is the root of congestion (it sends
//!   as fast as it can and still has a queue) from a victim (it waits because the
//!   downstream port gives no credits, i.e. the congestion is elsewhere). A port marks as a
//!   root; it marks as a victim only if its bit in **Victim_Mask** is set (typically ports
//!   towards CAs that cannot mark themselves). softib calls an output VL a victim from the
//!   moment it is found blocked on credits with a request waiting
//!   (`OutputState::credit_stalls` rose) until it grants a packet that waited no more than
//!   the threshold: the waits in between were built by the downstream stall, not by this
//!   link's rate. A root's receiver keeps up (an HCA consumes at once).
//! - **Marking_Rate**: the mean number of eligible packets between two marks. softib marks
//!   an eligible packet with probability `1 / (Marking_Rate + 1)`, so the unmarked run
//!   between marks is geometric with that mean; 0 marks every eligible packet. The draw uses
//!   the port's own stream (`StreamKind::Marking`, index `node << 8 | port`).
//! - **Packet_Size** (64-byte units): packets shorter than `Packet_Size x 64` bytes are never
//!   marked (ACKs and small control messages carry no load worth slowing).
//! - **Control_Map** (SwitchCongestionSetting): which fields the MAD carries: bit 0
//!   Victim_Mask, bit 1 Credit_Mask, bit 2 Threshold and Packet_Size, bit 3 CS_Threshold and
//!   CS_ReturnDelay, bit 4 Marking_Rate. A field whose bit is clear keeps the switch's
//!   power-on value (Threshold 0, i.e. no marking; empty Victim_Mask; Packet_Size 0;
//!   Marking_Rate 0). The credit-starvation fields (Credit_Mask, CS_*) are not modelled.
//!
//! OpenSM applies one switch setting to every switch and every port
//! (`cc_sw_cong_setting_*`), so a [`SwitchCcConfig`] does too.

use crate::congestion::{CongestionMarker, OutputState};
use crate::link::LinkRate;
use crate::packet::PacketMeta;
use crate::rng::{SeedTree, StreamKind};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use softib_transport::cc::{parse_opensm_ca, CcAlgorithm, CcConfig, OpensmCa, OpensmError};
use std::collections::{HashMap, HashSet};

/// Control_Map bit: Victim_Mask is valid.
pub const CONTROL_VICTIM_MASK: u32 = 1 << 0;
/// Control_Map bit: Credit_Mask is valid (not modelled).
pub const CONTROL_CREDIT_MASK: u32 = 1 << 1;
/// Control_Map bit: Threshold and Packet_Size are valid.
pub const CONTROL_THRESHOLD: u32 = 1 << 2;
/// Control_Map bit: CS_Threshold and CS_ReturnDelay are valid (not modelled).
pub const CONTROL_CS: u32 = 1 << 3;
/// Control_Map bit: Marking_Rate is valid.
pub const CONTROL_MARKING_RATE: u32 = 1 << 4;

/// The switch congestion setting OpenSM pushes to every switch (`cc_sw_cong_setting_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchCcConfig {
    /// `cc_sw_cong_setting_control_map`: which of the fields below apply.
    pub control_map: u32,
    /// `cc_sw_cong_setting_victim_mask`: bit n = port n marks as a victim too (256 bits).
    pub victim_mask: [u64; 4],
    /// `cc_sw_cong_setting_threshold`: 0 = never, 1..=15 increasingly aggressive.
    pub threshold: u8,
    /// `cc_sw_cong_setting_packet_size`: packets below this many 64-byte blocks are never
    /// marked.
    pub packet_size: u8,
    /// `cc_sw_cong_setting_marking_rate`: mean eligible packets between marks.
    pub marking_rate: u16,
}

impl Default for SwitchCcConfig {
    /// Every field valid, Threshold 15 (most aggressive), no victim ports, every eligible
    /// packet marked, no size floor.
    fn default() -> Self {
        SwitchCcConfig {
            control_map: CONTROL_VICTIM_MASK
                | CONTROL_CREDIT_MASK
                | CONTROL_THRESHOLD
                | CONTROL_CS
                | CONTROL_MARKING_RATE,
            victim_mask: [0; 4],
            threshold: 15,
            packet_size: 0,
            marking_rate: 0,
        }
    }
}

impl SwitchCcConfig {
    /// The values a switch actually runs with: fields outside Control_Map keep their
    /// power-on values.
    pub fn effective(&self) -> SwitchCcConfig {
        let m = self.control_map;
        SwitchCcConfig {
            control_map: m,
            victim_mask: if m & CONTROL_VICTIM_MASK != 0 {
                self.victim_mask
            } else {
                [0; 4]
            },
            threshold: if m & CONTROL_THRESHOLD != 0 {
                self.threshold
            } else {
                0
            },
            packet_size: if m & CONTROL_THRESHOLD != 0 {
                self.packet_size
            } else {
                0
            },
            marking_rate: if m & CONTROL_MARKING_RATE != 0 {
                self.marking_rate
            } else {
                0
            },
        }
    }

    /// Whether port `port` is in the Victim_Mask.
    pub fn is_victim_port(&self, port: u8) -> bool {
        self.victim_mask[(port / 64) as usize] & (1u64 << (port % 64)) != 0
    }

    /// The head-of-line wait (64-byte blocks of link time) above which an output VL is
    /// congested, for a reference buffer of `buffer_blocks`; `None` when Threshold is 0.
    pub fn threshold_blocks(&self, buffer_blocks: u32) -> Option<u32> {
        let t = self.threshold.min(15) as u32;
        (t > 0).then(|| buffer_blocks * (16 - t) / 16)
    }
}

/// What an opensm.conf says about congestion control, both sides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpensmCc {
    /// `congestion_control TRUE|FALSE`.
    pub enabled: bool,
    /// The switch setting (`cc_sw_cong_setting_*`).
    pub switch: SwitchCcConfig,
    /// The CA setting (`cc_ca_cong_setting_*`, `cc_cct`), read by the engine's parser.
    pub ca: OpensmCa,
}

impl OpensmCc {
    /// The `DeviceConfig::cc` of an HCA under this setting, on a port of `rate`: the IBA
    /// CCA as configured, FECN answered with BECN, native-IB wire overhead (LRH 8 + ICRC 4
    /// + VCRC 2 bytes). With `congestion_control FALSE` the engine's default (all off).
    pub fn device_cc(&self, rate: &LinkRate) -> CcConfig {
        if !self.enabled {
            return CcConfig::default();
        }
        CcConfig {
            algorithm: CcAlgorithm::Iba(self.ca.config.clone()),
            notify: true,
            // Each BECN must count: one CNP per marked packet (RC answers in the ACK anyway).
            min_time_between_cnps: 0,
            link_rate_mbps: (rate.data_bps() / 1_000_000).max(1),
            wire_overhead: 14,
        }
    }

    /// The switch marker for a fabric whose receive buffers hold `rx_buffer_bytes` per VL,
    /// its random streams from `seeds`; `None` when congestion control is off.
    pub fn marker(&self, rx_buffer_bytes: u32, seeds: &SeedTree) -> Option<A10Marker> {
        self.enabled
            .then(|| A10Marker::new(self.switch.clone(), rx_buffer_bytes, seeds))
    }
}

/// Parses a number as OpenSM's `strtoul(.., 0)` does.
fn parse_num(token: &str) -> Option<u64> {
    let t = token.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8).ok()
    } else {
        t.parse().ok()
    }
}

/// Parses a 256-bit port mask written as one hexadecimal number (`0x` optional), as OpenSM
/// writes `cc_sw_cong_setting_victim_mask`.
fn parse_mask(token: &str) -> Option<[u64; 4]> {
    let t = token.trim();
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if hex.is_empty() || hex.len() > 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut mask = [0u64; 4];
    // Least significant 16 hex digits are ports 0..63, and so on.
    for (i, chunk) in hex.as_bytes().rchunks(16).enumerate() {
        let s = std::str::from_utf8(chunk).ok()?;
        mask[i] = u64::from_str_radix(s, 16).ok()?;
    }
    Some(mask)
}

/// Parses the congestion control keys of an opensm.conf text: the switch keys here, the CA
/// keys and `cc_cct` with `softib_transport::cc::parse_opensm_ca`. Switch keys absent from
/// the text keep [`SwitchCcConfig::default`]. Unknown `cc_sw_*` keys are errors (typos);
/// the credit-starvation keys are accepted and ignored (not modelled).
pub fn parse_opensm_cc(text: &str) -> Result<OpensmCc, OpensmError> {
    let ca = parse_opensm_ca(text)?;
    let mut sw = SwitchCcConfig::default();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = match line.split_once(char::is_whitespace) {
            Some((k, v)) => (k, v.trim()),
            None => (line, ""),
        };
        let err = |reason: &str| OpensmError {
            line: n + 1,
            key: key.to_string(),
            token: value.to_string(),
            reason: reason.to_string(),
        };
        let num = |max: u64, what: &str| -> Result<u64, OpensmError> {
            let v = parse_num(value).ok_or_else(|| err("not a number"))?;
            if v > max {
                return Err(err(&format!("{what} is at most {max}")));
            }
            Ok(v)
        };
        match key {
            "cc_sw_cong_setting_control_map" => {
                sw.control_map = num(0xFFFF_FFFF, "Control_Map")? as u32
            }
            "cc_sw_cong_setting_victim_mask" => {
                sw.victim_mask = parse_mask(value)
                    .ok_or_else(|| err("a 256-bit port mask in hexadecimal (64 digits at most)"))?
            }
            "cc_sw_cong_setting_threshold" => {
                sw.threshold = num(15, "Threshold (a 4-bit field)")? as u8
            }
            "cc_sw_cong_setting_packet_size" => {
                sw.packet_size = num(0xFF, "Packet_Size (64-byte units)")? as u8
            }
            "cc_sw_cong_setting_marking_rate" => {
                sw.marking_rate = num(0xFFFF, "Marking_Rate")? as u16
            }
            "cc_sw_cong_setting_credit_mask"
            | "cc_sw_cong_setting_credit_starvation_threshold"
            | "cc_sw_cong_setting_credit_starvation_return_delay" => {}
            k if k.starts_with("cc_sw_") => {
                return Err(err(
                    "unknown switch congestion key (known: cc_sw_cong_setting_control_map, \
                     _victim_mask, _credit_mask, _threshold, _packet_size, \
                     _credit_starvation_threshold, _credit_starvation_return_delay, \
                     _marking_rate)",
                ))
            }
            _ => {}
        }
    }
    Ok(OpensmCc {
        enabled: ca.enabled,
        switch: sw,
        ca,
    })
}

/// The Annex A10 marking policy of every switch port (see the module documentation).
pub struct A10Marker {
    cfg: SwitchCcConfig,
    threshold: Option<u32>,
    /// Per switch (topology index) and port, its own setting and threshold (SMs may set
    /// switches and ports differently, A10.4.3.6-7); a node without an entry runs `cfg`.
    per_port: Vec<Vec<(SwitchCcConfig, Option<u32>)>>,
    seeds: SeedTree,
    rngs: HashMap<(u32, u8), ChaCha8Rng>,
    /// Output VLs (node, port, VL) held back by credits since they last served a packet
    /// promptly: victims of congestion further on.
    victim_episode: HashSet<(u32, u8, u8)>,
    /// The `credit_stalls` count of each output VL at its previous grant.
    stalls_seen: HashMap<(u32, u8, u8), u64>,
    /// Grants seen above the threshold but not marked because the port was a victim.
    pub victim_skips: u64,
}

impl A10Marker {
    /// The policy `cfg` (its effective values under Control_Map) for receive buffers of
    /// `rx_buffer_bytes` per VL, random streams from `seeds`.
    pub fn new(cfg: SwitchCcConfig, rx_buffer_bytes: u32, seeds: &SeedTree) -> Self {
        let cfg = cfg.effective();
        let buffer_blocks = rx_buffer_bytes.div_ceil(64);
        let threshold = cfg.threshold_blocks(buffer_blocks);
        A10Marker {
            cfg,
            threshold,
            per_port: Vec::new(),
            seeds: seeds.clone(),
            rngs: HashMap::new(),
            victim_episode: HashSet::new(),
            stalls_seen: HashMap::new(),
            victim_skips: 0,
        }
    }

    /// The policy of every switch port, one list per topology node (a CA's is empty),
    /// as the nodes' CC agents hold it (`cc_state::switch_port_settings`); `None` when no
    /// port marks (every Threshold 0).
    pub fn for_ports(
        per_port: Vec<Vec<SwitchCcConfig>>,
        rx_buffer_bytes: u32,
        seeds: &SeedTree,
    ) -> Option<Self> {
        let buffer_blocks = rx_buffer_bytes.div_ceil(64);
        let any = per_port.iter().flatten().any(|c| c.threshold > 0);
        let per_port = per_port
            .into_iter()
            .map(|ports| {
                ports
                    .into_iter()
                    .map(|c| {
                        let t = c.threshold_blocks(buffer_blocks);
                        (c, t)
                    })
                    .collect()
            })
            .collect();
        any.then(|| {
            let off = SwitchCcConfig {
                threshold: 0,
                ..SwitchCcConfig::default()
            };
            let mut m = A10Marker::new(off, rx_buffer_bytes, seeds);
            m.per_port = per_port;
            m
        })
    }

    /// The effective setting (of ports without their own, see [`A10Marker::for_ports`]).
    pub fn config(&self) -> &SwitchCcConfig {
        &self.cfg
    }

    /// The setting and threshold of port `port` of switch `node`.
    fn port(&self, node: u32, port: u8) -> (&SwitchCcConfig, Option<u32>) {
        match self
            .per_port
            .get(node as usize)
            .and_then(|n| n.get(port as usize))
        {
            Some((c, t)) => (c, *t),
            None => (&self.cfg, self.threshold),
        }
    }
}

impl CongestionMarker for A10Marker {
    fn mark(&mut self, state: &OutputState, packet: &PacketMeta) -> bool {
        let (cfg, threshold) = self.port(state.node, state.port);
        let Some(limit) = threshold else {
            return false;
        };
        let (packet_size, victim, marking_rate) = (
            cfg.packet_size,
            cfg.is_victim_port(state.port),
            cfg.marking_rate,
        );
        let key = (state.node, state.port, state.vl);
        let seen = self.stalls_seen.insert(key, state.credit_stalls);
        if state.credit_stalls > seen.unwrap_or(0) {
            // Held back by credits since the last grant: congestion further on.
            self.victim_episode.insert(key);
        }
        if state.head_wait_blocks <= limit {
            // Served promptly: no queue here, and a victim episode is over.
            self.victim_episode.remove(&key);
            return false;
        }
        if (packet.len as u32) < packet_size as u32 * 64 {
            return false;
        }
        if self.victim_episode.contains(&key) && !victim {
            self.victim_skips += 1;
            return false;
        }
        if marking_rate == 0 {
            return true;
        }
        let seeds = &self.seeds;
        let rng = self
            .rngs
            .entry((state.node, state.port))
            .or_insert_with(|| {
                seeds.rng(
                    StreamKind::Marking,
                    ((state.node as u64) << 8) | state.port as u64,
                )
            });
        rng.gen_range(0..=marking_rate as u32) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_sides_of_an_opensm_conf() {
        let text = "\
congestion_control TRUE
cc_sw_cong_setting_control_map 0x1f
cc_sw_cong_setting_victim_mask 0x0000000000000000000000000000000000000000000000000000000000000006
cc_sw_cong_setting_credit_mask 0x0
cc_sw_cong_setting_threshold 0x0c
cc_sw_cong_setting_packet_size 8
cc_sw_cong_setting_marking_rate 0x000a
cc_ca_cong_setting_port_control 0
cc_ca_cong_setting_ccti_timer 0 150
cc_ca_cong_setting_ccti_increase 0 1
cc_cct 0:0,1:1,1:2,1:3
";
        let c = parse_opensm_cc(text).unwrap();
        assert!(c.enabled);
        assert_eq!(c.switch.threshold, 12);
        assert_eq!(c.switch.packet_size, 8);
        assert_eq!(c.switch.marking_rate, 10);
        assert!(c.switch.is_victim_port(1) && c.switch.is_victim_port(2));
        assert!(!c.switch.is_victim_port(3) && !c.switch.is_victim_port(0));
        assert_eq!(c.ca.config.entries[0].ccti_timer, 150);
        assert_eq!(c.ca.config.cct.ccti_limit(), 3);
        let dev = c.device_cc(&LinkRate::new(
            crate::link::LinkWidth::X4,
            crate::link::LinkSpeed::Edr,
        ));
        assert!(dev.notify);
        assert_eq!(dev.link_rate_mbps, 100_000);
        assert!(matches!(dev.algorithm, CcAlgorithm::Iba(_)));
    }

    #[test]
    fn bad_switch_values_name_the_line_and_key() {
        let e = parse_opensm_cc("congestion_control TRUE\ncc_sw_cong_setting_threshold 16\n")
            .unwrap_err();
        assert_eq!(
            (e.line, e.key.as_str()),
            (2, "cc_sw_cong_setting_threshold")
        );
        let e = parse_opensm_cc("cc_sw_cong_setting_threshhold 3\n").unwrap_err();
        assert!(e.reason.contains("unknown"));
        let e = parse_opensm_cc("cc_sw_cong_setting_victim_mask 0xZZ\n").unwrap_err();
        assert_eq!(e.line, 1);
        let long = format!("cc_sw_cong_setting_victim_mask 0x{}\n", "1".repeat(65));
        assert!(parse_opensm_cc(&long).is_err());
    }

    #[test]
    fn a_high_mask_digit_is_a_high_port() {
        let m = parse_mask(&format!("1{}", "0".repeat(63))).unwrap();
        assert_eq!(m, [0, 0, 0, 1 << 60]);
        assert_eq!(parse_mask("0x8").unwrap(), [8, 0, 0, 0]);
    }

    #[test]
    fn threshold_scale_and_control_map() {
        let mut c = SwitchCcConfig::default();
        assert_eq!(c.threshold_blocks(1024), Some(64));
        c.threshold = 8;
        assert_eq!(c.threshold_blocks(1024), Some(512));
        c.threshold = 1;
        assert_eq!(c.threshold_blocks(1024), Some(960));
        c.threshold = 0;
        assert_eq!(c.threshold_blocks(1024), None);
        // Threshold outside the Control_Map keeps the power-on 0: no marking.
        let c = SwitchCcConfig {
            control_map: CONTROL_MARKING_RATE,
            threshold: 15,
            marking_rate: 4,
            ..SwitchCcConfig::default()
        };
        let e = c.effective();
        assert_eq!((e.threshold, e.marking_rate), (0, 4));
    }

    fn meta(len: usize) -> PacketMeta {
        PacketMeta::new(1, 2, 0, 0, len)
    }

    /// A grant at `port` of a packet that waited `wait` blocks at its input's head, after
    /// `stalls` credit stalls of the output.
    fn state(port: u8, wait: u32, stalls: u64) -> OutputState {
        OutputState {
            now: 0,
            node: 0,
            port,
            vl: 0,
            queued_blocks: wait + 65,
            head_wait_ps: wait as u64 * 5_120,
            head_wait_blocks: wait,
            credit_stalls: stalls,
            credits: 1000,
            waited_ps: 0,
            requests: 3,
        }
    }

    #[test]
    fn marks_roots_above_threshold_and_victims_only_in_the_mask() {
        let mut victim_mask = [0; 4];
        victim_mask[0] = 1 << 2;
        let cfg = SwitchCcConfig {
            threshold: 15,
            packet_size: 2,
            victim_mask,
            ..SwitchCcConfig::default()
        };
        let mut m = A10Marker::new(cfg, 65_536, &SeedTree::new(1));
        let big = meta(4126);
        // Threshold 15 with a 1024-block buffer: more than 64 blocks of waiting.
        assert!(!m.mark(&state(1, 64, 0), &big));
        assert!(m.mark(&state(1, 65, 0), &big));
        // Small packets never.
        assert!(!m.mark(&state(1, 200, 0), &meta(100)));
        // Port 1 was held back by credits: a victim, not in the mask.
        assert!(!m.mark(&state(1, 200, 1), &big));
        assert_eq!(m.victim_skips, 1);
        // It stays a victim while its grants keep waiting...
        assert!(!m.mark(&state(1, 200, 1), &big));
        // ...until one is served promptly; the next congestion there is its own.
        assert!(!m.mark(&state(1, 10, 1), &big));
        assert!(m.mark(&state(1, 200, 1), &big));
        // Port 2 is in the Victim_Mask: it marks when held back too.
        assert!(m.mark(&state(2, 200, 5), &big));
    }

    #[test]
    fn each_port_marks_with_its_own_setting() {
        let big = meta(4126);
        let off_cfg = SwitchCcConfig {
            threshold: 0,
            ..SwitchCcConfig::default()
        };
        let off = vec![vec![off_cfg.clone(); 4], Vec::new()];
        assert!(A10Marker::for_ports(off.clone(), 65_536, &SeedTree::new(1)).is_none());
        let mut ports = off;
        // Only port 2 marks (its own Threshold 15); the other ports stay at 0.
        ports[0][2] = SwitchCcConfig {
            threshold: 15,
            packet_size: 0,
            marking_rate: 0,
            ..off_cfg
        };
        let mut m = A10Marker::for_ports(ports, 65_536, &SeedTree::new(1)).unwrap();
        assert!(m.mark(&state(2, 65, 0), &big));
        assert!(!m.mark(&state(1, 500, 0), &big));
        assert!(!m.mark(&state(2, 64, 0), &big));
    }

    #[test]
    fn marking_rate_is_the_mean_gap() {
        let cfg = SwitchCcConfig {
            marking_rate: 9,
            ..SwitchCcConfig::default()
        };
        let mut m = A10Marker::new(cfg, 65_536, &SeedTree::new(7));
        let n = 100_000;
        let marks = (0..n)
            .filter(|_| m.mark(&state(3, 500, 0), &meta(4126)))
            .count();
        // Expect n / 10 = 10,000 marks; binomial sigma = 95.
        assert!((9_600..=10_400).contains(&marks), "{marks} marks");
    }
}
