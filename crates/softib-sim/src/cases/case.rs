//! What a field case is: its scenario runs ([`CaseRun`]), the scale it runs at
//! ([`Scale`]), the [`Outcome`] of running it, and the [`Evaluation`] (figures, checks,
//! plots) its module makes of the reports, rendered as text by [`render`].

use crate::report::run::{run as run_scenario, RunError};
use crate::report::Report;
use crate::scenario::overrides::{parse_with, OverrideError};
use crate::scenario::Scenario;

/// How large a case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// The scenario files as bundled (what the guide shows).
    Full,
    /// The case's `quick` overrides applied: the same fabric and traffic, shorter runs or
    /// fewer repetitions, a few seconds at most in a release build.
    Quick,
}

impl Scale {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Full => "full",
            Scale::Quick => "quick",
        }
    }
}

/// One scenario of a case.
#[derive(Clone, Copy, Debug)]
pub struct CaseRun {
    /// Its role, also its file stem (`problem`, `fix`, ...); `<slug>/<stem>` names a
    /// scenario of another case that this one shows again (a look-alike).
    pub role: &'static str,
    /// What it shows, for tables and plots.
    pub label: &'static str,
    /// The bundled TOML text.
    pub text: &'static str,
}

/// A field case.
pub struct Case {
    /// Directory name under `scenarios/cases/` (`01-credit-starvation`).
    pub slug: &'static str,
    /// One line.
    pub title: &'static str,
    /// Its scenarios, in the order tables show them.
    pub runs: &'static [CaseRun],
    /// Scenario keys set for [`Scale::Quick`]: `key` for every run, `role:key` for one.
    pub quick: &'static [(&'static str, &'static str)],
    /// Measures the runs and judges them.
    pub evaluate: fn(&Outcome) -> Result<Evaluation, CaseError>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case").field("slug", &self.slug).finish()
    }
}

/// Why a case could not run or be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// A bundled scenario did not parse with the scale's overrides.
    #[error("case {case}, {role}: {source}")]
    Scenario {
        /// Case slug.
        case: &'static str,
        /// Run role.
        role: &'static str,
        /// The error.
        source: Box<OverrideError>,
    },
    /// The simulation could not be set up.
    #[error("case {case}, {role}: {source}")]
    Run {
        /// Case slug.
        case: &'static str,
        /// Run role.
        role: &'static str,
        /// The error.
        source: Box<RunError>,
    },
    /// A report lacks what the evaluation needs (a flow, a port, a host).
    #[error("{0}")]
    Missing(String),
    /// The guide lacks the markers of a case's generated block.
    #[error("{0}")]
    Doc(String),
}

/// Every run of a case, finished.
pub struct Outcome {
    /// The scale they ran at.
    pub scale: Scale,
    /// (role, report), in [`Case::runs`] order.
    pub reports: Vec<(&'static str, Report)>,
}

impl Outcome {
    /// The report of `role`.
    pub fn report(&self, role: &str) -> Result<&Report, CaseError> {
        self.reports
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, r)| r)
            .ok_or_else(|| CaseError::Missing(format!("no run called `{role}`")))
    }

    /// The reports of every run of `case`, in the case's run (column) order.
    pub fn reports_in_order(&self, case: &Case) -> Result<Vec<&Report>, CaseError> {
        case.runs.iter().map(|r| self.report(r.role)).collect()
    }
}

/// One criterion of a case, judged on measured figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// What must hold, in words (the criterion).
    pub claim: String,
    /// The figures it was judged on.
    pub measured: String,
    /// Whether it held.
    pub holds: bool,
}

/// A row of a case's table: a quantity in each run.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The quantity, with its unit.
    pub what: String,
    /// One value per column.
    pub values: Vec<String>,
}

/// An SVG plot of a case.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    /// File stem (`bandwidth`): the guide stores it as `<slug>-<name>.svg`.
    pub name: &'static str,
    /// What it shows.
    pub caption: String,
    /// The document.
    pub svg: String,
}

/// What a case measured and concluded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    /// Column heads (run labels).
    pub columns: Vec<String>,
    /// The figures.
    pub rows: Vec<Row>,
    /// The criteria.
    pub checks: Vec<Check>,
    /// Plots.
    pub plots: Vec<Plot>,
}

