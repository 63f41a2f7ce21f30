//! In blocking mode an idle device sleeps: its thread uses (almost) no CPU.

use std::time::Duration;

use softib_net::context::{Context, WaitMode};
use softib_net::driver::NetConfig;

/// CPU ticks (user + system) of this process's threads whose name starts with `prefix`.
fn thread_ticks(prefix: &str) -> u64 {
    let mut total = 0;
    let mut found = false;
    for entry in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let dir = entry.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        found = true;
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        total += f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    }
    assert!(found, "no thread named {prefix}*");
    total
}

#[test]
fn idle_device_in_blocking_mode_does_not_burn_a_core() {
    let ctx = Context::open(
        NetConfig::new("127.0.0.1:0".parse().unwrap()),
        WaitMode::default(),
    )
    .unwrap();
    // Let it settle past its spin window.
    std::thread::sleep(Duration::from_millis(100));
    let before = thread_ticks("softib ");
    std::thread::sleep(Duration::from_secs(1));
    let used = thread_ticks("softib ") - before;
    // Clock ticks are 10 ms (USER_HZ 100): a spinning thread would show about 100.
    assert!(
        used <= 5,
        "idle device thread used {used} ticks of CPU in 1 s"
    );
    drop(ctx);
}
