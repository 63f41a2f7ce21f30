//! The field-case library: every case of `scenarios/cases/` runs at its quick size
//! (the same fabric and traffic as the full-size files, shorter runs) and must meet the
//! criteria its module states; and the troubleshooting guide must have been generated from
//! the scenario files as they are now.

use softib_sim::cases::{self, doc, Scale};

/// Runs case `id` at quick size and asserts each of its criteria.
fn run_case(id: &str) {
    let case = cases::find(id).unwrap_or_else(|| panic!("no case {id}"));
    let (_, e) = case
        .run(Scale::Quick)
        .unwrap_or_else(|err| panic!("{}: {err}", case.slug));
    eprintln!("{}", cases::render(case, Scale::Quick, &e));
    assert!(!e.checks.is_empty(), "{} has no criteria", case.slug);
    for c in &e.checks {
        assert!(c.holds, "{}: {} ({})", case.slug, c.claim, c.measured);
    }
}

/// The cases this file tests, by slug: a new case must get a test here.
const TESTED: &[&str] = &[
    "01-credit-starvation",
    "02-ack-timeout-storm",
    "03-cc-slope",
    "04-mtu-vs-credits",
    "05-credits-or-cc",
    "06-receiver-not-ready",
    "07-atomic-hotspot",
    "08-vl-starvation",
    "09-rc-vs-ud-scale",
    "10-psn-mismatch",
    "11-fence-atomics",
    "12-atomics-over-uc",
    "13-rc-ud-rd-scale",
];

#[test]
fn case_01_credit_starvation() {
    run_case("01-credit-starvation");
}

#[test]
fn case_02_ack_timeout_storm() {
    run_case("02-ack-timeout-storm");
}

#[test]
fn case_03_cc_slope() {
    run_case("03-cc-slope");
}

#[test]
fn case_04_mtu_vs_credits() {
    run_case("04-mtu-vs-credits");
}

#[test]
fn case_05_credits_or_cc() {
    run_case("05-credits-or-cc");
}

#[test]
fn case_06_receiver_not_ready() {
    run_case("06-receiver-not-ready");
}

#[test]
fn case_07_atomic_hotspot() {
    run_case("07-atomic-hotspot");
}

#[test]
fn case_08_vl_starvation() {
    run_case("08-vl-starvation");
}

#[test]
fn case_09_rc_vs_ud_scale() {
    run_case("09-rc-vs-ud-scale");
}

#[test]
fn case_10_psn_mismatch() {
    run_case("10-psn-mismatch");
}

#[test]
fn case_11_fence_atomics() {
    run_case("11-fence-atomics");
}

#[test]
fn case_12_atomics_over_uc() {
    run_case("12-atomics-over-uc");
}

#[test]
fn case_13_rc_ud_rd_scale() {
    run_case("13-rc-ud-rd-scale");
}

#[test]
fn a_run_of_another_case_is_found_where_that_case_keeps_it() {
    for case in cases::all() {
        for r in case.runs {
            let path = format!("{}/../../{}", env!("CARGO_MANIFEST_DIR"), case.path(r.role));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {path}: {e}", case.slug));
            assert_eq!(text, r.text, "{}: {path} is not the run's text", case.slug);
        }
    }
}

#[test]
fn every_case_has_a_test() {
    let all: Vec<&str> = cases::all().iter().map(|c| c.slug).collect();
    assert_eq!(all, TESTED);
}

#[test]
fn a_case_gives_the_same_figures_twice() {
    let case = cases::find("01").unwrap();
    let (_, a) = case.run(Scale::Quick).unwrap();
    let (_, b) = case.run(Scale::Quick).unwrap();
    assert_eq!(a, b);
}

#[test]
fn the_guide_was_generated_from_the_current_scenarios() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/troubleshooting.md");
    let guide = std::fs::read_to_string(path).expect("docs/troubleshooting.md exists");
    for case in cases::all() {
        let stored = doc::stored_digest(&guide, case.slug);
        assert_eq!(
            stored.as_deref(),
            Some(doc::digest(case).as_str()),
            "docs/troubleshooting.md is stale for case {} (or lacks its block): run \
             `cargo run --release -p softib-cli -- cases --doc docs/troubleshooting.md`",
            case.slug
        );
    }
    // Every plot the guide shows exists.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/");
    for (i, _) in guide.match_indices("](troubleshooting/") {
        let rest = &guide[i + 2..];
        let file = &rest[..rest.find(')').expect("a closed link")];
        assert!(
            std::path::Path::new(dir).join(file).exists(),
            "docs/{file} is referenced by the guide but missing"
        );
    }
}
