//! The CA side of OpenSM's congestion control configuration (opensm.conf, section
//! "Congestion Control OPTIONS"): `congestion_control`, `cc_ca_cong_setting_port_control`,
//! `cc_ca_cong_setting_control_map`, `cc_ca_cong_setting_ccti_timer <SL> <v>`,
//! `..._ccti_increase <SL> <v>`, `..._trigger_threshold <SL> <v>`, `..._ccti_min <SL> <v>` and
//! `cc_cct shift:mult,shift:mult,...` (CCTI_Limit = entries - 1).
//!
//! Numbers are read as OpenSM reads them (C `strtoul` with base 0: decimal, `0x` hex or
//! leading-zero octal). Unlike OpenSM, a bad value is an error that names the line, the key
//! and the offending token instead of a log line and a silently kept default. Keys of other
//! sections (switch settings `cc_sw_*`, routing, QoS, ...) are skipped, so a whole
//! opensm.conf can be given; an unknown `cc_ca_*` key is reported (it is probably a typo).

use thiserror::Error;

use super::iba::{CaCongestionEntry, Cct, CctEntry, IbaCcConfig, PortControl, CCT_MAX_ENTRIES};

/// A line of an OpenSM configuration that softib cannot use.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("line {line}: {key}: `{token}`: {reason}")]
pub struct OpensmError {
    /// 1-based line number.
    pub line: usize,
    /// The key of that line.
    pub key: String,
    /// The token at fault (the whole value if no single token is).
    pub token: String,
    /// What is wrong and what is accepted.
    pub reason: String,
}

/// What an opensm.conf says about CA congestion control.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpensmCa {
    /// `congestion_control TRUE|FALSE` (OpenSM's default is FALSE).
    pub enabled: bool,
    /// `cc_ca_cong_setting_control_map`: SLs whose entries are applied, if given.
    pub control_map: Option<u16>,
    /// The resulting CA configuration (entries of SLs outside the control map are zero).
    pub config: IbaCcConfig,
}

/// Parses an OpenSM `strtoul(.., 0)` number.
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

/// Parses a `cc_cct` value: comma-separated `shift:multiplier` pairs, 1..=128 of them.
/// The error names the bad pair.
pub fn parse_cct(value: &str) -> Result<Cct, (String, String)> {
    let mut entries = Vec::new();
    for tok in value.split(',') {
        let tok = tok.trim();
        let bad = |why: &str| (tok.to_string(), why.to_string());
        let (s, m) = tok
            .split_once(':')
            .ok_or_else(|| bad("a CCT entry is shift:multiplier"))?;
        let shift = parse_num(s).ok_or_else(|| bad("the shift is not a number"))?;
        let mult = parse_num(m).ok_or_else(|| bad("the multiplier is not a number"))?;
        if shift > 3 {
            return Err(bad("the shift is a 2-bit field: 0..=3"));
        }
        if mult > 16383 {
            return Err(bad("the multiplier is a 14-bit field: 0..=16383"));
        }
        if entries.len() == CCT_MAX_ENTRIES {
            return Err(bad("a CCT holds at most 128 entries"));
        }
        entries.push(CctEntry {
            shift: shift as u8,
            multiplier: mult as u16,
        });
    }
    Cct::new(entries).map_err(|e| (value.to_string(), e.to_string()))
}

