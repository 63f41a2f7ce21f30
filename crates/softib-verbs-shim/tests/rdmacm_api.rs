//! A C program against the real rdma_cma.h (tests/c/rdmacm_api.c), linked with the stock
//! librdmacm and run with the shim preloaded: event channels (O_NONBLOCK), new ids per
//! request, private data in REQ/REP/REJ, reject reasons 28 and 8, ports, data over the
//! connected QPs, disconnect on both sides. Needs cc and librdmacm-dev (.ci/run).

mod common;

#[test]
fn c_program_sees_rdma_cm_semantics() {
    let run = common::run_c_program(
        "rdmacm_api",
        ("/usr/include/rdma/rdma_cma.h", "librdmacm-dev"),
        &["-lrdmacm", "-libverbs", "-lpthread"],
        "127.77.167.1",
        &["127.77.167.1"],
    );
    assert!(
        run.status.is_some_and(|s| s.success())
            && run.text.contains("rdmacm_api: all checks passed"),
        "rdmacm_api ({:?}):\n{}",
        run.status,
        run.text
    );
}
