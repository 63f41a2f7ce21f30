//! Running stock libibverbs programs with the shim preloaded: locating the library and the
//! binaries (failing loudly when one is missing), running a server/client pair on two
//! loopback addresses with a deadline, and killing both (by PID) when it passes; and
//! (`layout_probe`) comparing the ABI definitions with the installed headers.
#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub mod layout_probe;

/// The preloadable library cargo built next to this test binary.
pub fn shim_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("deps directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libsoftib_verbs_shim.so");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "libsoftib_verbs_shim.so not found next to {} (cargo builds it with the crate's tests)",
        exe.display()
    );
}

/// A program on PATH, or a failure naming the Debian package that has it.
pub fn binary(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} is not installed: apt-get install {package} (see .ci/run)");
}

/// One side's result.
#[derive(Debug)]
pub struct Side {
    /// Exit status, None when it was killed at the deadline.
    pub status: Option<ExitStatus>,
    /// stdout and stderr, interleaved as written.
    pub output: String,
}

impl Side {
    /// True when the program exited with status 0.
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Both sides of a run.
#[derive(Debug)]
pub struct Pair {
    /// The server (SOFTIB_ADDR = 127.77.slot.1).
    pub server: Side,
    /// The client (127.77.slot.2).
    pub client: Side,
}

impl Pair {
    /// Both output texts, for failure messages.
    pub fn dump(&self) -> String {
        format!(
            "--- server ({:?}):\n{}\n--- client ({:?}):\n{}",
            self.server.status, self.server.output, self.client.status, self.client.output
        )
    }

    fn timed_out(&self) -> bool {
        self.server.status.is_none() || self.client.status.is_none()
    }
}

/// Each test gets its own `slot`: device addresses 127.77.slot.{1,2} (so tests run in
/// parallel with each other and with other softib tests on 127.0.0.x) and TCP port
/// 19400 + slot for the tool's exchange.
pub fn tcp_port(slot: u8) -> u16 {
    19400 + u16::from(slot)
}

fn spawn(program: &Path, args: &[String], addr: &str, log: &Path) -> Child {
    let out = File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    Command::new(program)
        .args(args)
        .env("LD_PRELOAD", shim_library())
        .env("SOFTIB_ADDR", addr)
        .env("SOFTIB_DEBUG", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()))
}

/// True when something listens on TCP `port` (IPv4 or IPv6), read from /proc so the
/// server's single accept is not used up by a probe connection.
pub fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
            })
        })
    })
}

