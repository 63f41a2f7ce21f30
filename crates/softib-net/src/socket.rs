//! The RoCEv2 UDP socket: bind, options, batched receive and send.
//!
//! One non-blocking UDP socket per device, bound to the device's own IP address (never the
//! wildcard: the ICRC covers the destination address, which a wildcard socket would not
//! reveal without `IP_PKTINFO`) and port (4791 by default, IBA Annex A17.2.3). It
//! - receives with `recvmmsg` (`recvmsg` for one slot) into preallocated slots, with UDP
//!   GRO when the kernel offers it (a slot then holds several equal-size datagrams, split
//!   again by [`RxBatch::iter`]);
//! - sends with `sendmmsg` (`sendmsg` for one item), coalescing runs of equal-size
//!   datagrams to the same peer into UDP GSO groups when the kernel offers it;
//! - reports the IPv4 TOS / IPv6 traffic class of each received datagram (its low two bits
//!   are the ECN field, RFC 3168, which RoCEv2 congestion control reads, Annex A17.9.3);
//! - sets DF on IPv4 (`IP_PMTUDISC_DO`) and forbids local fragmentation on IPv6, because
//!   RoCEv2 packets are sized to the path MTU and a fragment would be a lost packet anyway.
//!
//! Where the kernel refuses an optimisation (old kernel, a device without checksum offload
//! rejects GSO with `EIO`), the socket turns it off, counts the fact in
//! [`SocketStats`], and carries on without it.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::sys::{self, CmsgBuf, RawAddr, RecvInfo, SendItem};

/// The IANA UDP destination port for RoCEv2 (IBA Annex A17.2.3).
pub const ROCE_V2_PORT: u16 = 4791;

/// ECN codepoint ECT(0) in the low two bits of the TOS / traffic class (RFC 3168 §5).
pub const ECN_ECT0: u8 = 0b10;
/// ECN codepoint CE (congestion experienced), RFC 3168 §5.
pub const ECN_CE: u8 = 0b11;

/// Largest UDP payload one GRO slot may hold (the IP total-length limit).
const MAX_SUPER_DATAGRAM: usize = 65_535;
/// Largest UDP payload of one GSO group: the IPv4 total length (65,535) less the IPv4 and
/// UDP headers; a larger group is refused with `EMSGSIZE` (IPv6 would allow 20 bytes more).
const MAX_GSO_PAYLOAD: usize = 65_535 - 20 - 8;
/// Segments per GSO group: Linux accepts up to `UDP_MAX_SEGMENTS` (64 before 6.9, 128 since).
const MAX_GSO_SEGMENTS: usize = 64;

/// How to open a [`RoceSocket`].
#[derive(Clone, Debug)]
pub struct SocketConfig {
    /// The local address and port (an unspecified address is refused, see the module doc).
    pub bind: SocketAddr,
    /// Default IPv4 TOS / IPv6 traffic class byte for sent datagrams (DSCP << 2 | ECN).
    /// The default, ECT(0), lets routers mark congestion instead of dropping.
    pub traffic_class: u8,
    /// Try UDP GSO on send.
    pub gso: bool,
    /// Try UDP GRO on receive.
    pub gro: bool,
    /// Kernel receive and send buffer size to request, bytes.
    pub socket_buffer: usize,
}

impl SocketConfig {
    /// A configuration with the defaults: ECT(0), GSO and GRO on, 4 MiB socket buffers.
    pub fn new(bind: SocketAddr) -> SocketConfig {
        SocketConfig {
            bind,
            traffic_class: ECN_ECT0,
            gso: true,
            gro: true,
            socket_buffer: 4 << 20,
        }
    }
}

/// Errors opening or configuring the socket.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The bind address was the wildcard.
    #[error(
        "bind address {0} is unspecified: give the device's own IP address (the ICRC covers it)"
    )]
    Unspecified(SocketAddr),
    /// A system call failed.
    #[error("{what} on {addr}: {source}")]
    Io {
        /// What softib was doing.
        what: &'static str,
        /// The address of the socket.
        addr: SocketAddr,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
}

