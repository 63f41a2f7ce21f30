//! The perftest-style tools, `pingpong` and `counters`, run as real processes on loopback:
//! a server and a client, every bandwidth and latency tool on every service it supports,
//! checking the report tables both sides print.

mod common;

use common::{report_rows, run_pair, softib, tempdir};

/// Checks a bandwidth run: the client's row has the size and iterations and a positive
/// average; the server prints a row for the same size.
fn check_bw(n: u8, tool: &str, args: &[&str], size: u64, iters: u64) {
    let r = run_pair(n, tool, args);
    r.assert_ok();
    let out = r.client_stdout();
    assert!(out.contains("BW average[MB/sec]"), "{out}");
    let rows = report_rows(&out, "#bytes");
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0][0].parse::<u64>().unwrap(), size, "{out}");
    assert_eq!(rows[0][1].parse::<u64>().unwrap(), iters, "{out}");
    // The message rate has six decimals; the bandwidth's two round a slow atomic run to 0.
    let rate: f64 = rows[0][4].parse().unwrap();
    assert!(rate > 0.0, "{out}");
    let srv = r.server_stdout();
    let srows = report_rows(&srv, "#bytes");
    assert_eq!(srows.len(), 1, "{srv}");
    assert_eq!(srows[0][0].parse::<u64>().unwrap(), size, "{srv}");
}

#[test]
fn write_bw_rc() {
    check_bw(1, "write-bw", &["-n", "300"], 65536, 300);
}

#[test]
fn write_bw_uc() {
    check_bw(
        2,
        "write-bw",
        &["-n", "300", "-c", "UC", "-s", "10000"],
        10000,
        300,
    );
}

#[test]
fn read_bw_rc() {
    check_bw(3, "read-bw", &["-n", "300", "-s", "20000"], 20000, 300);
}

#[test]
fn send_bw_rc_counts_every_message_on_the_server() {
    check_bw(4, "send-bw", &["-n", "400", "-s", "5000"], 5000, 400);
    let r = run_pair(5, "send-bw", &["-n", "400", "-s", "5000", "-m", "1024"]);
    r.assert_ok();
    let srows = report_rows(&r.server_stdout(), "#bytes");
    assert_eq!(srows[0][1], "400", "RC delivers every message");
}

#[test]
fn send_bw_uc_and_ud() {
    check_bw(
        6,
        "send-bw",
        &["-n", "200", "-c", "UC", "-s", "3000", "-t", "8"],
        3000,
        200,
    );
    let r = run_pair(
        7,
        "send-bw",
        &["-n", "200", "-c", "UD", "-s", "1024", "-t", "8"],
    );
    r.assert_ok();
    let rows = report_rows(&r.client_stdout(), "#bytes");
    assert_eq!((rows[0][0].as_str(), rows[0][1].as_str()), ("1024", "200"));
}

#[test]
fn atomic_bw_fetch_add_and_compare_swap() {
    check_bw(8, "atomic-bw", &["-n", "500"], 8, 500);
    check_bw(9, "atomic-bw", &["-n", "500", "-A", "CMP_AND_SWAP"], 8, 500);
}

#[test]
fn write_bw_on_four_qps_counts_all_of_them() {
    check_bw(
        10,
        "write-bw",
        &["-n", "100", "-q", "4", "-s", "4096"],
        4096,
        400,
    );
}

#[test]
fn write_bw_all_sizes_prints_one_row_per_size_in_gbits() {
    let r = run_pair(11, "write-bw", &["-a", "-n", "4", "--report_gbits"]);
    r.assert_ok();
    let out = r.client_stdout();
    assert!(out.contains("BW average[Gb/sec]"), "{out}");
    let sizes: Vec<u64> = report_rows(&out, "#bytes")
        .iter()
        .map(|r| r[0].parse().unwrap())
        .collect();
    assert_eq!(sizes, (1..=23).map(|i| 1u64 << i).collect::<Vec<_>>());
}

/// Checks a latency row: size, iterations, t_min <= t_typical <= t_max.
fn check_lat(out: &str, size: u64, iters: u64) {
    assert!(out.contains("t_typical[usec]"), "{out}");
    let rows = report_rows(out, "#bytes");
    assert_eq!(rows.len(), 1, "{out}");
    let f: Vec<f64> = rows[0].iter().map(|x| x.parse().unwrap()).collect();
    assert_eq!((f[0] as u64, f[1] as u64), (size, iters), "{out}");
    assert!(
        f[2] > 0.0 && f[2] <= f[4] && f[4] <= f[3],
        "min/typical/max in {out}"
    );
}

#[test]
fn write_lat_rc_and_uc_both_sides_report() {
    for (n, conn) in [(20, "RC"), (21, "UC")] {
        let r = run_pair(n, "write-lat", &["-n", "200", "-s", "100", "-c", conn]);
        r.assert_ok();
        check_lat(&r.client_stdout(), 100, 200);
        check_lat(&r.server_stdout(), 100, 200);
    }
}

