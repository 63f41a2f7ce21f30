//! Stock infiniband-diags against `softib sim mgmt-fat-tree --serve` (issue 17): the tools
//! run under `ibsim-run` (Debian ibsim-utils + libumad2sim0) and what they print is checked
//! against the scenario itself, run in this process: node and port counts, GUIDs, LIDs,
//! widths and speeds, forwarding tables, counters (PortXmitWait equal to softib's own).
//! Then the MAD log of the served run is replayed and must match bit for bit.
//!
//! Needs the Debian packages ibsim-utils and infiniband-diags; fails naming them when
//! missing. Each test serves on its own abstract socket names (IBSIM_SOCKNAME), so tests
//! run in parallel.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use common::ibsim::{self, field, run_tool, which, ServeOpts, Served, TempDir};
use common::softib;
use softib_fabric::agents::{node_guid, port_guid, Subnet};
use softib_fabric::fabric::Fabric;
use softib_fabric::link::LinkRate;
use softib_fabric::routing::{compute_lfts_with, Addressing, LidOwner, RoutingEngine};
use softib_fabric::topology::{NodeKind, PortAddr, Topology};
use softib_sim::report::run::{run_and_keep, RunOptions};
use softib_sim::scenario::Scenario;
use softib_sim::serve::mad_log;
use std::collections::BTreeSet;

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scenarios/mgmt-fat-tree.toml"
);

fn require_tools() {
    ibsim::require(&[
        ("ibsim-run", "ibsim-utils"),
        ("ibnetdiscover", "infiniband-diags"),
        ("iblinkinfo", "infiniband-diags"),
        ("perfquery", "infiniband-diags"),
        ("smpquery", "infiniband-diags"),
        ("ibroute", "infiniband-diags"),
        ("ibqueryerrors", "infiniband-diags"),
        ("ibccquery", "infiniband-diags"),
        ("ibccconfig", "infiniband-diags"),
        ("timeout", "coreutils"),
    ]);
}

/// The scenario as the server runs it, frozen at its end.
fn model() -> (Fabric, Subnet) {
    model_of(Path::new(SCENARIO))
}

/// Scenario file `path` as the server runs it, frozen at its end.
fn model_of(path: &Path) -> (Fabric, Subnet) {
    let s = Scenario::load(path).expect("scenario");
    let (_, fabric) =
        run_and_keep(&s, "served", &RunOptions::default(), None, &mut |_, _| {}).expect("run");
    let subnet = Subnet::snapshot(&fabric);
    (fabric, subnet)
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn serve() -> Served {
    serve_on(None)
}

/// Serves on abstract sockets of a unique name, or over UDP on 127.0.0.1 at `udp`.
fn serve_on(udp: Option<u16>) -> Served {
    serve_scenario(SCENARIO, udp)
}

/// Serves scenario file `scenario` as [`serve_on`] does.
fn serve_scenario(scenario: &str, udp: Option<u16>) -> Served {
    serve_with(scenario, udp, None)
}

/// Serves scenario file `scenario` with its MAD log, in a directory of its own, the
/// server's stderr into `stderr` (else inherited).
fn serve_with(scenario: &str, udp: Option<u16>, stderr: Option<&Path>) -> Served {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let sock = format!("softib-test-{}-{n}", std::process::id());
    let dir = std::env::temp_dir().join(&sock);
    let opts = ServeOpts {
        udp,
        stderr,
        mad_log: true,
        no_files: false,
    };
    ibsim::serve(Path::new(scenario), &sock, &dir, true, opts)
}

/// Runs `tool args` under ibsim-run against `s`, at most 30 s; returns (success, stdout).
fn tool(s: &Served, host: Option<&str>, args: &[&str]) -> (bool, String) {
    let o = run_tool(s, host, args);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

fn ok(s: &Served, args: &[&str]) -> String {
    let (good, out) = tool(s, None, args);
    assert!(good, "{args:?} failed:\n{out}");
    out
}

fn lid(sub: &Subnet, name: &str) -> u16 {
    let n = sub.find_node(name).unwrap();
    sub.nodes[n].ports[1].lid.max(sub.nodes[n].ports[0].lid)
}

/// Garbage on the control and MAD sockets (wrong sizes, wrong magic, an unknown control
/// type, a MAD from a client that never connected): dropped, and the server serves on.
fn hostile_datagrams(s: &Served) {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let addr = |n: &str| SocketAddr::from_abstract_name(format!("{}:{n}\0", s.sock)).unwrap();
    let sock = UnixDatagram::unbound().unwrap();
    sock.send_to_addr(b"hello", &addr("ctl")).unwrap();
    sock.send_to_addr(&[0u8; 80], &addr("ctl")).unwrap();
    let mut ctl = [0u8; 80];
    ctl[0..4].copy_from_slice(&0xdead_beefu32.to_ne_bytes());
    ctl[4..8].copy_from_slice(&7u32.to_ne_bytes());
    ctl[8..12].copy_from_slice(&99u32.to_ne_bytes());
    sock.send_to_addr(&ctl, &addr("ctl")).unwrap();
    sock.send_to_addr(&[0xffu8; 100], &addr("out0")).unwrap();
    sock.send_to_addr(&[0x01u8; 288], &addr("out3")).unwrap();
}

#[test]
fn ibnetdiscover_and_iblinkinfo_see_the_fat_tree() {
    require_tools();
    let (_, sub) = model();
    let s = serve();
    hostile_datagrams(&s);
    let out = ok(&s, &["ibnetdiscover"]);
    let switches = out.lines().filter(|l| l.starts_with("Switch\t")).count();
    let cas = out.lines().filter(|l| l.starts_with("Ca\t")).count();
    assert_eq!(switches, sub.topology.switches().count(), "{out}");
    assert_eq!(cas, sub.topology.hcas().count(), "{out}");
    for (i, n) in sub.nodes.iter().enumerate() {
        let guid = format!("{:016x}", node_guid(i));
        assert!(
            out.contains(&guid),
            "{} ({guid}) not discovered:\n{out}",
            n.name
        );
        let header = out
            .lines()
            .find(|l| {
                l.contains(&format!("\"{}\"", n.name))
                    && (l.starts_with("Switch") || l.starts_with("Ca"))
            })
            .unwrap_or_else(|| panic!("no node line for {}:\n{out}", n.name));
        match n.kind {
            NodeKind::Switch => {
                assert!(header.starts_with("Switch\t8 "), "{header}");
                assert!(
                    header.contains(&format!("lid {} ", sub.nodes[i].ports[0].lid)),
                    "{header}"
                );
            }
            NodeKind::Hca => assert!(header.starts_with("Ca\t1 "), "{header}"),
        }
    }
    // Every cable end, both ways, at the scenario's 4x EDR.
    let links = out.lines().filter(|l| l.starts_with('[')).count();
    assert_eq!(links, 2 * sub.topology.links.len(), "{out}");
    assert_eq!(out.matches("4xEDR").count(), links, "{out}");
    let h0 = port_guid(0, NodeKind::Hca, 1);
    assert!(out.contains(&format!("port {h0:016x}")), "{out}");

    let out = ok(&s, &["iblinkinfo"]);
    // Cabled ends are Active at 4X EDR; a switch's uncabled ports (the spines' 5-8) Down.
    let ends: Vec<&str> = out.lines().filter(|l| l.contains("==(")).collect();
    let up: Vec<&&str> = ends.iter().filter(|l| l.contains("LinkUp")).collect();
    assert_eq!(up.len(), 2 * sub.topology.links.len(), "{out}");
    for l in &up {
        assert!(
            l.contains("==( 4X      25.78125 Gbps Active/  LinkUp)==>"),
            "{l}"
        );
        assert!(!l.contains("Could be"), "{l}");
    }
    let uncabled: usize = sub
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Switch)
        .map(|n| n.ports.iter().skip(1).filter(|p| p.peer.is_none()).count())
        .sum();
    let down = ends.iter().filter(|l| l.contains("Down/ Polling")).count();
    assert_eq!(down, uncabled, "{out}");
    assert_eq!(ends.len(), up.len() + down, "{out}");
}

#[test]
fn perfquery_smpquery_ibroute_ibqueryerrors_match_the_model_and_replay() {
    require_tools();
    let (fabric, sub) = model();
    let tick = fabric.config().xmit_wait_tick_ps;
    let s = serve();

    // perfquery: the classic and the extended counters of ports that carried the incast.
    for (name, port) in [("h6", 1u8), ("h12", 1), ("leaf0", 1), ("leaf1", 5)] {
        let c = fabric.port_counters(name, port).unwrap();
        assert!(c.port_xmit_data > 0, "{name}:{port} carried nothing");
        let l = lid(&sub, name).to_string();
        let p = port.to_string();
        let out = ok(&s, &["perfquery", &l, &p]);
        assert_eq!(
            field(&out, "PortXmitWait"),
            c.port_xmit_wait(tick).to_string(),
            "{name}:{port}\n{out}"
        );
        assert_eq!(
            field(&out, "PortXmitData"),
            c.port_xmit_data.to_string(),
            "{out}"
        );
        assert_eq!(
            field(&out, "PortXmitPkts"),
            c.port_xmit_pkts.to_string(),
            "{out}"
        );
        let out = ok(&s, &["perfquery", "-x", &l, &p]);
        assert_eq!(
            field(&out, "PortXmitData"),
            c.port_xmit_data.to_string(),
            "{out}"
        );
        assert_eq!(
            field(&out, "PortRcvPkts"),
            c.port_rcv_pkts.to_string(),
            "{out}"
        );
    }
    assert!(fabric.port_counters("h6", 1).unwrap().port_xmit_wait(tick) > 0);

    // smpquery: NodeInfo of a switch, PortInfo of an HCA port, NodeDescription.
    let leaf2 = sub.find_node("leaf2").unwrap();
    let out = ok(
        &s,
        &["smpquery", "nodeinfo", &lid(&sub, "leaf2").to_string()],
    );
    assert_eq!(field(&out, "NodeType"), "Switch", "{out}");
    assert_eq!(field(&out, "NumPorts"), "8", "{out}");
    assert_eq!(
        field(&out, "Guid"),
        format!("0x{:016x}", node_guid(leaf2)),
        "{out}"
    );
    let h3 = lid(&sub, "h3");
    let out = ok(&s, &["smpquery", "portinfo", &h3.to_string(), "1"]);
    assert_eq!(field(&out, "Lid"), h3.to_string(), "{out}");
    assert_eq!(field(&out, "LinkWidthActive"), "4X", "{out}");
    assert_eq!(field(&out, "LinkState"), "Active", "{out}");
    assert_eq!(field(&out, "LinkSpeedExtActive"), "25.78125 Gbps", "{out}");
    let out = ok(
        &s,
        &["smpquery", "nodedesc", &lid(&sub, "spine1").to_string()],
    );
    assert_eq!(field(&out, "Node Description"), "spine1", "{out}");

    // ibroute: leaf0's table, entry by entry, is the model's.
    let leaf0 = sub.find_node("leaf0").unwrap();
    let out = ok(&s, &["ibroute", &lid(&sub, "leaf0").to_string()]);
    let mut seen = 0;
    for l in out.lines().filter(|l| l.starts_with("0x")) {
        let dlid = u16::from_str_radix(&l[2..6], 16).unwrap();
        let port: u8 = l[7..10].parse().unwrap();
        assert_eq!(port, sub.nodes[leaf0].lft[dlid as usize], "{l}");
        seen += 1;
    }
    assert_eq!(seen, sub.topology.nodes.len(), "{out}");

    // ibqueryerrors (without the SA's path records, which need an SM): every port with a
    // PortXmitWait in the model, with its value.
    // (It exits non-zero when it found errors, as here.)
    let (_, out) = tool(&s, None, &["ibqueryerrors", "--skip-sl"]);
    let mut waiting = 0;
    for (i, n) in sub.nodes.iter().enumerate() {
        for p in 1..n.ports.len() as u8 {
            let w = n.ports[p as usize].counters.port_xmit_wait(tick);
            let guid = port_guid(i, n.kind, p);
            let line = out
                .lines()
                .find(|l| l.contains(&format!("0x{guid:016x} port {p}:")));
            if w > 0 {
                waiting += 1;
                let line = line.unwrap_or_else(|| panic!("{}:{p} missing\n{out}", n.name));
                assert!(line.contains(&format!("[PortXmitWait == {w}]")), "{line}");
            } else if let Some(line) = line {
                assert!(!line.contains("PortXmitWait"), "{line}");
            }
        }
    }
    assert!(waiting >= 6, "{out}");

    // An unknown SIM_HOST is refused; the server keeps serving.
    let (good, _) = tool(&s, Some("no-such-node"), &["smpquery", "nodedesc", "1"]);
    assert!(!good);
    let (good, out) = tool(&s, Some("leaf3"), &["smpquery", "nodedesc", "1"]);
    assert!(good, "{out}");
    assert_eq!(field(&out, "Node Description"), "h0", "{out}");

    // An unsupported attribute is answered (status 0x0C), not left to time out.
    let started = std::time::Instant::now();
    let (good, _) = tool(
        &s,
        None,
        &[
            "smpquery",
            "-t",
            "20000",
            "mlnxextportinfo",
            &h3.to_string(),
            "1",
        ],
    );
    assert!(!good);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "waited for a timeout"
    );

    // The MAD log replays bit for bit.
    let log = s.log.clone();
    let exchanges = std::fs::read_to_string(&log).unwrap().lines().count() - 1;
    assert!(exchanges > 50, "only {exchanges} MADs logged");
    let o = softib()
        .args(["sim", SCENARIO, "--replay"])
        .arg(&log)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains(&format!("replayed {exchanges} MADs")),
        "{text}"
    );
    assert!(text.contains(&format!("{exchanges} identical")), "{text}");
    drop(s);
}

