//! QoS configuration in OpenSM's vocabulary: SL2VL tables, VL arbitration tables, Limit of
//! High Priority and the number of data VLs (IBA 7.6.6 SL to VL mapping, 7.6.9 VL arbitration).
//!
//! Keys and value syntax are OpenSM's (`opensm.conf`):
//! `qos_max_vls 4`, `qos_high_limit 0`, `qos_vlarb_high 0:4,1:0`, `qos_vlarb_low 0:0,1:4`,
//! `qos_sl2vl 0,1,2,...` (16 VLs, 15 = drop). Each may carry a port-class prefix:
//! `qos_ca_` (HCA ports), `qos_sw0_` (switch management port 0), `qos_swe_` (switch external
//! ports). A prefixed key overrides the unprefixed one for its class, which overrides OpenSM's
//! built-in defaults (max VLs 15, high limit 0, high table `0:4,1:0,...,14:0`, low table
//! `0:0,1:4,...,14:4`, SL2VL `0,1,...,14,7`).

use crate::vlarb::{ArbEntry, VlArbConfig, MAX_ENTRIES, VL15};
use serde::Deserialize;

/// Errors in a QoS value or key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QosError {
    /// A value did not parse.
    #[error("bad value for {key}: {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A `qos_` key OpenSM does not have.
    #[error("unknown QoS key {key} (expected qos_[ca_|sw0_|swe_]max_vls/high_limit/vlarb_high/vlarb_low/sl2vl)")]
    UnknownKey {
        /// The key.
        key: String,
    },
}

/// An SL to VL mapping table: 16 entries of 4 bits (IBA 7.6.6). VL15 means "drop".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Sl2Vl(pub [u8; 16]);

impl Sl2Vl {
    /// OpenSM's default: SL n -> VL n, SL15 -> VL7.
    pub const OPENSM_DEFAULT: Sl2Vl = Sl2Vl([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 7]);
    /// Every SL on VL0.
    pub const ALL_VL0: Sl2Vl = Sl2Vl([0; 16]);

    /// The VL for `sl` (0..=15).
    pub fn vl(&self, sl: u8) -> u8 {
        self.0[(sl & 0xF) as usize]
    }

    /// Parses OpenSM's `qos_sl2vl` syntax: 16 comma-separated VLs.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut t = [0u8; 16];
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if parts.len() != 16 {
            return Err(format!(
                "expected 16 comma-separated VLs (one per SL), got {}",
                parts.len()
            ));
        }
        for (i, p) in parts.iter().enumerate() {
            let vl: u8 = p
                .parse()
                .map_err(|_| format!("SL{i}: `{p}` is not a VL number"))?;
            if vl > VL15 {
                return Err(format!("SL{i}: VL {vl} is out of range 0..=15"));
            }
            t[i] = vl;
        }
        Ok(Sl2Vl(t))
    }
}

impl TryFrom<String> for Sl2Vl {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Sl2Vl::parse(&s)
    }
}

/// A VL arbitration table in OpenSM syntax (`vl:weight,...`, up to 64 entries).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct ArbTable(pub Vec<ArbEntry>);

impl ArbTable {
    /// Parses `0:4,1:0,...`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut v = Vec::new();
        for (i, item) in s.split(',').map(str::trim).enumerate() {
            if item.is_empty() {
                continue;
            }
            let (vl, w) = item
                .split_once(':')
                .ok_or_else(|| format!("entry {i} `{item}` is not VL:WEIGHT"))?;
            let vl: u8 = vl
                .trim()
                .parse()
                .map_err(|_| format!("entry {i}: `{vl}` is not a VL number"))?;
            if vl >= VL15 {
                return Err(format!("entry {i}: VL {vl} is not a data VL (0..=14)"));
            }
            let weight: u8 = w
                .trim()
                .parse()
                .map_err(|_| format!("entry {i}: weight `{w}` is not in 0..=255"))?;
            v.push(ArbEntry { vl, weight });
        }
        if v.len() > MAX_ENTRIES {
            return Err(format!(
                "{} entries, a table holds at most {MAX_ENTRIES}",
                v.len()
            ));
        }
        Ok(ArbTable(v))
    }
}

impl TryFrom<String> for ArbTable {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        ArbTable::parse(&s)
    }
}

/// Number of data VLs, 1..=15 (OpenSM `qos_max_vls`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "u8")]
pub struct MaxVls(pub u8);

