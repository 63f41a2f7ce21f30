//! Port taps: what crosses chosen ports, in both directions, handed to a [`WireTap`] (the
//! report's pcap writer), as a line analyser on the cable at that port would see it.
//!
//! A tap sees every data packet and VL15 packet that leaves or enters a watched port, with
//! the bytes the link carries (LRH through VCRC, CRCs materialised for the current VL, or
//! the damaged bytes of a packet hit by a bit error) and the time its last byte crossed the
//! port: transmission end for a packet the port sends, that plus the propagation delay for
//! one it receives (the time an HCA's receive capture uses too).
//!
//! Link-level flow-control packets (IBA 7.9.4) are not handed to the tap. On the wire a link
//! packet is told from a data packet by its start delimiter (SLP rather than SDP, IBA
//! 6.5.3), which an LRH-first capture format has no field for: the 6 bytes of an FCP
//! with Op 0 would read as an LRH on VL0 and be decoded as garbage (tshark 4.0's
//! `infiniband` dissector reports them malformed; its `infiniband_link` dissector is reached
//! only from ERF's link record type, and fed the 6 bytes through a user DLT it reports
//! them malformed as well). Their number per port is in
//! the counters instead (flow-control packets sent and received).

use crate::event::EventOrder;
use crate::packet::Packet;
use crate::time::Picos;

/// Receives the packets crossing tapped ports.
pub trait WireTap {
    /// `packet` (its wire image is [`crate::crc::wire_image`], which also writes out a
    /// described zero payload) crossed a tapped port, its last byte at `at`; `order` is
    /// where in the run the tap saw it (the same whether or not the fabric is partitioned,
    /// for merging the records of several partitions).
    fn on_wire(&mut self, at: Picos, order: EventOrder, packet: &Packet);
}

/// The fabric's taps: which global ports are watched, and where their packets go.
pub(crate) struct Taps {
    watched: Vec<bool>,
    sink: Box<dyn WireTap>,
}

impl Taps {
    /// Taps on the global ports `ports` of a fabric of `nports` ports.
    pub(crate) fn new(nports: usize, ports: &[usize], sink: Box<dyn WireTap>) -> Self {
        let mut watched = vec![false; nports];
        for &p in ports {
            watched[p] = true;
        }
        Taps { watched, sink }
    }

    /// A packet went on the wire from port `from` to port `to`: its last byte leaves `from`
    /// at `sent` and reaches `to` at `arrived`. A packet crossing two watched ports (both
    /// ends of one cable) is seen by each tap. The sending port's partition sees both ends,
    /// so in a partitioned run every crossing is seen exactly once.
    pub(crate) fn see(
        &mut self,
        from: usize,
        to: usize,
        (sent, arrived): (Picos, Picos),
        order: EventOrder,
        p: &Packet,
    ) {
        if self.watched[from] {
            self.sink.on_wire(sent, order, p);
        }
        if self.watched.get(to).copied().unwrap_or(false) {
            self.sink.on_wire(arrived, order, p);
        }
    }
}
