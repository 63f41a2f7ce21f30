//! The stock rdma_cm programs of Debian (rdmacm-utils: rping, ucmatose, udaddy, rstream,
//! riostream; perftest's `ib_write_bw -R`), built against rdma-core 44's librdmacm, run
//! unmodified on softib with the shim preloaded: the shim's rdma_* functions replace
//! librdmacm's (also those its rsocket code calls, through the PLT), and connections are set
//! up by softib's CM over QP1 between two devices on 127.77.N.1 and 127.77.N.2. Missing
//! binaries fail the test with the package to install.

mod common;

use std::time::Duration;

use common::{args, binary, run_pair_on_one_address, run_pair_ready, Pair, Ready};

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

/// rping's server and client as two processes on one device address, as on one host with
/// one kernel device: the client's device shares the address with the server's (which owns
/// the UDP port and forwards to it by QPN and CM communication ID).
#[test]
fn rping_server_and_client_processes_share_one_address() {
    let slot = 168;
    let addr = format!("127.77.{slot}.1");
    let p = run_pair_on_one_address(
        slot,
        &rdmacm_utils("rping"),
        &args(&["-s", "-a", &addr, "-p", "7168", "-v"]),
        &args(&["-c", "-p", "7168", "-C", "50", "-v", "-V", "-a"]),
        DEADLINE,
        LISTENING,
    );
    both_ok(&p, "rping on one address");
    let pings = p.client.output.matches("ping data: rdma-ping-").count();
    assert_eq!(pings, 50, "client pings:\n{}", p.dump());
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
    // perftest -R connects twice: an exchange connection, then, after a handshake over it,
    // the data connection, for which the server only then listens. A client that resolves
    // and connects before that listen gets REJECTED (reason 8, as from any CM), and
    // perftest's retry then reuses the ids it destroyed and hangs: a perftest race that
    // softib's instant address resolution makes likelier on a loaded machine. Short
    // deadlines and more runs absorb it.
    let p = run_pair_ready(
        165,
        &binary("ib_write_bw", "perftest"),
        &args(&[
            "-R", "-d", "softib0", "-n", "2000", "-s", "65536", "-p", "7165",
        ]),
        &args(&[
            "-R", "-d", "softib0", "-n", "2000", "-s", "65536", "-p", "7165",
        ]),
        Duration::from_secs(30),
        4,
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

/// libfabric's verbs provider finds RDMA devices behind the host's non-loopback
/// interfaces, so this test makes its own user and network namespace (`unshare -rn`) with a
/// veth pair, 10.77.0.1 and 10.77.0.2, and runs `fi_pingpong -p verbs -e msg -c` (data
/// checked) between two softib devices there. Needs libfabric-bin, util-linux (unshare),
/// iproute2 (ip) and unprivileged user namespaces.
#[test]
fn fi_pingpong_verbs_msg_endpoints() {
    let fi = binary("fi_pingpong", "libfabric-bin");
    let unshare = binary("unshare", "util-linux");
    binary("ip", "iproute2");
    let script = format!(
        r#"set -e
ip link add sv0 type veth peer name sv1
ip addr add 10.77.0.1/24 dev sv0
ip addr add 10.77.0.2/24 dev sv1
ip link set lo up; ip link set sv0 up; ip link set sv1 up
export LD_PRELOAD={so} SOFTIB_MTU=1024 SOFTIB_DEBUG=1
SOFTIB_ADDR=10.77.0.1 timeout 60 {fi} -p verbs -e msg -I 200 -S 4096 -c > "$LOG_DIR/server.log" 2>&1 &
server=$!
i=0
until grep -q "softib: rdma_cm: listening on port" "$LOG_DIR/server.log" || [ $i -ge 200 ]; do
  sleep 0.05; i=$((i+1))
done
rc=0
SOFTIB_ADDR=10.77.0.2 timeout 50 {fi} -p verbs -e msg -I 200 -S 4096 -c 10.77.0.1 > "$LOG_DIR/client.log" 2>&1 || rc=$?
wait $server || rc=$((rc + 100))
exit $rc
"#,
        so = common::shim_library().display(),
        fi = fi.display(),
    );
    let dir = std::env::temp_dir().join(format!("softib-shim-fi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = std::process::Command::new(&unshare)
        .args(["-rn", "sh", "-c", &script])
        .env("LOG_DIR", &dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run unshare");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            // Killing unshare (by its PID) ends the namespace and the tools' timeouts.
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let (server, client) = (read("server.log"), read("client.log"));
    let _ = std::fs::remove_dir_all(&dir);
    let dump = format!(
        "unshare: {:?}\n{}\n--- server:\n{server}\n--- client:\n{client}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "fi_pingpong over softib failed (a failing `ip link add` means this host gives \
         no unprivileged user namespaces):\n{dump}"
    );
    for log in [&server, &client] {
        // The figures row: size 4k, 200 sent, 200 acknowledged.
        assert!(
            log.lines().any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() >= 4 && c[0] == "4k" && c[1] == "200" && c[2] == "=200"
            }),
            "no result row:\n{dump}"
        );
    }
}
