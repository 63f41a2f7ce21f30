//! rdma_cm multicast on RoCE, as the kernel's cma.c does it (`cma_iboe_join_multicast`,
//! Linux 6.1) and librdmacm around it (`rdma_join_multicast2`, `ucma_process_join`,
//! `rdma_leave_multicast`): there is no SA on RoCE, so a join needs no MAD. The group's
//! MGID is the IP multicast address (IPv4-mapped for IPv4: RoCEv2 GIDs), the join event
//! `RDMA_CM_EVENT_MULTICAST_JOIN` carries in `param.ud` an address vector to the MGID (hop
//! limit 1, traffic class 0), the multicast QPN 0xFFFFFF and, for RDMA_PS_UDP, rdma_cm's
//! Q_Key 0x01234567, and the id's QP is attached to the group unless the join was
//! send-only. Leaving detaches the QP again.

use std::net::{IpAddr, SocketAddr};

use super::abi::RDMA_UDP_QKEY;
use crate::abi::{ibv_ah_attr, ibv_gid, ibv_global_route};

/// A join an id made: what `rdma_leave_multicast` finds it by and must undo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The address the application joined (its sockaddr, compared on leave).
    pub addr: SocketAddr,
    /// The group's MGID.
    pub mgid: [u8; 16],
    /// The QP attached to the group for this join (none for a send-only join or an id
    /// without a QP).
    pub attached_qpn: Option<u32>,
}

/// The MGID of multicast address `ip` on RoCEv2 (`cma_iboe_set_mgid` with the RoCEv2 GID
/// type): an IPv6 address as it is, an IPv4 one IPv4-mapped. `None` for an address that is
/// not multicast (the kernel refuses the zero address with EINVAL, and `ib_attach_mcast`
/// any non-multicast GID).
pub fn mgid_of(ip: IpAddr) -> Option<[u8; 16]> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if !ip.is_multicast() {
        return None;
    }
    Some(match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    })
}

/// The Q_Key of a join in port space `ps` (`cma_iboe_join_multicast`: RDMA_UDP_QKEY for
/// RDMA_PS_UDP; zero otherwise, the record is zero-initialised).
pub fn qkey_for(ps: softib_cm::rdma_cm::PortSpace) -> u32 {
    if ps == softib_cm::rdma_cm::PortSpace::Udp {
        RDMA_UDP_QKEY
    } else {
        0
    }
}

/// The address vector of the join event (`ib_init_ah_from_mcmember` on the RoCE member
/// record: DGID = MGID, hop limit 1, traffic class 0, no LID).
pub fn group_ah(mgid: [u8; 16]) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: mgid },
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 1,
            traffic_class: 0,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_cm::rdma_cm::PortSpace;

    #[test]
    fn ipv4_groups_are_ipv4_mapped_and_unicast_is_refused() {
        let g = mgid_of("239.1.2.3".parse().unwrap()).unwrap();
        assert_eq!(g, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3]);
        assert_eq!(mgid_of("::ffff:239.1.2.3".parse().unwrap()), Some(g));
        let v6: IpAddr = "ff0e::1234".parse().unwrap();
        assert_eq!(mgid_of(v6).unwrap()[..2], [0xff, 0x0e]);
        assert_eq!(mgid_of("10.0.0.1".parse().unwrap()), None);
        assert_eq!(mgid_of("0.0.0.0".parse().unwrap()), None);
    }

    #[test]
    fn the_join_event_names_the_group_with_rdma_cms_qkey() {
        assert_eq!(qkey_for(PortSpace::Udp), 0x0123_4567);
        assert_eq!(qkey_for(PortSpace::Ipoib), 0);
        let ah = group_ah([7; 16]);
        assert_eq!(
            (ah.grh.dgid.raw, ah.grh.hop_limit, ah.is_global, ah.dlid),
            ([7; 16], 1, 1, 0)
        );
    }
}
