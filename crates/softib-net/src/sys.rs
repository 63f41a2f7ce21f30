//! The only module of softib-net that calls the kernel through raw pointers.
//!
//! Everything here wraps one Linux socket call the safe crates do not offer (socket2 has no
//! `recvmmsg`/`sendmmsg` and no control-message parsing): the batched datagram calls with
//! their control messages (UDP GSO segment size, UDP GRO segment size, IPv4 TOS / IPv6
//! traffic class), integer socket options, and `poll(2)` for the blocking mode. Every
//! `unsafe` block carries a `// SAFETY:` comment saying why the pointers it hands the
//! kernel are valid for the duration of the call. No allocation happens here: all arrays
//! handed to the kernel live on the stack or in buffers the caller preallocated.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Most datagrams (or GSO groups) handed to one `sendmmsg`/`recvmmsg` call. The kernel caps
/// a call at `UIO_MAXIOV` (1024); 64 keeps the on-stack arrays small (about 10 KiB).
pub(crate) const MAX_MMSG: usize = 64;

/// Bytes of control-message space per datagram: room for one `int` (GRO or GSO segment
/// size) and one `int` (TOS / traffic class), each `CMSG_SPACE(4)` = 16 bytes on 64-bit.
pub(crate) const CMSG_BUF: usize = 64;

/// One datagram's control-message buffer, aligned as `cmsghdr` requires.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct CmsgBuf(pub(crate) [u8; CMSG_BUF]);

impl Default for CmsgBuf {
    fn default() -> Self {
        CmsgBuf([0; CMSG_BUF])
    }
}

/// A peer address in the form the kernel reads and writes (plain data, `Send`).
#[derive(Clone, Copy)]
pub(crate) struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl Default for RawAddr {
    fn default() -> Self {
        // SAFETY: sockaddr_storage is plain old data for which all-zero bytes is a valid
        // value (family AF_UNSPEC).
        let storage = unsafe { MaybeUninit::<libc::sockaddr_storage>::zeroed().assume_init() };
        RawAddr { storage, len: 0 }
    }
}