/// Which optimisations the kernel accepted, and what the socket has counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// UDP GSO is in use.
    pub gso: bool,
    /// UDP GRO is in use.
    pub gro: bool,
    /// GSO was turned off after the kernel refused a GSO send.
    pub gso_disabled_at_runtime: bool,
    /// Received datagrams that did not fit their slot and were dropped.
    pub rx_truncated: u64,
    /// Received datagrams from an address that is not IPv4/IPv6 (dropped).
    pub rx_bad_source: u64,
    /// Datagrams the kernel refused to send (e.g. larger than the path MTU with DF set,
    /// or no route); dropped, as a lossy link would.
    pub tx_refused: u64,
}

/// A non-blocking RoCEv2 UDP socket with batched I/O.
#[derive(Debug)]
pub struct RoceSocket {
    socket: Socket,
    local: SocketAddr,
    ipv6: bool,
    traffic_class: u8,
    stats: SocketStats,
}

impl RoceSocket {
    /// Opens and binds the socket and negotiates GSO/GRO, ECN reporting and DF.
    pub fn bind(config: &SocketConfig) -> Result<RoceSocket, SocketError> {
        let addr = config.bind;
        if addr.ip().is_unspecified() {
            return Err(SocketError::Unspecified(addr));
        }
        let io = |what: &'static str| move |source| SocketError::Io { what, addr, source };
        let ipv6 = addr.is_ipv6();
        let domain = if ipv6 { Domain::IPV6 } else { Domain::IPV4 };
        let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(io("socket"))?;
        if ipv6 {
            socket.set_only_v6(true).map_err(io("IPV6_V6ONLY"))?;
        }
        socket.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
        let fd = socket.as_raw_fd();
        // Larger buffers absorb bursts while the engine thread is busy. As root the FORCE
        // variants exceed net.core.{r,w}mem_max; otherwise the plain ones get what they can.
        let size = i32::try_from(config.socket_buffer).unwrap_or(i32::MAX);
        if sys::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err() {
            let _ = socket.set_recv_buffer_size(config.socket_buffer);
        }
        if sys::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, size).is_err() {
            let _ = socket.set_send_buffer_size(config.socket_buffer);
        }
        if ipv6 {
            sys::set_int_opt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DO,
            )
            .map_err(io("IPV6_MTU_DISCOVER"))?;
            sys::set_int_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
                .map_err(io("IPV6_RECVTCLASS"))?;
            sys::set_int_opt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                i32::from(config.traffic_class),
            )
            .map_err(io("IPV6_TCLASS"))?;
        } else {
            sys::set_int_opt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )
            .map_err(io("IP_MTU_DISCOVER"))?;
            sys::set_int_opt(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
                .map_err(io("IP_RECVTOS"))?;
            sys::set_int_opt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_TOS,
                i32::from(config.traffic_class),
            )
            .map_err(io("IP_TOS"))?;
        }
        socket.bind(&addr.into()).map_err(io("bind"))?;
        if let std::net::IpAddr::V4(v4) = addr.ip() {
            // UD multicast (`mcast.rs`): datagrams to a group leave through the interface
            // of the device's own address (lo for 127.x), not the default route, and come
            // back to local members (IP_MULTICAST_LOOP is on by default).
            socket
                .set_multicast_if_v4(&v4)
                .map_err(io("IP_MULTICAST_IF"))?;
        }
        let local = socket
            .local_addr()
            .map_err(io("getsockname"))?
            .as_socket()
            .unwrap_or(addr);
        // GSO: probing with getsockopt tells whether the kernel knows the option at all;
        // a device that cannot segment only shows at the first send (handled there).
        let gso = config.gso && sys::get_int_opt(fd, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
        let gro = config.gro && sys::set_int_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        Ok(RoceSocket {
            socket,
            local,
            ipv6,
            traffic_class: config.traffic_class,
            stats: SocketStats {
                gso,
                gro,
                ..SocketStats::default()
            },
        })
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }

    /// The bound address (with the port the kernel chose if the config said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The socket's default TOS / traffic class byte.
    pub fn traffic_class(&self) -> u8 {
        self.traffic_class
    }

    /// Negotiated optimisations and counters.
    pub fn stats(&self) -> SocketStats {
        self.stats
    }

    /// A receive batch sized for this socket (GRO slots are 64 KiB, others `max_datagram`).
    pub fn rx_batch(&self, slots: usize, max_datagram: usize) -> RxBatch {
        let slot_len = if self.stats.gro {
            MAX_SUPER_DATAGRAM
        } else {
            max_datagram
        };
        RxBatch::new(slots.clamp(1, sys::MAX_MMSG), slot_len)
    }

    /// Receives what is waiting, without blocking, into `batch` (replacing its contents).
    /// Returns the number of datagrams (after splitting GRO slots); 0 when none waited.
    pub fn recv(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.filled = 0;
        let got = sys::recv_mmsg(
            self.socket.as_raw_fd(),
            &mut batch.data,
            batch.slot_len,
            &mut batch.addrs,
            &mut batch.cmsgs,
            &mut batch.infos[..batch.offer],
        )?;
        batch.filled = got;
        let slots = batch.infos.len();
        batch.offer = if got == batch.offer {
            (got * 2).min(slots)
        } else {
            (got * 2).clamp(MIN_OFFER.min(slots), slots)
        };
        let mut datagrams = 0;
        for i in 0..got {
            let info = &batch.infos[i];
            if info.truncated {
                self.stats.rx_truncated += 1;
                batch.infos[i].len = 0;
                continue;
            }
            match batch.addrs[i].socket_addr() {
                Some(a) => batch.sources[i] = a,
                None => {
                    self.stats.rx_bad_source += 1;
                    batch.infos[i].len = 0;
                    continue;
                }
            }
            datagrams += match info.gro_segment {
                Some(seg) if seg > 0 => info.len.div_ceil(seg),
                _ => usize::from(info.len > 0),
            };
        }
        Ok(datagrams)
    }

    /// Sends everything queued in `batch`. Datagrams the kernel refuses individually are
    /// counted in [`SocketStats::tx_refused`] and dropped. Returns `WouldBlock` when the
    /// socket buffer is full; the rest stays queued for the next call.
    pub fn send(&mut self, batch: &mut TxBatch) -> io::Result<()> {
        self.send_reporting(batch, &mut |_, _, _| {})
    }

    /// [`RoceSocket::send`], telling `refused` about each datagram the kernel refused: the
    /// error, the destination and the datagram (UDP payload: BTH first). A refused GSO
    /// group is reported segment by segment.
    pub fn send_reporting(
        &mut self,
        batch: &mut TxBatch,
        refused: &mut dyn FnMut(&io::Error, SocketAddr, &[u8]),
    ) -> io::Result<()> {
        let fd = self.socket.as_raw_fd();
        while batch.sent < batch.items.len() {
            let front_is_group = batch.items[batch.sent].segment.is_some();
            let result = if self.stats.gso {
                sys::send_mmsg(
                    fd,
                    &batch.data,
                    &batch.addrs,
                    &batch.items[batch.sent..],
                    self.ipv6,
                )
            } else {
                self.send_split(batch)
            };
            match result {
                Ok(n) => batch.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if self.stats.gso && gso_refused(&e) && front_is_group => {
                    // The device cannot segment: fall back for good, resend this item.
                    self.stats.gso = false;
                    self.stats.gso_disabled_at_runtime = true;
                    // Later datagrams are no longer grouped, so their Identification is 0
                    // again; the groups already queued go out split, their later segments
                    // with an ICRC computed for another Identification (a one-off loss
                    // the transport recovers from, counted by the receiver as ICRC errors).
                    batch.gso = false;
                }
                Err(e) => {
                    // This datagram (or group) is refused (EMSGSIZE, ENETUNREACH, ...): a
                    // packet lost on the way, which the transport recovers from unless the
                    // caller, told here, decides it never can.
                    self.stats.tx_refused += 1;
                    let item = batch.items[batch.sent];
                    let dest = batch.peers[item.addr];
                    let seg = item.segment.map_or(item.len, usize::from).max(1);
                    let mut off = if self.stats.gso {
                        0
                    } else {
                        batch.split_progress
                    };
                    while off < item.len {
                        let end = (off + seg).min(item.len);
                        refused(&e, dest, &batch.data[item.offset + off..item.offset + end]);
                        off = end;
                    }
                    batch.skip_front();
                }
            }
        }
        batch.clear();
        Ok(())
    }

    /// Without GSO: sends the next item's segments as separate datagrams.
    fn send_split(&mut self, batch: &mut TxBatch) -> io::Result<usize> {
        let item = batch.items[batch.sent];
        let Some(seg) = item.segment else {
            return sys::send_mmsg(
                self.socket.as_raw_fd(),
                &batch.data,
                &batch.addrs,
                &[item],
                self.ipv6,
            );
        };
        let seg = usize::from(seg).max(1);
        let mut singles = [item; sys::MAX_MMSG];
        let mut count = 0;
        let mut off = batch.split_progress;
        while off < item.len && count < sys::MAX_MMSG {
            let len = seg.min(item.len - off);
            singles[count] = SendItem {
                offset: item.offset + off,
                len,
                segment: None,
                ..item
            };
            count += 1;
            off += len;
        }
        let sent = sys::send_mmsg(
            self.socket.as_raw_fd(),
            &batch.data,
            &batch.addrs,
            &singles[..count],
            self.ipv6,
        )?;
        batch.split_progress += singles[..sent].iter().map(|s| s.len).sum::<usize>();
        if batch.split_progress >= item.len {
            batch.split_progress = 0;
            Ok(1)
        } else {
            Ok(0)
        }
    }

    /// Blocks until a datagram is waiting or `timeout` passes (`None`: forever). Used by
    /// the blocking mode so an idle device does not spin.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        sys::poll_fd(self.socket.as_raw_fd(), false, timeout_ms(timeout))
    }

    /// Blocks until the send buffer has room or `timeout` passes.
    pub fn wait_writable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        sys::poll_fd(self.socket.as_raw_fd(), true, timeout_ms(timeout))
    }
}

fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        // Round up so a short timer is not turned into a busy 0 ms poll.
        Some(d) => i32::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i32::MAX),
    }
}

/// Errors with which the kernel says it cannot do UDP GSO on this path.
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::ENOPROTOOPT) | Some(libc::EOPNOTSUPP)
    )
}

/// Preallocated receive buffers for one `recvmmsg` call.
pub struct RxBatch {
    data: Vec<u8>,
    slot_len: usize,
    addrs: Vec<RawAddr>,
    cmsgs: Vec<CmsgBuf>,
    infos: Vec<RecvInfo>,
    sources: Vec<SocketAddr>,
    filled: usize,
    /// Slots offered to the next `recvmmsg`: doubled while calls fill them all, else twice
    /// what the last call used (at least [`MIN_OFFER`]), so the many empty polls of a busy
    /// device prepare one slot, not all of them, and a ping-pong's awaited datagram arrives
    /// through a one-slot `recvmsg` (`sys::recv_mmsg`); a stream doubles its way up.
    offer: usize,
}

/// Fewest slots offered to one receive call (with GRO, one slot holds up to 64 datagrams).
const MIN_OFFER: usize = 1;

impl Default for RxBatch {
    /// An empty batch with no slots (allocates nothing): a placeholder while the real one
    /// is lent out.
    fn default() -> RxBatch {
        RxBatch {
            data: Vec::new(),
            slot_len: 0,
            addrs: Vec::new(),
            cmsgs: Vec::new(),
            infos: Vec::new(),
            sources: Vec::new(),
            filled: 0,
            offer: 0,
        }
    }
}

