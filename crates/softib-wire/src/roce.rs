//! RoCEv2 encapsulation (IBA Annex A17): an IB transport packet (BTH through pad) carried in
//! UDP (destination port 4791) over IPv4 or IPv6, followed by the ICRC.
//!
//! ```text
//! [Ethernet] | IPv4 (20) or IPv6 (40) | UDP (8) | BTH .. payload .. pad | ICRC (4, LE)
//! ```
//!
//! Three users, three entry points:
//! - capture decoders and the pcap tap parse whole frames with [`RoceFrame::parse_ethernet`] /
//!   [`RoceFrame::parse_ip`] and re-emit them with [`emit_ip`] / [`emit_ethernet`];
//! - a sender on a UDP socket hands the kernel only the UDP payload, so it needs only the
//!   ICRC: [`icrc_from_parts`] rebuilds the covered IP and UDP fields from what it knows;
//! - a receiver on a UDP socket sees the UDP payload, the addresses, the ports and (with
//!   `IP_RECVTOS` / `IPV6_RECVTCLASS`) the TOS, but not the rest of the IP header. For IPv6
//!   nothing else is covered. For IPv4 the ICRC also covers the 16-bit identification, which
//!   the socket does not show: Linux rxe sends a per-socket counter, an unconnected UDP
//!   socket with DF set sends 0, and UDP GSO segments get consecutive values. [`verify_datagram`]
//!   with [`Ipv4IdentPolicy::Recover`] finds the identification (if any) for which the
//!   received ICRC is correct, by CRC linearity, at the cost of one CRC pass plus two
//!   carry-less multiplications (see `roce/ident.rs`).
//!
//! # The price of recovering the identification
//! With [`Ipv4IdentPolicy::Recover`] a packet is accepted if any of the 2^16 identifications
//! makes its ICRC correct. A corruption elsewhere is then missed whenever its CRC syndrome
//! equals that of some change of the identification: for random corruption that happens with
//! probability 2^16 / 2^32 = 2^-16 (one packet in 65,536) instead of 2^-32. Even the CRC's
//! guarantees for small errors weaken: a single flipped bit is missed if it and some pattern
//! within the 16 identification bits together form a CRC-32 codeword, which CRC-32 has at
//! weight 4 for packets of these lengths, so for a given packet length a few bit positions
//! are exposed. (Each of the 2,108 bundled rxe frames still rejected a flipped bit.)
//!
//! [`Ipv4IdentPolicy::Near`] narrows this: senders number their packets (Linux keeps a
//! counter per destination, UDP GSO segments take consecutive values), so a receiver that
//! accepts only identifications within a window after the one it expects next gives a random
//! corruption about `window` x 2^-32 chances. Runtimes that know the identification (a
//! capture, a raw socket) should use [`Ipv4IdentPolicy::Exact`]. Which policy a UDP-socket
//! runtime uses is its decision. IPv6 has no such field and keeps the full 2^-32.
//!
//! The IPv4 flags are covered too; RoCEv2 senders set Don't Fragment, and [`Ipv4Info`]
//! carries it so a receiver states what it assumes.

mod ident;

use crate::ethernet::{EthernetFrame, EthernetRepr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::icrc::{self, ICRC_LEN};
use crate::ipv4::{Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN, PROTOCOL_UDP};
use crate::ipv6::{Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN};
use crate::udp::{UdpPacket, UdpRepr, UDP_HEADER_LEN};
use crate::{Error, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IANA UDP port of RoCEv2 (IBA Annex A17.2.1).
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Base Transport Header length: the least a RoCEv2 UDP payload carries before its ICRC.
const BTH_LEN: usize = 12;

/// IPv4 bytes after the identification field (flags/fragment .. destination address).
const IPV4_AFTER_IDENT: usize = IPV4_HEADER_LEN - 6;

/// UDP source port for a QP pair, as Linux computes it (`rdma_flow_label_to_udp_sport` applied
/// to `rdma_calc_flow_label(lqpn, rqpn)`; used by rxe and mlx5 when the flow label is 0):
/// a 20-bit hash of the QPN product folded into 14 bits, in the 0xC000.. ephemeral range, so
/// one QP pair stays on one ECMP path (IBA Annex A17.2.2 leaves the choice to the sender).
pub fn udp_source_port(lqpn: u32, rqpn: u32) -> u16 {
    let mut fl = u64::from(lqpn) * u64::from(rqpn);
    fl ^= fl >> 20;
    fl ^= fl >> 40;
    let fl = (fl & 0xF_FFFF) as u32;
    (((fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)) as u16) | 0xC000
}

/// UDP source port Linux rxe uses for a QP that has no connected peer, notably every UD QP:
/// `0xC000 + hash_32(qpn, 14)` (`rxe_qp_init_req`; `hash_32` multiplies by the 32-bit golden
/// ratio 0x61C88647 and keeps the top bits). Connected QPs switch to [`udp_source_port`].
pub fn udp_source_port_ud(qpn: u32) -> u16 {
    0xC000 | (qpn.wrapping_mul(0x61C8_8647) >> 18) as u16
}

/// What a RoCEv2 sender or a UDP-socket receiver knows of an IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Info {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Type of service (DSCP:6 ECN:2); not covered by the ICRC.
    pub tos: u8,
    /// Time to live; not covered by the ICRC. Linux sends 64.
    pub ttl: u8,
    /// Identification; covered by the ICRC (see the module docs for receivers that lack it).
    pub ident: u16,
    /// Don't Fragment; covered by the ICRC. RoCEv2 senders set it.
    pub dont_frag: bool,
}

impl Ipv4Info {
    /// Defaults as Linux rxe sends them: TOS 0, TTL 64, DF set, identification 0.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr) -> Ipv4Info {
        Ipv4Info {
            src,
            dst,
            tos: 0,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        }
    }
}

