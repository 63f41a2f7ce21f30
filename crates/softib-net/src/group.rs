//! Several processes on one device address, as on a kernel device that every process of a
//! host shares (docs/design/net.md, "Several processes on one address").
//!
//! One process, the *port owner*, holds the UDP socket on `<addr>:<port>` (4791) and
//! receives every datagram for the address. Every process on the address, the owner
//! included, holds a *slot*: an abstract Unix datagram socket `@softib/<addr>/<slot>`
//! (the kernel frees the name when the process dies, so nothing stale is left behind),
//! and puts the slot number into fixed bits of its QPNs ([`softib_transport::qpn::QpnPrefix`])
//! and of its CM communication IDs. The owner looks at each datagram ([`route_datagram`]):
//! a DestQP of another slot, or a CM MAD naming another slot's communication ID, goes to
//! that slot's socket with its original source address ([`ForwardHeader`]); a REQ or
//! SIDR_REQ goes to the process listening on its service ID (which holds the name
//! `@softib/<addr>/svc/<id>`). Processes that are not the owner send from a UDP socket of
//! their own on `<addr>` (any port: the ICRC covers the source port the receiver sees, and
//! the peer-source rule looks at the address only), so peers answer to `<addr>:4791` and
//! the owner forwards.
//!
//! Slot and listener sockets are *connected* to the owner's forwarding socket
//! (`@softib/<addr>/owner`): a connected Unix datagram socket accepts only its peer's
//! datagrams (no other local process can inject), and the kernel's queue limit for
//! unconnected senders (`net.unix.max_dgram_qlen`, 10 datagrams) does not apply to the
//! peer, so a burst is bounded by the socket buffer, not by ten datagrams. When the owner
//! exits, the survivors' next probe ([`PROBE_INTERVAL`]) binds the UDP port (one wins) and
//! everyone reconnects to the new owner.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::time::Duration;

use softib_transport::qpn::QpnPrefix;
use softib_transport::FIRST_QPN;
use softib_wire::cm::attr;

/// Bits of a QPN offset (and of a CM communication ID) that carry the slot.
pub const SLOT_BITS: u32 = 6;
/// Processes one address can hold.
pub const SLOTS: u32 = 1 << SLOT_BITS;
/// How often a process that is not the owner checks whether the owner left (and takes
/// over its port) and reconnects its sockets to the current owner.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(50);

const GSI_QPN: u32 = 1;
const BTH_LEN: usize = 12;
const DETH_LEN: usize = 8;
const MAD_HEADER_LEN: usize = 24;
const MGMT_CLASS_CM: u8 = 0x07;

/// Where a datagram that arrived at the shared address belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The receiving process handles it (its own QPs, non-CM MADs, anything unparseable:
    /// the normal receive path counts what it drops).
    Here,
    /// The process in this slot.
    Slot(u32),
    /// The process listening on this CM service ID (a REQ or SIDR_REQ); nobody listening
    /// means the receiving process answers (a REJ for an invalid service ID).
    Service(u64),
}

/// The slot bits of a CM communication ID or SIDR request ID.
pub fn slot_of_comm_id(id: u32) -> u32 {
    id >> (32 - SLOT_BITS)
}

/// The slot a QPN belongs to, if it is an ordinary QPN (not QP0/QP1, not multicast).
pub fn slot_of_qpn(qpn: u32) -> Option<u32> {
    QpnPrefix::of_offset(SLOT_BITS, qpn.checked_sub(FIRST_QPN)?)
}

/// The QPN prefix a process in `slot` gives its QPs.
pub fn qpn_prefix(slot: u32) -> QpnPrefix {
    QpnPrefix {
        bits: SLOT_BITS,
        value: slot,
    }
}

