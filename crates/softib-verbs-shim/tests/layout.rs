//! The `repr(C)` definitions of `softib_verbs_shim::abi` against the installed rdma-core
//! header: a C program compiled against `<infiniband/verbs.h>` prints every size, offset and
//! enum value the Rust side claims, and each must agree. Needs `cc` and libibverbs-dev
//! (installed by .ci/run); fails, never skips, when they are missing.

mod common;

use softib_verbs_shim::abi::{checked_layouts, CHECKED_CONSTANTS};
use softib_verbs_shim::abi_ex::{checked_layouts_ex, CHECKED_CONSTANTS_EX};

/// rdma-core's `struct verbs_qp` (`<infiniband/driver.h>`, which Debian does not install),
/// spelled as there.
const VERBS_QP_OF_DRIVER_H: &str = "struct verbs_qp {\n  union { struct ibv_qp qp; struct ibv_qp_ex qp_ex; };\n  uint32_t comp_mask;\n  struct verbs_xrcd *xrcd;\n};\n";

#[test]
fn rust_layouts_match_rdma_core_verbs_h() {
    let mut layouts = checked_layouts();
    layouts.extend(checked_layouts_ex());
    let constants: Vec<(&str, i64)> = CHECKED_CONSTANTS
        .iter()
        .chain(CHECKED_CONSTANTS_EX)
        .copied()
        .collect();
    let wrong = common::layout_probe::mismatches(
        "/usr/include/infiniband/verbs.h",
        "libibverbs-dev",
        VERBS_QP_OF_DRIVER_H,
        &layouts,
        &constants,
        "layout",
    );
    assert!(wrong.is_empty(), "layout mismatches:\n{}", wrong.join("\n"));
}
