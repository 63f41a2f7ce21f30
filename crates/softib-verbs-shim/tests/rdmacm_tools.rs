//! The stock rdma_cm programs of Debian (rdmacm-utils: rping, ucmatose, udaddy, rstream,
//! riostream; perftest's `ib_write_bw -R`), built against rdma-core 44's librdmacm, run
//! unmodified on softib with the shim preloaded: the shim's rdma_* functions replace
//! librdmacm's (also those its rsocket code calls, through the PLT), and connections are set
//! up by softib's CM over QP1 between two devices on 127.77.N.1 and 127.77.N.2. Missing
//! binaries fail the test with the package to install.

mod common;

use std::time::Duration;

use common::{args, binary, run_pair_ready, Pair, Ready};

const DEADLINE: Duration = Duration::from_secs(120);

/// The shim's `SOFTIB_DEBUG` line once an rdma_cm server listens.
const LISTENING: Ready = Ready::LogLine("softib: rdma_cm: listening on port");

fn rdmacm_utils(tool: &str) -> std::path::PathBuf {
    binary(tool, "rdmacm-utils")
}

fn both_ok(p: &Pair, what: &str) {
    assert!(
        p.server.ok() && p.client.ok(),
        "{what} failed:\n{}",
        p.dump()
    );
}

#[test]
fn rping_100_validated_pings() {
    let slot = 160;
    let server = format!("127.77.{slot}.1");
    let p = run_pair_ready(
        slot,
        &rdmacm_utils("rping"),
        &args(&["-s", "-a", &server, "-p", "7160", "-v"]),
        // run_pair appends the server's address: it becomes -a's value.
        &args(&["-c", "-p", "7160", "-C", "100", "-v", "-V", "-a"]),
        DEADLINE,
        2,
        LISTENING,
    );
    both_ok(&p, "rping");
    // -V: the client compares every RDMA READ-back with what it sent.
    let pings = p.client.output.matches("ping data: rdma-ping-").count();
    assert_eq!(pings, 100, "client pings:\n{}", p.dump());
    assert!(
        p.client.output.contains("rdma-ping-99: "),
        "last ping missing:\n{}",
        p.dump()
    );
    let served = p
        .server
        .output
        .matches("server ping data: rdma-ping-")
        .count();
    assert_eq!(served, 100, "server pings:\n{}", p.dump());
    // The client disconnects; the server sees DISCONNECTED.
    assert!(p.server.output.contains("DISCONNECT EVENT"), "{}", p.dump());
}

#[test]
fn ucmatose_rc_connections_with_server_side_disconnect() {
    let p = run_pair_ready(
        161,
        &rdmacm_utils("ucmatose"),
        &args(&["-p", "7161", "-c", "2", "-C", "20"]),
        &args(&["-p", "7161", "-c", "2", "-C", "20", "-s"]),
        DEADLINE,
        2,
        LISTENING,
    );
    both_ok(&p, "ucmatose");
    for side in [&p.server, &p.client] {
        assert!(
            side.output.contains("data transfers complete"),
            "{}",
            p.dump()
        );
        assert!(side.output.contains("return status 0"), "{}", p.dump());
    }
    // ucmatose's server disconnects (rdma_disconnect on the passive side).
    assert!(p.server.output.contains("disconnected"), "{}", p.dump());
}

#[test]
fn udaddy_ud_ids_resolved_by_sidr() {
    let p = run_pair_ready(
        162,
        &rdmacm_utils("udaddy"),
        // udaddy's -p is the port space; it always uses rdma_cm port 7174.
        &args(&["-c", "2", "-C", "20"]),
        &args(&["-c", "2", "-C", "20", "-s"]),
        DEADLINE,
        2,
        LISTENING,
    );
    both_ok(&p, "udaddy");
    for side in [&p.server, &p.client] {
        assert!(
            side.output.contains("data transfers complete"),
            "{}",
            p.dump()
        );
        assert!(side.output.contains("return status 0"), "{}", p.dump());
    }
}

/// rstream/riostream print one row per test: name, size, transfers, iterations, total,
/// time, Gb/sec, usec/xfer.
fn stream_rows(output: &str) -> Vec<(String, f64)> {
    output
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            if c.len() != 8 || c[0] == "name" {
                return None;
            }
            Some((c[0].to_string(), c[6].parse().ok()?))
        })
        .collect()
}

fn rsocket_stream(slot: u8, tool: &str) {
    let server = format!("127.77.{slot}.1");
    let port = format!("{}", 7000 + u16::from(slot));
    let p = run_pair_ready(
        slot,
        &rdmacm_utils(tool),
        &args(&["-b", &server, "-p", &port, "-S", "65536", "-C", "300"]),
        &args(&["-p", &port, "-S", "65536", "-C", "300", "-s"]),
        DEADLINE,
        2,
        LISTENING,
    );
    both_ok(&p, tool);
    for side in [&p.server, &p.client] {
        let rows = stream_rows(&side.output);
        assert_eq!(rows.len(), 1, "{tool} result row:\n{}", p.dump());
        assert!(rows[0].1 > 0.0, "{tool} moved nothing:\n{}", p.dump());
    }
}

#[test]
fn rstream_over_rsockets() {
    rsocket_stream(163, "rstream");
}

#[test]
fn riostream_over_rsockets() {
    rsocket_stream(164, "riostream");
}

#[test]
fn ib_write_bw_with_rdma_cm() {
    let p = run_pair_ready(
        165,
        &binary("ib_write_bw", "perftest"),
        &args(&[
            "-R", "-d", "softib0", "-n", "2000", "-s", "65536", "-p", "7165",
        ]),
        &args(&[
            "-R", "-d", "softib0", "-n", "2000", "-s", "65536", "-p", "7165",
        ]),
        DEADLINE,
        2,
        LISTENING,
    );
    both_ok(&p, "ib_write_bw -R");
    assert!(
        p.client.output.contains("Data ex. method : rdma_cm"),
        "{}",
        p.dump()
    );
    let row = p
        .client
        .output
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let cols: Vec<f64> = row
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect();
    assert!(
        cols.len() >= 4 && cols[0] == 65536.0 && cols[1] == 2000.0 && cols[3] > 0.0,
        "result row {row:?}:\n{}",
        p.dump()
    );
}

#[test]
fn connect_to_a_port_nobody_listens_on_is_rejected_with_reason_8() {
    // A softib device listens on 7166 at 127.77.166.1; the client asks for 7167. The CM
    // answers the REQ with REJ reason 8 (invalid service ID), and rdma_cm reports
    // RDMA_CM_EVENT_REJECTED with status 8, as the kernel's cma_ib_handler does.
    let p = run_pair_ready(
        166,
        &rdmacm_utils("ucmatose"),
        &args(&["-p", "7166"]),
        &args(&["-p", "7167", "-s"]),
        Duration::from_secs(60),
        1,
        LISTENING,
    );
    assert!(
        p.client.status.is_some() && !p.client.ok(),
        "the client should fail:\n{}",
        p.dump()
    );
    assert!(
        p.client
            .output
            .contains("event: RDMA_CM_EVENT_REJECTED, error: 8"),
        "{}",
        p.dump()
    );
}
