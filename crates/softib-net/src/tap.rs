//! The pcap tap: records every RoCEv2 datagram a device sends and receives as a full
//! IPv4/IPv6 + UDP packet, with the ICRC exactly as it was on the wire.
//!
//! Link type: `LINKTYPE_RAW` (101, a bare IP packet per record). Wireshark and tshark
//! decode UDP port 4791 as RoCEv2 (their InfiniBand dissector registers on it), so the
//! records show as IP / UDP / InfiniBand with every BTH field, exactly as over Ethernet; raw
//! IP is chosen over Ethernet with invented MAC addresses because a UDP socket never sees
//! the link layer, and a capture should not contain values that were never on the wire.
//! `softib decode` reads the same files.
//!
//! What is reconstructed (the socket does not show it) and how:
//! - IPv4 Identification: for sent datagrams the value the kernel writes ([`IdentOracle`]),
//!   for received ones the value the ICRC check found (see `docs/design/net.md`);
//! - TTL / hop limit 64 (Linux's default), DF set, the TOS / traffic class the socket
//!   reported or was told to send;
//! - the UDP checksum is written as 0 ("not computed" for IPv4, as rxe sends; on IPv6
//!   Wireshark flags it, since the kernel did compute one that softib never sees).
//!
//! The UDP payload (BTH through ICRC) is recorded byte for byte as sent or received,
//! including corruption the fault injector introduced.
//!
//! [`IdentOracle`]: crate::socket::IdentOracle

use std::path::Path;
use std::time::{Duration, SystemTime};

use softib_wire::pcap::{CaptureWriter, LinkType, PcapError};
use softib_wire::roce::{emit_ip, ip_buffer_len, IpInfo, UdpInfo};

/// The ICRC's length at the end of every RoCEv2 UDP payload.
const ICRC_LEN: usize = 4;

/// A pcap file being written by a device.
pub struct PcapTap {
    writer: CaptureWriter<std::io::BufWriter<std::fs::File>>,
    scratch: Vec<u8>,
    recorded: u64,
    skipped: u64,
}

impl std::fmt::Debug for PcapTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapTap")
            .field("recorded", &self.recorded)
            .field("skipped", &self.skipped)
            .finish()
    }
}

impl PcapTap {
    /// Creates (or truncates) the capture file.
    pub fn create(path: impl AsRef<Path>) -> Result<PcapTap, PcapError> {
        Ok(PcapTap {
            writer: CaptureWriter::create(path, LinkType::Raw)?,
            // The largest IP packet plus room; allocated once.
            scratch: vec![0; 65_536 + 64],
            recorded: 0,
            skipped: 0,
        })
    }

    /// Records one datagram (UDP payload: BTH through ICRC) with the IP and UDP header
    /// fields it had, stamped with the current wall-clock time.
    pub fn record(&mut self, ip: &IpInfo, udp: &UdpInfo, datagram: &[u8]) -> Result<(), PcapError> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        self.record_at(now, ip, udp, datagram)
    }

    /// Like [`PcapTap::record`] with an explicit timestamp (since the Unix epoch).
    pub fn record_at(
        &mut self,
        timestamp: Duration,
        ip: &IpInfo,
        udp: &UdpInfo,
        datagram: &[u8],
    ) -> Result<(), PcapError> {
        if datagram.len() < ICRC_LEN
            || ip_buffer_len(ip, datagram.len() - ICRC_LEN) > self.scratch.len()
        {
            self.skipped += 1;
            return Ok(());
        }
        let transport = &datagram[..datagram.len() - ICRC_LEN];
        let Ok(len) = emit_ip(ip, udp, transport, &mut self.scratch) else {
            self.skipped += 1;
            return Ok(());
        };
        // emit_ip wrote the ICRC the headers imply; the tap records the one on the wire.
        self.scratch[len - ICRC_LEN..len].copy_from_slice(&datagram[datagram.len() - ICRC_LEN..]);
        self.writer.write(timestamp, &self.scratch[..len])?;
        self.recorded += 1;
        Ok(())
    }

    /// Datagrams recorded.
    pub fn recorded(&self) -> u64 {
        self.recorded
    }

    /// Datagrams too short or too long to be RoCEv2 packets, not recorded.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Writes buffered records to the file (the driver calls it when idle and on close).
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.writer.flush()
    }
}

impl Drop for PcapTap {
    fn drop(&mut self) {
        let _ = self.writer.flush();
    }
}
