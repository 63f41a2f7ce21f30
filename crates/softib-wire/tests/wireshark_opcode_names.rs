//! The opcode table agrees with Wireshark's: every opcode softib knows has the name tshark
//! gives it in `infiniband.bth.opcode`, and every opcode Wireshark names is one softib knows
//! (except its 0x80 "CNP"; the RoCEv2 CNP is 0x81, Annex A17). Needs `tshark` (`.ci/run`
//! installs it).

use std::collections::BTreeMap;
use std::process::Command;

use softib_wire::Opcode;

/// Wireshark's `infiniband.bth.opcode` value strings, from `tshark -G values`.
fn wireshark_opcodes() -> BTreeMap<u8, String> {
    let out = Command::new("tshark")
        .args(["-G", "values"])
        .output()
        .expect("this test runs tshark; install it (apt-get install tshark)");
    assert!(out.status.success(), "tshark -G values failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut cols = line.split('\t');
            if cols.next()? != "V" || cols.next()? != "infiniband.bth.opcode" {
                return None;
            }
            Some((cols.next()?.parse().ok()?, cols.next()?.to_string()))
        })
        .collect()
}

#[test]
fn opcode_names_match_wiresharks_dissector() {
    let ws = wireshark_opcodes();
    assert!(ws.len() > 80, "tshark listed only {} opcodes", ws.len());
    for &op in Opcode::ALL {
        assert_eq!(
            op.wireshark_name(),
            ws.get(&op.value()).map(String::as_str),
            "{op:?}"
        );
    }
    for (&value, name) in &ws {
        if name.ends_with(" - Reserved") || value == 0x80 {
            assert!(Opcode::from_u8(value).is_err(), "{value:#04x} {name}");
        } else {
            assert!(Opcode::from_u8(value).is_ok(), "{value:#04x} {name}");
        }
    }
}