impl TryFrom<u8> for MaxVls {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, String> {
        if (1..=15).contains(&v) {
            Ok(MaxVls(v))
        } else {
            Err(format!("{v} data VLs: must be 1..=15"))
        }
    }
}

/// The class of port a QoS setting applies to (OpenSM's key prefixes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortClass {
    /// Channel adapter (HCA) ports: `qos_ca_`.
    Ca,
    /// Switch management port 0: `qos_sw0_`.
    Sw0,
    /// Switch external ports: `qos_swe_`.
    Swe,
}

/// One class's settings, each optional (unset falls back to the unprefixed key, then to
/// OpenSM's default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QosClassOptions {
    /// `..._max_vls`.
    pub max_vls: Option<MaxVls>,
    /// `..._high_limit`.
    pub high_limit: Option<u8>,
    /// `..._vlarb_high`.
    pub vlarb_high: Option<ArbTable>,
    /// `..._vlarb_low`.
    pub vlarb_low: Option<ArbTable>,
    /// `..._sl2vl`.
    pub sl2vl: Option<Sl2Vl>,
}

/// The settings resolved for one port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortQos {
    /// Data VLs the SM wants (the port may support fewer: see `vl_cap`).
    pub max_vls: u8,
    /// Arbitration tables and high limit.
    pub vlarb: VlArbConfig,
    /// SL2VL table.
    pub sl2vl: Sl2Vl,
}

/// A whole fabric's QoS options in OpenSM's structure.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosOptions {
    /// `qos_max_vls`.
    pub qos_max_vls: Option<MaxVls>,
    /// `qos_high_limit`.
    pub qos_high_limit: Option<u8>,
    /// `qos_vlarb_high`.
    pub qos_vlarb_high: Option<ArbTable>,
    /// `qos_vlarb_low`.
    pub qos_vlarb_low: Option<ArbTable>,
    /// `qos_sl2vl`.
    pub qos_sl2vl: Option<Sl2Vl>,
    /// `qos_ca_max_vls`.
    pub qos_ca_max_vls: Option<MaxVls>,
    /// `qos_ca_high_limit`.
    pub qos_ca_high_limit: Option<u8>,
    /// `qos_ca_vlarb_high`.
    pub qos_ca_vlarb_high: Option<ArbTable>,
    /// `qos_ca_vlarb_low`.
    pub qos_ca_vlarb_low: Option<ArbTable>,
    /// `qos_ca_sl2vl`.
    pub qos_ca_sl2vl: Option<Sl2Vl>,
    /// `qos_sw0_max_vls`.
    pub qos_sw0_max_vls: Option<MaxVls>,
    /// `qos_sw0_high_limit`.
    pub qos_sw0_high_limit: Option<u8>,
    /// `qos_sw0_vlarb_high`.
    pub qos_sw0_vlarb_high: Option<ArbTable>,
    /// `qos_sw0_vlarb_low`.
    pub qos_sw0_vlarb_low: Option<ArbTable>,
    /// `qos_sw0_sl2vl`.
    pub qos_sw0_sl2vl: Option<Sl2Vl>,
    /// `qos_swe_max_vls`.
    pub qos_swe_max_vls: Option<MaxVls>,
    /// `qos_swe_high_limit`.
    pub qos_swe_high_limit: Option<u8>,
    /// `qos_swe_vlarb_high`.
    pub qos_swe_vlarb_high: Option<ArbTable>,
    /// `qos_swe_vlarb_low`.
    pub qos_swe_vlarb_low: Option<ArbTable>,
    /// `qos_swe_sl2vl`.
    pub qos_swe_sl2vl: Option<Sl2Vl>,
}

const OPENSM_VLARB_HIGH: &str = "0:4,1:0,2:0,3:0,4:0,5:0,6:0,7:0,8:0,9:0,10:0,11:0,12:0,13:0,14:0";
const OPENSM_VLARB_LOW: &str = "0:0,1:4,2:4,3:4,4:4,5:4,6:4,7:4,8:4,9:4,10:4,11:4,12:4,13:4,14:4";

