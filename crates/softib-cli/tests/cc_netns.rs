//! Congestion control on a real network: DCQCN and the IBA CCA behind a CE-marking
//! bottleneck between namespaces. Needs root, `ip`, `tc` and `nft`; without them it FAILS
//! and says what is missing (it never passes without having run).
//!
//! Two network namespaces joined by a veth pair, both created and deleted here. The sender
//! side's veth has a `tbf` bottleneck (BOTTLENECK_MBIT); the receiver side's veth marks ECN
//! CE from nftables (netdev ingress) on ECN-capable RoCEv2 packets that arrive faster than
//! MARK_PERCENT of the bottleneck's packet rate, i.e. whenever the bottleneck runs
//! (nearly) flat out, as a switch with a low marking threshold would. Why ingress after
//! the bottleneck and a packet rate: the egress hook sees UDP GSO super-packets (up to 62
//! datagrams each) before they are segmented, and nftables' byte-rate `limit` keeps a
//! bucket of a whole second of traffic (tokens_max = unit x (rate + burst) / rate), so it
//! would mark only after a second of overload. After `tbf` (burst smaller than two
//! frames, so it segments every GSO packet) each datagram passes the hook on its own.
//!
//! Traffic, inside the namespaces only: `softib write-bw` (RC, one QP, 64 x 64 KiB posted
//! and re-posted every 8, so the engine's 256-packet window is always in flight: about
//! 44 ms of queue at the bottleneck) from A to B, and latency probes: an RC SEND of 64 bytes that B echoes, one
//! every PROBE_INTERVAL, run by this test binary itself inside the namespaces (probes
//! sleep between sends so they sample the queue at evenly spaced times and take no CPU
//! from the flow). The probes never use congestion control, so they measure the same
//! thing in every run: the queue at the bottleneck. Run three times: `--cc none`, `--cc
//! dcqcn`, then `--cc iba` with an OpenSM-style `--cc-config` (IBA Annex A10 CCA: each CNP
//! raises the CCTI, the CCT's inter-packet delay paces the QP, CCTI_Timer lowers it again).
//! Asserted: with CC off a standing queue forms (the setup is congested); with DCQCN and
//! with the IBA CCA the receiver sees CE marks and sends CNPs, the sender receives them and
//! is throttled (IBA: its CCTI, sampled from its published counters, rose above 0), the
//! median probe round trip is at most half of the CC-off one, and the flow's goodput stays
//! within 20% of the bottleneck's payload capacity.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use softib_net::context::{ConnectOptions, Context, WaitMode};
use softib_net::driver::NetConfig;
use softib_transport::{
    AccessFlags, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendWr, Sge, WcStatus,
    WorkCompletion, WrOpcode,
};

