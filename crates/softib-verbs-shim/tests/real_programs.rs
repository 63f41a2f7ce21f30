//! Real RDMA software, unmodified, on softib through `softib run` (which preloads the shim
//! and gives each process a free loopback address): UCX (`ucx_info`, `ucx_perftest` over
//! rc_verbs and ud_verbs), libfabric (`fi_pingpong -p verbs`) and qperf. Each finds the
//! device the way it does on a kernel (sysfs, `/dev/infiniband`), opens it through the
//! verbs, and must exit 0 with its figures. Servers and clients have a deadline; a pair that
//! hangs is killed by PID and rerun once. A missing program fails the test naming its
//! Debian package; a missing `softib` binary fails it naming the build command.

mod common;

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{binary, listening, shim_library};

const DEADLINE: Duration = Duration::from_secs(120);

/// The `softib` binary cargo built beside the shim.
fn softib() -> PathBuf {
    let shim = shim_library();
    let dir = shim.parent().expect("the shim's directory");
    // The shim may be found in target/<profile>/deps; the binary is in target/<profile>.
    [dir, dir.parent().unwrap_or(dir)]
        .iter()
        .map(|d| d.join("softib"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "softib not found beside {}: build it with `cargo build --release -p \
                 softib-cli` (the workspace build does)",
                shim.display()
            )
        })
}

