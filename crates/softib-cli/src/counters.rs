//! `softib counters`: shows the counters a tool run published with `--counters FILE`
//! (rewritten every second while the tool runs, and once more when it ends), or compares
//! them with a saved baseline (`--diff BASELINE.json`), flagging every counter that moved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use crate::device::CountersFile;

/// Options of `softib counters`.
#[derive(Debug, Clone, clap::Args)]
pub struct CountersArgs {
    /// The counters file a tool wrote (`--counters FILE`).
    pub file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Compare with this earlier counters file (e.g. a saved baseline run).
    #[arg(long, value_name = "BASELINE.json")]
    pub diff: Option<PathBuf>,
    /// Also list counters that are zero (table output).
    #[arg(long)]
    pub all: bool,
}

fn load(path: &Path) -> anyhow::Result<CountersFile> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| {
        format!(
            "{} is not a softib counters file (write one with a tool's --counters FILE)",
            path.display()
        )
    })
}

/// Runs the subcommand.
pub fn run(a: &CountersArgs) -> anyhow::Result<()> {
    let current = load(&a.file)?;
    match &a.diff {
        None if a.json => println!("{}", serde_json::to_string_pretty(&current)?),
        None => print_table(&current, a.all),
        Some(b) => {
            let baseline = load(b)?;
            let d = diff(&baseline, &current);
            if a.json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                print_diff(&baseline, &current, &d, a.all);
            }
        }
    }
    Ok(())
}

/// Each section's counters, flattened to "section.name" (QPs as "qp 0x11.name").
fn sections(f: &CountersFile) -> Vec<(String, &BTreeMap<String, u64>)> {
    let c = &f.counters;
    let mut v = vec![
        ("device".to_string(), &c.device),
        ("driver".to_string(), &c.driver),
    ];
    for (q, m) in &c.qps {
        v.push((format!("qp {q:#x}"), m));
    }
    v
}

fn print_table(f: &CountersFile, all: bool) {
    println!(
        "{} ({}, {:.1} s after the device opened)",
        f.tool,
        f.state,
        f.elapsed_ms as f64 / 1000.0
    );
    for (name, m) in sections(f) {
        println!("{name}:");
        for (k, v) in m {
            if all || *v != 0 {
                println!("  {k:<32} {v:>16}");
            }
        }
    }
}

/// One counter in a comparison.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Delta {
    /// Value in the baseline (absent: 0).
    pub baseline: u64,
    /// Value now (absent: 0).
    pub current: u64,
    /// current - baseline.
    pub delta: i128,
}

/// A comparison: every counter of either file by section, and the ones that moved.
#[derive(Debug, Serialize)]
pub struct Diff {
    /// Section -> counter -> values.
    pub sections: BTreeMap<String, BTreeMap<String, Delta>>,
    /// "section.counter" of every counter whose value differs.
    pub moved: Vec<String>,
}

/// Compares two counter files, section by section (QPs match by number).
pub fn diff(baseline: &CountersFile, current: &CountersFile) -> Diff {
    let b: BTreeMap<String, &BTreeMap<String, u64>> = sections(baseline).into_iter().collect();
    let c: BTreeMap<String, &BTreeMap<String, u64>> = sections(current).into_iter().collect();
    let empty = BTreeMap::new();
    let mut out = Diff {
        sections: BTreeMap::new(),
        moved: Vec::new(),
    };
    let names: std::collections::BTreeSet<&String> = b.keys().chain(c.keys()).collect();
    for s in names {
        let bm = b.get(s).copied().unwrap_or(&empty);
        let cm = c.get(s).copied().unwrap_or(&empty);
        let keys: std::collections::BTreeSet<&String> = bm.keys().chain(cm.keys()).collect();
        let mut sec = BTreeMap::new();
        for k in keys {
            let (x, y) = (
                bm.get(k).copied().unwrap_or(0),
                cm.get(k).copied().unwrap_or(0),
            );
            if x != y {
                out.moved.push(format!("{s}.{k}"));
            }
            sec.insert(
                k.clone(),
                Delta {
                    baseline: x,
                    current: y,
                    delta: i128::from(y) - i128::from(x),
                },
            );
        }
        out.sections.insert(s.clone(), sec);
    }
    out
}

fn print_diff(baseline: &CountersFile, current: &CountersFile, d: &Diff, all: bool) {
    println!("baseline: {} ({})", baseline.tool, baseline.state);
    println!("current:  {} ({})", current.tool, current.state);
    for (s, sec) in &d.sections {
        let rows: Vec<_> = sec
            .iter()
            .filter(|(_, v)| all || v.baseline != 0 || v.current != 0)
            .collect();
        if rows.is_empty() {
            continue;
        }
        println!("{s}:");
        println!(
            "  {:<32} {:>16} {:>16} {:>17}",
            "counter", "baseline", "current", "delta"
        );
        for (k, v) in rows {
            let flag = if v.delta != 0 { " *" } else { "" };
            println!(
                "  {k:<32} {:>16} {:>16} {:>+17}{flag}",
                v.baseline, v.current, v.delta
            );
        }
    }
    if d.moved.is_empty() {
        println!("no counter moved");
    } else {
        println!("{} counter(s) moved (marked *)", d.moved.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_net::counters::CounterSnapshot;

    fn file(retrans: u64, qp: Option<u32>) -> CountersFile {
        let mut c = CounterSnapshot::default();
        c.device.insert("retransmitted_packets".into(), retrans);
        c.device.insert("packets_sent".into(), 100);
        if let Some(q) = qp {
            c.qps.insert(q, [("packets_sent".to_string(), 100)].into());
        }
        CountersFile {
            tool: "write-bw client".into(),
            state: "finished".into(),
            updated_unix_ms: 0,
            elapsed_ms: 1000,
            counters: c,
        }
    }

    #[test]
    fn diff_flags_exactly_what_moved() {
        let d = diff(&file(1, Some(0x11)), &file(5, Some(0x12)));
        assert_eq!(
            d.moved,
            vec![
                "device.retransmitted_packets",
                "qp 0x11.packets_sent",
                "qp 0x12.packets_sent"
            ]
        );
        assert_eq!(d.sections["device"]["retransmitted_packets"].delta, 4);
        assert_eq!(d.sections["device"]["packets_sent"].delta, 0);
        assert_eq!(d.sections["qp 0x11"]["packets_sent"].delta, -100);
    }
}
