//! The device driver: one `softib_transport::Device` on one RoCEv2 socket.
//!
//! [`Driver::process`] is one turn of the loop docs/design/net.md describes: receive a
//! batch, check each datagram's ICRC and hand the transport packet to the engine, fire due
//! timers, then drain the engine's transmits into a send batch (sealing each with its
//! ICRC, through the fault injector if one is configured, past the pcap tap) and send it.
//! It never blocks; [`Driver::wait`] sleeps until a datagram, a wake-up or the next timer.
//! Time is nanoseconds of the monotonic clock since the driver started. The protocol itself
//! is the engine's: the driver only moves bytes and time.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use softib_transport::qpn::QpnAllocation;
use softib_transport::{
    Device, DeviceConfig, DriverDrop, LinkLayer, Mtu, Nanos, RxGrh, RxMeta, Transmit,
};

use crate::ack_hold::{self, AckHold};
use crate::cc::{self, RoceCc};
use crate::group::{self, AddressGroup, ForwardHeader, GroupCounters, FORWARD_HEADER_LEN};
use crate::gsi::{Gsi, GSI_DATAGRAM_LEN};
use crate::inject::{FaultCounters, FaultSpec, Injector};
use crate::roce::{self, Ipv4IdPolicy, RxCheck, RxCounters, RxDrop, ICRC_LEN};
use crate::socket::{
    RoceSocket, RxBatch, RxDatagram, SocketConfig, SocketError, SocketStats, TxBatch, ECN_ECT0,
    ROCE_V2_PORT,
};
use crate::sys::ForkGuard;
use crate::tap::PcapTap;

/// Room for the engine's transport packet beyond the path MTU (headers, pad), per the
/// engine contract (`poll_transmit` needs `mtu + 64` bytes), plus the ICRC.
const TX_HEADROOM: usize = 64 + ICRC_LEN;

/// The longest UDP payload a RoCEv2 packet can have: the largest IB MTU (4096, IBA 7.7.8)
/// plus the transport headers (BTH and the largest extension header set fit in 64 bytes)
/// plus the ICRC. Anything longer is no RoCEv2 packet at all and is dropped as oversize
/// before any check; a packet within it but above this device's MTU still reaches the
/// engine, which answers it as IBA says (a length error).
const MAX_ROCE_DATAGRAM: usize = 4096 + 64 + ICRC_LEN;

/// Datagrams of one received batch handled before what they made ready is sent (see
/// `Driver::receive`): half of 16 outstanding atomics, perftest's default depth.
const RX_ANSWER_EVERY: usize = 8;

/// Turns between two reads of the port owner's own slot and listener sockets
/// (`Driver::group_read_due`): what waits there is stale, so a read every 16 turns (a few
/// tens of microseconds in a polling loop) costs nothing in latency.
const OWNER_GROUP_READ_EVERY: u32 = 16;

/// Distinct (peer, QP) pairs one send call fails for EMSGSIZE; more are left to a later
/// send (their next datagram is refused too).
const REFUSED_PER_SEND: usize = 8;

/// How a device is opened.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// The device's IP address and UDP port (4791 by default). The GID is derived from it.
    pub bind: SocketAddr,
    /// Largest path MTU; `None` derives it from the interface MTU as rxe does. A value the
    /// interface cannot carry is refused when the device opens ([`NetError::MtuTooLarge`]).
    pub mtu: Option<Mtu>,
    /// Default TOS / traffic class (DSCP << 2; the ECN bits are ECT(0) on data when
    /// congestion control reacts, see [`RoceCc`]).
    pub traffic_class: u8,
    /// Try UDP GSO.
    pub gso: bool,
    /// Try UDP GRO.
    pub gro: bool,
    /// How IPv4 Identifications are handled on receive.
    pub ipv4_id_policy: Ipv4IdPolicy,
    /// Fault injection on the send path.
    pub inject: Option<FaultSpec>,
    /// Write every datagram sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Seed of the engine's RNG (keys, PSNs) and of its QPN scrambling.
    pub seed: u64,
    /// Congestion control (ECN marks, CNPs, DCQCN or IBA CCA pacing); off by default.
    pub cc: RoceCc,
    /// Engine limits (its `gid`, `max_mtu`, `link_layer` and `cc` are set from the fields
    /// above).
    pub engine: DeviceConfig,
}

impl NetConfig {
    /// Defaults for a device on `bind`: MTU from the interface, ECT(0), GSO/GRO on,
    /// identifications recovered, no faults, no capture, scrambled QPNs (a third host cannot
    /// guess a live one), seed from the kernel's random source (the clock if it has none).
    pub fn new(bind: SocketAddr) -> NetConfig {
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ u64::from(std::process::id());
        let mut random = [0u8; 8];
        let seed = match std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        {
            Ok(()) => u64::from_ne_bytes(random),
            Err(_) => clock,
        };
        NetConfig {
            bind,
            mtu: None,
            traffic_class: 0,
            gso: true,
            gro: true,
            ipv4_id_policy: Ipv4IdPolicy::Recover,
            inject: None,
            pcap: None,
            seed,
            cc: RoceCc::default(),
            engine: DeviceConfig {
                qpn_allocation: QpnAllocation::Scrambled,
                ..DeviceConfig::default()
            },
        }
    }
}

