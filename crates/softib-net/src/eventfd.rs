//! [`EventFd`]: an `eventfd(2)` in one of the two modes softib needs, the one wrapper
//! softib-net and the verbs shim both use.
//!
//! - [`EventFd::readiness`]: a non-blocking counter used as a readiness flag. softib-net's
//!   completion channels keep it non-zero exactly while events wait, so the descriptor
//!   polls readable then; [`EventFd::take`] resets it (WouldBlock when it already is zero).
//! - [`EventFd::semaphore`]: a blocking semaphore (`EFD_SEMAPHORE`). Each
//!   [`EventFd::signal`] lets exactly one [`EventFd::take`] return, in order, as a read of
//!   the kernel's completion channel or async event descriptor returns once per event; the
//!   shim's channels are built on it.
//!
//! Both are close-on-exec, as libibverbs opens its descriptors. Every `unsafe` block
//! carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// An owned `eventfd(2)` descriptor.
#[derive(Debug)]
pub struct EventFd(File);

impl EventFd {
    /// A non-blocking counter starting at 0: readable while non-zero.
    pub fn readiness() -> io::Result<EventFd> {
        EventFd::with_flags(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)
    }

    /// A blocking semaphore starting at 0: every signal makes exactly one take return.
    pub fn semaphore() -> io::Result<EventFd> {
        EventFd::with_flags(libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC)
    }

    fn with_flags(flags: libc::c_int) -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel, is open, and nothing else owns it.
        Ok(EventFd(File::from(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Adds one to the counter. An eventfd write of 1 fails only when the counter is at
    /// 2^64 - 2, which no user of this type comes near, so the result is not reported.
    pub fn signal(&self) {
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }

    /// One read of the counter. A readiness counter gives its whole value and drops to 0
    /// (`WouldBlock` when it is 0 already); a semaphore takes one and gives 1, blocking
    /// while it is 0 unless the application made the descriptor non-blocking (then
    /// `WouldBlock`). A signal that interrupts a blocking take fails it with `Interrupted`
    /// (EINTR), unless its handler was installed with SA_RESTART, when the kernel restarts
    /// the read: exactly what a read on the kernel's completion channel fd does, and what
    /// programs that end a blocking `ibv_get_cq_event` with SIGALRM (qperf) rely on.
    pub fn take(&self) -> io::Result<u64> {
        let mut b = [0u8; 8];
        match (&self.0).read(&mut b) {
            Ok(8) => Ok(u64::from_ne_bytes(b)),
            Ok(_) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Err(e) => Err(e),
        }
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readiness_counter_gives_its_whole_count_then_would_block() {
        let e = EventFd::readiness().unwrap();
        assert_eq!(
            e.take().unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "a new counter is 0"
        );
        e.signal();
        e.signal();
        assert_eq!(e.take().unwrap(), 2);
        assert_eq!(e.take().unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn a_semaphore_returns_once_per_signal_and_blocks_until_the_next() {
        let e = std::sync::Arc::new(EventFd::semaphore().unwrap());
        e.signal();
        e.signal();
        assert_eq!(e.take().unwrap(), 1);
        assert_eq!(e.take().unwrap(), 1);
        let signaller = {
            let e = e.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                e.signal();
            })
        };
        let start = std::time::Instant::now();
        assert_eq!(e.take().unwrap(), 1, "the take waits for the late signal");
        assert!(start.elapsed() >= std::time::Duration::from_millis(40));
        signaller.join().unwrap();
    }
}