/// What a RoCEv2 sender or a UDP-socket receiver knows of an IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Info {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class (DSCP:6 ECN:2); not covered by the ICRC.
    pub traffic_class: u8,
    /// Flow label (20 bits); not covered by the ICRC.
    pub flow_label: u32,
    /// Hop limit; not covered by the ICRC. Linux sends 64.
    pub hop_limit: u8,
}

impl Ipv6Info {
    /// Defaults as Linux rxe sends them: traffic class 0, flow label 0, hop limit 64.
    pub fn new(src: Ipv6Addr, dst: Ipv6Addr) -> Ipv6Info {
        Ipv6Info {
            src,
            dst,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }
    }
}

/// The IP layer of a RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpInfo {
    /// RoCEv2 over IPv4.
    V4(Ipv4Info),
    /// RoCEv2 over IPv6.
    V6(Ipv6Info),
}

impl IpInfo {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpInfo::V4(i) => IpAddr::V4(i.src),
            IpInfo::V6(i) => IpAddr::V6(i.src),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpInfo::V4(i) => IpAddr::V4(i.dst),
            IpInfo::V6(i) => IpAddr::V6(i.dst),
        }
    }

    /// The ECN bits (low two bits of the TOS / traffic class).
    pub fn ecn(&self) -> u8 {
        match self {
            IpInfo::V4(i) => i.tos & 0x3,
            IpInfo::V6(i) => i.traffic_class & 0x3,
        }
    }

    /// IP header length.
    pub fn header_len(&self) -> usize {
        match self {
            IpInfo::V4(_) => IPV4_HEADER_LEN,
            IpInfo::V6(_) => IPV6_HEADER_LEN,
        }
    }
}

/// The UDP ports of a RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpInfo {
    /// Source port ([`udp_source_port`] for Linux compatibility).
    pub src_port: u16,
    /// Destination port ([`ROCEV2_UDP_PORT`]).
    pub dst_port: u16,
}

impl UdpInfo {
    /// Ports for a QP pair: the Linux source-port hash and port 4791.
    pub fn for_qps(lqpn: u32, rqpn: u32) -> UdpInfo {
        UdpInfo {
            src_port: udp_source_port(lqpn, rqpn),
            dst_port: ROCEV2_UDP_PORT,
        }
    }
}

/// Length of the UDP payload (transport + ICRC) as a u16, or an error if it cannot be carried.
fn udp_payload_len(transport_len: usize, ip_header_len: usize) -> Result<u16> {
    let total = transport_len + ICRC_LEN + UDP_HEADER_LEN + ip_header_len;
    if total > usize::from(u16::MAX) {
        return Err(Error::Malformed {
            header: "UDP",
            reason: "RoCEv2 packet longer than 65535 bytes",
        });
    }
    Ok((transport_len + ICRC_LEN) as u16)
}

/// Writes the IPv4 and UDP headers the ICRC and the wire see; `transport_len` excludes the ICRC.
fn ipv4_udp_headers(
    ip: &Ipv4Info,
    udp: &UdpInfo,
    transport_len: usize,
) -> Result<([u8; 20], [u8; 8])> {
    let udp_payload = udp_payload_len(transport_len, IPV4_HEADER_LEN)?;
    let mut h4 = [0u8; 20];
    Ipv4Repr {
        tos: ip.tos,
        ident: ip.ident,
        dont_frag: ip.dont_frag,
        more_frags: false,
        frag_offset: 0,
        ttl: ip.ttl,
        protocol: PROTOCOL_UDP,
        src_addr: ip.src,
        dst_addr: ip.dst,
        payload_len: udp_payload + UDP_HEADER_LEN as u16,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut h4[..]))?;
    let mut hu = [0u8; 8];
    UdpRepr {
        src_port: udp.src_port,
        dst_port: udp.dst_port,
        checksum: 0,
        payload_len: udp_payload,
    }
    .emit(&mut UdpPacket::new_unchecked(&mut hu[..]))?;
    Ok((h4, hu))
}