/// Where `payload` (a RoCEv2 UDP payload: BTH and up, ICRC last) belongs: by BTH DestQP
/// (IBA 9.2.7), and for QP1 by the CM message it carries (IBA 12.6: a REQ and a SIDR_REQ
/// name a service ID; every other CM message names the receiver's communication ID or
/// request ID). Reads fixed offsets only; never panics.
pub fn route_datagram(payload: &[u8]) -> Route {
    if payload.len() < BTH_LEN {
        return Route::Here;
    }
    let dest_qp = u32::from_be_bytes([0, payload[5], payload[6], payload[7]]);
    if dest_qp != GSI_QPN {
        return slot_of_qpn(dest_qp).map_or(Route::Here, Route::Slot);
    }
    let mad = BTH_LEN + DETH_LEN;
    let data = mad + MAD_HEADER_LEN;
    let Some(head) = payload.get(mad..data + 16) else {
        return Route::Here;
    };
    if head[1] != MGMT_CLASS_CM {
        return Route::Here;
    }
    let attribute = u16::from_be_bytes([head[16], head[17]]);
    let d = &head[MAD_HEADER_LEN..];
    let word = |at: usize| u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
    match attribute {
        attr::REQ | attr::SIDR_REQ => {
            let mut sid = [0u8; 8];
            sid.copy_from_slice(&d[8..16]);
            Route::Service(u64::from_be_bytes(sid))
        }
        // Local communication ID at 0..4, the receiver's (remote) one at 4..8 (IBA 12.6).
        attr::REP
        | attr::RTU
        | attr::REJ
        | attr::DREQ
        | attr::DREP
        | attr::MRA
        | attr::LAP
        | attr::APR => Route::Slot(slot_of_comm_id(word(4))),
        // The request ID the SIDR_REQ's sender chose (IBA 12.11.2).
        attr::SIDR_REP => Route::Slot(slot_of_comm_id(word(0))),
        _ => Route::Here,
    }
}

/// Bytes in front of a forwarded datagram.
pub const FORWARD_HEADER_LEN: usize = 28;
const MAGIC: [u8; 4] = *b"sibF";
const VERSION: u8 = 1;

/// What the owner tells a slot about a datagram it forwards: what the receive path would
/// have learnt from the socket (the ICRC covers the source address and port).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardHeader {
    /// The sender's address and UDP port.
    pub source: SocketAddr,
    /// The TOS / traffic class byte, if the kernel reported it.
    pub tos: Option<u8>,
    /// The datagram's position in its GRO super-datagram (its likely IPv4 Identification).
    pub gro_index: u16,
}

impl ForwardHeader {
    /// Writes the header into `out[..FORWARD_HEADER_LEN]`.
    pub fn emit(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = u8::from(self.tos.is_some()) | (u8::from(self.source.is_ipv6()) << 1);
        out[6] = self.tos.unwrap_or(0);
        out[7] = 0;
        out[8..10].copy_from_slice(&self.gro_index.to_be_bytes());
        out[10..12].copy_from_slice(&self.source.port().to_be_bytes());
        let ip = match self.source.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        out[12..28].copy_from_slice(&ip.octets());
    }

    /// Parses a header; `None` for anything that is not one (wrong magic or version,
    /// unknown flags, too short).
    pub fn parse(bytes: &[u8]) -> Option<ForwardHeader> {
        let h = bytes.get(..FORWARD_HEADER_LEN)?;
        if h[..4] != MAGIC || h[4] != VERSION || h[5] & !0b11 != 0 || h[7] != 0 {
            return None;
        }
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&h[12..28]);
        let v6 = Ipv6Addr::from(octets);
        let ip = if h[5] & 0b10 != 0 {
            IpAddr::V6(v6)
        } else {
            IpAddr::V4(v6.to_ipv4_mapped()?)
        };
        Some(ForwardHeader {
            source: SocketAddr::new(ip, u16::from_be_bytes([h[10], h[11]])),
            tos: (h[5] & 1 != 0).then_some(h[6]),
            gro_index: u16::from_be_bytes([h[8], h[9]]),
        })
    }
}

/// Counters of the sharing mechanism (`softib counters`: driver `group_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCounters {
    /// Datagrams the owner forwarded to another process's slot.
    pub forwarded: u64,
    /// REQ / SIDR_REQ the owner forwarded to the listening process.
    pub forwarded_to_listener: u64,
    /// Datagrams for a slot no process holds: left to the owner's receive path, which drops
    /// and counts each under its cause (ICRC, runt, unknown QP).
    pub unowned_drops: u64,
    /// Datagrams for a slot whose socket buffer was full: dropped (the transport resends).
    pub queue_full_drops: u64,
    /// Forwarded datagrams with a malformed header: dropped.
    pub bad_header_drops: u64,
    /// Datagrams received through the slot or listener sockets.
    pub received: u64,
    /// Times this process took over the UDP port from an owner that left.
    pub takeovers: u64,
    /// Listens whose service ID another process on this address already listens on (the
    /// REQs go to that process).
    pub service_conflicts: u64,
}

