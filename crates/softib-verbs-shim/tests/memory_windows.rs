//! Memory windows from a C program against the real verbs.h (tests/c/memory_windows.c),
//! linked with the stock libibverbs and run with the shim preloaded: the inline
//! `ibv_alloc_mw` / `ibv_bind_mw` / `ibv_dealloc_mw` reach the shim through `context->ops`,
//! IBV_WR_BIND_MW and IBV_WR_LOCAL_INV work in `ibv_post_send`, and remote access through
//! a window is confined to it. Needs cc and libibverbs-dev (.ci/run).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn c_program_binds_uses_and_invalidates_memory_windows() {
    assert!(
        std::path::Path::new("/usr/include/infiniband/verbs.h").exists(),
        "libibverbs-dev is not installed (apt-get install libibverbs-dev)"
    );
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/memory_windows.c");
    let dir = std::env::temp_dir().join(format!("softib-shim-mw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("memory_windows");
    let out = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("cannot run `cc`: install gcc");
    assert!(
        out.status.success(),
        "compiling memory_windows.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = Command::new(&exe)
        .env("LD_PRELOAD", common::shim_library())
        .env("SOFTIB_ADDR", "127.77.41.1")
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
        "memory_windows ({:?}):\n{text}",
        out.status
    );
}
