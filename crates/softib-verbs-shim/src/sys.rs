//! Thin safe wrappers over the few libc calls the shim needs: errno, clocks, file identity,
//! exit hooks. Two are softib-net's business: the eventfd behind completion channels and
//! the async event fd (its `eventfd::EventFd`, in semaphore mode), and a forked child's
//! copy of the device's sockets (its `sys::ForkGuard`).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

/// Sets the calling thread's errno.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e }
}

/// Nanoseconds of a POSIX clock (`CLOCK_MONOTONIC`: the "HCA clock" of completion
/// timestamps and `ibv_query_rt_values_ex`; `CLOCK_REALTIME`: wall-clock timestamps).
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer; both clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// The (device, inode) of an open file: what names an XRC domain shared through a file
/// (ibv_open_xrcd(3)).
pub fn file_identity(fd: RawFd) -> io::Result<(u64, u64)> {
    // SAFETY: `stat` is plain data, for which all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`; a bad descriptor makes it fail (EBADF), checked.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// Registers `hook` to run at process exit (atexit(3)); it runs once per registration.
pub fn at_exit(hook: extern "C" fn()) {
    // SAFETY: atexit takes a plain `extern "C" fn()`, which lives as long as the library
    // (a preloaded library is never unloaded).
    unsafe { libc::atexit(hook) };
}
