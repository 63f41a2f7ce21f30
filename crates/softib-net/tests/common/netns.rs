//! A network namespace for one test, and running this test binary's checks inside it.
//! Creating namespaces needs root; without it the test fails and says so.

use std::process::Command;

/// A namespace made for one test run, deleted on drop even when the test fails.
pub struct Namespace(pub String);

impl Namespace {
    /// Creates `softib-<prefix>-<pid>`.
    pub fn new(prefix: &str) -> Namespace {
        let ns = Namespace(format!("softib-{prefix}-{}", std::process::id()));
        run(&["ip", "netns", "add", &ns.0]);
        ns
    }

    /// Runs `ip -n <ns> ARGS...`.
    pub fn ip(&self, args: &[&str]) {
        let mut cmd = vec!["ip", "-n", &self.0];
        cmd.extend_from_slice(args);
        run(&cmd);
    }

    /// Runs the ignored test `name` of this binary inside the namespace, with `role` set in
    /// its environment (so it knows it was started here), and fails unless it ran and
    /// passed. Returns what it printed.
    pub fn run_checks(&self, name: &str, role: &str) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0])
            .arg(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", name, "--nocapture"])
            .env(role, "1")
            .output()
            .expect("run the checks inside the namespace");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "the checks inside {} failed:\n{text}",
            self.0
        );
        assert!(
            text.contains(&format!("test {name} ... ok")),
            "the checks did not run:\n{text}"
        );
        text
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Runs a command that must succeed (iproute2, as root).
pub fn run(cmd: &[&str]) {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (needs iproute2)", cmd[0]));
    assert!(
        out.status.success(),
        "{cmd:?} failed (needs root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