/// `softib run --shim <this build's shim> -- program args`, with `env` set and nothing
/// of the test's own environment that would steer the device.
fn command(program: &str, package: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(softib());
    c.arg("run").arg("--shim").arg(shim_library());
    c.arg("--")
        .arg(binary(program, package))
        .args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("SOFTIB_ADDR")
        .env_remove("SOFTIB_DEVICE")
        .env("SOFTIB_DEBUG", "1")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

struct Run {
    status: Option<ExitStatus>,
    output: String,
}

impl Run {
    fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

fn log_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("softib-real-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).expect("log dir");
    d
}

fn spawn(mut c: Command, log: &PathBuf) -> Child {
    let out = File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    c.stdout(out)
        .stderr(err)
        .spawn()
        .expect("softib run starts")
}

/// Waits for `child` until `deadline`; past it, kills it by its PID (`softib run` execs
/// the program, so the PID is the program's) and reaps it.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One program run to its end.
fn run_one(tag: &str, c: Command) -> Run {
    let log = log_dir(tag).join("out.log");
    let mut child = spawn(c, &log);
    let status = wait_until(&mut child, Instant::now() + DEADLINE);
    Run {
        status,
        output: std::fs::read_to_string(&log).unwrap_or_default(),
    }
}

/// A server (listening on TCP `port` for its exchange) and a client, each in its own
/// `softib run`. A pair that times out is killed and rerun once.
fn run_pair(
    tag: &str,
    port: u16,
    server: impl Fn() -> Command,
    client: impl Fn() -> Command,
) -> (Run, Run) {
    let dir = log_dir(tag);
    let mut last = None;
    for attempt in 0..2 {
        let (slog, clog) = (dir.join("server.log"), dir.join("client.log"));
        let end = Instant::now() + DEADLINE;
        let mut s = spawn(server(), &slog);
        while !listening(port) && Instant::now() < end {
            if let Ok(Some(_)) = s.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut c = spawn(client(), &clog);
        let cstatus = wait_until(&mut c, end);
        let grace = if cstatus.is_some_and(|s| s.success()) {
            end
        } else {
            Instant::now() + Duration::from_secs(3)
        };
        let sstatus = wait_until(&mut s, grace.min(end));
        let pair = (
            Run {
                status: sstatus,
                output: std::fs::read_to_string(&slog).unwrap_or_default(),
            },
            Run {
                status: cstatus,
                output: std::fs::read_to_string(&clog).unwrap_or_default(),
            },
        );
        // A hang: the client never ended, or it succeeded and the server never did. A
        // server killed after its client failed is a failure, not a hang.
        let timed_out = pair.1.status.is_none() || (pair.1.ok() && pair.0.status.is_none());
        if !timed_out || attempt == 1 {
            return pair;
        }
        eprintln!("{tag}: timed out, rerunning:\n{}", dump(&pair));
        last = Some(pair);
    }
    last.expect("one attempt")
}

fn dump((s, c): &(Run, Run)) -> String {
    format!(
        "--- server ({:?}):\n{}\n--- client ({:?}):\n{}",
        s.status, s.output, c.status, c.output
    )
}

#[test]
fn ucx_info_lists_softib0_with_rc_and_ud_verbs() {
    let r = run_one("ucx-info", command("ucx_info", "ucx-utils", &["-d"], &[]));
    assert!(r.ok(), "ucx_info -d failed:\n{}", r.output);
    assert!(
        r.output.contains("# Memory domain: softib0"),
        "{}",
        r.output
    );
    for tl in ["rc_verbs", "ud_verbs"] {
        let at = r
            .output
            .find(&format!("#      Transport: {tl}"))
            .unwrap_or_else(|| panic!("no {tl} transport:\n{}", r.output));
        let device = r.output[at..].lines().nth(1).unwrap_or_default();
        assert!(
            device.contains("Device: softib0:1"),
            "{tl}: {device:?}\n{}",
            r.output
        );
    }
}

/// ucx_perftest's `Final:` row: iterations, then latency (50%, average, overall, us),
/// bandwidth (average, overall, MB/s) and message rate (average, overall).
fn final_row(output: &str) -> Option<(u64, Vec<f64>)> {
    let row = output
        .lines()
        .find(|l| l.trim_start().starts_with("Final:"))?;
    let mut cols = row.split_whitespace().skip(1);
    let iters = cols.next()?.parse().ok()?;
    Some((iters, cols.filter_map(|c| c.parse().ok()).collect()))
}

/// A ucx_perftest pair; `tls` is UCX_TLS (UCP tests) and `extra` the client's test
/// options. Returns the client's figures after checking both sides.
fn ucx_perftest(slot: u16, tls: &str, extra: &[&str], iters: u64) -> Vec<f64> {
    let port = 13500 + slot;
    let p = port.to_string();
    let n = iters.to_string();
    let env = [("UCX_TLS", tls), ("UCX_NET_DEVICES", "softib0:1")];
    let server = || command("ucx_perftest", "ucx-utils", &["-p", &p], &env);
    let client = || {
        let mut a = vec!["127.0.0.1", "-p", &p, "-n", &n];
        a.extend_from_slice(extra);
        command("ucx_perftest", "ucx-utils", &a, &env)
    };
    let tag = format!("ucx-{slot}");
    let pair = run_pair(&tag, port, server, client);
    assert!(
        pair.0.ok() && pair.1.ok(),
        "ucx_perftest {extra:?} over {tls}:\n{}",
        dump(&pair)
    );
    let (got, figures) =
        final_row(&pair.1.output).unwrap_or_else(|| panic!("no Final row:\n{}", dump(&pair)));
    assert_eq!(got, iters, "{}", dump(&pair));
    assert_eq!(figures.len(), 7, "{figures:?}");
    assert!(
        figures.iter().all(|f| f.is_finite() && *f >= 0.0) && figures[1] > 0.0 && figures[4] > 0.0,
        "{figures:?}\n{}",
        dump(&pair)
    );
    eprintln!("ucx_perftest {extra:?} over {tls}: {figures:?}");
    figures
}

// UCX_TLS=rc_v is rc_verbs with ud_verbs as its auxiliary (wire-up) transport: UCX refuses
// rc_verbs alone ("no auxiliary transport"), on any device.

#[test]
fn ucx_perftest_rc_verbs_tag_lat() {
    ucx_perftest(1, "rc_v", &["-t", "tag_lat", "-s", "8"], 2000);
}

#[test]
fn ucx_perftest_rc_verbs_tag_bw() {
    ucx_perftest(2, "rc_v", &["-t", "tag_bw", "-s", "65536"], 2000);
}

#[test]
fn ucx_perftest_rc_verbs_ucp_put_bw() {
    ucx_perftest(3, "rc_v", &["-t", "ucp_put_bw", "-s", "65536"], 2000);
}

#[test]
fn ucx_perftest_rc_verbs_am_bw() {
    // UCT level: the transport and device are the test's own options.
    ucx_perftest(
        4,
        "rc_verbs",
        &[
            "-t",
            "am_bw",
            "-x",
            "rc_verbs",
            "-d",
            "softib0:1",
            "-s",
            "32",
        ],
        20000,
    );
}

#[test]
fn ucx_perftest_ud_verbs_tag_lat() {
    ucx_perftest(5, "ud_v", &["-t", "tag_lat", "-s", "8"], 2000);
}

#[test]
fn ucx_perftest_ud_verbs_tag_bw() {
    ucx_perftest(6, "ud_v", &["-t", "tag_bw", "-s", "65536"], 2000);
}

#[test]
fn ucx_perftest_ud_verbs_ucp_put_bw() {
    ucx_perftest(7, "ud_v", &["-t", "ucp_put_bw", "-s", "65536"], 2000);
}

#[test]
fn ucx_perftest_ud_verbs_am_bw() {
    ucx_perftest(
        8,
        "ud_verbs",
        &[
            "-t",
            "am_bw",
            "-x",
            "ud_verbs",
            "-d",
            "softib0:1",
            "-s",
            "32",
        ],
        20000,
    );
}

/// libfabric's verbs provider for an RDM endpoint over loopback: its verbs provider skips
/// loopback interfaces for MSG endpoints (and so ofi_rxm; tests/rdmacm_tools.rs runs those
/// in a namespace), so libfabric layers ofi_rxd over the verbs UD endpoint instead; nothing
/// needs setting (no FI_VERBS_*).
#[test]
fn fi_pingpong_verbs_rdm() {
    let port = 13600u16;
    let p = port.to_string();
    let args = ["-p", "verbs", "-e", "rdm", "-I", "200", "-S", "4096"];
    // The control (TCP) port: -B on the server, -P on the client.
    let server = || {
        let mut a = args.to_vec();
        a.extend(["-B", &p]);
        command("fi_pingpong", "libfabric-bin", &a, &[])
    };
    let client = || {
        let mut a = args.to_vec();
        a.extend(["-P", &p, "127.0.0.1"]);
        command("fi_pingpong", "libfabric-bin", &a, &[])
    };
    let pair = run_pair("fi-pingpong", port, server, client);
    assert!(pair.0.ok() && pair.1.ok(), "fi_pingpong:\n{}", dump(&pair));
    // bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    let row = pair
        .1
        .output
        .lines()
        .find(|l| l.starts_with("4k "))
        .unwrap_or_else(|| panic!("no 4k row:\n{}", dump(&pair)));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols.get(1..3), Some(&["200", "=200"][..]), "{row}");
    let mbps: f64 = cols[5].parse().expect("MB/sec");
    assert!(mbps > 0.0, "{row}");
    eprintln!("fi_pingpong 4k: {row}");
}

/// qperf's RC tests end as they do on Linux RoCE (rxe, or a RoCE NIC): qperf 0.4.11
/// connects without rdma_cm unless given `-cm1`, and then builds its address vector without
/// a GRH (it never queries a GID), which a RoCE port refuses at RTR with EINVAL
/// (rdma_check_ah_attr in the kernel; the shim says why with SOFTIB_DEBUG=1). What is
/// asserted is that outcome, promptly and cleanly on both sides: no hang, no crash, the
/// kernel's errno. qperf over RoCE needs `-cm1`, i.e. rdma_cm (docs/verbs-shim.md).
fn qperf_refused_at_rtr(slot: u16, test: &str) {
    let port = 13700 + slot;
    let p = port.to_string();
    let server = || command("qperf", "qperf", &["-lp", &p], &[]);
    let client = || {
        command(
            "qperf",
            "qperf",
            &["-lp", &p, "-t", "3", "127.0.0.1", test],
            &[],
        )
    };
    let pair = run_pair(&format!("qperf-{slot}"), port, server, client);
    // The client ends by itself with qperf's failure status; the server, which serves
    // test after test, is then killed at the end of its grace period.
    let status = pair
        .1
        .status
        .unwrap_or_else(|| panic!("qperf {test} hung:\n{}", dump(&pair)));
    assert_eq!(status.code(), Some(1), "qperf {test}:\n{}", dump(&pair));
    // Whichever side moves its QP to RTR first is refused; the client reports its own
    // failure or the server's.
    let both = format!("{}\n{}", pair.0.output, pair.1.output);
    assert!(
        both.contains("a RoCE address vector needs is_global = 1")
            && both.contains("failed to modify QP to RTR: Invalid argument"),
        "qperf {test}:\n{}",
        dump(&pair)
    );
}

#[test]
fn qperf_rc_bw_is_refused_at_rtr_as_on_linux_roce() {
    qperf_refused_at_rtr(1, "rc_bw");
}

#[test]
fn qperf_rc_lat_is_refused_at_rtr_as_on_linux_roce() {
    qperf_refused_at_rtr(2, "rc_lat");
}

/// Open MPI over UCX (`--mca pml ucx`, `UCX_TLS=rc_v`, no shared-memory or TCP path), four
/// ranks, each through its own `softib run`: every rank gets its own device address, the
/// 1 MiB ping-pong between ranks 0 and 1 checks every byte, and the allreduce reaches all
/// four.
#[test]
fn mpirun_over_ucx_gives_each_rank_its_own_device() {
    let mpicc = binary("mpicc", "openmpi-bin and libopenmpi-dev");
    let mpirun = binary("mpirun", "openmpi-bin");
    let dir = log_dir("mpi");
    let exe = dir.join("mpi_pingpong");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mpi_pingpong.c");
    let cc = Command::new(&mpicc)
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("mpicc runs");
    assert!(
        cc.status.success(),
        "mpicc failed (apt-get install libopenmpi-dev):\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let mut c = Command::new(mpirun);
    c.args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
        .args(["--mca", "pml", "ucx", "--mca", "btl", "self"])
        .args(["-x", "UCX_TLS=rc_v", "-x", "UCX_NET_DEVICES=softib0:1"])
        .arg(softib())
        .arg("run")
        .arg("--shim")
        .arg(shim_library())
        .arg("--")
        .arg("sh")
        .arg("-c")
        // Each rank reports the address its `softib run` chose, then becomes the program.
        .arg(format!(
            "echo rank $OMPI_COMM_WORLD_RANK addr $SOFTIB_ADDR; exec {}",
            exe.display()
        ))
        .env_remove("LD_PRELOAD")
        .env_remove("SOFTIB_ADDR")
        .stdin(Stdio::null());
    let r = run_one("mpi-run", c);
    assert!(r.ok(), "mpirun failed:\n{}", r.output);
    let mut addrs: Vec<&str> = r
        .output
        .lines()
        .filter_map(|l| {
            l.strip_prefix("rank ")
                .and_then(|l| l.split(" addr ").nth(1))
        })
        .collect();
    assert_eq!(addrs.len(), 4, "{}", r.output);
    addrs.sort_unstable();
    addrs.dedup();
    assert_eq!(
        addrs.len(),
        4,
        "two ranks shared a device address:\n{}",
        r.output
    );
    let line = r
        .output
        .lines()
        .find(|l| l.starts_with("ranks 4 sum 6 "))
        .unwrap_or_else(|| panic!("no result line:\n{}", r.output));
    let mbps: f64 = line.rsplit(' ').next().unwrap().parse().expect("MB/s");
    assert!(mbps > 0.0, "{line}");
    eprintln!("mpirun -np 4 over UCX rc_v: {line}");
}