impl QosOptions {
    /// Parses the `qos_*` lines of an `opensm.conf` text (`key value`, `#` comments). Lines
    /// with other keys are ignored, as OpenSM's file holds many unrelated options; an unknown
    /// `qos_` key is an error.
    pub fn from_opensm_conf(text: &str) -> Result<Self, QosError> {
        let mut o = QosOptions::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((key, value)) = line.split_once(char::is_whitespace) else {
                continue;
            };
            if key.starts_with("qos_") && key != "qos_policy_file" {
                o.set(key, value.trim())?;
            }
        }
        Ok(o)
    }

    /// Sets one key from its OpenSM text value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), QosError> {
        let bad = |reason: String| QosError::BadValue {
            key: key.to_string(),
            reason,
        };
        let (prefix, field) = ["qos_ca_", "qos_sw0_", "qos_swe_", "qos_"]
            .iter()
            .find_map(|p| key.strip_prefix(p).map(|f| (*p, f)))
            .ok_or_else(|| QosError::UnknownKey {
                key: key.to_string(),
            })?;
        let class = match prefix {
            "qos_ca_" => Some(PortClass::Ca),
            "qos_sw0_" => Some(PortClass::Sw0),
            "qos_swe_" => Some(PortClass::Swe),
            _ => None,
        };
        let mut c = self.class_options(class);
        match field {
            "max_vls" => {
                let v: u8 = value
                    .parse()
                    .map_err(|_| bad(format!("`{value}` is not a number")))?;
                c.max_vls = Some(MaxVls::try_from(v).map_err(bad)?);
            }
            "high_limit" => {
                c.high_limit = Some(
                    value
                        .parse()
                        .map_err(|_| bad(format!("`{value}` is not in 0..=255")))?,
                );
            }
            "vlarb_high" => c.vlarb_high = Some(ArbTable::parse(value).map_err(bad)?),
            "vlarb_low" => c.vlarb_low = Some(ArbTable::parse(value).map_err(bad)?),
            "sl2vl" => c.sl2vl = Some(Sl2Vl::parse(value).map_err(bad)?),
            _ => {
                return Err(QosError::UnknownKey {
                    key: key.to_string(),
                })
            }
        }
        self.set_class_options(class, c);
        Ok(())
    }

    fn class_options(&self, class: Option<PortClass>) -> QosClassOptions {
        match class {
            None => QosClassOptions {
                max_vls: self.qos_max_vls,
                high_limit: self.qos_high_limit,
                vlarb_high: self.qos_vlarb_high.clone(),
                vlarb_low: self.qos_vlarb_low.clone(),
                sl2vl: self.qos_sl2vl,
            },
            Some(PortClass::Ca) => QosClassOptions {
                max_vls: self.qos_ca_max_vls,
                high_limit: self.qos_ca_high_limit,
                vlarb_high: self.qos_ca_vlarb_high.clone(),
                vlarb_low: self.qos_ca_vlarb_low.clone(),
                sl2vl: self.qos_ca_sl2vl,
            },
            Some(PortClass::Sw0) => QosClassOptions {
                max_vls: self.qos_sw0_max_vls,
                high_limit: self.qos_sw0_high_limit,
                vlarb_high: self.qos_sw0_vlarb_high.clone(),
                vlarb_low: self.qos_sw0_vlarb_low.clone(),
                sl2vl: self.qos_sw0_sl2vl,
            },
            Some(PortClass::Swe) => QosClassOptions {
                max_vls: self.qos_swe_max_vls,
                high_limit: self.qos_swe_high_limit,
                vlarb_high: self.qos_swe_vlarb_high.clone(),
                vlarb_low: self.qos_swe_vlarb_low.clone(),
                sl2vl: self.qos_swe_sl2vl,
            },
        }
    }

    fn set_class_options(&mut self, class: Option<PortClass>, c: QosClassOptions) {
        let (m, h, vh, vl, s) = match class {
            None => (
                &mut self.qos_max_vls,
                &mut self.qos_high_limit,
                &mut self.qos_vlarb_high,
                &mut self.qos_vlarb_low,
                &mut self.qos_sl2vl,
            ),
            Some(PortClass::Ca) => (
                &mut self.qos_ca_max_vls,
                &mut self.qos_ca_high_limit,
                &mut self.qos_ca_vlarb_high,
                &mut self.qos_ca_vlarb_low,
                &mut self.qos_ca_sl2vl,
            ),
            Some(PortClass::Sw0) => (
                &mut self.qos_sw0_max_vls,
                &mut self.qos_sw0_high_limit,
                &mut self.qos_sw0_vlarb_high,
                &mut self.qos_sw0_vlarb_low,
                &mut self.qos_sw0_sl2vl,
            ),
            Some(PortClass::Swe) => (
                &mut self.qos_swe_max_vls,
                &mut self.qos_swe_high_limit,
                &mut self.qos_swe_vlarb_high,
                &mut self.qos_swe_vlarb_low,
                &mut self.qos_swe_sl2vl,
            ),
        };
        *m = c.max_vls;
        *h = c.high_limit;
        *vh = c.vlarb_high;
        *vl = c.vlarb_low;
        *s = c.sl2vl;
    }

    /// The settings for a port of `class` (prefixed key, else unprefixed, else OpenSM default).
    pub fn resolve(&self, class: PortClass) -> PortQos {
        let spec = self.class_options(Some(class));
        let base = self.class_options(None);
        let max_vls = spec.max_vls.or(base.max_vls).map_or(15, |m| m.0);
        let high_limit = spec.high_limit.or(base.high_limit).unwrap_or(0);
        let high = spec
            .vlarb_high
            .or(base.vlarb_high)
            .unwrap_or_else(|| ArbTable::parse(OPENSM_VLARB_HIGH).expect("valid default"));
        let low = spec
            .vlarb_low
            .or(base.vlarb_low)
            .unwrap_or_else(|| ArbTable::parse(OPENSM_VLARB_LOW).expect("valid default"));
        let sl2vl = spec.sl2vl.or(base.sl2vl).unwrap_or(Sl2Vl::OPENSM_DEFAULT);
        PortQos {
            max_vls,
            vlarb: VlArbConfig {
                high: high.0,
                low: low.0,
                high_limit,
            },
            sl2vl,
        }
    }
}