/// The abstract socket name of slot `slot` on `addr`.
fn slot_name(addr: SocketAddr, slot: u32) -> String {
    format!("softib/{addr}/{slot}")
}

fn owner_name(addr: SocketAddr) -> String {
    format!("softib/{addr}/owner")
}

fn service_name(addr: SocketAddr, service_id: u64) -> String {
    format!("softib/{addr}/svc/{service_id:016x}")
}

fn abstract_addr(name: &str) -> io::Result<UnixAddr> {
    UnixAddr::from_abstract_name(name.as_bytes())
}

fn bind_abstract(name: &str) -> io::Result<UnixDatagram> {
    let s = UnixDatagram::bind_addr(&abstract_addr(name)?)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A listener's claim on a service ID at this address.
#[derive(Debug)]
pub struct ServiceClaim {
    /// The service ID.
    pub service_id: u64,
    /// The socket REQs for it arrive on.
    pub socket: UnixDatagram,
    _fork: Guarded,
}

/// A forked child must not keep this process's names bound (sys::ForkGuard).
#[derive(Debug)]
struct Guarded {
    _guard: crate::sys::ForkGuard,
}

impl Guarded {
    fn new(s: &UnixDatagram) -> Guarded {
        use std::os::fd::AsRawFd;
        Guarded {
            _guard: crate::sys::ForkGuard::new(s.as_raw_fd(), libc::AF_UNIX),
        }
    }
}

/// This process's membership of its address: its slot, the owner's forwarding socket if
/// this process is the owner, and the listener sockets.
#[derive(Debug)]
pub struct AddressGroup {
    addr: SocketAddr,
    slot: u32,
    slot_socket: UnixDatagram,
    _slot_fork: Guarded,
    /// `Some` while this process owns the UDP port: the socket it forwards from.
    forwarder: Option<(UnixDatagram, Guarded)>,
    services: Vec<ServiceClaim>,
    /// Every slot's socket address, made once: forwarding allocates nothing per datagram.
    slot_addrs: Vec<UnixAddr>,
    counters: GroupCounters,
}

impl AddressGroup {
    /// Takes the lowest free slot on `addr`. Fails with `AddrInUse` when all are taken.
    pub fn join(addr: SocketAddr) -> io::Result<AddressGroup> {
        for slot in 0..SLOTS {
            match bind_abstract(&slot_name(addr, slot)) {
                Ok(slot_socket) => {
                    // From the start only the owner may write into the slot.
                    if let Ok(owner) = abstract_addr(&owner_name(addr)) {
                        let _ = slot_socket.connect_addr(&owner);
                    }
                    let slot_addrs = (0..SLOTS)
                        .map(|s| abstract_addr(&slot_name(addr, s)))
                        .collect::<io::Result<Vec<_>>>()?;
                    return Ok(AddressGroup {
                        addr,
                        slot,
                        slot_addrs,
                        _slot_fork: Guarded::new(&slot_socket),
                        slot_socket,
                        forwarder: None,
                        services: Vec::new(),
                        counters: GroupCounters::default(),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("all {SLOTS} process slots on {addr} are taken"),
        ))
    }

    /// The slot this process holds.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Whether this process owns the UDP port.
    pub fn is_owner(&self) -> bool {
        self.forwarder.is_some()
    }

    /// Counters.
    pub fn counters(&self) -> GroupCounters {
        self.counters
    }

    /// This process now holds the UDP port: claims the owner's forwarding name and points
    /// its own sockets at it. Fails while the previous owner's forwarding socket is still
    /// bound (it is going away; the caller retries).
    pub fn become_owner(&mut self) -> io::Result<()> {
        let fwd = bind_abstract(&owner_name(self.addr))?;
        let guard = Guarded::new(&fwd);
        self.forwarder = Some((fwd, guard));
        self.reconnect();
        Ok(())
    }

    /// Connects the slot and listener sockets to the current owner's forwarding socket
    /// (see the module doc). Harmless when already connected or when no owner exists.
    pub fn reconnect(&mut self) {
        let Ok(owner) = abstract_addr(&owner_name(self.addr)) else {
            return;
        };
        let _ = self.slot_socket.connect_addr(&owner);
        for s in &self.services {
            let _ = s.socket.connect_addr(&owner);
        }
    }

    /// Claims `service_id` for this process's listener. `false` if another process on the
    /// address listens on it already (counted).
    pub fn claim_service(&mut self, service_id: u64) -> bool {
        if self.services.iter().any(|s| s.service_id == service_id) {
            return true;
        }
        match bind_abstract(&service_name(self.addr, service_id)) {
            Ok(socket) => {
                if let Ok(owner) = abstract_addr(&owner_name(self.addr)) {
                    let _ = socket.connect_addr(&owner);
                }
                self.services.push(ServiceClaim {
                    service_id,
                    _fork: Guarded::new(&socket),
                    socket,
                });
                true
            }
            Err(_) => {
                self.counters.service_conflicts += 1;
                false
            }
        }
    }

    /// Whether this process holds the claim on `service_id`.
    pub fn holds_service(&self, service_id: u64) -> bool {
        self.services.iter().any(|s| s.service_id == service_id)
    }

    /// Keeps the claims of exactly `listening` (the CM's current listeners).
    pub fn sync_services(&mut self, listening: &[u64]) {
        self.services.retain(|s| listening.contains(&s.service_id));
        for &sid in listening {
            self.claim_service(sid);
        }
    }

    /// The descriptors a waiting device thread watches (slot and listeners).
    pub fn fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        use std::os::fd::AsRawFd;
        std::iter::once(self.slot_socket.as_raw_fd())
            .chain(self.services.iter().map(|s| s.socket.as_raw_fd()))
    }

    /// Forwards a datagram to where `route` says (owner only). `scratch` must hold
    /// `FORWARD_HEADER_LEN + payload.len()` bytes. Returns whether it left this process
    /// (`false`: handle it here).
    pub fn forward(
        &mut self,
        route: Route,
        header: &ForwardHeader,
        payload: &[u8],
        scratch: &mut [u8],
    ) -> bool {
        let Some((fwd, _)) = &self.forwarder else {
            return false;
        };
        let service_addr;
        let to = match route {
            Route::Here => return false,
            Route::Slot(s) if s == self.slot => return false,
            Route::Slot(s) => match self.slot_addrs.get(s as usize) {
                Some(a) => a,
                None => return false,
            },
            Route::Service(sid) => {
                if self.holds_service(sid) {
                    return false;
                }
                // REQs are rare: their name is made when one arrives.
                match abstract_addr(&service_name(self.addr, sid)) {
                    Ok(a) => {
                        service_addr = a;
                        &service_addr
                    }
                    Err(_) => return false,
                }
            }
        };
        let len = FORWARD_HEADER_LEN + payload.len();
        if scratch.len() < len {
            // Longer than any RoCEv2 packet: the receive path drops it as oversize.
            return false;
        }
        header.emit(scratch);
        scratch[FORWARD_HEADER_LEN..len].copy_from_slice(payload);
        match fwd.send_to_addr(&scratch[..len], to) {
            Ok(_) => {
                match route {
                    Route::Service(_) => self.counters.forwarded_to_listener += 1,
                    _ => self.counters.forwarded += 1,
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.counters.queue_full_drops += 1;
                true
            }
            // Nobody listens on the service: this process answers (a REJ).
            Err(_) if matches!(route, Route::Service(_)) => false,
            // No process holds the slot: this process's receive path takes it and drops
            // it under its cause (bad ICRC, runt, unknown QP), as for any stranger.
            Err(_) => {
                self.counters.unowned_drops += 1;
                false
            }
        }
    }

    /// Receives one forwarded datagram into `buf` (slot socket first, then listeners):
    /// its header and payload length. `None` when nothing waits. Malformed datagrams are
    /// counted and skipped.
    pub fn recv(&mut self, buf: &mut [u8]) -> Option<(ForwardHeader, usize)> {
        let sockets =
            std::iter::once(&self.slot_socket).chain(self.services.iter().map(|s| &s.socket));
        for s in sockets {
            while let Ok(n) = s.recv(buf) {
                match ForwardHeader::parse(&buf[..n]) {
                    Some(h) => {
                        self.counters.received += 1;
                        buf.copy_within(FORWARD_HEADER_LEN..n, 0);
                        return Some((h, n - FORWARD_HEADER_LEN));
                    }
                    None => self.counters.bad_header_drops += 1,
                }
            }
        }
        None
    }

    /// Counts a takeover (the driver rebinds the UDP port itself).
    pub fn count_takeover(&mut self) {
        self.counters.takeovers += 1;
    }
}

/// Whether a softib process owns the port of `addr` (its forwarding name exists), waiting
/// up to `patience` for an owner that has bound the port but not yet claimed the name. A
/// port held by anything else (the kernel's rdma_rxe binds 4791 on every address) is not
/// shared: the device must fail to open, not wait for datagrams that never come.
pub fn owner_exists(addr: SocketAddr, patience: Duration) -> bool {
    let Ok(name) = abstract_addr(&owner_name(addr)) else {
        return false;
    };
    let deadline = std::time::Instant::now() + patience;
    loop {
        if UnixDatagram::unbound().is_ok_and(|s| s.connect_addr(&name).is_ok()) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `like`'s address with port 0: where a process that is not the owner binds its sending
/// socket (same address, any port).
pub fn any_port(like: SocketAddr) -> SocketAddr {
    SocketAddr::new(like.ip(), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bth(dest_qp: u32) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        p[5..8].copy_from_slice(&dest_qp.to_be_bytes()[1..]);
        p
    }

    fn cm_mad(attribute: u16, data: &[(usize, &[u8])]) -> Vec<u8> {
        let mut p = bth(1);
        p.extend_from_slice(&[0; 8]);
        let mut mad = vec![0u8; 256];
        mad[1] = MGMT_CLASS_CM;
        mad[16..18].copy_from_slice(&attribute.to_be_bytes());
        for (at, bytes) in data {
            mad[24 + at..24 + at + bytes.len()].copy_from_slice(bytes);
        }
        p.extend_from_slice(&mad);
        p
    }

    #[test]
    fn data_packets_route_by_the_slot_bits_of_dest_qp() {
        let m = softib_transport::qpn::QpnMap::with_prefix(
            softib_transport::qpn::QpnAllocation::Scrambled,
            3,
            Some(qpn_prefix(5)),
        );
        let qpn = FIRST_QPN + m.offset_of_slot(17);
        assert_eq!(route_datagram(&bth(qpn)), Route::Slot(5));
        assert_eq!(route_datagram(&bth(0)), Route::Here);
        assert_eq!(route_datagram(&bth(0xFF_FFFF)), Route::Here);
        assert_eq!(route_datagram(&[0x64; 5]), Route::Here);
    }

    #[test]
    fn cm_mads_route_by_service_id_or_the_receivers_comm_id() {
        let sid = 0x0000_0106_0000_4e20u64.to_be_bytes();
        assert_eq!(
            route_datagram(&cm_mad(attr::REQ, &[(8, &sid)])),
            Route::Service(0x0000_0106_0000_4e20)
        );
        assert_eq!(
            route_datagram(&cm_mad(attr::SIDR_REQ, &[(8, &sid)])),
            Route::Service(0x0000_0106_0000_4e20)
        );
        let ours = ((9u32 << 26) | 0x1234).to_be_bytes();
        let theirs = ((2u32 << 26) | 0x55).to_be_bytes();
        for a in [
            attr::REP,
            attr::RTU,
            attr::REJ,
            attr::DREQ,
            attr::DREP,
            attr::MRA,
        ] {
            assert_eq!(
                route_datagram(&cm_mad(a, &[(0, &theirs), (4, &ours)])),
                Route::Slot(9),
                "attribute {a:#x}"
            );
        }
        assert_eq!(
            route_datagram(&cm_mad(attr::SIDR_REP, &[(0, &ours)])),
            Route::Slot(9)
        );
        // Not CM, or cut short: the receiver handles (and counts) it.
        let mut pma = cm_mad(attr::REQ, &[]);
        pma[20 + 1] = 0x04;
        assert_eq!(route_datagram(&pma), Route::Here);
        assert_eq!(route_datagram(&cm_mad(attr::REQ, &[])[..40]), Route::Here);
    }

    #[test]
    fn forward_header_round_trips_and_rejects_garbage() {
        for source in [
            SocketAddr::from(([127, 0, 0, 9], 49152)),
            "[fd00::1]:4791".parse().unwrap(),
        ] {
            let h = ForwardHeader {
                source,
                tos: Some(0x02),
                gro_index: 7,
            };
            let mut b = [0u8; FORWARD_HEADER_LEN];
            h.emit(&mut b);
            assert_eq!(ForwardHeader::parse(&b), Some(h));
            let mut bad = b;
            bad[0] ^= 1;
            assert_eq!(ForwardHeader::parse(&bad), None);
            let mut bad = b;
            bad[5] |= 0x80;
            assert_eq!(ForwardHeader::parse(&bad), None);
        }
        assert_eq!(ForwardHeader::parse(&[0; 10]), None);
    }
}