/// The bottleneck rate (tbf), Mbit/s.
const BOTTLENECK_MBIT: u64 = 50;
/// Marking starts above this fraction of the bottleneck's packet rate (percent).
const MARK_PERCENT: u64 = 95;
/// Packets the marker lets through above the rate before it marks.
const MARK_BURST: u64 = 8;
/// One RDMA WRITE packet at IB MTU 1024 as tbf counts it (Ethernet header 14, IPv4 20,
/// UDP 8, BTH 12, payload 1024, ICRC 4; the first packet of a message has a RETH more).
const FRAME_BYTES: u64 = 14 + 20 + 8 + 12 + 1024 + 4;
/// Payload the bottleneck can carry, Mbit/s: the flow's goodput ceiling.
const PAYLOAD_CAPACITY_MBIT: f64 = BOTTLENECK_MBIT as f64 * 1024.0 / FRAME_BYTES as f64;
/// DCQCN settings for this network. The paper's defaults (T = K = 55 us, R_AI = 40 Mb/s)
/// are made for microsecond round trips at 40 Gb/s; here the marker signals at most a few
/// hundred times a second (one CNP per few ms) and the machine schedules in milliseconds.
/// T and K of 1.5 ms keep fast recovery from undoing most of a cut before the next CNP,
/// and additive steps of 2 Mb/s are small against 50 Mb/s. (Measured on this 2-core
/// machine: 1.5 ms keeps 94-96% of the capacity with a fifth of the CC-off queue; 2.5 ms
/// leaves a twentieth of the queue but 80-89% of the capacity, too close to the limit.)
const DCQCN: &str = "rpg_time_reset=1500,dce_tcp_rtt=1500,rpg_ai_rate=2,rpg_hai_rate=10";
/// The IBA CCA for this network, as an opensm.conf (`--cc-config`). Packet times are taken
/// at IBA_LINK_MBIT (`--link-rate`), so CCT entry i = 0:i (i packet times of delay) paces a
/// QP to IBA_LINK_MBIT / (1 + i): index 19 is the bottleneck's 50 Mbit/s and each step near
/// it moves the rate by about 5%. Every CNP adds one (CCTI_Increase 1); CCTI_Timer 9766
/// (10.0 ms) takes one off. The marker sits behind the bottleneck, so it marks at most the
/// 5% of the bottleneck's packets above MARK_PERCENT, about 290 a second, whatever the
/// queue: the CCTI climbs while a queue drains into it only if it decays more slowly than
/// that (measured: with 2 ms the CCTI never passed 1 and the queue stayed as without CC).
const IBA_CONF: &str = "congestion_control TRUE\n\
cc_ca_cong_setting_port_control 0x0000\n\
cc_ca_cong_setting_control_map 0x0001\n\
cc_ca_cong_setting_ccti_timer 0 9766\n\
cc_ca_cong_setting_ccti_increase 0 1\n\
cc_ca_cong_setting_trigger_threshold 0 0\n\
cc_ca_cong_setting_ccti_min 0 0\n";
/// The link rate the IBA CCA's packet times are taken at, Mbit/s.
const IBA_LINK_MBIT: u64 = 1000;
/// Seconds the bandwidth flow runs.
const FLOW_SECONDS: u64 = 12;
/// How long the probes run, once the flow has started.
const PROBE_TIME: Duration = Duration::from_secs(7);
/// Time between probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Local ACK timeout exponent of the flow and the probes: 18 = 1.07 s (IBA 9.7.6.1.3).
/// perftest's 14 (67 ms) is close to the CC-off queue plus a process's wait for a core on a
/// busy machine, and every spurious timeout resends a whole window into the queue.
const QP_TIMEOUT: u8 = 18;
/// `nice` increment of the traffic processes (negative: before other jobs on the machine).
const NICE: &str = "-10";
/// The CC-off run must show at least this median round trip, or the setup did not congest.
const MIN_CONGESTED_RTT_US: f64 = 5_000.0;

/// This target's name as libtest would list it.
const TEST_NAME: &str = "cc_netns";

/// Whether libtest's command line (which `cargo test` passes to every test binary, this
/// `harness = false` one included) selects this test: `--list` lists it, a name filter or
/// `--skip` that does not select it, or `--ignored`, runs nothing. Other libtest flags are
/// accepted and ignored, so `cargo test --workspace FILTER` and `-- --list` work.
fn libtest_selects_this_test() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut filters, mut skips) = (Vec::new(), Vec::new());
    let (mut exact, mut list, mut only_ignored) = (false, false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => list = true,
            "--exact" => exact = true,
            "--ignored" => only_ignored = true,
            "--skip" => skips.extend(it.next().cloned()),
            // libtest flags that take a value.
            "--test-threads" | "--color" | "--format" | "--logfile" | "-Z" | "--shuffle-seed" => {
                it.next();
            }
            f if f.starts_with('-') => {}
            filter => filters.push(filter.to_string()),
        }
    }
    let matches = |pattern: &String| {
        if exact {
            pattern == TEST_NAME
        } else {
            TEST_NAME.contains(pattern.as_str())
        }
    };
    let selected = !only_ignored
        && (filters.is_empty() || filters.iter().any(matches))
        && !skips.iter().any(|s| TEST_NAME.contains(s.as_str()));
    if list {
        if selected {
            println!("{TEST_NAME}: test");
        }
        std::process::exit(0);
    }
    if !selected {
        println!("\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.00s\n");
    }
    selected
}

