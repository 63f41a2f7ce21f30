//! `softib write-bw|read-bw|send-bw|send-lat -R`: the exchange and the test QPs connect
//! through rdma_cm (IB CM over QP1) as perftest's `-R` does. Between two softib tools, and
//! with the stock perftest tools (`ib_*_bw -R`, rdma-core's librdmacm) run through
//! `softib run` and the verbs shim, each side as the server in turn. Every run checks
//! perftest's result row (size, iterations, a positive figure) and that the tool says it
//! exchanged over rdma_cm. Missing perftest or shim fail the test saying so.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{report_rows, softib, wait};

/// The shim cargo built beside this test binary, else the one beside `softib`.
fn shim() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let beside_test = exe.parent().map(|d| d.join("libsoftib_verbs_shim.so"));
    let beside_softib = PathBuf::from(env!("CARGO_BIN_EXE_softib"))
        .parent()
        .map(|d| d.join("libsoftib_verbs_shim.so"));
    [beside_test, beside_softib]
        .into_iter()
        .flatten()
        .find(|p| p.exists())
        .expect(
            "the verbs shim is not built: cargo build --release -p softib-verbs-shim (or run cargo test --workspace)",
        )
}

fn perftest(tool: &str) -> PathBuf {
    let p = PathBuf::from("/usr/bin").join(tool);
    assert!(
        p.exists(),
        "{} is missing: install the Debian package perftest",
        p.display()
    );
    p
}

/// One side of a run: a softib tool, or a stock perftest tool through `softib run`.
enum Side {
    Softib,
    Stock,
}

struct Addrs {
    server: String,
    client: String,
    port: String,
}

fn addrs(n: u8) -> Addrs {
    Addrs {
        server: format!("127.0.{n}.2"),
        client: format!("127.0.{n}.1"),
        port: (21000 + u16::from(n)).to_string(),
    }
}

