//! What Linux's rdma_cm puts into a REQ on RoCE (kernel drivers/infiniband/core/cma.c,
//! Linux 6.1, checked field by field against the rxe capture in testdata/captures): the
//! service ID from the port space and port, its IP addressing header at the start of the
//! private data, and the RoCEv2 flow label it derives from the ports.

use std::net::SocketAddr;

use softib_wire::cm::{CmaIpHeader, CMA_IP_HEADER_LEN, REQ_PRIVATE_DATA_LEN};

use crate::params::{ConnectParams, Gid};

/// rdma_cm port spaces (`enum rdma_ucm_port_space`): the high bits of the service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSpace {
    /// RDMA_PS_IPOIB (0x0002).
    Ipoib,
    /// RDMA_PS_TCP (0x0106): RC connections.
    Tcp,
    /// RDMA_PS_UDP (0x0111): UD, resolved with SIDR.
    Udp,
    /// RDMA_PS_IB (0x013F): any QP type.
    Ib,
}

impl PortSpace {
    /// The port space's number.
    pub fn value(self) -> u16 {
        match self {
            PortSpace::Ipoib => 0x0002,
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013F,
        }
    }

    /// The port space a service ID belongs to, if it is one of rdma_cm's.
    pub fn of_service_id(service_id: u64) -> Option<(PortSpace, u16)> {
        let port = service_id as u16;
        let ps = match service_id >> 16 {
            0x0002 => PortSpace::Ipoib,
            0x0106 => PortSpace::Tcp,
            0x0111 => PortSpace::Udp,
            0x013F => PortSpace::Ib,
            _ => return None,
        };
        Some((ps, port))
    }
}

/// The service ID of an rdma_cm port: `(port space << 16) | port` (kernel cma_get_service_id).
pub fn service_id(ps: PortSpace, port: u16) -> u64 {
    (u64::from(ps.value()) << 16) | u64::from(port)
}

/// Consumer private data an rdma_cm REQ has room for after the IP header (92 - 36 = 56;
/// librdmacm's rdma_connect fails with EINVAL beyond it).
pub const REQ_USER_PRIVATE_DATA_LEN: usize = REQ_PRIVATE_DATA_LEN - CMA_IP_HEADER_LEN;

/// The GRH flow label rdma_cm chooses for RoCEv2 when the source address gives none
/// (kernel cma_get_roce_udp_flow_label): `(sport * 31 + dport)` in 20 bits.
pub fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xF_FFFF
}

/// The rdma_cm private data too long for a REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "rdma_cm private data of {0} bytes does not fit a REQ (at most {REQ_USER_PRIVATE_DATA_LEN})"
)]
pub struct PrivateDataTooLong(pub usize);

/// A REQ's private data as rdma_cm builds it: the IP header for `src` -> `dst`, then the
/// consumer's bytes, zero-padded to 92.
pub fn req_private_data(
    src: SocketAddr,
    dst: SocketAddr,
    user: &[u8],
) -> Result<[u8; REQ_PRIVATE_DATA_LEN], PrivateDataTooLong> {
    if user.len() > REQ_USER_PRIVATE_DATA_LEN {
        return Err(PrivateDataTooLong(user.len()));
    }
    let mut out = [0u8; REQ_PRIVATE_DATA_LEN];
    let header = CmaIpHeader {
        src_port: src.port(),
        src_addr: src.ip(),
        dst_addr: dst.ip(),
    };
    // 92 bytes hold the 36-byte header; mixed families were ruled out by the caller's
    // addresses being one device's and its peer's, but map the error anyway.
    header
        .emit(&mut out)
        .map_err(|_| PrivateDataTooLong(user.len()))?;
    out[CMA_IP_HEADER_LEN..CMA_IP_HEADER_LEN + user.len()].copy_from_slice(user);
    Ok(out)
}

/// The GID of an IP address on RoCEv2 (IPv4-mapped for IPv4, Annex A17.4.4).
pub fn gid_of(ip: std::net::IpAddr) -> Gid {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => v6.octets(),
    }
}

/// The REQ parameters rdma_cm uses for an RC connect from `src` to `dst` (ports are the
/// rdma_cm ports) on RoCEv2: [`ConnectParams::rdma_cm_rc`] plus the service ID, flow label
/// and private data above.
pub fn rc_connect_params(
    ps: PortSpace,
    src: SocketAddr,
    dst: SocketAddr,
    qpn: u32,
    starting_psn: u32,
    user_private_data: &[u8],
) -> Result<ConnectParams, PrivateDataTooLong> {
    let mut p = ConnectParams::rdma_cm_rc(
        gid_of(dst.ip()),
        service_id(ps, dst.port()),
        qpn,
        starting_psn,
    );
    p.path.local_gid = gid_of(src.ip());
    p.path.remote_gid = gid_of(dst.ip());
    p.path.flow_label = roce_flow_label(src.port(), dst.port());
    p.private_data = req_private_data(src, dst, user_private_data)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_and_flow_labels_match_the_capture() {
        assert_eq!(service_id(PortSpace::Tcp, 18515), 0x0106_4853);
        assert_eq!(
            PortSpace::of_service_id(0x0106_4853),
            Some((PortSpace::Tcp, 18515))
        );
        assert_eq!(PortSpace::of_service_id(0x1234_0000), None);
        assert_eq!(roce_flow_label(0xb366, 18515), 0x601ad);
    }

    #[test]
    fn private_data_over_56_bytes_is_refused() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(req_private_data(a, a, &[0; 56]).is_ok());
        assert_eq!(
            req_private_data(a, a, &[0; 57]),
            Err(PrivateDataTooLong(57))
        );
    }
}
