//! The device as the kernel shows it, seen by stock programs under the preload: Debian's
//! Python lists and reads the sysfs directories, coreutils `stat` sees a readable and
//! writable character device at `/dev/infiniband/uverbs0`, the files agree with what the
//! verbs say (`ibv_devinfo`), and paths outside the three viewed prefixes are untouched.

mod common;

use std::process::{Command, Output, Stdio};

use common::{binary, shim_library};

fn preloaded(program: &str, package: &str, args: &[&str], addr: &str) -> Output {
    Command::new(binary(program, package))
        .args(args)
        .env("LD_PRELOAD", shim_library())
        .env("SOFTIB_ADDR", addr)
        .env_remove("SOFTIB_DEVICE")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const PY: &str = r#"
import os
ib = "/sys/class/infiniband"
print("devices", sorted(os.listdir(ib)))
d = ib + "/softib0"
for f in ["node_type", "node_guid", "sys_image_guid", "fw_ver",
          "ports/1/state", "ports/1/phys_state", "ports/1/rate", "ports/1/link_layer",
          "ports/1/gids/0", "ports/1/gids/1", "ports/1/gid_attrs/types/0",
          "ports/1/gid_attrs/ndevs/0", "ports/1/pkeys/0", "ports/1/cap_mask"]:
    print(f, "=", open(d + "/" + f).read().rstrip("\n"))
print("gids", len(os.listdir(d + "/ports/1/gids")))
print("net", os.listdir(d + "/device/net"))
print("ibdev", open("/sys/class/infiniband_verbs/uverbs0/ibdev").read().strip())
print("abi", open("/sys/class/infiniband_verbs/abi_version").read().strip())
print("node_access", os.access("/dev/infiniband/uverbs0", os.R_OK | os.W_OK))
print("realpath", os.path.realpath(d + "/ports/1"))
try:
    open(d + "/node_desc", "w").write("x")
    print("write_refused", False)
except PermissionError:
    print("write_refused", True)
try:
    os.open(d + "/node_desc", os.O_RDWR)
    print("rdwr_refused", False)
except PermissionError:
    print("rdwr_refused", True)
os.close(os.open("/dev/infiniband/uverbs0", os.O_RDWR))
print("node_opens_rdwr", True)
print("mtu_untouched", open("/sys/class/net/lo/mtu").read().strip() != "")
"#;

fn value(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{key} = "))
                .or_else(|| l.strip_prefix(&format!("{key} ")))
        })
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
        .to_string()
}

#[test]
fn python_reads_the_device_as_linux_prints_it() {
    let out = stdout(&preloaded("python3", "python3", &["-c", PY], "127.0.0.1"));
    assert_eq!(value(&out, "devices"), "['softib0']");
    assert_eq!(value(&out, "node_type"), "1: CA");
    assert_eq!(value(&out, "node_guid"), "0250:ffff:7f00:0001");
    assert_eq!(value(&out, "sys_image_guid"), "0250:ffff:7f00:0001");
    assert_eq!(value(&out, "fw_ver"), env!("CARGO_PKG_VERSION"));
    assert_eq!(value(&out, "ports/1/state"), "4: ACTIVE");
    assert_eq!(value(&out, "ports/1/phys_state"), "5: LinkUp");
    assert_eq!(value(&out, "ports/1/rate"), "100 Gb/sec (4X EDR)");
    assert_eq!(value(&out, "ports/1/link_layer"), "Ethernet");
    assert_eq!(
        value(&out, "ports/1/gids/0"),
        "0000:0000:0000:0000:0000:ffff:7f00:0001"
    );
    assert_eq!(
        value(&out, "ports/1/gids/1"),
        "0000:0000:0000:0000:0000:0000:0000:0000"
    );
    assert_eq!(value(&out, "ports/1/gid_attrs/types/0"), "RoCE v2");
    assert_eq!(value(&out, "ports/1/gid_attrs/ndevs/0"), "lo");
    assert_eq!(value(&out, "ports/1/pkeys/0"), "0xffff");
    assert_eq!(value(&out, "ports/1/cap_mask"), "0x04010000");
    assert_eq!(value(&out, "gids"), "1024");
    assert_eq!(value(&out, "net"), "['lo']");
    assert_eq!(value(&out, "ibdev"), "softib0");
    assert_eq!(value(&out, "abi"), "6");
    assert_eq!(value(&out, "node_access"), "True");
    // realpath stays under the viewed prefix, so what it returns can be opened again.
    assert_eq!(
        value(&out, "realpath"),
        "/sys/class/infiniband/softib0/ports/1"
    );
    assert_eq!(value(&out, "mtu_untouched"), "True");
    // sysfs attributes are read-only (EACCES, as kernfs says); the node opens read-write.
    assert_eq!(value(&out, "write_refused"), "True");
    assert_eq!(value(&out, "rdwr_refused"), "True");
    assert_eq!(value(&out, "node_opens_rdwr"), "True");
}

