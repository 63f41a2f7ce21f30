//! `softib cases` and `softib sim --set` end to end: the real binary.

use std::path::PathBuf;
use std::process::{Command, Output};

fn softib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softib"))
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The repository root: the cases' scenario paths are relative to it.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn a_case_runs_prints_its_figures_and_passes() {
    let out = softib()
        .current_dir(root())
        .args(["cases", "4", "--quick"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}\n{e}");
    assert!(o.contains("case 04-mtu-vs-credits"), "{o}");
    assert!(o.contains("PASS credits short"), "{o}");
    assert!(!o.contains("FAIL"), "{o}");
}

#[test]
fn cases_are_listed_and_unknown_ones_refused() {
    let out = softib().args(["cases", "--list"]).output().unwrap();
    let (o, _) = text(&out);
    assert!(out.status.success());
    for n in 1..=9 {
        assert!(o.contains(&format!("0{n}-")), "case {n} missing:\n{o}");
    }
    assert!(
        o.contains("scenarios/cases/01-credit-starvation/problem.toml"),
        "{o}"
    );
    let out = softib().args(["cases", "42"]).output().unwrap();
    let (_, e) = text(&out);
    assert!(!out.status.success());
    assert!(
        e.contains("no case `42`") && e.contains("01-credit-starvation"),
        "{e}"
    );
}

#[test]
fn the_guide_needs_its_markers() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cases-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let guide = dir.join("guide.md");
    std::fs::write(&guide, "# no markers here\n").unwrap();
    let out = softib()
        .args(["cases", "1", "--doc"])
        .arg(&guide)
        .output()
        .unwrap();
    let (_, e) = text(&out);
    assert!(!out.status.success());
    assert!(e.contains("BEGIN GENERATED 01-credit-starvation"), "{e}");
}

#[test]
fn set_changes_a_key_for_one_run_and_bad_keys_are_named() {
    let out = softib()
        .args(["sim", "b2b-edr", "--no-files", "--set", "duration_us=50"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}\n{e}");
    assert!(o.contains("simulated 50.000 us"), "{o}");
    let out = softib()
        .args(["sim", "b2b-edr", "--no-files", "--set", "flow[3].mtu=1024"])
        .output()
        .unwrap();
    let (_, e) = text(&out);
    assert!(!out.status.success());
    assert!(
        e.contains("flow[3].mtu") && e.contains("has 1 entries"),
        "{e}"
    );
    let out = softib()
        .args(["sim", "b2b-edr", "--no-files", "--set", "flow[0].mtu=1000"])
        .output()
        .unwrap();
    let (_, e) = text(&out);
    assert!(!out.status.success());
    assert!(e.contains("mtu") && e.contains("1000"), "{e}");
}
