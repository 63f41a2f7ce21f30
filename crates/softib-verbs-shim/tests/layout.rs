//! The `repr(C)` definitions of `softib_verbs_shim::abi` against the installed rdma-core
//! header: a C program compiled against `<infiniband/verbs.h>` prints every size, offset and
//! enum value the Rust side claims, and each must agree. Needs `cc` and libibverbs-dev
//! (installed by .ci/run); fails, never skips, when they are missing.

use std::process::Command;

use softib_verbs_shim::abi::{checked_layouts, CHECKED_CONSTANTS};
use softib_verbs_shim::abi_ex::{checked_layouts_ex, CHECKED_CONSTANTS_EX};

/// rdma-core's `struct verbs_qp` (`<infiniband/driver.h>`, which Debian does not install),
/// spelled as there.
const VERBS_QP_OF_DRIVER_H: &str = "struct verbs_qp {\n  union { struct ibv_qp qp; struct ibv_qp_ex qp_ex; };\n  uint32_t comp_mask;\n  struct verbs_xrcd *xrcd;\n};\n";

#[test]
fn rust_layouts_match_rdma_core_verbs_h() {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    assert!(
        header.exists(),
        "{} is missing: install libibverbs-dev (apt-get install libibverbs-dev)",
        header.display()
    );
    let mut layouts = checked_layouts();
    layouts.extend(checked_layouts_ex());
    let constants: Vec<(&str, i64)> = CHECKED_CONSTANTS
        .iter()
        .chain(CHECKED_CONSTANTS_EX)
        .copied()
        .collect();
    let mut src =
        String::from("#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n");
    src.push_str(VERBS_QP_OF_DRIVER_H);
    src.push_str("int main(void) {\n");
    for (expr, _) in &layouts {
        src.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    for (name, _) in &constants {
        src.push_str(&format!("  printf(\"%lld\\n\", (long long)({name}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("softib-shim-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c, &src).unwrap();
    let out = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .expect("cannot run `cc`: install a C compiler (gcc)");
    assert!(
        out.status.success(),
        "compiling the layout probe failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("run the layout probe");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let values: Vec<&str> = text.lines().collect();
    assert_eq!(values.len(), layouts.len() + constants.len());
    let mut wrong = Vec::new();
    for ((expr, rust), c) in layouts.iter().zip(&values) {
        if c.parse::<usize>().ok() != Some(*rust) {
            wrong.push(format!("{expr}: C {c}, Rust {rust}"));
        }
    }
    for ((name, rust), c) in constants.iter().zip(&values[layouts.len()..]) {
        if c.parse::<i64>().ok() != Some(*rust) {
            wrong.push(format!("{name}: C {c}, Rust {rust}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(wrong.is_empty(), "layout mismatches:\n{}", wrong.join("\n"));
}
