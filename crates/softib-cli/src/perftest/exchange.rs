//! The channel a perftest-style tool exchanges its test parameters over: perftest's TCP
//! connection (the default), or, with `-R`, an RC connection set up by rdma_cm whose
//! messages travel as SENDs ([`super::rdma_cm::CmExchange`]), as perftest's `-R` does
//! (`perftest_communication.c`: `ctx_xchg_data_rdma`, `rdma_write_keys`/`rdma_read_keys`).
//! The order of the messages is the same on both; their framing and the key message
//! differ (text on TCP, perftest's binary `struct pingpong_dest` over rdma_cm), and the
//! closing "done" exists only on TCP.

use std::net::IpAddr;

use softib_net::oob::perftest::{PerftestDest, KEY_MSG_LEN_GID, PERFTEST_DONE};
use softib_net::oob::stream::OobStream;

use super::rdma_cm::CmExchange;

/// The exchange channel of one test.
pub enum Exchange {
    /// perftest's TCP connection.
    Tcp(OobStream),
    /// An rdma_cm connection (`-R`).
    Cm(Box<CmExchange>),
}

impl Exchange {
    /// One symmetric step: send `mine`, receive the peer's message of `theirs.len()` bytes,
    /// the client first.
    pub fn exchange(
        &mut self,
        what: &'static str,
        mine: &[u8],
        theirs: &mut [u8],
    ) -> anyhow::Result<()> {
        match self {
            Exchange::Tcp(s) => Ok(s.exchange(what, mine, theirs)?),
            Exchange::Cm(c) => c.exchange(what, mine, theirs),
        }
    }

    /// One key-message handshake (perftest's `ctx_hand_shake`).
    pub fn keys(&mut self, mine: &PerftestDest) -> anyhow::Result<PerftestDest> {
        match self {
            Exchange::Tcp(s) => {
                let mut theirs = [0u8; KEY_MSG_LEN_GID];
                s.exchange("exchange QP keys", &mine.to_bytes(), &mut theirs)?;
                Ok(PerftestDest::parse(&theirs)?)
            }
            Exchange::Cm(c) => c.keys(mine),
        }
    }

    /// Whether the peer has sent a message we have not read yet (without consuming it);
    /// fails if the peer closed the channel.
    pub fn poll_peer(&mut self, what: &'static str) -> anyhow::Result<bool> {
        match self {
            Exchange::Tcp(s) => Ok(s.poll_peer(what)?),
            Exchange::Cm(c) => c.poll_peer(what),
        }
    }

    /// perftest's `ctx_close_connection` after its last handshake: TCP sends "done" (and
    /// reads the peer's, which perftest leaves unread, so our close never resets a
    /// connection with data in flight; a peer that closed first is not an error); over
    /// rdma_cm there is nothing more.
    pub fn send_done(&mut self) -> anyhow::Result<()> {
        let Exchange::Tcp(s) = self else {
            return Ok(());
        };
        s.write_msg("send done", PERFTEST_DONE)?;
        let mut done = [0u8; PERFTEST_DONE.len()];
        if s.read_msg("receive done", &mut done).is_ok() {
            softib_net::oob::perftest::parse_done(&done)?;
        }
        Ok(())
    }

    /// The peer's IP address.
    pub fn peer_ip(&self) -> IpAddr {
        match self {
            Exchange::Tcp(s) => s.peer_addr().ip(),
            Exchange::Cm(c) => c.peer_ip(),
        }
    }
}