impl RawAddr {
    /// Encodes `addr` as a `sockaddr_in` / `sockaddr_in6`.
    pub(crate) fn from_socket_addr(addr: &SocketAddr) -> RawAddr {
        let mut raw = RawAddr::default();
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for every
                // sockaddr type, so writing a sockaddr_in at its start stays in bounds.
                unsafe {
                    std::ptr::write(
                        (&mut raw.storage as *mut libc::sockaddr_storage)
                            .cast::<libc::sockaddr_in>(),
                        sin,
                    )
                };
                raw.len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, sockaddr_storage holds any sockaddr_in6.
                unsafe {
                    std::ptr::write(
                        (&mut raw.storage as *mut libc::sockaddr_storage)
                            .cast::<libc::sockaddr_in6>(),
                        sin6,
                    )
                };
                raw.len = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            }
        }
        raw
    }

    /// Decodes what the kernel wrote; `None` for a family other than IPv4/IPv6.
    pub(crate) fn socket_addr(&self) -> Option<SocketAddr> {
        match i32::from(self.storage.ss_family) {
            libc::AF_INET if self.len as usize >= size_of::<libc::sockaddr_in>() => {
                // SAFETY: the family says the kernel wrote a sockaddr_in, which fits in
                // the (larger, suitably aligned) storage.
                let sin = unsafe {
                    std::ptr::read(
                        (&self.storage as *const libc::sockaddr_storage)
                            .cast::<libc::sockaddr_in>(),
                    )
                };
                let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::V4(SocketAddrV4::new(
                    ip,
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 if self.len as usize >= size_of::<libc::sockaddr_in6>() => {
                // SAFETY: the family says the kernel wrote a sockaddr_in6.
                let sin6 = unsafe {
                    std::ptr::read(
                        (&self.storage as *const libc::sockaddr_storage)
                            .cast::<libc::sockaddr_in6>(),
                    )
                };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// An epoll instance: one descriptor that is readable when any descriptor added to it is,
/// so a thread can wait on a set that changes (the device socket plus its multicast group
/// sockets) through one stable descriptor.
#[derive(Debug)]
pub(crate) struct Epoll(std::os::fd::OwnedFd);

impl Epoll {
    /// A new, empty epoll instance (close-on-exec).
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; the kernel returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(Epoll(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        }))
    }

    fn ctl(&self, op: i32, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a live local the kernel reads during the call only.
        let rc =
            unsafe { libc::epoll_ctl(std::os::fd::AsRawFd::as_raw_fd(&self.0), op, fd, &mut ev) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Watches `fd` for readability.
    pub(crate) fn add(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd)
    }

    /// Stops watching `fd` (before it is closed).
    pub(crate) fn remove(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd)
    }

    /// The epoll descriptor, to `poll` on.
    pub(crate) fn raw_fd(&self) -> RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }
}

/// Sets an `int`-valued socket option.
pub(crate) fn set_int_opt(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the option value pointer refers to a live local `int` and the length passed
    // is exactly its size; the kernel only reads it during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads an `int`-valued socket option.
pub(crate) fn get_int_opt(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut value: i32 = 0;
    let mut len = size_of::<i32>() as libc::socklen_t;
    // SAFETY: value and len are live locals; len tells the kernel the buffer's size, and
    // the kernel writes at most that many bytes.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut i32).cast(), &mut len) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What the kernel reported about one received datagram (or GRO super-datagram).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvInfo {
    /// Bytes written into the slot.
    pub(crate) len: usize,
    /// The message did not fit its slot (`MSG_TRUNC`).
    pub(crate) truncated: bool,
    /// IPv4 TOS or IPv6 traffic class byte, when the kernel attached one.
    pub(crate) tos: Option<u8>,
    /// GRO segment size when the kernel coalesced several datagrams into this slot.
    pub(crate) gro_segment: Option<usize>,
}

/// Receives up to `infos.len()` datagrams without blocking, one per `slot_len`-byte slot of
/// `data`. Returns how many arrived (0 when none were waiting).
pub(crate) fn recv_mmsg(
    fd: RawFd,
    data: &mut [u8],
    slot_len: usize,
    addrs: &mut [RawAddr],
    cmsgs: &mut [CmsgBuf],
    infos: &mut [RecvInfo],
) -> io::Result<usize> {
    let n = infos
        .len()
        .min(addrs.len())
        .min(cmsgs.len())
        .min(MAX_MMSG)
        .min(data.len() / slot_len.max(1));
    if n == 0 {
        return Ok(0);
    }
    // Only the `n` entries handed to the kernel are written (the arrays stay otherwise
    // uninitialised): an empty poll, the common case of a busy-polling device, then costs
    // no more than the entries it offers.
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_MMSG];
    let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_MMSG];
    let base = data.as_mut_ptr();
    for i in 0..n {
        // SAFETY: i < n <= data.len() / slot_len, so the slot [i*slot_len, (i+1)*slot_len)
        // lies inside `data`; the pointer stays valid while `data` is mutably borrowed.
        let iov = iovs[i].write(libc::iovec {
            iov_base: unsafe { base.add(i * slot_len) }.cast(),
            iov_len: slot_len,
        });
        addrs[i].len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: mmsghdr is plain old data (pointers, integers, padding), for which all
        // zero bytes are a valid value; the fields that matter are set right after.
        let mut m: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        m.msg_hdr.msg_name = (&mut addrs[i].storage as *mut libc::sockaddr_storage).cast();
        m.msg_hdr.msg_namelen = addrs[i].len;
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
        m.msg_hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
        m.msg_hdr.msg_controllen = CMSG_BUF as _;
        hdrs[i].write(m);
    }
    // One slot goes to `recvmsg`: `recvmmsg` adds its own set-up and, after a datagram,
    // a second receive attempt that finds the queue empty; a polling device offers one slot
    // to its (mostly empty) polls and to the datagram it waits for (see `RxBatch::offer`).
    let rc = if n == 1 {
        // SAFETY: hdrs[0] is initialised (n == 1) and points at an iovec, address storage
        // and a control buffer that are live and exclusively borrowed for the call, with
        // lengths that match their sizes; the kernel writes only within them and stores the
        // lengths it used back into the header. MSG_DONTWAIT makes it non-blocking.
        let r = unsafe {
            let m = hdrs[0].assume_init_mut();
            libc::syscall(
                libc::SYS_recvmsg,
                fd,
                &mut m.msg_hdr as *mut libc::msghdr,
                libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            // SAFETY: initialised above; recvmsg returns the datagram's length, which
            // recvmmsg would have stored in msg_len.
            unsafe { hdrs[0].assume_init_mut() }.msg_len = r as libc::c_uint;
            1
        } else {
            r
        }
    } else {
        // SAFETY: hdrs[..n] are initialised and point at iovecs, address storage and
        // control buffers that are all live and exclusively borrowed for the duration of
        // the call, with lengths that match their sizes; the kernel reads n entries and
        // writes only within them. MSG_DONTWAIT makes it non-blocking. The raw system call
        // skips libc's cancellation-point bookkeeping, a visible cost at millions of
        // (mostly empty) calls.
        unsafe {
            libc::syscall(
                libc::SYS_recvmmsg,
                fd,
                hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut::<libc::timespec>(),
            )
        }
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        return Err(err);
    }
    let got = (rc as usize).min(n);
    for i in 0..got {
        // SAFETY: entries below n were initialised above (and updated by the kernel).
        let m = unsafe { hdrs[i].assume_init_ref() };
        let h = &m.msg_hdr;
        addrs[i].len = h.msg_namelen;
        let mut info = RecvInfo {
            len: (m.msg_len as usize).min(slot_len),
            truncated: h.msg_flags & libc::MSG_TRUNC != 0,
            tos: None,
            gro_segment: None,
        };
        parse_cmsgs(h, &mut info);
        infos[i] = info;
    }
    Ok(got)
}

/// Reads the control messages the kernel attached to one received datagram.
fn parse_cmsgs(h: &libc::msghdr, info: &mut RecvInfo) {
    // SAFETY: `h` was filled by a successful recvmmsg; msg_control/msg_controllen describe
    // the caller's control buffer, which is still borrowed. CMSG_FIRSTHDR/CMSG_NXTHDR only
    // return headers lying entirely within that buffer (or null).
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(h) };
    while !cmsg.is_null() {
        // SAFETY: cmsg is non-null and points inside the control buffer (see above).
        let c = unsafe { &*cmsg };
        let data_len = c.cmsg_len as usize - cmsg_header_len();
        // SAFETY: CMSG_DATA points just past the header, inside the same control message,
        // whose payload is data_len bytes long; read_unaligned copes with any alignment.
        let data = unsafe { libc::CMSG_DATA(cmsg) };
        let read_int = || -> Option<i32> {
            if data_len >= 4 {
                // SAFETY: at least four payload bytes exist (checked just above).
                Some(unsafe { std::ptr::read_unaligned(data.cast::<i32>()) })
            } else {
                None
            }
        };
        match (c.cmsg_level, c.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_TOS) if data_len >= 1 => {
                // SAFETY: at least one payload byte exists.
                info.tos = Some(unsafe { *data });
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                info.tos = read_int().map(|v| v as u8);
            }
            (libc::SOL_UDP, libc::UDP_GRO) => {
                info.gro_segment = read_int().and_then(|v| usize::try_from(v).ok());
            }
            _ => {}
        }
        // SAFETY: as for CMSG_FIRSTHDR: returns the next header inside the buffer or null.
        cmsg = unsafe { libc::CMSG_NXTHDR(h, cmsg) };
    }
}

fn cmsg_header_len() -> usize {
    // SAFETY: CMSG_LEN is a pure arithmetic macro.
    unsafe { libc::CMSG_LEN(0) as usize }
}

/// One datagram, or one UDP GSO group of equal-size segments, to send.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendItem {
    /// Offset of the first byte in the caller's data buffer.
    pub(crate) offset: usize,
    /// Total bytes (all segments).
    pub(crate) len: usize,
    /// GSO segment size, `None` to send the bytes as one datagram.
    pub(crate) segment: Option<u16>,
    /// IPv4 TOS / IPv6 traffic class for this item, `None` for the socket default.
    pub(crate) tos: Option<u8>,
    /// Index into the caller's address table.
    pub(crate) addr: usize,
}

