//! Where switch congestion marking (IBA Annex A10) attaches.
//!
//! A switch decides to mark FECN on a packet leaving a congested output VL. The decision
//! point is the moment an output port of a switch grants a data packet (after VL arbitration,
//! before the packet goes on the wire): [`CongestionMarker::mark`] sees the output VL's state
//! ([`OutputState`]) and the packet, and returns whether to set the FECN bit of its BTH. The
//! Annex A10 implementation (per-port Threshold, Marking_Rate, Packet_Size, Victim_Mask, with
//! its random stream from [`crate::rng::StreamKind::Marking`]) implements this trait; without
//! a marker nothing is marked.
//!
//! The state offered: how long the granted packet waited at the head of its input FIFO for
//! this output (the output-queued equivalent of the queue ahead of it, without the
//! head-of-line blocking other outputs caused), the blocks of all packets routed to this
//! output VL and not yet sent (wherever they wait in the input buffers), whether the output
//! has been held back by credits, the credits the downstream receiver has left for the VL,
//! and how long the VL has been waiting with data queued.

use crate::packet::PacketMeta;
use crate::time::Picos;

/// The state of a switch output VL at a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputState {
    /// Simulated time.
    pub now: Picos,
    /// Index of the switch in the topology's node list.
    pub node: u32,
    /// Output port number.
    pub port: u8,
    /// Output VL.
    pub vl: u8,
    /// 64-byte blocks of packets routed to this output VL and not yet sent, including this
    /// one.
    pub queued_blocks: u32,
    /// How long the granted packet waited at the head of its input FIFO for this output VL
    /// (from its request, or from when its input's crossbar port freed if that was later,
    /// to this grant): the part of its queueing delay this output caused. Time spent further
    /// back in the FIFO, behind packets bound elsewhere, is not counted.
    pub head_wait_ps: Picos,
    /// `head_wait_ps` in 64-byte blocks of this output's link time: the data an
    /// output-queued port would have held ahead of the packet (rounded down).
    pub head_wait_blocks: u32,
    /// How many times this output VL has been found blocked on credits with a packet
    /// waiting (monotonic, one count per blocked spell): a rise since the previous grant
    /// means the output is held back by congestion further on.
    pub credit_stalls: u64,
    /// Credits (blocks) the downstream receiver has left for this VL before this packet.
    pub credits: u16,
    /// Picoseconds this VL had data queued without sending since its last transmission.
    pub waited_ps: Picos,
    /// Requests for this output VL at the grant, the granted one included: the number of
    /// input heads (or the HCA itself) contending for it. Packets further back in an input
    /// FIFO count in `queued_blocks` but not here (they may be held by another head).
    pub requests: u16,
}

/// A switch congestion-marking policy.
pub trait CongestionMarker {
    /// Whether to set FECN on `packet`, which output `state` is about to send.
    fn mark(&mut self, state: &OutputState, packet: &PacketMeta) -> bool;
}

/// Sets the FECN bit in the BTH of a packet (LRH, optional GRH, then BTH). Returns false if
/// the packet has no BTH (raw or malformed), in which case nothing changes.
pub(crate) fn set_fecn(bytes: &mut [u8]) -> bool {
    use softib_wire::bth::BthPacket;
    use softib_wire::lrh::{Lnh, LrhPacket, LRH_LEN};
    let Ok(lrh) = LrhPacket::new_checked(&*bytes) else {
        return false;
    };
    let off = match lrh.lnh() {
        Lnh::Bth => LRH_LEN,
        Lnh::Grh => LRH_LEN + 40,
        _ => return false,
    };
    let Some(bth) = bytes.get_mut(off..) else {
        return false;
    };
    match BthPacket::new_checked(bth) {
        Ok(mut b) => {
            b.set_fecn(true);
            true
        }
        Err(_) => false,
    }
}
