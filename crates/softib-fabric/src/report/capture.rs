//! A pcap of what chosen HCA ports receive (`LINKTYPE_INFINIBAND`: LRH through VCRC, with
//! the ICRC and VCRC materialised as the last link carried them), timestamped with
//! simulated time. `softib decode` reads it; see `softib_wire::pcap` for Wireshark.
//!
//! The capture is kept in memory and written with the report; past [`MAX_CAPTURE_BYTES`]
//! further frames are counted, not stored, so a long run cannot exhaust memory.

use crate::crc::wire_image;
use crate::hca::{Endpoint, HcaTx};
use crate::packet::Packet;
use crate::time::Picos;
use softib_wire::pcap::{CaptureWriter, LinkType};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// Bytes of frames a capture stores at most.
pub const MAX_CAPTURE_BYTES: usize = 256 << 20;

/// The frames captured so far.
pub struct Capture {
    writer: Option<CaptureWriter<Vec<u8>>>,
    scratch: Vec<u8>,
    stored_bytes: usize,
    /// Frames written.
    pub frames: u64,
    /// Frames not stored because the capture was full.
    pub dropped: u64,
}

/// A capture shared by the endpoints of one run.
pub type SharedCapture = Rc<RefCell<Capture>>;

impl Capture {
    /// An empty capture.
    pub fn shared() -> SharedCapture {
        let writer = CaptureWriter::new(Vec::new(), LinkType::InfiniBand)
            .expect("writing a pcap header into memory cannot fail");
        Rc::new(RefCell::new(Capture {
            writer: Some(writer),
            scratch: Vec::new(),
            stored_bytes: 0,
            frames: 0,
            dropped: 0,
        }))
    }

    fn record(&mut self, at: Picos, p: &Packet) {
        if self.stored_bytes + p.bytes().len() > MAX_CAPTURE_BYTES {
            self.dropped += 1;
            return;
        }
        wire_image(p, &mut self.scratch);
        let ts = Duration::new(
            at / 1_000_000_000_000,
            ((at % 1_000_000_000_000) / 1000) as u32,
        );
        // Frames are at most 8,190 bytes, well under the snap length: this cannot fail.
        let Some(w) = self.writer.as_mut() else {
            self.dropped += 1;
            return;
        };
        if w.write(ts, &self.scratch).is_ok() {
            self.stored_bytes += self.scratch.len();
            self.frames += 1;
        }
    }

    /// The pcap file's bytes; the capture stores nothing after this.
    pub fn take_bytes(&mut self) -> Vec<u8> {
        self.writer
            .take()
            .and_then(|w| w.into_inner().ok())
            .unwrap_or_default()
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
        self.capture.borrow_mut().record(tx.now(), packet);
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