fn main() {
    if let Ok(role) = std::env::var("SOFTIB_CC_PROBE") {
        probe_child(&role);
        return;
    }
    if !libtest_selects_this_test() {
        return;
    }
    if let Err(why) = preflight() {
        eprintln!("cc_netns: FAILED: {why}");
        std::process::exit(1);
    }
    let measured = Netns::create().and_then(|net| {
        let off = run_phase(&net, Cc::Off)?;
        let on = run_phase(&net, Cc::Dcqcn)?;
        let iba = run_phase(&net, Cc::Iba)?;
        Ok((off, on, iba))
    });
    let (off, on, iba) = match measured {
        Ok(m) => m,
        Err(why) => {
            eprintln!("cc_netns: FAILED: {why}");
            std::process::exit(1);
        }
    };
    println!("cc_netns: bottleneck {BOTTLENECK_MBIT} Mbit/s (payload capacity {PAYLOAD_CAPACITY_MBIT:.1} Mbit/s), CE marking above {MARK_PERCENT}% of its packet rate, DCQCN {DCQCN}, IBA CCA at {IBA_LINK_MBIT} Mbit/s packet times with CCT 0:i x 128");
    for r in [&off, &on, &iba] {
        println!("cc_netns: {r}");
    }
    let mut failures = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failures.push(what);
        }
    };
    check(
        off.median_rtt_us >= MIN_CONGESTED_RTT_US,
        format!(
            "CC off: median probe round trip {:.0} us < {MIN_CONGESTED_RTT_US} us: no standing queue formed, the setup did not congest",
            off.median_rtt_us
        ),
    );
    check(
        off.cnps_received == 0 && off.path.ce_marked == 0,
        format!(
            "CC off: data must not be ECN-capable (marked {}, CNPs {})",
            off.path.ce_marked, off.cnps_received
        ),
    );
    for (name, on) in [("DCQCN", &on), ("IBA CCA", &iba)] {
        check(
            on.ce_received > 0 && on.cnps_sent > 0,
            format!(
                "{name}: the receiver saw {} CE marks and sent {} CNPs",
                on.ce_received, on.cnps_sent
            ),
        );
        check(
            on.cnps_received > 0 && on.throttled_ns > 0,
            format!(
                "{name}: the sender received {} CNPs and was throttled {} ns",
                on.cnps_received, on.throttled_ns
            ),
        );
        check(
            on.median_rtt_us <= off.median_rtt_us / 2.0,
            format!(
                "{name}: median probe round trip {:.0} us is not at most half of {:.0} us (CC off)",
                on.median_rtt_us, off.median_rtt_us
            ),
        );
        check(
            on.goodput_mbit >= 0.8 * PAYLOAD_CAPACITY_MBIT,
            format!(
                "{name}: goodput {:.1} Mbit/s is below 80% of the bottleneck's {PAYLOAD_CAPACITY_MBIT:.1}",
                on.goodput_mbit
            ),
        );
    }
    check(
        iba.max_ccti.is_some_and(|c| c > 0),
        format!(
            "IBA CCA: the sender's CCTI never rose above 0 in its published counters ({:?})",
            iba.max_ccti
        ),
    );
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("cc_netns: FAILED: {f}");
        }
        std::process::exit(1);
    }
    println!("cc_netns: ok");
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
}

/// Root and the tools, or why not.
fn preflight() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    if uid != "0" {
        return Err(format!(
            "needs root (effective uid is {uid}) to create network namespaces, veth, tbf and nftables rules"
        ));
    }
    for (tool, package) in [("ip", "iproute2"), ("tc", "iproute2"), ("nft", "nftables")] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(format!(
                "`{tool}` is not installed (package {package}; .ci/run installs it)"
            ));
        }
    }
    Ok(())
}

fn sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The two namespaces and their veth pair; deleted on drop.
struct Netns {
    a: String,
    b: String,
    veth_a: String,
    veth_b: String,
    ip: [String; 4],
    dir: PathBuf,
}