#[test]
fn send_lat_rc_uc_ud() {
    for (n, conn) in [(22, "RC"), (23, "UC"), (24, "UD")] {
        let r = run_pair(n, "send-lat", &["-n", "200", "-s", "64", "-c", conn]);
        r.assert_ok();
        check_lat(&r.client_stdout(), 64, 200);
        check_lat(&r.server_stdout(), 64, 200);
    }
}

#[test]
fn read_and_atomic_lat_report_on_the_client() {
    let r = run_pair(25, "read-lat", &["-n", "200", "-s", "3000"]);
    r.assert_ok();
    check_lat(&r.client_stdout(), 3000, 200);
    let r = run_pair(26, "atomic-lat", &["-n", "200", "-A", "CMP_AND_SWAP"]);
    r.assert_ok();
    check_lat(&r.client_stdout(), 8, 200);
}

#[test]
fn duration_mode_runs_for_the_time_given() {
    let r = run_pair(27, "write-bw", &["-D", "1", "-s", "4096"]);
    r.assert_ok();
    let rows = report_rows(&r.client_stdout(), "#bytes");
    assert!(rows[0][1].parse::<u64>().unwrap() > 0);
}

#[test]
fn pingpong_echoes_the_buffer_intact_and_prints_rc_pingpong_lines() {
    let r = run_pair(30, "pingpong", &["-n", "300", "-s", "10000", "-c"]);
    r.assert_ok();
    for out in [r.client_stdout(), r.server_stdout()] {
        assert!(
            out.contains("  local address:  LID 0x0000, QPN 0x"),
            "{out}"
        );
        assert!(
            out.contains("  remote address: LID 0x0000, QPN 0x"),
            "{out}"
        );
        assert!(out.contains("6000000 bytes in "), "{out}");
        assert!(out.contains(" Mbit/sec"), "{out}");
        assert!(out.contains("300 iters in "), "{out}");
        assert!(out.contains(" usec/iter"), "{out}");
        assert!(!out.contains("invalid data"), "{out}");
    }
}

#[test]
fn counters_are_published_shown_and_diffed_and_show_recovery_under_loss() {
    let dir = tempdir("counters");
    let clean = dir.join("clean.json");
    let lossy = dir.join("lossy.json");
    let pcap = dir.join("run.pcap");
    let r = run_pair(
        31,
        "write-bw",
        &["-n", "200", "--counters", clean.to_str().unwrap()],
    );
    r.assert_ok();
    // The client's file: the server wrote the same path last or first; either is a
    // finished run with traffic.
    let shown = softib()
        .args(["counters", "--json"])
        .arg(&clean)
        .output()
        .unwrap();
    assert!(shown.status.success());
    let v: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(v["state"], "finished");
    assert!(v["counters"]["driver"]["tx_datagrams"].as_u64().unwrap() > 0);
    assert!(v["counters"]["qps"].as_object().unwrap().len() == 1);

    let p = common::pair(32);
    let s = common::server(&p, "write-bw", &["-n", "300", "-s", "16384"]);
    common::await_listener(&p);
    let c = common::client(
        &p,
        "write-bw",
        &[
            "-n",
            "300",
            "-s",
            "16384",
            "--inject",
            "drop=0.01,seed=3",
            "--counters",
            lossy.to_str().unwrap(),
            "--pcap",
            pcap.to_str().unwrap(),
        ],
    );
    let co = common::wait(c, std::time::Duration::from_secs(120), "client");
    let so = common::wait(s, std::time::Duration::from_secs(120), "server");
    assert!(co.status.success() && so.status.success());
    let l: serde_json::Value = serde_json::from_slice(&std::fs::read(&lossy).unwrap()).unwrap();
    let dev = &l["counters"]["device"];
    assert!(
        l["counters"]["driver"]["inject_dropped"].as_u64().unwrap() > 0,
        "{l}"
    );
    assert!(dev["retransmitted_packets"].as_u64().unwrap() > 0, "{l}");

    let d = softib()
        .args(["counters", "--diff"])
        .arg(&clean)
        .arg(&lossy)
        .output()
        .unwrap();
    assert!(d.status.success());
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(text.contains("retransmitted_packets"), "{text}");
    assert!(text.contains(" *"), "{text}");
    let same = softib()
        .args(["counters", "--diff"])
        .arg(&lossy)
        .arg(&lossy)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&same.stdout).contains("no counter moved"));

    // The capture decodes with every ICRC valid.
    let dec = softib().arg("decode").arg(&pcap).output().unwrap();
    assert!(
        dec.status.success(),
        "{}",
        String::from_utf8_lossy(&dec.stderr)
    );
    let text = String::from_utf8_lossy(&dec.stdout);
    assert!(
        text.contains("RDMA_WRITE") || text.contains("RC RDMA WRITE"),
        "{}",
        &text[..text.len().min(500)]
    );
}