impl std::fmt::Debug for RxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxBatch")
            .field("slots", &self.infos.len())
            .field("slot_len", &self.slot_len)
            .field("filled", &self.filled)
            .finish()
    }
}

/// One received datagram, borrowed from an [`RxBatch`].
#[derive(Clone, Copy, Debug)]
pub struct RxDatagram<'a> {
    /// The sender's address and port.
    pub source: SocketAddr,
    /// The IPv4 TOS / IPv6 traffic class byte, if the kernel reported it.
    pub tos: Option<u8>,
    /// The UDP payload (for RoCEv2: BTH through ICRC).
    pub payload: &'a [u8],
    /// Position of this datagram in the GRO super-datagram it arrived in (0 without GRO).
    /// When a sender's UDP GSO group arrives whole, as on loopback, this is the segment's
    /// index in the group, hence its IPv4 Identification (see `socket::IdentOracle`).
    pub gro_index: u16,
}

impl RxDatagram<'_> {
    /// Whether the ECN field says congestion experienced (RFC 3168).
    pub fn ecn_ce(&self) -> bool {
        self.tos.is_some_and(|t| t & 0b11 == ECN_CE)
    }
}

impl RxBatch {
    fn new(slots: usize, slot_len: usize) -> RxBatch {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        RxBatch {
            data: vec![0; slots * slot_len],
            slot_len,
            addrs: vec![RawAddr::default(); slots],
            cmsgs: vec![CmsgBuf::default(); slots],
            infos: vec![RecvInfo::default(); slots],
            sources: vec![unspecified; slots],
            filled: 0,
            offer: slots,
        }
    }

