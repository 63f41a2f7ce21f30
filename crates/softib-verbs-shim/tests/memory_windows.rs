//! Memory windows from a C program against the real verbs.h (tests/c/memory_windows.c),
//! linked with the stock libibverbs and run with the shim preloaded: the inline
//! `ibv_alloc_mw` / `ibv_bind_mw` / `ibv_dealloc_mw` reach the shim through `context->ops`,
//! IBV_WR_BIND_MW and IBV_WR_LOCAL_INV work in `ibv_post_send`, and remote access through
//! a window is confined to it. Needs cc and libibverbs-dev (.ci/run).

mod common;

#[test]
fn c_program_binds_uses_and_invalidates_memory_windows() {
    let run = common::run_c_program(
        "memory_windows",
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        &["-libverbs"],
        "127.77.41.1",
        &[],
    );
    assert!(
        run.status.is_some_and(|s| s.success()) && run.text.contains("all checks passed"),
        "memory_windows ({:?}):\n{}",
        run.status,
        run.text
    );
}
