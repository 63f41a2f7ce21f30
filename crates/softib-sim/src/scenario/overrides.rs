//! Changing a scenario's keys from outside the file: `softib sim --set KEY=VALUE`,
//! `--sweep KEY=V1,V2` and the shrunk sizes the field cases run with in the test suite
//! ([`crate::cases`]). A key is dotted and may index arrays of tables
//! (`flow[0].tx_depth`, `topology.links[1].rx_buffer_bytes_b`); the edited text is parsed
//! again, so a value of the wrong type is reported like one written in the file.

use crate::scenario::{Scenario, ScenarioError};

/// Why an override could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// `KEY=VALUE` was malformed.
    #[error("`{0}`: expected KEY=VALUE (e.g. duration_us=200 or flow[0].tx_depth=4)")]
    Syntax(String),
    /// The key does not lead anywhere in the scenario.
    #[error("key {key}: {reason}")]
    Key {
        /// The dotted key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The original text is not TOML.
    #[error("the scenario is not valid TOML: {0}")]
    Toml(#[from] toml::de::Error),
    /// The edited scenario is invalid (e.g. a value out of range).
    #[error("after setting {sets}: {source}")]
    Scenario {
        /// The overrides, as given.
        sets: String,
        /// The scenario error.
        source: ScenarioError,
    },
}

/// A TOML value from its command-line spelling: integer, float, boolean, else string.
pub fn value_from_text(v: &str) -> toml::Value {
    if let Ok(i) = v.parse::<i64>() {
        toml::Value::Integer(i)
    } else if let Ok(f) = v.parse::<f64>() {
        toml::Value::Float(f)
    } else if let Ok(b) = v.parse::<bool>() {
        toml::Value::Boolean(b)
    } else {
        toml::Value::String(v.to_string())
    }
}

/// Splits `KEY=VALUE`.
pub fn parse_assignment(s: &str) -> Result<(String, String), OverrideError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| OverrideError::Syntax(s.to_string()))?;
    let (k, v) = (k.trim(), v.trim());
    if k.is_empty() || v.is_empty() {
        return Err(OverrideError::Syntax(s.to_string()));
    }
    Ok((k.to_string(), v.to_string()))
}

fn key_error(key: &str, reason: String) -> OverrideError {
    OverrideError::Key {
        key: key.to_string(),
        reason,
    }
}

/// Sets dotted `key` in `doc`, creating missing tables; an indexed segment must name an
/// existing entry of an existing array of tables.
pub fn set_key(doc: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), OverrideError> {
    let parts: Vec<&str> = key.split('.').collect();
    let mut table = doc;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let (name, index) = match part.split_once('[') {
            Some((n, rest)) => {
                let idx = rest
                    .strip_suffix(']')
                    .and_then(|x| x.parse::<usize>().ok())
                    .ok_or_else(|| key_error(key, format!("`{part}` is not NAME[INDEX]")))?;
                (n, Some(idx))
            }
            None => (*part, None),
        };
        if name.is_empty() {
            return Err(key_error(key, "an empty segment".into()));
        }
        if last && index.is_none() {
            table.insert(name.to_string(), value);
            return Ok(());
        }
        if index.is_some() && !table.contains_key(name) {
            return Err(key_error(
                key,
                format!("the scenario has no [[{name}]] table"),
            ));
        }
        let entry = table
            .entry(name.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let target = match index {
            None => entry,
            Some(idx) => {
                let arr = entry
                    .as_array_mut()
                    .ok_or_else(|| key_error(key, format!("`{name}` is not an array of tables")))?;
                let len = arr.len();
                arr.get_mut(idx).ok_or_else(|| {
                    key_error(
                        key,
                        format!("`{name}` has {len} entries (indices 0..{len})"),
                    )
                })?
            }
        };
        if last {
            *target = value;
            return Ok(());
        }
        table = target
            .as_table_mut()
            .ok_or_else(|| key_error(key, format!("`{part}` is a value, not a table")))?;
    }
    Ok(())
}

/// `text` with every (key, value) of `sets` applied, as TOML text (comments are lost).
pub fn apply_to_text(text: &str, sets: &[(String, String)]) -> Result<String, OverrideError> {
    if sets.is_empty() {
        return Ok(text.to_string());
    }
    let mut doc: toml::Table = toml::from_str(text)?;
    for (k, v) in sets {
        set_key(&mut doc, k, value_from_text(v))?;
    }
    Ok(toml::to_string(&doc).expect("a TOML table always serialises"))
}

/// Parses `text` with `sets` applied.
pub fn parse_with(text: &str, sets: &[(String, String)]) -> Result<Scenario, OverrideError> {
    let edited = apply_to_text(text, sets)?;
    Scenario::parse(&edited).map_err(|source| OverrideError::Scenario {
        sets: sets
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_reach_nested_tables_and_arrays() {
        let mut doc: toml::Table = toml::from_str(
            "[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"one-to-one\"\n",
        )
        .unwrap();
        set_key(&mut doc, "fabric.rx_buffer_bytes", value_from_text("4096")).unwrap();
        set_key(&mut doc, "stream[0].payload_bytes", value_from_text("1024")).unwrap();
        set_key(&mut doc, "fabric.cable_m", value_from_text("2.5")).unwrap();
        assert_eq!(doc["fabric"]["rx_buffer_bytes"].as_integer(), Some(4096));
        assert_eq!(doc["stream"][0]["payload_bytes"].as_integer(), Some(1024));
        assert_eq!(doc["fabric"]["cable_m"].as_float(), Some(2.5));
        let e = set_key(&mut doc, "stream[3].sl", value_from_text("1")).unwrap_err();
        assert!(e.to_string().contains("has 1 entries"), "{e}");
        let e = set_key(&mut doc, "topology.kind.x", value_from_text("1")).unwrap_err();
        assert!(e.to_string().contains("not a table"), "{e}");
    }

    #[test]
    fn an_override_is_checked_like_the_file() {
        let text = "duration_us = 1000\n[topology]\nkind = \"back-to-back\"\n";
        let s = parse_with(text, &[("duration_us".into(), "20".into())]).unwrap();
        assert_eq!(s.duration_us, Some(20));
        let e = parse_with(text, &[("fabric.vl_cap".into(), "99".into())]).unwrap_err();
        assert!(e.to_string().contains("fabric.vl_cap"), "{e}");
        assert!(parse_assignment("a=").is_err());
        assert_eq!(
            parse_assignment(" a.b = 3 ").unwrap(),
            ("a.b".to_string(), "3".to_string())
        );
    }
}
