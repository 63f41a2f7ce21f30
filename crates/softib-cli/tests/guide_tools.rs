//! The field-case guide's tool excerpts (issue 17 item 5): for the credit-starvation,
//! congestion-control and VL-starvation cases, stock infiniband-diags (`ibqueryerrors`,
//! `perfquery`, `smpquery`, `ibccquery`) run under `ibsim-run` against the case's problem
//! scenario served by `softib sim --serve` (frozen at the end of the run), and
//! - `perfquery`'s PortXmitWait of the port the case is about equals softib's own figure for
//!   that port at that time (`summary.json` `ports[].PortXmitWait` of `softib sim --out`),
//!   and `ibqueryerrors` reports the same value;
//! - the guide's `<!-- BEGIN TOOLS <case> -->` block is exactly what the tools printed, so the
//!   excerpts cannot go stale. `GUIDE_TOOLS_REGEN=1 cargo test --release -p softib-cli --test
//!   guide_tools` rewrites those blocks instead (after `softib cases --doc`, which leaves them
//!   alone: it only writes its own `GENERATED` blocks and needs no ibsim).
//!
//! Needs the Debian packages ibsim-utils and infiniband-diags; fails naming them when
//! missing.

mod common;

use std::path::Path;

use common::ibsim::{self, field, run_tool, ServeOpts, Served, TempDir};
use common::softib;
use softib_fabric::agents::Subnet;
use softib_sim::report::run::{run_and_keep, RunOptions};
use softib_sim::scenario::Scenario;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// One case's tool excerpts: the ports whose PortXmitWait the guide cites, and further
/// read-only tool invocations (`{NODE}` is replaced by that node's LID).
struct GuideCase {
    slug: &'static str,
    /// (node, port) whose `perfquery` output is shown and checked against softib's figure.
    ports: &'static [(&'static str, u8)],
    /// More tools to show, e.g. the arbitration table behind the wait.
    extra: &'static [&'static [&'static str]],
    /// One sentence on what to read in the excerpts.
    reading: &'static str,
}

const CASES: &[GuideCase] = &[
    GuideCase {
        slug: "01-credit-starvation",
        ports: &[("h0", 1), ("h2", 1)],
        extra: &[],
        reading: "`ibqueryerrors` flags h0:1 by its PortXmitWait alone (no error counter \
                  moved); `perfquery` on it shows the wait next to the data it did send, and \
                  the healthy sender h2:1 for comparison.",
    },
    GuideCase {
        slug: "03-cc-slope",
        ports: &[("sw0", 8), ("h0", 1)],
        extra: &[&["ibccquery", "CACongestionSetting", "{h0}"]],
        reading: "the wait is at the congestion point, the switch port towards the receiver \
                  (sw0:8); the senders hardly wait (CC holds them back before credits run \
                  out). `ibccquery` shows the sender's CC setting per SL: CCTI_Timer 300 \
                  (x 1.024 us, the slow step down the fix shortens) and CCTI_Increase 1.",
    },
    GuideCase {
        slug: "08-vl-starvation",
        ports: &[("h1", 1), ("h0", 1)],
        extra: &[&["smpquery", "vlarb", "{sw0}", "3"]],
        reading: "the starved storage host h1:1 waits for almost the whole run while the \
                  compute host h0:1 hardly waits; `smpquery vlarb` on the shared egress port \
                  sw0:3 shows why: VL0 in the high-priority table with an unbounded limit.",
    },
];

fn require_tools() {
    ibsim::require(&[
        ("ibsim-run", "ibsim-utils"),
        ("perfquery", "infiniband-diags"),
        ("ibqueryerrors", "infiniband-diags"),
        ("smpquery", "infiniband-diags"),
        ("ibccquery", "infiniband-diags"),
        ("timeout", "coreutils"),
    ]);
}

fn serve(scenario: &Path, sock: &str, dir: &Path) -> Served {
    let opts = ServeOpts {
        no_files: true,
        ..ServeOpts::default()
    };
    ibsim::serve(scenario, sock, dir, false, opts)
}

