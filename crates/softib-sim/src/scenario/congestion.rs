//! The `[congestion_control]` table: OpenSM's congestion-control keys
//! (`congestion_control`, `cc_sw_cong_setting_*`, `cc_ca_cong_setting_*`, `cc_cct`) read as
//! OpenSM reads them ([`softib_fabric::cc_switch`]); a per-SL key takes `"<SL> <value>"` or
//! an array of them.

use super::source::{ScenarioError, Source};
use softib_fabric::cc_switch::{parse_opensm_cc, OpensmCc};
use std::collections::BTreeMap;
use toml::Spanned;

/// The table as written: OpenSM key to value.
pub type CcTable = BTreeMap<String, Spanned<toml::Value>>;

/// HCAs take their `DeviceConfig::cc` from [`softib_fabric::cc_switch::OpensmCc::device_cc`].
pub fn opensm_cc(table: Option<&CcTable>, src: &Source) -> Result<Option<OpensmCc>, ScenarioError> {
    let Some(table) = table else {
        return Ok(None);
    };
    // The table becomes opensm.conf lines; each line remembers its entry's span so an
    // error points at the scenario line.
    let mut text = String::new();
    let mut spans = Vec::new();
    for (key, value) in table {
        let full = format!("congestion_control.{key}");
        // opensm.conf's other keys are ignored by the OpenSM parser (a whole opensm.conf
        // is valid input there); in this table anything else is a typo.
        let known = key == "congestion_control"
            || key == "cc_cct"
            || key.starts_with("cc_sw_cong_setting_")
            || key.starts_with("cc_ca_cong_setting_");
        if !known {
            return src.invalid(
                &full,
                value.span(),
                "not an OpenSM congestion control key (congestion_control, \
                 cc_sw_cong_setting_*, cc_ca_cong_setting_*, cc_cct)"
                    .into(),
            );
        }
        let items: Vec<&toml::Value> = match value.get_ref() {
            toml::Value::Array(a) => a.iter().collect(),
            v => vec![v],
        };
        for item in items {
            let v = match item {
                toml::Value::Boolean(b) => if *b { "TRUE" } else { "FALSE" }.to_string(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::String(s) => s.clone(),
                _ => {
                    return src.invalid(
                        &full,
                        value.span(),
                        "expected a boolean, an integer, a string or an array of them".into(),
                    )
                }
            };
            text.push_str(&format!("{key} {v}\n"));
            spans.push(value.span());
        }
    }
    parse_opensm_cc(&text).map(Some).map_err(|e| {
        let span = spans.get(e.line.saturating_sub(1)).cloned().unwrap_or(0..0);
        src.error_at(
            &format!("congestion_control.{}", e.key),
            span,
            format!("`{}`: {}", e.token, e.reason),
        )
    })
}
