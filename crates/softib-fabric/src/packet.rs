//! Packets in flight and the pool that recycles their buffers.
//!
//! A packet is allocated once, when an HCA encapsulates it, and is then passed between
//! ports, switches and the event queue as a 4-byte [`PacketId`]: a hop moves an index, never
//! bytes. The buffer holds the packet as it is on the wire, LRH through VCRC, and beside it the
//! [`PacketMeta`] a switch needs (DLID, SL, current VL, length in 64-byte blocks), written once
//! by the encapsulating HCA so no hop re-parses the LRH.
//!
//! **CRCs are materialised lazily.** The VCRC covers the LRH, whose VL field changes at every
//! hop (IBA 7.8.2), so keeping it current would cost a CRC-16 over the whole packet per hop,
//! more than everything else a hop does. The ICRC is invariant but costs a CRC-32 over the
//! packet at the source and again at the destination. Instead a packet carries
//! [`CrcState::Implicit`]: its last six bytes are, by construction, the correct ICRC and VCRC
//! for the current contents and VL, and nobody looks at them. They are computed into the buffer
//! (and the LRH's VL nibble refreshed from `meta.vl`) only when somebody does look: a packet
//! capture, or a fault injection that is about to flip bits and must know whether the receiver
//! will detect it. Once bits are flipped the state is [`CrcState::Corrupted`] and the receiving
//! port checks the real CRCs. The observable behaviour (counters, drops, captures) is the
//! behaviour of per-hop recomputation.
//!
//! **Zero payloads are described, not written.** A transport engine that gathers a payload
//! from memory that reads as zeros (`softib_transport::Memory::reads_as_zeros`) may leave it
//! out of the buffer ([`PacketMeta::zero_payload`]); the bytes there are stale. Like the
//! CRCs, they are written (zeros) only when somebody looks: CRC materialisation (captures,
//! bit errors), [`crate::crc::wire_image`], and delivery to an endpoint that does not take
//! described payloads ([`crate::hca::Endpoint::takes_described_payloads`]). An engine HCA
//! hands the description to the receiving engine, which checks it against its own parse of
//! the headers. A hop then moves no payload bytes at all.
//!
//! The pool keeps freed buffers in size classes, one per path MTU (256..4096 bytes of payload
//! plus up to 89 bytes of LRH, GRH, BTH, extension headers, pad, ICRC and VCRC), one for
//! small packets (ACKs are 30 bytes) and one up to the IBA maximum, so after warm-up a run
//! allocates nothing per packet and an ACK does not pin a 4 KiB buffer.

use crate::time::Picos;

/// The largest packet the fabric carries, LRH through VCRC: PktLen is 11 bits of 4-byte words
/// covering LRH through ICRC (IBA 7.7.8), plus the 2-byte VCRC.
pub const MAX_PACKET_BYTES: usize = 2047 * 4 + 2;

/// Bytes per flow-control credit block (IBA 7.9.4).
pub const BLOCK_BYTES: usize = 64;

/// Buffer sizes of the pool's classes; MTU-sized packets with any header stack fit the class
/// of their MTU.
const CLASS_BYTES: [usize; 8] = [64, 128, 384, 640, 1152, 2176, 4224, 8192];
const CLASSES: usize = CLASS_BYTES.len();

/// Number of 64-byte credit blocks a packet of `len` bytes (LRH through VCRC) occupies.
pub fn blocks_for(len: usize) -> u16 {
    len.div_ceil(BLOCK_BYTES) as u16
}

/// Whether packets of `a` and `b` bytes use the same buffer size class.
pub(crate) fn same_class(a: usize, b: usize) -> bool {
    class_of(a) == class_of(b)
}

/// The smallest class whose buffers hold `len` bytes (the largest for anything longer).
/// Written as ranges, which compile to a few comparisons: the pool asks this three to
/// four times per packet, and a search of `CLASS_BYTES` was over 1% of a 1 -> 1 run.
/// `class_ranges_match_class_bytes` checks it against the table.
fn class_of(len: usize) -> usize {
    match len {
        0..=64 => 0,
        65..=128 => 1,
        129..=384 => 2,
        385..=640 => 3,
        641..=1152 => 4,
        1153..=2176 => 5,
        2177..=4224 => 6,
        _ => CLASSES - 1,
    }
}

/// Handle of a packet in a [`PacketPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PacketId(u32);

impl PacketId {
    /// An id that names no packet yet (filled in when the packet enters a pool).
    pub(crate) fn placeholder() -> Self {
        PacketId(u32::MAX)
    }