impl Netns {
    fn create() -> Result<Netns, String> {
        let pid = std::process::id();
        let subnet = 64 + (pid % 128);
        let n = Netns {
            a: format!("sibcc{pid}a"),
            b: format!("sibcc{pid}b"),
            veth_a: format!("scc{pid}a"),
            veth_b: format!("scc{pid}b"),
            ip: [1, 2, 3, 4].map(|h| format!("10.{subnet}.77.{h}")),
            dir: std::env::temp_dir().join(format!("softib-cc-netns-{pid}")),
        };
        let _ = std::fs::create_dir_all(&n.dir);
        sh(&["ip", "netns", "add", &n.a])?;
        sh(&["ip", "netns", "add", &n.b])?;
        sh(&[
            "ip", "link", "add", &n.veth_a, "netns", &n.a, "type", "veth", "peer", "name",
            &n.veth_b, "netns", &n.b,
        ])?;
        for (ns, dev, ips) in [
            (&n.a, &n.veth_a, [&n.ip[0], &n.ip[2]]),
            (&n.b, &n.veth_b, [&n.ip[1], &n.ip[3]]),
        ] {
            for ip in ips {
                sh(&[
                    "ip",
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{ip}/24"),
                    "dev",
                    dev,
                ])?;
            }
            sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        // The bottleneck: tbf on the sender's side. A burst below two frames makes tbf
        // segment every UDP GSO packet, so the marker after it sees single datagrams.
        sh(&[
            "ip",
            "netns",
            "exec",
            &n.a,
            "tc",
            "qdisc",
            "add",
            "dev",
            &n.veth_a,
            "root",
            "tbf",
            "rate",
            &format!("{BOTTLENECK_MBIT}mbit"),
            "burst",
            "2kb",
            "limit",
            "1mb",
        ])?;
        let pps = BOTTLENECK_MBIT * 1_000_000 / 8 / FRAME_BYTES * MARK_PERCENT / 100;
        let rules = format!(
            "table netdev softib_cc {{\n\
               chain ce_marker {{\n\
                 type filter hook ingress device \"{dev}\" priority 0; policy accept;\n\
                 udp dport 4791 ip ecn ect0 limit rate over {pps}/second burst {MARK_BURST} packets ip ecn set ce counter\n\
               }}\n\
             }}\n",
            dev = n.veth_b
        );
        let rules_file = n.dir.join("mark.nft");
        std::fs::write(&rules_file, rules).map_err(|e| format!("write the nftables rules: {e}"))?;
        sh(&[
            "ip",
            "netns",
            "exec",
            &n.b,
            "nft",
            "-f",
            rules_file.to_str().unwrap(),
        ])?;
        Ok(n)
    }

    /// Packets the marker has set CE on so far.
    fn ce_marked(&self) -> Result<u64, String> {
        let out = sh(&[
            "ip",
            "netns",
            "exec",
            &self.b,
            "nft",
            "list",
            "table",
            "netdev",
            "softib_cc",
        ])?;
        out.split("counter packets ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no counter in the marker's rules: {out}"))
    }

    /// The kernel's view of the path: CE marks and every place a datagram can be lost
    /// between the two engines. `nft reset counters` resets only named counter objects,
    /// not a rule's anonymous counter, so each phase takes the difference of two snapshots.
    fn path_counters(&self) -> Result<PathCounters, String> {
        let tbf = sh(&[
            "ip",
            "netns",
            "exec",
            &self.a,
            "tc",
            "-s",
            "qdisc",
            "show",
            "dev",
            &self.veth_a,
        ])?;
        let tbf_dropped = tbf
            .split("dropped ")
            .nth(1)
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no drop count in tc's statistics: {tbf}"))?;
        let veth_rx_dropped = sh(&[
            "ip",
            "netns",
            "exec",
            &self.b,
            "cat",
            &format!("/sys/class/net/{}/statistics/rx_dropped", self.veth_b),
        ])?
        .trim()
        .parse()
        .map_err(|e| format!("rx_dropped of {}: {e}", self.veth_b))?;
        Ok(PathCounters {
            ce_marked: self.ce_marked()?,
            tbf_dropped,
            veth_rx_dropped,
            udp_rcvbuf_errors: [udp_rcvbuf_errors(&self.a)?, udp_rcvbuf_errors(&self.b)?],
        })
    }

