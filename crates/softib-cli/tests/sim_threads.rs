//! `softib sim --threads N`: the real binary on a bundled fat tree and on an incast with
//! congestion control on, serially and on 1, 2 and 3 threads; every file in the output
//! directory (summary, CSVs, plots, the pcap) must be byte for byte the serial run's. And
//! the refusals of a bad thread count.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn softib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softib"))
}

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("sim-threads")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Every file of `dir`, by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Runs `args` serially and on 1, 2 and 3 threads and checks that every output file is
/// identical; returns the serial run's files.
fn same_at_every_thread_count(name: &str, args: &[&str]) -> BTreeMap<String, Vec<u8>> {
    let dir = tmp(name);
    let serial_dir = dir.join("serial");
    let stdout = ok(&softib()
        .arg("sim")
        .args(args)
        .arg("--out")
        .arg(&serial_dir)
        .output()
        .unwrap());
    let serial = files(&serial_dir);
    let summary_text = stdout.split("\nwrote ").next().unwrap().to_string();
    for n in 1..=3 {
        let d = dir.join(format!("threads-{n}"));
        let out = ok(&softib()
            .arg("sim")
            .args(args)
            .args(["--threads", &n.to_string()])
            .arg("--out")
            .arg(&d)
            .output()
            .unwrap());
        assert_eq!(
            out.split("\nwrote ").next().unwrap(),
            summary_text,
            "{name}: the printed summary at {n} threads"
        );
        let got = files(&d);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            serial.keys().collect::<Vec<_>>(),
            "{name}: files at {n} threads"
        );
        for (f, bytes) in &serial {
            assert!(
                &got[f] == bytes,
                "{name}: {f} at {n} threads differs from the serial run's ({} vs {} bytes)",
                got[f].len(),
                bytes.len()
            );
        }
    }
    serial
}

#[test]
fn a_bundled_fat_tree_with_captures_is_identical_on_one_two_and_three_threads() {
    // Four leaves: 1, 2 and 3 partitions of whole leaf groups. Port taps on a host link
    // and on a cut link (leaf to spine), and two HCAs' receive captures.
    let serial = same_at_every_thread_count(
        "fat-tree",
        &[
            "mgmt-fat-tree",
            "--set",
            "duration_us=30",
            "--set",
            "fabric.sample_interval_us=5",
            "--pcap-port",
            "leaf0:1,spine0:1,leaf2:5",
            "--pcap",
            "h0,h5",
        ],
    );
    for f in ["summary.json", "counters.csv", "flows.csv", "capture.pcap"] {
        assert!(serial.contains_key(f), "the run wrote {f}");
    }
    assert!(
        serial["capture.pcap"].len() > 100_000,
        "the capture caught traffic"
    );
}

/// An 8 -> 1 RC WRITE incast across three switches, with IBA congestion control on, and a
/// UD SEND flow between leaves (counted where it arrives, matched to its posts after the
/// run).
const CC_INCAST: &str = r#"
seed = 7
duration_us = 60

[fabric]
link_speed = "EDR"
cable_m = 2.0
rx_buffer_bytes = 32768
sample_interval_us = 5

[topology]
kind = "explicit"
nodes = [
    { name = "sw0", kind = "switch", ports = 8 },
    { name = "sw1", kind = "switch", ports = 8 },
    { name = "sw2", kind = "switch", ports = 8 },
    { name = "h0", kind = "hca" }, { name = "h1", kind = "hca" },
    { name = "h2", kind = "hca" }, { name = "h3", kind = "hca" },
    { name = "h4", kind = "hca" }, { name = "h5", kind = "hca" },
    { name = "h6", kind = "hca" }, { name = "h7", kind = "hca" },
    { name = "d", kind = "hca" }, { name = "u", kind = "hca" },
]
links = [
    { a = "h0:1", b = "sw0:1" }, { a = "h1:1", b = "sw0:2" },
    { a = "h2:1", b = "sw0:3" }, { a = "h3:1", b = "sw0:4" },
    { a = "h4:1", b = "sw1:1" }, { a = "h5:1", b = "sw1:2" },
    { a = "h6:1", b = "sw1:3" }, { a = "h7:1", b = "sw1:4" },
    { a = "d:1", b = "sw2:1" }, { a = "u:1", b = "sw2:2" },
    { a = "sw0:8", b = "sw2:7" }, { a = "sw1:8", b = "sw2:8" },
]

[congestion_control]
congestion_control = true
cc_sw_cong_setting_control_map = "0x1f"
cc_sw_cong_setting_threshold = 14
cc_sw_cong_setting_packet_size = 8
cc_sw_cong_setting_marking_rate = 0
cc_ca_cong_setting_control_map = "0x0001"
cc_ca_cong_setting_ccti_timer = ["0 20"]
cc_ca_cong_setting_ccti_increase = ["0 1"]
cc_ca_cong_setting_trigger_threshold = ["0 2"]
cc_cct = "0:0,1:0,1:2,1:4,2:8,2:16,2:32,3:64"

[[flow]]
op = "write"
pattern = "incast"
dst = "d"
srcs = ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"]
size = 65536
tx_depth = 16

[[flow]]
op = "send"
service = "ud"
pattern = "one-to-one"
src = "h3"
dst = "u"
tx_depth = 32
"#;

#[test]
fn an_incast_with_congestion_control_is_identical_on_one_two_and_three_threads() {
    let dir = tmp("cc-incast-scenario");
    let path = dir.join("cc-incast.toml");
    std::fs::write(&path, CC_INCAST).unwrap();
    let serial = same_at_every_thread_count(
        "cc-incast",
        &[
            path.to_str().unwrap(),
            "--pcap-port",
            "sw2:1,sw0:8",
            "--pcap",
            "u",
        ],
    );
    let summary: serde_json::Value = serde_json::from_slice(&serial["summary.json"]).unwrap();
    // Congestion control acted and was traced: switch ports marked FECNs, which the
    // trace followed over time.
    let marked: u64 = summary["congestion_control"]["ports"]
        .as_array()
        .expect("the congestion-control trace is in the summary")
        .iter()
        .filter_map(|p| p["fecn_marked"].as_array()?.last()?.as_u64())
        .sum();
    assert!(marked > 0, "no packet was marked: {summary}");
    assert!(serial.contains_key("cc.csv") && serial.contains_key("ccti.svg"));
    // The UD flow's messages were matched at the receiver (posts and arrivals in
    // different partitions at 3 threads: h3 under sw0, u under sw2).
    let ud = summary["flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["dst"] == "u")
        .expect("the UD flow is in the summary");
    assert!(ud["messages"].as_u64().unwrap() > 5, "{ud}");
}

#[test]
fn a_bad_thread_count_is_refused_with_a_reason() {
    let out = softib()
        .args(["sim", "mgmt-fat-tree", "--no-files", "--threads", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at least one thread"), "{err}");
    let out = softib()
        .args(["sim", "mgmt-fat-tree", "--no-files", "--threads", "5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("splits into at most 4") && err.contains("leaf"),
        "{err}"
    );
    let out = softib()
        .args(["sim", "mgmt-fat-tree", "--no-files", "--threads", "two"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads"));
}
