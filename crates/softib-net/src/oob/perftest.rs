//! perftest's TCP exchange (perftest 4.5, `perftest_communication.c`), message by message.
//!
//! Every exchange step is symmetric: both sides send a message of the same fixed size; the
//! client (the side given a server name) writes first and then reads, the server reads
//! first and then writes. Numbers in binary messages are big-endian. The bandwidth tools run
//! these steps, in this order (verified on `ib_write_bw`/`ib_read_bw`/`ib_send_bw` captures
//! between two Linux rxe hosts, rdma-core 44, perftest 4.5-0.18):
//!
//! | step | bytes | content |
//! |---|---|---|
//! | version | 16 | [`PerftestVersion`]: the version as a NUL-padded string (`"6.06"`) |
//! | page size | 4 | cycle buffer size, `i32` (4096) |
//! | cache line | 4 | cache line size, `i32` (64) |
//! | MTU | 2 | [`MtuMsg`]: the `ibv_mtu` enum value as decimal text + NUL (`"3"` = 1024) |
//! | keys | 108 | [`PerftestDest`] (59 without a GID), once per QP, then again as a barrier after RTR and before the test |
//! | barrier | 108 | [`PerftestDest`] again when the test ends |
//! | report | 8 each | [`BwReport`]: size, iterations (`u64`), peak, average, message rate (`f64`) |
//! | close | 108 + 5 | [`PerftestDest`] once more, then each side writes `"done"` + NUL |
//!
//! The server's report fields are uninitialised memory in half-duplex tests (seen in the
//! captures); only the client's are meaningful.

use super::{c_string, malformed, parse_hex, OobError};

/// Size of the version message (`MAX_VERSION`).
pub const VERSION_MSG_LEN: usize = 16;
/// Size of the key message with a GID (`KEY_MSG_SIZE_GID`).
pub const KEY_MSG_LEN_GID: usize = 108;
/// Size of the key message without a GID (`KEY_MSG_SIZE`), used when no GID index is set.
pub const KEY_MSG_LEN: usize = 59;
/// Size of the MTU message from version 5.31 on (`char[2]`).
pub const MTU_MSG_LEN: usize = 2;
/// The closing message: `"done"` and its NUL.
pub const PERFTEST_DONE: &[u8; 5] = b"done\0";

/// The perftest version this implementation speaks and announces (Debian 12's perftest
/// 4.5-0.18 says "6.06"; every threshold the protocol tests, 5.1 to 5.70, is below it).
pub const SOFTIB_PERFTEST_VERSION: &str = "6.06";

/// The version message: a NUL-padded decimal version string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerftestVersion {
    /// The text, e.g. "6.06".
    pub text: String,
}

impl PerftestVersion {
    /// The version softib announces.
    pub fn softib() -> PerftestVersion {
        PerftestVersion {
            text: SOFTIB_PERFTEST_VERSION.to_string(),
        }
    }

    /// The 16-byte message (text, then NULs).
    pub fn to_bytes(&self) -> [u8; VERSION_MSG_LEN] {
        let mut out = [0u8; VERSION_MSG_LEN];
        let n = self.text.len().min(VERSION_MSG_LEN - 1);
        out[..n].copy_from_slice(&self.text.as_bytes()[..n]);
        out
    }

    /// Parses a version message; the text must be a decimal number such as "6.06".
    pub fn parse(bytes: &[u8]) -> Result<PerftestVersion, OobError> {
        const WHAT: &str = "perftest version";
        if bytes.len() != VERSION_MSG_LEN {
            return Err(malformed(
                WHAT,
                format!("{} bytes instead of {VERSION_MSG_LEN}", bytes.len()),
            ));
        }
        let text = c_string(bytes);
        let ok = !text.is_empty()
            && text.iter().all(|c| c.is_ascii_digit() || *c == b'.')
            && text.iter().filter(|c| **c == b'.').count() <= 1;
        if !ok {
            return Err(malformed(
                WHAT,
                format!(
                    "{:?} is not a version number like \"6.06\"",
                    String::from_utf8_lossy(text)
                ),
            ));
        }
        Ok(PerftestVersion {
            text: String::from_utf8_lossy(text).into_owned(),
        })
    }

    /// The version as perftest compares it (`atof`), e.g. 6.06.
    pub fn number(&self) -> f64 {
        self.text.parse().unwrap_or(0.0)
    }

    /// Whether the peer sends 64-bit iteration counts in reports (from 5.33 on).
    pub fn has_u64_iters(&self) -> bool {
        self.number() >= 5.33
    }
}

