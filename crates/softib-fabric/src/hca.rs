//! The node side of an HCA port: the boundary between the fabric and whatever produces and
//! consumes packets there.
//!
//! The fabric owns the port (per-VL send queues, credits, arbitration); an [`Endpoint`] owns
//! the traffic. The transport-engine adapter (one `softib_transport::Device` per HCA port,
//! `docs/design/engine-api.md`) implements this trait: `on_transmit_ready` pulls
//! `Device::poll_transmit` while the send queue has room and encapsulates each transport
//! packet (LRH, GRH when routed, via softib-wire); `on_receive` strips the encapsulation and
//! calls `Device::handle_packet`; `next_wakeup`/`on_timer` map to
//! `Device::poll_timeout`/`handle_timeout` (converting nanoseconds with
//! [`crate::time::from_engine_nanos`]).
//!
//! Send queues are per VL (SL2VL of the HCA port picks the queue) with a fixed depth in
//! packets, so an endpoint that produces faster than the link drains is held back at the
//! source, as an HCA's doorbell-driven send engine is.

use crate::counters::PortCounters;
use crate::packet::{Packet, PacketError, PacketMeta, PacketPool, ZeroSpan};
use crate::port::{Port, Source};
use crate::time::Picos;
use crate::vlarb::VL15;

/// Bytes the fabric appends after what an endpoint writes: ICRC (4) and VCRC (2), both
/// materialised lazily (see [`crate::packet`]).
pub const TRAILER_BYTES: usize = 6;

/// Why a packet could not be queued.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SendError {
    /// The VL's send queue is at its depth: wait for `on_transmit_ready`.
    #[error("send queue for VL{vl} is full")]
    QueueFull {
        /// The VL.
        vl: u8,
    },
    /// The SL maps to a VL that is not operational on this port (or to VL15): the packet
    /// is discarded and counted in PortXmitDiscards, as an HCA does.
    #[error("SL{sl} maps to VL{vl}, which is not an operational data VL of this port")]
    VlNotOperational {
        /// The SL.
        sl: u8,
        /// The VL it maps to.
        vl: u8,
    },
    /// The length is impossible.
    #[error(transparent)]
    Packet(#[from] PacketError),
}

/// What an endpoint may do with its port during a callback.
pub struct HcaTx<'a> {
    pub(crate) now: Picos,
    pub(crate) order: crate::event::EventOrder,
    pub(crate) lid: u16,
    pub(crate) depth: usize,
    pub(crate) pool: &'a mut PacketPool,
    pub(crate) port: &'a mut Port,
}

