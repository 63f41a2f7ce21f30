//! The `repr(C)` definitions of `softib_verbs_shim::rdmacm::abi` against the installed
//! librdmacm header: a C program compiled against `<rdma/rdma_cma.h>` prints every size,
//! offset and enum value the Rust side claims, and each must agree. Needs `cc` and
//! librdmacm-dev (installed by .ci/run); fails, never skips, when they are missing.

use std::process::Command;

use softib_verbs_shim::rdmacm::abi::{checked_layouts, CHECKED_CONSTANTS};

#[test]
fn rust_layouts_match_rdma_core_rdma_cma_h() {
    let header = std::path::Path::new("/usr/include/rdma/rdma_cma.h");
    assert!(
        header.exists(),
        "{} is missing: install librdmacm-dev (apt-get install librdmacm-dev)",
        header.display()
    );
    let layouts = checked_layouts();
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    for (expr, _) in &layouts {
        src.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    for (name, _) in CHECKED_CONSTANTS {
        src.push_str(&format!("  printf(\"%lld\\n\", (long long)({name}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    let dir =
        std::env::temp_dir().join(format!("softib-shim-rdmacm-layout-{}", std::process::id()));
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
    assert_eq!(values.len(), layouts.len() + CHECKED_CONSTANTS.len());
    let mut wrong = Vec::new();
    for ((expr, rust), c) in layouts.iter().zip(&values) {
        if c.parse::<usize>().ok() != Some(*rust) {
            wrong.push(format!("{expr}: C {c}, Rust {rust}"));
        }
    }
    for ((name, rust), c) in CHECKED_CONSTANTS.iter().zip(&values[layouts.len()..]) {
        if c.parse::<i64>().ok() != Some(*rust) {
            wrong.push(format!("{name}: C {c}, Rust {rust}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(wrong.is_empty(), "layout mismatches:\n{}", wrong.join("\n"));
}
