//! A C program against the real rdma_cma.h (tests/c/rdmacm_api.c), linked with the stock
//! librdmacm and run with the shim preloaded: event channels (O_NONBLOCK), new ids per
//! request, private data in REQ/REP/REJ, reject reasons 28 and 8, ports, data over the
//! connected QPs, disconnect on both sides. Needs cc and librdmacm-dev (.ci/run).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn c_program_sees_rdma_cm_semantics() {
    assert!(
        std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists(),
        "librdmacm-dev is not installed (apt-get install librdmacm-dev)"
    );
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/rdmacm_api.c");
    let dir = std::env::temp_dir().join(format!("softib-shim-rdmacm-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("rdmacm_api");
    let out = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs", "-lpthread"])
        .output()
        .expect("cannot run `cc`: install gcc");
    assert!(
        out.status.success(),
        "compiling rdmacm_api.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = Command::new(&exe)
        .arg("127.77.167.1")
        .env("LD_PRELOAD", common::shim_library())
        .env("SOFTIB_ADDR", "127.77.167.1")
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
        out.status.success() && text.contains("rdmacm_api: all checks passed"),
        "rdmacm_api ({:?}):\n{text}",
        out.status
    );
}
