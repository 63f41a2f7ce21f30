//! `softib decode` end to end: the real binary on the bundled captures and on bad input.

use std::path::PathBuf;
use std::process::Command;

fn softib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softib"))
}

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name)
}

#[test]
fn decode_text_lists_every_rocev2_packet_and_counts_the_rest() {
    let out = softib()
        .arg("decode")
        .arg(capture("rxe-write_bw.pcap"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // The capture's README: 100 WRITE_FIRST, 200 WRITE_MIDDLE, 100 WRITE_LAST, 100 ACK.
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("RC RDMA_WRITE_FIRST"))
            .count(),
        100
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("RC RDMA_WRITE_MIDDLE"))
            .count(),
        200
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("RC RDMA_WRITE_LAST"))
            .count(),
        100
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("RC ACKNOWLEDGE"))
            .count(),
        100
    );
    assert!(lines.iter().all(|l| !l.contains("icrc=BAD")));
    let summary = lines.last().unwrap();
    assert!(
        summary.starts_with("500 packets, 0 with a bad ICRC"),
        "{summary}"
    );
    assert!(summary.contains("other frames skipped"), "{summary}");
}

#[test]
fn decode_json_has_the_documented_keys_with_the_captured_values() {
    let out = softib()
        .args(["decode", "--json"])
        .arg(capture("rxe-send_bw_ud.pcap"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("every line is JSON");
        for key in [
            "time",
            "opcode",
            "opcode_name",
            "dest_qp",
            "psn",
            "ack_req",
            "payload_len",
            "icrc_ok",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {line}");
        }
        assert_eq!(v["opcode"], 0x64, "UD SEND_ONLY");
        assert_eq!(v["opcode_name"], "UD SEND_ONLY");
        assert_eq!(v["icrc_ok"], true);
        assert!(v.get("deth_qkey").is_some() && v.get("deth_src_qp").is_some());
        n += 1;
    }
    assert_eq!(n, 100);
    let summary = String::from_utf8(out.stderr).unwrap();
    assert!(summary.starts_with("100 packets"), "{summary}");
}

#[test]
fn decode_flags_a_corrupted_packet_as_bad_icrc() {
    let mut bytes = std::fs::read(capture("rxe-write_bw.pcap")).unwrap();
    // Walk the classic pcap records (24-byte file header, 16-byte record headers) to the
    // first RoCEv2 frame and flip one bit of its last payload byte, which the ICRC covers.
    let mut at = 24;
    loop {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[at + 16..at + 16 + incl];
        if softib_wire::dissect::dissect(softib_wire::pcap::LinkType::Ethernet, frame).is_ok() {
            bytes[at + 16 + incl - 5] ^= 0x01;
            break;
        }
        at += 16 + incl;
    }
    let dir = std::env::temp_dir().join(format!("softib-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("corrupt.pcap");
    std::fs::write(&path, &bytes).unwrap();
    let out = softib().arg("decode").arg(&path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.contains("icrc=BAD")).count(),
        1,
        "{text}"
    );
    assert!(text
        .lines()
        .last()
        .unwrap()
        .starts_with("500 packets, 1 with a bad ICRC"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn decode_rejects_a_non_capture_and_a_missing_file_with_a_clear_error() {
    let out = softib().args(["decode", "Cargo.toml"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("not a pcap or pcapng file"), "{err}");
    assert!(!err.contains("panicked"));

    let out = softib()
        .args(["decode", "/nonexistent/x.pcap"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("/nonexistent/x.pcap"), "{err}");
}

#[test]
fn decode_of_a_truncated_capture_reports_an_error_not_a_panic() {
    let bytes = std::fs::read(capture("rxe-write_bw.pcap")).unwrap();
    let dir = std::env::temp_dir().join(format!("softib-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // (24 bytes, the file header alone, is a valid empty capture.)
    for cut in [10, 23, 30, 1000, bytes.len() - 3] {
        let path = dir.join(format!("cut{cut}.pcap"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let out = softib().arg("decode").arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "cut {cut}: {err}");
        assert_eq!(
            out.status.code(),
            Some(1),
            "cut {cut}: a truncated file is an error: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
