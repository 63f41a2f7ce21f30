//! Stock infiniband-diags and OpenSM under `ibsim-run` against `softib sim --serve`
//! (issue 17): the harness mgmt_tools.rs and guide_tools.rs share. A test fails naming the
//! Debian package when a tool is missing.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use super::softib;

/// Fails, naming the package, unless every `(tool, package)` is on PATH and libumad2sim.so
/// (ibsim-utils' preload library) is installed.
pub fn require(tools: &[(&str, &str)]) {
    for (tool, package) in tools {
        assert!(
            !which(tool).as_os_str().is_empty(),
            "`{tool}` is not installed: these tests need the Debian package {package} \
             (apt-get install ibsim-utils infiniband-diags opensm)"
        );
    }
    assert!(
        Path::new("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so").exists()
            || std::fs::read_to_string(which("ibsim-run"))
                .map(|s| s.lines().any(|l| l.starts_with("sim_so=")
                    && Path::new(l.trim_start_matches("sim_so=")).exists()))
                .unwrap_or(false),
        "libumad2sim.so is missing: install the Debian package libumad2sim0 (ibsim-utils)"
    );
}

/// The path of `tool` on PATH (empty when it is not there).
pub fn which(tool: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_default()
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How to start the server.
#[derive(Default)]
pub struct ServeOpts<'a> {
    /// Serve over UDP on 127.0.0.1 at this port (else abstract sockets named `sock`).
    pub udp: Option<u16>,
    /// The server's stderr into this file (else inherited).
    pub stderr: Option<&'a Path>,
    /// Write the MAD log to `dir/mads.log`.
    pub mad_log: bool,
    /// `--no-files`: no report directory.
    pub no_files: bool,
}

/// A running `softib sim SCENARIO --serve`, killed when dropped.
pub struct Served {
    child: Child,
    /// The UDP port, when served over UDP.
    pub udp: Option<u16>,
    /// The abstract socket base name.
    pub sock: String,
    /// Its working directory, where the tools run too (libumad2sim writes `sys-<pid>/`
    /// there) and OpenSM keeps its cache.
    pub dir: PathBuf,
    /// The MAD log (`dir/mads.log`, when asked for).
    pub log: PathBuf,
    /// The server's first line: what it serves, and when.
    pub banner: String,
    _cleanup: Option<TempDir>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the server on `scenario` in `dir` (removed afterwards if `own_dir`), and waits
/// for its banner.
pub fn serve(scenario: &Path, sock: &str, dir: &Path, own_dir: bool, o: ServeOpts) -> Served {
    std::fs::create_dir_all(dir).unwrap();
    let log = dir.join("mads.log");
    let mut cmd = softib();
    cmd.arg("sim").arg(scenario).arg("--serve").current_dir(dir);
    if o.mad_log {
        cmd.arg("--mad-log").arg(&log);
    }
    if o.no_files {
        cmd.arg("--no-files");
    }
    match o.udp {
        Some(p) => cmd.args(["--udp-port", &p.to_string()]),
        None => cmd.args(["--sock-name", sock]),
    };
    let err = match o.stderr {
        Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
        None => Stdio::inherit(),
    };
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .expect("softib");
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    assert!(banner.contains("serving "), "server said {banner:?}");
    Served {
        child,
        udp: o.udp,
        sock: sock.to_string(),
        dir: dir.to_path_buf(),
        log,
        banner,
        _cleanup: own_dir.then(|| TempDir(dir.to_path_buf())),
    }
}

/// Runs `args` under ibsim-run against `s`, attached to `host` (`SIM_HOST`; `None`: the
/// server's default), from `s.dir`, at most 30 s (a hang fails the test).
pub fn run_tool(s: &Served, host: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new("timeout");
    c.arg("30").arg("ibsim-run").args(args).current_dir(&s.dir);
    // OpenSM keeps the LIDs and neighbours of its last subnet in its cache directory and
    // checks them against the next: each served fabric gets its own.
    c.env("OSM_CACHE_DIR", &s.dir);
    match s.udp {
        Some(p) => c
            .env("IBSIM_SERVER_NAME", "127.0.0.1")
            .env("IBSIM_SERVER_PORT", p.to_string()),
        None => c
            .env("IBSIM_SOCKNAME", &s.sock)
            .env_remove("IBSIM_SERVER_NAME"),
    };
    match host {
        Some(h) => c.env("SIM_HOST", h),
        None => c.env_remove("SIM_HOST"),
    };
    let o = c.output().expect("timeout/ibsim-run");
    assert_ne!(o.status.code(), Some(124), "{args:?} hung (30 s)");
    o
}

/// The value of field `name` in a tool's `Name:.....value` output.
pub fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([':', '.']))
        .unwrap_or_else(|| panic!("no {name} in\n{out}"))
        .trim_start_matches(name)
        .trim_start_matches([':', '.'])
        .trim()
}