/// The IPv4 and UDP header bytes the ICRC covers, without the work [`ipv4_udp_headers`] does
/// for fields the ICRC masks anyway (the header checksum above all): the receive path of a
/// socket runtime calls this once per packet.
fn ipv4_udp_icrc_headers(
    ip: &Ipv4Info,
    udp: &UdpInfo,
    transport_len: usize,
) -> Result<([u8; 20], [u8; 8])> {
    let udp_payload = udp_payload_len(transport_len, IPV4_HEADER_LEN)?;
    let total = udp_payload + (UDP_HEADER_LEN + IPV4_HEADER_LEN) as u16;
    let flags: u8 = if ip.dont_frag { 0x40 } else { 0 };
    let [t0, t1] = total.to_be_bytes();
    let [i0, i1] = ip.ident.to_be_bytes();
    let [s0, s1, s2, s3] = ip.src.octets();
    let [d0, d1, d2, d3] = ip.dst.octets();
    let h4 = [
        0x45,
        0xFF,
        t0,
        t1,
        i0,
        i1,
        flags,
        0,
        0xFF,
        PROTOCOL_UDP,
        0xFF,
        0xFF,
        s0,
        s1,
        s2,
        s3,
        d0,
        d1,
        d2,
        d3,
    ];
    let [p0, p1] = udp.src_port.to_be_bytes();
    let [q0, q1] = udp.dst_port.to_be_bytes();
    let [l0, l1] = (udp_payload + UDP_HEADER_LEN as u16).to_be_bytes();
    Ok((h4, [p0, p1, q0, q1, l0, l1, 0xFF, 0xFF]))
}

/// Writes the IPv6 and UDP headers; `transport_len` excludes the ICRC.
fn ipv6_udp_headers(
    ip: &Ipv6Info,
    udp: &UdpInfo,
    transport_len: usize,
) -> Result<([u8; 40], [u8; 8])> {
    let udp_payload = udp_payload_len(transport_len, 0)?;
    let mut h6 = [0u8; 40];
    Ipv6Repr {
        traffic_class: ip.traffic_class,
        flow_label: ip.flow_label,
        payload_len: udp_payload + UDP_HEADER_LEN as u16,
        next_header: PROTOCOL_UDP,
        hop_limit: ip.hop_limit,
        src_addr: ip.src,
        dst_addr: ip.dst,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut h6[..]))?;
    let mut hu = [0u8; 8];
    UdpRepr {
        src_port: udp.src_port,
        dst_port: udp.dst_port,
        checksum: 0,
        payload_len: udp_payload,
    }
    .emit(&mut UdpPacket::new_unchecked(&mut hu[..]))?;
    Ok((h6, hu))
}

/// The ICRC of a RoCEv2 packet from what a socket-based runtime knows: addresses, ports, the
/// IPv4 identification and DF flag (in [`Ipv4Info`]) and the transport packet (BTH through
/// pad, no ICRC). The IP total length / payload length and the UDP length are derived from
/// the transport length, exactly as [`emit_ip`] writes them.
///
/// Returns 0 for a transport packet too long for one IP packet (over 65,535 bytes), which no
/// sender can put on the wire anyway.
pub fn icrc_from_parts(ip: &IpInfo, udp: &UdpInfo, transport: &[u8]) -> u32 {
    match ip {
        IpInfo::V4(v4) => match ipv4_udp_icrc_headers(v4, udp, transport.len()) {
            Ok((h4, hu)) => icrc::icrc_rocev2_ipv4(&h4, &hu, transport),
            Err(_) => 0,
        },
        IpInfo::V6(v6) => match ipv6_udp_headers(v6, udp, transport.len()) {
            Ok((h6, hu)) => icrc::icrc_rocev2_ipv6(&h6, &hu, transport),
            Err(_) => 0,
        },
    }
}

/// Finds the IPv4 identification for which `received_icrc` is the correct ICRC of this packet,
/// ignoring `ip.ident`. Returns `None` if no identification makes it correct (the packet is
/// corrupt elsewhere). See the module docs for what this does to corruption detection.
pub fn recover_ipv4_ident(
    ip: &Ipv4Info,
    udp: &UdpInfo,
    transport: &[u8],
    received_icrc: u32,
) -> Option<u16> {
    let guess = Ipv4Info { ident: 0, ..*ip };
    let computed = icrc_from_parts(&IpInfo::V4(guess), udp, transport);
    ident_from_syndrome(received_icrc ^ computed, transport.len()).map(|d| d ^ guess.ident)
}

/// Maps an ICRC syndrome to the identification difference; `transport_len` excludes the ICRC.
fn ident_from_syndrome(syndrome: u32, transport_len: usize) -> Option<u16> {
    if syndrome == 0 {
        return Some(0);
    }
    // Bytes the CRC runs over after the identification field.
    let trailing = IPV4_AFTER_IDENT + UDP_HEADER_LEN + transport_len;
    let trailing = u16::try_from(trailing).ok()?;
    ident::field_difference(syndrome, trailing)
}

/// How a receiver treats the IPv4 identification, which the ICRC covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ipv4IdentPolicy {
    /// The identification in [`Ipv4Info`] is the one on the wire (capture, raw socket).
    Exact,
    /// The identification is unknown: accept the packet if any identification makes its
    /// ICRC correct (false acceptance of a random corruption about 2^-16, see module docs).
    Recover,
    /// The identification in [`Ipv4Info`] is the one expected next: accept the packet if an
    /// identification `ident` with `ident - expected` (mod 2^16) below `window` makes its ICRC
    /// correct (false acceptance about `window` x 2^-32, see module docs).
    Near {
        /// Identifications accepted, counting from the expected one.
        window: u16,
    },
}