    /// The slot index (stable for the packet's lifetime, reused afterwards).
    pub fn index(self) -> u32 {
        self.0
    }
}

/// Whether the trailing ICRC/VCRC bytes of a packet have been computed into its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcState {
    /// Logically correct for the current contents and VL, not written into the buffer.
    Implicit,
    /// Written into the buffer and valid for the current VL.
    Materialized,
    /// Bits were flipped after materialisation: the receiver must check the real CRCs.
    Corrupted,
}

/// What the fabric knows about a packet without parsing it; set by the encapsulating HCA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketMeta {
    /// Destination LID (LRH DLID).
    pub dlid: u16,
    /// Source LID (LRH SLID).
    pub slid: u16,
    /// Service level (LRH SL), constant end to end.
    pub sl: u8,
    /// Virtual lane on the link the packet is currently on (rewritten per hop from SL2VL).
    pub vl: u8,
    /// Length in bytes, LRH through VCRC.
    pub len: u16,
    /// Length in 64-byte credit blocks.
    pub blocks: u16,
    /// Free-form tag of the traffic source (flow number) for statistics.
    pub flow: u32,
    /// When the source HCA handed the packet to its port.
    pub injected_at: Picos,
    /// CRC materialisation state.
    pub crc: CrcState,
    /// Marked bad by a cut-through switch that had already started forwarding it when its
    /// CRC failed (the EBP delimiter, IBA 7.8.3): every later receiver counts it in
    /// PortRcvRemotePhysicalErrors and the destination drops it.
    pub ebp: bool,
    /// A payload of zeros not written into the buffer (see the module documentation);
    /// `None` when every byte is in the buffer.
    pub zero_payload: Option<ZeroSpan>,
}

/// Bytes of a packet that are zeros by description: `len` bytes from `offset` (counted from
/// the LRH's first byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroSpan {
    /// First byte, from the start of the LRH.
    pub offset: u16,
    /// Number of bytes.
    pub len: u16,
}

impl PacketMeta {
    /// Metadata for a packet of `len` bytes (LRH through VCRC).
    pub fn new(dlid: u16, slid: u16, sl: u8, vl: u8, len: usize) -> Self {
        PacketMeta {
            dlid,
            slid,
            sl,
            vl,
            len: len as u16,
            blocks: blocks_for(len),
            flow: 0,
            injected_at: 0,
            crc: CrcState::Implicit,
            ebp: false,
            zero_payload: None,
        }
    }
}

/// A packet: wire bytes plus metadata, plus per-hop scratch the switch fills when it routes.
#[derive(Debug)]
pub struct Packet {
    /// Parsed header facts.
    pub meta: PacketMeta,
    /// When the packet's last byte reaches the port currently holding it (cut-through).
    pub(crate) tail_at: Picos,
    /// Link epoch of the sending port when the packet was sent (see `Port::epoch`; both
    /// ends of a link change epoch together).
    pub(crate) epoch: u32,
    /// The receiving port accounted the packet in its buffer when its head arrived.
    pub(crate) accounted: bool,
    /// The receiving port refused it when its head arrived (VL not operational, buffer
    /// overrun; counted then): its arrival only frees it.
    pub(crate) rejected: bool,
    /// Output port (global index) chosen by the switch holding the packet.
    pub(crate) out_port: u32,
    /// Output VL chosen by SL2VL at the switch holding the packet.
    pub(crate) out_vl: u8,
    buf: Vec<u8>,
}

impl Packet {
    /// A packet from its parts (read back from another partition's bytes): the meta, the
    /// per-hop state (tail arrival, epoch, accounted, rejected), the switch's choice (output
    /// port, VL) and `meta.len` bytes.
    pub(crate) fn from_parts(
        meta: PacketMeta,
        (tail_at, epoch, accounted, rejected): (Picos, u32, bool, bool),
        (out_port, out_vl): (u32, u8),
        buf: Vec<u8>,
    ) -> Self {
        Packet {
            meta,
            tail_at,
            epoch,
            accounted,
            rejected,
            out_port,
            out_vl,
            buf,
        }
    }

    /// The wire bytes, LRH through VCRC (the last six are meaningful only once materialised).
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.meta.len as usize]
    }

    /// The wire bytes, mutable (the encapsulating HCA writes them).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.meta.len as usize]
    }

    /// Writes a described zero payload ([`PacketMeta::zero_payload`]) into the buffer, so
    /// [`Packet::bytes`] is the whole packet. Nothing to do for a packet without one.
    pub fn materialize_payload(&mut self) {
        if let Some(z) = self.meta.zero_payload.take() {
            let start = z.offset as usize;
            let end = (start + z.len as usize).min(self.meta.len as usize);
            self.buf[start.min(end)..end].fill(0);
        }
    }
}