/// Why a device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The socket could not be set up.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The interface MTU could not be found (give `--mtu`).
    #[error(
        "cannot find the MTU of the interface holding {addr} ({source}); set the MTU explicitly"
    )]
    InterfaceMtu {
        /// The device address.
        addr: IpAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The MTU asked for does not fit the interface: the kernel would refuse every full-size
    /// datagram (EMSGSIZE) and the connection would die of retries.
    #[error(
        "IB MTU {requested} does not fit interface {interface} (MTU {interface_mtu}): the largest IB MTU it carries is {largest} (interface MTU - 80, as rxe)"
    )]
    MtuTooLarge {
        /// The IB MTU asked for, bytes.
        requested: u32,
        /// The interface holding the device address.
        interface: String,
        /// Its MTU, bytes.
        interface_mtu: u32,
        /// The largest IB MTU it carries, bytes.
        largest: u32,
    },
    /// The interface MTU is too small for RoCEv2.
    #[error("interface MTU {0} leaves no room for even a 256-byte IB MTU (needs at least 336)")]
    MtuTooSmall(u32),
    /// The pcap file could not be created.
    #[error("cannot create the capture file: {0}")]
    Pcap(#[from] softib_wire::pcap::PcapError),
    /// The wake-up channel could not be created.
    #[error("cannot create the wake-up channel: {0}")]
    Wake(io::Error),
    /// A congestion control setting is out of range.
    #[error("congestion control: {0}")]
    Cc(#[from] softib_transport::cc::CcConfigError),
}

/// Driver-level counters (the engine keeps its own, see `Device::counters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Receive checks.
    pub rx: RxCounters,
    /// Socket state and counters.
    pub socket: SocketStats,
    /// Fault injection.
    pub faults: FaultCounters,
    /// Datagrams handed to the socket.
    pub tx_datagrams: u64,
    /// Bytes handed to the socket (UDP payload).
    pub tx_bytes: u64,
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// Datagrams longer than any RoCEv2 packet can be ([`MAX_ROCE_DATAGRAM`] bytes), dropped.
    pub rx_oversize: u64,
    /// Bytes received (UDP payload).
    pub rx_bytes: u64,
    /// Transmits without a GRH or with an address of the other family (dropped).
    pub tx_unroutable: u64,
    /// Records the pcap tap could not write.
    pub pcap_errors: u64,
    /// Connected QPs failed because the kernel refused one of their datagrams as larger
    /// than the path MTU (EMSGSIZE); see `Device::transmit_refused`.
    pub qps_failed_msgsize: u64,
    /// Answers sent while a received batch was still being handled (after every
    /// `RX_ANSWER_EVERY` datagrams, see `Driver::receive`).
    pub rx_answered_in_parts: u64,
    /// Positive ACKs held back that then left behind data in the same send batch
    /// (`ack_hold.rs`: the answer of a polling application, one `sendmmsg` for both).
    pub acks_behind_data: u64,
    /// Congestion control: the line rate in Mb/s the engine paces against.
    pub cc_link_rate_mbps: u64,
    /// Congestion control: bytes counted per packet beyond the transport packet.
    pub cc_wire_overhead: u64,
    /// Sharing the address with other processes (`group.rs`).
    pub group: GroupCounters,
}

/// What one [`Driver::process`] turn did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Datagrams received.
    pub received: usize,
    /// Datagrams queued for sending.
    pub sent: usize,
    /// The socket's send buffer was full; datagrams wait in the batch.
    pub blocked: bool,
}

impl Progress {
    /// Whether anything happened.
    pub fn any(&self) -> bool {
        self.received > 0 || self.sent > 0
    }
}

/// One device: engine, socket, batches and the optional injector and tap.
pub struct Driver {
    engine: Device,
    socket: RoceSocket,
    /// A forked child gets a fresh socket in place of `socket`'s descriptor.
    socket_guard: ForkGuard,
    /// How the socket was opened (to bind the port when taking it over).
    socket_config: SocketConfig,
    /// The UDP address datagrams leave from: `local`, or the same IP on another port while
    /// another process on the address owns the port.
    send_from: SocketAddr,
    /// Whether this driver's socket holds the device's own UDP port.
    holds_port: bool,
    /// The processes sharing this address (`None` on an ephemeral port: nobody can share).
    group: Option<AddressGroup>,
    /// When (engine time) to next check for a departed port owner.
    next_probe: Nanos,
    /// `Cm::listener_changes` when the listener claims were last synchronised.
    listener_changes: u64,
    /// Room for a forwarded or group-received datagram and its header.
    group_buf: Vec<u8>,
    rx: RxBatch,
    tx: TxBatch,
    check: RxCheck,
    injector: Option<Injector>,
    tap: Option<PcapTap>,
    local: SocketAddr,
    epoch: Instant,
    last_now: Nanos,
    mtu: Mtu,
    /// The interface holding the device address and its MTU, when it could be found.
    interface: Option<(String, u32)>,
    default_tos: u8,
    ecn_capable: bool,
    peer_ports: PeerPorts,
    scratch: Vec<u8>,
    counters: DriverCounters,
    wake_rx: UnixDatagram,
    wake_tx: UnixDatagram,
    /// QP1: management datagrams and the Communication Manager (`gsi.rs`).
    gsi: Gsi,
    /// Multicast groups joined on the network for the engine's attached QPs (`mcast.rs`).
    groups: crate::mcast::Groups,
    ipv4_id_policy: Ipv4IdPolicy,
    /// Positive ACKs held back to leave behind the data of the same flush (`ack_hold.rs`).
    acks: AckHold,
    /// How many of them were held before the current turn began.
    acks_before_turn: usize,
    /// Turns since the port owner last read its own slot and listener sockets (see
    /// [`OWNER_GROUP_READ_EVERY`]).
    turns_since_group_read: u32,
}

/// What a flush does with the positive ACKs it holds (`ack_hold.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckRelease {
    /// Queue them after everything else of this flush: a device turn nobody will answer.
    AfterData,
    /// The turn of a polling application that just received: ACKs wait for the
    /// application's answer unless the flush sends something else anyway, or they have
    /// waited longer than `ack_hold::HOLD_FOR` (then they go first).
    AwaitAnswer,
    /// A verb's flush: what an earlier turn held keeps waiting unless this flush sends
    /// anything (an answer: the ACKs go behind it); an ACK the verb itself made goes now.
    WithAnswer,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("local", &self.local)
            .field("mtu", &self.mtu)
            .field("counters", &self.counters)
            .finish()
    }
}

fn mtu_from_bytes(bytes: u32) -> Mtu {
    match bytes {
        4096.. => Mtu::M4096,
        2048.. => Mtu::M2048,
        1024.. => Mtu::M1024,
        512.. => Mtu::M512,
        _ => Mtu::M256,
    }
}

