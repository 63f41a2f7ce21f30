//! rdma_cm multicast with the stock `mckey` (rdmacm-utils), unmodified, preloaded with the
//! shim: two receivers on 127.78.S.2 and 127.78.S.3 join a group with
//! `rdma_join_multicast` (MULTICAST_JOIN gives them the group's address vector, QPN
//! 0xFFFFFF and rdma_cm's Q_Key), a sender on 127.78.S.1 joins it and sends; both receivers
//! get every message, while a receiver of another group gets none. Missing binaries fail
//! the test with the package to install.

mod common;

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{binary, shim_library};

fn spawn(args: &[&str], addr: &str, log: &Path) -> Child {
    let out = File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    Command::new(binary("mckey", "rdmacm-utils"))
        .args(args)
        .env("LD_PRELOAD", shim_library())
        .env("SOFTIB_ADDR", addr)
        .env("SOFTIB_DEBUG", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("cannot start mckey")
}

/// The mckey processes of a run, killed (by PID) and reaped when the test ends, also when
/// it fails half-way.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn log_has(log: &Path, what: &str) -> bool {
    std::fs::read_to_string(log).is_ok_and(|t| t.contains(what))
}

/// Waits until `child` exits or `deadline` passes (then kills it by its PID); true when it
/// exited with status 0.
fn finish(child: &mut Child, deadline: Instant) -> Option<bool> {
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s.success());
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn mckey_receivers_of_the_group_get_every_message_and_others_none() {
    let slot = std::process::id() as u8;
    let dir = std::env::temp_dir().join(format!("softib-mckey-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let group = format!("239.78.{slot}.1");
    let other_group = format!("239.78.{slot}.2");
    let addr = |h: u8| format!("127.78.{slot}.{h}");
    let logs: Vec<_> = (0..4).map(|i| dir.join(format!("mckey{i}.log"))).collect();
    let n = "20";
    let mut kids = Children(vec![
        spawn(&["-m", &group, "-b", &addr(2), "-C", n], &addr(2), &logs[0]),
        spawn(&["-m", &group, "-b", &addr(3), "-C", n], &addr(3), &logs[1]),
        spawn(
            &["-m", &other_group, "-b", &addr(4), "-C", n],
            &addr(4),
            &logs[2],
        ),
    ]);
    // The sender may start once every receiver joined (a datagram before that is lost).
    let start = Instant::now();
    // (The shim's SOFTIB_DEBUG line: mckey's own output is buffered until it exits.)
    while !logs[..3]
        .iter()
        .all(|l| log_has(l, "softib: rdma_cm: joined multicast group"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "receivers did not join: {:?}",
            logs[..3]
                .iter()
                .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    kids.0.push(spawn(
        &["-m", &group, "-b", &addr(1), "-s", "-C", n],
        &addr(1),
        &logs[3],
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    let sent = finish(&mut kids.0[3], deadline);
    let got1 = finish(&mut kids.0[0], deadline);
    let got2 = finish(&mut kids.0[1], deadline);
    // The receiver of the other group is still waiting: it got nothing.
    let other_done = finish(&mut kids.0[2], Instant::now() + Duration::from_secs(1));
    let text: Vec<String> = logs
        .iter()
        .map(|l| std::fs::read_to_string(l).unwrap_or_default())
        .collect();
    let dump = format!(
        "--- r1:\n{}\n--- r2:\n{}\n--- other group:\n{}\n--- sender:\n{}",
        text[0], text[1], text[2], text[3]
    );
    assert_eq!(sent, Some(true), "sender:\n{dump}");
    assert_eq!((got1, got2), (Some(true), Some(true)), "receivers:\n{dump}");
    for t in &text[..2] {
        // mckey's join event: the group's GID from param.ud.ah_attr, no LID on RoCE.
        assert!(
            t.contains(&format!("joined dgid: ::ffff:{group} mlid 0x0")),
            "{dump}"
        );
        assert!(t.contains("data transfers complete"), "{dump}");
    }
    assert_eq!(
        other_done, None,
        "the other group's receiver got data:\n{dump}"
    );
    assert!(!text[2].contains("data transfers complete"), "{dump}");
    let _ = std::fs::remove_dir_all(&dir);
}