/// Runs `args` under ibsim-run against `s` (from its directory: libumad2sim writes
/// `sys-<pid>/` into the working directory); returns stdout, panicking on failure.
fn tool(s: &Served, args: &[String]) -> String {
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run_tool(s, None, &argv);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    // ibqueryerrors exits non-zero when it found a port beyond its thresholds, which is
    // what these cases are about; it has run to the end when it printed its summary.
    let finished = if args[0] == "ibqueryerrors" {
        out.contains("## Summary:")
    } else {
        o.status.success()
    };
    assert!(
        finished,
        "{args:?} failed:\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// softib's own PortXmitWait per port (`summary.json` of `softib sim SCENARIO --out DIR`).
fn softib_xmit_wait(scenario: &Path, out: &Path) -> serde_json::Value {
    let o = softib()
        .args(["sim"])
        .arg(scenario)
        .arg("--out")
        .arg(out)
        .output()
        .expect("softib sim");
    assert!(o.status.success(), "softib sim {scenario:?} failed");
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json parses")
}

fn port_wait(summary: &serde_json::Value, port: &str) -> u64 {
    summary["ports"]
        .as_array()
        .expect("ports[]")
        .iter()
        .find(|p| p["port"] == port)
        .unwrap_or_else(|| panic!("no port {port} in summary.json"))["PortXmitWait"]
        .as_u64()
        .expect("PortXmitWait")
}

fn begin_marker(slug: &str) -> String {
    format!("<!-- BEGIN TOOLS {slug}")
}

fn end_marker(slug: &str) -> String {
    format!("<!-- END TOOLS {slug} -->")
}

/// Serves `case`'s problem scenario, runs the tools, checks their figures against softib's
/// and returns the guide block they make.
fn excerpts(case: &GuideCase) -> String {
    let rel = format!("scenarios/cases/{}/problem.toml", case.slug);
    let scenario = Path::new(ROOT).join(&rel);
    let sock = format!("softib-guide-{}-{}", std::process::id(), case.slug);
    let dir = std::env::temp_dir().join(&sock);
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());

    let summary = softib_xmit_wait(&scenario, &dir.join("out"));
    let s = Scenario::load(&scenario).expect("scenario");
    let (_, fabric) =
        run_and_keep(&s, "served", &RunOptions::default(), None, &mut |_, _| {}).expect("run");
    let subnet = Subnet::snapshot(&fabric);
    let lid = |name: &str| -> u16 {
        let n = subnet
            .find_node(name)
            .unwrap_or_else(|| panic!("no node {name}"));
        subnet.nodes[n].ports[1]
            .lid
            .max(subnet.nodes[n].ports[0].lid)
    };

    let served = serve(&scenario, &sock, &dir);
    let frozen = served
        .banner
        .split("frozen at ")
        .nth(1)
        .and_then(|r| r.split(" (").next())
        .unwrap_or("the end")
        .to_string();

    let mut block = format!(
        "{} (written by `GUIDE_TOOLS_REGEN=1 cargo test --release -p softib-cli --test \
         guide_tools`, which also checks it against the tools) -->\n",
        begin_marker(case.slug)
    );
    block.push_str(&format!(
        "The stock tools on the same fabric: `softib sim {rel} --serve` freezes it at the end \
         of the run ({frozen}) and answers their MADs; each tool runs as \
         `IBSIM_SOCKNAME=sim ibsim-run TOOL ...` (Debian ibsim-utils, infiniband-diags). \
         Reading them: {}\n\n",
        case.reading
    ));
    let mut show = |args: &[String], note: &str, out: &str| {
        block.push_str(&format!("`{}`{note}:\n\n```text\n", args.join(" ")));
        for line in out.lines() {
            block.push_str(line.trim_end());
            block.push('\n');
        }
        block.push_str("```\n\n");
    };

    let args = vec!["ibqueryerrors".to_string(), "--skip-sl".to_string()];
    let errors = tool(&served, &args);
    show(&args, "", &errors);
    for &(node, port) in case.ports {
        let name = format!("{node}:{port}");
        let want = port_wait(&summary, &name);
        let args = vec![
            "perfquery".to_string(),
            lid(node).to_string(),
            port.to_string(),
        ];
        let out = tool(&served, &args);
        assert_eq!(
            field(&out, "PortXmitWait"),
            want.to_string(),
            "{}: perfquery's PortXmitWait of {name} differs from softib's summary.json",
            case.slug
        );
        if want > 0 {
            assert!(
                errors.contains(&format!("port {port}: [PortXmitWait == {want}]")),
                "{}: ibqueryerrors does not report {name}'s PortXmitWait {want}:\n{errors}",
                case.slug
            );
        }
        show(
            &args,
            &format!(" ({name}; softib's summary.json: PortXmitWait {want})"),
            &out,
        );
    }
    for extra in case.extra {
        let args: Vec<String> = extra
            .iter()
            .map(
                |a| match a.strip_prefix('{').and_then(|a| a.strip_suffix('}')) {
                    Some(node) => lid(node).to_string(),
                    None => a.to_string(),
                },
            )
            .collect();
        let out = tool(&served, &args);
        show(&args, "", &out);
    }
    block.push_str(&end_marker(case.slug));
    block
}

/// Where `case`'s block sits in the guide: an existing TOOLS block, or (when regenerating)
/// just after the case's GENERATED block.
fn block_range(guide: &str, slug: &str) -> Option<(usize, usize)> {
    let start = guide.find(&format!("{} ", begin_marker(slug)))?;
    let end = start + guide[start..].find(&end_marker(slug))? + end_marker(slug).len();
    Some((start, end))
}

#[test]
fn guide_tool_excerpts_match_the_tools_and_softibs_counters() {
    require_tools();
    let path = Path::new(ROOT).join("docs/troubleshooting.md");
    let mut guide = std::fs::read_to_string(&path).expect("docs/troubleshooting.md");
    let regen = std::env::var_os("GUIDE_TOOLS_REGEN").is_some();
    for case in CASES {
        let block = excerpts(case);
        match block_range(&guide, case.slug) {
            Some((a, b)) if regen => guide.replace_range(a..b, &block),
            Some((a, b)) => assert!(
                guide[a..b] == block,
                "docs/troubleshooting.md's tool excerpts of {} are stale; rewrite them with \
                 GUIDE_TOOLS_REGEN=1 cargo test --release -p softib-cli --test guide_tools\n\
                 --- guide\n{}\n--- tools\n{block}",
                case.slug,
                &guide[a..b]
            ),
            None if regen => {
                let end = format!("<!-- END GENERATED {} -->", case.slug);
                let at = guide
                    .find(&end)
                    .unwrap_or_else(|| panic!("no {end} in the guide"))
                    + end.len();
                guide.insert_str(at, &format!("\n\n{block}"));
            }
            None => panic!(
                "docs/troubleshooting.md has no tool excerpts for {}; write them with \
                 GUIDE_TOOLS_REGEN=1 cargo test --release -p softib-cli --test guide_tools",
                case.slug
            ),
        }
    }
    if regen {
        std::fs::write(&path, guide).expect("write docs/troubleshooting.md");
    }
}