impl Driver {
    /// Opens the device: binds the socket, chooses the MTU, creates the engine.
    pub fn open(config: NetConfig) -> Result<Driver, NetError> {
        let iface = roce::interface_mtu(config.bind.ip());
        let mtu = match config.mtu {
            Some(m) => {
                if let Ok((name, if_mtu)) = &iface {
                    let largest = roce::ib_mtu_for_interface(*if_mtu)
                        .ok_or(NetError::MtuTooSmall(*if_mtu))?;
                    if m.bytes() > largest {
                        return Err(NetError::MtuTooLarge {
                            requested: m.bytes(),
                            interface: name.clone(),
                            interface_mtu: *if_mtu,
                            largest,
                        });
                    }
                }
                m
            }
            None => {
                let if_mtu = match &iface {
                    Ok((_, m)) => *m,
                    Err(e) => {
                        return Err(NetError::InterfaceMtu {
                            addr: config.bind.ip(),
                            source: io::Error::new(e.kind(), e.to_string()),
                        })
                    }
                };
                mtu_from_bytes(
                    roce::ib_mtu_for_interface(if_mtu).ok_or(NetError::MtuTooSmall(if_mtu))?,
                )
            }
        };
        // The link the congestion control paces against (docs/design/net.md).
        let link = match &iface {
            Ok((name, _)) => cc::link_info(Path::new("/sys/class/net"), name),
            Err(_) => cc::LinkInfo {
                speed_mbps: None,
                ethernet: false,
            },
        };
        let link_rate = config
            .cc
            .link_rate_mbps
            .or(link.speed_mbps)
            .unwrap_or(cc::DEFAULT_LINK_RATE_MBPS);
        let overhead = cc::wire_overhead(config.bind.is_ipv6(), link.ethernet);
        let cc_config = config.cc.engine_config(link_rate, overhead);
        cc_config.validate()?;
        let mut sc = SocketConfig::new(config.bind);
        sc.traffic_class = config.traffic_class;
        sc.gso = config.gso && config.inject.is_none();
        sc.gro = config.gro;
        // The port may be held by another process on this address: then this one sends
        // from another port and receives what the owner forwards (group.rs).
        let (socket, holds_port) = match RoceSocket::bind(&sc) {
            Ok(s) => (s, true),
            Err(SocketError::Io { source, .. })
                if source.kind() == io::ErrorKind::AddrInUse
                    && config.bind.port() != 0
                    && group::owner_exists(config.bind, Duration::from_millis(200)) =>
            {
                let mut other = sc.clone();
                other.bind = group::any_port(config.bind);
                (RoceSocket::bind(&other)?, false)
            }
            Err(e) => return Err(e.into()),
        };
        let send_from = socket.local_addr();
        let local = if holds_port { send_from } else { config.bind };
        let mut group = if config.bind.port() != 0 {
            Some(AddressGroup::join(local).map_err(|source| SocketError::Io {
                what: "claim a process slot",
                addr: local,
                source,
            })?)
        } else {
            None
        };
        if let (Some(g), true) = (group.as_mut(), holds_port) {
            // A previous owner's name still going away: retried at the next probe.
            let _ = g.become_owner();
        }
        let max_datagram = mtu.bytes() as usize + TX_HEADROOM;
        let rx = socket.rx_batch(32, max_datagram);
        // With injection, datagrams are not grouped (each carries Identification 0): a
        // duplicated or held-back datagram must not change another one's segment index.
        let tx = TxBatch::new(64 * max_datagram.max(1024), 64, socket.stats().gso);
        let mut engine_config = config.engine.clone();
        engine_config.gid = roce::gid_from_ip(local.ip());
        engine_config.max_mtu = mtu;
        // RoCEv2: UD receive buffers get the IP header in their GRH area, as on Linux.
        engine_config.link_layer = LinkLayer::Ethernet;
        engine_config.cc = cc_config;
        engine_config.qpn_prefix = group.as_ref().map(|g| group::qpn_prefix(g.slot()));
        let tap = match &config.pcap {
            Some(p) => Some(PcapTap::create(p)?),
            None => None,
        };
        let (wake_rx, wake_tx) = UnixDatagram::pair().map_err(NetError::Wake)?;
        wake_rx.set_nonblocking(true).map_err(NetError::Wake)?;
        wake_tx.set_nonblocking(true).map_err(NetError::Wake)?;
        // The CM's IDs come from the device seed too, on a stream of their own.
        let gsi = Gsi::with_comm_id_prefix(
            roce::gid_from_ip(local.ip()),
            config.seed ^ 0x434d_5f47_5349,
            group.as_ref().map(|g| (group::SLOT_BITS, g.slot())),
        );
        let socket_guard = ForkGuard::new(socket.raw_fd(), family_of(local));
        Ok(Driver {
            gsi,
            groups: crate::mcast::Groups::default(),
            ipv4_id_policy: config.ipv4_id_policy,
            engine: Device::new(engine_config, config.seed),
            check: RxCheck::new(local, config.ipv4_id_policy),
            injector: config.inject.map(|s| Injector::new(s, max_datagram)),
            socket,
            socket_guard,
            socket_config: sc,
            send_from,
            holds_port,
            group,
            next_probe: 0,
            listener_changes: u64::MAX,
            group_buf: vec![0; FORWARD_HEADER_LEN + MAX_ROCE_DATAGRAM + 1],
            rx,
            tx,
            tap,
            local,
            epoch: Instant::now(),
            last_now: 0,
            mtu,
            interface: iface.as_ref().ok().cloned(),
            default_tos: config.traffic_class,
            ecn_capable: config.cc.reacts(),
            peer_ports: PeerPorts::default(),
            scratch: vec![0; max_datagram],
            counters: DriverCounters {
                cc_link_rate_mbps: link_rate,
                cc_wire_overhead: u64::from(overhead),
                ..DriverCounters::default()
            },
            wake_rx,
            wake_tx,
            acks: AckHold::default(),
            acks_before_turn: 0,
            turns_since_group_read: 0,
        })
    }

    /// The engine, for verbs.
    pub fn engine(&self) -> &Device {
        &self.engine
    }

    /// The engine, for verbs that change it. Call [`Driver::flush`] after commands that
    /// may make packets ready (`post_send`, `post_recv`, `modify_qp`).
    pub fn engine_mut(&mut self) -> &mut Device {
        &mut self.engine
    }

    /// QP1 and its Communication Manager.
    pub fn gsi(&self) -> &Gsi {
        &self.gsi
    }

    /// QP1 and its Communication Manager, for CM commands. Call [`Driver::flush`] after a
    /// command that sends a MAD.
    pub fn gsi_mut(&mut self) -> &mut Gsi {
        &mut self.gsi
    }

