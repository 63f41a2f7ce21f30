//! rdma-core's own test suite (pyverbs, tag v44.0) run unmodified against `softib0` through
//! the preloaded shim, as a user would run it against a kernel device.
//!
//! The suite is a peer's oracle, not softib's code: it is read from where it lives
//! (`../shared/testdata/pyverbs-tests-v44.0` next to the repository, or `SOFTIB_PYVERBS_SUITE`)
//! and never copied here. `tests/pyverbs/driver.py` (ours) loads it as its `run_tests.py`
//! does and reports each test's outcome as JSON. What is asserted:
//! - no test fails or errors (the rdma_cm module's forked pairs on one address included);
//! - at least [`MIN_PASSED`] pass;
//! - every test that passes on Linux rxe (`tests/pyverbs/rxe-passes.txt`, measured in the
//!   oracle VM; the file says how) passes here too;
//! - every skip gives a reason that docs/verbs-shim.md lists ("pyverbs tests that skip").
//!
//! Needs Debian's `/usr/bin/python3` with `python3-pyverbs` (.ci/run installs it); without it,
//! or without the suite, the test fails and says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

mod common;

/// The fewest passing tests accepted. With huge pages allocated (`.ci/run` does) softib
/// passes 140 of 273 (the rdma_cm module's 7 included, 133 skipped; 2026-12-01); a few
/// `_ex` tests choose their options at random, hence the margin. Issue 13 asks for 130.
const MIN_PASSED: usize = 136;
/// The device address of this test's shim (its own 127.77.x block, apart from the other
/// shim tests).
const DEVICE_ADDR: &str = "127.77.200.1";

#[derive(Debug, serde::Deserialize)]
struct Outcome {
    id: String,
    outcome: String,
    detail: String,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The suite's folder: `SOFTIB_PYVERBS_SUITE`, or `shared/` beside the repository (beside
/// the main checkout when this is a git worktree).
fn suite_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SOFTIB_PYVERBS_SUITE") {
        return PathBuf::from(d);
    }
    let mut candidates = vec![repo_root().join("../shared/testdata/pyverbs-tests-v44.0")];
    if let Ok(out) = Command::new("git")
        .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .current_dir(repo_root())
        .output()
    {
        let common = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if let Some(main) = common.parent() {
            candidates.push(main.join("../shared/testdata/pyverbs-tests-v44.0"));
        }
    }
    candidates
        .into_iter()
        .find(|d| d.join("tests/run_tests.py").is_file())
        .unwrap_or_else(|| {
            panic!(
                "rdma-core's pyverbs suite (tag v44.0) not found: expected \
                 ../shared/testdata/pyverbs-tests-v44.0 beside the repository, or set \
                 SOFTIB_PYVERBS_SUITE to a folder holding its tests/"
            )
        })
}

/// Every test's outcome, from one run of the suite (shared by the tests below).
fn outcomes() -> &'static BTreeMap<String, Outcome> {
    static RUN: OnceLock<BTreeMap<String, Outcome>> = OnceLock::new();
    RUN.get_or_init(|| {
        let python = Path::new("/usr/bin/python3");
        let probe = Command::new(python).args(["-c", "import pyverbs"]).output();
        assert!(
            probe.as_ref().is_ok_and(|o| o.status.success()),
            "Debian's /usr/bin/python3 cannot import pyverbs: apt-get install python3-pyverbs \
             (see .ci/run) ({probe:?})"
        );
        let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pyverbs/driver.py");
        let results =
            std::env::temp_dir().join(format!("softib-pyverbs-{}.json", std::process::id()));
        let out = Command::new(python)
            .arg(&driver)
            .arg(suite_dir())
            .arg("softib0")
            .arg(&results)
            .env("LD_PRELOAD", common::shim_library())
            .env("SOFTIB_ADDR", DEVICE_ADDR)
            .env_remove("SOFTIB_DEVICE")
            .output()
            .expect("run the pyverbs driver");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the pyverbs driver exited with {}:\n{}\n{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let json = std::fs::read_to_string(&results).expect("the driver's results file");
        let _ = std::fs::remove_file(&results);
        let all: BTreeMap<String, Outcome> = json
            .lines()
            .map(|l| serde_json::from_str::<Outcome>(l).expect("a JSON outcome line"))
            .map(|o| (o.id.clone(), o))
            .collect();
        assert!(all.len() > 200, "the suite ran only {} tests", all.len());
        let passed = all.values().filter(|o| o.outcome == "ok").count();
        eprintln!(
            "pyverbs suite: {} tests, {passed} passed, {} skipped",
            all.len(),
            all.values().filter(|o| o.outcome == "skip").count()
        );
        all
    })
}

#[test]
fn pyverbs_suite_has_no_failure_or_error() {
    // The rdma_cm tests fork a passive and an active process on the one device address,
    // as on a kernel device every process of a host shares: softib-net's address group
    // (docs/design/net.md, "Several processes on one address") is what makes them pass.
    let bad: Vec<String> = outcomes()
        .values()
        .filter(|o| !matches!(o.outcome.as_str(), "ok" | "skip"))
        .map(|o| format!("{} {}:\n{}", o.outcome, o.id, o.detail))
        .collect();
    assert!(
        bad.is_empty(),
        "{} tests did not pass:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn pyverbs_suite_passes_at_least_the_accepted_number() {
    let passed = outcomes().values().filter(|o| o.outcome == "ok").count();
    assert!(
        passed >= MIN_PASSED,
        "{passed} tests passed, fewer than {MIN_PASSED}"
    );
}

#[test]
fn every_pyverbs_test_that_passes_on_rxe_passes_on_softib() {
    let list = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pyverbs/rxe-passes.txt"),
    )
    .expect("tests/pyverbs/rxe-passes.txt");
    let missing: Vec<String> = list
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|id| outcomes().get(*id).is_none_or(|o| o.outcome != "ok"))
        .map(|id| match outcomes().get(id) {
            Some(o) => format!("{id}: {} {}", o.outcome, o.detail),
            None => format!("{id}: not run"),
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} tests that pass on rxe do not pass on softib:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// The skip reasons docs/verbs-shim.md lists: the first backticked cell of each table row
/// in its "pyverbs tests that skip" section.
fn documented_skip_reasons() -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/verbs-shim.md"))
        .expect("docs/verbs-shim.md");
    let section = doc
        .split("\n### pyverbs tests that skip")
        .nth(1)
        .expect("docs/verbs-shim.md has a section '### pyverbs tests that skip'");
    let section = section.split("\n#").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |").map(|(reason, _)| reason.to_string()))
        .collect()
}

#[test]
fn every_pyverbs_skip_reason_is_documented() {
    let documented = documented_skip_reasons();
    let undocumented: Vec<String> = outcomes()
        .values()
        .filter(|o| o.outcome == "skip")
        .filter(|o| !documented.iter().any(|r| o.detail.contains(r.as_str())))
        .map(|o| format!("{}: {}", o.id, o.detail))
        .collect();
    assert!(
        undocumented.is_empty(),
        "{} skips give a reason docs/verbs-shim.md does not list:\n{}",
        undocumented.len(),
        undocumented.join("\n")
    );
}
