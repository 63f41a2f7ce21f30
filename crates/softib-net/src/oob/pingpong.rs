//! ibv_rc_pingpong's connection message (rdma-core `libibverbs/examples`).
//!
//! Each side sends one NUL-terminated text message of exactly 52 bytes,
//! `"%04x:%06x:%06x:%s"` of LID, QPN, PSN and the GID as 32 hex digits (the GID's 16 bytes
//! in wire order, printed as four big-endian 32-bit words, which gives the bytes in order).
//! The client connects and writes first; the server answers with its own; after moving its
//! QP to RTS the client writes `"done"` with its NUL (5 bytes), which the server waits for.

use super::{c_string, malformed, parse_hex, OobError};

/// Length of the message: `sizeof "0000:000000:000000:" + 32 hex digits + NUL`.
pub const PINGPONG_MSG_LEN: usize = 52;

/// The closing message the client sends when its QP is ready: `"done"` and its NUL.
pub const PINGPONG_DONE: &[u8; 5] = b"done\0";

/// What one side of ibv_rc_pingpong tells the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingpongDest {
    /// Local identifier (0 on RoCE, which has no LIDs).
    pub lid: u16,
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// Starting packet sequence number (24 bits).
    pub psn: u32,
    /// The port GID (all zeros when ibv_rc_pingpong runs without `-g`).
    pub gid: [u8; 16],
}

const WHAT: &str = "ibv_rc_pingpong";

impl PingpongDest {
    /// The 52-byte message, byte for byte what ibv_rc_pingpong writes.
    pub fn to_bytes(&self) -> [u8; PINGPONG_MSG_LEN] {
        let mut text = format!(
            "{:04x}:{:06x}:{:06x}:",
            self.lid,
            self.qpn & 0xFF_FFFF,
            self.psn & 0xFF_FFFF
        );
        for b in self.gid {
            text.push_str(&format!("{b:02x}"));
        }
        let mut out = [0u8; PINGPONG_MSG_LEN];
        out[..text.len()].copy_from_slice(text.as_bytes());
        out
    }

    /// Parses a received message (at most 52 bytes; text up to the first NUL).
    pub fn parse(bytes: &[u8]) -> Result<PingpongDest, OobError> {
        if bytes.len() != PINGPONG_MSG_LEN {
            return Err(malformed(
                WHAT,
                format!("{} bytes instead of {PINGPONG_MSG_LEN}", bytes.len()),
            ));
        }
        let text = c_string(bytes);
        let fields: Vec<&[u8]> = text.split(|&c| c == b':').collect();
        let [lid, qpn, psn, gid] = fields.as_slice() else {
            return Err(malformed(
                WHAT,
                format!(
                    "{} ':'-separated fields instead of 4 (LID:QPN:PSN:GID) in {:?}",
                    fields.len(),
                    String::from_utf8_lossy(text)
                ),
            ));
        };
        let lid = parse_hex(WHAT, "LID", lid, 0xFFFF)? as u16;
        let qpn = parse_hex(WHAT, "QPN", qpn, 0xFF_FFFF)? as u32;
        let psn = parse_hex(WHAT, "PSN", psn, 0xFF_FFFF)? as u32;
        if gid.len() != 32 {
            return Err(malformed(
                WHAT,
                format!("GID has {} hex digits instead of 32", gid.len()),
            ));
        }
        let mut g = [0u8; 16];
        for (i, pair) in gid.chunks(2).enumerate() {
            g[i] = parse_hex(WHAT, "GID", pair, 0xFF)? as u8;
        }
        Ok(PingpongDest {
            lid,
            qpn,
            psn,
            gid: g,
        })
    }
}

/// Checks the client's closing message.
pub fn parse_done(bytes: &[u8]) -> Result<(), OobError> {
    if bytes == PINGPONG_DONE {
        Ok(())
    } else {
        Err(malformed(
            "ibv_rc_pingpong done",
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
    fn round_trips_a_message_byte_exactly() {
        let d = PingpongDest {
            lid: 0,
            qpn: 0x12,
            psn: 0x145bf3,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 2],
        };
        let bytes = d.to_bytes();
        assert_eq!(
            &bytes[..51],
            b"0000:000012:145bf3:00000000000000000000ffff0a630002"
        );
        assert_eq!(bytes[51], 0);
        assert_eq!(PingpongDest::parse(&bytes).unwrap(), d);
    }

    #[test]
    fn rejects_wrong_length_field_count_and_digits() {
        assert!(PingpongDest::parse(b"short").is_err());
        let mut m = [0u8; PINGPONG_MSG_LEN];
        m[..9].copy_from_slice(b"0000:0012");
        let e = PingpongDest::parse(&m).unwrap_err().to_string();
        assert!(e.contains("2 ':'-separated fields"), "{e}");
        let mut bad = PingpongDest {
            lid: 1,
            qpn: 2,
            psn: 3,
            gid: [0; 16],
        }
        .to_bytes();
        bad[20] = b'x';
        let e = PingpongDest::parse(&bad).unwrap_err().to_string();
        assert!(e.contains("not a hex digit"), "{e}");
        assert!(parse_done(b"done\0").is_ok());
        assert!(parse_done(b"dona\0").is_err());
    }
}