    /// The engine and QP1 together, for glue that moves a QP and tells the CM (the CM API).
    pub fn engine_and_gsi(&mut self) -> (&mut Device, &mut Gsi) {
        (&mut self.engine, &mut self.gsi)
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The device GID.
    pub fn gid(&self) -> [u8; 16] {
        roce::gid_from_ip(self.local.ip())
    }

    /// The largest path MTU.
    pub fn mtu(&self) -> Mtu {
        self.mtu
    }

    /// The interface holding the device address and its MTU (bytes), if it was found.
    pub fn interface(&self) -> Option<(&str, u32)> {
        self.interface.as_ref().map(|(n, m)| (n.as_str(), *m))
    }

    /// Sends to `ip` on `port` instead of 4791 (a peer device bound to another port).
    pub fn set_peer_port(&mut self, ip: IpAddr, port: u16) {
        self.peer_ports.insert(ip, port);
    }

    /// Driver counters.
    pub fn counters(&self) -> DriverCounters {
        DriverCounters {
            rx: self.check.counters(),
            socket: self.socket.stats(),
            faults: self
                .injector
                .as_ref()
                .map(|i| i.counters())
                .unwrap_or_default(),
            group: self
                .group
                .as_ref()
                .map(|g| g.counters())
                .unwrap_or_default(),
            ..self.counters
        }
    }

    /// Nanoseconds since the driver opened (the engine's clock).
    pub fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// The instant the engine's clock counts from (so another thread can read the engine
    /// time without the driver).
    pub(crate) fn epoch(&self) -> Instant {
        self.epoch
    }

    /// The engine time [`Driver::process`] last read (the start of its latest turn).
    pub fn last_now(&self) -> Nanos {
        self.last_now
    }

    /// When the driver next has something to do without input: the engine's next timer or
    /// the injector's held datagram.
    pub fn next_deadline(&self) -> Option<Nanos> {
        let inj = self.injector.as_ref().and_then(|i| i.poll_timeout());
        [
            self.engine.poll_timeout(),
            inj,
            self.gsi.poll_timeout(),
            self.probe_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether datagrams wait in the send batch because the socket buffer was full.
    pub fn tx_pending(&self) -> bool {
        !self.tx.is_empty()
    }

    /// A handle other threads use to wake [`Driver::wait`].
    pub fn waker(&self) -> io::Result<Waker> {
        Ok(Waker(self.wake_tx.try_clone()?))
    }

    /// One turn: receive, timers, transmit. Never blocks.
    pub fn process(&mut self) -> io::Result<Progress> {
        self.turn(false)
    }

    /// [`Driver::process`] for a polling application that answers what it receives at
    /// once (a ping-pong): the positive ACKs this turn makes for received requests wait for
    /// the application's next verb and leave behind its answer, in the same `sendmmsg`,
    /// instead of costing a send of their own before it (`ack_hold.rs`). They wait at most
    /// until the next flush that sends anything, a [`Driver::process`] turn (the device
    /// thread's), [`Driver::release_acks`], or `ack_hold::HOLD_FOR` of this application's
    /// turns.
    pub fn process_then_answer(&mut self) -> io::Result<Progress> {
        self.turn(true)
    }

    /// Whether positive ACKs are being held for an answer (see
    /// [`Driver::process_then_answer`]).
    pub fn holds_acks(&self) -> bool {
        !self.acks.is_empty()
    }

    /// Whether every held ACK was made by the latest turn: then an application whose poll
    /// found no completion has nothing to answer with them (a WRITE stream's receiver), and
    /// they should go (`Driver::release_acks`) rather than wait.
    pub fn holds_only_new_acks(&self) -> bool {
        !self.acks.is_empty() && self.acks_before_turn == 0
    }

    /// Sends the held positive ACKs now.
    pub fn release_acks(&mut self) -> io::Result<()> {
        if self.acks.is_empty() {
            return Ok(());
        }
        self.release_held();
        match self.send_batch() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(()),
        }
    }

    fn turn(&mut self, answer_follows: bool) -> io::Result<Progress> {
        let mut progress = Progress::default();
        self.acks_before_turn = self.acks.count();
        // One clock read per turn: a busy-polling device turns millions of times a second,
        // and what the turn does (receive a batch, fire timers, send) takes microseconds.
        let now = self.now();
        self.last_now = now;
        self.probe_owner(now);
        let release = if answer_follows {
            AckRelease::AwaitAnswer
        } else {
            AckRelease::AfterData
        };
        progress.received = self.receive(now, release)?;
        if self.group_read_due() {
            progress.received += self.receive_from_group(now);
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        if self.gsi.poll_timeout().is_some_and(|t| t <= now) {
            self.gsi.handle_timeout(now);
        }
        // A poll that received nothing keeps waiting too: the application may be about
        // to answer what an earlier poll gave it (send-lat polls once more before it does).
        let (sent, blocked) = self.flush_at(now, release)?;
        progress.sent = sent;
        progress.blocked = blocked;
        Ok(progress)
    }

    /// Drains the engine's transmits and sends them. Returns the datagrams queued.
    pub fn flush(&mut self) -> io::Result<usize> {
        let now = self.now();
        self.flush_at_time(now)
    }

    /// [`Driver::flush`] at `now`, a clock read the caller just made (a verb that gave the
    /// engine the same time: one clock read per `post_send` instead of two).
    pub(crate) fn flush_at_time(&mut self, now: Nanos) -> io::Result<usize> {
        Ok(self.flush_at(now, AckRelease::WithAnswer)?.0)
    }

    /// Receives a batch and hands it to the engine. A long batch is answered in parts: after
    /// every [`RX_ANSWER_EVERY`] datagrams whatever the engine made ready (atomic and READ
    /// responses, ACKs) is sent before the rest is handled, so the peer starts on the first
    /// answers while this side works on the others (with 16 FETCH_AND_ADDs arriving in one
    /// GRO slot, both processes otherwise take turns instead of overlapping).
    fn receive(&mut self, now: Nanos, release: AckRelease) -> io::Result<usize> {
        let mut n = self.socket.recv(&mut self.rx)?;
        let mut result = Ok(());
        if n > 0 {
            // Lent out while the engine runs, so a part can be sent in between.
            let rx = std::mem::take(&mut self.rx);
            for (k, d) in rx.iter().enumerate() {
                self.counters.rx_datagrams += 1;
                self.counters.rx_bytes += d.payload.len() as u64;
                if d.payload.len() > MAX_ROCE_DATAGRAM {
                    self.counters.rx_oversize += 1;
                    continue;
                }
                // Only the port owner forwards: what reaches another process's own port
                // was sent to it by address and port, so it is its own.
                if let Some(g) = self.group.as_mut().filter(|g| g.is_owner()) {
                    let header = ForwardHeader {
                        source: d.source,
                        tos: d.tos,
                        gro_index: d.gro_index,
                    };
                    let route = group::route_datagram(d.payload);
                    if g.forward(route, &header, d.payload, &mut self.group_buf) {
                        continue;
                    }
                }
                RxParts {
                    check: &mut self.check,
                    tap: &mut self.tap,
                    gsi: &mut self.gsi,
                    engine: &mut self.engine,
                }
                .deliver(now, &d, &mut self.counters);
                if (k + 1) % RX_ANSWER_EVERY == 0 && k + 1 < n && !self.engine.is_idle() {
                    self.counters.rx_answered_in_parts += 1;
                    if let Err(e) = self.flush_at(now, release) {
                        result = Err(e);
                    }
                }
            }
            self.rx = rx;
        }
        if !self.groups.joined.is_empty() {
            n += receive_groups(
                now,
                &mut self.groups,
                &mut self.scratch,
                RxTargets {
                    tap: &mut self.tap,
                    gsi: &mut self.gsi,
                    engine: &mut self.engine,
                    counters: &mut self.counters,
                },
            );
        }
        result.map(|()| n)
    }

    /// Joins and leaves multicast groups on the network so that they are the engine's
    /// (after `attach_mcast`, `detach_mcast` or `destroy_qp`). A group that cannot be
    /// joined is reported with the OS error; the others are still brought in line.
    pub fn sync_multicast(&mut self) -> Result<(), ([u8; 16], io::Error)> {
        let wanted = self.engine.mcast_groups();
        let fd = self.socket_fd();
        self.groups
            .sync(&wanted, self.local, fd, self.ipv4_id_policy)
    }

    /// Handles what the port owner forwarded to this process (its slot and listener
    /// sockets). Returns the datagrams received.
    fn receive_from_group(&mut self, now: Nanos) -> usize {
        let Some(g) = self.group.as_mut() else {
            return 0;
        };
        let mut parts = RxParts {
            check: &mut self.check,
            tap: &mut self.tap,
            gsi: &mut self.gsi,
            engine: &mut self.engine,
        };
        let mut n = 0;
        // A bounded batch per turn, like the socket's, so timers and sends still run.
        while n < 64 {
            let Some((h, len)) = g.recv(&mut self.group_buf) else {
                break;
            };
            n += 1;
            self.counters.rx_datagrams += 1;
            self.counters.rx_bytes += len as u64;
            if len > MAX_ROCE_DATAGRAM {
                self.counters.rx_oversize += 1;
                continue;
            }
            let d = RxDatagram {
                source: h.source,
                tos: h.tos,
                payload: &self.group_buf[..len],
                gro_index: h.gro_index,
            };
            parts.deliver(now, &d, &mut self.counters);
        }
        n
    }

    /// Whether this turn reads the slot and listener sockets. A process that is not the
    /// port owner receives everything there, so it reads them every turn. The owner
    /// forwards to the others and never to itself, so its own sockets hold only what an
    /// earlier owner forwarded before this process took over: reading them every turn would
    /// cost an empty `recvfrom` per turn of a polling loop (a third of its turn's system
    /// time), so it reads them every [`OWNER_GROUP_READ_EVERY`] turns.
    fn group_read_due(&mut self) -> bool {
        let Some(g) = self.group.as_ref() else {
            return false;
        };
        if !g.is_owner() {
            return true;
        }
        self.turns_since_group_read += 1;
        if self.turns_since_group_read < OWNER_GROUP_READ_EVERY {
            return false;
        }
        self.turns_since_group_read = 0;
        true
    }

    /// When the next owner probe is due, if this driver needs one.
    fn probe_deadline(&self) -> Option<Nanos> {
        let g = self.group.as_ref()?;
        (!self.holds_port || !g.is_owner()).then_some(self.next_probe)
    }

    /// A process that does not own the port checks, every [`group::PROBE_INTERVAL`],
    /// whether the owner left: it binds the port if it can (and becomes the owner), and
    /// otherwise points its sockets at the current owner (which may be new).
    fn probe_owner(&mut self, now: Nanos) {
        let Some(due) = self.probe_deadline() else {
            return;
        };
        if now < due {
            return;
        }
        self.next_probe = now + group::PROBE_INTERVAL.as_nanos() as Nanos;
        let Some(g) = self.group.as_mut() else {
            return;
        };
        if self.holds_port {
            // The port is ours but the forwarding name was still the old owner's.
            let _ = g.become_owner();
            return;
        }
        let mut sc = self.socket_config.clone();
        sc.bind = self.local;
        match RoceSocket::bind(&sc) {
            Ok(socket) => {
                // Datagrams still queued for the old socket go out from it first.
                let _ = self.socket.send(&mut self.tx);
                let max_datagram = self.mtu.bytes() as usize + TX_HEADROOM;
                self.rx = socket.rx_batch(32, max_datagram);
                self.tx = TxBatch::new(64 * max_datagram.max(1024), 64, socket.stats().gso);
                self.socket_guard = ForkGuard::new(socket.raw_fd(), family_of(self.local));
                self.send_from = socket.local_addr();
                self.socket = socket;
                self.holds_port = true;
                g.count_takeover();
                let _ = g.become_owner();
            }
            Err(_) => g.reconnect(),
        }
    }

    /// The UDP destination and TOS of a transmit, or `None` if it cannot be routed.
    fn route(&self, t: &Transmit) -> Option<(SocketAddr, u8)> {
        route_with(self.local, &self.peer_ports, self.ecn_capable, t)
    }

    fn flush_at(&mut self, now: Nanos, release: AckRelease) -> io::Result<(usize, bool)> {
        self.sync_listeners();
        let max = self.mtu.bytes() as usize + TX_HEADROOM;
        let mut queued = 0;
        let held_before = self.acks.count();
        if release == AckRelease::AwaitAnswer && self.acks.overdue(now) {
            // Held by earlier turns whose answer did not come in time: they go now.
            queued += self.release_held();
            self.acks_before_turn = 0;
        }
        let held_before = held_before.min(self.acks.count());
        let mut others = 0;
        if let Some(inj) = self.injector.as_mut() {
            let (tx, tap, counters, local) = (
                &mut self.tx,
                &mut self.tap,
                &mut self.counters,
                self.send_from,
            );
            let default_tos = self.default_tos;
            inj.handle_timeout(now, &mut |dest, tos, bytes| {
                queue_copy(tx, tap, counters, local, default_tos, dest, tos, bytes);
            });
        }
        queued += self.flush_gsi()?;
        loop {
            // Keep room for the worst case of one transmit: itself, a duplicate and a
            // released held datagram.
            if !self.tx.has_room(3, max) {
                match self.send_batch() {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((queued, true)),
                    Err(e) => return Err(e),
                }
            }
            let produced = if self.injector.is_some() {
                self.transmit_through_injector(now, max)
            } else {
                self.transmit_direct(now, max)
            };
            match produced {
                Some(n) => {
                    queued += n;
                    others += n;
                }
                None => break,
            }
        }
        if !self.acks.is_empty() {
            let keep = others == 0
                && match release {
                    AckRelease::AfterData => false,
                    AckRelease::AwaitAnswer => true,
                    // Only what an earlier turn held waits on; this verb's own ACKs go.
                    AckRelease::WithAnswer => self.acks.count() == held_before,
                };
            if !keep {
                let released = self.release_held();
                if others > 0 {
                    self.counters.acks_behind_data += released as u64;
                }
                queued += released;
            }
        }
        if self.tx.is_empty() {
            return Ok((queued, false));
        }
        match self.send_batch() {
            Ok(()) => Ok((queued, false)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok((queued, true)),
            Err(e) => Err(e),
        }
    }

    /// Listens on `service_id` (rdma_cm: bind + listen): in the CM, and at the address, so
    /// that the port owner sends its REQs here. A service ID another process on the address
    /// listens on is refused (`ServiceIdInUse`), as the kernel refuses a bound port
    /// (EADDRINUSE).
    pub fn listen(&mut self, service_id: u64) -> Result<softib_cm::ListenerId, softib_cm::CmError> {
        let listener = self.gsi.cm_mut().listen(service_id)?;
        self.sync_listeners();
        if self
            .group
            .as_ref()
            .is_some_and(|g| !g.holds_service(service_id))
        {
            let _ = self.gsi.cm_mut().stop_listening(listener);
            self.sync_listeners();
            return Err(softib_cm::CmError::ServiceIdInUse(service_id));
        }
        Ok(listener)
    }

    /// Claims the service IDs the CM listens on at this address, so the port owner sends
    /// their REQs here (`group.rs`); done before the listen's caller gets control back.
    fn sync_listeners(&mut self) {
        let Some(g) = self.group.as_mut() else {
            return;
        };
        let changes = self.gsi.cm().listener_changes();
        if changes == self.listener_changes {
            return;
        }
        self.listener_changes = changes;
        let listening: Vec<u64> = self.gsi.cm().listening_services().collect();
        g.sync_services(&listening);
    }

    /// Queues QP1's datagrams (CM MADs). They bypass the fault injector: CM loss is tested
    /// on the sans-IO CM with a virtual clock.
    fn flush_gsi(&mut self) -> io::Result<usize> {
        let max = GSI_DATAGRAM_LEN + ICRC_LEN;
        let mut queued = 0;
        loop {
            if !self.tx.has_room(1, max) {
                match self.send_batch() {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(queued),
                    Err(e) => return Err(e),
                }
                if !self.tx.has_room(1, max) {
                    return Ok(queued);
                }
            }
            let mut datagram = [0u8; GSI_DATAGRAM_LEN + ICRC_LEN];
            let Some(t) = self.gsi.poll_transmit(&mut datagram[..GSI_DATAGRAM_LEN]) else {
                return Ok(queued);
            };
            let ip = roce::ip_from_gid(t.dest_gid);
            if ip.is_ipv4() != self.local.is_ipv4() {
                self.counters.tx_unroutable += 1;
                continue;
            }
            let dest = SocketAddr::new(ip, self.peer_ports.get(ip));
            let (local, tos) = (self.send_from, self.default_tos);
            if self.forward_own_mad(dest, &mut datagram, t.len) {
                self.counters.tx_datagrams += 1;
                queued += 1;
                continue;
            }
            let mut sealed = 0;
            let pushed = self.tx.push_with(dest, None, max, |slot, oracle| {
                let ident = oracle.ipv4_ident(t.len + ICRC_LEN);
                slot[..t.len].copy_from_slice(&datagram[..t.len]);
                match roce::seal(local, dest, tos, ident, slot, t.len) {
                    Some(n) => {
                        datagram[..n].copy_from_slice(&slot[..n]);
                        sealed = ident;
                        n
                    }
                    None => 0,
                }
            });
            match pushed {
                Ok(0) | Err(_) => self.counters.tx_unroutable += 1,
                Ok(len) => {
                    self.counters.tx_datagrams += 1;
                    self.counters.tx_bytes += len as u64;
                    queued += 1;
                    if let Some(tap) = self.tap.as_mut() {
                        if let Some((ip, udp)) = roce::tx_headers(local, dest, tos, sealed) {
                            if tap.record(&ip, &udp, &datagram[..len]).is_err() {
                                self.counters.pcap_errors += 1;
                            }
                        }
                    }
                }
            }
        }
    }

    /// A CM MAD the port owner sends to another process on its own address goes straight
    /// to that process's socket, not through the UDP port: a process often exits right
    /// after its last MAD (a REJ, a DREP), and a datagram still in the owner's own receive
    /// queue would die with it. `false`: send it as usual.
    fn forward_own_mad(&mut self, dest: SocketAddr, datagram: &mut [u8], len: usize) -> bool {
        let Some(g) = self.group.as_mut().filter(|g| g.is_owner()) else {
            return false;
        };
        if dest != self.local {
            return false;
        }
        let tos = self.default_tos;
        let Some(n) = roce::seal(self.send_from, dest, tos, 0, datagram, len) else {
            return false;
        };
        let route = group::route_datagram(&datagram[..n]);
        let header = ForwardHeader {
            source: self.send_from,
            tos: Some(tos),
            gro_index: 0,
        };
        g.forward(route, &header, &datagram[..n], &mut self.group_buf)
    }

    /// Lets the engine write one packet straight into the send batch. `None` when the
    /// engine has nothing more to send.
    fn transmit_direct(&mut self, now: Nanos, max: usize) -> Option<usize> {
        if !self.acks.has_room() {
            // Keep the engine's order among ACKs: the held ones go before a new one.
            self.release_held();
        }
        let mut engine_empty = false;
        let mut unroutable = false;
        let mut held = false;
        let local = self.send_from;
        let default_tos = self.default_tos;
        let ecn_capable = self.ecn_capable;
        let (engine, tap, peer_ports, acks) = (
            &mut self.engine,
            &mut self.tap,
            &self.peer_ports,
            &mut self.acks,
        );
        let mut pcap_error = false;
        let pushed = self.tx.push_deferred(max, |slot, ident_of| {
            let Some(t) = engine.poll_transmit(now, &mut slot[..max - ICRC_LEN]) else {
                engine_empty = true;
                return None;
            };
            let Some((dest, tos)) = route_with(local, peer_ports, ecn_capable, &t) else {
                unroutable = true;
                return None;
            };
            let tos_opt = (tos != default_tos).then_some(tos);
            if ack_hold::is_plain_ack(&slot[..t.len])
                && acks.hold(now, dest, tos_opt, &slot[..t.len])
            {
                // Sealed when it joins a batch, behind this flush's data.
                held = true;
                return None;
            }
            let ident = ident_of(dest, tos_opt, t.len + ICRC_LEN);
            let len = roce::seal(local, dest, tos, ident, slot, t.len)?;
            if let Some(tap) = tap.as_mut() {
                if let Some((ip, udp)) = roce::tx_headers(local, dest, tos, ident) {
                    pcap_error |= tap.record(&ip, &udp, &slot[..len]).is_err();
                }
            }
            Some((dest, tos_opt, len))
        });
        self.counters.pcap_errors += u64::from(pcap_error);
        if engine_empty {
            return None;
        }
        if held {
            return Some(0);
        }
        if unroutable {
            self.counters.tx_unroutable += 1;
            return Some(0);
        }
        match pushed {
            Ok(len) => {
                self.counters.tx_datagrams += 1;
                self.counters.tx_bytes += len as u64;
                Some(1)
            }
            // has_room was checked, so this does not happen; stop rather than spin.
            Err(_) => None,
        }
    }

    /// Sends the batch. A datagram the kernel refuses as larger than the path MTU
    /// (EMSGSIZE: the route or the interface MTU changed under a live connection, since
    /// the MTU was checked when the device opened and at RTR) fails its QP at once with a
    /// completion error (`Device::transmit_refused`: `LocQpOpErr`, vendor error
    /// `TransmitRefused`) instead of being resent until "transport retry counter
    /// exceeded" hides the cause. Other refusals (no route, ...) stay losses the transport
    /// recovers from or times out on, counted by the socket as `tx_refused`.
    fn send_batch(&mut self) -> io::Result<()> {
        let mut refused = [None::<(SocketAddr, u32)>; REFUSED_PER_SEND];
        let mut count = 0;
        let result = self
            .socket
            .send_reporting(&mut self.tx, &mut |e, dest, bytes| {
                if e.raw_os_error() != Some(libc::EMSGSIZE) || bytes.len() < softib_wire::BTH_LEN {
                    return;
                }
                // BTH bytes 5..8: the destination QP (IBA vol. 1 §9.2).
                let qpn = u32::from_be_bytes([0, bytes[5], bytes[6], bytes[7]]);
                let key = Some((dest, qpn));
                if count < refused.len() && !refused[..count].contains(&key) {
                    refused[count] = key;
                    count += 1;
                }
            });
        for (dest, qpn) in refused[..count].iter().flatten() {
            let dgid = roce::gid_from_ip(dest.ip());
            if self.engine.transmit_refused(dgid, *qpn).is_some() {
                self.counters.qps_failed_msgsize += 1;
            }
        }
        result
    }

    /// Queues the held ACKs (sealed now, with the Identification of their place in the
    /// batch) and forgets them. Returns how many were queued.
    fn release_held(&mut self) -> usize {
        let mut queued = 0;
        let max = TX_HEADROOM.max(64);
        for k in 0..self.acks.count() {
            let Some(ack) = self.acks.get(k) else {
                continue;
            };
            if !self.tx.has_room(1, max) {
                // Full of datagrams the socket could not take: send what fits first.
                if self.send_batch().is_err() && !self.tx.has_room(1, max) {
                    // Still full: this ACK is lost on the way, as a refused datagram
                    // would be; the requester's timer recovers (a later ACK covers it).
                    self.counters.tx_unroutable += 1;
                    continue;
                }
            }
            // Sealed with the address the datagram leaves from (its own port for a process
            // that does not own the address's port): the ICRC covers the UDP source port.
            let (local, dest, packet) = (self.send_from, ack.dest, ack.packet());
            let tos = ack.tos.unwrap_or(self.default_tos);
            let want_record = self.tap.is_some();
            let mut record = [0u8; 64];
            let mut ident = 0;
            let pushed = self.tx.push_with(dest, ack.tos, max, |slot, oracle| {
                ident = oracle.ipv4_ident(packet.len() + ICRC_LEN);
                slot[..packet.len()].copy_from_slice(packet);
                let len = roce::seal(local, dest, tos, ident, slot, packet.len()).unwrap_or(0);
                if want_record {
                    record[..len].copy_from_slice(&slot[..len]);
                }
                len
            });
            match pushed {
                Ok(len) if len > 0 => {
                    self.counters.tx_datagrams += 1;
                    self.counters.tx_bytes += len as u64;
                    queued += 1;
                    if let Some(tap) = self.tap.as_mut() {
                        if let Some((ip, udp)) = roce::tx_headers(local, dest, tos, ident) {
                            if tap.record(&ip, &udp, &record[..len]).is_err() {
                                self.counters.pcap_errors += 1;
                            }
                        }
                    }
                }
                _ => self.counters.tx_unroutable += 1,
            }
        }
        self.acks.clear();
        queued
    }

    /// Lets the engine write one packet into the scratch buffer and passes it through the
    /// fault injector into the send batch.
    fn transmit_through_injector(&mut self, now: Nanos, max: usize) -> Option<usize> {
        let t = self
            .engine
            .poll_transmit(now, &mut self.scratch[..max - ICRC_LEN])?;
        let Some((dest, tos)) = self.route(&t) else {
            self.counters.tx_unroutable += 1;
            return Some(0);
        };
        let Some(len) = roce::seal(self.send_from, dest, tos, 0, &mut self.scratch, t.len) else {
            self.counters.tx_unroutable += 1;
            return Some(0);
        };
        let (tx, tap, counters, local) = (
            &mut self.tx,
            &mut self.tap,
            &mut self.counters,
            self.send_from,
        );
        let before = counters.tx_datagrams;
        let default_tos = self.default_tos;
        let tos_opt = (tos != default_tos).then_some(tos);
        if let Some(inj) = self.injector.as_mut() {
            inj.apply(
                now,
                dest,
                tos_opt,
                &self.scratch[..len],
                &mut |d, tos, bytes| {
                    queue_copy(tx, tap, counters, local, default_tos, d, tos, bytes);
                },
            );
        }
        Some((self.counters.tx_datagrams - before) as usize)
    }

    /// Sleeps until a datagram arrives, [`Waker::wake`] is called, or `deadline` (engine
    /// nanoseconds) passes; `None` sleeps until one of the first two.
    pub fn wait(&mut self, deadline: Option<Nanos>) -> io::Result<()> {
        let timeout = deadline.map(|d| Duration::from_nanos(d.saturating_sub(self.now())));
        let (fds, wake) = self.wait_fds();
        let (_, woken) = crate::sys::poll_set(&fds, wake, timeout)?;
        if woken {
            self.drain_wake();
        }
        Ok(())
    }

    fn socket_fd(&self) -> std::os::fd::RawFd {
        self.socket.raw_fd()
    }

    /// The socket and wake-up descriptors, for a thread that waits without holding the
    /// driver (see [`wait_on`]).
    pub(crate) fn wait_fds(&self) -> (Vec<std::os::fd::RawFd>, std::os::fd::RawFd) {
        let mut fds = vec![self.socket_fd()];
        if let Some(g) = &self.group {
            fds.extend(g.fds());
        }
        // With multicast groups joined, datagrams also arrive on their sockets, gathered
        // in one epoll set (readable when any of them is).
        if let Some(ep) = self.groups.wait_fd() {
            fds.push(ep);
        }
        (fds, self.wake_rx.as_raw_fd())
    }

    /// Empties the wake-up channel after a wake-up.
    pub(crate) fn drain_wake(&self) {
        let mut buf = [0u8; 64];
        while self.wake_rx.recv(&mut buf).is_ok() {}
    }

    /// Flushes the pcap tap.
    pub fn flush_capture(&mut self) {
        if let Some(tap) = self.tap.as_mut() {
            if tap.flush().is_err() {
                self.counters.pcap_errors += 1;
            }
        }
    }
}

/// Where a multicast group socket's datagrams go (borrowed apart from the group sockets
/// and their checks).
struct RxTargets<'a> {
    tap: &'a mut Option<PcapTap>,
    gsi: &'a mut Gsi,
    engine: &'a mut Device,
    counters: &'a mut DriverCounters,
}

/// Receives what waits on the multicast group sockets (a few datagrams per group and
/// turn, so one busy group cannot starve the device socket). Returns how many.
fn receive_groups(
    now: Nanos,
    groups: &mut crate::mcast::Groups,
    buf: &mut [u8],
    to: RxTargets<'_>,
) -> usize {
    const PER_GROUP: usize = 16;
    let mut n = 0;
    for g in &mut groups.joined {
        let mut parts = RxParts {
            check: &mut g.check,
            tap: &mut *to.tap,
            gsi: &mut *to.gsi,
            engine: &mut *to.engine,
        };
        for _ in 0..PER_GROUP {
            let Ok((len, source)) = g.socket.recv_from(buf) else {
                break;
            };
            n += 1;
            to.counters.rx_datagrams += 1;
            to.counters.rx_bytes += len as u64;
            if len > MAX_ROCE_DATAGRAM {
                to.counters.rx_oversize += 1;
                continue;
            }
            let d = RxDatagram {
                source,
                tos: None,
                payload: &buf[..len],
                gro_index: 0,
            };
            parts.deliver(now, &d, to.counters);
        }
    }
    n
}

/// Waits on the descriptors of [`Driver::wait_fds`] for at most `timeout` (`None`: no
/// limit); returns (datagram waiting, woken).
pub(crate) fn wait_on(
    fds: &[std::os::fd::RawFd],
    wake_fd: std::os::fd::RawFd,
    timeout: Option<Duration>,
) -> io::Result<(bool, bool)> {
    crate::sys::poll_set(fds, wake_fd, timeout)
}

fn family_of(addr: SocketAddr) -> i32 {
    if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    }
}

/// The parts of a [`Driver`] a received datagram goes through, borrowed apart from the
/// receive batch it is read from.
struct RxParts<'a> {
    check: &'a mut RxCheck,
    tap: &'a mut Option<PcapTap>,
    gsi: &'a mut Gsi,
    engine: &'a mut Device,
}

impl RxParts<'_> {
    /// Checks one datagram's ICRC and hands its transport packet to QP1 or the engine.
    fn deliver(&mut self, now: Nanos, d: &RxDatagram<'_>, counters: &mut DriverCounters) {
        match self.check.check(d) {
            Ok(r) => {
                if let Some(tap) = self.tap.as_mut() {
                    if tap.record(&r.ip, &r.udp, r.datagram).is_err() {
                        counters.pcap_errors += 1;
                    }
                }
                // QP1 is the GSI's, not the engine's (IBA 13.5.1).
                if Gsi::is_for_gsi(r.transport) {
                    self.gsi.handle_packet(now, r.sgid, r.transport);
                    return;
                }
                let meta = RxMeta {
                    slid: 0,
                    sl: 0,
                    grh: Some(RxGrh {
                        sgid: r.sgid,
                        dgid: r.dgid,
                        traffic_class: r.tos,
                        flow_label: 0,
                        // The socket does not report the TTL; Linux senders use 64.
                        hop_limit: 64,
                    }),
                    ecn_ce: r.ecn_ce,
                };
                self.engine.handle_packet(now, &meta, r.transport);
            }
            Err(RxDrop::Icrc) => self.engine.count_driver_drop(DriverDrop::Icrc),
            Err(RxDrop::Runt) | Err(RxDrop::WrongFamily) => {
                self.engine.count_driver_drop(DriverDrop::Format)
            }
        }
    }
}

