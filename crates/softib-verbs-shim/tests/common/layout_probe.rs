//! The layout probe of `tests/layout.rs` and `tests/rdmacm_layout.rs`: a C program compiled
//! against an installed rdma-core header prints every size, offset and enum value the Rust
//! side claims, and each must agree.

use std::process::Command;

/// Compiles and runs the probe for `header` (a path under /usr/include, from `package`),
/// with `prelude` (C definitions the installed headers lack) after the includes, and
/// returns every disagreement as `expr: C x, Rust y`. Fails, naming what to install, when
/// the header or the C compiler is missing; `tag` names the scratch directory.
pub fn mismatches(
    header: &str,
    package: &str,
    prelude: &str,
    layouts: &[(&str, usize)],
    constants: &[(&str, i64)],
    tag: &str,
) -> Vec<String> {
    let path = std::path::Path::new(header);
    assert!(
        path.exists(),
        "{} is missing: install {package} (apt-get install {package})",
        path.display()
    );
    let include = header.strip_prefix("/usr/include/").unwrap_or(header);
    let mut src = format!("#include <stdio.h>\n#include <stddef.h>\n#include <{include}>\n");
    src.push_str(prelude);
    src.push_str("int main(void) {\n");
    for (expr, _) in layouts {
        src.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    for (name, _) in constants {
        src.push_str(&format!("  printf(\"%lld\\n\", (long long)({name}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("softib-shim-{tag}-{}", std::process::id()));
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
    wrong
}