#[test]
fn timed_latency_runs_end_cleanly_on_both_sides() {
    for (n, tool) in [(40, "write-lat"), (41, "send-lat")] {
        let r = run_pair(n, tool, &["-D", "1"]);
        r.assert_ok();
        let out = r.client_stdout();
        assert!(out.contains("tps average"), "{out}");
        let rows = report_rows(&out, "#bytes");
        assert!(rows[0][1].parse::<u64>().unwrap() > 0, "{out}");
    }
}

#[test]
fn send_bw_all_sizes_on_ud_stops_at_the_mtu() {
    let r = run_pair(42, "send-bw", &["-a", "-n", "20", "-c", "UD", "-m", "1024"]);
    r.assert_ok();
    let sizes: Vec<u64> = report_rows(&r.client_stdout(), "#bytes")
        .iter()
        .map(|r| r[0].parse().unwrap())
        .collect();
    assert_eq!(sizes, (1..=10).map(|i| 1u64 << i).collect::<Vec<_>>());
    let srv = report_rows(&r.server_stdout(), "#bytes");
    assert_eq!(srv.len(), 10, "the server reports every size too");
}

#[test]
fn both_sides_on_one_host_need_no_flags() {
    // No --bind: the server listens on every address, the devices start on 127.0.0.1 and
    // move to the next free loopback address when it is taken.
    let port = "21240";
    let s = softib()
        .args(["write-bw", "-p", port, "-n", "50"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .contains(&format!("00000000:{:04X} 00000000:0000 0A", 21240))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "server never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let c = softib()
        .args(["write-bw", "127.0.0.1", "-p", port, "-n", "50"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let co = common::wait(c, std::time::Duration::from_secs(60), "client");
    let so = common::wait(s, std::time::Duration::from_secs(60), "server");
    assert!(
        co.status.success() && so.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&co.stderr),
        String::from_utf8_lossy(&so.stderr)
    );
    let rows = report_rows(&String::from_utf8_lossy(&co.stdout), "#bytes");
    assert_eq!(rows[0][1], "50");
}

#[test]
fn counters_file_is_updated_while_the_tool_runs() {
    let dir = tempdir("running");
    let file = dir.join("live.json");
    let p = common::pair(43);
    let s = common::server(&p, "write-bw", &["-D", "3", "-s", "4096"]);
    common::await_listener(&p);
    let c = common::client(
        &p,
        "write-bw",
        &[
            "-D",
            "3",
            "-s",
            "4096",
            "--counters",
            file.to_str().unwrap(),
        ],
    );
    // While the test runs, the file says so and its counters grow.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no running snapshots: {seen:?}"
        );
        if let Ok(text) = std::fs::read(&file) {
            let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
            if v["state"] == "running" {
                let tx = v["counters"]["driver"]["tx_datagrams"].as_u64().unwrap();
                if seen.last() != Some(&tx) {
                    seen.push(tx);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(seen[1] > seen[0], "{seen:?}");
    let co = common::wait(c, std::time::Duration::from_secs(60), "client");
    let so = common::wait(s, std::time::Duration::from_secs(60), "server");
    assert!(co.status.success() && so.status.success());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(v["state"], "finished");
}

/// Reliable Datagram (softib to softib): every bandwidth tool, several RD QPs sharing one
/// EE context or one each, and a latency tool, with the report rows on both sides.
#[test]
fn every_tool_runs_on_rd_with_qps_sharing_ee_contexts() {
    check_bw(170, "write-bw", &["-n", "300", "-c", "RD"], 65536, 300);
    check_bw(
        171,
        "read-bw",
        &["-n", "300", "-s", "20000", "-c", "RD"],
        20000,
        300,
    );
    check_bw(172, "atomic-bw", &["-n", "300", "-c", "RD"], 8, 300);
    // Four QPs over one EEC, then over two: the server counts every message (RD is reliable).
    for (n, eecs) in [(173u8, "1"), (174, "2")] {
        let args = [
            "-n",
            "200",
            "-s",
            "3000",
            "-c",
            "RD",
            "-q",
            "4",
            "--rd-eecs",
            eecs,
        ];
        let r = run_pair(n, "send-bw", &args);
        r.assert_ok();
        let srows = report_rows(&r.server_stdout(), "#bytes");
        assert_eq!(srows[0][1], "800", "RD delivers every message of 4 QPs");
    }
    let r = run_pair(175, "send-lat", &["-n", "200", "-s", "64", "-c", "RD"]);
    r.assert_ok();
    check_lat(&r.client_stdout(), 64, 200);
}
