//! Running the real `softib` binary in tests: a server and a client on loopback, each test
//! on its own pair of loopback addresses (127.0.N.1 client, 127.0.N.2 server) and its own
//! TCP port, so tests run in parallel without sharing a RoCEv2 socket.
#![allow(dead_code)]

pub mod ibsim;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn softib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softib"))
}

/// Waits for a child at most `limit`; kills it and panics if it hangs.
pub fn wait(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait().expect("try_wait") {
            Some(_) => return child.wait_with_output().expect("output"),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "{what} hung for {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Addresses and port of test number `n` (1..=250).
pub struct Pair {
    pub client_ip: String,
    pub server_ip: String,
    pub port: u16,
}

pub fn pair(n: u8) -> Pair {
    Pair {
        client_ip: format!("127.0.{n}.1"),
        server_ip: format!("127.0.{n}.2"),
        port: 21000 + u16::from(n),
    }
}

/// Every RC test uses 1.07 s local ACK timeouts (-u 18) instead of 67 ms: 8 timeouts in a
/// row exhaust the retries, and a test process can be descheduled that long on a busy
/// machine. Recovery paths are tested with injected loss, where a timeout still fires.
const QP_TIMEOUT: [&str; 2] = ["-u", "18"];

/// Starts the server of `tool` with `args`.
pub fn server(p: &Pair, tool: &str, args: &[&str]) -> Child {
    softib()
        .arg(tool)
        .args(["--bind", &p.server_ip, "-p", &p.port.to_string()])
        .args(QP_TIMEOUT)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server")
}

/// Starts the client of `tool` with `args`, retrying while the server is not listening yet.
pub fn client(p: &Pair, tool: &str, args: &[&str]) -> Child {
    softib()
        .arg(tool)
        .arg(&p.server_ip)
        .args(["--bind", &p.client_ip, "-p", &p.port.to_string()])
        .args(QP_TIMEOUT)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client")
}

/// Waits until something listens on the pair's server address.
pub fn await_listener(p: &Pair) {
    let addr = format!("{}:{}", p.server_ip, p.port);
    let deadline = Instant::now() + Duration::from_secs(20);
    // A probe connection is what the server would accept as its client, so probe by
    // asking the kernel: /proc/net/tcp lists listening sockets (state 0A).
    let hex_port = format!("{:04X}", p.port);
    let ip: std::net::Ipv4Addr = p.server_ip.parse().unwrap();
    let o = ip.octets();
    let hex_ip = format!("{:02X}{:02X}{:02X}{:02X}", o[3], o[2], o[1], o[0]);
    let needle = format!("{hex_ip}:{hex_port} 00000000:0000 0A");
    loop {
        let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        if tcp.contains(&needle) {
            return;
        }
        assert!(Instant::now() < deadline, "server never listened on {addr}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Both sides' outputs.
pub struct Run {
    pub client: Output,
    pub server: Output,
}

impl Run {
    pub fn client_stdout(&self) -> String {
        String::from_utf8_lossy(&self.client.stdout).into_owned()
    }
    pub fn server_stdout(&self) -> String {
        String::from_utf8_lossy(&self.server.stdout).into_owned()
    }
    pub fn assert_ok(&self) {
        assert!(
            self.client.status.success() && self.server.status.success(),
            "client {:?}: {}\n{}\nserver {:?}: {}\n{}",
            self.client.status,
            String::from_utf8_lossy(&self.client.stderr),
            self.client_stdout(),
            self.server.status,
            String::from_utf8_lossy(&self.server.stderr),
            self.server_stdout()
        );
    }
}

/// Runs server and client of `tool` with the same `args` to completion.
pub fn run_pair(n: u8, tool: &str, args: &[&str]) -> Run {
    let p = pair(n);
    let s = server(&p, tool, args);
    await_listener(&p);
    let c = client(&p, tool, args);
    let client = wait(c, Duration::from_secs(120), "client");
    let server = wait(s, Duration::from_secs(120), "server");
    Run { client, server }
}

/// The report lines of a perftest table: the lines after the header that start with a
/// size.
pub fn report_rows(out: &str, header_word: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in out.lines() {
        if line.contains(header_word) {
            in_table = true;
            continue;
        }
        if in_table {
            let fields: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            if fields.first().is_some_and(|f| f.parse::<u64>().is_ok()) {
                rows.push(fields);
            } else if line.starts_with("---") {
                in_table = false;
            }
        }
    }
    rows
}

/// A fresh temporary directory for one test.
pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("softib-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
