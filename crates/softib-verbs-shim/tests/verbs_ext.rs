//! A C program against the real verbs.h (tests/c/verbs_ext.c), linked with the stock
//! libibverbs and run with the shim preloaded: the ibv_wr_* post-send API, extended CQs and
//! their timestamps, device memory, on-demand paging (a remote WRITE into a hole of an
//! implicit region is a remote access error, not a crash), ibv_rereg_mr, ibv_resize_cq,
//! thread and parent domains, ibv_create_srq_ex. Needs cc and libibverbs-dev (.ci/run).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn c_program_uses_the_extended_verbs() {
    assert!(
        std::path::Path::new("/usr/include/infiniband/verbs.h").exists(),
        "libibverbs-dev is not installed (apt-get install libibverbs-dev)"
    );
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/verbs_ext.c");
    let dir = std::env::temp_dir().join(format!("softib-shim-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("verbs_ext");
    let out = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("cannot run `cc`: install gcc");
    assert!(
        out.status.success(),
        "compiling verbs_ext.c failed:\n{}",
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
        "verbs_ext ({:?}):\n{text}",
        out.status
    );
}
