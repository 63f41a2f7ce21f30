//! UD multicast on the network, as Linux RoCEv2 (rxe) does it: a multicast GID is an IP
//! multicast address (IPv4-mapped for IPv4), a datagram to the group is one UDP datagram to
//! that address on the RoCEv2 port, and a device with a QP attached to the group receives
//! it on a socket bound to the group address and joined to it on the device's interface.
//! The port is RoCEv2's 4791 whatever port the device itself listens on (a device moved to
//! another port by a second process on its address still gets its groups' datagrams, and
//! senders address a group without knowing who listens where).
//!
//! Linux hands a multicast datagram to every socket bound to its destination address and
//! port whose host joined the group on the arriving interface (`__udp4_lib_mcast_deliver`),
//! so several devices on one host, in one process or several, each get their own copy:
//! every group socket is opened with SO_REUSEADDR. On loopback the sender's socket picks
//! the interface with IP_MULTICAST_IF (set on every IPv4 device socket, `socket.rs`) and
//! IP_MULTICAST_LOOP (on by default) brings the datagram back to the local receivers.
//!
//! The engine decides membership (`softib_transport::mcast`); [`Groups::sync`] makes the
//! sockets follow it. IPv6 groups are not carried yet (EOPNOTSUPP at attach).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

use crate::roce::{Ipv4IdPolicy, RxCheck};
use crate::socket::ROCE_V2_PORT;
use crate::sys::Epoll;

/// One joined group: its socket and the receive check for datagrams addressed to it (the
/// ICRC covers the destination address, which is the group's, not the device's).
#[derive(Debug)]
pub(crate) struct GroupSocket {
    /// The group's multicast GID.
    pub gid: [u8; 16],
    /// Bound to (group address, 4791), joined on the device interface.
    pub socket: UdpSocket,
    /// ICRC and format checks against (group address, port).
    pub check: RxCheck,
}

/// The groups a device has joined on the network, and the epoll set a waiting device
/// thread watches (its own socket plus every group socket).
#[derive(Debug, Default)]
pub(crate) struct Groups {
    pub joined: Vec<GroupSocket>,
    epoll: Option<Epoll>,
}

/// The IPv4 group address of an IPv4-mapped multicast GID, if it is one.
pub(crate) fn ipv4_group(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    match std::net::Ipv6Addr::from(*gid).to_ipv4_mapped() {
        Some(v4) if v4.is_multicast() => Some(v4),
        _ => None,
    }
}

/// Opens the receive socket of IPv4 group `group` for a device at `local`.
fn open_v4(group: Ipv4Addr, local: SocketAddr) -> io::Result<UdpSocket> {
    let IpAddr::V4(iface) = local.ip() else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "an IPv4 group on an IPv6 device",
        ));
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // Every device on the host that joins the group binds the same address and port.
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&SocketAddr::new(IpAddr::V4(group), ROCE_V2_PORT).into())?;
    // Joined on the device's own interface (its address names it), so a group on lo stays
    // on lo.
    s.join_multicast_v4(&group, &iface)?;
    // Only datagrams of groups this socket joined (IP_MULTICAST_ALL would also hand it
    // other groups joined elsewhere on the host that share the port).
    s.set_multicast_all_v4(false)?;
    Ok(s.into())
}

impl Groups {
    /// Makes the joined set equal `wanted` (the engine's groups): joins the missing ones,
    /// leaves the others. A group that cannot be joined is returned with the error; the
    /// rest are still brought in line.
    pub(crate) fn sync(
        &mut self,
        wanted: &[[u8; 16]],
        local: SocketAddr,
        device_fd: std::os::fd::RawFd,
        policy: Ipv4IdPolicy,
    ) -> Result<(), ([u8; 16], io::Error)> {
        let mut gone = Vec::new();
        self.joined.retain(|g| {
            let keep = wanted.contains(&g.gid);
            if !keep {
                gone.push(g.socket.as_raw_fd());
            }
            keep
        });
        if let Some(ep) = &self.epoll {
            for fd in gone {
                // The descriptor is closed right after (dropped above), which removes it
                // from the set anyway; removing first keeps the set exact.
                let _ = ep.remove(fd);
            }
        }
        let mut failed = None;
        for gid in wanted {
            if self.joined.iter().any(|g| &g.gid == gid) {
                continue;
            }
            match self.join(*gid, local, device_fd, policy) {
                Ok(()) => {}
                Err(e) => failed = failed.or(Some((*gid, e))),
            }
        }
        if self.joined.is_empty() {
            self.epoll = None;
        }
        match failed {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    fn join(
        &mut self,
        gid: [u8; 16],
        local: SocketAddr,
        device_fd: std::os::fd::RawFd,
        policy: Ipv4IdPolicy,
    ) -> io::Result<()> {
        let Some(group) = ipv4_group(&gid) else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "IPv6 multicast groups are not carried by softib-net yet",
            ));
        };
        let socket = open_v4(group, local)?;
        if self.epoll.is_none() {
            let ep = Epoll::new()?;
            ep.add(device_fd)?;
            self.epoll = Some(ep);
        }
        if let Some(ep) = &self.epoll {
            ep.add(socket.as_raw_fd())?;
        }
        let addr = SocketAddr::new(IpAddr::V4(group), ROCE_V2_PORT);
        self.joined.push(GroupSocket {
            gid,
            socket,
            check: RxCheck::new(addr, policy),
        });
        Ok(())
    }

    /// The descriptor a waiting device thread watches instead of its socket while groups
    /// are joined (readable when the socket or any group socket is).
    pub(crate) fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.epoll.as_ref().map(Epoll::raw_fd)
    }
}
