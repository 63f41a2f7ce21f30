//! module-cycles: finds import cycles between the modules of one crate, for every target of
//! every workspace package, from the source alone (`syn`), in seconds. What counts as an
//! edge is written in [`edges`]; a cycle is a strongly connected component of two or more
//! modules, reported with every path that makes each of its edges.
//!
//! `bench/module-cycles.sh` asks cargo-modules the same question on its own module graph;
//! this tool needs no install beyond the workspace's build, so CI runs it.

pub mod edges;
pub mod graph;
pub mod stats;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub use edges::{Edges, Evidence};
pub use graph::CrateTree;

/// One compilation target: a package's library, binary, test, example or bench root.
#[derive(Clone, Debug)]
pub struct Target {
    /// Package name.
    pub package: String,
    /// e.g. `lib`, `bin main`, `test field_cases`.
    pub kind: String,
    /// The root file.
    pub root: PathBuf,
}

/// The workspace root above `start` (the nearest `Cargo.toml` with a `[workspace]` table).
pub fn workspace_root(start: &Path) -> Result<PathBuf> {
    let mut dir = start.canonicalize()?;
    loop {
        let manifest = dir.join("Cargo.toml");
        if manifest.is_file() {
            let text = fs::read_to_string(&manifest)?;
            let v: toml::Value = toml::from_str(&text)
                .with_context(|| format!("{} does not parse", manifest.display()))?;
            if v.get("workspace").is_some() {
                return Ok(dir);
            }
        }
        if !dir.pop() {
            bail!("no workspace Cargo.toml above {}", start.display());
        }
    }
}

/// The member package directories of the workspace at `root`.
pub fn members(root: &Path) -> Result<Vec<PathBuf>> {
    let text = fs::read_to_string(root.join("Cargo.toml"))?;
    let v: toml::Value = toml::from_str(&text)?;
    let list = v
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .context("workspace.members is missing")?;
    let mut out = Vec::new();
    for m in list {
        let s = m.as_str().context("a workspace member is not a string")?;
        if s.contains('*') {
            bail!("workspace member globs ({s}) are not supported; list the packages");
        }
        out.push(root.join(s));
    }
    Ok(out)
}

/// Every target of the package in `dir`: its library, binaries, tests, examples and
/// benches, found where Cargo looks for them and in the manifest's explicit `path`s.
pub fn targets(dir: &Path) -> Result<Vec<Target>> {
    let manifest = dir.join("Cargo.toml");
    let text =
        fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let v: toml::Value =
        toml::from_str(&text).with_context(|| format!("{} does not parse", manifest.display()))?;
    let package = v
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .with_context(|| format!("{}: no package.name", manifest.display()))?
        .to_string();
    let mut roots: BTreeSet<(String, PathBuf)> = BTreeSet::new();
    let lib = v
        .get("lib")
        .and_then(|l| l.get("path"))
        .and_then(|p| p.as_str())
        .map(|p| dir.join(p))
        .unwrap_or_else(|| dir.join("src/lib.rs"));
    if lib.is_file() {
        roots.insert(("lib".into(), lib));
    }
    if dir.join("src/main.rs").is_file() {
        roots.insert(("bin main".into(), dir.join("src/main.rs")));
    }
    for (table, kind) in [
        ("bin", "bin"),
        ("test", "test"),
        ("example", "example"),
        ("bench", "bench"),
    ] {
        if let Some(list) = v.get(table).and_then(|t| t.as_array()) {
            for t in list {
                if let Some(p) = t.get("path").and_then(|p| p.as_str()) {
                    let name = t.get("name").and_then(|n| n.as_str()).unwrap_or(p);
                    roots.insert((format!("{kind} {name}"), dir.join(p)));
                }
            }
        }
    }
    for (sub, kind) in [
        ("src/bin", "bin"),
        ("tests", "test"),
        ("examples", "example"),
        ("benches", "bench"),
    ] {
        let Ok(entries) = fs::read_dir(dir.join(sub)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        found.sort();
        for p in found {
            let name = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if p.extension().is_some_and(|e| e == "rs") {
                roots.insert((format!("{kind} {name}"), p));
            } else if p.join("main.rs").is_file() {
                roots.insert((format!("{kind} {name}"), p.join("main.rs")));
            }
        }
    }
    // The same file named twice (a [[bin]] path and src/main.rs) is one target.
    let mut seen = BTreeSet::new();
    Ok(roots
        .into_iter()
        .filter(|(_, p)| seen.insert(p.clone()))
        .map(|(kind, root)| Target {
            package: package.clone(),
            kind,
            root,
        })
        .collect())
}

/// One deliberate cycle edge: `package from -> to`, with the reason it stays.
#[derive(Clone, Debug)]
pub struct Allowed {
    /// Package name.
    pub package: String,
    /// Using module (`crate` for the root, else `a::b`).
    pub from: String,
    /// Used module.
    pub to: String,
    /// Why the edge is harmless.
    pub reason: String,
}

/// Reads an allow-list: one `PACKAGE FROM -> TO  # reason` per line, `#` lines are
/// comments. A line without a reason is an error.
pub fn parse_allow(text: &str) -> Result<Vec<Allowed>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (edge, reason) = line
            .split_once('#')
            .with_context(|| format!("allow-list line {}: no `# reason`", n + 1))?;
        let reason = reason.trim();
        let words: Vec<&str> = edge.split_whitespace().collect();
        if reason.is_empty() || words.len() != 4 || words[2] != "->" {
            bail!(
                "allow-list line {}: expected `PACKAGE FROM -> TO  # reason`",
                n + 1
            );
        }
        out.push(Allowed {
            package: words[0].into(),
            from: words[1].into(),
            to: words[3].into(),
            reason: reason.into(),
        });
    }
    Ok(out)
}