#[test]
fn the_device_node_is_a_character_device() {
    let out = stdout(&preloaded(
        "stat",
        "coreutils",
        &["-L", "-c", "%F %t:%T", "/dev/infiniband/uverbs0"],
        "127.0.0.1",
    ));
    let (kind, rdev) = out.trim().rsplit_once(' ').expect("two fields");
    assert_eq!(kind, "character special file");
    // The uverbs device's `dev` file names the same device numbers (stat prints hex).
    let dev = stdout(&preloaded(
        "cat",
        "coreutils",
        &["/sys/class/infiniband_verbs/uverbs0/dev"],
        "127.0.0.1",
    ));
    let (maj, min) = dev.trim().split_once(':').expect("major:minor");
    let hex = |s: &str| u32::from_str_radix(s, 16).expect("hex");
    let (smaj, smin) = rdev.split_once(':').expect("major:minor");
    assert_eq!(
        (hex(smaj), hex(smin)),
        (maj.parse().unwrap(), min.parse().unwrap())
    );
}

#[test]
fn the_files_agree_with_the_verbs() {
    let addr = "127.0.0.45";
    let info = stdout(&preloaded("ibv_devinfo", "ibverbs-utils", &["-v"], addr));
    let guid = stdout(&preloaded(
        "cat",
        "coreutils",
        &["/sys/class/infiniband/softib0/node_guid"],
        addr,
    ));
    assert!(
        info.contains(&format!("node_guid:\t\t\t{}", guid.trim())),
        "{guid} not in\n{info}"
    );
    let fw = stdout(&preloaded(
        "cat",
        "coreutils",
        &["/sys/class/infiniband/softib0/fw_ver"],
        addr,
    ));
    assert!(
        info.contains(&format!("fw_ver:\t\t\t\t{}", fw.trim())),
        "{fw}\n{info}"
    );
    assert!(
        info.contains("PORT_ACTIVE (4)") && info.contains("LINK_UP (5)"),
        "{info}"
    );
    assert!(info.contains("active_width:\t\t4X (2)"), "{info}");
    assert!(info.contains("gid_tbl_len:\t\t1024"), "{info}");
    let gid = stdout(&preloaded(
        "cat",
        "coreutils",
        &["/sys/class/infiniband/softib0/ports/1/gids/0"],
        addr,
    ));
    assert_eq!(gid.trim(), "0000:0000:0000:0000:0000:ffff:7f00:002d");
    let ty = stdout(&preloaded(
        "cat",
        "coreutils",
        &["/sys/class/infiniband/softib0/ports/1/gid_attrs/types/0"],
        addr,
    ));
    // ibv_devinfo prints the same GID (as an address) and type from the verbs.
    assert!(
        info.contains(&format!("GID[  0]:\t\t::ffff:{addr}, {}", ty.trim())),
        "{ty}\n{info}"
    );
}

#[test]
fn ls_lists_the_view() {
    let out = stdout(&preloaded(
        "ls",
        "coreutils",
        &[
            "-l",
            "/dev/infiniband",
            "/sys/class/infiniband/softib0/device/net",
        ],
        "127.0.0.1",
    ));
    assert!(out.contains("uverbs0 -> /dev/null"), "{out}");
    assert!(out.contains("lo -> /sys/class/net/lo"), "{out}");
}