/// A 4-byte big-endian integer message (page size, cache line size).
pub fn i32_msg(v: i32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Parses a 4-byte big-endian integer message.
pub fn parse_i32_msg(bytes: &[u8]) -> Result<i32, OobError> {
    let arr: [u8; 4] = bytes.try_into().map_err(|_| {
        malformed(
            "perftest system data",
            format!("{} bytes instead of 4", bytes.len()),
        )
    })?;
    Ok(i32::from_be_bytes(arr))
}

/// The MTU message: the `ibv_mtu` enum (1 = 256 ... 5 = 4096) as decimal text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtuMsg {
    /// The `ibv_mtu` enum value.
    pub ibv_mtu: u8,
}

impl MtuMsg {
    /// The message for an MTU in bytes (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes_mtu(mtu: u32) -> Option<MtuMsg> {
        let e = match mtu {
            256 => 1,
            512 => 2,
            1024 => 3,
            2048 => 4,
            4096 => 5,
            _ => return None,
        };
        Some(MtuMsg { ibv_mtu: e })
    }

    /// The MTU in bytes.
    pub fn mtu_bytes(&self) -> u32 {
        128 << self.ibv_mtu
    }

    /// The two-byte message: one digit and a NUL.
    pub fn to_bytes(&self) -> [u8; MTU_MSG_LEN] {
        [b'0' + self.ibv_mtu % 10, 0]
    }

    /// Parses the MTU message and checks it names a valid MTU.
    pub fn parse(bytes: &[u8]) -> Result<MtuMsg, OobError> {
        const WHAT: &str = "perftest MTU";
        if bytes.len() != MTU_MSG_LEN {
            return Err(malformed(
                WHAT,
                format!("{} bytes instead of {MTU_MSG_LEN}", bytes.len()),
            ));
        }
        let text = c_string(bytes);
        match text {
            [d @ b'1'..=b'5'] => Ok(MtuMsg { ibv_mtu: d - b'0' }),
            _ => Err(malformed(
                WHAT,
                format!(
                    "{:?} is not an ibv_mtu value 1..5",
                    String::from_utf8_lossy(text)
                ),
            )),
        }
    }
}

/// perftest's `pingpong_dest` as exchanged: the key message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerftestDest {
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READ / atomic operations this side accepts (`out_reads`).
    pub out_reads: u16,
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// Starting PSN (24 bits).
    pub psn: u32,
    /// R_Key of the test buffer.
    pub rkey: u32,
    /// Virtual address of the test buffer.
    pub vaddr: u64,
    /// The GID; `None` gives the short (59-byte) message perftest sends without a GID index.
    pub gid: Option<[u8; 16]>,
    /// SRQ number (XRC/DC only; 0 otherwise).
    pub srqn: u32,
}

const KEYS: &str = "perftest keys";

impl PerftestDest {
    /// The message, byte for byte what perftest writes: 108 bytes with a GID, 59 without.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xFF_FFFF,
            self.psn & 0xFF_FFFF,
            self.rkey,
            self.vaddr
        );
        let len = match self.gid {
            Some(gid) => {
                for b in gid {
                    text.push_str(&format!("{b:02x}:"));
                }
                text.push_str(&format!("{:08x}:", self.srqn));
                KEY_MSG_LEN_GID
            }
            None => {
                text.push_str(&format!("{:08x}", self.srqn));
                KEY_MSG_LEN
            }
        };
        let mut out = vec![0u8; len];
        out[..text.len()].copy_from_slice(text.as_bytes());
        out
    }

    /// Parses a key message; its length (108 or 59) says whether it carries a GID.
    pub fn parse(bytes: &[u8]) -> Result<PerftestDest, OobError> {
        let with_gid = match bytes.len() {
            KEY_MSG_LEN_GID => true,
            KEY_MSG_LEN => false,
            n => {
                return Err(malformed(
                    KEYS,
                    format!("{n} bytes instead of {KEY_MSG_LEN_GID} (with GID) or {KEY_MSG_LEN}"),
                ))
            }
        };
        let text = c_string(bytes);
        let mut fields: Vec<&[u8]> = text.split(|&c| c == b':').collect();
        // The GID form ends with ':', leaving one empty field at the end.
        if with_gid && fields.last().is_some_and(|f| f.is_empty()) {
            fields.pop();
        }
        let expected = if with_gid { 23 } else { 7 };
        if fields.len() != expected {
            return Err(malformed(
                KEYS,
                format!(
                    "{} ':'-separated fields instead of {expected} in {:?}",
                    fields.len(),
                    String::from_utf8_lossy(text)
                ),
            ));
        }
        let lid = parse_hex(KEYS, "LID", fields[0], 0xFFFF)? as u16;
        let out_reads = parse_hex(KEYS, "OUT_READS", fields[1], 0xFFFF)? as u16;
        let qpn = parse_hex(KEYS, "QPN", fields[2], 0xFF_FFFF)? as u32;
        let psn = parse_hex(KEYS, "PSN", fields[3], 0xFF_FFFF)? as u32;
        let rkey = parse_hex(KEYS, "RKEY", fields[4], u64::from(u32::MAX))? as u32;
        let vaddr = parse_hex(KEYS, "VADDR", fields[5], u64::MAX)?;
        let (gid, srqn_field) = if with_gid {
            let mut g = [0u8; 16];
            for (i, f) in fields[6..22].iter().enumerate() {
                g[i] = parse_hex(KEYS, "GID", f, 0xFF)? as u8;
            }
            (Some(g), fields[22])
        } else {
            (None, fields[6])
        };
        let srqn = parse_hex(KEYS, "SRQN", srqn_field, u64::from(u32::MAX))? as u32;
        Ok(PerftestDest {
            lid,
            out_reads,
            qpn,
            psn,
            rkey,
            vaddr,
            gid,
            srqn,
        })
    }
}

