//! `struct sockaddr` <-> `SocketAddr`, as librdmacm's callers pass them.
#![allow(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Reads a `sockaddr_in`/`sockaddr_in6` (NULL or another family: `None`).
///
/// # Safety
/// `sa` is NULL or points at a socket address at least as long as its family's structure.
pub unsafe fn from_c(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: NULL or a valid sockaddr (function contract).
    let family = unsafe { sa.as_ref()? }.sa_family as i32;
    match family {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in (function contract).
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6 (function contract).
            let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

/// A `sockaddr_storage` holding `a`, and the length of its family's structure.
pub fn to_storage(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (AF_UNSPEC) value.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut st as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut st as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (st, len as libc::socklen_t)
}

/// Reads back a `sockaddr_storage` this module wrote (or the application zeroed).
pub fn from_storage(st: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: a sockaddr_storage is long enough for either family.
    unsafe { from_c((st as *const libc::sockaddr_storage).cast()) }
}

/// Whether `ip` is the wildcard address of its family.
pub fn is_any(ip: IpAddr) -> bool {
    ip.is_unspecified()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_and_v6_round_trip_through_storage() {
        for a in ["127.77.3.1:7471", "[::1]:18515", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            let (st, len) = to_storage(a);
            assert_eq!(from_storage(&st), Some(a));
            let want = if a.is_ipv4() { 16 } else { 28 };
            assert_eq!(len as usize, want);
        }
        // SAFETY: all-zero sockaddr_storage is AF_UNSPEC.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        assert_eq!(from_storage(&zero), None);
    }
}