/// How an ICRC check passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcMatch {
    /// Correct for the headers as given.
    Exact,
    /// Correct for the IPv4 identification given here (only with [`Ipv4IdentPolicy::Recover`]
    /// or [`Ipv4IdentPolicy::Near`]).
    RecoveredIpv4Ident(u16),
}

/// Splits a RoCEv2 UDP payload (BTH .. pad, ICRC) into the transport packet and the ICRC value.
pub fn split_icrc(datagram: &[u8]) -> Result<(&[u8], u32)> {
    if datagram.len() < BTH_LEN + ICRC_LEN {
        return Err(Error::Truncated {
            header: "RoCEv2 UDP payload",
            needed: BTH_LEN + ICRC_LEN,
            available: datagram.len(),
        });
    }
    let (transport, tail) = datagram.split_at(datagram.len() - ICRC_LEN);
    Ok((
        transport,
        icrc::read_icrc([tail[0], tail[1], tail[2], tail[3]]),
    ))
}

/// Checks the ICRC of a UDP payload received on a socket (BTH .. pad, ICRC) and returns the
/// transport packet (BTH .. pad) and how the check passed. Never allocates.
///
/// With [`Ipv4IdentPolicy::Recover`] the identification in `ip` is tried first (no extra cost:
/// the recovery reuses the same CRC pass).
pub fn verify_datagram<'a>(
    ip: &IpInfo,
    udp: &UdpInfo,
    datagram: &'a [u8],
    policy: Ipv4IdentPolicy,
) -> Result<(&'a [u8], IcrcMatch)> {
    let (transport, received) = split_icrc(datagram)?;
    let computed = icrc_from_parts(ip, udp, transport);
    if received == computed || cfg!(fuzzing) {
        return Ok((transport, IcrcMatch::Exact));
    }
    if let IpInfo::V4(v4) = ip {
        let recovered = match policy {
            Ipv4IdentPolicy::Exact => None,
            Ipv4IdentPolicy::Recover => ident_from_syndrome(received ^ computed, transport.len()),
            Ipv4IdentPolicy::Near { window } => {
                ident_from_syndrome(received ^ computed, transport.len())
                    .filter(|diff| (v4.ident ^ diff).wrapping_sub(v4.ident) < window)
            }
        };
        if let Some(diff) = recovered {
            return Ok((transport, IcrcMatch::RecoveredIpv4Ident(v4.ident ^ diff)));
        }
    }
    Err(Error::IcrcMismatch { received, computed })
}

/// Bytes [`emit_ip`] writes for a transport packet of `transport_len` bytes.
pub fn ip_buffer_len(ip: &IpInfo, transport_len: usize) -> usize {
    ip.header_len() + UDP_HEADER_LEN + transport_len + ICRC_LEN
}

/// Writes a whole RoCEv2 IP packet: IP header (IPv4 with a correct header checksum), UDP
/// header (checksum 0, as Linux sends), the transport packet (BTH through pad) and the ICRC.
/// Returns the bytes written.
pub fn emit_ip(ip: &IpInfo, udp: &UdpInfo, transport: &[u8], buf: &mut [u8]) -> Result<usize> {
    let needed = ip_buffer_len(ip, transport.len());
    if buf.len() < needed {
        return Err(Error::BufferTooSmall {
            needed,
            available: buf.len(),
        });
    }
    let (hl, crc) = match ip {
        IpInfo::V4(v4) => {
            let (h4, hu) = ipv4_udp_headers(v4, udp, transport.len())?;
            buf[..20].copy_from_slice(&h4);
            buf[20..28].copy_from_slice(&hu);
            (28, icrc::icrc_rocev2_ipv4(&h4, &hu, transport))
        }
        IpInfo::V6(v6) => {
            let (h6, hu) = ipv6_udp_headers(v6, udp, transport.len())?;
            buf[..40].copy_from_slice(&h6);
            buf[40..48].copy_from_slice(&hu);
            (48, icrc::icrc_rocev2_ipv6(&h6, &hu, transport))
        }
    };
    buf[hl..hl + transport.len()].copy_from_slice(transport);
    buf[hl + transport.len()..needed].copy_from_slice(&crc.to_le_bytes());
    Ok(needed)
}

/// [`emit_ip`] for IPv4: header checksum filled in, UDP checksum 0, ICRC appended.
pub fn emit_ipv4(ip: &Ipv4Info, udp: &UdpInfo, transport: &[u8], buf: &mut [u8]) -> Result<usize> {
    emit_ip(&IpInfo::V4(*ip), udp, transport, buf)
}

/// [`emit_ip`] for IPv6: UDP checksum 0, ICRC appended.
pub fn emit_ipv6(ip: &Ipv6Info, udp: &UdpInfo, transport: &[u8], buf: &mut [u8]) -> Result<usize> {
    emit_ip(&IpInfo::V6(*ip), udp, transport, buf)
}