fn wait_deadline(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            // Kill this child by its PID (Child::kill), and reap it.
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `program server_args` on 127.77.slot.1 and, once it listens, `program client_args
/// 127.77.slot.1` on 127.77.slot.2, both preloaded, and waits up to `deadline` for both.
/// A run that times out is killed and retried, up to `attempts` runs in all (unreliable
/// transports can lose a packet under load and leave a tool waiting forever); a run that
/// ends with a failure is returned as it is.
pub fn run_pair(
    slot: u8,
    program: &Path,
    server_args: &[String],
    client_args: &[String],
    deadline: Duration,
    attempts: u32,
) -> Pair {
    run_pair_ready(
        slot,
        program,
        server_args,
        client_args,
        deadline,
        attempts,
        Ready::TcpListen,
    )
}

/// When the client may start.
#[derive(Clone, Copy, Debug)]
pub enum Ready {
    /// The server listens on TCP `tcp_port(slot)` (an out-of-band exchange).
    TcpListen,
    /// The server's log has this line (an rdma_cm server: the shim's `SOFTIB_DEBUG` line
    /// for rdma_listen).
    LogLine(&'static str),
}

/// [`run_pair`], starting the client when `ready` says the server is.
pub fn run_pair_ready(
    slot: u8,
    program: &Path,
    server_args: &[String],
    client_args: &[String],
    deadline: Duration,
    attempts: u32,
    ready: Ready,
) -> Pair {
    run_pair_at(
        slot,
        program,
        (server_args, client_args),
        deadline,
        attempts,
        ready,
        false,
    )
}

/// [`run_pair_ready`] with both processes on the one address 127.77.slot.1, as two
/// processes of a host share its kernel device.
pub fn run_pair_on_one_address(
    slot: u8,
    program: &Path,
    server_args: &[String],
    client_args: &[String],
    deadline: Duration,
    ready: Ready,
) -> Pair {
    run_pair_at(
        slot,
        program,
        (server_args, client_args),
        deadline,
        1,
        ready,
        true,
    )
}

fn run_pair_at(
    slot: u8,
    program: &Path,
    (server_args, client_args): (&[String], &[String]),
    deadline: Duration,
    attempts: u32,
    ready: Ready,
    one_address: bool,
) -> Pair {
    let dir = std::env::temp_dir().join(format!("softib-shim-{}-{slot}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let server_addr = format!("127.77.{slot}.1");
    let client_addr = if one_address {
        server_addr.clone()
    } else {
        format!("127.77.{slot}.2")
    };
    let port = tcp_port(slot);
    let mut last = None;
    for _ in 0..attempts.max(1) {
        let (slog, clog) = (dir.join("server.log"), dir.join("client.log"));
        let start = Instant::now();
        let end = start + deadline;
        let mut server = spawn(program, server_args, &server_addr, &slog);
        let is_ready = || match ready {
            Ready::TcpListen => listening(port),
            Ready::LogLine(l) => std::fs::read_to_string(&slog).is_ok_and(|t| t.contains(l)),
        };
        while !is_ready() && Instant::now() < end {
            if let Ok(Some(_)) = server.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut cargs = client_args.to_vec();
        cargs.push(server_addr.clone());
        let mut client = spawn(program, &cargs, &client_addr, &clog);
        let cstatus = wait_deadline(&mut client, end);
        // A server whose client failed may wait forever for it: give it a short grace.
        let send = if cstatus.is_some_and(|s| s.success()) {
            end
        } else {
            Instant::now() + Duration::from_secs(3)
        };
        let sstatus = wait_deadline(&mut server, send.min(end).max(Instant::now()));
        let pair = Pair {
            server: Side {
                status: sstatus,
                output: std::fs::read_to_string(&slog).unwrap_or_default(),
            },
            client: Side {
                status: cstatus,
                output: std::fs::read_to_string(&clog).unwrap_or_default(),
            },
        };
        if !pair.timed_out() {
            let _ = std::fs::remove_dir_all(&dir);
            return pair;
        }
        eprintln!(
            "attempt timed out after {:?}, retrying:\n{}",
            start.elapsed(),
            pair.dump()
        );
        last = Some(pair);
    }
    let _ = std::fs::remove_dir_all(&dir);
    last.expect("at least one attempt")
}

/// Strings from string slices.
pub fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// What a C test program printed and how it ended.
pub struct CProgram {
    /// Exit status; None when it was killed at its deadline.
    pub status: Option<ExitStatus>,
    /// stdout alone (for line-by-line checks).
    pub stdout: String,
    /// stdout then stderr.
    pub text: String,
}

/// Compiles `tests/c/NAME.c` against the installed headers and `libs`, then runs it with the
/// shim preloaded on device address `addr` (and `args`), killing it after 60 s. Fails loudly
/// when `header` (the package's header that NAME.c needs) or `cc` is missing.
pub fn run_c_program(
    name: &str,
    header: (&str, &str),
    libs: &[&str],
    addr: &str,
    args: &[&str],
) -> CProgram {
    let (header, package) = header;
    assert!(
        Path::new(header).exists(),
        "{package} is not installed (apt-get install {package}): {header} is missing"
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let dir = std::env::temp_dir().join(format!("softib-shim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(libs)
        .output()
        .expect("cannot run `cc`: install gcc");
    assert!(
        out.status.success(),
        "compiling {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = Command::new(&exe)
        .args(args)
        .env("LD_PRELOAD", shim_library())
        .env("SOFTIB_ADDR", addr)
        .env("SOFTIB_DEBUG", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut killed = false;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    CProgram {
        status: (!killed).then_some(out.status),
        stdout,
        text,
    }
}
