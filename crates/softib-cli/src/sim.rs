//! `softib sim [SCENARIO] [--seed N] [--out DIR]`: runs a fabric scenario, prints what
//! happened and writes `summary.json`, `counters.csv`, `flows.csv` and SVG plots.
//! `--sweep KEY=V1,V2,...` runs variants in parallel and tabulates them; `--compare A B`
//! runs two scenarios and sets their counters side by side.
//!
//! `--threads N` splits the fabric into N partitions on N threads, and a build with the `mpi`
//! feature run under `mpirun -np N` one partition per rank (rank 0 prints and writes); the
//! output is the serial run's, byte for byte.
//!
//! SCENARIO is a TOML file, or the name of a bundled scenario (`softib sim --list`); with
//! none, the bundled default runs. The wall clock is read here only, for the progress bar.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use softib_sim::report::compare::{compare, render as render_compare};
use softib_sim::report::run::{run_threads, run_with, RunOptions};
use softib_sim::report::text::{render, render_explain};
use softib_sim::report::Report;
use softib_sim::scenario::overrides::{apply_to_text, parse_assignment, set_key, value_from_text};
use softib_sim::scenario::Scenario;

/// The scenarios shipped in `scenarios/`, by name.
pub const BUNDLED: [(&str, &str); 9] = [
    ("b2b-edr", include_str!("../../../scenarios/b2b-edr.toml")),
    (
        "switch-1to1",
        include_str!("../../../scenarios/switch-1to1.toml"),
    ),
    (
        "incast-8to1",
        include_str!("../../../scenarios/incast-8to1.toml"),
    ),
    (
        "fat-tree-648-all-to-all",
        include_str!("../../../scenarios/fat-tree-648-all-to-all.toml"),
    ),
    (
        "fat-tree-3456-permutation",
        include_str!("../../../scenarios/fat-tree-3456-permutation.toml"),
    ),
    (
        "cc-victim",
        include_str!("../../../scenarios/cc-victim.toml"),
    ),
    (
        "traffic-mix",
        include_str!("../../../scenarios/traffic-mix.toml"),
    ),
    (
        "mgmt-fat-tree",
        include_str!("../../../scenarios/mgmt-fat-tree.toml"),
    ),
    (
        "opensm-fat-tree",
        include_str!("../../../scenarios/opensm-fat-tree.toml"),
    ),
];

/// What `softib sim` runs without a scenario.
pub const DEFAULT_SCENARIO: &str = "b2b-edr";

