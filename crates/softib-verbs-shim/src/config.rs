//! The shim's configuration, read from the environment once per process.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `SOFTIB_ADDR` | IP address the device binds (its GID is derived from it) | `127.0.0.1` |
//! | `SOFTIB_PORT` | UDP port (RoCEv2's is 4791; peers are assumed on the same port) | `4791` |
//! | `SOFTIB_DEVICE` | device name applications see (`-d`, `--ib-dev`) | `softib0` |
//! | `SOFTIB_MTU` | largest IB path MTU (256..4096); default from the interface, as rxe | - |
//! | `SOFTIB_POLLING` | `1`: the device thread never sleeps (lowest latency, one core) | `0` |
//! | `SOFTIB_SPIN_US` | how long the device thread spins after the last datagram before it sleeps | `50` |
//! | `SOFTIB_DEBUG` | `1`: print why a verb failed on stderr | `0` |
//! | `SOFTIB_PCAP` | write every RoCEv2 datagram sent and received to this pcap file | - |
//!
//! GID table: one entry, index 0, the RoCEv2 GID of `SOFTIB_ADDR` (`::ffff:a.b.c.d` for
//! IPv4, the address itself for IPv6), so `ibv_rc_pingpong -g 0` and perftest `-x 0` work.

use std::net::{IpAddr, Ipv4Addr};

use softib_transport::Mtu;

/// Default UDP port: RoCEv2's (IBA Annex A17.2.1, IANA 4791).
pub const DEFAULT_PORT: u16 = 4791;

/// Default spin of the device thread after the last datagram: softib-net's default, which
/// covers a ping-pong round trip on loopback.
pub const DEFAULT_SPIN_US: u64 = 50;

/// What the environment asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Address to bind; the GID derives from it.
    pub addr: IpAddr,
    /// UDP port.
    pub port: u16,
    /// Device name.
    pub name: String,
    /// Forced largest path MTU.
    pub mtu: Option<Mtu>,
    /// Device thread never sleeps.
    pub polling: bool,
    /// Microseconds the device thread spins after the last datagram before sleeping.
    pub spin_us: u64,
    /// Report failed verbs on stderr.
    pub debug: bool,
    /// Capture file.
    pub pcap: Option<std::path::PathBuf>,
}

/// A variable that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("softib verbs shim: {var}={value:?} is not valid: {reason}")]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What is expected.
    pub reason: &'static str,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (the environment, or a table in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let bad = |var, value: String, reason| ConfigError { var, value, reason };
        let addr = match get("SOFTIB_ADDR") {
            Some(v) => v.trim().parse().map_err(|_| {
                bad(
                    "SOFTIB_ADDR",
                    v,
                    "expected an IPv4 or IPv6 address such as 127.0.0.2",
                )
            })?,
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let port = match get("SOFTIB_PORT") {
            Some(v) => match v.trim().parse::<u16>() {
                Ok(p) if p != 0 => p,
                _ => return Err(bad("SOFTIB_PORT", v, "expected a UDP port 1..65535")),
            },
            None => DEFAULT_PORT,
        };
        let name = get("SOFTIB_DEVICE").unwrap_or_else(|| "softib0".into());
        // The name is a directory name in the device view (/sys/class/infiniband/NAME), as
        // a kernel device name is: no '/'.
        if name.is_empty()
            || name.len() >= 64
            || !name.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
        {
            return Err(bad(
                "SOFTIB_DEVICE",
                name,
                "expected 1..63 printable characters other than '/'",
            ));
        }
        let mtu = match get("SOFTIB_MTU") {
            Some(v) => Some(
                v.trim()
                    .parse::<u32>()
                    .ok()
                    .and_then(Mtu::from_bytes)
                    .ok_or_else(|| bad("SOFTIB_MTU", v, "expected 256, 512, 1024, 2048 or 4096"))?,
            ),
            None => None,
        };
        let flag = |var: &'static str| -> Result<bool, ConfigError> {
            match get(var).as_deref().map(str::trim) {
                None | Some("") | Some("0") => Ok(false),
                Some("1") => Ok(true),
                Some(v) => Err(bad(var, v.into(), "expected 0 or 1")),
            }
        };
        let spin_us = match get("SOFTIB_SPIN_US") {
            Some(v) => match v.trim().parse::<u64>() {
                Ok(us) if us <= 1_000_000 => us,
                _ => {
                    return Err(bad(
                        "SOFTIB_SPIN_US",
                        v,
                        "expected microseconds, 0..1000000",
                    ))
                }
            },
            None => DEFAULT_SPIN_US,
        };
        Ok(Config {
            addr,
            port,
            name,
            mtu,
            polling: flag("SOFTIB_POLLING")?,
            spin_us,
            debug: flag("SOFTIB_DEBUG")?,
            pcap: get("SOFTIB_PCAP")
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from),
        })
    }

    /// GID index 0: the RoCEv2 GID of the address (IBA Annex A17.4.5.1: an IPv4 address
    /// appears as an IPv4-mapped IPv6 address).
    pub fn gid(&self) -> [u8; 16] {
        match self.addr {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        }
    }

    /// The node GUID, in wire byte order: a locally administered EUI-64 built from the
    /// address (the low 6 bytes of the GID), so two shim processes differ as their
    /// addresses do.
    pub fn node_guid(&self) -> [u8; 8] {
        let g = self.gid();
        [0x02, 0x50, g[10], g[11], g[12], g[13], g[14], g[15]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_and_gid_of_an_ipv4_address() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.addr, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(c.port, 4791);
        assert_eq!(c.name, "softib0");
        let c = cfg(&[("SOFTIB_ADDR", "127.0.0.2"), ("SOFTIB_MTU", "1024")]).unwrap();
        assert_eq!(
            c.gid(),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2]
        );
        assert_eq!(c.mtu, Some(Mtu::M1024));
        assert_eq!((c.spin_us, c.pcap.clone()), (DEFAULT_SPIN_US, None));
        let d = cfg(&[("SOFTIB_SPIN_US", "0"), ("SOFTIB_PCAP", "/tmp/x.pcap")]).unwrap();
        assert_eq!(d.spin_us, 0);
        assert_eq!(d.pcap.as_deref(), Some(std::path::Path::new("/tmp/x.pcap")));
        assert_ne!(c.node_guid(), cfg(&[]).unwrap().node_guid());
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (var, value) in [
            ("SOFTIB_ADDR", "localhost"),
            ("SOFTIB_PORT", "0"),
            ("SOFTIB_PORT", "70000"),
            ("SOFTIB_MTU", "1500"),
            ("SOFTIB_POLLING", "yes"),
            ("SOFTIB_DEVICE", ""),
            ("SOFTIB_DEVICE", "a/b"),
            ("SOFTIB_SPIN_US", "-1"),
        ] {
            let e = cfg(&[(var, value)]).unwrap_err();
            assert_eq!(e.var, var);
            assert!(e.to_string().contains(var));
        }
    }
}