/// Errors from the packet pool.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PacketError {
    /// A packet longer than the IBA maximum was requested.
    #[error(
        "packet of {len} bytes exceeds the InfiniBand maximum of {max} bytes (LRH through VCRC)"
    )]
    TooLong {
        /// Requested length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// A packet shorter than an LRH plus ICRC and VCRC was requested.
    #[error("packet of {len} bytes is shorter than LRH + ICRC + VCRC (14 bytes)")]
    TooShort {
        /// Requested length.
        len: usize,
    },
}

/// Recycling store of packet buffers.
#[derive(Default)]
pub struct PacketPool {
    slots: Vec<Packet>,
    free: [Vec<u32>; CLASSES],
    live: usize,
    peak_live: usize,
}

impl PacketPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// A packet slot with `meta.len` bytes of buffer (contents unspecified: the caller writes
    /// them). Reuses a freed buffer of the same size class when there is one.
    pub fn alloc(&mut self, meta: PacketMeta) -> Result<PacketId, PacketError> {
        let len = meta.len as usize;
        if len > MAX_PACKET_BYTES {
            return Err(PacketError::TooLong {
                len,
                max: MAX_PACKET_BYTES,
            });
        }
        if len < 14 {
            return Err(PacketError::TooShort { len });
        }
        let class = class_of(len);
        self.live += 1;
        self.peak_live = self.peak_live.max(self.live);
        if let Some(idx) = self.free[class].pop() {
            let p = &mut self.slots[idx as usize];
            p.meta = meta;
            p.tail_at = 0;
            p.epoch = 0;
            p.accounted = false;
            p.rejected = false;
            return Ok(PacketId(idx));
        }
        let idx = self.slots.len() as u32;
        self.slots.push(Packet {
            meta,
            tail_at: 0,
            epoch: 0,
            accounted: false,
            rejected: false,
            out_port: 0,
            out_vl: 0,
            buf: vec![0; CLASS_BYTES[class]],
        });
        Ok(PacketId(idx))
    }

    /// Returns a packet's buffer to the pool. The id must not be used afterwards.
    pub fn free(&mut self, id: PacketId) {
        let class = class_of(self.slots[id.0 as usize].buf.len());
        self.free[class].push(id.0);
        self.live -= 1;
    }

    /// Moves a packet out of its slot (leaving an empty one) so it can be read while the
    /// pool is borrowed elsewhere; pair with [`PacketPool::put_back`].
    pub(crate) fn take(&mut self, id: PacketId) -> Packet {
        let slot = &mut self.slots[id.0 as usize];
        Packet {
            meta: slot.meta,
            tail_at: slot.tail_at,
            epoch: slot.epoch,
            accounted: slot.accounted,
            rejected: slot.rejected,
            out_port: slot.out_port,
            out_vl: slot.out_vl,
            buf: std::mem::take(&mut slot.buf),
        }
    }

    /// Returns a packet taken with [`PacketPool::take`] to its slot.
    pub(crate) fn put_back(&mut self, id: PacketId, p: Packet) {
        self.slots[id.0 as usize] = p;
    }

    /// Moves a packet out of the pool for another partition of the fabric (a copy of its
    /// bytes; its slot is freed).
    pub(crate) fn export(&mut self, id: PacketId) -> Packet {
        let slot = &self.slots[id.0 as usize];
        let p = Packet {
            meta: slot.meta,
            tail_at: slot.tail_at,
            epoch: slot.epoch,
            accounted: slot.accounted,
            rejected: slot.rejected,
            out_port: slot.out_port,
            out_vl: slot.out_vl,
            buf: slot.buf[..slot.meta.len as usize].to_vec(),
        };
        self.free(id);
        p
    }

    /// Takes in a packet another partition exported.
    pub(crate) fn import(&mut self, p: Packet) -> PacketId {
        let id = self
            .alloc(p.meta)
            .expect("an exported packet has a valid length");
        let slot = &mut self.slots[id.0 as usize];
        slot.tail_at = p.tail_at;
        slot.epoch = p.epoch;
        slot.accounted = p.accounted;
        slot.rejected = p.rejected;
        slot.out_port = p.out_port;
        slot.out_vl = p.out_vl;
        slot.buf[..p.buf.len()].copy_from_slice(&p.buf);
        id
    }

    /// Two distinct packets at once, the first shared, the second mutable.
    pub(crate) fn pair_mut(&mut self, a: PacketId, b: PacketId) -> (&Packet, &mut Packet) {
        assert_ne!(a, b, "pair_mut needs two packets");
        let (ai, bi) = (a.0 as usize, b.0 as usize);
        if ai < bi {
            let (lo, hi) = self.slots.split_at_mut(bi);
            (&lo[ai], &mut hi[0])
        } else {
            let (lo, hi) = self.slots.split_at_mut(ai);
            (&hi[0], &mut lo[bi])
        }
    }

    /// The packet behind `id`.
    pub fn get(&self, id: PacketId) -> &Packet {
        &self.slots[id.0 as usize]
    }

    /// The packet behind `id`, mutable.
    pub fn get_mut(&mut self, id: PacketId) -> &mut Packet {
        &mut self.slots[id.0 as usize]
    }

    /// Packets currently allocated.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Most packets ever allocated at once.
    pub fn peak_live(&self) -> usize {
        self.peak_live
    }

    /// Buffers the pool owns (live or free): the steady-state memory footprint.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_ranges_match_class_bytes() {
        for len in 0..=MAX_PACKET_BYTES + 1 {
            let by_table = CLASS_BYTES
                .iter()
                .position(|&c| c >= len)
                .unwrap_or(CLASSES - 1);
            assert_eq!(class_of(len), by_table, "length {len}");
        }
    }

    #[test]
    fn blocks_round_up_to_64_bytes() {
        assert_eq!(blocks_for(64), 1);
        assert_eq!(blocks_for(65), 2);
        assert_eq!(blocks_for(4096 + 26), 65);
        assert_eq!(blocks_for(MAX_PACKET_BYTES), 128);
    }

    #[test]
    fn freed_buffers_are_reused_by_size_class() {
        let mut pool = PacketPool::new();
        let a = pool.alloc(PacketMeta::new(1, 2, 0, 0, 4122)).unwrap();
        let b = pool.alloc(PacketMeta::new(1, 2, 0, 0, 30)).unwrap();
        assert_eq!(pool.slots(), 2);
        pool.free(a);
        pool.free(b);
        // Same classes again: no new buffers.
        let c = pool.alloc(PacketMeta::new(3, 4, 0, 0, 30)).unwrap();
        let d = pool.alloc(PacketMeta::new(3, 4, 0, 0, 4185)).unwrap();
        assert_eq!(pool.slots(), 2);
        assert_eq!(c, b);
        assert_eq!(d, a);
        assert_eq!(pool.get(d).bytes().len(), 4185);
        assert_eq!(pool.live(), 2);
        assert_eq!(pool.peak_live(), 2);
        // A class with no free buffer allocates.
        pool.alloc(PacketMeta::new(3, 4, 0, 0, 1000)).unwrap();
        assert_eq!(pool.slots(), 3);
    }

    #[test]
    fn a_described_payload_is_written_exactly_where_it_is_described() {
        let mut pool = PacketPool::new();
        let id = pool.alloc(PacketMeta::new(1, 2, 0, 0, 100)).unwrap();
        let p = pool.get_mut(id);
        p.bytes_mut().fill(0xEE);
        p.meta.zero_payload = Some(ZeroSpan {
            offset: 20,
            len: 64,
        });
        let mut image = Vec::new();
        crate::crc::wire_image(p, &mut image);
        p.materialize_payload();
        assert_eq!(p.meta.zero_payload, None);
        let b = p.bytes();
        assert!(b[..20].iter().all(|&x| x == 0xEE));
        assert!(b[20..84].iter().all(|&x| x == 0));
        assert!(b[84..].iter().all(|&x| x == 0xEE));
        // The wire image shows the same zeros (its first byte carries the VL nibble from
        // `meta`, its last six the CRCs).
        assert_eq!(image[1..94], b[1..94]);
        // Twice is once; a span past the end stops at the end.
        p.materialize_payload();
        p.meta.zero_payload = Some(ZeroSpan {
            offset: 90,
            len: 64,
        });
        p.materialize_payload();
        assert!(p.bytes()[90..].iter().all(|&x| x == 0));
        assert_eq!(p.bytes()[89], 0xEE);
    }

    #[test]
    fn rejects_impossible_lengths() {
        let mut pool = PacketPool::new();
        assert!(matches!(
            pool.alloc(PacketMeta::new(1, 2, 0, 0, MAX_PACKET_BYTES + 1)),
            Err(PacketError::TooLong { .. })
        ));
        assert!(matches!(
            pool.alloc(PacketMeta::new(1, 2, 0, 0, 8)),
            Err(PacketError::TooShort { .. })
        ));
    }
}