#[test]
fn perfquery_reset_clears_the_counters_and_the_log_still_replays() {
    require_tools();
    let (fabric, sub) = model();
    let s = serve();
    let h6 = lid(&sub, "h6").to_string();
    let leaf1 = lid(&sub, "leaf1").to_string();
    let before = fabric.port_counters("leaf1", 5).unwrap();
    assert!(before.port_xmit_data > 0, "leaf1:5 carried nothing");

    // `perfquery -R LID PORT`: a PortCounters Set with every CounterSelect bit (and the
    // extended Set with -x). Another port of the same switch keeps its counters.
    ok(&s, &["perfquery", "-R", &h6, "1"]);
    let out = ok(&s, &["perfquery", &h6, "1"]);
    for f in [
        "PortXmitData",
        "PortXmitPkts",
        "PortXmitWait",
        "PortRcvData",
    ] {
        assert_eq!(field(&out, f), "0", "{f} after -R\n{out}");
    }
    let out = ok(&s, &["perfquery", "-x", &h6, "1"]);
    assert_eq!(field(&out, "PortXmitData"), "0", "{out}");
    ok(&s, &["perfquery", "-x", "-R", &leaf1, "5"]);
    let out = ok(&s, &["perfquery", "-x", &leaf1, "5"]);
    assert_eq!(field(&out, "PortXmitData"), "0", "{out}");
    assert_eq!(field(&out, "PortXmitPkts"), "0", "{out}");
    let untouched = fabric.port_counters("leaf1", 1).unwrap();
    let out = ok(&s, &["perfquery", &leaf1, "1"]);
    assert_eq!(
        field(&out, "PortRcvData"),
        untouched.port_rcv_data.to_string(),
        "a Set on port 5 cleared port 1\n{out}"
    );

    // `perfquery -r` reads, then clears: it prints the counters as they were.
    let h12 = lid(&sub, "h12").to_string();
    let c = fabric.port_counters("h12", 1).unwrap();
    let out = ok(&s, &["perfquery", "-r", &h12, "1"]);
    assert_eq!(
        field(&out, "PortXmitData"),
        c.port_xmit_data.to_string(),
        "{out}"
    );
    let out = ok(&s, &["perfquery", &h12, "1"]);
    assert_eq!(field(&out, "PortXmitData"), "0", "{out}");

    // The Sets are in the MAD log and replay bit for bit from a fresh snapshot.
    let o = softib()
        .args(["sim", SCENARIO, "--replay"])
        .arg(&s.log)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("identical"), "{text}");
}