/// The bandwidth report the sides exchange after a test (`bw_report_data`, the fields
/// sent without `--report-per-port`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwReport {
    /// Message size, bytes.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth (MB/s or Gb/s, as the tool was asked to report).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Average message rate, Mpps.
    pub msg_rate_avg: f64,
}

impl BwReport {
    /// The five 8-byte messages, in exchange order (peers from version 5.33 on).
    pub fn to_messages(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate_avg.to_bits().to_be_bytes(),
        ]
    }

    /// Rebuilds a report from the five messages received.
    pub fn from_messages(m: &[[u8; 8]; 5]) -> BwReport {
        BwReport {
            size: u64::from_be_bytes(m[0]),
            iters: u64::from_be_bytes(m[1]),
            bw_peak: f64::from_bits(u64::from_be_bytes(m[2])),
            bw_avg: f64::from_bits(u64::from_be_bytes(m[3])),
            msg_rate_avg: f64::from_bits(u64::from_be_bytes(m[4])),
        }
    }
}

/// Checks the closing message.
pub fn parse_done(bytes: &[u8]) -> Result<(), OobError> {
    if bytes == PERFTEST_DONE {
        Ok(())
    } else {
        Err(malformed(
            "perftest done",
            format!(
                "expected \"done\\0\", got {:?}",
                String::from_utf8_lossy(bytes)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_key_message_without_gid_round_trips() {
        let d = PerftestDest {
            lid: 3,
            out_reads: 16,
            qpn: 0x123,
            psn: 0xabcdef,
            rkey: 0xdeadbeef,
            vaddr: 0x7f00_0000_1000,
            gid: None,
            srqn: 0,
        };
        let b = d.to_bytes();
        assert_eq!(b.len(), KEY_MSG_LEN);
        assert_eq!(
            &b[..58],
            b"0003:0010:000123:abcdef:deadbeef:00007f0000001000:00000000"
        );
        assert_eq!(PerftestDest::parse(&b).unwrap(), d);
    }

    #[test]
    fn malformed_key_messages_name_the_field() {
        let mut b = PerftestDest {
            lid: 0,
            out_reads: 1,
            qpn: 1,
            psn: 1,
            rkey: 1,
            vaddr: 1,
            gid: Some([0; 16]),
            srqn: 0,
        }
        .to_bytes();
        b[12] = b'z';
        let e = PerftestDest::parse(&b).unwrap_err().to_string();
        assert!(e.contains("QPN") && e.contains("not a hex digit"), "{e}");
        assert!(PerftestDest::parse(&[0u8; 60]).is_err());
        assert!(PerftestDest::parse(&[0u8; KEY_MSG_LEN_GID]).is_err());
        assert!(MtuMsg::parse(b"9\0").is_err());
        assert!(MtuMsg::parse(b"3\0").unwrap().mtu_bytes() == 1024);
        assert!(PerftestVersion::parse(b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0").is_err());
        assert!(parse_i32_msg(&[1, 2, 3]).is_err());
    }
}
