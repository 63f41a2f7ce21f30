//! RoCEv2 on a UDP socket: what the driver adds to the engine's transport packets before
//! they leave (the ICRC) and checks on datagrams that arrive (the ICRC, with the IPv4
//! Identification the socket hides), plus the GID <-> IP address mapping (IBA Annex A17.4.4:
//! an IPv4 address is the GID `::ffff:a.b.c.d`) and the path MTU rule of Linux rxe.
//!
//! The byte work is softib-wire's (`roce::icrc_from_parts`, `roce::verify_datagram`); this
//! module only knows which header fields a socket-based runtime has and which it must assume.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use softib_wire::roce::{
    icrc_from_parts, verify_datagram, IcrcMatch, IpInfo, Ipv4IdentPolicy, Ipv4Info, Ipv6Info,
    UdpInfo,
};

use crate::socket::RxDatagram;

/// The RoCEv2 ICRC's length at the end of the UDP payload.
pub const ICRC_LEN: usize = 4;

/// Bytes Linux rxe reserves for headers when it derives the IB MTU from the interface MTU
/// (`RXE_MAX_HDR_LENGTH`): IP, UDP, BTH, the largest extension headers and the ICRC.
pub const RXE_HEADER_ALLOWANCE: u32 = 80;

/// The GID of an IP address: an IPv6 address as is, an IPv4 address IPv4-mapped.
pub fn gid_from_ip(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address a GID names: IPv4 for an IPv4-mapped GID, IPv6 otherwise.
pub fn ip_from_gid(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The IB path MTU Linux rxe chooses for an interface MTU: the largest of 256, 512, 1024,
/// 2048, 4096 not above `interface_mtu - 80`; `None` if even 256 does not fit.
pub fn ib_mtu_for_interface(interface_mtu: u32) -> Option<u32> {
    let room = interface_mtu.checked_sub(RXE_HEADER_ALLOWANCE)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| m <= room)
}

/// Whether `ip`, another address than the device's, is an address configured on the
/// interface the device at `device` is on: the host's own address on the device's netdev,
/// which the kernel's rdma_cm resolves to that device (rdma_translate_ip finds the netdev,
/// and a loopback address resolves to the local device, cma_resolve_loopback). A softib
/// device at 127.77.0.1 is on `lo`, so 127.0.0.1 (configured on `lo`) names it, while
/// 127.0.0.3 (routed to `lo` but configured nowhere) is another softib host.
pub fn is_host_address_on_device_interface(device: IpAddr, ip: IpAddr) -> bool {
    if ip == device || ip.is_unspecified() {
        return false;
    }
    let Ok(Some(name)) = crate::sys::interface_of(ip) else {
        return false;
    };
    interface_mtu(device).is_ok_and(|(device_if, _)| device_if == name)
}

/// The interface holding `ip` and its MTU (from `/sys/class/net/NAME/mtu`), as rxe reads
/// its netdev's MTU.
pub fn interface_mtu(ip: IpAddr) -> std::io::Result<(String, u32)> {
    // Linux routes all of 127.0.0.0/8 to the loopback interface, which holds only
    // 127.0.0.1: any loopback address is on the interface holding the canonical one.
    let holder = match ip {
        IpAddr::V4(v4) if v4.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        other => other,
    };
    let name = crate::sys::interface_of(holder)?.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no network interface has the address {ip}"),
        )
    })?;
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))?;
    let mtu = text.trim().parse().map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("MTU of {name} is {text:?}"),
        )
    })?;
    Ok((name, mtu))
}

/// The IP header information of a datagram this device sends to `dest`.
fn tx_ip(local: IpAddr, dest: IpAddr, tos: u8, ident: u16) -> Option<IpInfo> {
    match (local, dest) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => Some(IpInfo::V4(Ipv4Info {
            tos,
            ident,
            ..Ipv4Info::new(src, dst)
        })),
        (IpAddr::V6(src), IpAddr::V6(dst)) => Some(IpInfo::V6(Ipv6Info {
            traffic_class: tos,
            ..Ipv6Info::new(src, dst)
        })),
        _ => None,
    }
}

/// The IP and UDP header information of a datagram sent from `local` to `dest`, as the
/// receiver (and the pcap tap) will see it.
pub fn tx_headers(
    local: SocketAddr,
    dest: SocketAddr,
    tos: u8,
    ident: u16,
) -> Option<(IpInfo, UdpInfo)> {
    let ip = tx_ip(local.ip(), dest.ip(), tos, ident)?;
    Some((
        ip,
        UdpInfo {
            src_port: local.port(),
            dst_port: dest.port(),
        },
    ))
}