/// `tool` is perftest's name (write_bw); `args` are common to both sides.
fn command(side: &Side, tool: &str, addr: &str, args: &[&str]) -> Command {
    match side {
        Side::Softib => {
            let mut c = softib();
            c.arg(tool.replace('_', "-"))
                .args(["-R", "--bind", addr, "-u", "18"])
                .args(args);
            c
        }
        Side::Stock => {
            let mut c = softib();
            c.arg("run")
                .args(["--addr", addr, "--shim"])
                .arg(shim())
                .arg("--")
                .arg(perftest(&format!("ib_{tool}")))
                .args(["-R", "-F", "-u", "18"])
                .args(args);
            c
        }
    }
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

fn text(o: &Output) -> String {
    format!(
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs server and client to completion. The client starts again while the server does
/// not listen yet (its REQ is rejected with reason 8, as from any CM).
fn run(n: u8, tool: &str, server: Side, client: Side, args: &[&str]) -> (Output, Output) {
    let a = addrs(n);
    let mut sargs = vec!["-p", &a.port];
    sargs.extend_from_slice(args);
    let s = spawn(command(&server, tool, &a.server, &sargs));
    let deadline = Instant::now() + Duration::from_secs(30);
    let c = loop {
        let mut cargs = vec!["-p", a.port.as_str()];
        cargs.extend_from_slice(args);
        cargs.push(&a.server);
        let c = wait(
            spawn(command(&client, tool, &a.client, &cargs)),
            Duration::from_secs(90),
            "client",
        );
        let all = text(&c);
        let not_listening = all.contains("REJECTED") || all.contains("Unexpected CM event");
        if c.status.success() || !not_listening || Instant::now() > deadline {
            break c;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let s = wait(s, Duration::from_secs(90), "server");
    (s, c)
}

/// The result row of a bandwidth (`#bytes`) or latency table, with its checks.
fn check(out: &Output, what: &str, size: u64, iters: u64) {
    assert!(out.status.success(), "{what}: {}", text(out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Data ex. method : rdma_cm"),
        "{what}: {}",
        text(out)
    );
    let rows = report_rows(&stdout, "#bytes");
    assert_eq!(rows.len(), 1, "{what}: {}", text(out));
    assert_eq!(rows[0][0].parse::<u64>().unwrap(), size, "{what}");
    assert_eq!(rows[0][1].parse::<u64>().unwrap(), iters, "{what}");
    let figure: f64 = rows[0][3].parse().unwrap();
    assert!(figure > 0.0, "{what}: {}", text(out));
}

#[test]
fn softib_tools_pair_with_each_other_over_rdma_cm() {
    for (n, tool, size) in [
        (210, "write_bw", 65536),
        (211, "read_bw", 65536),
        (212, "send_bw", 65536),
    ] {
        let (s, c) = run(n, tool, Side::Softib, Side::Softib, &["-n", "300"]);
        check(&c, &format!("{tool} client"), size, 300);
        // The WRITE/READ server prints the client's report; the SEND server its own.
        check(&s, &format!("{tool} server"), size, 300);
    }
    let (s, c) = run(213, "send_lat", Side::Softib, Side::Softib, &["-n", "300"]);
    check(&c, "send_lat client", 2, 300);
    check(&s, "send_lat server", 2, 300);
}

#[test]
fn softib_tools_pair_with_stock_perftest_over_rdma_cm_both_ways() {
    for (n, tool) in [(214, "write_bw"), (215, "read_bw"), (216, "send_bw")] {
        let (_, c) = run(n, tool, Side::Stock, Side::Softib, &["-n", "300"]);
        check(
            &c,
            &format!("softib {tool} client of ib_{tool}"),
            65536,
            300,
        );
        let (_, c) = run(n + 10, tool, Side::Softib, Side::Stock, &["-n", "300"]);
        check(
            &c,
            &format!("ib_{tool} client of softib {tool}"),
            65536,
            300,
        );
    }
    let (s, c) = run(217, "send_lat", Side::Stock, Side::Softib, &["-n", "300"]);
    check(&c, "softib send_lat client", 2, 300);
    check(&s, "ib_send_lat server", 2, 300);
    let (s, c) = run(227, "send_lat", Side::Softib, Side::Stock, &["-n", "300"]);
    check(&c, "ib_send_lat client", 2, 300);
    check(&s, "softib send_lat server", 2, 300);
}

#[test]
fn rdma_cm_server_needs_a_device_address_and_ud_is_refused() {
    let o = softib()
        .args(["write-bw", "-R", "-p", "21230"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("needs --bind"),
        "{}",
        text(&o)
    );
    let o = softib()
        .args(["send-bw", "-R", "-c", "UD", "127.0.230.2"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("UD"),
        "{}",
        text(&o)
    );
}

/// A peer that dies mid-connection. A softib device lives in its process, so a server
/// killed with SIGKILL sends nothing more (no DREQ): a host that lost power, not a process
/// whose kernel survives it. What the kernel does then, and so what the client must see:
/// its outstanding RDMA WRITEs are retransmitted on every local ACK timeout until the
/// retry count is spent (IBA 9.7.6.1.3; perftest -R connects with retry_count 7, and
/// rdma_cm gives RoCE QPs the local ACK timeout 19, 4.096 us x 2^19 = 2.1 s: kernel cma.c,
/// packet life time 18 + 1), then they complete with IBV_WC_RETRY_EXC_ERR (12) and the
/// tool fails. Neither sooner (no retry at all) nor much later.
///
/// A client that only waits for a receive when its peer's host dies (rping between two
/// pings) has nothing outstanding and waits on, with a kernel as with softib; the kernel's
/// RDMA_CM_EVENT_DISCONNECTED for a killed process comes from the DREQ its surviving
/// kernel sends, which a softib device, gone with its process, cannot send.
/// Kills its process when dropped (a failed assertion leaves nothing running).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn dead_server(n: u8, server: Side, client: Side, expect: &str) {
    const RETRY_BUDGET: Duration = Duration::from_millis(8 * 2147);
    let a = addrs(n);
    let dir = std::env::temp_dir().join(format!("softib-dead-peer-{n}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let clog = dir.join("client.log");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    // No -u: the QPs keep rdma_cm's local ACK timeout.
    let with_log = |side: &Side, addr: &str, args: &[&str], log: Option<&std::path::Path>| {
        let mut c = match side {
            // Its own silence limit must not end the run before the QP's retries do.
            Side::Softib => {
                let mut c = softib();
                c.args(["write-bw", "-R", "--oob-timeout", "90", "--bind", addr]);
                c
            }
            Side::Stock => {
                let mut c = softib();
                // SOFTIB_DEBUG: the shim's (unbuffered) rdma_cm lines show the connection.
                c.args(["run", "--addr", addr, "--shim"])
                    .arg(shim())
                    .arg("--")
                    .arg(perftest("ib_write_bw"))
                    .args(["-R", "-F"])
                    .env("SOFTIB_DEBUG", "1");
                c
            }
        };
        c.args(["-D", "120", "-p", &a.port]).args(args);
        match log {
            Some(l) => {
                let f = std::fs::File::create(l).unwrap();
                c.stdout(f.try_clone().unwrap()).stderr(f);
            }
            None => {
                c.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        KillOnDrop(c.spawn().expect("spawn"))
    };
    let mut srv = with_log(&server, &a.server, &[], None);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut cli: Option<KillOnDrop> = None;
    // Started again while the server does not listen yet (REJECTED, reason 8). The run
    // is under way once softib's tool prints its result header (just before the first
    // WRITE), or once the stock tool's test connection (its second) is connected: its
    // stdout, a file, is flushed only at exit.
    let started =
        |log: &str| log.contains("BW average") || log.matches("CM event ConnectReply").count() >= 2;
    while !started(&read(&clog)) {
        assert!(
            Instant::now() < deadline,
            "the test never started:\n{}",
            read(&clog)
        );
        let running = cli
            .as_mut()
            .is_some_and(|c| c.0.try_wait().unwrap().is_none());
        if !running {
            std::thread::sleep(Duration::from_millis(200));
            cli = Some(with_log(&client, &a.client, &[&a.server], Some(&clog)));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut cli = cli.unwrap();
    // Let the WRITEs run a moment.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        cli.0.try_wait().unwrap().is_none(),
        "client ended early:\n{}",
        read(&clog)
    );
    srv.0.kill().expect("kill the server");
    let killed = Instant::now();
    let _ = srv.0.wait();
    let limit = RETRY_BUDGET + Duration::from_secs(40);
    let status = loop {
        if let Some(s) = cli.0.try_wait().unwrap() {
            break s;
        }
        if killed.elapsed() > limit {
            panic!(
                "the client still runs {limit:?} after its server died:\n{}",
                read(&clog)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = killed.elapsed();
    eprintln!("the client failed {took:?} after its server was killed");
    let out = read(&clog);
    assert!(!status.success(), "the client reported success:\n{out}");
    assert!(out.contains(expect), "no {expect:?} in:\n{out}");
    // The WRITE in flight at the kill was sent at most a few milliseconds before it.
    assert!(
        took >= RETRY_BUDGET.mul_f64(0.95),
        "the client gave up after {took:?}, before its {RETRY_BUDGET:?} of retries:\n{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stock_client_of_a_killed_server_fails_with_retry_exceeded_after_the_retries() {
    // perftest's status line for IBV_WC_RETRY_EXC_ERR.
    dead_server(231, Side::Softib, Side::Stock, "Failed status 12");
}

#[test]
fn softib_client_of_a_killed_server_fails_with_retry_exceeded_after_the_retries() {
    dead_server(
        232,
        Side::Stock,
        Side::Softib,
        "transport retry counter exceeded",
    );
}
