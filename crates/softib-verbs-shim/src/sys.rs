//! Thin safe wrappers over the few libc calls the shim needs: eventfd (completion channels
//! and the async event fd), errno, and the fork handler that gives up the device socket in
//! a child.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

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

/// Descriptor of the device's bound UDP socket, for the fork handler (-1: none open).
static DEVICE_SOCKET: AtomicI32 = AtomicI32::new(-1);
/// Address family of that socket (`AF_INET` or `AF_INET6`).
static DEVICE_SOCKET_FAMILY: AtomicI32 = AtomicI32::new(libc::AF_INET);

/// The descriptor of this process's UDP socket bound to `addr`, found by asking the open
/// descriptors for their local address (softib-net keeps its socket to itself).
pub fn find_bound_udp_socket(addr: SocketAddr) -> Option<RawFd> {
    std::fs::read_dir("/proc/self/fd")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
        .find(|&fd| local_udp_addr(fd) == Some(addr))
}

/// The local address of `fd` if it is a datagram socket.
fn local_udp_addr(fd: RawFd) -> Option<SocketAddr> {
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `ty`; a descriptor that is not a
    // socket makes it fail (ENOTSOCK), which is checked.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            std::ptr::from_mut(&mut ty).cast(),
            &mut len,
        )
    };
    if r != 0 || ty != libc::SOCK_DGRAM {
        return None;
    }
    // SAFETY: sockaddr_storage is plain data, for which all-zero bytes are a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getsockname writes at most `len` bytes into `ss`.
    if unsafe { libc::getsockname(fd, std::ptr::from_mut(&mut ss).cast(), &mut len) } != 0 {
        return None;
    }
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { std::ptr::from_ref(&ss).cast::<libc::sockaddr_in>().read() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { std::ptr::from_ref(&ss).cast::<libc::sockaddr_in6>().read() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::new(ip.into(), u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

/// Runs in the child of every `fork()`: replaces the inherited copy of the device socket
/// by a fresh unbound socket under the same descriptor number, so that the child no longer
/// holds the parent's address (if the child outlived the parent's device, the parent's
/// next `ibv_open_device` could not bind it: ENODEV) while whatever in the child still
/// refers to the number keeps a descriptor of its own to close. The child has no device
/// thread, so it could not serve the socket anyway. Only async-signal-safe calls
/// (socket, dup2, close), as a fork handler must.
extern "C" fn release_device_socket_in_child() {
    let fd = DEVICE_SOCKET.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let family = DEVICE_SOCKET_FAMILY.load(Ordering::Relaxed);
    // SAFETY: descriptor calls on numbers this process owns; if socket() fails, the
    // inherited descriptor stays as it was.
    unsafe {
        let fresh = libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fresh >= 0 {
            libc::dup2(fresh, fd);
            libc::close(fresh);
        }
    }
}

/// Records the device socket for [`release_device_socket_in_child`] (`None`: the device
/// closed), registering the fork handler on first use.
pub fn track_device_socket(fd: Option<RawFd>, ipv4: bool) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handler is a plain function of this library, which is never unloaded
        // while preloaded.
        unsafe { libc::pthread_atfork(None, None, Some(release_device_socket_in_child)) };
    });
    let family = if ipv4 { libc::AF_INET } else { libc::AF_INET6 };
    DEVICE_SOCKET_FAMILY.store(family, Ordering::Relaxed);
    DEVICE_SOCKET.store(fd.unwrap_or(-1), Ordering::Relaxed);
}
