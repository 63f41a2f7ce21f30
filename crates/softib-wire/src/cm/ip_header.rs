//! rdma_cm's IP addressing header: the first 36 bytes of the private data of every REQ and
//! SIDR_REQ Linux's rdma_cm sends for the TCP, UDP and IPoIB port spaces (kernel
//! `drivers/infiniband/core/cma.c`, `struct cma_hdr`; confirmed on the rxe capture).
//!
//! ```text
//!  byte 0     cma_version (0x00)
//!  byte 1     ip_version:4 reserved:4   (4 or 6)
//!  2..4       source port (the active side's rdma_cm port, big-endian)
//!  4..20      source address   (IPv4: in bytes 16..20, the rest zero)
//!  20..36     destination address (IPv4: in bytes 32..36)
//! ```
//!
//! The destination port is not here: it is the low 16 bits of the service ID.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::{self, check, check_emit};
use crate::{Error, Result};

/// Length of the header.
pub const CMA_IP_HEADER_LEN: usize = 36;
/// The only version rdma_cm sends (kernel `CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;

mod field {
    use crate::bytes::Field;
    pub const VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const SRC_PORT: Field = 2..4;
    pub const SRC_ADDR: usize = 4;
    pub const DST_ADDR: usize = 20;
}

/// The header as plain values. Both addresses are of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaIpHeader {
    /// The active side's rdma_cm port.
    pub src_port: u16,
    /// The active side's address.
    pub src_addr: IpAddr,
    /// The address the active side connected to.
    pub dst_addr: IpAddr,
}

fn addr(bytes16: &[u8], v4: bool) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&bytes16[..16]);
    if v4 {
        IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
    } else {
        IpAddr::V6(Ipv6Addr::from(a))
    }
}

fn put_addr(out: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            out[..12].fill(0);
            out[12..16].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => out[..16].copy_from_slice(&v6.octets()),
    }
}

impl CmaIpHeader {
    /// Parses the header at the start of REQ / SIDR_REQ private data.
    pub fn parse(private_data: &[u8]) -> Result<CmaIpHeader> {
        check("rdma_cm IP header", private_data, CMA_IP_HEADER_LEN)?;
        if private_data[field::VERSION] != CMA_VERSION {
            return Err(Error::BadVersion {
                header: "rdma_cm IP header",
                version: private_data[field::VERSION],
            });
        }
        let v4 = match private_data[field::IP_VERSION] >> 4 {
            4 => true,
            6 => false,
            _ => {
                return Err(Error::Malformed {
                    header: "rdma_cm IP header",
                    reason: "IP version is neither 4 nor 6",
                })
            }
        };
        Ok(CmaIpHeader {
            src_port: bytes::get(private_data, field::SRC_PORT) as u16,
            src_addr: addr(&private_data[field::SRC_ADDR..], v4),
            dst_addr: addr(&private_data[field::DST_ADDR..], v4),
        })
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        CMA_IP_HEADER_LEN
    }

    /// Writes the header. Refuses mixed address families.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        check_emit(out, CMA_IP_HEADER_LEN)?;
        let v = match (self.src_addr, self.dst_addr) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => {
                return Err(Error::Malformed {
                    header: "rdma_cm IP header",
                    reason: "source and destination are of different families",
                })
            }
        };
        out[field::VERSION] = CMA_VERSION;
        out[field::IP_VERSION] = v << 4;
        bytes::put(out, field::SRC_PORT, u64::from(self.src_port));
        put_addr(&mut out[field::SRC_ADDR..], self.src_addr);
        put_addr(&mut out[field::DST_ADDR..], self.dst_addr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::capture;
    use super::*;

    #[test]
    fn reads_and_writes_the_kernel_header() {
        let mad = capture::mad(capture::REQ);
        let pd = &mad[24 + 140..24 + 140 + 92];
        let h = CmaIpHeader::parse(pd).unwrap();
        assert_eq!(h.src_port, 0xb366);
        assert_eq!(h.src_addr, IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2)));
        assert_eq!(h.dst_addr, IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1)));
        let mut out = [0xAAu8; CMA_IP_HEADER_LEN];
        h.emit(&mut out).unwrap();
        assert_eq!(out[..], pd[..CMA_IP_HEADER_LEN]);
    }

    #[test]
    fn bad_versions_and_families_are_refused() {
        let mut pd = [0u8; CMA_IP_HEADER_LEN];
        assert!(CmaIpHeader::parse(&pd).is_err()); // ip version 0
        pd[1] = 0x60;
        assert!(CmaIpHeader::parse(&pd).is_ok());
        pd[0] = 1;
        assert!(CmaIpHeader::parse(&pd).is_err());
        let h = CmaIpHeader {
            src_port: 1,
            src_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            dst_addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
        };
        assert!(h.emit(&mut pd).is_err());
    }
}