/// Like [`emit_ip`], behind an Ethernet header (its EtherType is set from the IP version).
pub fn emit_ethernet(
    eth: &EthernetRepr,
    ip: &IpInfo,
    udp: &UdpInfo,
    transport: &[u8],
    buf: &mut [u8],
) -> Result<usize> {
    let eth = EthernetRepr {
        ethertype: match ip {
            IpInfo::V4(_) => ETHERTYPE_IPV4,
            IpInfo::V6(_) => ETHERTYPE_IPV6,
        },
        ..*eth
    };
    let hl = eth.buffer_len();
    let needed = hl + ip_buffer_len(ip, transport.len());
    if buf.len() < needed {
        return Err(Error::BufferTooSmall {
            needed,
            available: buf.len(),
        });
    }
    eth.emit(buf)?;
    Ok(hl + emit_ip(ip, udp, transport, &mut buf[hl..])?)
}

/// The IP header of a parsed RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

/// A RoCEv2 packet parsed from an Ethernet frame or an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    /// The Ethernet header, when parsed from a frame.
    pub ethernet: Option<EthernetRepr>,
    /// The IP header.
    pub ip: IpRepr,
    /// The UDP header.
    pub udp: UdpRepr,
    /// The transport packet: BTH through pad, without the ICRC.
    pub transport: &'a [u8],
    /// The ICRC the packet carries.
    pub icrc: u32,
    /// The ICRC computed over the packet.
    pub computed_icrc: u32,
}