/// Arguments of `softib sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Scenario file (TOML) or bundled scenario name; default: the bundled `b2b-edr`.
    pub scenario: Option<String>,
    /// Seed of every random stream (overrides the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory for the output files [default: softib-sim/NAME].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run one variant per value of a scenario key (dotted, e.g. fabric.rx_buffer_bytes or
    /// stream[0].payload_bytes) in parallel and tabulate them; repeat for a cross product.
    #[arg(long, value_name = "KEY=V1,V2,...")]
    pub sweep: Vec<String>,
    /// Set a scenario key before running (dotted, as for --sweep), e.g. `--set
    /// duration_us=200` to shrink a run or `--set flow[0].mtu=1024`; repeatable. Applies
    /// to both scenarios of --compare.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Run scenarios A and B and show the counter and bandwidth differences side by side.
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with_all = ["scenario", "sweep"])]
    pub compare: Option<Vec<String>>,
    /// List the bundled scenarios and exit.
    #[arg(long, conflicts_with_all = ["scenario", "sweep", "compare"])]
    pub list: bool,
    /// Also say what limited each flow (credits, congestion control, retransmissions, ...)
    /// and cite the counters that show it.
    #[arg(long, conflicts_with_all = ["sweep", "list"])]
    pub explain: bool,
    /// Capture the packets these HCAs receive (comma-separated names) into capture.pcap
    /// (ERF records of type InfiniBand in LINKTYPE_ERF, which stock Wireshark opens; CRCs as
    /// on the wire; `softib decode` reads it).
    #[arg(long, value_name = "HOST,...", value_delimiter = ',')]
    pub pcap: Vec<String>,
    /// Capture what crosses these ports in both directions (NODE:PORT, comma-separated or
    /// repeated, switch ports too; adds to the scenario's `pcap_ports`) into capture.pcap.
    /// Link-level flow-control packets are not captured (tshark 4.0 cannot decode them,
    /// see docs/design/fabric.md "Captures"); the counters give their number.
    #[arg(
        long = "pcap-port",
        value_name = "NODE:PORT,...",
        value_delimiter = ','
    )]
    pub pcap_port: Vec<String>,
    /// Split the fabric into N partitions (each leaf switch with its hosts stays whole) and
    /// run them on N threads (conservative parallel simulation). The output is the serial
    /// run's, byte for byte; only the wall time changes.
    #[arg(long, value_name = "N", conflicts_with_all = ["sweep", "compare", "list", "serve", "replay"])]
    pub threads: Option<usize>,
    /// Write no files, only print.
    #[arg(long, conflicts_with = "out")]
    pub no_files: bool,
    /// Run the scenario to its end (or to --serve-at), freeze the fabric and answer the
    /// management MADs of stock tools run under `ibsim-run` (infiniband-diags: ibnetdiscover,
    /// iblinkinfo, perfquery, smpquery, ibroute, ...) until killed. See docs/design/management.md.
    #[arg(long, conflicts_with_all = ["sweep", "compare", "list", "replay"])]
    pub serve: bool,
    /// Freeze the fabric at this simulated time (microseconds) instead of the scenario's end.
    #[arg(long, value_name = "US")]
    pub serve_at: Option<f64>,
    /// Write every MAD exchange of --serve into this file (default: mads.log in the output
    /// directory, none with --no-files).
    #[arg(long, value_name = "FILE")]
    pub mad_log: Option<PathBuf>,
    /// Replay a MAD log of --serve against the scenario frozen at the same time and check
    /// that every response comes out bit for bit the same (exit status 1 if not).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["sweep", "compare", "list"])]
    pub replay: Option<PathBuf>,
    /// Base name of the abstract sockets --serve listens on (the tools' IBSIM_SOCKNAME).
    #[arg(long, value_name = "NAME", default_value = "sim")]
    pub sock_name: String,
    /// Serve over UDP on 127.0.0.1 instead: control on PORT, client sockets on PORT+1..+10
    /// (the tools' IBSIM_SERVER_NAME=127.0.0.1 IBSIM_SERVER_PORT=PORT).
    #[arg(long, value_name = "PORT", conflicts_with = "sock_name")]
    pub udp_port: Option<u16>,
}

/// Writes `text` to stdout; a closed pipe (`softib sim | head`) ends the output quietly.
pub(crate) fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}

/// A loaded scenario: its name, text and parsed form.
pub(crate) struct Loaded {
    pub(crate) name: String,
    text: String,
    /// The directory the files the scenario names are relative to (its own file's; the
    /// current directory for a bundled scenario).
    dir: std::path::PathBuf,
    pub(crate) scenario: Scenario,
}