    /// The datagrams of the last [`RoceSocket::recv`], GRO slots split into their segments.
    pub fn iter(&self) -> impl Iterator<Item = RxDatagram<'_>> + '_ {
        (0..self.filled).flat_map(move |i| {
            let info = self.infos[i];
            let slot = &self.data[i * self.slot_len..i * self.slot_len + info.len];
            let seg = match info.gro_segment {
                Some(s) if s > 0 => s,
                _ => info.len.max(1),
            };
            let source = self.sources[i];
            slot.chunks(seg)
                .enumerate()
                .map(move |(k, payload)| RxDatagram {
                    source,
                    tos: info.tos,
                    payload,
                    gro_index: u16::try_from(k).unwrap_or(u16::MAX),
                })
        })
    }
}

/// Which IPv4 Identification the kernel will write into a datagram being queued.
///
/// softib's socket is unconnected and sets DF, so Linux writes Identification 0 into each
/// datagram it sends on its own, and 0, 1, 2, ... into the segments of a UDP GSO group (the
/// GSO engine increments it per segment; see docs/design/net.md for the capture that shows
/// it). The RoCEv2 ICRC covers the field (IBA Annex A17.3.3), so the ICRC of a datagram
/// that joins a GSO group must be computed with its segment index.
#[derive(Clone, Copy, Debug)]
pub struct IdentOracle {
    open: bool,
    segment: usize,
    segments: usize,
    group_len: usize,
}

impl IdentOracle {
    /// The number of segments the group will have if a datagram of `len` bytes joins it,
    /// or `None` if it starts a new datagram.
    fn group_segments(&self, len: usize) -> Option<usize> {
        (self.open
            && len <= self.segment
            && self.segments < MAX_GSO_SEGMENTS
            && self.group_len + len <= MAX_GSO_PAYLOAD)
            .then_some(self.segments + 1)
    }

    /// The IPv4 Identification a datagram of `len` bytes (UDP payload) will carry.
    pub fn ipv4_ident(&self, len: usize) -> u16 {
        self.group_segments(len).map_or(0, |n| (n - 1) as u16)
    }
}