/// UDP ports of peers that do not listen on 4791, by address. Looked up for every packet
/// sent: the last answer is kept, so a stream to one peer hashes no address (SipHash was
/// 4 % of a FETCH_AND_ADD's CPU time, `examples/fadd_cost.rs`).
#[derive(Debug, Default)]
struct PeerPorts {
    map: HashMap<IpAddr, u16>,
    last: std::cell::Cell<Option<(IpAddr, u16)>>,
}

impl PeerPorts {
    fn insert(&mut self, ip: IpAddr, port: u16) {
        self.map.insert(ip, port);
        self.last.set(None);
    }

    /// The port to send to at `ip`.
    fn get(&self, ip: IpAddr) -> u16 {
        if self.map.is_empty() {
            return ROCE_V2_PORT;
        }
        match self.last.get() {
            Some((last, port)) if last == ip => port,
            _ => {
                let port = self.map.get(&ip).copied().unwrap_or(ROCE_V2_PORT);
                self.last.set(Some((ip, port)));
                port
            }
        }
    }
}

/// Wakes a [`Driver::wait`] from another thread.
#[derive(Debug)]
pub struct Waker(UnixDatagram);

impl Waker {
    /// Wakes the waiting driver (harmless if it is not waiting).
    pub fn wake(&self) {
        // A full wake-up channel already guarantees a wake-up.
        let _ = self.0.send(&[1]);
    }
}

