//! `softib cases [CASE...] [--quick] [--doc GUIDE.md] [--out DIR]`: runs the field-case
//! library (`scenarios/cases/`: classic transport problems and their fixes), prints each case's figures and whether its
//! criteria hold, and with `--doc` regenerates the figures, plots and command outputs of the
//! troubleshooting guide. The full-size runs are the scenario files as bundled; `--quick`
//! runs the shrunk sizes the test suite uses.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use softib_sim::cases::{self, doc, Case, Outcome, Scale};
use softib_sim::report::Report;

/// Arguments of `softib cases`.
#[derive(Debug, clap::Args)]
pub struct CasesArgs {
    /// Cases to run, by number (`1`), slug or slug prefix (`01-credit`); default: all.
    pub cases: Vec<String>,
    /// Run the shrunk sizes of the test suite instead of the full-size scenarios.
    #[arg(long)]
    pub quick: bool,
    /// List the cases and their scenario files, and exit.
    #[arg(long, conflicts_with_all = ["quick", "doc", "out"])]
    pub list: bool,
    /// Regenerate the generated blocks and plots of this guide (docs/troubleshooting.md;
    /// plots go to docs/troubleshooting/). Full size only.
    #[arg(long, value_name = "GUIDE.md", conflicts_with = "quick")]
    pub doc: Option<PathBuf>,
    /// Also write every run's report (summary.json, CSV, SVG) under DIR/<case>/<run>.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

fn selected(args: &CasesArgs) -> Result<Vec<&'static Case>> {
    if args.cases.is_empty() {
        return Ok(cases::all().iter().collect());
    }
    args.cases
        .iter()
        .map(|id| {
            cases::find(id).with_context(|| {
                format!(
                    "no case `{id}` (cases: {})",
                    cases::all()
                        .iter()
                        .map(|c| c.slug)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect()
}

/// Runs `softib cases`.
pub fn run(args: &CasesArgs) -> Result<()> {
    let chosen = selected(args)?;
    if args.list {
        for c in &chosen {
            println!("{:<24} {}", c.slug, c.title);
            for r in c.runs {
                println!("    {:<40} {}", c.path(r.role), r.label);
            }
        }
        return Ok(());
    }
    let scale = if args.quick {
        Scale::Quick
    } else {
        Scale::Full
    };
    // Every run of every chosen case, in parallel; results keep their order.
    let jobs: Vec<(usize, usize)> = chosen
        .iter()
        .enumerate()
        .flat_map(|(ci, c)| (0..c.runs.len()).map(move |ri| (ci, ri)))
        .collect();
    let results: Vec<Result<Report>> = jobs
        .par_iter()
        .map(|&(ci, ri)| {
            let (c, r) = (chosen[ci], &chosen[ci].runs[ri]);
            let rep = c.run_one(r, scale)?;
            eprintln!("ran {}", c.path(r.role));
            Ok(rep)
        })
        .collect();
    let mut results = results.into_iter();
    let mut guide = match &args.doc {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the guide {}", p.display()))?,
        ),
        None => None,
    };
    let mut failed = Vec::new();
    for c in &chosen {
        let mut reports = Vec::new();
        for r in c.runs {
            let rep = results.next().expect("one result per job")?;
            reports.push((r.role, rep));
        }
        let outcome = Outcome { scale, reports };
        let eval = (c.evaluate)(&outcome)?;
        println!("{}", cases::render(c, scale, &eval));
        if !eval.passed() {
            failed.push(c.slug);
        }
        if let Some(dir) = &args.out {
            for (role, rep) in &outcome.reports {
                let sub = dir.join(c.slug).join(role);
                rep.write(&sub)
                    .with_context(|| format!("cannot write {}", sub.display()))?;
            }
        }
        if let (Some(text), Some(path)) = (guide.as_mut(), &args.doc) {
            let (images, rel) = image_dir(path);
            std::fs::create_dir_all(&images)
                .with_context(|| format!("cannot create {}", images.display()))?;
            for p in &eval.plots {
                let f = images.join(doc::image_name(c, p.name));
                std::fs::write(&f, &p.svg)
                    .with_context(|| format!("cannot write {}", f.display()))?;
            }
            *text = doc::splice(text, c, &doc::block(c, &outcome, &eval, &rel))?;
        }
    }
    if let (Some(text), Some(path)) = (guide, &args.doc) {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
        println!("updated {} and its plots", path.display());
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} cases did not meet their criteria: {}",
            failed.len(),
            chosen.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// The plot directory of a guide (`docs/troubleshooting.md` -> `docs/troubleshooting/`)
/// and its name relative to the guide.
fn image_dir(guide: &Path) -> (PathBuf, String) {
    let stem = guide
        .file_stem()
        .map_or_else(|| "cases".to_string(), |s| s.to_string_lossy().into_owned());
    (guide.with_file_name(&stem), stem)
}
