//! Congestion control on RoCEv2: the driver's half of the loop the engine closes (see
//! docs/design/net.md, "Congestion control").
//!
//! The engine (`softib_transport::cc`) answers ECN CE marks with CNPs and paces a QP with
//! DCQCN or the IBA CCA when CNPs come back. The driver supplies what only it knows: the
//! CE bit of each received datagram (`RxMeta::ecn_ce`, from `IP_RECVTOS` /
//! `IPV6_RECVTCLASS`), the ECN-capable codepoint on the data it sends, the line rate and
//! the bytes each packet costs on the wire beyond the transport packet. [`RoceCc`] is how a
//! user asks for it; [`parse_dcqcn`] reads DCQCN settings by the names ConnectX NICs give
//! them.

use std::path::Path;

use softib_transport::cc::{CcAlgorithm, CcConfig, DcqcnConfig, IbaCcConfig};

/// Ethernet's cost per frame beyond the IP packet on the wire: header 14, FCS 4, preamble
/// and start delimiter 8, minimum inter-frame gap 12 (IEEE 802.3). A line rate counts all
/// of them, so DCQCN's rate and the IBA packet time must too.
pub const ETHERNET_FRAMING: u32 = 14 + 4 + 8 + 12;
/// UDP header.
const UDP_HEADER: u32 = 8;
/// The RoCEv2 ICRC the driver appends (IBA Annex A17.3.3).
const ICRC: u32 = 4;
/// Line rate assumed when the interface does not report one (loopback, some virtual
/// devices): the engine's default, 100 Gb/s.
pub const DEFAULT_LINK_RATE_MBPS: u64 = 100_000;
/// `ARPHRD_ETHER` in `/sys/class/net/IF/type`.
const ARPHRD_ETHER: u32 = 1;

/// Congestion control of a RoCEv2 device. The default is off: data is not ECN-capable,
/// CE marks are counted but not answered, CNPs are counted but change nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoceCc {
    /// The reaction point: what the sender does with CNPs (DCQCN is what RoCEv2 NICs run;
    /// the IBA CCA works too). While it is not `None`, data packets leave ECT(0), so that
    /// switches mark them instead of dropping them (RFC 3168: only a sender that reacts may
    /// claim ECN capability).
    pub algorithm: CcAlgorithm,
    /// The notification point: answer CE-marked packets with CNPs (ConnectX `roce_np`).
    pub notify: bool,
    /// Minimum microseconds between two CNPs of one QP (ConnectX `min_time_between_cnps`).
    pub min_time_between_cnps: u32,
    /// The line rate in Mb/s: DCQCN's starting and highest rate, the basis of IBA packet
    /// times. `None` reads the interface's speed (`/sys/class/net/IF/speed`), or assumes
    /// [`DEFAULT_LINK_RATE_MBPS`] where the interface reports none.
    pub link_rate_mbps: Option<u64>,
}

impl Default for RoceCc {
    fn default() -> Self {
        RoceCc {
            algorithm: CcAlgorithm::None,
            notify: false,
            min_time_between_cnps: CcConfig::default().min_time_between_cnps,
            link_rate_mbps: None,
        }
    }
}

impl RoceCc {
    /// DCQCN at both ends: react to CNPs with `config`, answer CE marks with CNPs.
    pub fn dcqcn(config: DcqcnConfig) -> RoceCc {
        RoceCc {
            algorithm: CcAlgorithm::Dcqcn(config),
            notify: true,
            ..RoceCc::default()
        }
    }

    /// The IBA CCA at the source (its CCT and per-SL settings), CNPs at the destination.
    pub fn iba(config: IbaCcConfig) -> RoceCc {
        RoceCc {
            algorithm: CcAlgorithm::Iba(config),
            notify: true,
            ..RoceCc::default()
        }
    }

    /// Whether the sender reacts to CNPs, and so marks its data ECN-capable.
    pub fn reacts(&self) -> bool {
        !matches!(self.algorithm, CcAlgorithm::None)
    }

