//! Atomics on a UC QP through the shim (field case 12): `tests/c/uc_atomics.c`, compiled
//! against the installed verbs.h and libibverbs and run with the shim preloaded. IBA defines
//! atomics for RC and RD only (IBA 9.8.2). As on rxe, `ibv_post_send` accepts them on UC,
//! the first completes with IBV_WC_LOC_QP_OP_ERR, the QP goes to ERR, the rest is flushed
//! and the target is untouched; the same FetchAdd on RC works. Needs cc and libibverbs-dev
//! (.ci/run).

mod common;

const RULES: &[&str] = &[
    "uc.fetch_add_accepted_at_post",
    "uc.cmp_swap_accepted_at_post",
    "uc.fetch_add_loc_qp_op_err",
    "uc.cmp_swap_flushed",
    "uc.qp_in_err",
    "uc.remote_memory_untouched",
    "uc.write_after_is_flushed",
    "uc.flushed_write_lands_nowhere",
    "rc.fetch_add_works",
    "rc.fetch_add_result",
];

#[test]
fn atomics_on_uc_fail_as_on_rxe_and_work_on_rc() {
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
