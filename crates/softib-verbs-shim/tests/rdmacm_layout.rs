//! The `repr(C)` definitions of `softib_verbs_shim::rdmacm::abi` against the installed
//! librdmacm header: a C program compiled against `<rdma/rdma_cma.h>` prints every size,
//! offset and enum value the Rust side claims, and each must agree. Needs `cc` and
//! librdmacm-dev (installed by .ci/run); fails, never skips, when they are missing.

mod common;

use softib_verbs_shim::rdmacm::abi::{checked_layouts, CHECKED_CONSTANTS};

#[test]
fn rust_layouts_match_rdma_core_rdma_cma_h() {
    let wrong = common::layout_probe::mismatches(
        "/usr/include/rdma/rdma_cma.h",
        "librdmacm-dev",
        "",
        &checked_layouts(),
        CHECKED_CONSTANTS,
        "rdmacm-layout",
    );
    assert!(wrong.is_empty(), "layout mismatches:\n{}", wrong.join("\n"));
}