/// Loads a scenario from a path, or a bundled scenario by name.
pub(crate) fn load(arg: Option<&str>, seed: Option<u64>, sets: &[String]) -> Result<Loaded> {
    let arg = arg.unwrap_or(DEFAULT_SCENARIO);
    let path = Path::new(arg);
    let mut dir = std::path::PathBuf::from(".");
    let (name, text, origin) = if path.exists() {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            dir = parent.to_path_buf();
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read scenario {}", path.display()))?;
        let name = path.file_stem().map_or_else(
            || "scenario".to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        (name, text, path.display().to_string())
    } else if let Some((n, t)) = BUNDLED.iter().find(|(n, _)| *n == arg) {
        (
            n.to_string(),
            t.to_string(),
            format!("bundled scenario {n}"),
        )
    } else {
        bail!(
            "no scenario file `{arg}`, and no bundled scenario of that name (bundled: {})",
            BUNDLED.map(|(n, _)| n).join(", ")
        );
    };
    let sets = sets
        .iter()
        .map(|a| parse_assignment(a).map_err(|e| anyhow!("--set {e}")))
        .collect::<Result<Vec<_>>>()?;
    let text = apply_to_text(&text, &sets).map_err(|e| anyhow!("--set in {origin}: {e}"))?;
    let mut scenario = Scenario::parse_in(&text, &dir).with_context(|| format!("in {origin}"))?;
    if let Some(s) = seed {
        scenario.seed = s;
    }
    Ok(Loaded {
        name,
        text,
        dir,
        scenario,
    })
}

/// A progress bar that appears only on a terminal and only once a run has taken more
/// than a second of wall time.
struct Progress {
    bar: ProgressBar,
    started: Instant,
    tty: bool,
    shown: Mutex<bool>,
}

impl Progress {
    fn new(len: u64, what: &str) -> Self {
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({elapsed}, ~{eta} left)")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        Progress {
            bar,
            started: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            shown: Mutex::new(false),
        }
    }

    fn tick(&self, n: u64) {
        self.bar.inc(n);
        if self.tty && self.started.elapsed() > Duration::from_secs(1) {
            let mut shown = self.shown.lock().expect("not poisoned");
            if !*shown {
                *shown = true;
                self.bar.set_draw_target(ProgressDrawTarget::stderr());
            }
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Runs `l` on `threads` partitions (`--threads`).
fn run_threaded(
    l: &Loaded,
    opts: &RunOptions,
    threads: usize,
    progress: &Progress,
) -> Result<Report> {
    let steps = 1000u64;
    let last = std::sync::atomic::AtomicU64::new(0);
    let report = run_threads(&l.scenario, &l.name, opts, threads, &|done, total| {
        let now = (done as u128 * steps as u128 / total.max(1) as u128) as u64;
        let before = last.swap(now, std::sync::atomic::Ordering::Relaxed);
        progress.tick(now.saturating_sub(before));
    })
    .with_context(|| format!("running {} on {threads} threads", l.name))?;
    Ok(report)
}

fn run_one(l: &Loaded, opts: &RunOptions, progress: &Progress) -> Result<Report> {
    let mut last = 0u64;
    let steps = 1000u64;
    let report = run_with(&l.scenario, &l.name, opts, &mut |done, total| {
        let now = (done as u128 * steps as u128 / total.max(1) as u128) as u64;
        progress.tick(now - last);
        last = now;
    })
    .with_context(|| format!("running {}", l.name))?;
    Ok(report)
}

fn write_files(report: &Report, dir: &Path) -> Result<()> {
    let files = report
        .write(dir)
        .with_context(|| format!("cannot write the report into {}", dir.display()))?;
    let mut text = format!("\nwrote {}:\n", dir.display());
    for f in files {
        if let Some(n) = f.file_name() {
            text.push_str(&format!("  {}\n", n.to_string_lossy()));
        }
    }
    emit(&text)
}

pub(crate) fn out_dir(args: &SimArgs, name: &str) -> Option<PathBuf> {
    if args.no_files {
        return None;
    }
    Some(
        args.out
            .clone()
            .unwrap_or_else(|| PathBuf::from("softib-sim").join(name)),
    )
}

pub(crate) fn options(args: &SimArgs) -> RunOptions {
    RunOptions {
        capture_hosts: args.pcap.clone(),
        capture_ports: args.pcap_port.clone(),
        program: None,
    }
}

/// Runs `softib sim`. `serve` runs the live server (`--serve`, `--replay`): main.rs hands in
/// `serve::run`, which builds on this module, so this module does not import it.
pub fn run_cli(args: &SimArgs, serve: fn(&SimArgs) -> Result<()>) -> Result<()> {
    if args.list {
        let mut text = String::new();
        for (n, t) in BUNDLED {
            let what = t
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# "))
                .unwrap_or("");
            text.push_str(&format!("{n:<28} {what}\n"));
        }
        return emit(&text);
    }
    if let Some(pair) = &args.compare {
        return run_compare(args, &pair[0], &pair[1]);
    }
    if !args.sweep.is_empty() {
        return run_sweep(args);
    }
    if args.serve || args.replay.is_some() {
        return serve(args);
    }
    let l = load(args.scenario.as_deref(), args.seed, &args.set)?;
    #[cfg(feature = "mpi")]
    if softib_sim::mpi_exchange::launched_by_mpirun() {
        return run_mpi(args, &l);
    }
    let progress = Progress::new(1000, &l.name);
    let report = match args.threads {
        Some(n) => run_threaded(&l, &options(args), n, &progress),
        None => run_one(&l, &options(args), &progress),
    };
    progress.finish();
    let report = report?;
    emit(&render(&report.summary))?;
    if args.explain {
        emit(&format!("\n{}", render_explain(&report.summary)))?;
    }
    if let Some(dir) = out_dir(args, &l.name) {
        write_files(&report, &dir)?;
    }
    Ok(())
}

/// `mpirun -np N softib sim ...`: this rank runs its partition; rank 0 prints and writes
/// what a serial run would, the other ranks stay silent.
#[cfg(feature = "mpi")]
fn run_mpi(args: &SimArgs, l: &Loaded) -> Result<()> {
    if args.threads.is_some() {
        bail!("--threads and mpirun do not combine: under mpirun each rank runs one partition (use -np N)");
    }
    let mut session = softib_sim::mpi_exchange::MpiSession::init()
        .ok_or_else(|| anyhow!("MPI was already initialised in this process"))?;
    let rank = session.exchange.rank();
    let ranks = session.exchange.size();
    let report = softib_sim::report::run::run_mpi(
        &l.scenario,
        &l.name,
        &options(args),
        &mut session.exchange,
        &mut |_, _| {},
    )
    .with_context(|| format!("running {} on {ranks} MPI ranks (rank {rank})", l.name))?;
    let Some(report) = report else {
        return Ok(());
    };
    emit(&render(&report.summary))?;
    if args.explain {
        emit(&format!("\n{}", render_explain(&report.summary)))?;
    }
    if let Some(dir) = out_dir(args, &l.name) {
        write_files(&report, &dir)?;
    }
    Ok(())
}

fn run_compare(args: &SimArgs, a: &str, b: &str) -> Result<()> {
    let la = load(Some(a), args.seed, &args.set)?;
    let lb = load(Some(b), args.seed, &args.set)?;
    let progress = Progress::new(2000, "compare");
    let opts = options(args);
    let (ra, rb) = rayon::join(
        || run_one(&la, &opts, &progress),
        || run_one(&lb, &opts, &progress),
    );
    progress.finish();
    let (ra, rb) = (ra?, rb?);
    emit(&render_compare(&compare(&ra.summary, &rb.summary)))?;
    if args.explain {
        for r in [&ra, &rb] {
            emit(&format!(
                "\n{}: {}",
                r.summary.scenario.name,
                render_explain(&r.summary)
            ))?;
        }
    }
    if let Some(dir) = out_dir(args, &format!("compare-{}-{}", la.name, lb.name)) {
        for (r, tag) in [(&ra, "A"), (&rb, "B")] {
            write_files(r, &dir.join(format!("{tag}-{}", r.summary.scenario.name)))?;
        }
    }
    Ok(())
}

/// One `--sweep KEY=V1,V2,...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// Dotted key.
    pub key: String,
    /// Values, as written.
    pub values: Vec<String>,
}

/// Parses `KEY=V1,V2,...`.
pub fn parse_sweep(s: &str) -> Result<Sweep> {
    let (key, values) = s.split_once('=').ok_or_else(|| {
        anyhow!("--sweep {s}: expected KEY=V1,V2,... (e.g. fabric.rx_buffer_bytes=8192,65536)")
    })?;
    let key = key.trim();
    if key.is_empty() {
        bail!("--sweep {s}: the key is empty");
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        bail!("--sweep {s}: a value is empty");
    }
    Ok(Sweep {
        key: key.to_string(),
        values,
    })
}

/// Every combination of the sweeps' values, as (label, key=value pairs).
fn variants(sweeps: &[Sweep]) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for s in sweeps {
        let mut next = Vec::new();
        for v in &out {
            for val in &s.values {
                let mut w = v.clone();
                w.push((s.key.clone(), val.clone()));
                next.push(w);
            }
        }
        out = next;
    }
    out
}

fn run_sweep(args: &SimArgs) -> Result<()> {
    let base = load(args.scenario.as_deref(), args.seed, &args.set)?;
    let sweeps = args
        .sweep
        .iter()
        .map(|s| parse_sweep(s))
        .collect::<Result<Vec<_>>>()?;
    let mut loaded = Vec::new();
    for combo in variants(&sweeps) {
        let mut doc: toml::Table = toml::from_str(&base.text).context("re-reading the scenario")?;
        for (k, v) in &combo {
            set_key(&mut doc, k, value_from_text(v)).map_err(|e| anyhow!("--sweep {e}"))?;
        }
        if let Some(s) = args.seed {
            doc.insert("seed".into(), toml::Value::Integer(s as i64));
        }
        let label = combo
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let text = toml::to_string(&doc).context("writing the variant")?;
        let scenario =
            Scenario::parse_in(&text, &base.dir).map_err(|e| anyhow!("variant {label}: {e}"))?;
        loaded.push((
            label,
            Loaded {
                name: base.name.clone(),
                text,
                dir: base.dir.clone(),
                scenario,
            },
        ));
    }
    let progress = Progress::new(
        1000 * loaded.len() as u64,
        &format!("{} variants", loaded.len()),
    );
    let results: Vec<Result<Report>> = loaded
        .par_iter()
        .map(|(_, l)| run_one(l, &options(args), &progress))
        .collect();
    progress.finish();
    let mut rows = Vec::new();
    for ((label, _), r) in loaded.iter().zip(results) {
        rows.push((
            label.clone(),
            r.with_context(|| format!("variant {label}"))?,
        ));
    }
    emit(&sweep_table(&base.name, &rows))?;
    if let Some(dir) = out_dir(args, &format!("sweep-{}", base.name)) {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::write(dir.join("sweep.csv"), sweep_csv(&rows))
            .with_context(|| format!("cannot write {}", dir.join("sweep.csv").display()))?;
        for (label, r) in &rows {
            let sub = dir.join(label.replace([' ', '/'], "_"));
            r.write(&sub)
                .with_context(|| format!("cannot write the report into {}", sub.display()))?;
        }
        emit(&format!(
            "\nwrote {} (sweep.csv and one directory per variant)\n",
            dir.display()
        ))?;
    }
    Ok(())
}

/// The figures a sweep tabulates for one run.
fn sweep_figures(r: &Report) -> (f64, f64, f64, f64, u64, String, u64, u64) {
    let s = &r.summary;
    let (agg, min, p50, p99) = s.flow_totals.as_ref().map_or((0.0, 0.0, 0.0, 0.0), |t| {
        (
            t.aggregate_gbps,
            t.min_gbps,
            t.latency.p50_us,
            t.latency.p99_us,
        )
    });
    let worst = s.ports.iter().max_by(|a, b| {
        a.port_xmit_wait
            .cmp(&b.port_xmit_wait)
            .then(b.port.cmp(&a.port))
    });
    let (wait, at) = worst.map_or((0, String::new()), |p| (p.port_xmit_wait, p.port.clone()));
    (
        agg,
        min,
        p50,
        p99,
        wait,
        at,
        s.totals.errors,
        s.totals.drops,
    )
}

fn sweep_table(name: &str, rows: &[(String, Report)]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "sweep of {name}: {} variants", rows.len());
    let w = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(7).max(7);
    let _ = writeln!(
        o,
        "  {:<w$} {:>12} {:>12} {:>9} {:>9} {:>14} {:<10} {:>7} {:>6}",
        "variant",
        "aggr Gb/s",
        "min flow",
        "p50 us",
        "p99 us",
        "max XmitWait",
        "at",
        "errors",
        "drops"
    );
    for (label, r) in rows {
        let (agg, min, p50, p99, wait, at, err, drops) = sweep_figures(r);
        let _ = writeln!(
            o,
            "  {label:<w$} {agg:>12.3} {min:>12.3} {p50:>9.3} {p99:>9.3} {wait:>14} {at:<10} {err:>7} {drops:>6}"
        );
    }
    o
}

fn sweep_csv(rows: &[(String, Report)]) -> String {
    let mut o = String::from(
        "variant,aggregate_gbps,min_flow_gbps,p50_us,p99_us,max_PortXmitWait,max_PortXmitWait_port,errors,drops\n",
    );
    for (label, r) in rows {
        let (agg, min, p50, p99, wait, at, err, drops) = sweep_figures(r);
        o.push_str(&format!(
            "\"{}\",{agg:.4},{min:.4},{p50:.3},{p99:.3},{wait},{at},{err},{drops}\n",
            label.replace('"', "\"\"")
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_multiply() {
        let v = variants(&[
            parse_sweep("a=1,2").unwrap(),
            parse_sweep("b=x,y,z").unwrap(),
        ]);
        assert_eq!(v.len(), 6);
        assert_eq!(
            v[5],
            vec![("a".into(), "2".into()), ("b".into(), "z".into())]
        );
        assert!(parse_sweep("novalue").is_err());
        assert!(parse_sweep("a=1,,2").is_err());
    }

    #[test]
    fn every_bundled_scenario_parses() {
        for (name, text) in BUNDLED {
            Scenario::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
