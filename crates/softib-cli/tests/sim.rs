//! `softib sim` end to end: the real binary on small scenarios, its files, determinism,
//! sweeps, comparisons and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn softib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softib"))
}

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("sim-cli")
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

fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.starts_with("softib: error: "), "{err}");
    err
}

/// 2 -> 1 through one switch, sampled every 10 us for 100 us.
const INCAST: &str = r#"
seed = 3
duration_us = 100
[fabric]
link_speed = "EDR"
rx_buffer_bytes = 16384
sample_interval_us = 10
[topology]
kind = "single-switch"
hosts = 3
switch_ports = 8
[[stream]]
pattern = "incast"
dst = "h0"
srcs = ["h1", "h2"]
"#;

fn scenario(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn sim_writes_a_summary_consistent_with_its_counters() {
    let dir = tmp("e2e");
    let sc = scenario(&dir, "incast.toml", INCAST);
    let out_dir = dir.join("out");
    let text = ok(&softib()
        .arg("sim")
        .arg(&sc)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap());
    assert!(text.starts_with("scenario incast (seed 3)"), "{text}");
    assert!(
        text.contains("what stood out:") && text.contains("PortXmitWait"),
        "{text}"
    );
    for f in [
        "summary.json",
        "counters.csv",
        "flows.csv",
        "bandwidth.svg",
        "xmit_wait.svg",
        "buffers.svg",
    ] {
        assert!(out_dir.join(f).is_file(), "{f} missing");
        assert!(text.contains(f), "{f} not listed");
    }
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("summary.json")).unwrap()).unwrap();
    for k in [
        "scenario",
        "run",
        "units",
        "totals",
        "flow_totals",
        "flows",
        "stood_out",
        "ports",
    ] {
        assert!(s.get(k).is_some(), "summary.json has no {k}");
    }
    assert_eq!(s["scenario"]["seed"], 3);
    let ports = s["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 6, "three cables, two ends each");
    let port = |name: &str| ports.iter().find(|p| p["port"] == name).unwrap();
    for k in [
        "PortXmitData",
        "PortRcvData",
        "PortXmitPkts",
        "PortRcvPkts",
        "PortXmitWait",
        "PortVLXmitWait",
        "PortRcvErrors",
        "VL15Dropped",
    ] {
        assert!(port("h1:1").get(k).is_some(), "port has no {k}");
    }
    // Flows against counters: what reached h0 is what its flows delivered.
    let flows = s["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 2);
    let delivered: u64 = flows.iter().map(|f| f["packets"].as_u64().unwrap()).sum();
    let h0 = port("h0:1");
    assert_eq!(delivered, h0["PortRcvPkts"].as_u64().unwrap());
    let wire: u64 = flows
        .iter()
        .map(|f| f["wire_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        wire,
        h0["PortRcvData"].as_u64().unwrap() * 4 + 2 * delivered
    );
    // The switch port towards h0 sent what h0 received, plus at most the packet on the
    // wire when the run ended (a packet is counted when it starts).
    let down = ports.iter().find(|p| p["peer"] == "h0:1").unwrap();
    let on_wire = down["PortXmitPkts"].as_u64().unwrap() - h0["PortRcvPkts"].as_u64().unwrap();
    assert!(on_wire <= 1, "{on_wire}");
    // Two senders into one port: each waits, and the summary says so.
    assert!(port("h1:1")["PortXmitWait"].as_u64().unwrap() > 10_000);
    let stood: Vec<&str> = s["stood_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(stood[0], "xmit_wait", "{stood:?}");

    // counters.csv: 10 samples x 6 ports, and the last sample of every port equals the
    // final counters (the run ends on a sample).
    let csv = std::fs::read_to_string(out_dir.join("counters.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "time_us,port,PortXmitData,PortRcvData,PortXmitPkts,PortRcvPkts,PortXmitWait,errors,rx_buffer_bytes");
    assert_eq!(lines.len(), 1 + 10 * 6);
    for p in ports {
        let name = p["port"].as_str().unwrap();
        let last = lines
            .iter()
            .rev()
            .find(|l| l.split(',').nth(1) == Some(name))
            .unwrap();
        let f: Vec<&str> = last.split(',').collect();
        assert_eq!(f[0], "100.000000");
        assert_eq!(
            f[2].parse::<u64>().unwrap(),
            p["PortXmitData"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            f[5].parse::<u64>().unwrap(),
            p["PortRcvPkts"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            f[6].parse::<u64>().unwrap(),
            p["PortXmitWait"].as_u64().unwrap(),
            "{name}"
        );
    }
    let svg = std::fs::read_to_string(out_dir.join("xmit_wait.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("h1:1"),
        "the waiting sender is plotted"
    );
}

#[test]
fn two_runs_write_identical_files_and_the_seed_is_recorded() {
    let dir = tmp("determinism");
    let sc = scenario(&dir, "incast.toml", INCAST);
    let mut runs = Vec::new();
    for k in 0..2 {
        let out_dir = dir.join(format!("run{k}"));
        ok(&softib()
            .arg("sim")
            .arg(&sc)
            .arg("--seed")
            .arg("42")
            .args(["--pcap-port", "sw0:1", "--out"])
            .arg(&out_dir)
            .output()
            .unwrap());
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        runs.push(files);
    }
    // summary.json, counters.csv, flows.csv, three plots and the capture.
    assert_eq!(runs[0].len(), 7);
    let pcap = &runs[0].iter().find(|f| f.0 == "capture.pcap").unwrap().1;
    assert!(pcap.len() > 24 + 100 * 4000, "{} bytes", pcap.len());
    for (a, b) in runs[0].iter().zip(&runs[1]) {
        assert_eq!(a.0, b.0);
        assert!(a.1 == b.1, "{} differs between two runs", a.0);
    }
    let s = String::from_utf8(
        runs[0]
            .iter()
            .find(|f| f.0 == "summary.json")
            .unwrap()
            .1
            .clone(),
    )
    .unwrap();
    assert!(s.contains("\"seed\": 42"));
}

#[test]
fn no_argument_runs_the_bundled_default() {
    let dir = tmp("default");
    let text = ok(&softib().arg("sim").current_dir(&dir).output().unwrap());
    assert!(text.starts_with("scenario b2b-edr"), "{text}");
    // The default is RC RDMA WRITE on the transport engine: its flow and the engines'
    // counters are reported.
    assert!(text.contains("f0 write h0->h1"), "{text}");
    assert!(text.contains("transport engines (2 of 2 hosts"), "{text}");
    assert!(dir.join("softib-sim/b2b-edr/summary.json").is_file());
    let list = ok(&softib().args(["sim", "--list"]).output().unwrap());
    // Every scenario shipped in scenarios/ is bundled, under its file name.
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut names = 0;
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            assert!(
                list.lines()
                    .any(|l| l.split_whitespace().next() == Some(name.as_str())),
                "{name} is not in `softib sim --list`:\n{list}"
            );
            names += 1;
        }
    }
    assert!(names >= 7, "{names} scenarios in {}", shipped.display());
}

#[test]
fn a_sweep_tabulates_every_variant_and_smaller_buffers_cost_bandwidth() {
    let dir = tmp("sweep");
    let sc = scenario(
        &dir,
        "long.toml",
        "duration_us = 100\n[fabric]\ncable_m = 100.0\n[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n",
    );
    let text = ok(&softib()
        .arg("sim")
        .arg(&sc)
        .args(["--sweep", "fabric.rx_buffer_bytes=8192,131072", "--out"])
        .arg(dir.join("out"))
        .output()
        .unwrap());
    let row = |v: &str| -> f64 {
        let l = text
            .lines()
            .find(|l| {
                l.trim_start()
                    .starts_with(&format!("fabric.rx_buffer_bytes={v} "))
            })
            .unwrap_or_else(|| panic!("{text}"));
        l.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let (small, big) = (row("8192"), row("131072"));
    // 100 m of cable: a 1.33 us credit round trip. 8 KiB holds one 4 KiB packet: one
    // packet per round trip, about a quarter of the link; 128 KiB covers the round trip.
    assert!(big > 95.0, "{text}");
    assert!(small < 0.35 * big && small > 0.15 * big, "{text}");
    let csv = std::fs::read_to_string(dir.join("out/sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3);
    assert!(dir
        .join("out/fabric.rx_buffer_bytes=8192/summary.json")
        .is_file());
}

#[test]
fn compare_flags_the_counter_that_moved() {
    let dir = tmp("compare");
    let a = scenario(&dir, "good.toml", "duration_us = 100\n[fabric]\ncable_m = 100.0\nrx_buffer_bytes = 131072\n[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n");
    let b = scenario(&dir, "starved.toml", "duration_us = 100\n[fabric]\ncable_m = 100.0\nrx_buffer_bytes = 8192\n[topology]\nkind = \"back-to-back\"\n[[stream]]\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n");
    let text = ok(&softib()
        .args(["sim", "--no-files", "--compare"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap());
    assert!(text.starts_with("A = good    B = starved"), "{text}");
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what}: {text}"))
    };
    assert!(
        line("aggregate Gb/s").trim_start().starts_with("!!"),
        "{text}"
    );
    // The first counter row is the sender's PortXmitWait, which went from ~0 to most of
    // the run.
    let counters = text.split("counters that moved most").nth(1).unwrap();
    let first = counters.lines().nth(1).unwrap();
    assert!(
        first.contains("h0:1 PortXmitWait") && first.trim_start().starts_with("!!"),
        "{text}"
    );
}

#[test]
fn bad_input_gives_messages_that_name_the_problem() {
    let dir = tmp("bad");
    let sc = scenario(
        &dir,
        "typo.toml",
        "[topology]\nkind = \"back-to-back\"\n[fabric]\nrx_buffer_byte = 4096\n",
    );
    let e = failed(&softib().arg("sim").arg(&sc).output().unwrap());
    assert!(e.contains("rx_buffer_byte") && e.contains("line 4"), "{e}");
    let sc = scenario(
        &dir,
        "host.toml",
        "[topology]\nkind = \"back-to-back\"\n\n[[stream]]\npattern = \"incast\"\ndst = \"h9\"\n",
    );
    let e = failed(&softib().arg("sim").arg(&sc).output().unwrap());
    assert!(
        e.contains("line 6: stream[0].dst: no HCA called `h9`"),
        "{e}"
    );
    let e = failed(&softib().args(["sim", "no-such-scenario"]).output().unwrap());
    assert!(
        e.contains("no-such-scenario") && e.contains("b2b-edr"),
        "{e}"
    );
    let e = failed(
        &softib()
            .args(["sim", "--sweep", "fabric.rx_buffer_bytes"])
            .output()
            .unwrap(),
    );
    assert!(e.contains("KEY=V1,V2"), "{e}");
    let e = failed(
        &softib()
            .args([
                "sim",
                "--sweep",
                "fabric.rx_buffer_bytes=32,64",
                "--no-files",
            ])
            .output()
            .unwrap(),
    );
    assert!(
        e.contains("fabric.rx_buffer_bytes=32") && e.contains("64-byte block"),
        "{e}"
    );
    let e = failed(
        &softib()
            .args(["sim", "--sweep", "fabric.no_such_key=1", "--no-files"])
            .output()
            .unwrap(),
    );
    assert!(e.contains("no_such_key"), "{e}");
    let e = failed(
        &softib()
            .args(["sim", "--sweep", "flow[4].sl=1", "--no-files"])
            .output()
            .unwrap(),
    );
    assert!(e.contains("flow") && e.contains("has 1 entries"), "{e}");
    let e = failed(
        &softib()
            .args(["sim", "--sweep", "stream[0].sl=1", "--no-files"])
            .output()
            .unwrap(),
    );
    assert!(e.contains("no [[stream]] table"), "{e}");
    let out = softib().args(["sim", "--seed", "x"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seed"));
}

#[test]
fn explain_names_the_mechanism_and_its_counters() {
    let dir = tmp("explain");
    let sc = scenario(&dir, "incast.toml", INCAST);
    let text = ok(&softib()
        .arg("sim")
        .arg(&sc)
        .args(["--explain", "--no-files"])
        .output()
        .unwrap());
    let explain = text
        .split("what limited the flows:")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    assert!(explain.contains("link_credits: 2 of 2 flows"), "{explain}");
    assert!(
        explain.contains("PortXmitWait") && explain.contains("no FECN/BECN"),
        "{explain}"
    );
    assert!(
        explain.contains("the congestion point is sw0:1 -> h0:1"),
        "{explain}"
    );
}

#[test]
fn pcap_of_a_port_decodes_with_valid_crcs() {
    let dir = tmp("pcap");
    let sc = scenario(&dir, "incast.toml", INCAST);
    let out_dir = dir.join("out");
    ok(&softib()
        .arg("sim")
        .arg(&sc)
        .args(["--pcap", "h0", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap());
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("summary.json")).unwrap()).unwrap();
    let h0 = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == "h0:1")
        .unwrap();
    let received = h0["PortRcvPkts"].as_u64().unwrap();
    let text = ok(&softib()
        .arg("decode")
        .arg(out_dir.join("capture.pcap"))
        .output()
        .unwrap());
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("UD SEND_ONLY"))
        .collect();
    // Every packet h0 received, each with CRCs as on the wire.
    assert_eq!(lines.len() as u64, received, "{text}");
    assert!(
        lines.iter().all(|l| l.ends_with("icrc=ok vcrc=ok")),
        "{text}"
    );
    let e = failed(
        &softib()
            .args(["sim", "--pcap", "h9", "--no-files"])
            .output()
            .unwrap(),
    );
    assert!(e.contains("cannot capture `h9`"), "{e}");
}

/// One RC WRITE flow h0 -> h1 through one switch that ends well inside the run, so every
/// packet has crossed every port by the end; the switch port towards h1 is tapped.
const TAPPED: &str = r#"
seed = 5
duration_us = 60
pcap_ports = ["sw0:2"]
[fabric]
link_speed = "EDR"
[topology]
kind = "single-switch"
hosts = 2
switch_ports = 4
[[flow]]
op = "write"
pattern = "one-to-one"
src = "h0"
dst = "h1"
size = 65536
iterations = 4
tx_depth = 2
"#;

/// Counters of `port` in a summary.json.
fn port_json<'a>(s: &'a serde_json::Value, port: &str) -> &'a serde_json::Value {
    s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == port)
        .unwrap_or_else(|| panic!("no port {port}"))
}

#[test]
fn pcap_of_chosen_ports_has_both_directions_and_tshark_reads_it() {
    let dir = tmp("pcap-ports");
    let sc = scenario(&dir, "tapped.toml", TAPPED);
    let out_dir = dir.join("out");
    // The scenario taps the switch port towards h1; the command line adds h0's port.
    ok(&softib()
        .arg("sim")
        .arg(&sc)
        .args(["--pcap-port", "h0:1", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap());
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("summary.json")).unwrap()).unwrap();
    let count = |port: &str, key: &str| port_json(&s, port)[key].as_u64().unwrap();
    // h0 sends only WRITEs (to LID 2), h1 only ACKs (to LID 1).
    let to_h1 = count("sw0:2", "PortXmitPkts") + count("h0:1", "PortXmitPkts");
    let to_h0 = count("sw0:2", "PortRcvPkts") + count("h0:1", "PortRcvPkts");
    assert_eq!(count("sw0:2", "PortXmitPkts"), 64, "4 x 64 KiB at MTU 4096");
    assert_eq!(count("sw0:2", "PortRcvPkts"), count("h0:1", "PortRcvPkts"));
    assert!(to_h0 >= 2, "the ACKs come back");

    let text = ok(&softib()
        .arg("decode")
        .arg(out_dir.join("capture.pcap"))
        .output()
        .unwrap());
    let frames: Vec<&str> = text.lines().filter(|l| l.contains(" LID ")).collect();
    assert_eq!(frames.len() as u64, to_h1 + to_h0, "{text}");
    let writes = frames
        .iter()
        .filter(|l| l.contains("LID 1 -> LID 2") && l.contains("RDMA_WRITE_"))
        .count() as u64;
    let acks = frames
        .iter()
        .filter(|l| l.contains("LID 2 -> LID 1") && l.contains("ACKNOWLEDGE"))
        .count() as u64;
    assert_eq!((writes, acks), (to_h1, to_h0), "{text}");
    assert!(
        frames.iter().all(|l| l.ends_with("icrc=ok vcrc=ok")),
        "{text}"
    );
    // Timestamps of simulated time, in order; the first is no earlier than the end of h0's
    // first packet on its link (4138 bytes with the RETH: 331 ns at 100 Gb/s), the last
    // within the run. The pcap record holds nanoseconds; the ERF record inside it
    // (LINKTYPE_ERF, 197) holds the same instant as a 32-bit binary fraction of a second.
    let pcap = std::fs::read(out_dir.join("capture.pcap")).unwrap();
    assert_eq!(u32::from_ne_bytes(pcap[20..24].try_into().unwrap()), 197);
    let mut times = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let word = |i: usize| u32::from_ne_bytes(pcap[at + i..at + i + 4].try_into().unwrap());
        let ns = word(0) as u64 * 1_000_000_000 + word(4) as u64;
        let erf = &pcap[at + 16..at + 16 + word(8) as usize];
        assert_eq!(erf[8], 21, "ERF record type INFINIBAND");
        let erf_ts = u64::from_le_bytes(erf[0..8].try_into().unwrap());
        let erf_ns = ((erf_ts & 0xFFFF_FFFF) * 1_000_000_000) >> 32;
        assert_eq!(erf_ts >> 32, 0, "the run lasts less than a second");
        assert!(ns.abs_diff(erf_ns) <= 1, "pcap {ns} ns, ERF {erf_ns} ns");
        times.push(ns);
        at += 16 + word(8) as usize;
    }
    assert_eq!(times.len(), frames.len());
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(times[0] >= 331, "{times:?}");
    assert!(*times.last().unwrap() <= 60_000, "{times:?}");

    // Stock tshark 4.0 opens the capture as it is (no user DLT, no header edit): its ERF
    // reader hands type-21 records to the `infiniband` dissector.
    let out = Command::new("tshark")
        .arg("-r")
        .arg(out_dir.join("capture.pcap"))
        .args([
            "-T",
            "fields",
            "-e",
            "infiniband.lrh.dlid",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
        ])
        .output()
        .expect("tshark is needed for this test (.ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fields = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = fields.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), frames.len(), "{fields}");
    // WRITE FIRST/MIDDLE/LAST are RC opcodes 6, 7, 8; ACKNOWLEDGE is 17.
    let tw = rows
        .iter()
        .filter(|r| r[0] == "2" && ["6", "7", "8"].contains(&r[1]))
        .count() as u64;
    let ta = rows.iter().filter(|r| r[0] == "1" && r[1] == "17").count() as u64;
    assert_eq!((tw, ta), (to_h1, to_h0), "{fields}");
    assert!(
        rows.iter().all(|r| r[2..].iter().all(|f| f.is_empty())),
        "tshark found something malformed or worth a warning:\n{fields}"
    );

    // A port that does not exist, or has no cable, is refused with the key and line.
    let bad = scenario(
        &dir,
        "bad.toml",
        &TAPPED.replace(r#"pcap_ports = ["sw0:2"]"#, r#"pcap_ports = ["sw0:4"]"#),
    );
    let e = failed(
        &softib()
            .arg("sim")
            .arg(&bad)
            .arg("--no-files")
            .output()
            .unwrap(),
    );
    assert!(
        e.contains("pcap_ports[0]") && e.contains("line 4") && e.contains("no cable"),
        "{e}"
    );
    let e = failed(
        &softib()
            .arg("sim")
            .arg(&sc)
            .args(["--pcap-port", "sw9:1", "--no-files"])
            .output()
            .unwrap(),
    );
    assert!(
        e.contains("cannot capture port `sw9:1`: no node called `sw9`"),
        "{e}"
    );
}

/// The tables added after the first scenario format ([[host]], [[fault]], management
/// streams, the newer [[flow]] keys, [congestion_control]): a mistake in each is refused with
/// the key and the line, once, without a panic.
#[test]
fn mistakes_in_the_newer_tables_name_the_key_and_line() {
    // Seven lines; each case's table starts on line 8.
    let base = "seed = 1\nduration_us = 10\n[topology]\nkind = \"single-switch\"\nhosts = 3\n\
                switch_ports = 8\n\n";
    let flow = "[[flow]]\nop = \"send\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\n";
    let cases: &[(&str, &[&str])] = &[
        (
            "[[host]]\nname = \"h0\"\nresponder_delay = 5\n",
            &[
                "line 10",
                "unknown field `responder_delay`",
                "responder_delay_ns",
            ],
        ),
        (
            "[[host]]\nname = \"h0\"\nresponder_delay_ns = -5\n",
            &["line 10", "responder_delay_ns", "-5"],
        ),
        (
            "[[host]]\nname = \"h7\"\nresponder_delay_ns = 5\n",
            &["line 9: host[0].name", "`h7` runs no [[flow]]"],
        ),
        (
            "[[fault]]\nlink = \"sw0:7\"\ndown_us = 2\n",
            &["line 9: fault[0].link: port 7 of `sw0` has no cable"],
        ),
        (
            "[[fault]]\nlink = \"sw0:1\"\ndown_us = 5\nup_us = 3\n",
            &["line 11: fault[0].up_us", "not after down_us"],
        ),
        (
            "[[fault]]\nkind = \"stall\"\nnode = \"h0\"\n",
            &["line 9", "unknown variant `stall`"],
        ),
        (
            "[[stream]]\nkind = \"management\"\npattern = \"one-to-one\"\nsrc = \"h0\"\n\
             dst = \"h1\"\nsl = 2\n",
            &["line 13: stream[0].sl", "VL15"],
        ),
        (
            "[[stream]]\nkind = \"mgmt\"\npattern = \"one-to-one\"\n",
            &["line 9", "unknown variant `mgmt`", "management"],
        ),
        (
            &format!("{flow}srq = \"yes\"\n"),
            &["line 13", "srq", "expected a boolean"],
        ),
        (
            &format!("{flow}stagger = 3\n"),
            &["line 13", "unknown field `stagger`", "stagger_us"],
        ),
        (
            &format!("{flow}rq_depth = 0\n"),
            &["line 13: flow[0].rq_depth", "1..=16384"],
        ),
        (
            "[[flow]]\nop = \"write\"\nservice = \"ud\"\npattern = \"one-to-one\"\nsrc = \"h0\"\n\
             dst = \"h1\"\n",
            &["line 10: flow[0].service", "UD only SEND"],
        ),
        (
            "[[flow]]\nop = \"atomic\"\natomic = \"fetch_and_add\"\n",
            &["line 10", "unknown variant `fetch_and_add`", "fetch_add"],
        ),
        (
            "[congestion_control]\ncongestion_control = true\ncc_sw_cong_setting_threshold = 99\n",
            &[
                "line 10: congestion_control.cc_sw_cong_setting_threshold",
                "at most 15",
            ],
        ),
        (
            "[congestion_control]\ncongestion_control = true\ncc_no_such_key = 1\n",
            &[
                "line 10: congestion_control.cc_no_such_key",
                "not an OpenSM congestion control key",
            ],
        ),
        (
            "[congestion_control]\ncc_ca_cong_setting_foo = 1\n",
            &["line 9: congestion_control.cc_ca_cong_setting_foo"],
        ),
        (
            "pcap_ports = [\"sw0:1\", \"sw0\"]\n",
            // A top-level key, so it goes first (line 1), before the tables.
            &["line 1: pcap_ports[1]", "is not NODE:PORT"],
        ),
    ];
    let dir = tmp("bad-newer");
    for (i, (table, wanted)) in cases.iter().enumerate() {
        let text = if table.starts_with("pcap_ports") {
            format!("{table}{base}")
        } else {
            format!("{base}{table}")
        };
        let sc = scenario(&dir, &format!("case{i}.toml"), &text);
        let e = failed(
            &softib()
                .arg("sim")
                .arg(&sc)
                .arg("--no-files")
                .output()
                .unwrap(),
        );
        for w in *wanted {
            assert!(e.contains(w), "case {i}: `{w}` not in:\n{e}");
        }
        // Said once: a chain of error causes must not repeat the parser's message.
        let first_line = e.lines().next().unwrap();
        assert_eq!(
            e.matches(first_line).count(),
            1,
            "case {i} repeats itself:\n{e}"
        );
    }
}

/// Raw packets h0 -> h1 through a cut-through switch over cables with bit errors; the switch
/// port towards h1 is tapped.
const TAPPED_ERRORS: &str = r#"
seed = 5
duration_us = 60
pcap_ports = ["sw0:2"]
[fabric]
link_speed = "EDR"
bit_error_rate = 2e-6
[topology]
kind = "single-switch"
hosts = 2
switch_ports = 4
[[stream]]
pattern = "one-to-one"
src = "h0"
dst = "h1"
payload_bytes = 4096
packets = 150
"#;

#[test]
fn a_port_capture_shows_the_packets_bit_errors_damaged() {
    let dir = tmp("pcap-errors");
    let sc = scenario(&dir, "errors.toml", TAPPED_ERRORS);
    let out_dir = dir.join("out");
    ok(&softib()
        .arg("sim")
        .arg(&sc)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap());
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("summary.json")).unwrap()).unwrap();
    let count = |port: &str, key: &str| port_json(&s, port)[key].as_u64().unwrap();
    let text = ok(&softib()
        .arg("decode")
        .arg(out_dir.join("capture.pcap"))
        .output()
        .unwrap());
    let frames: Vec<&str> = text.lines().filter(|l| l.contains(" LID ")).collect();
    assert_eq!(
        frames.len() as u64,
        count("sw0:2", "PortXmitPkts"),
        "{text}"
    );
    // Damaged on the cable to h1 (h1's PortRcvErrors), or on the cable from h0 and forwarded
    // marked bad by the cut-through switch (h1's PortRcvRemotePhysicalErrors): either way
    // the tap at sw0:2 saw the damaged bytes.
    let bad = frames
        .iter()
        .filter(|l| !l.ends_with("icrc=ok vcrc=ok"))
        .count() as u64;
    let at_h1 = count("h1:1", "PortRcvErrors") + count("h1:1", "PortRcvRemotePhysicalErrors");
    assert!(at_h1 > 0, "the error rate damages some of 150 packets");
    assert_eq!(bad, at_h1, "{text}");
    // Every frame either reached h1 intact or is one of those errors.
    assert_eq!(count("h1:1", "PortRcvPkts") + at_h1, frames.len() as u64);
    assert_eq!(frames.len(), 150);
}