/// Whether a datagram at `start` may join the last item as one more GSO segment: same peer
/// and class, directly after it in the buffer, and the group still open (all segments so
/// far full-size).
fn oracle(
    items: &[SendItem],
    peers: &[SocketAddr],
    gso: bool,
    dest: SocketAddr,
    tos: Option<u8>,
    start: usize,
) -> IdentOracle {
    let closed = IdentOracle {
        open: false,
        segment: 0,
        segments: 0,
        group_len: 0,
    };
    if !gso {
        return closed;
    }
    let Some(last) = items.last() else {
        return closed;
    };
    if peers[last.addr] != dest || last.tos != tos || last.offset + last.len != start {
        return closed;
    }
    let seg = last.segment.map(usize::from).unwrap_or(last.len);
    let open = last.len % seg == 0 && u16::try_from(seg).is_ok();
    IdentOracle {
        open,
        segment: seg,
        segments: last.len.div_ceil(seg),
        group_len: last.len,
    }
}

/// Preallocated send queue: datagrams are written in place and grouped for GSO.
pub struct TxBatch {
    data: Vec<u8>,
    used: usize,
    items: Vec<SendItem>,
    addrs: Vec<RawAddr>,
    peers: Vec<SocketAddr>,
    sent: usize,
    split_progress: usize,
    gso: bool,
    max_items: usize,
}

impl std::fmt::Debug for TxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxBatch")
            .field("bytes", &self.used)
            .field("items", &self.items.len())
            .field("sent", &self.sent)
            .finish()
    }
}

/// Why [`TxBatch::push_with`] did not queue a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxFull {
    /// The batch has no room left: send it first.
    #[error("send batch full: flush it first")]
    Full,
}

impl TxBatch {
    /// A queue holding up to `capacity` bytes in at most `max_items` kernel messages;
    /// `gso` allows grouping equal-size datagrams to one peer (pass the socket's
    /// [`SocketStats::gso`]; the socket also splits groups itself if GSO fails later).
    pub fn new(capacity: usize, max_items: usize, gso: bool) -> TxBatch {
        let max_items = max_items.clamp(1, 4 * sys::MAX_MMSG);
        TxBatch {
            data: vec![0; capacity],
            used: 0,
            items: Vec::with_capacity(max_items),
            addrs: Vec::with_capacity(max_items),
            peers: Vec::with_capacity(max_items),
            sent: 0,
            split_progress: 0,
            gso,
            max_items,
        }
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.sent >= self.items.len()
    }

    /// Bytes queued.
    pub fn len_bytes(&self) -> usize {
        self.used
    }

    /// Queues one datagram to `dest` with traffic class `tos` (`None`: the socket default):
    /// `fill` writes it into the slice it is given (`max_len` bytes) and returns its length.
    /// The [`IdentOracle`] tells `fill` which IPv4 Identification the kernel will give the
    /// datagram for a given length, which the RoCEv2 ICRC covers (see [`IdentOracle`]).
    pub fn push_with(
        &mut self,
        dest: SocketAddr,
        tos: Option<u8>,
        max_len: usize,
        fill: impl FnOnce(&mut [u8], IdentOracle) -> usize,
    ) -> Result<usize, TxFull> {
        if self.sent > 0 && self.sent >= self.items.len() {
            self.clear();
        }
        if self.used + max_len > self.data.len() {
            return Err(TxFull::Full);
        }
        let start = self.used;
        let oracle = oracle(&self.items, &self.peers, self.gso, dest, tos, start);
        let len = fill(&mut self.data[start..start + max_len], oracle).min(max_len);
        self.commit(dest, tos, start, len)
    }

    /// Like [`TxBatch::push_with`] for a datagram whose destination is known only after it
    /// is written (the engine's `poll_transmit` decides both). `fill` writes into the slot
    /// and returns `(dest, tos, len)`, or `None` to queue nothing; the function it is given
    /// answers which IPv4 Identification the kernel will write for `(dest, tos, len)`.
    pub fn push_deferred(
        &mut self,
        max_len: usize,
        fill: impl FnOnce(
            &mut [u8],
            &dyn Fn(SocketAddr, Option<u8>, usize) -> u16,
        ) -> Option<(SocketAddr, Option<u8>, usize)>,
    ) -> Result<usize, TxFull> {
        if self.sent > 0 && self.sent >= self.items.len() {
            self.clear();
        }
        if self.used + max_len > self.data.len() || self.items.len() >= self.max_items {
            return Err(TxFull::Full);
        }
        let start = self.used;
        let (items, peers, gso) = (&self.items, &self.peers, self.gso);
        let ident = move |dest: SocketAddr, tos: Option<u8>, len: usize| {
            oracle(items, peers, gso, dest, tos, start).ipv4_ident(len)
        };
        let Some((dest, tos, len)) = fill(&mut self.data[start..start + max_len], &ident) else {
            return Ok(0);
        };
        self.commit(dest, tos, start, len.min(max_len))
    }

