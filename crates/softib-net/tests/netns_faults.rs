//! RC traffic across a real Linux network path with faults: two network namespaces joined by
//! a veth pair that this test creates (and deletes), nftables `netdev` ingress rules on both
//! ends that drop 3 % of the RoCEv2 datagrams and overwrite a payload byte of 0.5 % (after
//! zeroing the UDP checksum, so the kernel lets the damage through to softib's ICRC check,
//! as it does for rxe's checksum-less packets), and softib's own injector adding 1 %
//! duplication and 20 % reordering on the send path. RDMA WRITE, READ, SEND and
//! FETCH_AND_ADD complete with memory byte-exact, and the counters show the recovery.
//!
//! Needs root (namespaces, veth, nftables); fails with the reason otherwise. The volume is
//! `SOFTIB_NETNS_MIB` MiB written and read back (default 32; a full acceptance run uses
//! 1024). The two devices run as child processes of this test binary inside the namespaces
//! (`--ignored --exact netns_server|netns_client`).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{pattern, side, Side};
use softib_net::context::ConnectOptions;
use softib_net::counters::CounterSnapshot;
use softib_transport::{QpType, RecvWr, SendFlags, SendWr, Sge, WrOpcode};

const ROLE: &str = "SOFTIB_NETNS_ROLE";
const MIB: usize = 1 << 20;
/// Region size on both sides: each round writes and reads back this much.
const ROUND: usize = 16 * MIB;
const SENDS_PER_ROUND: usize = 32;
const SEND_LEN: usize = 16 * 1024;
const READ_LEN: usize = MIB;
const ADDS_PER_ROUND: u64 = 32;
const OOB_PORT: u16 = 18515;
const INJECT: &str = "dup=0.01,reorder=0.2";