/// Parses the CA congestion control keys of an opensm.conf text.
pub fn parse_opensm_ca(text: &str) -> Result<OpensmCa, OpensmError> {
    let mut out = OpensmCa::default();
    let mut entries = [CaCongestionEntry::default(); 16];
    let mut configured = 0u16;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = match line.split_once(char::is_whitespace) {
            Some((k, v)) => (k, v.trim()),
            None => (line, ""),
        };
        let err = |token: &str, reason: &str| OpensmError {
            line: n + 1,
            key: key.to_string(),
            token: token.to_string(),
            reason: reason.to_string(),
        };
        let num = |token: &str, max: u64, what: &str| -> Result<u64, OpensmError> {
            let v = parse_num(token).ok_or_else(|| err(token, "not a number"))?;
            if v > max {
                return Err(err(token, &format!("{what} is at most {max}")));
            }
            Ok(v)
        };
        match key {
            "congestion_control" => {
                out.enabled = match value.to_ascii_uppercase().as_str() {
                    "TRUE" => true,
                    "FALSE" => false,
                    _ => return Err(err(value, "expected TRUE or FALSE")),
                }
            }
            "cc_ca_cong_setting_port_control" => {
                out.config.port_control = if num(value, 0xFFFF, "Port_Control")? & 1 == 1 {
                    PortControl::Sl
                } else {
                    PortControl::Qp
                };
            }
            "cc_ca_cong_setting_control_map" => {
                out.control_map = Some(num(value, 0xFFFF, "Control_Map")? as u16);
            }
            "cc_ca_cong_setting_ccti_timer"
            | "cc_ca_cong_setting_ccti_increase"
            | "cc_ca_cong_setting_trigger_threshold"
            | "cc_ca_cong_setting_ccti_min" => {
                let mut it = value.split_whitespace();
                let (Some(sl_tok), Some(v_tok), None) = (it.next(), it.next(), it.next()) else {
                    return Err(err(value, "expected `<SL> <value>`"));
                };
                let sl = num(sl_tok, 15, "the SL")? as usize;
                let e = &mut entries[sl];
                match key {
                    "cc_ca_cong_setting_ccti_timer" => {
                        e.ccti_timer = num(v_tok, 0xFFFF, "CCTI_Timer")? as u16
                    }
                    "cc_ca_cong_setting_ccti_increase" => {
                        e.ccti_increase = num(v_tok, 0xFF, "CCTI_Increase")? as u8
                    }
                    "cc_ca_cong_setting_trigger_threshold" => {
                        e.trigger_threshold = num(v_tok, 0xFF, "Trigger_Threshold")? as u8
                    }
                    _ => e.ccti_min = num(v_tok, 0xFF, "CCTI_Min")? as u8,
                }
                configured |= 1 << sl;
            }
            // OpenSM writes "(null)" for "no table" in the config files it generates.
            "cc_cct" if value == "(null)" => out.config.cct = Cct::default(),
            "cc_cct" => {
                out.config.cct = parse_cct(value).map_err(|(tok, why)| err(&tok, &why))?;
            }
            k if k.starts_with("cc_ca_") => {
                return Err(err(
                    k,
                    "unknown CA congestion key (known: cc_ca_cong_setting_port_control, \
                     _control_map, _ccti_timer, _ccti_increase, _trigger_threshold, _ccti_min)",
                ))
            }
            _ => {}
        }
    }
    let map = out.control_map.unwrap_or(configured);
    for (sl, e) in entries.iter().enumerate() {
        if map & (1 << sl) != 0 {
            out.config.entries[sl] = *e;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_ca_keys_of_an_opensm_conf() {
        let text = "\
# Congestion Control OPTIONS
congestion_control TRUE
cc_key 0x0000000000000000
cc_sw_cong_setting_threshold 0x0f
cc_ca_cong_setting_port_control 0x0000
cc_ca_cong_setting_control_map 0x0003
cc_ca_cong_setting_ccti_timer 0 0x96
cc_ca_cong_setting_ccti_increase 0 1
cc_ca_cong_setting_trigger_threshold 0 2
cc_ca_cong_setting_ccti_min 0 0
cc_ca_cong_setting_ccti_timer 1 20   # trailing comment
cc_ca_cong_setting_ccti_increase 1 4
cc_ca_cong_setting_ccti_timer 2 77
cc_cct 0:0,1:1,0x1:2,2:010,3:16383
routing_engine ftree
";
        let c = parse_opensm_ca(text).unwrap();
        assert!(c.enabled);
        assert_eq!(c.control_map, Some(3));
        assert_eq!(c.config.port_control, PortControl::Qp);
        assert_eq!(
            c.config.entries[0],
            CaCongestionEntry {
                ccti_timer: 150,
                ccti_increase: 1,
                trigger_threshold: 2,
                ccti_min: 0
            }
        );
        assert_eq!(c.config.entries[1].ccti_timer, 20);
        assert_eq!(c.config.entries[1].ccti_increase, 4);
        // SL 2 is outside the control map.
        assert_eq!(c.config.entries[2], CaCongestionEntry::default());
        let cct = c.config.cct.entries();
        assert_eq!(cct.len(), 5);
        assert_eq!(c.config.cct.ccti_limit(), 4);
        assert_eq!(cct[2], CctEntry::new(1, 2).unwrap());
        assert_eq!(
            cct[3],
            CctEntry::new(2, 8).unwrap(),
            "010 is octal, as strtoul reads it"
        );
        assert_eq!(cct[4], CctEntry::new(3, 16383).unwrap());
    }

    #[test]
    fn without_a_control_map_every_mentioned_sl_is_configured() {
        let c = parse_opensm_ca(
            "cc_ca_cong_setting_port_control 1\ncc_ca_cong_setting_ccti_timer 5 9\n",
        )
        .unwrap();
        assert!(!c.enabled);
        assert_eq!(c.config.port_control, PortControl::Sl);
        assert_eq!(c.config.entries[5].ccti_timer, 9);
        let c = parse_opensm_ca("cc_cct (null)\n").unwrap();
        assert_eq!(c.config.cct, Cct::default());
    }

    #[test]
    fn errors_name_line_key_and_token() {
        let cases: &[(&str, &str)] = &[
            (
                "cc_cct 0:0,1:x,2:2",
                "line 1: cc_cct: `1:x`: the multiplier is not a number",
            ),
            (
                "\ncc_cct 0:0,4:1",
                "line 2: cc_cct: `4:1`: the shift is a 2-bit field",
            ),
            ("cc_cct 0:0,1-1", "`1-1`: a CCT entry is shift:multiplier"),
            (
                "cc_cct 0:16384",
                "`0:16384`: the multiplier is a 14-bit field",
            ),
            (
                "cc_ca_cong_setting_ccti_timer 16 5",
                "cc_ca_cong_setting_ccti_timer: `16`: the SL is at most 15",
            ),
            (
                "cc_ca_cong_setting_ccti_increase 0 256",
                "`256`: CCTI_Increase is at most 255",
            ),
            (
                "cc_ca_cong_setting_ccti_min 0",
                "cc_ca_cong_setting_ccti_min: `0`: expected `<SL> <value>`",
            ),
            (
                "cc_ca_cong_setting_ccti_timer 0 1 2",
                "expected `<SL> <value>`",
            ),
            ("cc_ca_cong_setting_ccti_timer 0 ten", "`ten`: not a number"),
            (
                "congestion_control maybe",
                "`maybe`: expected TRUE or FALSE",
            ),
            (
                "cc_ca_cong_setting_cti_min 0 1",
                "`cc_ca_cong_setting_cti_min`: unknown",
            ),
        ];
        for (text, want) in cases {
            let e = parse_opensm_ca(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: got {e:?}, want {want:?}");
        }
        let too_many = vec!["0:1"; 129].join(",");
        let e = parse_opensm_ca(&format!("cc_cct {too_many}")).unwrap_err();
        assert_eq!(e.token, "0:1");
        assert!(e.reason.contains("at most 128"));
    }
}
