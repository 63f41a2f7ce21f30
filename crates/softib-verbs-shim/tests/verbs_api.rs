//! A C program against the real verbs.h (tests/c/verbs_api.c), linked with the stock
//! libibverbs and run with the shim preloaded: memory stays inside registered regions,
//! READ/atomics/SEND with immediate/INLINE/completion channels behave as verbs(3) says, and
//! unsupported verbs fail with EOPNOTSUPP. Needs cc and libibverbs-dev (.ci/run).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn c_program_sees_verbs_semantics() {
    assert!(
        std::path::Path::new("/usr/include/infiniband/verbs.h").exists(),
        "libibverbs-dev is not installed (apt-get install libibverbs-dev)"
    );
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/verbs_api.c");
    let dir = std::env::temp_dir().join(format!("softib-shim-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("verbs_api");
    let out = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("cannot run `cc`: install gcc");
    assert!(
        out.status.success(),
        "compiling verbs_api.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = Command::new(&exe)
        .env("LD_PRELOAD", common::shim_library())
        .env("SOFTIB_ADDR", "127.77.40.1")
        .env("SOFTIB_DEBUG", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && text.contains("all checks passed"),
        "verbs_api ({:?}):\n{text}",
        out.status
    );
}