    /// `program args` inside namespace `ns`, at a raised scheduling priority: the test
    /// measures the network, and on a shared machine a flow whose process waits for a
    /// core leaves the bottleneck idle, in both runs alike.
    fn exec(&self, ns: &str, program: &Path, args: &[String]) -> Command {
        let mut c = Command::new("nice");
        c.args(["-n", NICE, "ip", "netns", "exec", ns])
            .arg(program)
            .args(args);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it, and with it the pair.
        let _ = sh(&["ip", "netns", "delete", &self.a]);
        let _ = sh(&["ip", "netns", "delete", &self.b]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Kernel counters of the path at one moment ([`Netns::path_counters`]).
#[derive(Clone, Copy, Default)]
struct PathCounters {
    /// Packets the marker set CE on.
    ce_marked: u64,
    /// Packets the bottleneck's queue (tbf, limit 1 MB) dropped.
    tbf_dropped: u64,
    /// Packets the receiver's veth end dropped (its backlog was full).
    veth_rx_dropped: u64,
    /// UDP datagrams dropped because a socket's receive buffer was full, in A and in B.
    udp_rcvbuf_errors: [u64; 2],
}

impl PathCounters {
    fn since(self, before: PathCounters) -> PathCounters {
        PathCounters {
            ce_marked: self.ce_marked - before.ce_marked,
            tbf_dropped: self.tbf_dropped - before.tbf_dropped,
            veth_rx_dropped: self.veth_rx_dropped - before.veth_rx_dropped,
            udp_rcvbuf_errors: [
                self.udp_rcvbuf_errors[0] - before.udp_rcvbuf_errors[0],
                self.udp_rcvbuf_errors[1] - before.udp_rcvbuf_errors[1],
            ],
        }
    }
}

/// `RcvbufErrors` of the UDP line of /proc/net/snmp in namespace `ns`.
fn udp_rcvbuf_errors(ns: &str) -> Result<u64, String> {
    let snmp = sh(&["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"])?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next(), udp.next());
    names
        .zip(values)
        .and_then(|(n, v)| {
            n.split_whitespace()
                .zip(v.split_whitespace())
                .find(|(name, _)| *name == "RcvbufErrors")
                .and_then(|(_, value)| value.parse().ok())
        })
        .ok_or_else(|| format!("no UDP RcvbufErrors in /proc/net/snmp of {ns}"))
}

/// What one run measured.
struct Phase {
    cc: Cc,
    goodput_mbit: f64,
    median_rtt_us: f64,
    p90_rtt_us: f64,
    probes: usize,
    /// The path's kernel counters over the phase (CE marks and losses).
    path: PathCounters,
    /// Sequence NAKs the receiver sent: each is a gap, a datagram lost or overtaken.
    seq_naks_sent: u64,
    /// Datagrams the sender's socket took and the receiver's socket delivered: equal
    /// counts with sequence NAKs mean the path reordered (veth's per-CPU backlogs do).
    datagrams: [u64; 2],
    ce_received: u64,
    cnps_sent: u64,
    cnps_received: u64,
    throttled_ns: u64,
    retransmitted: u64,
    ack_timeouts: u64,
    final_rate_mbps: Option<u64>,
    /// IBA CCA: the highest CCTI of the sender's QPs in its published counters.
    max_ccti: Option<u64>,
}

/// Which congestion control a phase runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cc {
    Off,
    Dcqcn,
    Iba,
}

impl Cc {
    fn tag(self) -> &'static str {
        match self {
            Cc::Off => "none",
            Cc::Dcqcn => "dcqcn",
            Cc::Iba => "iba",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CC {}: goodput {:.1} Mbit/s; probe RTT median {:.0} us, p90 {:.0} us ({} probes); CE marked {} / received {}; CNPs sent {} / received {}; sender throttled {:.2} s, retransmitted {} packets after {} ACK timeouts and {} sequence NAKs; datagrams sent {} / received {}; losses: bottleneck queue {}, receiver's veth {}, UDP receive buffers A {} B {}; last DCQCN rate {}; highest CCTI {}",
            self.cc.tag(),
            self.goodput_mbit,
            self.median_rtt_us,
            self.p90_rtt_us,
            self.probes,
            self.path.ce_marked,
            self.ce_received,
            self.cnps_sent,
            self.cnps_received,
            self.throttled_ns as f64 / 1e9,
            self.retransmitted,
            self.ack_timeouts,
            self.seq_naks_sent,
            self.datagrams[0],
            self.datagrams[1],
            self.path.tbf_dropped,
            self.path.veth_rx_dropped,
            self.path.udp_rcvbuf_errors[0],
            self.path.udp_rcvbuf_errors[1],
            self.final_rate_mbps
                .map_or("-".to_string(), |r| format!("{r} Mb/s")),
            self.max_ccti.map_or("-".to_string(), |c| c.to_string()),
        )
    }
}

