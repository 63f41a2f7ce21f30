//! Out-of-band connection exchange over TCP, before any RDMA traffic flows.
//!
//! RDMA peers must learn each other's QPN, starting PSN, GID and (for RDMA READ/WRITE and
//! atomics) the address and R_Key of the exposed memory before they can connect QPs
//! (IBA 11.2.5, `ModifyQP` to RTR needs the remote QPN and PSN). The tools softib pairs
//! with do this over a plain TCP connection, by default on port 18515:
//! - [`pingpong`]: ibv_rc_pingpong's (rdma-core) 52-byte text message;
//! - [`perftest`]: perftest's messages (version string, system data, MTU, 108-byte key
//!   message, results);
//! - [`endpoint`]: softib's own serde [`endpoint::Endpoint`], length-prefixed JSON.
//!
//! [`stream::OobStream`] carries them with timeouts on every step, so a peer that vanishes
//! or never answers gives an error, never a hang.

pub mod endpoint;
pub mod perftest;
pub mod pingpong;
pub mod stream;

/// The TCP port perftest and ibv_rc_pingpong use unless told otherwise.
pub const DEFAULT_OOB_PORT: u16 = 18515;

/// Why an out-of-band exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum OobError {
    /// A message did not have the expected layout.
    #[error("malformed {what} message: {detail}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// What was wrong, in words a user can act on.
        detail: String,
    },
    /// The peer did not answer in time.
    #[error(
        "timed out after {seconds:.1} s waiting to {what} (is the peer running and reachable?)"
    )]
    Timeout {
        /// The step that timed out.
        what: &'static str,
        /// The limit that passed.
        seconds: f64,
    },
    /// The peer closed the connection before the message was complete.
    #[error(
        "peer closed the connection while we waited to {what} ({got} of {expected} bytes received)"
    )]
    Closed {
        /// The step.
        what: &'static str,
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// Connecting, accepting, reading or writing failed.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn malformed(what: &'static str, detail: impl Into<String>) -> OobError {
    OobError::Malformed {
        what,
        detail: detail.into(),
    }
}

/// Parses a hex field. The C writers print fixed widths, but their readers use `strtol`,
/// which accepts any width, so softib accepts 1..=16 digits and checks the value's range.
pub(crate) fn parse_hex(
    what: &'static str,
    field: &'static str,
    s: &[u8],
    max: u64,
) -> Result<u64, OobError> {
    if s.is_empty() || s.len() > 16 {
        return Err(malformed(
            what,
            format!("field {field} has {} hex digits", s.len()),
        ));
    }
    let mut v: u64 = 0;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => {
                return Err(malformed(
                    what,
                    format!(
                        "field {field} contains {:?}, not a hex digit",
                        char::from(c)
                    ),
                ))
            }
        };
        v = (v << 4) | u64::from(d);
    }
    if v > max {
        return Err(malformed(
            what,
            format!("field {field} = {v:#x} exceeds {max:#x}"),
        ));
    }
    Ok(v)
}

/// The text before the first NUL (the C messages are NUL-terminated strings in fixed-size
/// buffers); an unterminated buffer is used whole.
pub(crate) fn c_string(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(n) => &bytes[..n],
        None => bytes,
    }
}
