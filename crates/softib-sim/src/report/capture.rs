//! A pcap of what chosen HCAs receive and of what crosses chosen ports in both directions
//! (switch ports included; see [`softib_fabric::tap`]): LRH through VCRC, with the ICRC and
//! VCRC materialised as the link carried them, timestamped with the simulated time the
//! packet's last byte crossed the port.
//!
//! Each packet is an ERF record of type INFINIBAND in a `LINKTYPE_ERF` pcap
//! ([`softib_wire::erf`]), because that is what stock Wireshark and tshark 4.0 open as it
//! is: they map the plain `LINKTYPE_INFINIBAND` (247) to no dissector. The ERF timestamp
//! keeps the simulated time to 2^-32 s (the pcap record's own, nanoseconds, is the same
//! instant rounded down). `softib decode` reads it too.
//!
//! The capture is kept in memory and written with the report, frames in time order (a port
//! tap sees a packet it receives only after later packets it sent have been recorded);
//! past [`MAX_CAPTURE_BYTES`] further frames are counted, not stored, so a long run cannot
//! exhaust memory. A partitioned run keeps one capture per partition and merges them
//! ([`Capture::merge`]) into the file one fabric would have written.

use softib_fabric::crc::wire_image;
use softib_fabric::event::EventOrder;
use softib_fabric::hca::{Endpoint, HcaTx};
use softib_fabric::packet::Packet;
use softib_fabric::tap::WireTap;
use softib_fabric::time::Picos;
use softib_wire::erf::{self, ErfType};
use softib_wire::pcap::{CaptureWriter, LinkType};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// Bytes of frames a capture stores at most.
pub const MAX_CAPTURE_BYTES: usize = 256 << 20;

/// The frames captured so far.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Capture {
    /// (time, place in the run's order, range in `data`) of every stored frame, in
    /// recording order.
    index: Vec<(Picos, EventOrder, usize, usize)>,
    data: Vec<u8>,
    #[serde(skip)]
    scratch: Vec<u8>,
    stored_bytes: usize,
    /// Frames written.
    pub frames: u64,
    /// Frames not stored because the capture was full.
    pub dropped: u64,
}

/// A capture shared by the endpoints of one run (or of one partition of it).
pub type SharedCapture = Rc<RefCell<Capture>>;

impl Capture {
    /// An empty capture.
    pub fn shared() -> SharedCapture {
        Rc::new(RefCell::new(Capture::default()))
    }

    fn record(&mut self, at: Picos, order: EventOrder, p: &Packet) {
        if self.stored_bytes + p.bytes().len() > MAX_CAPTURE_BYTES {
            self.dropped += 1;
            return;
        }
        wire_image(p, &mut self.scratch);
        let start = self.data.len();
        self.data.extend_from_slice(&self.scratch);
        self.index.push((at, order, start, self.data.len()));
        self.stored_bytes += self.scratch.len();
        self.frames += 1;
    }

    /// Adds the frames another partition captured (`other` is left empty).
    pub fn merge(&mut self, other: &mut Capture) {
        let base = self.data.len();
        self.data.append(&mut other.data);
        self.index.extend(
            other
                .index
                .drain(..)
                .map(|(at, order, a, b)| (at, order, a + base, b + base)),
        );
        self.stored_bytes += std::mem::take(&mut other.stored_bytes);
        self.frames += std::mem::take(&mut other.frames);
        self.dropped += std::mem::take(&mut other.dropped);
    }

    /// The pcap file's bytes, frames in time order, without the frames whose last byte had
    /// not crossed their port by `end` (a tap records a packet when it starts on the wire;
    /// at the end of a run some are still crossing). The capture stores nothing after this.
    ///
    /// Frames of the same picosecond go in the order the run recorded them: by the
    /// [`EventOrder`] of the recording (which does not depend on partitioning), then as
    /// recorded (one event's records are all taken in one partition). Merged partitions'
    /// captures so come out as one fabric's would.
    pub fn take_bytes(&mut self, end: Picos) -> Vec<u8> {
        let mut index = std::mem::take(&mut self.index);
        index.retain(|&(at, ..)| at <= end);
        let data = std::mem::take(&mut self.data);
        index.sort_by_key(|&(at, order, _, _)| (at, order));
        // Partitions each fill to the limit; the merged file keeps the earliest frames.
        let mut kept = 0usize;
        let mut w = CaptureWriter::new(
            Vec::with_capacity(24 + data.len().min(MAX_CAPTURE_BYTES) + 32 * index.len()),
            LinkType::Erf,
        )
        .expect("writing a pcap header into memory cannot fail");
        let mut record = Vec::new();
        for (at, _, a, b) in index {
            let ts = Duration::new(
                at / 1_000_000_000_000,
                ((at % 1_000_000_000_000) / 1000) as u32,
            );
            let frame = &data[a..b];
            kept += frame.len();
            if kept > MAX_CAPTURE_BYTES {
                self.dropped += 1;
                continue;
            }
            // Frames are at most 8,190 bytes, far under ERF's 16-bit record length and the
            // snap length, and simulated time stays below the year 2106: neither fails.
            let Some(header) = erf::header(
                erf::timestamp_from_picos(at),
                ErfType::InfiniBand,
                frame.len(),
            ) else {
                self.dropped += 1;
                continue;
            };
            record.clear();
            record.extend_from_slice(&header);
            record.extend_from_slice(frame);
            if w.write(ts, &record).is_err() {
                self.dropped += 1;
            }
        }
        w.into_inner().unwrap_or_default()
    }
}

/// The sink of a fabric's port taps ([`softib_fabric::fabric::Fabric::set_tap`]) that records into a
/// capture.
pub struct TapCapture(pub SharedCapture);

impl WireTap for TapCapture {
    fn on_wire(&mut self, at: Picos, order: EventOrder, packet: &Packet) {
        self.0.borrow_mut().record(at, order, packet);
    }
}

/// Wraps an endpoint and captures every packet it receives.
pub struct Captured {
    inner: Box<dyn Endpoint>,
    capture: SharedCapture,
}

impl Captured {
    /// Captures what `inner` receives into `capture`.
    pub fn new(inner: Box<dyn Endpoint>, capture: SharedCapture) -> Self {
        Captured { inner, capture }
    }
}

impl Endpoint for Captured {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        self.inner.on_transmit_ready(tx);
    }

    fn on_receive(&mut self, packet: &Packet, tx: &mut HcaTx<'_>) {
        self.capture
            .borrow_mut()
            .record(tx.now(), tx.order(), packet);
        self.inner.on_receive(packet, tx);
    }

    fn next_wakeup(&self) -> Option<Picos> {
        self.inner.next_wakeup()
    }

    fn on_timer(&mut self, tx: &mut HcaTx<'_>) {
        self.inner.on_timer(tx);
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        // The wrapper is transparent: its owner reaches the endpoint inside.
        self.inner.as_any_mut()
    }
}