impl Evaluation {
    /// True if every check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.holds)
    }

    /// Adds a row.
    pub fn row(&mut self, what: impl Into<String>, values: Vec<String>) {
        self.rows.push(Row {
            what: what.into(),
            values,
        });
    }

    /// Adds a check.
    pub fn check(&mut self, claim: impl Into<String>, measured: impl Into<String>, holds: bool) {
        self.checks.push(Check {
            claim: claim.into(),
            measured: measured.into(),
            holds,
        });
    }
}

impl Case {
    /// The case number (the slug's leading digits).
    pub fn number(&self) -> u32 {
        self.slug
            .split('-')
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0)
    }

    /// The path of a run's scenario, relative to the repository root (a role
    /// `<slug>/<stem>` is another case's scenario).
    pub fn path(&self, role: &str) -> String {
        match role.split_once('/') {
            Some((slug, stem)) => format!("scenarios/cases/{slug}/{stem}.toml"),
            None => format!("scenarios/cases/{}/{role}.toml", self.slug),
        }
    }

    /// The overrides of `scale` for run `role`, as (key, value) strings. A quick key
    /// written `role:key` applies to that run only.
    pub fn overrides(&self, scale: Scale, role: &str) -> Vec<(String, String)> {
        match scale {
            Scale::Full => Vec::new(),
            Scale::Quick => self
                .quick
                .iter()
                .filter_map(|(k, v)| match k.split_once(':') {
                    Some((r, key)) if r == role => Some((key.to_string(), v.to_string())),
                    Some(_) => None,
                    None => Some((k.to_string(), v.to_string())),
                })
                .collect(),
        }
    }

    /// The scenario of `run` at `scale`.
    pub fn scenario(&self, run: &CaseRun, scale: Scale) -> Result<Scenario, CaseError> {
        parse_with(run.text, &self.overrides(scale, run.role)).map_err(|source| {
            CaseError::Scenario {
                case: self.slug,
                role: run.role,
                source: Box::new(source),
            }
        })
    }

    /// Runs one scenario of the case (the report is named `<slug>/<role>`).
    pub fn run_one(&self, run: &CaseRun, scale: Scale) -> Result<Report, CaseError> {
        let s = self.scenario(run, scale)?;
        run_scenario(&s, &format!("{}/{}", self.slug, run.role), &mut |_, _| {}).map_err(|source| {
            CaseError::Run {
                case: self.slug,
                role: run.role,
                source: Box::new(source),
            }
        })
    }

    /// Runs every scenario of the case one after the other and evaluates them.
    pub fn run(&self, scale: Scale) -> Result<(Outcome, Evaluation), CaseError> {
        let mut reports = Vec::with_capacity(self.runs.len());
        for r in self.runs {
            reports.push((r.role, self.run_one(r, scale)?));
        }
        let outcome = Outcome { scale, reports };
        let eval = (self.evaluate)(&outcome)?;
        Ok((outcome, eval))
    }

    /// The run labels, as table columns.
    pub fn columns(&self) -> Vec<String> {
        self.runs.iter().map(|r| r.label.to_string()).collect()
    }
}

/// Renders an evaluation for a terminal.
pub fn render(case: &Case, scale: Scale, e: &Evaluation) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "case {}: {} ({} size)",
        case.slug,
        case.title,
        scale.name()
    );
    let w = e
        .rows
        .iter()
        .map(|r| r.what.len())
        .max()
        .unwrap_or(8)
        .max(8);
    // Each column as wide as its head or its widest value.
    let widths: Vec<usize> = (0..e.columns.len())
        .map(|i| {
            e.rows
                .iter()
                .filter_map(|r| r.values.get(i).map(String::len))
                .chain(std::iter::once(e.columns[i].len()))
                .max()
                .unwrap_or(8)
        })
        .collect();
    let _ = write!(o, "  {:<w$}", "");
    for (c, cw) in e.columns.iter().zip(&widths) {
        let _ = write!(o, "  {c:>cw$}");
    }
    let _ = writeln!(o);
    for r in &e.rows {
        let _ = write!(o, "  {:<w$}", r.what);
        for (v, cw) in r.values.iter().zip(&widths) {
            let _ = write!(o, "  {v:>cw$}");
        }
        let _ = writeln!(o);
    }
    for c in &e.checks {
        let _ = writeln!(
            o,
            "  {} {}: {}",
            if c.holds { "PASS" } else { "FAIL" },
            c.claim,
            c.measured
        );
    }
    o
}