/// Appends the ICRC to the transport packet in `slot[..transport_len]` (BTH through pad)
/// for a datagram from `local` to `dest` and returns the datagram's length, or `None` if
/// the slot has no room or the address families differ. `ident` is the IPv4 Identification
/// the kernel will write ([`crate::socket::IdentOracle`]).
pub fn seal(
    local: SocketAddr,
    dest: SocketAddr,
    tos: u8,
    ident: u16,
    slot: &mut [u8],
    transport_len: usize,
) -> Option<usize> {
    let total = transport_len + ICRC_LEN;
    if slot.len() < total {
        return None;
    }
    let (ip, udp) = tx_headers(local, dest, tos, ident)?;
    let icrc = icrc_from_parts(&ip, &udp, &slot[..transport_len]);
    slot[transport_len..total].copy_from_slice(&icrc.to_le_bytes());
    Some(total)
}

/// How the receive path treats the IPv4 Identification the ICRC covers but the socket hides
/// (docs/design/net.md, "IPv4 Identification and the ICRC").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ipv4IdPolicy {
    /// Accept any Identification that makes the ICRC correct (needed for Linux rxe and
    /// other senders with unpredictable IDs); random corruption passes with about 2^-16.
    #[default]
    Recover,
    /// Accept only the Identifications softib senders produce (0..63, a GSO segment index);
    /// random corruption passes with about 2^-26.
    SoftibPeers,
    /// Accept only Identification 0 (softib senders without GSO): the full 2^-32.
    Zero,
}

/// Why [`RxCheck::check`] dropped a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxDrop {
    /// No acceptable IP header makes the ICRC correct.
    Icrc,
    /// Too short to hold a BTH and an ICRC.
    Runt,
    /// From the other address family than the device's.
    WrongFamily,
}

/// Receive-side drop and recovery counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxCounters {
    /// Datagrams accepted.
    pub accepted: u64,
    /// Datagrams dropped because no acceptable IP header makes their ICRC correct.
    pub icrc_errors: u64,
    /// Datagrams too short to hold a BTH and an ICRC.
    pub runts: u64,
    /// Datagrams from the other address family than the device's (dropped).
    pub wrong_family: u64,
    /// IPv4 datagrams accepted with a recovered Identification other than 0.
    pub ipv4_ident_recovered: u64,
    /// Datagrams that arrived with ECN Congestion Experienced.
    pub ecn_ce: u64,
}

/// One accepted RoCEv2 datagram.
#[derive(Clone, Copy, Debug)]
pub struct Received<'a> {
    /// The transport packet, BTH through pad, without the ICRC.
    pub transport: &'a [u8],
    /// The whole UDP payload as received (for the pcap tap).
    pub datagram: &'a [u8],
    /// The sender's GID (its IP address, IPv4-mapped for IPv4).
    pub sgid: [u8; 16],
    /// Our GID.
    pub dgid: [u8; 16],
    /// The TOS / traffic class byte (0 if the kernel did not report it).
    pub tos: u8,
    /// ECN Congestion Experienced.
    pub ecn_ce: bool,
    /// The IP and UDP header information that made the ICRC correct.
    pub ip: IpInfo,
    /// The UDP ports.
    pub udp: UdpInfo,
}

/// Checks received datagrams for one local address.
#[derive(Clone, Debug)]
pub struct RxCheck {
    local: SocketAddr,
    local_gid: [u8; 16],
    policy: Ipv4IdPolicy,
    counters: RxCounters,
}

impl RxCheck {
    /// A checker for datagrams received on `local` under `policy`.
    pub fn new(local: SocketAddr, policy: Ipv4IdPolicy) -> RxCheck {
        RxCheck {
            local,
            local_gid: gid_from_ip(local.ip()),
            policy,
            counters: RxCounters::default(),
        }
    }

    /// What has been counted so far.
    pub fn counters(&self) -> RxCounters {
        self.counters
    }