fn mib_total() -> usize {
    std::env::var("SOFTIB_NETNS_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

fn rounds() -> usize {
    mib_total().div_ceil(ROUND / MIB)
}

fn sge(s: &Side, offset: u64, len: u32) -> Vec<Sge> {
    vec![Sge {
        addr: s.mr.addr + offset,
        length: len,
        lkey: s.mr.keys.lkey,
    }]
}

fn options() -> ConnectOptions {
    // 16 READs/atomics outstanding: replayed responses do not use up max_dest_rd_atomic.
    ConnectOptions {
        timeout: 14,
        max_rd_atomic: 16,
        ..Default::default()
    }
}

fn open_side(bind: &str, seed: u64) -> Side {
    side(bind, QpType::Rc, 2 * ROUND + 2 * MIB, |c| {
        let spec = format!("{INJECT},seed={seed}");
        c.inject = Some(spec.parse().unwrap());
    })
}

fn report(s: &Side) {
    let snap = s.ctx.counter_snapshot();
    println!("COUNTERS {}", serde_json::to_string(&snap).unwrap());
}

/// Child: the responder. Exposes its memory, checks every SEND, answers "ok" or the fault.
#[test]
#[ignore = "run inside a namespace by rc_through_kernel_loss_and_corruption_in_namespaces"]
fn netns_server() {
    let bind = std::env::var(ROLE).expect("run by the namespace test");
    let s = open_side(&bind, 2);
    let mut stream = {
        let l = std::net::TcpListener::bind(("0.0.0.0", OOB_PORT)).unwrap();
        softib_net::oob::stream::OobStream::accept(&l, Duration::from_secs(60)).unwrap()
    };
    let peer = stream.exchange_endpoint(&s.endpoint()).unwrap();
    s.ctx
        .connect(s.qpn, QpType::Rc, s.psn, &peer, &options())
        .unwrap();
    let total = rounds() * SENDS_PER_ROUND;
    let slots = 64usize;
    let base = 2 * ROUND as u64;
    let post = |slot: usize| {
        let wr = RecvWr {
            wr_id: slot as u64,
            sg_list: sge(&s, base + (slot * SEND_LEN) as u64, SEND_LEN as u32),
        };
        s.ctx.post_recv(s.qpn, &[wr]).unwrap();
    };
    (0..slots).for_each(post);
    let mut verdict = String::from("ok");
    let mut got = 0;
    while got < total {
        for wc in s.completions(1, 300) {
            let slot = wc.wr_id as usize;
            let bytes = s.read(base as usize + slot * SEND_LEN, SEND_LEN);
            if wc.byte_len as usize != SEND_LEN || bytes != pattern(1000 + got as u64, SEND_LEN) {
                verdict = format!("SEND {got} arrived wrong ({} bytes)", wc.byte_len);
            }
            got += 1;
            post(slot);
        }
    }
    let mut msg = [0u8; 64];
    msg[..verdict.len().min(64)].copy_from_slice(&verdict.as_bytes()[..verdict.len().min(64)]);
    stream.write_msg("verdict", &msg).unwrap();
    let mut done = [0u8; 5];
    stream.read_msg("done", &mut done).unwrap();
    report(&s);
}

/// Child: the requester. WRITE a round, READ it back and compare, SENDs, FETCH_AND_ADDs.
#[test]
#[ignore = "run inside a namespace by rc_through_kernel_loss_and_corruption_in_namespaces"]
fn netns_client() {
    let role = std::env::var(ROLE).expect("run by the namespace test");
    let (bind, server) = role.split_once(',').unwrap();
    let c = open_side(bind, 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut stream = loop {
        match softib_net::oob::stream::OobStream::connect(server, OOB_PORT, Duration::from_secs(5))
        {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{e}"),
        }
    };
    let peer = stream.exchange_endpoint(&c.endpoint()).unwrap();
    c.ctx
        .connect(c.qpn, QpType::Rc, c.psn, &peer, &options())
        .unwrap();
    let remote = peer.regions[0];
    // Past the server's 64 receive slots of 16 KiB (the MiB after the two rounds).
    let counter_addr = remote.addr + 2 * ROUND as u64 + MIB as u64;
    let mut sends = 0u64;
    for round in 0..rounds() {
        let data = pattern(round as u64, ROUND);
        c.ctx.write_mr(&c.mr, 0, &data).unwrap();
        let writes: Vec<SendWr> = (0..ROUND / MIB)
            .map(|i| SendWr {
                wr_id: i as u64,
                opcode: WrOpcode::RdmaWrite,
                flags: SendFlags::SIGNALED,
                sg_list: sge(&c, (i * MIB) as u64, MIB as u32),
                remote_addr: remote.addr + (i * MIB) as u64,
                rkey: remote.rkey,
                ..Default::default()
            })
            .collect();
        c.ctx.post_send(c.qpn, &writes).unwrap();
        c.completions(writes.len(), 300);
        // 1 MiB READs (256 packets at MTU 4096): each response placed in order is forward
        // progress, so loss spread over a long READ does not exhaust retry_cnt.
        let reads: Vec<SendWr> = (0..ROUND / READ_LEN)
            .map(|i| SendWr {
                wr_id: i as u64,
                opcode: WrOpcode::RdmaRead,
                flags: SendFlags::SIGNALED,
                sg_list: sge(&c, (ROUND + i * READ_LEN) as u64, READ_LEN as u32),
                remote_addr: remote.addr + (i * READ_LEN) as u64,
                rkey: remote.rkey,
                ..Default::default()
            })
            .collect();
        for chunk in reads.chunks(64) {
            c.ctx.post_send(c.qpn, chunk).unwrap();
            c.completions(chunk.len(), 300);
        }
        assert!(
            c.read(ROUND, ROUND) == data,
            "round {round}: READ back differs from what was written"
        );
        for _ in 0..SENDS_PER_ROUND {
            c.ctx
                .write_mr(&c.mr, 0, &pattern(1000 + sends, SEND_LEN))
                .unwrap();
            let wr = SendWr {
                wr_id: sends,
                opcode: WrOpcode::Send,
                flags: SendFlags::SIGNALED,
                sg_list: sge(&c, 0, SEND_LEN as u32),
                ..Default::default()
            };
            c.ctx.post_send(c.qpn, &[wr]).unwrap();
            c.completions(1, 300);
            sends += 1;
        }
        let adds: Vec<SendWr> = (0..ADDS_PER_ROUND)
            .map(|i| SendWr {
                wr_id: i,
                opcode: WrOpcode::AtomicFetchAndAdd,
                flags: SendFlags::SIGNALED,
                sg_list: sge(&c, (2 * ROUND) as u64 + i * 8, 8),
                remote_addr: counter_addr,
                rkey: remote.rkey,
                compare_add: 1,
                ..Default::default()
            })
            .collect();
        c.ctx.post_send(c.qpn, &adds).unwrap();
        c.completions(adds.len(), 300);
    }
    // The counter word, read back: every FETCH_AND_ADD executed exactly once.
    let read = SendWr {
        wr_id: 9,
        opcode: WrOpcode::RdmaRead,
        flags: SendFlags::SIGNALED,
        sg_list: sge(&c, 0, 8),
        remote_addr: counter_addr,
        rkey: remote.rkey,
        ..Default::default()
    };
    c.ctx.post_send(c.qpn, &[read]).unwrap();
    c.completions(1, 300);
    assert_eq!(
        u64::from_le_bytes(c.read(0, 8).try_into().unwrap()),
        rounds() as u64 * ADDS_PER_ROUND
    );
    let mut verdict = [0u8; 64];
    stream.read_msg("verdict", &mut verdict).unwrap();
    stream.write_msg("done", b"done\0").unwrap();
    assert_eq!(
        String::from_utf8_lossy(&verdict).trim_end_matches('\0'),
        "ok"
    );
    report(&c);
}

/// Namespaces and veth created for one run; deleted on drop, even when the test fails.
struct Topology {
    ns: [String; 2],
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn run(cmd: &[&str]) {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", cmd[0]));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn nft_rules(ns: &str, dev: &str) {
    let rules = format!(
        "table netdev softib_faults {{
  chain ingress {{
    type filter hook ingress device \"{dev}\" priority 0; policy accept;
    udp dport 4791 numgen random mod 100 < 3 counter drop
    udp dport 4791 udp checksum set 0
    udp dport 4791 numgen random mod 1000 < 5 counter @th,160,8 set 0x5a
  }}
}}
"
    );
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("ip netns exec nft");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "nft rules in {ns} failed");
}

fn spawn(ns: &str, test: &str, role: &str) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            test,
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ROLE, role)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child (killing it after `limit`) and returns its counters.
fn finish(mut child: Child, who: &str, limit: Duration) -> CounterSnapshot {
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{who} did not finish within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let lines = reader.join().unwrap();
    assert!(status.success(), "{who} failed:\n{}", lines.join("\n"));
    let line = lines
        .iter()
        .find_map(|l| l.split_once("COUNTERS ").map(|(_, j)| j.to_string()));
    serde_json::from_str(&line.unwrap_or_else(|| panic!("{who} printed no counters"))).unwrap()
}

