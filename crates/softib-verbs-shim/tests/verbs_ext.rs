//! A C program against the real verbs.h (tests/c/verbs_ext.c), linked with the stock
//! libibverbs and run with the shim preloaded: the ibv_wr_* post-send API, extended CQs and
//! their timestamps, device memory, on-demand paging (a remote WRITE into a hole of an
//! implicit region is a remote access error, not a crash), ibv_rereg_mr, ibv_resize_cq,
//! thread and parent domains, ibv_create_srq_ex. Needs cc and libibverbs-dev (.ci/run).

mod common;

#[test]
fn c_program_uses_the_extended_verbs() {
    let run = common::run_c_program(
        "verbs_ext",
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        &["-libverbs"],
        "127.77.41.1",
        &[],
    );
    assert!(
        run.status.is_some_and(|s| s.success()) && run.text.contains("all checks passed"),
        "verbs_ext ({:?}):\n{}",
        run.status,
        run.text
    );
}