    /// The engine's configuration for a link of `link_rate_mbps` whose packets carry
    /// `wire_overhead` bytes beyond the transport packet.
    pub fn engine_config(&self, link_rate_mbps: u64, wire_overhead: u32) -> CcConfig {
        CcConfig {
            algorithm: self.algorithm.clone(),
            notify: self.notify,
            min_time_between_cnps: self.min_time_between_cnps,
            link_rate_mbps,
            wire_overhead,
        }
    }
}

/// Bytes a RoCEv2 packet occupies on the wire beyond the engine's transport packet (BTH
/// onwards, without ICRC): the IP header (IPv4 20, IPv6 40), UDP 8, ICRC 4, and on an
/// Ethernet link [`ETHERNET_FRAMING`] (no VLAN tag). IPv4: 70 on Ethernet, 32 on loopback.
pub fn wire_overhead(ipv6: bool, ethernet: bool) -> u32 {
    let ip = if ipv6 { 40 } else { 20 };
    ip + UDP_HEADER + ICRC + if ethernet { ETHERNET_FRAMING } else { 0 }
}

/// What the kernel tells about an interface's link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// The link speed in Mb/s, if the interface reports one (`speed`; loopback does not,
    /// a link that is down reports -1).
    pub speed_mbps: Option<u64>,
    /// The interface frames packets as Ethernet (`type` is `ARPHRD_ETHER`); veth and
    /// bridges count, loopback does not.
    pub ethernet: bool,
}

/// Reads `speed` and `type` of interface `name` from `sysfs` (the directory
/// `/sys/class/net` on Linux). Unreadable values count as unknown / not Ethernet.
pub fn link_info(sysfs: &Path, name: &str) -> LinkInfo {
    let read = |file: &str| -> Option<i64> {
        std::fs::read_to_string(sysfs.join(name).join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    LinkInfo {
        speed_mbps: read("speed").filter(|&s| s > 0).map(|s| s as u64),
        ethernet: read("type") == Some(i64::from(ARPHRD_ETHER)),
    }
}

/// A DCQCN setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DcqcnSpecError {
    /// An item is not `key=value`.
    #[error("`{0}` is not key=value (e.g. rpg_ai_rate=5,rpg_time_reset=300)")]
    NotKeyValue(String),
    /// An unknown key.
    #[error("unknown DCQCN parameter `{0}`; known: {KEYS}")]
    UnknownKey(String),
    /// A value that is not a number of the field's size.
    #[error("{key} = `{value}`: not a number in 0..={max}")]
    BadNumber {
        /// The key.
        key: &'static str,
        /// The value given.
        value: String,
        /// The largest accepted value.
        max: u64,
    },
}

/// Every key [`parse_dcqcn`] accepts, as ConnectX names them (mlx5 `roce_rp`).
pub const KEYS: &str = "rpg_time_reset (us), rpg_byte_reset (bytes), rpg_threshold, \
rpg_ai_rate (Mb/s), rpg_hai_rate (Mb/s), rpg_gd (log2), rpg_min_rate (Mb/s), \
dce_tcp_g (/1024), dce_tcp_rtt (us), initial_alpha_value (/1024), \
rate_reduce_monitor_period (us), rate_to_set_on_first_cnp (Mb/s)";

/// Applies `key=value,key=value` settings to `base`, keys spelled as ConnectX spells them
/// (see [`KEYS`]); ranges are checked later by `DcqcnConfig::validate` against the link
/// rate. An empty spec changes nothing.
pub fn parse_dcqcn(spec: &str, base: DcqcnConfig) -> Result<DcqcnConfig, DcqcnSpecError> {
    let mut c = base;
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| DcqcnSpecError::NotKeyValue(item.to_string()))?;
        let (key, value) = (key.trim(), value.trim());
        macro_rules! set {
            ($($name:ident),*) => {
                match key {
                    $(stringify!($name) => {
                        c.$name = number(stringify!($name), value)?;
                    })*
                    _ => return Err(DcqcnSpecError::UnknownKey(key.to_string())),
                }
            };
        }
        set!(
            rpg_time_reset,
            rpg_byte_reset,
            rpg_threshold,
            rpg_ai_rate,
            rpg_hai_rate,
            rpg_gd,
            rpg_min_rate,
            dce_tcp_g,
            dce_tcp_rtt,
            initial_alpha_value,
            rate_reduce_monitor_period,
            rate_to_set_on_first_cnp
        );
    }
    Ok(c)
}

