//! softib's own endpoint description: what a peer needs to connect a QP to ours and to
//! reach our exposed memory, as a serde type, and its wire form for the TCP exchange
//! (a 4-byte big-endian length, then that many bytes of JSON).

use std::net::{Ipv6Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::{malformed, OobError};

/// Largest endpoint message accepted, so a hostile or confused peer cannot make us
/// allocate without bound.
pub const MAX_ENDPOINT_MSG: usize = 64 * 1024;

/// A memory region the peer may access remotely (RDMA READ/WRITE, atomics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteRegion {
    /// Virtual address of the region's first byte, as the RETH/AtomicETH VA names it.
    pub addr: u64,
    /// Its R_Key.
    pub rkey: u32,
    /// Its length, bytes.
    pub len: u64,
}

/// Everything a peer needs to connect to one of our QPs (IBA 11.2.5: RTR needs the remote
/// QPN, starting PSN and address vector).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// The PSN our first request will carry (24 bits).
    pub psn: u32,
    /// Our port GID: the IPv6 address, or the IPv4-mapped one (`::ffff:a.b.c.d`).
    pub gid: Ipv6Addr,
    /// LID (0 on RoCE).
    #[serde(default)]
    pub lid: u16,
    /// UDP address our device receives RoCEv2 on, when it is not `gid` port 4791
    /// (e.g. several softib devices on one host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<SocketAddr>,
    /// Path MTU we use, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Q_Key, for UD QPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qkey: Option<u32>,
    /// Memory the peer may access.
    #[serde(default)]
    pub regions: Vec<RemoteRegion>,
}

impl Endpoint {
    /// The length-prefixed JSON message.
    pub fn to_message(&self) -> Vec<u8> {
        let json = serde_json_bytes(self);
        let mut out = Vec::with_capacity(4 + json.len());
        out.extend_from_slice(&(json.len() as u32).to_be_bytes());
        out.extend_from_slice(&json);
        out
    }

    /// Parses the JSON body (without the length prefix) and checks field ranges.
    pub fn from_json(body: &[u8]) -> Result<Endpoint, OobError> {
        let e: Endpoint = serde_json::from_slice(body)
            .map_err(|err| malformed("softib endpoint", format!("invalid JSON: {err}")))?;
        e.validate()?;
        Ok(e)
    }

    /// Checks the 24-bit fields and the MTU.
    pub fn validate(&self) -> Result<(), OobError> {
        if self.qpn > 0xFF_FFFF {
            return Err(malformed(
                "softib endpoint",
                format!("QPN {:#x} exceeds 24 bits", self.qpn),
            ));
        }
        if self.psn > 0xFF_FFFF {
            return Err(malformed(
                "softib endpoint",
                format!("PSN {:#x} exceeds 24 bits", self.psn),
            ));
        }
        if let Some(m) = self.mtu {
            if ![256, 512, 1024, 2048, 4096].contains(&m) {
                return Err(malformed(
                    "softib endpoint",
                    format!("MTU {m} is not 256, 512, 1024, 2048 or 4096"),
                ));
            }
        }
        Ok(())
    }

    /// The length the body of a message starting with `prefix` claims, checked against
    /// [`MAX_ENDPOINT_MSG`].
    pub fn body_len(prefix: [u8; 4]) -> Result<usize, OobError> {
        let n = u32::from_be_bytes(prefix) as usize;
        if n == 0 || n > MAX_ENDPOINT_MSG {
            return Err(malformed(
                "softib endpoint",
                format!("length prefix {n} outside 1..={MAX_ENDPOINT_MSG} (is the peer a softib endpoint exchange?)"),
            ));
        }
        Ok(n)
    }
}

fn serde_json_bytes(e: &Endpoint) -> Vec<u8> {
    // Serialising this plain struct cannot fail (no maps with non-string keys, no I/O).
    serde_json::to_vec(e).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_round_trips_through_its_message() {
        let e = Endpoint {
            qpn: 0x11,
            psn: 0x6ea77a,
            gid: "::ffff:10.99.0.1".parse().unwrap(),
            lid: 0,
            udp: None,
            mtu: Some(1024),
            qkey: None,
            regions: vec![RemoteRegion {
                addr: 0x5564_28b5_ab00,
                rkey: 0x36c,
                len: 4096,
            }],
        };
        let m = e.to_message();
        let n = Endpoint::body_len(m[..4].try_into().unwrap()).unwrap();
        assert_eq!(n, m.len() - 4);
        assert_eq!(Endpoint::from_json(&m[4..]).unwrap(), e);
    }

    #[test]
    fn bad_endpoints_are_rejected_with_reasons() {
        assert!(Endpoint::body_len([0xff, 0, 0, 0])
            .unwrap_err()
            .to_string()
            .contains("length prefix"));
        let e = Endpoint::from_json(br#"{"qpn":16777216,"psn":0,"gid":"::1"}"#).unwrap_err();
        assert!(e.to_string().contains("QPN"), "{e}");
        let e = Endpoint::from_json(br#"{"qpn":1,"psn":0,"gid":"::1","mtu":1500}"#).unwrap_err();
        assert!(e.to_string().contains("MTU 1500"), "{e}");
        assert!(Endpoint::from_json(b"{").is_err());
    }
}