/// Child processes, killed if a run ends early.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(mut c: Command, what: &str) -> Result<Child, String> {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {what}: {e}"))
}

fn run_phase(net: &Netns, cc: Cc) -> Result<Phase, String> {
    let path_before = net.path_counters()?;
    let softib = PathBuf::from(env!("CARGO_BIN_EXE_softib"));
    let me = std::env::current_exe().map_err(|e| format!("the test binary's path: {e}"))?;
    let tag = cc.tag();
    let mut cc_args: Vec<String> = vec!["--cc".into(), tag.into()];
    match cc {
        Cc::Off => {}
        Cc::Dcqcn => cc_args.extend(["--dcqcn".into(), DCQCN.into()]),
        Cc::Iba => {
            let conf = net.dir.join("cc-iba.conf");
            let cct: Vec<String> = (0..128).map(|i| format!("0:{i}")).collect();
            std::fs::write(&conf, format!("{IBA_CONF}cc_cct {}\n", cct.join(",")))
                .map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
            cc_args.extend([
                "--cc-config".into(),
                conf.display().to_string(),
                "--link-rate".into(),
                IBA_LINK_MBIT.to_string(),
            ]);
        }
    }
    let server_counters = net.dir.join(format!("server-{tag}.json"));
    let client_counters = net.dir.join(format!("client-{tag}.json"));
    let bw_port = "18615".to_string();
    let mut server_args = vec![
        "write-bw".to_string(),
        "--bind".into(),
        net.ip[1].clone(),
        "-p".into(),
        bw_port.clone(),
        "--counters".into(),
        server_counters.display().to_string(),
    ];
    server_args.extend(cc_args.iter().cloned());
    let mut procs = Procs(Vec::new());
    procs.0.push(spawn(
        net.exec(&net.b, &softib, &server_args),
        "the write-bw server",
    )?);
    std::thread::sleep(Duration::from_millis(500));
    let mut client_args = vec![
        "write-bw".to_string(),
        net.ip[1].clone(),
        "--bind".into(),
        net.ip[0].clone(),
        "-p".into(),
        bw_port,
        "-D".into(),
        FLOW_SECONDS.to_string(),
        "-t".into(),
        "64".into(),
        "-Q".into(),
        "8".into(),
        "-u".into(),
        QP_TIMEOUT.to_string(),
        "--counters".into(),
        client_counters.display().to_string(),
    ];
    client_args.extend(cc_args.iter().cloned());
    procs.0.push(spawn(
        net.exec(&net.a, &softib, &client_args),
        "the write-bw client",
    )?);

    // Probes start once the flow is moving (the client publishes counters every second).
    let started = Instant::now();
    loop {
        let sent = read_json(&client_counters)
            .and_then(|j| j["counters"]["device"]["bytes_sent"].as_u64())
            .unwrap_or(0);
        if sent > 1 << 20 {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            return Err(format!(
                "CC {tag}: the write-bw flow did not start within 20 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The sender's highest CCTI, from the counters it publishes every second, until the
    // flow ends.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (stop, path) = (stop.clone(), client_counters.clone());
        std::thread::spawn(move || {
            let mut max: Option<u64> = None;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(j) = read_json(&path) {
                    if let Some(q) = j["counters"]["qps"].as_object() {
                        for c in q.values().filter_map(|m| m["cc_ccti"].as_u64()) {
                            max = Some(max.map_or(c, |m| m.max(c)));
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            max
        })
    };
    // Let the queue (or the congestion control) settle for a second before sampling.
    std::thread::sleep(Duration::from_secs(1));
    let probe_port = "18616";
    let mut ps = net.exec(&net.b, &me, &[]);
    ps.env("SOFTIB_CC_PROBE", "server")
        .env("SOFTIB_CC_PROBE_BIND", &net.ip[3])
        .env("SOFTIB_CC_PROBE_PORT", probe_port);
    procs.0.push(spawn(ps, "the probe server")?);
    std::thread::sleep(Duration::from_millis(300));
    let pclient = net
        .exec(&net.a, &me, &[])
        .env("SOFTIB_CC_PROBE", "client")
        .env("SOFTIB_CC_PROBE_BIND", &net.ip[2])
        .env("SOFTIB_CC_PROBE_PEER", &net.ip[3])
        .env("SOFTIB_CC_PROBE_PORT", probe_port)
        .output()
        .map_err(|e| format!("cannot run the probe client: {e}"))?;
    let pserver = wait_output(&mut procs.0[2], Duration::from_secs(15));
    let probe_out = String::from_utf8_lossy(&pclient.stdout).into_owned();
    let mut rtts: Vec<f64> = probe_out
        .lines()
        .filter_map(|l| l.strip_prefix("rtt_us "))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    if !pclient.status.success() || rtts.len() < 20 {
        return Err(format!(
            "CC {tag}: the probes failed ({} samples): {}\nprobe server: {}",
            rtts.len(),
            String::from_utf8_lossy(&pclient.stderr),
            pserver.1
        ));
    }
    rtts.sort_by(|a, b| a.total_cmp(b));

    let client_out = wait_output(&mut procs.0[1], Duration::from_secs(FLOW_SECONDS + 30));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let max_ccti = sampler.join().unwrap_or(None);
    let server_out = wait_output(&mut procs.0[0], Duration::from_secs(30));
    if !client_out.0 {
        return Err(format!(
            "CC {tag}: write-bw client failed:\n{}",
            client_out.1
        ));
    }
    if !server_out.0 {
        return Err(format!(
            "CC {tag}: write-bw server failed:\n{}",
            server_out.1
        ));
    }
    let mbytes = bw_average(&client_out.1)
        .ok_or_else(|| format!("CC {tag}: no bandwidth line in:\n{}", client_out.1))?;
    // perftest's MB is 2^20 bytes.
    let goodput_mbit = mbytes * 1_048_576.0 * 8.0 / 1e6;
    let c = read_json(&client_counters).ok_or_else(|| format!("CC {tag}: no client counters"))?;
    let s = read_json(&server_counters).ok_or_else(|| format!("CC {tag}: no server counters"))?;
    let dev = |j: &serde_json::Value, k: &str| j["counters"]["device"][k].as_u64().unwrap_or(0);
    let path = net.path_counters()?.since(path_before);
    let final_rate_mbps = c["counters"]["qps"]
        .as_object()
        .and_then(|q| q.values().find_map(|m| m["cc_rate_mbps"].as_u64()));
    Ok(Phase {
        cc,
        goodput_mbit,
        median_rtt_us: rtts[rtts.len() / 2],
        p90_rtt_us: rtts[rtts.len() * 9 / 10],
        probes: rtts.len(),
        path,
        seq_naks_sent: dev(&s, "seq_naks_sent"),
        datagrams: [
            c["counters"]["driver"]["tx_datagrams"]
                .as_u64()
                .unwrap_or(0),
            s["counters"]["driver"]["rx_datagrams"]
                .as_u64()
                .unwrap_or(0),
        ],
        ce_received: s["counters"]["driver"]["rx_ecn_ce"].as_u64().unwrap_or(0),
        cnps_sent: dev(&s, "cnps_sent"),
        cnps_received: dev(&c, "cnps_received"),
        throttled_ns: dev(&c, "throttled_ns"),
        retransmitted: dev(&c, "retransmitted_packets"),
        ack_timeouts: dev(&c, "local_ack_timeouts"),
        final_rate_mbps,
        max_ccti,
    })
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Waits for a tool to end (killing it after `limit`); returns (success, stdout + stderr).
fn wait_output(child: &mut Child, limit: Duration) -> (bool, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut text = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut text);
    }
    if let Some(e) = child.stderr.take() {
        for l in BufReader::new(e).lines().map_while(Result::ok) {
            text.push_str(&l);
            text.push('\n');
        }
    }
    (status.is_some_and(|s| s.success()), text)
}

/// "BW average[MB/sec]" of perftest's report line (MB = 2^20 bytes).
fn bw_average(out: &str) -> Option<f64> {
    let mut lines = out.lines();
    lines.find(|l| l.contains("BW average"))?;
    let fields: Vec<&str> = lines.next()?.split_whitespace().collect();
    fields.get(3)?.parse().ok()
}

/// The probe processes (run by this binary inside a namespace): an RC QP, 64-byte SENDs
/// echoed by the server, one per PROBE_INTERVAL for PROBE_TIME; the client prints each
/// round trip as `rtt_us N`.
fn probe_child(role: &str) {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let bind: std::net::IpAddr = var("SOFTIB_CC_PROBE_BIND").parse().expect("bind address");
    let port: u16 = var("SOFTIB_CC_PROBE_PORT").parse().expect("port");
    let ctx = Context::open(
        NetConfig::new(std::net::SocketAddr::new(bind, 4791)),
        WaitMode::default(),
    )
    .expect("open the probe device");
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(64).expect("CQ");
    let mr = ctx
        .reg_mr(pd, 4096, AccessFlags::LOCAL_WRITE)
        .expect("memory");
    let qpn = ctx
        .create_qp(
            pd,
            QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    ..QpCap::default()
                },
                sq_sig_all: true,
            },
        )
        .expect("QP");
    let peer = (role == "client").then(|| var("SOFTIB_CC_PROBE_PEER"));
    ctx.handshake(
        qpn,
        QpType::Rc,
        &[mr],
        peer.as_deref(),
        port,
        Duration::from_secs(20),
        &ConnectOptions {
            mtu: softib_transport::Mtu::M1024,
            timeout: QP_TIMEOUT,
            ..ConnectOptions::default()
        },
    )
    .expect("connect the probe QP");
    let sge = |off: u64| Sge {
        addr: mr.addr + off,
        length: 64,
        lkey: mr.keys.lkey,
    };
    let recv = RecvWr {
        wr_id: 2,
        sg_list: vec![sge(2048)],
    };
    // The client's last message carries an immediate: the server's signal to stop.
    let send = |last: bool| SendWr {
        wr_id: 1,
        opcode: if last {
            WrOpcode::SendWithImm
        } else {
            WrOpcode::Send
        },
        sg_list: vec![sge(0)],
        flags: SendFlags::SIGNALED,
        imm_data: last.then_some(1),
        ..SendWr::default()
    };
    let mut wcs = [blank_wc(); 4];
    // Waits until a receive completed (true) or the stop message (false); send
    // completions are consumed on the way.
    let wait_recv = |wcs: &mut [WorkCompletion]| -> Option<bool> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let n = ctx.wait_cq(cq, wcs, left);
            for wc in &wcs[..n] {
                assert_eq!(wc.status, WcStatus::Success, "probe completion {wc:?}");
                if wc.wr_id == 2 {
                    return Some(wc.imm_data.is_none());
                }
            }
        }
    };
    ctx.post_recv(qpn, std::slice::from_ref(&recv))
        .expect("post receive");
    if role == "server" {
        while wait_recv(&mut wcs) == Some(true) {
            ctx.post_recv(qpn, std::slice::from_ref(&recv))
                .expect("post receive");
            ctx.post_send(qpn, &[send(false)]).expect("echo");
        }
        return;
    }
    let end = Instant::now() + PROBE_TIME;
    while Instant::now() < end {
        let t0 = Instant::now();
        ctx.post_send(qpn, &[send(false)]).expect("probe");
        if wait_recv(&mut wcs) != Some(true) {
            eprintln!("a probe got no answer within 10 s");
            std::process::exit(1);
        }
        let rtt = t0.elapsed();
        println!("rtt_us {}", rtt.as_secs_f64() * 1e6);
        ctx.post_recv(qpn, std::slice::from_ref(&recv))
            .expect("post receive");
        std::thread::sleep(PROBE_INTERVAL.saturating_sub(rtt));
    }
    ctx.post_send(qpn, &[send(true)]).expect("stop message");
    // Let the stop message be acknowledged before the device closes.
    let _ = ctx.wait_cq(cq, &mut wcs, Duration::from_secs(2));
}

fn blank_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: softib_transport::WcOpcode::Send,
        byte_len: 0,
        imm_data: None,
        invalidated_rkey: None,
        qp_num: 0,
        src_qp: 0,
        slid: 0,
        sl: 0,
        wc_flags: Default::default(),
        vendor_err: 0,
    }
}
