//! A free loopback address for one `softib run`, race-free among concurrent runs.
//!
//! Each candidate address 127.1.x.y has a lock file; a run takes the first candidate whose
//! file it can `flock` exclusively and whose UDP port it can bind at that moment. The lock
//! is taken on a descriptor that survives `exec`, so it is held by the program itself (and
//! whatever inherits the descriptor) until it exits, and released by the kernel however
//! it exits: no stale state, no daemon. Two runs started at the same instant (`mpirun -np
//! 4 softib run -- ./app`) cannot both hold one file, so they get different addresses.
//!
//! Why a lock and not only a bind probe: the program binds its socket later (when it opens
//! the device), so between the probe and that bind a second run would see the address
//! free too. Why not hand a bound socket to the shim: the program may open the device
//! many times, or never, or in a child; a socket passed through `exec` would be one more
//! thing the shim must find and trust, while the lock needs nothing from the program. A
//! process that is not a `softib run` and binds the address without the lock is still
//! detected by the probe, except in the instant between probe and its bind.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// How many candidates are tried before giving up.
const MAX_CANDIDATES: u32 = 4096;

/// A held address: the lock stays held while this descriptor (or a copy inherited across
/// `exec`) is open.
#[derive(Debug)]
pub struct HeldAddr {
    /// The address.
    pub addr: IpAddr,
    /// The locked file, kept open (and inheritable) for the program.
    pub lock: File,
}

/// The n-th candidate: 127.1.0.1, 127.1.0.2, ..., 127.1.0.254, 127.1.1.1, ... (clear of
/// 127.0.0.x, which people and tests use by hand).
pub fn candidate(n: u32) -> Ipv4Addr {
    let (hi, lo) = (n / 254, n % 254 + 1);
    Ipv4Addr::new(127, 1, (hi & 0xff) as u8, lo as u8)
}

/// `$TMPDIR/softib-addr-<uid>`, private to this user.
fn lock_dir() -> io::Result<PathBuf> {
    let uid = std::fs::metadata("/proc/self")?.uid();
    let dir = std::env::temp_dir().join(format!("softib-addr-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not a directory of uid {uid}", dir.display()),
        ));
    }
    Ok(dir)
}

/// Tries to take `file`'s lock without waiting.
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor this function borrows, which stays open.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Makes `file` survive `exec` (std opens every file close-on-exec).
fn keep_across_exec(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl F_GETFD/F_SETFD on a descriptor we own; no pointers involved.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True when nothing holds UDP `addr:port` now.
fn udp_free(addr: IpAddr, port: u16) -> bool {
    UdpSocket::bind(SocketAddr::new(addr, port)).is_ok()
}

/// Takes the first free candidate for UDP port `port`.
pub fn take_free(port: u16) -> anyhow::Result<HeldAddr> {
    let dir =
        lock_dir().map_err(|e| anyhow::anyhow!("cannot use the address lock directory: {e}"))?;
    for n in 0..MAX_CANDIDATES {
        let addr = IpAddr::V4(candidate(n));
        let path = dir.join(format!("{addr}.lock"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        if !try_lock(&file).map_err(|e| anyhow::anyhow!("cannot lock {}: {e}", path.display()))? {
            continue;
        }
        if !udp_free(addr, port) {
            // Held by a process that is not a `softib run` (or an address this host lacks).
            continue;
        }
        keep_across_exec(&file)?;
        return Ok(HeldAddr { addr, lock: file });
    }
    anyhow::bail!(
        "no free loopback address among the first {MAX_CANDIDATES} candidates 127.1.x.y \
         (UDP port {port}); give one with --addr"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_distinct_host_addresses() {
        assert_eq!(candidate(0), Ipv4Addr::new(127, 1, 0, 1));
        assert_eq!(candidate(253), Ipv4Addr::new(127, 1, 0, 254));
        assert_eq!(candidate(254), Ipv4Addr::new(127, 1, 1, 1));
        let all: std::collections::HashSet<_> = (0..MAX_CANDIDATES).map(candidate).collect();
        assert_eq!(all.len(), MAX_CANDIDATES as usize);
    }

    #[test]
    fn a_held_address_is_not_handed_out_again() {
        let a = take_free(47911).unwrap();
        let b = take_free(47911).unwrap();
        assert_ne!(a.addr, b.addr);
        drop(a);
        let c = take_free(47911).unwrap();
        assert_ne!(c.addr, b.addr);
    }
}