/// Sends `items` with one `sendmmsg` call (at most `MAX_MMSG` of them) and returns how many
/// the kernel took. `ipv6` chooses the TOS control message's level.
pub(crate) fn send_mmsg(
    fd: RawFd,
    data: &[u8],
    addrs: &[RawAddr],
    items: &[SendItem],
    ipv6: bool,
) -> io::Result<usize> {
    let n = items.len().min(MAX_MMSG);
    if n == 0 {
        return Ok(0);
    }
    // Only the `n` entries handed to the kernel are written: zeroing all `MAX_MMSG` headers
    // and control buffers (about 9 KiB) cost more than the usual one or two datagrams.
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_MMSG];
    let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_MMSG];
    let mut cmsgs = [const { MaybeUninit::<CmsgBuf>::uninit() }; MAX_MMSG];
    for (i, item) in items[..n].iter().enumerate() {
        let Some(bytes) = data.get(item.offset..item.offset + item.len) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "send item outside buffer",
            ));
        };
        let Some(addr) = addrs.get(item.addr) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "send item without address",
            ));
        };
        // The kernel only reads through this pointer (sendmmsg never writes the payload).
        let iov = iovs[i].write(libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        });
        // SAFETY: mmsghdr is plain old data for which all-zero bytes are a valid value
        // (no control messages, no flags); the fields that matter are set right after.
        let mut m: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        let h = &mut m.msg_hdr;
        h.msg_name = (&addr.storage as *const libc::sockaddr_storage) as *mut libc::c_void;
        h.msg_namelen = addr.len;
        h.msg_iov = iov;
        h.msg_iovlen = 1;
        if item.segment.is_some() || item.tos.is_some() {
            let buf = &mut cmsgs[i].write(CmsgBuf::default()).0;
            let mut used = 0usize;
            if let Some(seg) = item.segment {
                used += write_cmsg(
                    &mut buf[used..],
                    libc::SOL_UDP,
                    libc::UDP_SEGMENT,
                    &seg.to_ne_bytes(),
                );
            }
            if let Some(tos) = item.tos {
                let (level, name) = if ipv6 {
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                } else {
                    (libc::IPPROTO_IP, libc::IP_TOS)
                };
                used += write_cmsg(&mut buf[used..], level, name, &i32::from(tos).to_ne_bytes());
            }
            if used > 0 {
                h.msg_control = buf.as_mut_ptr().cast();
                h.msg_controllen = used as _;
            }
        }
        hdrs[i].write(m);
    }
    // One datagram (or GSO group) goes to `sendmsg`, which skips `sendmmsg`'s per-call
    // set-up; both are raw system calls, without libc's cancellation-point bookkeeping.
    let rc = if n == 1 {
        // SAFETY: hdrs[0] is initialised and references an iovec, an address, payload bytes
        // and (when set) a control buffer that all outlive the call, with lengths matching
        // their sizes; sendmsg only reads them. MSG_DONTWAIT makes it non-blocking.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sendmsg,
                fd,
                &hdrs[0].assume_init_ref().msg_hdr as *const libc::msghdr,
                libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            1
        } else {
            r
        }
    } else {
        // SAFETY: hdrs[..n] are initialised and reference iovecs, addresses, payload bytes
        // and control buffers that all outlive the call, with lengths matching their sizes;
        // sendmmsg only reads them (and writes each entry's msg_len, inside hdrs).
        unsafe {
            libc::syscall(
                libc::SYS_sendmmsg,
                fd,
                hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Writes one control message into `buf` and returns the space it took (`CMSG_SPACE`).
fn write_cmsg(buf: &mut [u8], level: i32, name: i32, payload: &[u8]) -> usize {
    // SAFETY: CMSG_SPACE and CMSG_LEN are pure arithmetic macros.
    let space = unsafe { libc::CMSG_SPACE(payload.len() as u32) } as usize;
    // SAFETY: as above.
    let len = unsafe { libc::CMSG_LEN(payload.len() as u32) } as usize;
    let header = cmsg_header_len();
    if buf.len() < space {
        return 0;
    }
    // SAFETY: cmsghdr is plain old data; all-zero is valid.
    let mut h: libc::cmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    h.cmsg_len = len as _;
    h.cmsg_level = level;
    h.cmsg_type = name;
    // SAFETY: buf has at least `space` >= size_of::<cmsghdr>() bytes; write_unaligned makes
    // no alignment assumption (the buffers are 8-aligned at every CMSG_SPACE step anyway).
    unsafe { std::ptr::write_unaligned(buf.as_mut_ptr().cast::<libc::cmsghdr>(), h) };
    buf[header..header + payload.len()].copy_from_slice(payload);
    space
}

/// Waits until `fd` is readable (or writable with `write`), or `timeout_ms` passes
/// (negative: forever). Returns whether it became ready.
pub(crate) fn poll_fd(fd: RawFd, write: bool, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = [libc::pollfd {
        fd,
        events: if write { libc::POLLOUT } else { libc::POLLIN },
        revents: 0,
    }];
    let timeout = u64::try_from(timeout_ms)
        .ok()
        .map(std::time::Duration::from_millis);
    ppoll_retrying(&mut pfd, timeout)?;
    Ok(pfd[0].revents != 0)
}

/// Waits until `a` or `b` is readable, or `timeout` passes (`None`: forever), with
/// nanosecond precision (`ppoll`), so short engine timers (pacing, ACK timeouts) are not
/// rounded up to milliseconds. Returns (a readable, b readable).
pub(crate) fn poll_two(
    a: RawFd,
    b: RawFd,
    timeout: Option<std::time::Duration>,
) -> io::Result<(bool, bool)> {
    let mut pfds = [readable(a), readable(b)];
    ppoll_retrying(&mut pfds, timeout)?;
    Ok((pfds[0].revents != 0, pfds[1].revents != 0))
}

/// Descriptors [`poll_set`] watches from an array on the stack; more go to the heap (a
/// device with many multicast groups), fewer cost no allocation per sleep.
const POLL_SET_ON_STACK: usize = 16;

/// Waits until one of `data` or `wake` is readable or `timeout` passes (`None`: no limit);
/// returns (a `data` descriptor is readable, `wake` is readable). Negative descriptors are
/// ignored, as ppoll(2) does.
pub(crate) fn poll_set(
    data: &[RawFd],
    wake: RawFd,
    timeout: Option<std::time::Duration>,
) -> io::Result<(bool, bool)> {
    let fds = data.iter().chain(std::iter::once(&wake));
    let mut on_stack = [readable(-1); POLL_SET_ON_STACK];
    let mut on_heap = Vec::new();
    let pfds: &mut [libc::pollfd] = if data.len() < POLL_SET_ON_STACK {
        for (p, &fd) in on_stack.iter_mut().zip(fds) {
            *p = readable(fd);
        }
        &mut on_stack[..=data.len()]
    } else {
        on_heap.extend(fds.map(|&fd| readable(fd)));
        &mut on_heap
    };
    ppoll_retrying(pfds, timeout)?;
    let (last, rest) = pfds.split_last().unwrap_or((&pfds[0], &[]));
    Ok((rest.iter().any(|p| p.revents != 0), last.revents != 0))
}

/// A `pollfd` waiting for `fd` to be readable (a negative `fd` is skipped by the kernel).
fn readable(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// `ppoll(2)` on `pfds` until one is ready or `timeout` passes (`None`: forever), with
/// nanosecond precision; an interrupted call is retried with the same timeout. The
/// `revents` of `pfds` say which are ready.
fn ppoll_retrying(
    pfds: &mut [libc::pollfd],
    timeout: Option<std::time::Duration>,
) -> io::Result<()> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    loop {
        // SAFETY: pfds is a live exclusive slice and the count passed is its length; ts_ptr
        // is null or points to the live local `ts`; a null signal mask leaves it unchanged.
        let rc = unsafe {
            libc::ppoll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                ts_ptr,
                std::ptr::null(),
            )
        };
        if rc >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Descriptors a forked child must not keep: the device's sockets (see [`ForkGuard`]).
const FORK_GUARDS: usize = 256;
/// Each entry is `family << 32 | fd`, or -1 when free: one atomic, so the fork handler never
/// sees a descriptor with another entry's family.
static FORK_FDS: [std::sync::atomic::AtomicI64; FORK_GUARDS] =
    [const { std::sync::atomic::AtomicI64::new(-1) }; FORK_GUARDS];

/// Runs in the child of every `fork()`: replaces each guarded socket by a fresh unbound
/// socket of its family under the same descriptor number. The child has no device thread
/// and must open a device of its own; a copy of the parent's sockets would keep the
/// parent's UDP port and abstract names bound after the parent closes them (no other
/// process could take over the port, a listener's service ID would stay claimed), and a
/// read from them would steal the parent's datagrams. The number stays valid, so the
/// inherited objects that still refer to it close a descriptor of their own. Only
/// async-signal-safe calls (socket, dup2, close) and atomics, as a fork handler needs.
extern "C" fn release_guarded_in_child() {
    use std::sync::atomic::Ordering;
    for entry in FORK_FDS.iter() {
        let entry = entry.load(Ordering::Relaxed);
        if entry < 0 {
            continue;
        }
        let (fd, family) = (entry as i32, (entry >> 32) as i32);
        // SAFETY: descriptor calls on numbers this process holds; if socket() fails the
        // inherited descriptor stays as it was.
        unsafe {
            let fresh = libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if fresh >= 0 {
                libc::dup2(fresh, fd);
                libc::close(fresh);
            }
        }
    }
}

/// While alive, a forked child gets a fresh unbound socket in place of descriptor `fd`
/// (see [`release_guarded_in_child`]). Drop it before the socket closes. Guards beyond
/// [`FORK_GUARDS`] are not kept (the descriptor is then inherited as before).
#[derive(Debug)]
pub(crate) struct ForkGuard(Option<usize>);

impl ForkGuard {
    /// Guards `fd`, a socket of address family `family` (`libc::AF_*`).
    pub(crate) fn new(fd: RawFd, family: i32) -> ForkGuard {
        use std::sync::atomic::Ordering;
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: the handler is a plain function of this crate, which is linked into
            // the program (or a preloaded library that is never unloaded).
            unsafe { libc::pthread_atfork(None, None, Some(release_guarded_in_child)) };
        });
        if fd < 0 {
            return ForkGuard(None);
        }
        let entry = (i64::from(family) << 32) | i64::from(fd);
        for (i, slot) in FORK_FDS.iter().enumerate() {
            if slot
                .compare_exchange(-1, entry, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return ForkGuard(Some(i));
            }
        }
        ForkGuard(None)
    }
}

impl Drop for ForkGuard {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            FORK_FDS[i].store(-1, std::sync::atomic::Ordering::Release);
        }
    }
}