    /// Whether `count` more datagrams of up to `max_len` bytes each are sure to fit.
    pub fn has_room(&self, count: usize, max_len: usize) -> bool {
        let drained = self.sent > 0 && self.sent >= self.items.len();
        let (used, items) = if drained {
            (0, 0)
        } else {
            (self.used, self.items.len())
        };
        used + count * max_len <= self.data.len() && items + count <= self.max_items
    }

    /// Queues the `len` bytes written at `start`: as one more segment of the last GSO
    /// group if they may join it, else as a new item.
    fn commit(
        &mut self,
        dest: SocketAddr,
        tos: Option<u8>,
        start: usize,
        len: usize,
    ) -> Result<usize, TxFull> {
        if len == 0 {
            return Ok(0);
        }
        let oracle = oracle(&self.items, &self.peers, self.gso, dest, tos, start);
        if oracle.group_segments(len).is_some() {
            if let Some(last) = self.items.last_mut() {
                last.segment = Some(oracle.segment as u16);
                last.len += len;
                self.used += len;
                return Ok(len);
            }
        }
        if self.items.len() >= self.max_items {
            return Err(TxFull::Full);
        }
        let addr = match self.peers.iter().position(|p| *p == dest) {
            Some(i) => i,
            None => {
                self.peers.push(dest);
                self.addrs.push(RawAddr::from_socket_addr(&dest));
                self.peers.len() - 1
            }
        };
        self.items.push(SendItem {
            offset: start,
            len,
            segment: None,
            tos,
            addr,
        });
        self.used += len;
        Ok(len)
    }

    /// Drops the first unsent item (the kernel refused it).
    fn skip_front(&mut self) {
        self.sent += 1;
        self.split_progress = 0;
    }

    /// Forgets everything queued.
    pub fn clear(&mut self) {
        self.used = 0;
        self.items.clear();
        self.addrs.clear();
        self.peers.clear();
        self.sent = 0;
        self.split_progress = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(gso: bool, lens: &[usize]) -> Vec<u16> {
        let dest: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let mut b = TxBatch::new(1 << 20, 64, gso);
        let mut out = Vec::new();
        for &len in lens {
            b.push_with(dest, None, len, |_, o| {
                out.push(o.ipv4_ident(len));
                len
            })
            .unwrap();
        }
        out
    }

    #[test]
    fn ident_counts_segments_of_a_gso_group_and_restarts_after_it_closes() {
        // A shorter datagram is the group's last segment; a longer one starts a new group.
        assert_eq!(
            idents(true, &[100, 100, 100, 40, 100, 200, 200]),
            [0, 1, 2, 3, 0, 0, 1]
        );
        assert_eq!(idents(false, &[100, 100, 100]), [0, 0, 0]);
        let many = idents(true, &[10; 70]);
        assert_eq!(many[63], 63);
        assert_eq!(
            many[64], 0,
            "a group holds at most {MAX_GSO_SEGMENTS} segments"
        );
    }

    #[test]
    fn a_gso_group_fits_the_ip_total_length() {
        // 1,040 bytes = a middle RDMA WRITE packet at IB MTU 1024 (BTH + payload + ICRC):
        // 63 of them plus the IPv4 and UDP headers would exceed 65,535 bytes.
        let ids = idents(true, &[1040; 64]);
        assert_eq!(ids[61], 61);
        assert_eq!(ids[62], 0, "the 63rd datagram starts a new group");
    }
}
