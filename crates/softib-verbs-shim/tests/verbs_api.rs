//! A C program against the real verbs.h (tests/c/verbs_api.c), linked with the stock
//! libibverbs and run with the shim preloaded: memory stays inside registered regions,
//! READ/atomics/SEND with immediate/INLINE/completion channels behave as verbs(3) says, and
//! unsupported verbs fail with EOPNOTSUPP. Needs cc and libibverbs-dev (.ci/run).

mod common;

#[test]
fn c_program_sees_verbs_semantics() {
    let run = common::run_c_program(
        "verbs_api",
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        &["-libverbs"],
        "127.77.40.1",
        &[],
    );
    assert!(
        run.status.is_some_and(|s| s.success()) && run.text.contains("all checks passed"),
        "verbs_api ({:?}):\n{}",
        run.status,
        run.text
    );
}
