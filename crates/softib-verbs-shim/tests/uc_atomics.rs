//! Atomics on a UC QP through the shim (field case 12): `tests/c/uc_atomics.c`, compiled
//! against the installed verbs.h and libibverbs and run with the shim preloaded. IBA defines
//! atomics for RC and RD only (IBA 9.8.2); softib refuses them on UC at `ibv_post_send`
//! (EOPNOTSUPP, bad_wr at the atomic), leaving the QP in RTS and usable, and the same
//! FetchAdd on RC works. Needs cc and libibverbs-dev (.ci/run).

mod common;

const RULES: &[&str] = &[
    "uc.fetch_add_refused_at_post",
    "uc.cmp_swap_refused_at_post",
    "uc.nothing_completes",
    "uc.qp_stays_rts",
    "uc.remote_memory_untouched",
    "uc.write_after_refusal_works",
    "uc.write_lands",
    "rc.fetch_add_works",
    "rc.fetch_add_result",
];

#[test]
fn atomics_on_uc_are_refused_at_post_and_work_on_rc() {
    let run = common::run_c_program(
        "uc_atomics",
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        &["-libverbs"],
        "127.77.42.1",
        &[],
    );
    for rule in RULES {
        assert!(
            run.text.lines().any(|l| l == format!("ok {rule}")),
            "check {rule} did not pass ({:?}):\n{}",
            run.status,
            run.text
        );
    }
    assert!(
        run.status.is_some_and(|s| s.success())
            && run
                .text
                .contains(&format!("uc_atomics: all {} checks passed", RULES.len())),
        "uc_atomics ({:?}):\n{}",
        run.status,
        run.text
    );
}