    /// Verifies one datagram's ICRC; the reason (also counted) if it must be dropped.
    pub fn check<'a>(&mut self, d: &RxDatagram<'a>) -> Result<Received<'a>, RxDrop> {
        let tos = d.tos.unwrap_or(0);
        // The first guess at the Identification: a datagram's position in its GRO slot is
        // its index in the sender's GSO group when the group arrived whole, which is the
        // Identification Linux gave it (docs/design/net.md); a right guess is checked with
        // the full ICRC strength and spares solving for it.
        let ident = match self.policy {
            Ipv4IdPolicy::Zero => 0,
            Ipv4IdPolicy::Recover | Ipv4IdPolicy::SoftibPeers => d.gro_index,
        };
        let ip = match (d.source.ip(), self.local.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpInfo::V4(Ipv4Info {
                tos,
                ident,
                ..Ipv4Info::new(src, dst)
            }),
            (IpAddr::V6(src), IpAddr::V6(dst)) => IpInfo::V6(Ipv6Info {
                traffic_class: tos,
                ..Ipv6Info::new(src, dst)
            }),
            (IpAddr::V6(src), IpAddr::V4(dst)) if src.to_ipv4_mapped().is_some() => {
                IpInfo::V4(Ipv4Info {
                    tos,
                    ident,
                    ..Ipv4Info::new(src.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED), dst)
                })
            }
            _ => {
                self.counters.wrong_family += 1;
                return Err(RxDrop::WrongFamily);
            }
        };
        let udp = UdpInfo {
            src_port: d.source.port(),
            dst_port: self.local.port(),
        };
        if d.payload.len() < softib_wire::BTH_LEN + ICRC_LEN {
            self.counters.runts += 1;
            return Err(RxDrop::Runt);
        }
        let wire_policy = match self.policy {
            Ipv4IdPolicy::Zero => Ipv4IdentPolicy::Exact,
            Ipv4IdPolicy::Recover | Ipv4IdPolicy::SoftibPeers => Ipv4IdentPolicy::Recover,
        };
        let (transport, how) = match verify_datagram(&ip, &udp, d.payload, wire_policy) {
            Ok(ok) => ok,
            Err(_) => {
                self.counters.icrc_errors += 1;
                return Err(RxDrop::Icrc);
            }
        };
        let ip = match (how, ip) {
            (IcrcMatch::Exact, IpInfo::V4(v4)) if v4.ident != 0 => {
                self.counters.ipv4_ident_recovered += 1;
                IpInfo::V4(v4)
            }
            (IcrcMatch::Exact, ip) => ip,
            (IcrcMatch::RecoveredIpv4Ident(id), IpInfo::V4(v4)) => {
                if self.policy == Ipv4IdPolicy::SoftibPeers && id >= 64 {
                    self.counters.icrc_errors += 1;
                    return Err(RxDrop::Icrc);
                }
                self.counters.ipv4_ident_recovered += 1;
                IpInfo::V4(Ipv4Info { ident: id, ..v4 })
            }
            (IcrcMatch::RecoveredIpv4Ident(_), ip) => ip,
        };
        let ecn_ce = d.ecn_ce();
        self.counters.accepted += 1;
        self.counters.ecn_ce += u64::from(ecn_ce);
        Ok(Received {
            transport,
            datagram: d.payload,
            sgid: gid_from_ip(ip.src()),
            dgid: self.local_gid,
            tos,
            ecn_ce,
            ip,
            udp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_mtu_follows_rxe() {
        assert_eq!(ib_mtu_for_interface(1500), Some(1024));
        assert_eq!(ib_mtu_for_interface(4200), Some(4096));
        assert_eq!(ib_mtu_for_interface(9000), Some(4096));
        assert_eq!(ib_mtu_for_interface(2128), Some(2048));
        assert_eq!(ib_mtu_for_interface(2127), Some(1024));
        assert_eq!(ib_mtu_for_interface(335), None);
        assert_eq!(ib_mtu_for_interface(65536), Some(4096));
    }

    #[test]
    fn loopback_interface_and_mtu_are_found() {
        let (name, mtu) = interface_mtu("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(name, "lo");
        assert!(mtu >= 1500, "{mtu}");
        assert!(interface_mtu("192.0.2.77".parse().unwrap()).is_err());
    }

    #[test]
    fn gids_map_to_addresses_both_ways() {
        let v4: IpAddr = "10.99.0.2".parse().unwrap();
        let g = gid_from_ip(v4);
        assert_eq!(g, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 2]);
        assert_eq!(ip_from_gid(g), v4);
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(ip_from_gid(gid_from_ip(v6)), v6);
    }
}
