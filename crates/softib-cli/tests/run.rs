//! `softib run`: the program gets the shim, a device of its own and its own exit status;
//! concurrent runs get different addresses; bad arguments are refused with a clear
//! message. The shim is the one `cargo test --workspace` builds beside these tests (given
//! as SOFTIB_SHIM), else the one beside `softib` (`cargo build --release -p
//! softib-verbs-shim`); the tests fail saying so when there is none.

mod common;

use std::net::Ipv4Addr;
use std::process::{Output, Stdio};
use std::time::Duration;

use common::{softib, wait};

/// The shim cargo built beside this test binary (`target/*/deps`): `cargo test` builds it
/// there but copies it beside `softib` only on `cargo build`.
fn built_shim() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("libsoftib_verbs_shim.so");
    p.exists().then_some(p)
}

/// `softib` with the shim these tests use.
fn softib_with_shim() -> std::process::Command {
    let mut c = softib();
    if let Some(shim) = built_shim().filter(|_| std::env::var_os("SOFTIB_SHIM").is_none()) {
        c.env("SOFTIB_SHIM", shim);
    }
    c
}

fn run(args: &[&str]) -> Output {
    let c = softib_with_shim()
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("softib starts");
    wait(c, Duration::from_secs(60), "softib run")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The value of `key=` in the program's output.
fn field(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {out:?}"))
        .to_string()
}

#[test]
fn the_program_sees_its_device_and_its_exit_status_is_returned() {
    let o = run(&[
        "--",
        "sh",
        "-c",
        "echo addr=$SOFTIB_ADDR; echo gid=$(cat /sys/class/infiniband/softib0/ports/1/gids/0); \
         echo ibdev=$(cat /sys/class/infiniband_verbs/uverbs0/ibdev); \
         test -c /dev/infiniband/uverbs0 -a -r /dev/infiniband/uverbs0 -a -w /dev/infiniband/uverbs0 \
           && echo node=ok; exit 7",
    ]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(7), "{out}\n{}", text(&o.stderr));
    let addr: Ipv4Addr = field(&out, "addr").parse().expect("an IPv4 address");
    assert!(addr.is_loopback(), "{addr}");
    let o4 = addr.octets();
    // The GID (IPv4-mapped) the sysfs file shows is the address the run chose.
    assert_eq!(
        field(&out, "gid"),
        format!(
            "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
            o4[0], o4[1], o4[2], o4[3]
        )
    );
    assert_eq!(field(&out, "ibdev"), "softib0");
    assert_eq!(field(&out, "node"), "ok");
}

#[test]
fn the_verbs_show_the_device_the_files_show() {
    let o = run(&[
        "--addr",
        "127.0.0.93",
        "--device",
        "softib7",
        "--",
        "ibv_devinfo",
        "-v",
    ]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(out.contains("hca_id:\tsoftib7"), "{out}");
    assert!(out.contains("PORT_ACTIVE"), "{out}");
    // The node GUID derives from the address (02:50 then its low 6 GID bytes).
    assert!(out.contains("node_guid:\t\t\t0250:ffff:7f00:005d"), "{out}");
    let o = run(&[
        "--addr",
        "127.0.0.93",
        "--device",
        "softib7",
        "--",
        "cat",
        "/sys/class/infiniband/softib7/node_guid",
    ]);
    // ibv_devinfo prints the node GUID in sysfs' format.
    let guid = text(&o.stdout);
    assert!(
        out.contains(&format!("node_guid:\t\t\t{}", guid.trim())),
        "{guid} not in {out}"
    );
}

#[test]
fn concurrent_runs_get_different_addresses() {
    let spawn = || {
        softib_with_shim()
            .args(["run", "--", "sh", "-c", "echo addr=$SOFTIB_ADDR; sleep 2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("softib starts")
    };
    let children: Vec<_> = (0..4).map(|_| spawn()).collect();
    let mut addrs: Vec<String> = children
        .into_iter()
        .map(|c| {
            let o = wait(c, Duration::from_secs(60), "softib run");
            assert!(o.status.success(), "{}", text(&o.stderr));
            field(&text(&o.stdout), "addr")
        })
        .collect();
    addrs.sort();
    let n = addrs.len();
    addrs.dedup();
    assert_eq!(addrs.len(), n, "two runs shared an address: {addrs:?}");
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let o = run(&[]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("PROGRAM"), "{}", text(&o.stderr));

    let o = run(&["--addr", "not-an-address", "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--addr"), "{}", text(&o.stderr));

    // 192.0.2.1 (TEST-NET-1) is no address of this host.
    let o = run(&["--addr", "192.0.2.1", "--", "true"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("cannot use --addr 192.0.2.1"),
        "{}",
        text(&o.stderr)
    );

    let o = run(&[
        "--shim",
        "/nonexistent/libsoftib_verbs_shim.so",
        "--",
        "true",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("does not exist"),
        "{}",
        text(&o.stderr)
    );

    let o = run(&["--device", "a/b", "--", "true"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--device"), "{}", text(&o.stderr));

    let o = run(&["--", "/nonexistent/program"]);
    assert_eq!(o.status.code(), Some(127));
    assert!(
        text(&o.stderr).contains("cannot run /nonexistent/program"),
        "{}",
        text(&o.stderr)
    );
}