/// The settings of a port when QoS is not configured at all: one data VL, every SL on VL0.
pub fn no_qos() -> PortQos {
    PortQos {
        max_vls: 1,
        vlarb: VlArbConfig::single_vl(),
        sl2vl: Sl2Vl::ALL_VL0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opensm_defaults_when_nothing_is_set() {
        let q = QosOptions::default().resolve(PortClass::Swe);
        assert_eq!(q.max_vls, 15);
        assert_eq!(q.vlarb.high_limit, 0);
        assert_eq!(q.vlarb.high[0], ArbEntry { vl: 0, weight: 4 });
        assert_eq!(q.vlarb.high.len(), 15);
        assert_eq!(q.vlarb.low[3], ArbEntry { vl: 3, weight: 4 });
        assert_eq!(q.sl2vl.vl(15), 7);
        assert_eq!(q.sl2vl.vl(9), 9);
    }

    #[test]
    fn prefixed_keys_override_unprefixed_which_override_defaults() {
        let conf = "\
# a piece of opensm.conf
qos_max_vls 4
qos_high_limit 10
qos_vlarb_high 0:4,1:0
qos_vlarb_low 0:0,1:64,2:128
qos_sl2vl 0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,15
qos_ca_max_vls 2
qos_swe_high_limit 255
qos_ca_sl2vl 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1
routing_engine ftree
";
        let o = QosOptions::from_opensm_conf(conf).unwrap();
        let ca = o.resolve(PortClass::Ca);
        assert_eq!(ca.max_vls, 2);
        assert_eq!(ca.vlarb.high_limit, 10);
        assert_eq!(ca.sl2vl.vl(0), 1);
        let swe = o.resolve(PortClass::Swe);
        assert_eq!(swe.max_vls, 4);
        assert_eq!(swe.vlarb.high_limit, 255);
        assert_eq!(swe.vlarb.low[2], ArbEntry { vl: 2, weight: 128 });
        assert_eq!(swe.sl2vl.vl(15), 15);
        let sw0 = o.resolve(PortClass::Sw0);
        assert_eq!(sw0.vlarb.high_limit, 10);
    }

    #[test]
    fn bad_values_name_the_key_and_the_problem() {
        let e = QosOptions::from_opensm_conf("qos_swe_vlarb_low 0:4,15:2").unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad value for qos_swe_vlarb_low: entry 1: VL 15 is not a data VL (0..=14)"
        );
        let e = QosOptions::from_opensm_conf("qos_sl2vl 0,1,2").unwrap_err();
        assert!(e.to_string().contains("expected 16"), "{e}");
        let e = QosOptions::from_opensm_conf("qos_max_vls 16").unwrap_err();
        assert!(e.to_string().contains("1..=15"), "{e}");
        let e = QosOptions::from_opensm_conf("qos_ca_vlarb_mid 0:1").unwrap_err();
        assert!(matches!(e, QosError::UnknownKey { .. }));
        let long = (0..65)
            .map(|i| format!("{}:1", i % 15))
            .collect::<Vec<_>>()
            .join(",");
        assert!(ArbTable::parse(&long).unwrap_err().contains("at most 64"));
    }
}
