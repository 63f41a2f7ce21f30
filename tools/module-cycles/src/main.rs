//! `module-cycles [--stats] [--allow FILE] [PACKAGE_DIR...]`: checks every target of every
//! workspace package (or of the packages given) for import cycles between its modules.
//! Exit status 0: no cycle; 1: a cycle (each printed with the paths that make it) or a stale
//! allow-list entry; 2: a file that does not parse, a missing module file, or bad usage.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use module_cycles::{
    check_target, describe, members, parse_allow, stats, targets, workspace_root, CrateTree,
};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("module-cycles: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool> {
    let mut show_stats = false;
    let mut allow_file: Option<PathBuf> = None;
    let mut dirs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--stats" => show_stats = true,
            "--allow" => allow_file = Some(args.next().context("--allow needs a file")?.into()),
            "-h" | "--help" => {
                println!(
                    "usage: module-cycles [--stats] [--allow FILE] [PACKAGE_DIR...]\n\
                     Checks every target of every workspace package (or of the packages\n\
                     given) for import cycles between its modules. --stats also prints\n\
                     lines per package, the largest files and the longest functions.\n\
                     The allow-list defaults to tools/module-cycles/allow.txt."
                );
                return Ok(true);
            }
            s if s.starts_with('-') => bail!("unknown option {s}"),
            s => dirs.push(PathBuf::from(s)),
        }
    }
    let root = workspace_root(&std::env::current_dir()?)?;
    if dirs.is_empty() {
        dirs = members(&root)?;
    }
    let allow_path = allow_file.unwrap_or_else(|| root.join("tools/module-cycles/allow.txt"));
    let allow = if allow_path.is_file() {
        parse_allow(&std::fs::read_to_string(&allow_path)?)
            .with_context(|| allow_path.display().to_string())?
    } else {
        Vec::new()
    };
    let mut used = vec![false; allow.len()];
    let mut clean = true;
    let mut total_cycles = 0;
    for dir in &dirs {
        let ts = targets(dir)?;
        if ts.is_empty() {
            bail!("{}: no targets found", dir.display());
        }
        let mut modules = 0;
        let mut edges = 0;
        let mut cycles = 0;
        for t in &ts {
            let r =
                check_target(t, &allow).with_context(|| format!("{} ({})", t.package, t.kind))?;
            modules += r.modules;
            edges += r.edges;
            cycles += r.cycles.len();
            for i in r.allowed_used {
                used[i] = true;
            }
            for c in &r.cycles {
                print!("{}", describe(t, c, &root));
            }
        }
        println!(
            "{}: {} targets, {modules} modules, {edges} edges, {}",
            ts[0].package,
            ts.len(),
            if cycles == 0 {
                "no cycles".to_string()
            } else {
                format!("{cycles} cycle(s)")
            }
        );
        total_cycles += cycles;
        if show_stats {
            print_stats(dir, &ts)?;
        }
    }
    for (a, u) in allow.iter().zip(&used) {
        if !*u {
            println!(
                "stale allow-list entry (no such edge any more): {} {} -> {}",
                a.package, a.from, a.to
            );
            clean = false;
        }
    }
    if total_cycles > 0 {
        println!("module-cycles: {total_cycles} cycle(s)");
        clean = false;
    }
    Ok(clean)
}

fn print_stats(dir: &std::path::Path, ts: &[module_cycles::Target]) -> Result<()> {
    // The library (or the binary of a binary-only package) is the package's source.
    let Some(main) = ts
        .iter()
        .find(|t| t.kind == "lib")
        .or_else(|| ts.iter().find(|t| t.kind.starts_with("bin")))
    else {
        return Ok(());
    };
    let mut lines = 0;
    let mut files = Vec::new();
    let mut fns = Vec::new();
    let mut roots: Vec<&module_cycles::Target> = ts
        .iter()
        .filter(|t| t.root.starts_with(dir.join("src")))
        .collect();
    if roots.is_empty() {
        roots.push(main);
    }
    let mut seen = std::collections::BTreeSet::new();
    for t in roots {
        let tree = CrateTree::load(&t.root)?;
        for (f, n) in stats::file_lines(&tree)? {
            if seen.insert(f.clone()) {
                lines += n;
                files.push((f, n));
            }
        }
        fns.extend(stats::functions(&tree));
    }
    files.sort_by_key(|f| std::cmp::Reverse(f.1));
    fns.sort_by_key(|f| std::cmp::Reverse(f.lines));
    println!("    src lines: {lines} in {} files", files.len());
    let largest: Vec<String> = files
        .iter()
        .take(6)
        .map(|(f, n)| {
            let rel = f.strip_prefix(dir.join("src")).unwrap_or(f);
            format!("{} {n}", rel.display())
        })
        .collect();
    println!("    largest files: {}", largest.join(", "));
    let longest: Vec<String> = fns
        .iter()
        .take(3)
        .map(|f| format!("{} ({} lines)", f.name, f.lines))
        .collect();
    println!("    longest functions: {}", longest.join("; "));
    Ok(())
}