/// A topology as sets, independent of node order: (name, kind, ports, node GUID, first port
/// GUID) per node, and (end, end, rate) per cable with the ends ordered by name.
#[allow(clippy::type_complexity)]
fn fabric_as_sets(
    t: &Topology,
    default_rate: LinkRate,
) -> (
    BTreeSet<(String, bool, u8, u64, u64)>,
    BTreeSet<((String, u8), (String, u8), String)>,
) {
    let nodes = t
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (guid, port1) = match &n.guids {
                Some(g) => (g.node, g.port(n.kind, 1)),
                None => (node_guid(i), port_guid(i, n.kind, 1)),
            };
            (
                n.name.clone(),
                n.kind == NodeKind::Switch,
                n.ports,
                guid,
                port1,
            )
        })
        .collect();
    let links = t
        .links
        .iter()
        .map(|l| {
            let a = (t.nodes[l.a.node].name.clone(), l.a.port);
            let b = (t.nodes[l.b.node].name.clone(), l.b.port);
            let (a, b) = if a <= b { (a, b) } else { (b, a) };
            (a, b, format!("{:?}", l.rate.unwrap_or(default_rate)))
        })
        .collect();
    (nodes, links)
}

#[test]
fn an_ibnetdiscover_dump_read_back_is_the_same_fabric() {
    require_tools();
    let s = serve();
    let dump = ok(&s, &["ibnetdiscover"]);
    drop(s);
    let dir = std::env::temp_dir().join(format!("softib-ibnet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());
    std::fs::write(dir.join("fabric.txt"), &dump).unwrap();
    // The bundled scenario with its generated fat tree replaced by the dump.
    let original_text = std::fs::read_to_string(SCENARIO).unwrap();
    let imported_text = original_text
        .replace("kind = \"fat-tree-2\"", "ibnetdiscover = \"fabric.txt\"")
        .replace("switch_ports = 8\n", "")
        .replace("hosts = 16\n", "");
    assert_ne!(imported_text, original_text);
    let imported_path = dir.join("imported.toml");
    std::fs::write(&imported_path, &imported_text).unwrap();

    let original = Scenario::load(Path::new(SCENARIO)).unwrap();
    let imported = Scenario::load(&imported_path).expect("the dump reads back");
    let rate = original.config().unwrap().link_rate;
    let (a, b) = (
        fabric_as_sets(&original.topology().unwrap(), rate),
        fabric_as_sets(&imported.topology().unwrap(), rate),
    );
    assert_eq!(a.0, b.0, "nodes (names, kinds, ports, GUIDs)");
    assert_eq!(a.1, b.1, "cables and their rates");
    assert_eq!(a.1.len(), 32);

    // Served, the imported fabric answers with the same GUIDs: its own dump, from the same
    // host, reads back to the same sets again.
    let s = serve_scenario(imported_path.to_str().unwrap(), None);
    let (good, again) = tool(&s, Some("h0"), &["ibnetdiscover"]);
    assert!(good, "{again}");
    drop(s);
    std::fs::write(dir.join("again.txt"), &again).unwrap();
    let again_path = dir.join("again.toml");
    std::fs::write(
        &again_path,
        imported_text.replace("fabric.txt", "again.txt"),
    )
    .unwrap();
    let twice = Scenario::load(&again_path).unwrap();
    let c = fabric_as_sets(&twice.topology().unwrap(), rate);
    assert_eq!(a, c);
    let strip = |d: &str| -> Vec<String> {
        d.lines()
            .filter(|l| !l.starts_with("# Topology file: generated on"))
            .map(|l| {
                // LIDs are assigned by softib's routing in node order, which the file's
                // order changes; everything else is the same text.
                l.split_whitespace()
                    .scan(false, |after_lid, w| {
                        let out = if *after_lid { "LID" } else { w };
                        *after_lid = w == "lid";
                        Some(out.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    assert_eq!(strip(&dump), strip(&again), "{dump}\n----\n{again}");

    // A damaged dump is refused with the scenario key, the file and its line.
    let broken = dump.replacen("Switch\t8 ", "Switch\tmany ", 1);
    std::fs::write(dir.join("fabric.txt"), broken).unwrap();
    let e = Scenario::load(&imported_path).unwrap_err().to_string();
    assert!(
        e.contains("topology.ibnetdiscover")
            && e.contains("fabric.txt line ")
            && e.contains("`many`"),
        "{e}"
    );
}

#[test]
fn ibccquery_reads_the_congestion_control_the_fabric_runs_with() {
    require_tools();
    // cc-victim (OpenSM CC keys: switch threshold 14, CA timer 60 / increase 1 / trigger 2
    // on SL 0, a 128-entry CCT), shortened to 1 ms.
    let dir = std::env::temp_dir().join(format!("softib-cc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/cc-victim.toml"
    );
    let text = std::fs::read_to_string(source).unwrap();
    assert!(text.contains("duration_us = 6000\n"));
    let path = dir.join("cc-victim.toml");
    std::fs::write(
        &path,
        text.replace("duration_us = 6000\n", "duration_us = 1000\n"),
    )
    .unwrap();
    let (fabric, sub) = model_of(&path);
    let s = serve_scenario(path.to_str().unwrap(), None);
    let lid_of = |name: &str| lid(&sub, name).to_string();
    let h0 = lid_of("h0");
    let sw1 = lid_of("sw1");

    let out = ok(&s, &["ibccquery", "CongestionInfo", &h0]);
    assert_eq!(field(&out, "ControlTableCap"), "2", "{out}");
    let out = ok(&s, &["ibccquery", "CongestionInfo", &sw1]);
    assert_eq!(field(&out, "ControlTableCap"), "0", "{out}");

    let out = ok(&s, &["ibccquery", "SwitchCongestionSetting", &sw1]);
    assert_eq!(field(&out, "Control_Map"), "0x0000001f", "{out}");
    assert_eq!(field(&out, "Threshold"), "0x0e", "{out}");
    assert_eq!(field(&out, "Packet_Size"), "8", "{out}");
    assert_eq!(field(&out, "Marking_Rate"), "0", "{out}");

    let out = ok(&s, &["ibccquery", "CACongestionSetting", &h0]);
    assert_eq!(field(&out, "Port_Control"), "0x0000", "per-QP: {out}");
    assert_eq!(field(&out, "Control_Map"), "0x0001", "{out}");
    // SL 0's entry comes first.
    assert_eq!(field(&out, "CCTI_Timer"), "60", "{out}");
    assert_eq!(field(&out, "CCTI_Increase"), "1", "{out}");
    assert_eq!(field(&out, "Trigger_Threshold"), "2", "{out}");

    // The table, entry by entry, as the scenario's cc_cct gives it.
    let cct = sub.cc.as_ref().unwrap().ca.config.cct.clone();
    let out = ok(&s, &["ibccquery", "CongestionControlTable", &h0]);
    assert_eq!(field(&out, "CCTI_Limit"), "127", "{out}");
    let shifts: Vec<&str> = out.lines().filter(|l| l.starts_with("CCT_Shift")).collect();
    let mults: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("CCT_Multiplier"))
        .collect();
    assert_eq!(mults.len(), cct.entries().len(), "{out}");
    for (i, e) in cct.entries().iter().enumerate() {
        assert!(
            shifts[i].ends_with(&format!(".{}", e.shift)),
            "entry {i}: {}",
            shifts[i]
        );
        assert!(
            mults[i].ends_with(&format!(".{}", e.multiplier)),
            "entry {i}: {}",
            mults[i]
        );
    }
    assert!(
        cct.entries().iter().any(|e| e.multiplier > 100),
        "a real table"
    );

    // The switch's log counts the packets its ports marked.
    let marked: u64 = (1..=8)
        .map(|p| fabric.port_counters("sw1", p).unwrap().fecn_marked)
        .sum();
    assert!(marked > 0, "sw1 marked nothing");
    let out = ok(&s, &["ibccquery", "CongestionLog", &sw1]);
    assert_eq!(field(&out, "LogType"), "1", "{out}");
    assert_eq!(
        field(&out, "LogEventsCounter"),
        marked.min(u16::MAX as u64).to_string(),
        "{out}"
    );
    let out = ok(&s, &["ibccquery", "Timestamp", &h0]);
    assert_eq!(
        field(&out, "Timestamp"),
        (1_000_000 / 1024).to_string(),
        "{out}"
    );
    // A CA's log (its CNP events) is not modelled: refused, not invented.
    let (good, _) = tool(&s, None, &["ibccquery", "CongestionLog", &h0]);
    assert!(!good);
    drop(s);

    // A fabric without congestion control reports the power-on settings.
    let s = serve();
    let (_, plain) = model();
    let out = ok(
        &s,
        &[
            "ibccquery",
            "SwitchCongestionSetting",
            &lid(&plain, "leaf0").to_string(),
        ],
    );
    assert_eq!(field(&out, "Control_Map"), "0x00000000", "{out}");
    assert_eq!(field(&out, "Threshold"), "0x00", "{out}");
    let out = ok(
        &s,
        &[
            "ibccquery",
            "CACongestionSetting",
            &lid(&plain, "h0").to_string(),
        ],
    );
    assert_eq!(field(&out, "Control_Map"), "0x0000", "{out}");
}

#[test]
fn ibsims_example_net_files_are_read() {
    require_tools();
    let dir = Path::new("/usr/share/doc/ibsim-utils/net-examples");
    let mut read = 0;
    for entry in std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (Debian package ibsim-utils)", dir.display()))
    {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("net") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let headers = text
            .lines()
            .filter(|l| l.starts_with("Switch") || l.starts_with("Hca") || l.starts_with("Ca"))
            .count();
        let scenario = format!(
            "duration_us = 1\n[topology]\nibnetdiscover = {:?}\n",
            path.display().to_string()
        );
        let s = Scenario::parse(&scenario).unwrap_or_else(|e| panic!("{name}: {e}"));
        let t = s.topology().unwrap();
        assert_eq!(t.nodes.len(), headers, "{name}");
        assert!(!t.links.is_empty(), "{name}");
        read += 1;
    }
    assert!(read >= 5, "only {read} net files in {}", dir.display());
}

#[test]
fn opensm_sweeps_the_frozen_fabric_once_to_master() {
    require_tools();
    assert!(
        !which("opensm").as_os_str().is_empty(),
        "`opensm` is not installed: this test needs the Debian package opensm"
    );
    let s = serve();
    let log = s.log.with_file_name("opensm.log");
    let log_arg = log.to_str().unwrap().to_string();
    // -o: one sweep, then exit. Its PortInfo, SwitchInfo and LFT Sets must all succeed.
    let (_, out) = tool(&s, None, &["opensm", "-o", "-f", &log_arg]);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("Entering MASTER state"), "{out}\n{text}");
    assert!(text.contains("SUBNET UP"), "{out}\n{text}");
    let errors: Vec<&str> = text.lines().filter(|l| l.contains(" ERR ")).collect();
    assert!(
        errors.is_empty(),
        "OpenSM logged errors:\n{}",
        errors.join("\n")
    );
    // What OpenSM wrote is what the tools read back, and the log still replays.
    let out = ok(&s, &["ibroute", "17"]);
    assert!(out.contains("24 valid lids dumped"), "{out}");
    let o = softib()
        .args(["sim", SCENARIO, "--replay"])
        .arg(&s.log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn the_tools_reach_the_server_over_udp_on_loopback_too() {
    require_tools();
    let (fabric, sub) = model();
    // A port range of this process's own (ports P .. P + 10).
    let port = 30_000 + (std::process::id() % 3000) as u16 * 11;
    let s = serve_on(Some(port));
    let out = ok(&s, &["ibnetdiscover"]);
    let switches = out.lines().filter(|l| l.starts_with("Switch\t")).count();
    assert_eq!(switches, sub.topology.switches().count(), "{out}");
    let c = fabric.port_counters("h6", 1).unwrap();
    let out = ok(&s, &["perfquery", &lid(&sub, "h6").to_string(), "1"]);
    let tick = fabric.config().xmit_wait_tick_ps;
    assert_eq!(
        field(&out, "PortXmitWait"),
        c.port_xmit_wait(tick).to_string(),
        "{out}"
    );
}

const OPENSM_SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scenarios/opensm-fat-tree.toml"
);

fn require_opensm() {
    require_tools();
    assert!(
        !which("opensm").as_os_str().is_empty(),
        "`opensm` is not installed: this test needs the Debian package opensm"
    );
}

/// Waits (at most 30 s) for the served run that follows the SM's bring-up: the MAD log
/// says `# ran` when its snapshot is served.
fn wait_for_the_run(s: &Served) {
    for _ in 0..300 {
        let text = std::fs::read_to_string(&s.log).unwrap_or_default();
        if text.lines().any(|l| l.starts_with("# ran at_ps=")) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the scenario did not run within 30 s of OpenSM's sweep");
}

/// Runs `opensm -o ARGS` on the SM host; returns its log after checking MASTER, SUBNET UP
/// and no `ERR` line.
fn opensm_once(s: &Served, args: &[&str]) -> String {
    let log = s.log.with_file_name("opensm.log");
    let _ = std::fs::remove_file(&log);
    let log_arg = log.to_str().unwrap().to_string();
    let mut all = vec!["opensm", "-o", "-f", &log_arg];
    all.extend_from_slice(args);
    let (_, out) = tool(s, Some("h15"), &all);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("Entering MASTER state"), "{out}\n{text}");
    assert!(text.contains("SUBNET UP"), "{out}\n{text}");
    let errors: Vec<&str> = text.lines().filter(|l| l.contains(" ERR ")).collect();
    assert!(
        errors.is_empty(),
        "OpenSM logged errors:\n{}",
        errors.join("\n")
    );
    text
}

/// The LID of every node as ibnetdiscover prints it (`# "NAME" lid N` on a CA port line,
/// `# "NAME" base port 0 lid N` on a switch line).
fn discovered_lids(out: &str) -> std::collections::BTreeMap<String, u16> {
    let mut lids = std::collections::BTreeMap::new();
    for l in out.lines() {
        let Some((_, comment)) = l.split_once("# \"") else {
            continue;
        };
        let Some((name, rest)) = comment.split_once('"') else {
            continue;
        };
        let Some(lid) = rest.split(" lid ").nth(1) else {
            continue;
        };
        let lid: u16 = lid.split_whitespace().next().unwrap().parse().unwrap();
        lids.insert(name.to_string(), lid);
    }
    lids
}

/// `ibroute` output as (LID, port) pairs.
fn ibroute_entries(out: &str) -> Vec<(u16, u8)> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let lid = u16::from_str_radix(w.next()?.strip_prefix("0x")?, 16).ok()?;
            let port = w.next()?.parse().ok()?;
            Some((lid, port))
        })
        .collect()
}

#[test]
fn opensm_brings_up_the_held_fabric_and_its_tables_carry_the_traffic() {
    require_opensm();
    let s = serve_scenario(OPENSM_SCENARIO, None);
    let topo = Scenario::load(Path::new(OPENSM_SCENARIO))
        .unwrap()
        .topology()
        .unwrap();
    // Before the SM: every port Init with LID 0 (read by directed route), no LID routes.
    let out = ok(&s, &["smpquery", "-D", "portinfo", "0", "1"]);
    assert_eq!(field(&out, "LinkState"), "Initialize", "{out}");
    assert_eq!(field(&out, "Lid"), "0", "{out}");
    let out = ok(&s, &["ibnetdiscover"]);
    assert!(discovered_lids(&out).values().all(|&l| l == 0), "{out}");
    let (good, _) = tool(&s, None, &["perfquery", "1", "1"]);
    assert!(!good, "a LID answered before the SM assigned any");

    // OpenSM, with QoS on so it writes SL2VL and VL arbitration too.
    opensm_once(&s, &["-Q"]);
    wait_for_the_run(&s);

    // Every node has a LID, all different; h15 (the SM) reports itself as the master.
    let out = ok(&s, &["ibnetdiscover"]);
    let lids = discovered_lids(&out);
    assert_eq!(lids.len(), topo.nodes.len(), "{out}");
    let distinct: BTreeSet<u16> = lids.values().copied().collect();
    assert_eq!(distinct.len(), lids.len(), "{lids:?}");
    assert!(!distinct.contains(&0), "{lids:?}");
    let out = ok(&s, &["smpquery", "portinfo", &lids["h0"].to_string(), "1"]);
    assert_eq!(field(&out, "LinkState"), "Active", "{out}");
    assert_eq!(field(&out, "SMLid"), lids["h15"].to_string(), "{out}");
    assert!(
        out.contains("OperVLs:.........................VL0-1"),
        "{out}"
    );
    let out = ok(&s, &["smpquery", "sl2vl", &lids["h13"].to_string(), "1"]);
    assert!(
        out.contains("| 0| 1| 0| 1|"),
        "OpenSM's default qos_sl2vl\n{out}"
    );

    // The forwarding tables are OpenSM's minhop: every entry a shortest path, every LID
    // routed. Where OpenSM's and softib's minhop break ties differently is counted and
    // documented (docs/design/management.md).
    let d = compare_routes(&s, &topo, &lids, RoutingEngine::MinHop);
    eprintln!("OpenSM minhop against softib minhop: {d:?}");
    assert_eq!(d.switch_lids_unrouted, 0, "{d:?}");
    assert_eq!(d.ca_routes, 16 * 8);

    // The traffic ran on those tables from the moment every port was Active: the counters
    // the tools read are those of the scenario run with OpenSM's tables (the replay runs it
    // again from the log), and the incast arrived.
    let o = softib()
        .args(["sim", OPENSM_SCENARIO, "--replay"])
        .arg(&s.log)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    let log = mad_log::parse(&std::fs::read_to_string(&s.log).unwrap()).unwrap();
    let (fabric, _) = replayed(&log);
    for (host, port) in [("h0", 1), ("h1", 1), ("h13", 1)] {
        let c = fabric.port_counters(host, port).unwrap();
        let out = ok(
            &s,
            &["perfquery", &lids[host].to_string(), &port.to_string()],
        );
        assert_eq!(
            field(&out, "PortRcvPkts"),
            c.port_rcv_pkts.min(u32::MAX as u64).to_string(),
            "{host}\n{out}"
        );
    }
    assert!(fabric.port_counters("h0", 1).unwrap().port_rcv_pkts > 0);
    assert!(
        fabric.port_counters("h1", 1).unwrap().port_rcv_pkts > 0,
        "the SL 1 stream on VL1"
    );
    let tick = fabric.config().xmit_wait_tick_ps;
    let wait = fabric.port_counters("h6", 1).unwrap().port_xmit_wait(tick);
    assert!(wait > 0, "the incast senders wait for credits");
    let out = ok(&s, &["perfquery", &lids["h6"].to_string(), "1"]);
    assert_eq!(field(&out, "PortXmitWait"), wait.to_string(), "{out}");
}

/// How OpenSM's forwarding tables (read with `ibroute`) compare with softib's engine on the
/// same topology and LIDs. Every entry must be a shortest path (asserted); the counts say
/// where the two engines chose different ports among the shortest ones.
#[derive(Debug, Default)]
#[allow(dead_code)] // read through Debug
struct RouteComparison {
    ca_routes: usize,
    ca_differences: usize,
    switch_routes: usize,
    switch_differences: usize,
    switch_lids_unrouted: usize,
}

fn compare_routes(
    s: &Served,
    topo: &Topology,
    lids: &std::collections::BTreeMap<String, u16>,
    engine: RoutingEngine,
) -> RouteComparison {
    let distinct: BTreeSet<u16> = lids.values().copied().collect();
    let mut addr = Addressing {
        owners: vec![None; distinct.iter().max().copied().unwrap() as usize + 1],
        port_lid: topo
            .nodes
            .iter()
            .map(|n| vec![0; n.ports as usize + 1])
            .collect(),
        switch_lid: vec![0; topo.nodes.len()],
    };
    for (i, n) in topo.nodes.iter().enumerate() {
        let lid = lids[&n.name];
        match n.kind {
            NodeKind::Switch => {
                addr.switch_lid[i] = lid;
                addr.owners[lid as usize] = Some(LidOwner::Switch(i));
            }
            NodeKind::Hca => {
                addr.port_lid[i][1] = lid;
                addr.owners[lid as usize] = Some(LidOwner::HcaPort(PortAddr { node: i, port: 1 }));
            }
        }
    }
    let softib_lfts = compute_lfts_with(topo, &addr, engine);
    let hops = hop_counts(topo);
    let peers = softib_fabric::routing::peers(topo);
    let mut d = RouteComparison::default();
    for sw in topo.switches() {
        let name = &topo.nodes[sw].name;
        let out = ok(s, &["ibroute", &lids[name].to_string()]);
        let entries = ibroute_entries(&out);
        let routed: BTreeSet<u16> = entries.iter().map(|e| e.0).collect();
        for (i, n) in topo.nodes.iter().enumerate() {
            let lid = lids[&n.name];
            match n.kind {
                NodeKind::Hca => assert!(
                    routed.contains(&lid),
                    "{name}: no route to {}\n{out}",
                    n.name
                ),
                NodeKind::Switch if i != sw && !routed.contains(&lid) => {
                    d.switch_lids_unrouted += 1
                }
                NodeKind::Switch => {}
            }
        }
        for (lid, port) in entries {
            let dest = match addr.owners[lid as usize].unwrap() {
                LidOwner::Switch(d) => d,
                LidOwner::HcaPort(p) => p.node,
            };
            if dest == sw {
                assert_eq!(port, 0, "{name} reaches its own LID on port 0");
                continue;
            }
            // Every entry is a shortest path.
            let next = peers[sw][port as usize].expect("a cabled port").node;
            assert_eq!(
                hops[next][dest] + 1,
                hops[sw][dest],
                "{name}, LID {lid}: port {port} is not on a shortest path"
            );
            let differs = softib_lfts[sw][lid as usize] != port;
            match topo.nodes[dest].kind {
                NodeKind::Hca => {
                    d.ca_routes += 1;
                    d.ca_differences += differs as usize;
                }
                NodeKind::Switch => {
                    d.switch_routes += 1;
                    d.switch_differences += differs as usize;
                }
            }
        }
    }
    d
}

/// Hop counts between every pair of nodes (BFS over the cables).
fn hop_counts(topo: &Topology) -> Vec<Vec<u32>> {
    let peers = softib_fabric::routing::peers(topo);
    (0..topo.nodes.len())
        .map(|from| {
            let mut d = vec![u32::MAX; topo.nodes.len()];
            d[from] = 0;
            let mut q = std::collections::VecDeque::from([from]);
            while let Some(u) = q.pop_front() {
                // A CA does not forward: paths end at CAs.
                if u != from && topo.nodes[u].kind == NodeKind::Hca {
                    continue;
                }
                for p in peers[u].iter().flatten() {
                    if d[p.node] == u32::MAX {
                        d[p.node] = d[u] + 1;
                        q.push_back(p.node);
                    }
                }
            }
            d
        })
        .collect()
}

/// Replays `log` in this process as `--replay` does, keeping the fabric of the run.
#[test]
fn opensm_ftree_routes_the_held_fabric_on_shortest_paths() {
    require_opensm();
    let s = serve_scenario(OPENSM_SCENARIO, None);
    let topo = Scenario::load(Path::new(OPENSM_SCENARIO))
        .unwrap()
        .topology()
        .unwrap();
    let text = opensm_once(&s, &["-R", "ftree"]);
    assert!(
        text.contains("ftree tables configured on all switches"),
        "{text}"
    );
    wait_for_the_run(&s);
    let lids = discovered_lids(&ok(&s, &["ibnetdiscover"]));
    let d = compare_routes(&s, &topo, &lids, RoutingEngine::Ftree);
    eprintln!("OpenSM ftree against softib ftree: {d:?}");
    assert_eq!(d.ca_routes, 16 * 8);
    // OpenSM's ftree leaves the spines without routes to each other (each spine misses
    // the 3 others: docs/design/management.md).
    assert_eq!(d.switch_lids_unrouted, 4 * 3, "{d:?}");
}

fn replayed(log: &mad_log::Log) -> (Fabric, Subnet) {
    replayed_of(OPENSM_SCENARIO, log)
}

/// Replays `log` against scenario file `scenario` (checking every response) and returns the
/// fabric of the run that followed the SM's bring-up, and the served subnet at the end.
fn replayed_of(scenario: &str, log: &mad_log::Log) -> (Fabric, Subnet) {
    let s = Scenario::load(Path::new(scenario)).unwrap();
    let built = s.build().unwrap();
    let mut subnet = Subnet::unconfigured(&built);
    subnet.sm_host = s.external_sm_host().unwrap();
    let kept = std::cell::RefCell::new(None);
    let stop = log.entries.iter().find_map(|e| match e {
        mad_log::Entry::Ran { at_ps } => Some(*at_ps),
        _ => None,
    });
    let mut run = |program| {
        let opts = RunOptions {
            program: Some(program),
            ..RunOptions::default()
        };
        let (_, fabric) =
            run_and_keep(&s, "served", &opts, stop, &mut |_, _| {}).map_err(|e| e.to_string())?;
        let snap = Subnet::snapshot(&fabric);
        *kept.borrow_mut() = Some(fabric);
        Ok(snap)
    };
    let r = mad_log::replay(&mut subnet, log, &mut run);
    assert_eq!(r.identical, r.replayed, "{:?}", r.differences);
    (kept.into_inner().expect("the log has a run"), subnet)
}

/// Tools that vanish without a DISCONNECT (killed, crashed) must not use up the server's
/// ten client slots: eleven clients connect and vanish, one of them after sending a MAD
/// whose response then has nowhere to go, and a real tool still attaches and works.
#[test]
fn clients_that_vanish_leave_their_slots_free() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    require_tools();
    let s = serve();
    let addr = |n: &str| SocketAddr::from_abstract_name(format!("{}:{n}\0", s.sock)).unwrap();
    for k in 0..11u32 {
        let pid = 4_000_000 + k;
        let reply = UnixDatagram::bind_addr(&addr(&format!("ctl{pid}"))).unwrap();
        let inbox = UnixDatagram::bind_addr(&addr(&format!("in{pid}"))).unwrap();
        let mut ctl = [0u8; 80];
        ctl[0..4].copy_from_slice(&0xdead_beefu32.to_ne_bytes());
        ctl[8..12].copy_from_slice(&1u32.to_ne_bytes()); // SIM_CTL_CONNECT
        ctl[16..20].copy_from_slice(&pid.to_ne_bytes());
        ctl[16 + 12..16 + 14].copy_from_slice(b"h3");
        reply.send_to_addr(&ctl, &addr("ctl")).unwrap();
        reply
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut answer = [0u8; 80];
        let n = reply.recv(&mut answer).expect("the connect is answered");
        assert_eq!(n, 80);
        assert_eq!(
            u32::from_ne_bytes(answer[8..12].try_into().unwrap()),
            1,
            "client {k} refused: the slots of the vanished clients were not freed"
        );
        let slot = u32::from_ne_bytes(answer[16..20].try_into().unwrap());
        drop(inbox);
        if k == 0 {
            // A NodeInfo request by directed route, whose answer finds no socket.
            let mut req = [0u8; 288];
            req[0..2].copy_from_slice(&0xffffu16.to_be_bytes());
            req[32..36].copy_from_slice(&[1, 0x81, 1, 1]);
            req[32 + 16..32 + 18].copy_from_slice(&0x0011u16.to_be_bytes());
            req[32 + 32..32 + 36].copy_from_slice(&[0xff; 4]);
            reply
                .send_to_addr(&req, &addr(&format!("out{slot}")))
                .unwrap();
        }
    }
    let out = ok(&s, &["smpquery", "nodedesc", "-D", "0"]);
    assert!(out.contains("h0"), "{out}");
}

/// Runs `ibccconfig ARGS` and checks it succeeded.
fn ccconfig(s: &Served, args: &[&str]) {
    let mut all = vec!["ibccconfig"];
    all.extend_from_slice(args);
    let (good, out) = tool(s, None, &all);
    assert!(good, "{all:?} failed:\n{out}");
}

/// `ibccconfig` writes every settable congestion control attribute of a frozen fabric's
/// agents (IBA Annex A10.4.3) and `ibccquery` reads back what it wrote; read-only
/// attributes, settings of the wrong node type and out-of-range fields are refused with the
/// status a node returns, and the log of the session replays bit for bit.
#[test]
fn ibccconfig_sets_what_ibccquery_reads_back() {
    require_tools();
    let s = serve();
    let (_, sub) = model();
    let leaf0 = lid(&sub, "leaf0").to_string();
    let h3 = lid(&sub, "h3").to_string();

    // Power-on: no marking, no CA reaction.
    let out = ok(&s, &["ibccquery", "SwitchCongestionSetting", &leaf0]);
    assert_eq!(field(&out, "Threshold"), "0x00", "{out}");

    // SwitchCongestionSetting: Control_Map, Victim_Mask, Credit_Mask, Threshold,
    // Packet_Size, CS_Threshold, CS_ReturnDelay, Marking_Rate.
    ccconfig(
        &s,
        &[
            "SwitchCongestionSetting",
            &leaf0,
            "0x1F",
            "0x6",
            "0x0",
            "0xA",
            "8",
            "0",
            "0:0",
            "5",
        ],
    );
    let out = ok(&s, &["ibccquery", "SwitchCongestionSetting", &leaf0]);
    assert_eq!(field(&out, "Control_Map"), "0x0000001f", "{out}");
    assert_eq!(
        field(&out, "Victim_Mask"),
        format!("{:064x}", 6),
        "ports 1 and 2: {out}"
    );
    assert_eq!(field(&out, "Threshold"), "0x0a", "{out}");
    assert_eq!(field(&out, "Packet_Size"), "8", "{out}");
    assert_eq!(field(&out, "Marking_Rate"), "5", "{out}");
    // A Set naming only Marking_Rate in its Control_Map leaves the Threshold alone.
    ccconfig(
        &s,
        &[
            "SwitchCongestionSetting",
            &leaf0,
            "0x10",
            "0x0",
            "0x0",
            "0x3",
            "0",
            "0",
            "0:0",
            "9",
        ],
    );
    let out = ok(&s, &["ibccquery", "SwitchCongestionSetting", &leaf0]);
    assert_eq!(field(&out, "Threshold"), "0x0a", "{out}");
    assert_eq!(field(&out, "Marking_Rate"), "9", "{out}");

    // SwitchPortCongestionSetting of port 3: Valid, Control_Type, Threshold, Packet_Size,
    // Cong_Parm; the other ports stay invalid.
    ccconfig(
        &s,
        &[
            "SwitchPortCongestionSetting",
            &leaf0,
            "3",
            "1",
            "0",
            "12",
            "4",
            "2",
        ],
    );
    let out = ok(
        &s,
        &["ibccquery", "SwitchPortCongestionSetting", &leaf0, "3"],
    );
    assert_eq!(field(&out, "Valid"), "1", "{out}");
    assert_eq!(field(&out, "Threshold"), "0x0c", "{out}");
    assert_eq!(field(&out, "Packet_Size"), "4", "{out}");
    assert_eq!(field(&out, "Cong_Parm_Marking_Rate"), "2", "{out}");
    let out = ok(
        &s,
        &["ibccquery", "SwitchPortCongestionSetting", &leaf0, "4"],
    );
    assert_eq!(field(&out, "Valid"), "0", "{out}");

    // CACongestionSetting: Port_Control, Control_Map (SLs 0 and 1), CCTI_Timer,
    // CCTI_Increase, Trigger_Threshold, CCTI_Min.
    ccconfig(
        &s,
        &["CACongestionSetting", &h3, "1", "0x3", "150", "2", "3", "1"],
    );
    let out = ok(&s, &["ibccquery", "CACongestionSetting", &h3]);
    assert_eq!(field(&out, "Port_Control"), "0x0001", "{out}");
    assert_eq!(field(&out, "Control_Map"), "0x0003", "{out}");
    let timers: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("CCTI_Timer"))
        .collect();
    assert_eq!(timers.len(), 16, "{out}");
    assert!(
        timers[0].ends_with(".150") && timers[1].ends_with(".150"),
        "{out}"
    );
    assert!(
        timers[2].ends_with(".0"),
        "SL 2 outside the Control_Map: {out}"
    );
    assert_eq!(field(&out, "CCTI_Increase"), "2", "{out}");
    assert_eq!(field(&out, "CCTI_Min"), "1", "{out}");

    // CongestionControlTable: CCTI_Limit 3, block 0, four shift:multiplier entries.
    ccconfig(
        &s,
        &[
            "CongestionControlTable",
            &h3,
            "3",
            "0",
            "0:0",
            "1:10",
            "1:20",
            "2:30",
        ],
    );
    let out = ok(&s, &["ibccquery", "CongestionControlTable", &h3]);
    assert_eq!(field(&out, "CCTI_Limit"), "3", "{out}");
    let mults: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("CCT_Multiplier"))
        .collect();
    let shifts: Vec<&str> = out.lines().filter(|l| l.starts_with("CCT_Shift")).collect();
    for (i, (sh, mu)) in [(0, 0), (1, 10), (1, 20), (2, 30)].iter().enumerate() {
        assert!(shifts[i].ends_with(&format!(".{sh}")), "{out}");
        assert!(mults[i].ends_with(&format!(".{mu}")), "{out}");
    }
    // Another node's settings did not move.
    let out = ok(
        &s,
        &[
            "ibccquery",
            "CACongestionSetting",
            &lid(&sub, "h4").to_string(),
        ],
    );
    assert_eq!(field(&out, "Control_Map"), "0x0000", "{out}");

    // Refusals: a CA setting on a switch and a switch setting on a CA (0x0C), a CCT block
    // beyond ControlTableCap (0x1C), a read-only attribute (CongestionKeyInfo, 0x0C).
    for args in [
        &[
            "CACongestionSetting",
            leaf0.as_str(),
            "1",
            "0x3",
            "150",
            "2",
            "3",
            "0",
        ][..],
        &[
            "SwitchCongestionSetting",
            h3.as_str(),
            "0x1F",
            "0x0",
            "0x0",
            "0xA",
            "8",
            "0",
            "0:0",
            "5",
        ],
        &["CongestionControlTable", h3.as_str(), "128", "2", "0:0"],
        &["CongestionKeyInfo", h3.as_str(), "0", "0", "0", "0"],
    ] {
        let mut all = vec!["ibccconfig"];
        all.extend_from_slice(args);
        let (good, out) = tool(&s, None, &all);
        assert!(!good, "{all:?} was accepted:\n{out}");
    }
    // The refused CA setting left the switch as it was.
    let out = ok(&s, &["ibccquery", "SwitchCongestionSetting", &leaf0]);
    assert_eq!(field(&out, "Threshold"), "0x0a", "{out}");
    let text = std::fs::read_to_string(&s.log).unwrap();
    assert!(
        text.contains(" 0121020200"),
        "the log holds the CC Set requests"
    );
    let o = softib()
        .args(["sim", SCENARIO, "--replay"])
        .arg(&s.log)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

const OPENSM_CC_CONF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scenarios/opensm-cc.conf"
);

/// Stock OpenSM with `congestion_control TRUE` and the cc_* keys of scenarios/opensm-cc.conf
/// programs every switch and CA of the held fat tree after bringing its ports up (IBA
/// Annex A10.4.3 Sets); the run waits for it to finish, so the settings reach the data
/// plane: the switches mark FECN (CongestionLog counts the marks, the fabric's counters
/// agree), where the same traffic without OpenSM's CC marks nothing, and every CA's
/// congestion control is what OpenSM wrote.
#[test]
fn opensm_programs_congestion_control_and_the_switches_mark() {
    require_opensm();
    let conf = std::fs::read_to_string(OPENSM_CC_CONF).unwrap();
    let keys = softib_fabric::cc_switch::parse_opensm_cc(&conf).unwrap();
    let s = serve_scenario(OPENSM_SCENARIO, None);
    opensm_once(&s, &["-F", OPENSM_CC_CONF]);
    wait_for_the_run(&s);
    let out = ok(&s, &["ibnetdiscover"]);
    let lids = discovered_lids(&out);
    let log = mad_log::parse(&std::fs::read_to_string(&s.log).unwrap()).unwrap();
    // OpenSM's CC Sets came after every port was Active, and before the run.
    let first_cc = log
        .entries
        .iter()
        .position(|e| matches!(e, mad_log::Entry::Exchange(x) if x.request[1] == 0x21))
        .expect("OpenSM sent CC MADs");
    let sm_up = log
        .entries
        .iter()
        .position(|e| *e == mad_log::Entry::SmUp)
        .unwrap();
    assert!(first_cc < sm_up, "the run started before OpenSM's CC Sets");
    let (fabric, _) = replayed(&log);

    // Every switch holds OpenSM's switch setting, every CA its CA setting and table.
    let topo = fabric.topology().clone();
    for n in &topo.nodes {
        let l = lids[&n.name].to_string();
        match n.kind {
            NodeKind::Switch => {
                let out = ok(&s, &["ibccquery", "SwitchCongestionSetting", &l]);
                assert_eq!(
                    field(&out, "Control_Map"),
                    "0x0000001f",
                    "{}: {out}",
                    n.name
                );
                assert_eq!(field(&out, "Threshold"), "0x0f", "{out}");
                assert_eq!(field(&out, "Packet_Size"), "8", "{out}");
                assert_eq!(field(&out, "Marking_Rate"), "3", "{out}");
            }
            NodeKind::Hca => {
                let out = ok(&s, &["ibccquery", "CACongestionSetting", &l]);
                assert_eq!(field(&out, "Port_Control"), "0x0001", "{}: {out}", n.name);
                assert_eq!(field(&out, "Control_Map"), "0x0003", "{out}");
                assert_eq!(field(&out, "CCTI_Timer"), "150", "{out}");
                assert_eq!(field(&out, "CCTI_Increase"), "2", "{out}");
                let out = ok(&s, &["ibccquery", "CongestionControlTable", &l]);
                assert_eq!(field(&out, "CCTI_Limit"), "3", "{out}");
                // And the CA's engine would run that CCA.
                let cc = fabric.ca_congestion_control_of(&n.name).expect("CC on");
                assert_eq!(cc.ca.config, keys.ca.config, "{}", n.name);
            }
        }
    }

    // The switches marked with OpenSM's settings: each switch's CongestionLog counts its
    // ports' marks, as the fabric counted them; the same run without OpenSM's CC (softib's
    // own routing, the scenario has no [congestion_control]) marks nothing.
    let mut total = 0;
    for n in topo.nodes.iter().filter(|n| n.kind == NodeKind::Switch) {
        let marked: u64 = (1..=n.ports)
            .map(|p| fabric.port_counters(&n.name, p).unwrap().fecn_marked)
            .sum();
        total += marked;
        let out = ok(
            &s,
            &["ibccquery", "CongestionLog", &lids[&n.name].to_string()],
        );
        assert_eq!(
            field(&out, "LogEventsCounter"),
            marked.min(u16::MAX as u64).to_string(),
            "{}: {out}",
            n.name
        );
    }
    eprintln!("packets marked FECN under OpenSM's CC: {total}");
    assert!(total > 0, "no switch marked");
    let (plain, _) = model_of(Path::new(OPENSM_SCENARIO));
    let plain_marked: u64 = topo
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Switch)
        .flat_map(|n| (1..=n.ports).map(move |p| (n.name.clone(), p)))
        .map(|(n, p)| plain.port_counters(&n, p).unwrap().fecn_marked)
        .sum();
    assert_eq!(plain_marked, 0);
}

/// Waits (at most 60 s) until the MAD log holds `n` runs (`# ran` lines).
fn wait_for_runs(s: &Served, n: usize) {
    for _ in 0..600 {
        let text = std::fs::read_to_string(&s.log).unwrap_or_default();
        if text
            .lines()
            .filter(|l| l.starts_with("# ran at_ps="))
            .count()
            >= n
        {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("run {n} did not finish within 60 s of the CC Set");
}

/// `ibccconfig` on a fabric frozen after its run (cc-victim, 1 ms) runs it again with the
/// new congestion control settings, so the counters the tools read change with them: the
/// same settings give the same counters again; a CCT of one 0:0 entry at the hot sender h0
/// (its CCA can no longer slow it) lets h0 send more; Threshold 0 at sw1 stops its marking.
/// The log, with its three runs, replays bit for bit.
#[test]
fn ibccconfig_on_a_served_fabric_changes_what_it_runs() {
    require_tools();
    let dir = std::env::temp_dir().join(format!("softib-ccset-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/cc-victim.toml"
    ))
    .unwrap();
    let path = dir.join("cc-victim.toml");
    std::fs::write(
        &path,
        text.replace("duration_us = 6000\n", "duration_us = 1000\n"),
    )
    .unwrap();
    let (_, sub) = model_of(&path);
    let s = serve_scenario(path.to_str().unwrap(), None);
    let (sw1, h0) = (lid(&sub, "sw1").to_string(), lid(&sub, "h0").to_string());
    let marks = |s: &Served| -> u64 {
        let out = ok(s, &["ibccquery", "CongestionLog", &sw1]);
        field(&out, "LogEventsCounter").parse().unwrap()
    };
    let sent = |s: &Served| -> u64 {
        let out = ok(s, &["perfquery", "-x", &h0, "1"]);
        field(&out, "PortXmitData").parse().unwrap()
    };
    let (marks0, sent0) = (marks(&s), sent(&s));
    assert!(marks0 > 0, "sw1 marks in cc-victim");

    // The scenario's own switch setting, written again: the run is the same.
    ccconfig(
        &s,
        &[
            "SwitchCongestionSetting",
            &sw1,
            "0x1F",
            "0x0",
            "0x0",
            "0xE",
            "8",
            "0",
            "0:0",
            "0",
        ],
    );
    wait_for_runs(&s, 1);
    assert_eq!(
        (marks(&s), sent(&s)),
        (marks0, sent0),
        "same settings, same run"
    );

    // h0's CCT: one entry 0:0, no delay at any CCTI.
    ccconfig(&s, &["CongestionControlTable", &h0, "0", "0", "0:0"]);
    wait_for_runs(&s, 2);
    let sent1 = sent(&s);
    eprintln!("h0 PortXmitData (32-bit words): {sent0} with the scenario's CCT, {sent1} with 0:0");
    assert!(
        sent1 > sent0,
        "h0 unthrottled sends more: {sent1} vs {sent0}"
    );

    // sw1 Threshold 0 (Control_Map bit 2 only): sw1 no longer marks.
    ccconfig(
        &s,
        &[
            "SwitchCongestionSetting",
            &sw1,
            "0x4",
            "0x0",
            "0x0",
            "0x0",
            "0",
            "0",
            "0:0",
            "0",
        ],
    );
    wait_for_runs(&s, 3);
    assert_eq!(marks(&s), 0, "sw1 still marks with Threshold 0");
    let out = ok(&s, &["ibccquery", "SwitchCongestionSetting", &sw1]);
    assert_eq!(field(&out, "Threshold"), "0x00", "{out}");

    let o = softib()
        .args(["sim", path.to_str().unwrap(), "--replay"])
        .arg(&s.log)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A connected client's bad messages (IBA-malformed MAD, a request datagram of the wrong
/// size, an unknown control type) are refused: the malformed MAD is answered at once with
/// umad2sim's timeout status and its MAD back (no hang), the wrong-size datagram and the
/// unknown control are dropped or answered with the protocol's error type, the server says
/// on stderr what it dropped and why, and it serves on: the same client's next good MAD is
/// answered, and a stock tool works.
#[test]
fn a_connected_clients_malformed_messages_are_refused_and_it_serves_on() {
    use softib_sim::serve::protocol::{Request, REQUEST_LEN, STATUS_TIMEOUT};
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    require_tools();
    let dir = std::env::temp_dir().join(format!("softib-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());
    let stderr = dir.join("server.err");
    let s = serve_with(SCENARIO, None, Some(&stderr));
    let addr = |n: &str| SocketAddr::from_abstract_name(format!("{}:{n}\0", s.sock)).unwrap();
    let pid = 4_200_000u32;
    let ctl = UnixDatagram::bind_addr(&addr(&format!("ctl{pid}"))).unwrap();
    let inbox = UnixDatagram::bind_addr(&addr(&format!("in{pid}"))).unwrap();
    for sock in [&ctl, &inbox] {
        sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
    }
    let control = |kind: u32, slot: u32, data: &[u8]| -> [u8; 80] {
        let mut c = [0u8; 80];
        c[0..4].copy_from_slice(&0xdead_beefu32.to_ne_bytes());
        c[8..12].copy_from_slice(&kind.to_ne_bytes());
        c[12..16].copy_from_slice(&slot.to_ne_bytes());
        c[16..16 + data.len()].copy_from_slice(data);
        ctl.send_to_addr(&c, &addr("ctl")).unwrap();
        let mut answer = [0u8; 80];
        assert_eq!(ctl.recv(&mut answer).expect("the control is answered"), 80);
        answer
    };
    let mut info = [0u8; 64];
    info[0..4].copy_from_slice(&pid.to_ne_bytes());
    info[12..14].copy_from_slice(b"h3");
    let a = control(1, 0, &info); // SIM_CTL_CONNECT
    assert_eq!(
        u32::from_ne_bytes(a[8..12].try_into().unwrap()),
        1,
        "connected"
    );
    let slot = u32::from_ne_bytes(a[16..20].try_into().unwrap());
    let out = addr(&format!("out{slot}"));

    // An unknown control type from the connected client: the protocol's error reply.
    let a = control(99, slot, &[]);
    assert_eq!(
        u32::from_ne_bytes(a[8..12].try_into().unwrap()),
        0,
        "SIM_CTL_ERROR"
    );

    // A request datagram of the wrong size: dropped.
    inbox.send_to_addr(&[0u8; 100], &out).unwrap();
    // A MAD with BaseVersion 2 (IBA §13.4.2 knows only 1): timeout status, MAD back.
    let mut mad = [0u8; 256];
    mad[0..4].copy_from_slice(&[2, 0x81, 1, 1]);
    mad[16..18].copy_from_slice(&0x0011u16.to_be_bytes());
    mad[32..36].copy_from_slice(&[0xff; 4]);
    let bad = Request {
        dlid: 0xffff,
        slid: 0,
        dqp: [0; 4],
        sqp: [0; 4],
        status: 0,
        length: 256,
        mad,
    };
    inbox.send_to_addr(&bad.encode(), &out).unwrap();
    let mut buf = [0u8; 1024];
    let n = inbox.recv(&mut buf).expect("the malformed MAD is answered");
    assert_eq!(n, REQUEST_LEN);
    let r = Request::parse(&buf[..n]).unwrap();
    assert_eq!(r.status, STATUS_TIMEOUT);
    assert_eq!(r.mad, mad);

    // The same client's next good MAD (NodeInfo of its own node by directed route).
    let mut good = bad.clone();
    good.mad[0] = 1;
    inbox.send_to_addr(&good.encode(), &out).unwrap();
    let n = inbox.recv(&mut buf).expect("the good MAD is answered");
    let r = Request::parse(&buf[..n]).unwrap();
    assert_eq!(r.status, 0);
    assert_eq!(r.mad[3], 0x81, "GetResp");
    assert_eq!(
        u16::from_be_bytes([r.mad[4], r.mad[5]]),
        0x8000,
        "D bit, status 0"
    );
    control(2, slot, &[]); // SIM_CTL_DISCONNECT

    let out = ok(&s, &["smpquery", "nodedesc", "-D", "0"]);
    assert!(out.contains("h0"), "{out}");
    let said = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains(&format!("dropped a 100-byte MAD request on out{slot}")),
        "{said}"
    );
    assert!(
        said.contains("dropped a malformed MAD (BaseVersion is not 1)"),
        "{said}"
    );
}