/// The outcome for one target.
pub struct TargetReport {
    /// Modules read.
    pub modules: usize,
    /// Edges between them.
    pub edges: usize,
    /// Each cycle: its modules, and its edges with their evidence.
    pub cycles: Vec<Cycle>,
    /// Allow-list entries this target used.
    pub allowed_used: Vec<usize>,
}

/// A strongly connected component of two or more modules.
pub struct Cycle {
    /// Its modules, by name.
    pub modules: Vec<String>,
    /// Its edges: (from, to, evidence).
    pub edges: Vec<(String, String, Vec<Evidence>)>,
}

/// Reads one target and finds its cycles; allow-listed edges are left out of the graph.
pub fn check_target(target: &Target, allow: &[Allowed]) -> Result<TargetReport> {
    let tree = CrateTree::load(&target.root)?;
    let mut edges = tree.edges();
    let mut allowed_used = Vec::new();
    edges.retain(|(a, b), _| {
        let from = tree.modules[*a].display();
        let to = tree.modules[*b].display();
        match allow
            .iter()
            .position(|x| x.package == target.package && x.from == from && x.to == to)
        {
            Some(i) => {
                allowed_used.push(i);
                false
            }
            None => true,
        }
    });
    let n = tree.modules.len();
    let mut adj = vec![Vec::new(); n];
    for &(a, b) in edges.keys() {
        adj[a].push(b);
    }
    let sccs = tarjan(&adj);
    let mut cycles = Vec::new();
    for comp in sccs.into_iter().filter(|c| c.len() > 1) {
        let set: BTreeSet<usize> = comp.iter().copied().collect();
        let mut ce = Vec::new();
        for (&(a, b), ev) in &edges {
            if set.contains(&a) && set.contains(&b) {
                ce.push((
                    tree.modules[a].display(),
                    tree.modules[b].display(),
                    ev.clone(),
                ));
            }
        }
        let mut names: Vec<String> = comp.iter().map(|&m| tree.modules[m].display()).collect();
        names.sort();
        cycles.push(Cycle {
            modules: names,
            edges: ce,
        });
    }
    Ok(TargetReport {
        modules: n,
        edges: edges.len(),
        cycles,
        allowed_used,
    })
}

/// Strongly connected components (Tarjan, iterative so deep module trees cannot overflow).
pub fn tarjan(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on = vec![false; n];
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let mut next = 0;
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        let mut work = vec![(start, 0usize)];
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on[start] = true;
        while let Some(&(v, i)) = work.last() {
            if let Some(&w) = adj[v].get(i) {
                if let Some(top) = work.last_mut() {
                    top.1 += 1;
                }
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on[w] = true;
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some(&(u, _)) = work.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(comp);
                }
            }
        }
    }
    out
}

/// Renders a cycle for a person: its modules, then each edge and the paths that make it.
pub fn describe(target: &Target, c: &Cycle, root: &Path) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ({}): cycle between {}",
        target.package,
        target.kind,
        c.modules.join(", ")
    );
    for (from, to, ev) in &c.edges {
        let _ = writeln!(s, "    {from} -> {to}");
        for e in ev.iter().take(4) {
            let file = e.file.strip_prefix(root).unwrap_or(&e.file);
            let _ = writeln!(s, "        {}:{}  {}", file.display(), e.line, e.path);
        }
        if ev.len() > 4 {
            let _ = writeln!(s, "        ... and {} more", ev.len() - 4);
        }
    }
    s
}
