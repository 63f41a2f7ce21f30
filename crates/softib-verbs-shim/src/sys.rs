//! Thin safe wrappers over the few libc calls the shim needs: eventfd (completion channels
//! and the async event fd), errno, clocks, file identity, exit hooks. (A forked child's copy of the
//! device's sockets is softib-net's business: its `sys::ForkGuard`.)
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A semaphore eventfd: every `signal` makes exactly one `wait` return, in order.
#[derive(Debug)]
pub struct EventFd(File);

impl EventFd {
    /// A new close-on-exec semaphore eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; a negative result is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(EventFd(File::from(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Adds one to the counter.
    pub fn signal(&self) {
        // An eventfd write of 1 fails only when the counter is at 2^64-2.
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }

    /// Takes one from the counter, blocking while it is zero (unless the application made
    /// the descriptor non-blocking: then `WouldBlock`). A signal that interrupts the wait
    /// fails it with `Interrupted` (EINTR), unless the handler was installed with
    /// SA_RESTART, when the kernel restarts the read: exactly what a read on the kernel's
    /// completion channel fd does, and what programs that end a blocking
    /// `ibv_get_cq_event` with SIGALRM (qperf) rely on.
    pub fn wait(&self) -> io::Result<()> {
        let mut b = [0u8; 8];
        match (&self.0).read(&mut b) {
            Ok(8) => Ok(()),
            Ok(_) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Err(e) => Err(e),
        }
    }

    /// The descriptor applications poll on.
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

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
