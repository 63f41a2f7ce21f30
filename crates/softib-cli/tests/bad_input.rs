//! Bad input ends every tool with a clear error and a non-zero exit, quickly: a wrong
//! host, a refused port, a silent peer, a peer that vanishes mid-run (either side), and
//! malformed exchange messages from a fake peer.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{await_listener, client, pair, server, softib, wait};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn fails_with(o: &Output, words: &[&str]) {
    let e = stderr(o);
    assert!(!o.status.success(), "expected failure, got success: {e}");
    assert!(e.starts_with("softib: error: "), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    for w in words {
        assert!(e.contains(w), "{w:?} not in {e:?}");
    }
}

fn run(args: &[&str]) -> Output {
    let c = softib()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait(c, Duration::from_secs(30), "tool")
}

#[test]
fn wrong_host_is_a_resolve_error() {
    let o = run(&["write-bw", "no-such-host.invalid", "-p", "21101"]);
    fails_with(&o, &["no-such-host.invalid"]);
    let o = run(&["pingpong", "no-such-host.invalid", "-p", "21101"]);
    fails_with(&o, &["no-such-host.invalid"]);
}

#[test]
fn refused_port_says_so() {
    // Bind then drop a listener: nothing listens on that port now.
    let port = TcpListener::bind("127.0.101.2:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for tool in ["send-bw", "write-lat", "pingpong"] {
        let o = run(&[tool, "127.0.101.2", "-p", &port.to_string()]);
        fails_with(&o, &["is the server running"]);
    }
}

#[test]
fn bad_options_are_rejected_before_connecting() {
    fails_with(&run(&["write-bw", "-m", "1500", "127.0.0.1"]), &["-m 1500"]);
    fails_with(&run(&["read-bw", "-c", "UC", "127.0.0.1"]), &["UC"]);
    fails_with(&run(&["write-bw", "-c", "UD", "127.0.0.1"]), &["UD"]);
    fails_with(&run(&["send-lat", "-q", "2", "127.0.0.1"]), &["one QP"]);
    fails_with(
        &run(&["write-bw", "--inject", "drop=2", "127.0.0.1"]),
        &["--inject"],
    );
    fails_with(
        &run(&["write-bw", "--bind", "nonsense", "127.0.0.1"]),
        &["--bind"],
    );
    fails_with(
        &run(&["counters", "/nonexistent/file.json"]),
        &["cannot read"],
    );
}

/// A fake server: accepts one client and plays `script` (bytes to read, bytes to write).
fn fake_server(
    ip: &str,
    steps: Vec<(usize, Vec<u8>)>,
    then_sleep: Duration,
) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind(format!("{ip}:0")).unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        for (read, write) in steps {
            let mut buf = vec![0u8; read];
            if s.read_exact(&mut buf).is_err() {
                return;
            }
            if s.write_all(&write).is_err() {
                return;
            }
        }
        std::thread::sleep(then_sleep);
    });
    (port, h)
}

#[test]
fn malformed_perftest_messages_are_named() {
    // A garbage version string.
    let mut v = b"hello".to_vec();
    v.resize(16, 0);
    let (port, h) = fake_server("127.0.102.2", vec![(16, v)], Duration::ZERO);
    let o = run(&[
        "write-bw",
        "127.0.102.2",
        "--bind",
        "127.0.102.1",
        "-p",
        &port.to_string(),
    ]);
    fails_with(&o, &["malformed perftest version"]);
    h.join().unwrap();

    // A valid start, then a garbage key message.
    let mut v = b"6.06".to_vec();
    v.resize(16, 0);
    let mut keys = vec![b'z'; 107];
    keys.push(0);
    let steps = vec![
        (16, v),
        (4, 4096i32.to_be_bytes().to_vec()),
        (4, 64i32.to_be_bytes().to_vec()),
        (2, b"5\0".to_vec()),
        (108, keys),
    ];
    let (port, h) = fake_server("127.0.102.2", steps, Duration::ZERO);
    let o = run(&[
        "send-bw",
        "127.0.102.2",
        "--bind",
        "127.0.102.1",
        "-p",
        &port.to_string(),
    ]);
    fails_with(&o, &["malformed perftest keys"]);
    h.join().unwrap();
}

#[test]
fn malformed_pingpong_message_is_named() {
    let mut garbage = b"0000:zzzzzz:000001:".to_vec();
    garbage.resize(52, b'0');
    garbage[51] = 0;
    let (port, h) = fake_server("127.0.103.2", vec![(52, garbage)], Duration::ZERO);
    let o = run(&[
        "pingpong",
        "127.0.103.2",
        "--bind",
        "127.0.103.1",
        "-p",
        &port.to_string(),
    ]);
    fails_with(
        &o,
        &["malformed ibv_rc_pingpong message", "not a hex digit"],
    );
    h.join().unwrap();
}

#[test]
fn silent_peer_times_out() {
    let (port, h) = fake_server("127.0.104.2", vec![], Duration::from_secs(5));
    let t = Instant::now();
    let o = run(&[
        "write-lat",
        "127.0.104.2",
        "--bind",
        "127.0.104.1",
        "-p",
        &port.to_string(),
        "--oob-timeout",
        "1",
    ]);
    fails_with(&o, &["timed out"]);
    assert!(t.elapsed() < Duration::from_secs(20));
    h.join().unwrap();
}

/// Starts a long test, kills one side after a second, and checks the other ends with an
/// error on its own.
fn vanish(n: u8, tool: &str, kill_server: bool) {
    let p = pair(n);
    let args = ["-D", "60", "-s", "4096", "--oob-timeout", "3"];
    let mut s = server(&p, tool, &args);
    await_listener(&p);
    let mut c = client(&p, tool, &args);
    std::thread::sleep(Duration::from_millis(1500));
    let (victim, survivor, name) = if kill_server {
        (&mut s, c, "client")
    } else {
        (&mut c, s, "server")
    };
    victim.kill().unwrap();
    let _ = victim.wait();
    let o = wait(survivor, Duration::from_secs(30), name);
    fails_with(&o, &[]);
}

#[test]
fn peer_vanishing_mid_run_ends_the_other_side() {
    vanish(105, "write-bw", true);
    vanish(106, "write-bw", false);
    vanish(107, "send-bw", true);
    vanish(108, "send-bw", false);
    vanish(109, "write-lat", true);
    vanish(110, "send-lat", false);
}

#[test]
fn pingpong_peer_vanishing_mid_run_ends_the_other_side() {
    for (n, kill_server) in [(111u8, true), (112, false)] {
        let p = pair(n);
        let args = ["-n", "100000000", "-s", "64", "--oob-timeout", "3"];
        let mut s = server(&p, "pingpong", &args);
        await_listener(&p);
        let mut c = client(&p, "pingpong", &args);
        std::thread::sleep(Duration::from_millis(1500));
        let (victim, survivor) = if kill_server {
            (&mut s, c)
        } else {
            (&mut c, s)
        };
        victim.kill().unwrap();
        let _ = victim.wait();
        let o = wait(survivor, Duration::from_secs(30), "survivor");
        fails_with(&o, &[]);
    }
}