impl HcaTx<'_> {
    /// Current simulated time.
    pub fn now(&self) -> Picos {
        self.now
    }

    /// Where in the run's order this call happens (see [`crate::event::EventOrder`]): what
    /// an endpoint records, sorted by it, merges across partitions in one fabric's order.
    pub fn order(&self) -> crate::event::EventOrder {
        self.order
    }

    /// This port's LID (the SLID of what it sends).
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The VL packets of `sl` go out on.
    pub fn vl_for(&self, sl: u8) -> u8 {
        self.port.sl2vl.vl(sl)
    }

    /// Whether a packet of `sl` can be queued now.
    pub fn has_room(&self, sl: u8) -> bool {
        let vl = self.vl_for(sl);
        vl < self.port.op_vls && self.port.vls[vl as usize].out_q.len() < self.depth
    }

    /// The port's SL2VL table.
    pub fn sl2vl(&self) -> crate::qos::Sl2Vl {
        self.port.sl2vl
    }

    /// Packets queued on all VLs of the port, not yet transmitting.
    pub fn backlog(&self) -> usize {
        // Counted as packets are queued and leave (the engine adapter asks before every
        // packet it pulls; summing the queues read a cache line per VL).
        debug_assert_eq!(
            self.port.queued as usize,
            self.port.vls.iter().map(|v| v.out_q.len()).sum::<usize>()
        );
        self.port.queued as usize
    }

    /// Whether some operational data VL's send queue is below the depth.
    pub fn any_room(&self) -> bool {
        // An empty queue (not in `nonempty`) has room without reading its VL's state.
        if self.depth > 0 && self.port.data_vl_mask() & !self.port.nonempty != 0 {
            return true;
        }
        self.port.vls[..self.port.op_vls as usize]
            .iter()
            .any(|v| v.out_q.len() < self.depth)
    }

    /// The configured send queue depth (packets per VL).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Whether a VL15 (subnet management) packet can be queued now.
    pub fn has_management_room(&self) -> bool {
        self.port.vls[VL15 as usize].out_q.len() < self.depth
    }

    /// Queues a data packet of `len` bytes LRH through VCRC for `dlid` on `sl`. `write`
    /// fills the first `len - 6` bytes (LRH through pad); ICRC and VCRC are the fabric's.
    /// `flow` tags the packet for statistics.
    pub fn send(
        &mut self,
        dlid: u16,
        sl: u8,
        len: usize,
        flow: u32,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<(), SendError> {
        let vl = self.vl_for(sl);
        if vl >= self.port.op_vls {
            self.port.counters.port_xmit_discards += 1;
            return Err(SendError::VlNotOperational { sl, vl });
        }
        self.queue(dlid, sl, vl, len, flow, write)
    }

    /// Queues a subnet-management packet on VL15 (not flow-controlled, may be dropped by a
    /// full receiver: VL15Dropped).
    pub fn send_management(
        &mut self,
        dlid: u16,
        len: usize,
        flow: u32,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<(), SendError> {
        self.queue(dlid, 0, VL15, len, flow, write)
    }

    fn queue(
        &mut self,
        dlid: u16,
        sl: u8,
        vl: u8,
        len: usize,
        flow: u32,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<(), SendError> {
        if self.port.vls[vl as usize].out_q.len() >= self.depth {
            return Err(SendError::QueueFull { vl });
        }
        let mut meta = PacketMeta::new(dlid, self.lid, sl, vl, len);
        meta.flow = flow;
        meta.injected_at = self.now;
        let id = self.pool.alloc(meta)?;
        let bytes = self.pool.get_mut(id).bytes_mut();
        let body = bytes.len() - TRAILER_BYTES;
        write(&mut bytes[..body]);
        self.port.enqueue(vl, Source::Local(id));
        Ok(())
    }

    /// Queues a packet whose length and address are known only once it is written (a
    /// transport engine's `poll_transmit`). `write` gets `max_len - 6` bytes of buffer for the
    /// packet LRH through pad and returns what it wrote, or `None` if it had nothing to send.
    /// The send queue depth is not enforced here (the packet already exists): callers pull
    /// while [`HcaTx::backlog`] is below [`HcaTx::depth`]. Returns whether a packet was
    /// queued.
    pub fn send_with(
        &mut self,
        max_len: usize,
        flow: u32,
        write: impl FnOnce(&mut [u8]) -> Option<Outgoing>,
    ) -> Result<bool, SendError> {
        let big = self
            .pool
            .alloc(PacketMeta::new(0, self.lid, 0, 0, max_len))?;
        let out = {
            let bytes = self.pool.get_mut(big).bytes_mut();
            let body = bytes.len() - TRAILER_BYTES;
            write(&mut bytes[..body])
        };
        let Some(out) = out else {
            self.pool.free(big);
            return Ok(false);
        };
        let vl = if out.management {
            VL15
        } else {
            self.port.sl2vl.vl(out.sl)
        };
        if vl != VL15 && vl >= self.port.op_vls {
            self.pool.free(big);
            self.port.counters.port_xmit_discards += 1;
            return Err(SendError::VlNotOperational { sl: out.sl, vl });
        }
        let len = (out.len + TRAILER_BYTES).min(max_len);
        let mut meta = PacketMeta::new(out.dlid, self.lid, out.sl, vl, len);
        meta.flow = flow;
        meta.injected_at = self.now;
        // Kept even if it reaches past what was written: the zeros are then written up to
        // the packet's end when materialised, and the receiving engine, whose parse puts the
        // payload elsewhere, drops the packet as malformed rather than taking stale bytes.
        meta.zero_payload = out.zero_payload;
        // Small packets (ACKs) move to a buffer of their size instead of pinning an MTU one.
        let id = if crate::packet::same_class(len, max_len) {
            self.pool.get_mut(big).meta = meta;
            big
        } else {
            let small = self.pool.alloc(meta)?;
            let (src, dst) = self.pool.pair_mut(big, small);
            let (from, to) = (&src.bytes()[..out.len], &mut dst.bytes_mut()[..out.len]);
            match meta.zero_payload {
                // A described payload's bytes are not worth copying.
                Some(z) => {
                    let end = (z.offset as usize + z.len as usize).min(out.len);
                    let start = (z.offset as usize).min(end);
                    to[..start].copy_from_slice(&from[..start]);
                    to[end..].copy_from_slice(&from[end..]);
                }
                None => to.copy_from_slice(from),
            }
            self.pool.free(big);
            small
        };
        self.port.enqueue(vl, Source::Local(id));
        Ok(true)
    }

    /// This port's counters so far (waits as of the last state change).
    pub fn counters(&self) -> &PortCounters {
        &self.port.counters
    }
}

/// What [`HcaTx::send_with`]'s writer produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// Bytes written, LRH through pad.
    pub len: usize,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// A subnet-management packet (VL15) rather than data.
    pub management: bool,
    /// Bytes the writer left out because they are zeros (a described payload, see
    /// [`crate::packet`]), counted from the LRH; `None`: every byte is written.
    pub zero_payload: Option<ZeroSpan>,
}

/// Producer and consumer of the packets of one HCA port.
pub trait Endpoint {
    /// The port's send queues have room (called at start and whenever a queued packet
    /// starts transmission). Queue packets with [`HcaTx::send`].
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>);

    /// A packet arrived intact (its CRCs checked if it was ever corrupted). The buffer goes
    /// back to the pool after the call.
    fn on_receive(&mut self, packet: &Packet, tx: &mut HcaTx<'_>);

    /// Whether [`Endpoint::on_receive`] reads [`crate::packet::PacketMeta::zero_payload`]
    /// and so may get a packet whose described zero payload is not in its bytes. False (the
    /// default): the fabric writes the zeros before the call.
    fn takes_described_payloads(&self) -> bool {
        false
    }

    /// When the endpoint next wants [`Endpoint::on_timer`], if ever.
    fn next_wakeup(&self) -> Option<Picos>;

    /// The time from `next_wakeup` has come.
    fn on_timer(&mut self, tx: &mut HcaTx<'_>);

    /// The endpoint as `Any`, so its owner can reach its concrete type through
    /// [`crate::fabric::Fabric::endpoint_mut`]; `None` (the default) keeps it opaque.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}
