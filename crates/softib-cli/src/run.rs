//! `softib run [--addr A] -- PROGRAM ARGS`: runs an unmodified RDMA program on a softib
//! device. It preloads the verbs shim (`libsoftib_verbs_shim.so`, which also shows the
//! device in sysfs and `/dev/infiniband`, see docs/verbs-shim.md), gives the device an
//! address of its own (a free loopback address unless `--addr` says otherwise, so every
//! rank of `mpirun -np N softib run -- ./app` gets its own device), and then becomes the
//! program (`exec`): its exit status, signals and PID are the program's.

mod addr_lock;

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use clap::Args;

/// The shim's file name.
const SHIM_NAME: &str = "libsoftib_verbs_shim.so";

/// RoCEv2's UDP port, the shim's default (`SOFTIB_PORT`).
const ROCE_PORT: u16 = 4791;

/// Options of `softib run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Address of the device (SOFTIB_ADDR). Default: a free loopback address 127.1.x.y,
    /// held for the program's lifetime so concurrent runs never share one.
    #[arg(long)]
    addr: Option<IpAddr>,
    /// UDP port of the device and its peers (SOFTIB_PORT).
    #[arg(long, default_value_t = ROCE_PORT)]
    port: u16,
    /// Device name the program sees (SOFTIB_DEVICE).
    #[arg(long)]
    device: Option<String>,
    /// The verbs shim to preload. Default: $SOFTIB_SHIM, else libsoftib_verbs_shim.so next
    /// to the softib binary.
    #[arg(long)]
    shim: Option<PathBuf>,
    /// Print the chosen address and shim on stderr before starting the program.
    #[arg(short, long)]
    verbose: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    program: Vec<OsString>,
}

/// The shim to preload: `--shim`, `$SOFTIB_SHIM`, or the one beside this binary.
fn find_shim(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    let (path, from) = match (flag, std::env::var_os("SOFTIB_SHIM")) {
        (Some(p), _) => (p.to_path_buf(), "--shim"),
        (None, Some(p)) if !p.is_empty() => (PathBuf::from(p), "SOFTIB_SHIM"),
        _ => {
            let exe = std::env::current_exe().context("cannot find the softib binary's path")?;
            let dir = exe.parent().unwrap_or(Path::new("."));
            (dir.join(SHIM_NAME), "the softib binary's directory")
        }
    };
    if !path.is_file() {
        bail!(
            "the verbs shim {} (from {from}) does not exist: build it with `cargo build \
             --release -p softib-verbs-shim` (it lands next to softib), or give its path \
             with --shim or SOFTIB_SHIM",
            path.display()
        );
    }
    // The dynamic loader resolves a relative LD_PRELOAD against the program's working
    // directory, which is not ours to assume.
    std::fs::canonicalize(&path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// LD_PRELOAD with the shim first (and once), keeping what the caller preloads.
fn preload_list(shim: &Path, existing: Option<OsString>) -> OsString {
    let mut out = OsString::from(shim);
    if let Some(old) = existing {
        let old = old.to_string_lossy().into_owned();
        for part in old.split([':', ' ']).filter(|p| !p.is_empty()) {
            if Path::new(part) != shim {
                out.push(":");
                out.push(part);
            }
        }
    }
    out
}

/// Runs the program; returns only when it cannot be started.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let shim = find_shim(args.shim.as_deref())?;
    if args.port == 0 {
        bail!("--port must be 1..65535");
    }
    if let Some(d) = &args.device {
        if d.is_empty() || d.len() >= 64 || !d.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
            bail!("--device {d:?}: expected 1..63 printable characters other than '/'");
        }
    }
    // Held until the program exits (the descriptor is inherited across exec).
    let (addr, _lock) = match args.addr {
        Some(a) => {
            // In use by another softib process is fine: processes share an address as
            // they share a kernel device (docs/design/net.md).
            match UdpSocket::bind(SocketAddr::new(a, args.port)) {
                Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => bail!(
                    "cannot use --addr {a}: UDP {a}:{} cannot be bound ({e}); it must be an \
                     address of this host",
                    args.port
                ),
                _ => {}
            }
            (a, None)
        }
        None => {
            let held = addr_lock::take_free(args.port)?;
            (held.addr, Some(held.lock))
        }
    };
    let (program, rest) = args
        .program
        .split_first()
        .context("no program given: softib run [OPTIONS] -- PROGRAM [ARGS]")?;
    if args.verbose {
        eprintln!(
            "softib run: {} on {addr} (UDP {}), preloading {}",
            args.device.as_deref().unwrap_or("softib0"),
            args.port,
            shim.display()
        );
    }
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env(
            "LD_PRELOAD",
            preload_list(&shim, std::env::var_os("LD_PRELOAD")),
        )
        .env("SOFTIB_ADDR", addr.to_string())
        .env("SOFTIB_PORT", args.port.to_string());
    if let Some(d) = &args.device {
        cmd.env("SOFTIB_DEVICE", d);
    }
    let err = cmd.exec();
    // As a shell reports it: 127 when the program does not exist, 126 when it cannot run.
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    eprintln!(
        "softib: error: cannot run {}: {err}",
        Path::new(program).display()
    );
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_goes_first_and_once() {
        let shim = Path::new("/x/libsoftib_verbs_shim.so");
        assert_eq!(
            preload_list(shim, None),
            OsString::from("/x/libsoftib_verbs_shim.so")
        );
        assert_eq!(
            preload_list(shim, Some("/a.so /x/libsoftib_verbs_shim.so:/b.so".into())),
            OsString::from("/x/libsoftib_verbs_shim.so:/a.so:/b.so")
        );
    }
}