impl<'a> RoceFrame<'a> {
    /// Parses an Ethernet II frame (optionally 802.1Q tagged). Frames that are not RoCEv2
    /// (another EtherType, IP protocol or UDP port) give [`Error::NotInfiniBand`].
    pub fn parse_ethernet(frame: &'a [u8]) -> Result<RoceFrame<'a>> {
        let eth = EthernetFrame::new_checked(frame)?;
        let repr = EthernetRepr::parse(&eth)?;
        let payload = &frame[eth.header_len()..];
        let mut parsed = match repr.ethertype {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Self::parse_ip(payload)?,
            _ => return Err(Error::NotInfiniBand("EtherType is neither IPv4 nor IPv6")),
        };
        let version_matches = matches!(
            (repr.ethertype, parsed.ip),
            (ETHERTYPE_IPV4, IpRepr::V4(_)) | (ETHERTYPE_IPV6, IpRepr::V6(_))
        );
        if !version_matches {
            return Err(Error::Malformed {
                header: "Ethernet",
                reason: "EtherType and IP version disagree",
            });
        }
        parsed.ethernet = Some(repr);
        Ok(parsed)
    }

    /// Parses a raw IP packet (IPv4 or IPv6 by its version nibble). Packets that are not
    /// RoCEv2 give [`Error::NotInfiniBand`]. An ICRC mismatch is not an error here: see
    /// [`RoceFrame::icrc_ok`] and [`RoceFrame::check_icrc`].
    #[inline]
    pub fn parse_ip(packet: &'a [u8]) -> Result<RoceFrame<'a>> {
        let Some(first) = packet.first() else {
            return Err(Error::Truncated {
                header: "IP",
                needed: 1,
                available: 0,
            });
        };
        match first >> 4 {
            4 => Self::parse_ipv4(packet),
            6 => Self::parse_ipv6(packet),
            v => Err(Error::BadVersion {
                header: "IP",
                version: v,
            }),
        }
    }

    #[inline]
    fn parse_ipv4(packet: &'a [u8]) -> Result<RoceFrame<'a>> {
        let p = Ipv4Packet::new_checked(packet)?;
        // Decide "is this RoCEv2 at all" before judging the header as RoCEv2: IGMP reports,
        // for one, carry the Router Alert option (RFC 2113) and share the wire with rxe, so
        // IPv4 options make a packet malformed only when it is UDP to port 4791 (Annex
        // A17.4.1: RoCEv2 IPv4 headers carry no options).
        if p.version() == 4 && p.protocol() != PROTOCOL_UDP {
            return Err(Error::NotInfiniBand("IP protocol is not UDP"));
        }
        if p.version() == 4 && p.header_len() > IPV4_HEADER_LEN {
            let dport = packet.get(p.header_len() + 2..p.header_len() + 4);
            if dport.is_some_and(|d| u16::from_be_bytes([d[0], d[1]]) != ROCEV2_UDP_PORT) {
                return Err(Error::NotInfiniBand("UDP destination port is not 4791"));
            }
        }
        let ip = Ipv4Repr::parse(&p)?;
        if ip.protocol != PROTOCOL_UDP {
            return Err(Error::NotInfiniBand("IP protocol is not UDP"));
        }
        if ip.more_frags || ip.frag_offset != 0 {
            return Err(Error::Malformed {
                header: "IPv4",
                reason: "fragment (RoCEv2 is never fragmented)",
            });
        }
        let end = IPV4_HEADER_LEN + usize::from(ip.payload_len);
        let (udp, transport, received) = Self::parse_udp(&packet[IPV4_HEADER_LEN..end])?;
        let h4: &[u8; 20] = packet[..IPV4_HEADER_LEN]
            .try_into()
            .map_err(|_| Error::Malformed {
                header: "IPv4",
                reason: "header length",
            })?;
        let hu: &[u8; 8] = packet[IPV4_HEADER_LEN..IPV4_HEADER_LEN + UDP_HEADER_LEN]
            .try_into()
            .map_err(|_| Error::Malformed {
                header: "UDP",
                reason: "header length",
            })?;
        let computed = icrc::icrc_rocev2_ipv4(h4, hu, transport);
        Ok(RoceFrame {
            ethernet: None,
            ip: IpRepr::V4(ip),
            udp,
            transport,
            icrc: received,
            computed_icrc: computed,
        })
    }

    #[inline]
    fn parse_ipv6(packet: &'a [u8]) -> Result<RoceFrame<'a>> {
        let p = Ipv6Packet::new_checked(packet)?;
        let ip = Ipv6Repr::parse(&p)?;
        if ip.next_header != PROTOCOL_UDP {
            return Err(Error::NotInfiniBand("IPv6 next header is not UDP"));
        }
        let end = IPV6_HEADER_LEN + usize::from(ip.payload_len);
        let (udp, transport, received) = Self::parse_udp(&packet[IPV6_HEADER_LEN..end])?;
        let h6: &[u8; 40] = packet[..IPV6_HEADER_LEN]
            .try_into()
            .map_err(|_| Error::Malformed {
                header: "IPv6",
                reason: "header length",
            })?;
        let hu: &[u8; 8] = packet[IPV6_HEADER_LEN..IPV6_HEADER_LEN + UDP_HEADER_LEN]
            .try_into()
            .map_err(|_| Error::Malformed {
                header: "UDP",
                reason: "header length",
            })?;
        let computed = icrc::icrc_rocev2_ipv6(h6, hu, transport);
        Ok(RoceFrame {
            ethernet: None,
            ip: IpRepr::V6(ip),
            udp,
            transport,
            icrc: received,
            computed_icrc: computed,
        })
    }

    /// Parses UDP within the IP payload; returns the header, transport bytes and ICRC.
    #[inline]
    fn parse_udp(ip_payload: &'a [u8]) -> Result<(UdpRepr, &'a [u8], u32)> {
        let u = UdpPacket::new_checked(ip_payload)?;
        let udp = UdpRepr::parse(&u)?;
        if udp.dst_port != ROCEV2_UDP_PORT {
            return Err(Error::NotInfiniBand("UDP destination port is not 4791"));
        }
        let datagram = &ip_payload[UDP_HEADER_LEN..UDP_HEADER_LEN + usize::from(udp.payload_len)];
        let (transport, received) = split_icrc(datagram)?;
        Ok((udp, transport, received))
    }

    /// Whether the ICRC is correct (always true under `cfg(fuzzing)`).
    pub fn icrc_ok(&self) -> bool {
        self.icrc == self.computed_icrc || cfg!(fuzzing)
    }

    /// [`Error::IcrcMismatch`] unless the ICRC is correct.
    pub fn check_icrc(&self) -> Result<()> {
        icrc::check(self.icrc, self.computed_icrc)
    }

    /// The IP fields as a sender would give them to [`emit_ip`] / [`icrc_from_parts`].
    pub fn ip_info(&self) -> IpInfo {
        match self.ip {
            IpRepr::V4(r) => IpInfo::V4(Ipv4Info {
                src: r.src_addr,
                dst: r.dst_addr,
                tos: r.tos,
                ttl: r.ttl,
                ident: r.ident,
                dont_frag: r.dont_frag,
            }),
            IpRepr::V6(r) => IpInfo::V6(Ipv6Info {
                src: r.src_addr,
                dst: r.dst_addr,
                traffic_class: r.traffic_class,
                flow_label: r.flow_label,
                hop_limit: r.hop_limit,
            }),
        }
    }

    /// The UDP ports.
    pub fn udp_info(&self) -> UdpInfo {
        UdpInfo {
            src_port: self.udp.src_port,
            dst_port: self.udp.dst_port,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real RC ACKNOWLEDGE frame from the bundled rxe captures (pair-write_bw, frame 25).
    const ACK_FRAME: [u8; 62] = [
        0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x52, 0x54, 0x00, 0x99, 0x00, 0x01, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x30, 0x13, 0xf6, 0x40, 0x00, 0x40, 0x11, 0x11, 0xff, 0x0a, 0x63, 0x00, 0x01,
        0x0a, 0x63, 0x00, 0x02, 0xc1, 0x56, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00, 0xff,
        0xff, 0x00, 0x00, 0x00, 0x13, 0x00, 0xa4, 0x2f, 0xf1, 0x1f, 0x00, 0x00, 0x01, 0xbd, 0xe7,
        0x0e, 0x8e,
    ];

    #[test]
    fn source_port_matches_linux_for_capture_qps() {
        // The write_bw capture: QPs 0x12 and 0x13, both directions use port 49494 (0xC156).
        assert_eq!(udp_source_port(0x13, 0x12), 0xC156);
        assert_eq!(udp_source_port(0x12, 0x13), 0xC156);
        // Large QPNs exercise the 20/40-bit folds.
        assert_eq!(udp_source_port(0, 5), 0xC000);
        let p = udp_source_port(0xFF_FFFF, 0xFF_FFFE);
        assert!(p >= 0xC000);
        // The send_bw_ud capture: UD QP 0x16 sends from port 55758.
        assert_eq!(udp_source_port_ud(0x16), 55758);
    }

    #[test]
    fn parses_real_ack_frame_with_valid_icrc() {
        let f = RoceFrame::parse_ethernet(&ACK_FRAME).unwrap();
        assert!(
            f.icrc_ok(),
            "icrc {:#x} computed {:#x}",
            f.icrc,
            f.computed_icrc
        );
        assert_eq!(f.icrc, 0x8e0e_e7bd);
        assert_eq!(f.transport.len(), 16);
        assert_eq!(f.transport[0], 0x11);
        assert_eq!(f.udp.src_port, 49494);
        let IpRepr::V4(ip) = f.ip else {
            panic!("IPv4 expected")
        };
        assert_eq!(ip.ident, 0x13f6);
    }

    #[test]
    fn re_emits_real_ack_frame_byte_for_byte() {
        let f = RoceFrame::parse_ethernet(&ACK_FRAME).unwrap();
        let mut out = [0u8; 62];
        let n = emit_ethernet(
            &f.ethernet.unwrap(),
            &f.ip_info(),
            &f.udp_info(),
            f.transport,
            &mut out,
        )
        .unwrap();
        assert_eq!(n, 62);
        assert_eq!(out, ACK_FRAME);
    }

    #[test]
    fn icrc_from_parts_matches_the_wire() {
        let f = RoceFrame::parse_ethernet(&ACK_FRAME).unwrap();
        assert_eq!(
            icrc_from_parts(&f.ip_info(), &f.udp_info(), f.transport),
            f.icrc
        );
    }

    #[test]
    fn unknown_ident_is_recovered_and_corruption_still_fails() {
        let f = RoceFrame::parse_ethernet(&ACK_FRAME).unwrap();
        let IpInfo::V4(mut v4) = f.ip_info() else {
            unreachable!()
        };
        let datagram = &ACK_FRAME[42..];
        v4.ident = 0;
        let (t, m) = verify_datagram(
            &IpInfo::V4(v4),
            &f.udp_info(),
            datagram,
            Ipv4IdentPolicy::Recover,
        )
        .unwrap();
        assert_eq!(t, f.transport);
        assert_eq!(m, IcrcMatch::RecoveredIpv4Ident(0x13f6));
        assert!(matches!(
            verify_datagram(
                &IpInfo::V4(v4),
                &f.udp_info(),
                datagram,
                Ipv4IdentPolicy::Exact
            ),
            Err(Error::IcrcMismatch { .. })
        ));
        assert_eq!(
            recover_ipv4_ident(&v4, &f.udp_info(), f.transport, f.icrc),
            Some(0x13f6)
        );
        // Near: expected 0x13f0, the real 0x13f6 is 6 further on.
        let near = |expected: u16, window: u16| {
            let ip = IpInfo::V4(Ipv4Info {
                ident: expected,
                ..v4
            });
            verify_datagram(
                &ip,
                &f.udp_info(),
                datagram,
                Ipv4IdentPolicy::Near { window },
            )
        };
        assert_eq!(
            near(0x13f0, 7).unwrap().1,
            IcrcMatch::RecoveredIpv4Ident(0x13f6)
        );
        assert!(near(0x13f0, 6).is_err());
        assert!(near(0x13f7, 1000).is_err());
        assert_eq!(near(0x13f6, 1).unwrap().1, IcrcMatch::Exact);
        let mut bad = datagram.to_vec();
        bad[13] ^= 0x04;
        assert!(verify_datagram(
            &IpInfo::V4(v4),
            &f.udp_info(),
            &bad,
            Ipv4IdentPolicy::Recover
        )
        .is_err());
    }

    #[test]
    fn ipv6_emit_parse_round_trip() {
        let ip = IpInfo::V6(Ipv6Info::new(
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
        ));
        let udp = UdpInfo::for_qps(17, 18);
        let transport: Vec<u8> = (0..40u8).collect();
        let mut buf = vec![0u8; ip_buffer_len(&ip, transport.len())];
        let IpInfo::V6(v6) = ip else { unreachable!() };
        assert_eq!(
            emit_ipv6(&v6, &udp, &transport, &mut buf).unwrap(),
            48 + 40 + 4
        );
        assert!(emit_ipv6(&v6, &udp, &transport, &mut buf[..91]).is_err());
        let f = RoceFrame::parse_ip(&buf).unwrap();
        assert!(f.icrc_ok());
        assert_eq!(f.ip_info(), ip);
        assert_eq!(f.udp_info(), udp);
        assert_eq!(f.transport, &transport[..]);
        let (t, m) = verify_datagram(&ip, &udp, &buf[48..], Ipv4IdentPolicy::Recover).unwrap();
        assert_eq!((t, m), (&transport[..], IcrcMatch::Exact));
        buf[60] ^= 1;
        assert!(!RoceFrame::parse_ip(&buf).unwrap().icrc_ok());
    }

    #[test]
    fn non_roce_traffic_is_not_infiniband() {
        let mut arp = ACK_FRAME;
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(matches!(
            RoceFrame::parse_ethernet(&arp),
            Err(Error::NotInfiniBand(_))
        ));
        let mut other_port = ACK_FRAME.to_vec();
        other_port[37] = 0x35;
        other_port[36] = 0x00;
        assert!(matches!(
            RoceFrame::parse_ethernet(&other_port),
            Err(Error::NotInfiniBand(_))
        ));
    }

    /// The first frame of a capture on the rxe oracle VM's bridge: an IGMPv3 report
    /// from the host, whose IPv4 header carries the Router Alert option. It is not RoCEv2,
    /// so decoders must skip it, not count it as a malformed RoCEv2 packet.
    #[test]
    fn ipv4_with_options_that_is_not_roce_is_not_infiniband() {
        const IGMP: [u8; 54] = [
            0x01, 0x00, 0x5e, 0x00, 0x00, 0x16, 0x8a, 0x27, 0x5e, 0xf4, 0x9d, 0xeb, 0x08, 0x00,
            0x46, 0xc0, 0x00, 0x28, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0xf8, 0x98, 0x0a, 0x63,
            0x00, 0xfe, 0xe0, 0x00, 0x00, 0x16, 0x94, 0x04, 0x00, 0x00, 0x22, 0x00, 0xf9, 0x93,
            0x00, 0x00, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0xe0, 0x00, 0x00, 0x6a,
        ];
        assert!(matches!(
            RoceFrame::parse_ethernet(&IGMP),
            Err(Error::NotInfiniBand(_))
        ));
        // The same header as UDP to another port is not RoCEv2 either ...
        let mut udp = IGMP;
        udp[14 + 9] = PROTOCOL_UDP;
        udp[14 + 24..14 + 28].copy_from_slice(&[0x13, 0x88, 0x00, 0x35]);
        assert!(matches!(
            RoceFrame::parse_ethernet(&udp),
            Err(Error::NotInfiniBand(_))
        ));
        // ... but UDP to 4791 with options is a malformed RoCEv2 packet.
        udp[14 + 26..14 + 28].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
        assert!(matches!(
            RoceFrame::parse_ethernet(&udp),
            Err(Error::Malformed { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn emit_parse_identity(v6: bool, src: [u8; 16], dst: [u8; 16], tos: u8, ttl: u8,
                               ident: u16, df: bool, flow in 0u32..0x10_0000, sport: u16,
                               words in 3usize..40, seed: u8, vlan: Option<u16>) {
            let ip = if v6 {
                IpInfo::V6(Ipv6Info { src: src.into(), dst: dst.into(), traffic_class: tos,
                                      flow_label: flow, hop_limit: ttl })
            } else {
                let (s4, d4) = ([src[0], src[1], src[2], src[3]], [dst[0], dst[1], dst[2], dst[3]]);
                IpInfo::V4(Ipv4Info { src: s4.into(), dst: d4.into(), tos, ttl, ident, dont_frag: df })
            };
            let udp = UdpInfo { src_port: sport, dst_port: ROCEV2_UDP_PORT };
            let transport: Vec<u8> = (0..words * 4).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
            let eth = EthernetRepr {
                dst_addr: [2, 0, 0, 0, 0, 2],
                src_addr: [2, 0, 0, 0, 0, 1],
                vlan: vlan.map(|v| crate::ethernet::VlanTag { pcp: (v >> 13) as u8, dei: false, vid: v & 0xFFF }),
                ethertype: 0,
            };
            let mut buf = vec![0u8; 18 + ip_buffer_len(&ip, transport.len())];
            let n = emit_ethernet(&eth, &ip, &udp, &transport, &mut buf).unwrap();
            let f = RoceFrame::parse_ethernet(&buf[..n]).unwrap();
            proptest::prop_assert!(f.icrc_ok());
            proptest::prop_assert_eq!(f.ip_info(), ip);
            proptest::prop_assert_eq!(f.udp_info(), udp);
            proptest::prop_assert_eq!(f.transport, &transport[..]);
            proptest::prop_assert_eq!(f.ethernet.unwrap().vlan, eth.vlan);
            proptest::prop_assert_eq!(icrc_from_parts(&ip, &udp, &transport), f.icrc);
        }

        #[test]
        fn mutated_real_frames_never_panic(flips in proptest::collection::vec((0usize..62, proptest::prelude::any::<u8>()), 1..6),
                                           cut in 0usize..63) {
            let mut b = ACK_FRAME.to_vec();
            for (at, x) in flips {
                b[at] ^= x;
            }
            b.truncate(cut.max(1));
            if let Ok(f) = RoceFrame::parse_ethernet(&b) {
                let _ = f.check_icrc();
                let _ = f.ip_info();
            }
            let _ = RoceFrame::parse_ip(&b);
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120)) {
            let _ = RoceFrame::parse_ethernet(&b);
            let _ = RoceFrame::parse_ip(&b);
            let ip = IpInfo::V4(Ipv4Info::new(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST));
            let udp = UdpInfo::for_qps(1, 2);
            let _ = verify_datagram(&ip, &udp, &b, Ipv4IdentPolicy::Recover);
            let _ = verify_datagram(&ip, &udp, &b, Ipv4IdentPolicy::Near { window: 100 });
        }
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        for n in 0..ACK_FRAME.len() {
            assert!(
                RoceFrame::parse_ethernet(&ACK_FRAME[..n]).is_err(),
                "len {n}"
            );
        }
    }
}