#[test]
fn rc_through_kernel_loss_and_corruption_in_namespaces() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
        });
    assert_eq!(uid.as_deref(), Some("0"), "this test needs root to create network namespaces, a veth pair and nftables rules (CI runs as root)");
    for tool in ["ip", "nft"] {
        assert!(
            Command::new(tool).arg("-V").output().is_ok()
                || Command::new(tool).arg("--version").output().is_ok(),
            "`{tool}` is missing: install iproute2 and nftables (.ci/run does)"
        );
    }
    let id = std::process::id();
    let topo = Topology {
        ns: [format!("softib-{id}-a"), format!("softib-{id}-b")],
    };
    let (va, vb) = (
        format!("sba{}", id % 100_000),
        format!("sbb{}", id % 100_000),
    );
    let net = format!("10.{}.{}", 200 + (id % 50), (id / 50) % 250);
    let (ip_a, ip_b) = (format!("{net}.1"), format!("{net}.2"));
    for ns in &topo.ns {
        run(&["ip", "netns", "add", ns]);
        run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    run(&[
        "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
    ]);
    run(&["ip", "link", "set", &va, "netns", &topo.ns[0]]);
    run(&["ip", "link", "set", &vb, "netns", &topo.ns[1]]);
    run(&[
        "ip",
        "-n",
        &topo.ns[0],
        "addr",
        "add",
        &format!("{ip_a}/24"),
        "dev",
        &va,
    ]);
    run(&[
        "ip",
        "-n",
        &topo.ns[1],
        "addr",
        "add",
        &format!("{ip_b}/24"),
        "dev",
        &vb,
    ]);
    // MTU 4200 gives IB MTU 4096, as the rxe oracle runs (`run.sh --mtu 4200`).
    run(&["ip", "-n", &topo.ns[0], "link", "set", &va, "mtu", "4200"]);
    run(&["ip", "-n", &topo.ns[1], "link", "set", &vb, "mtu", "4200"]);
    run(&["ip", "-n", &topo.ns[0], "link", "set", &va, "up"]);
    run(&["ip", "-n", &topo.ns[1], "link", "set", &vb, "up"]);
    nft_rules(&topo.ns[0], &va);
    nft_rules(&topo.ns[1], &vb);

    let server = spawn(&topo.ns[1], "netns_server", &format!("{ip_b}:4791"));
    let client = spawn(&topo.ns[0], "netns_client", &format!("{ip_a}:4791,{ip_b}"));
    let limit = Duration::from_secs(120 + 10 * mib_total() as u64);
    let c = finish(client, "client", limit);
    let s = finish(server, "server", Duration::from_secs(60));

    let get = |snap: &CounterSnapshot, map: &str, k: &str| {
        let m = if map == "device" {
            &snap.device
        } else {
            &snap.driver
        };
        *m.get(k).unwrap_or_else(|| panic!("no counter {map}.{k}"))
    };
    let report = format!("client {c:?}\nserver {s:?}");
    let icrc = get(&c, "device", "icrc_drops") + get(&s, "device", "icrc_drops");
    assert!(
        icrc > 0,
        "kernel-mangled datagrams were caught by the ICRC: {report}"
    );
    assert!(get(&c, "device", "retransmitted_packets") > 0, "{report}");
    assert!(
        get(&s, "device", "seq_naks_sent") + get(&c, "device", "seq_naks_sent") > 0,
        "{report}"
    );
    assert!(get(&s, "device", "duplicates_received") > 0, "{report}");
    assert!(
        get(&c, "driver", "inject_duplicated") > 0 && get(&c, "driver", "inject_reordered") > 0,
        "{report}"
    );
    println!(
        "{} MiB written and read back; ICRC drops {icrc}, retransmitted {}, sequence NAKs {}",
        mib_total(),
        get(&c, "device", "retransmitted_packets"),
        get(&s, "device", "seq_naks_sent") + get(&c, "device", "seq_naks_sent")
    );
}