/// The UDP destination and TOS byte of a transmit: the GRH's destination GID as an
/// address (Annex A17.4.4) on port 4791 unless told otherwise, the GRH traffic class with
/// ECT(0) when the device reacts to congestion (`ecn_capable`) and the engine allows ECN
/// for this packet (data, not CNPs or ACKs).
fn route_with(
    local: SocketAddr,
    peer_ports: &PeerPorts,
    ecn_capable: bool,
    t: &Transmit,
) -> Option<(SocketAddr, u8)> {
    let grh = t.path.grh?;
    let ip = roce::ip_from_gid(grh.dgid);
    if ip.is_ipv4() != local.is_ipv4() {
        return None;
    }
    let port = peer_ports.get(ip);
    let ecn = if ecn_capable && t.ecn_capable {
        ECN_ECT0
    } else {
        0
    };
    Some((SocketAddr::new(ip, port), (grh.traffic_class & !0b11) | ecn))
}

#[allow(clippy::too_many_arguments)]
fn queue_copy(
    tx: &mut TxBatch,
    tap: &mut Option<PcapTap>,
    counters: &mut DriverCounters,
    local: SocketAddr,
    default_tos: u8,
    dest: SocketAddr,
    tos: Option<u8>,
    bytes: &[u8],
) {
    let pushed = tx.push_with(dest, tos, bytes.len(), |slot, _| {
        slot[..bytes.len()].copy_from_slice(bytes);
        bytes.len()
    });
    if pushed.is_err() {
        counters.tx_unroutable += 1;
        return;
    }
    counters.tx_datagrams += 1;
    counters.tx_bytes += bytes.len() as u64;
    if let Some(tap) = tap.as_mut() {
        if let Some((ip, udp)) = roce::tx_headers(local, dest, tos.unwrap_or(default_tos), 0) {
            if tap.record(&ip, &udp, bytes).is_err() {
                counters.pcap_errors += 1;
            }
        }
    }
}