/// Parses `value` as an unsigned number that fits `T` (an unsigned integer type).
fn number<T: TryFrom<u64>>(key: &'static str, value: &str) -> Result<T, DcqcnSpecError> {
    let bits = 8 * std::mem::size_of::<T>() as u32;
    value
        .parse::<u64>()
        .ok()
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| DcqcnSpecError::BadNumber {
            key,
            value: value.to_string(),
            max: u64::MAX >> (64 - bits),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dcqcn_spec_sets_the_named_fields_and_names_bad_input() {
        let c = parse_dcqcn(
            "rpg_ai_rate=5, rpg_time_reset=300,rpg_gd=2,dce_tcp_g=8",
            DcqcnConfig::default(),
        )
        .unwrap();
        assert_eq!(c.rpg_ai_rate, 5);
        assert_eq!(c.rpg_time_reset, 300);
        assert_eq!(c.rpg_gd, 2);
        assert_eq!(c.dce_tcp_g, 8);
        assert_eq!(c.rpg_threshold, DcqcnConfig::default().rpg_threshold);
        assert_eq!(
            parse_dcqcn("", DcqcnConfig::default()).unwrap(),
            DcqcnConfig::default()
        );
        assert_eq!(
            parse_dcqcn("rpg_ai_rate", DcqcnConfig::default()),
            Err(DcqcnSpecError::NotKeyValue("rpg_ai_rate".into()))
        );
        let e = parse_dcqcn("rpg_ai_rat=5", DcqcnConfig::default()).unwrap_err();
        assert!(e.to_string().contains("rpg_ai_rat") && e.to_string().contains("rpg_ai_rate"));
        assert_eq!(
            parse_dcqcn("rpg_gd=300", DcqcnConfig::default()),
            Err(DcqcnSpecError::BadNumber {
                key: "rpg_gd",
                value: "300".into(),
                max: 255
            })
        );
        assert!(parse_dcqcn("dce_tcp_g=-1", DcqcnConfig::default()).is_err());
    }

    #[test]
    fn wire_overhead_counts_ip_udp_icrc_and_ethernet_framing() {
        assert_eq!(wire_overhead(false, true), 20 + 8 + 4 + 38);
        assert_eq!(wire_overhead(true, true), 40 + 8 + 4 + 38);
        assert_eq!(wire_overhead(false, false), 32);
    }

    #[test]
    fn link_info_reads_speed_and_type_and_treats_the_unreadable_as_unknown() {
        let dir = std::env::temp_dir().join(format!("softib-cc-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, speed, ty) in [("eth9", "25000\n", "1\n"), ("down0", "-1\n", "1\n")] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("speed"), speed).unwrap();
            std::fs::write(dir.join(name).join("type"), ty).unwrap();
        }
        std::fs::create_dir_all(dir.join("lo")).unwrap();
        std::fs::write(dir.join("lo").join("type"), "772\n").unwrap();
        assert_eq!(
            link_info(&dir, "eth9"),
            LinkInfo {
                speed_mbps: Some(25_000),
                ethernet: true
            }
        );
        assert_eq!(link_info(&dir, "down0").speed_mbps, None);
        assert_eq!(
            link_info(&dir, "lo"),
            LinkInfo {
                speed_mbps: None,
                ethernet: false
            }
        );
        assert_eq!(
            link_info(&dir, "missing"),
            LinkInfo {
                speed_mbps: None,
                ethernet: false
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