/// The name of the network interface that holds `ip`, if any (getifaddrs(3)).
pub(crate) fn interface_of(ip: std::net::IpAddr) -> io::Result<Option<String>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a pointer to a list it allocates into `head`, a live local.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a non-null node of the list getifaddrs returned, valid until
        // freeifaddrs below.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            let mut raw = RawAddr::default();
            // SAFETY: ifa_addr points to a sockaddr whose family says its size; we copy at
            // most the size of that family's struct, which the kernel allocated in full.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            let size = match family {
                libc::AF_INET => size_of::<libc::sockaddr_in>(),
                libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
                _ => 0,
            };
            if size > 0 {
                // SAFETY: copies `size` bytes from the kernel's sockaddr into storage, which
                // is larger than any sockaddr (see above for the source's validity).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        ifa.ifa_addr.cast::<u8>(),
                        (&mut raw.storage as *mut libc::sockaddr_storage).cast::<u8>(),
                        size,
                    )
                };
                raw.len = size as libc::socklen_t;
                if raw.socket_addr().map(|a| a.ip()) == Some(ip) && !ifa.ifa_name.is_null() {
                    // SAFETY: ifa_name is a NUL-terminated string owned by the list.
                    let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
                    found = Some(name.to_string_lossy().into_owned());
                    break;
                }
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: head came from a successful getifaddrs and is freed exactly once; no
    // reference into the list outlives this point (the name was copied).
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}
