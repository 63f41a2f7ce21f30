//! Link-level credit arithmetic (IBA 7.9.4), one instance per data VL per link direction.
//!
//! Credits are 64-byte blocks. The transmitter counts the blocks it has sent, FCTBS (Flow
//! Control Total Blocks Sent), the receiver the blocks it has received, ABR (Adjusted Blocks
//! Received), both modulo 4096. The receiver advertises FCCL (Flow Control Credit Limit) =
//! ABR + the free blocks of its buffer for that VL, and a packet of N blocks may be sent only
//! if `(FCCL - (FCTBS + N)) mod 4096 <= 2048` (IBA 7.9.4.3, C7-58). Because only half the
//! modulus is usable, an advertisement never reaches more than 2048 blocks past ABR.
//!
//! Every flow-control packet carries both directions' facts for one VL: its sender's FCTBS
//! (the receiver then sets its ABR to it, which returns credits a corrupted-and-dropped packet
//! had consumed) and its sender's FCCL.

/// Modulus of FCTBS, ABR and FCCL (12-bit fields).
pub const CREDIT_MODULUS: u16 = 4096;
const MASK: u16 = CREDIT_MODULUS - 1;
/// The largest credit window the modulo-4096 comparison can express.
pub const MAX_WINDOW: u16 = 2048;
/// Bytes of a flow-control packet on the wire (Op:4 FCTBS:12 VL:4 FCCL:12 LPCRC:16).
pub const FC_PACKET_BYTES: u64 = 6;

/// Whether a packet of `blocks` may be sent given the counters (the 2048 rule).
pub fn may_send(fctbs: u16, fccl: u16, blocks: u16) -> bool {
    fccl.wrapping_sub(fctbs.wrapping_add(blocks)) & MASK <= MAX_WINDOW
}

/// Transmit side of one VL: FCTBS and the last FCCL heard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxCredits {
    fctbs: u16,
    fccl: u16,
}

impl TxCredits {
    /// State at link bring-up: nothing sent, no credit until the peer's first flow-control
    /// packet arrives.
    pub fn new() -> Self {
        TxCredits { fctbs: 0, fccl: 0 }
    }

    /// FCTBS, modulo 4096.
    pub fn fctbs(&self) -> u16 {
        self.fctbs
    }

    /// The last FCCL received.
    pub fn fccl(&self) -> u16 {
        self.fccl
    }

    /// Whether a packet of `blocks` may be sent now.
    pub fn can_send(&self, blocks: u16) -> bool {
        may_send(self.fctbs, self.fccl, blocks)
    }

    /// Blocks the peer still has room for (0 when the window is exhausted).
    pub fn available(&self) -> u16 {
        let d = self.fccl.wrapping_sub(self.fctbs) & MASK;
        if d <= MAX_WINDOW {
            d
        } else {
            0
        }
    }

    /// Accounts a packet of `blocks` that was sent.
    pub fn on_send(&mut self, blocks: u16) {
        self.fctbs = self.fctbs.wrapping_add(blocks) & MASK;
    }

    /// A flow-control packet from the peer carried `fccl`.
    pub fn on_fccl(&mut self, fccl: u16) {
        self.fccl = fccl & MASK;
    }
}

/// Receive side of one VL: ABR and the buffer it guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxCredits {
    abr: u16,
    capacity: u32,
    occupied: u32,
}

/// A packet arrived for which the buffer had no room: the transmitter broke the credit rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("receive buffer overrun: {blocks} blocks arrived with {free} free")]
pub struct Overrun {
    /// Size of the arriving packet in blocks.
    pub blocks: u16,
    /// Free blocks at arrival.
    pub free: u32,
}

impl RxCredits {
    /// A receive buffer of `capacity_blocks` 64-byte blocks, empty, ABR 0.
    pub fn new(capacity_blocks: u32) -> Self {
        RxCredits {
            abr: 0,
            capacity: capacity_blocks,
            occupied: 0,
        }
    }

    /// ABR, modulo 4096.
    pub fn abr(&self) -> u16 {
        self.abr
    }

    /// Buffer size in blocks.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Blocks held by packets not yet forwarded or consumed.
    pub fn occupied(&self) -> u32 {
        self.occupied
    }

    /// Free blocks.
    pub fn free(&self) -> u32 {
        self.capacity - self.occupied
    }

    /// The credit limit to advertise: ABR + free blocks, at most 2048 ahead, modulo 4096.
    pub fn fccl(&self) -> u16 {
        let window = self.free().min(MAX_WINDOW as u32) as u16;
        self.abr.wrapping_add(window) & MASK
    }

    /// The credit limit to advertise when `in_flight` of the blocks already accounted by
    /// [`RxCredits::on_receive`] are still on the wire: the real ABR is lower by them and the
    /// real free space larger, which matters only when the 2048-block cap binds.
    pub fn fccl_with_in_flight(&self, in_flight: u32) -> u16 {
        let abr = self.abr.wrapping_sub(in_flight as u16) & MASK;
        let window = (self.free() + in_flight).min(MAX_WINDOW as u32) as u16;
        abr.wrapping_add(window) & MASK
    }

    /// A packet of `blocks` arrived intact and is stored. An overrun leaves the state
    /// unchanged: the caller drops the packet and counts it.
    pub fn on_receive(&mut self, blocks: u16) -> Result<(), Overrun> {
        if blocks as u32 > self.free() {
            return Err(Overrun {
                blocks,
                free: self.free(),
            });
        }
        self.abr = self.abr.wrapping_add(blocks) & MASK;
        self.occupied += blocks as u32;
        Ok(())
    }

    /// A stored packet of `blocks` left the buffer.
    pub fn on_release(&mut self, blocks: u16) {
        debug_assert!(blocks as u32 <= self.occupied);
        self.occupied = self.occupied.saturating_sub(blocks as u32);
    }

    /// A packet already accounted by [`RxCredits::on_receive`] turned out corrupted and is
    /// dropped: it neither occupies the buffer nor counts as received (the sender's next
    /// FCTBS writes its blocks off).
    pub fn on_drop(&mut self, blocks: u16) {
        self.abr = self.abr.wrapping_sub(blocks) & MASK;
        self.occupied = self.occupied.saturating_sub(blocks as u32);
    }

    /// A packet accounted by [`RxCredits::on_receive`] was lost on a link that went down:
    /// it no longer occupies the buffer (ABR is reinitialised when the link comes back).
    pub fn on_lost(&mut self, blocks: u16) {
        self.occupied = self.occupied.saturating_sub(blocks as u32);
    }

    /// Link (re)training: ABR starts again from 0 (IBA 7.9.4.1); stored packets keep their
    /// blocks.
    pub fn reset_abr(&mut self) {
        self.abr = 0;
    }

    /// A flow-control packet carried the peer's FCTBS: resynchronise ABR to it (IBA 7.9.4.3),
    /// which writes off blocks of packets that were lost or dropped on the way.
    pub fn on_fctbs(&mut self, fctbs: u16) {
        self.abr = fctbs & MASK;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_2048_rule() {
        // Exactly the window: allowed.
        assert!(may_send(0, 100, 100));
        // One block too many: (100 - 101) mod 4096 = 4095 > 2048.
        assert!(!may_send(0, 100, 101));
        // A full 2048-block window is usable...
        assert!(may_send(0, 2048, 2048));
        // ... but an FCCL more than 2048 ahead reads as a limit *behind* FCTBS, which is why
        // the receiver never advertises more than 2048 blocks past ABR.
        assert!(!may_send(0, 3000, 1));
        // FCCL equal to FCTBS: no credit.
        assert!(!may_send(7, 7, 1));
        assert!(may_send(7, 7, 0));
    }

    #[test]
    fn counters_wrap_at_4096() {
        // FCTBS near the top, FCCL wrapped past zero: 4090 + 10 = 4100 = 4 (mod 4096).
        assert!(may_send(4090, 4, 10));
        assert!(!may_send(4090, 4, 11));
        let mut tx = TxCredits::new();
        for _ in 0..63 {
            tx.on_send(65);
        }
        assert_eq!(tx.fctbs(), 63 * 65); // 4095: one below the wrap
        tx.on_send(65);
        assert_eq!(tx.fctbs(), (64 * 65) % 4096); // 4160 mod 4096 = 64
        tx.on_fccl(64 + 130);
        assert_eq!(tx.available(), 130);
        assert!(tx.can_send(130));
        assert!(!tx.can_send(131));
    }

    #[test]
    fn receiver_advertises_free_space_capped_at_2048() {
        let mut rx = RxCredits::new(3000);
        assert_eq!(rx.fccl(), 2048); // 3000 free, capped
        rx.on_receive(1000).unwrap();
        assert_eq!(rx.abr(), 1000);
        // 2000 free: 1000 + 2000.
        assert_eq!(rx.fccl(), 3000);
        rx.on_receive(1500).unwrap();
        assert_eq!(rx.fccl(), 2500 + 500);
        rx.on_release(2500);
        assert_eq!(rx.fccl(), (2500 + 2048) % 4096); // wraps: 452
        assert_eq!(rx.fccl(), 452);
    }

    #[test]
    fn sender_and_receiver_agree_over_many_wraps() {
        // A sender that obeys the rule never overruns a 130-block buffer, whatever the
        // release pattern, across many wraps of the 12-bit counters.
        let mut tx = TxCredits::new();
        let mut rx = RxCredits::new(130);
        tx.on_fccl(rx.fccl());
        let mut in_buffer = std::collections::VecDeque::new();
        let mut sent = 0u64;
        for step in 0..20_000u32 {
            let blocks = 1 + (step * 7919 % 65) as u16;
            if tx.can_send(blocks) {
                tx.on_send(blocks);
                rx.on_receive(blocks).expect("credit rule prevents overrun");
                in_buffer.push_back(blocks);
                sent += blocks as u64;
            } else if let Some(b) = in_buffer.pop_front() {
                rx.on_release(b);
            }
            if step % 3 == 0 {
                rx.on_fctbs(tx.fctbs());
                tx.on_fccl(rx.fccl());
            }
        }
        assert!(
            sent > 10 * 4096,
            "counters wrapped many times ({sent} blocks)"
        );
    }

    #[test]
    fn in_flight_blocks_only_matter_under_the_2048_cap() {
        let mut small = RxCredits::new(1000);
        small.on_receive(300).unwrap();
        assert_eq!(small.fccl_with_in_flight(100), small.fccl());
        let mut big = RxCredits::new(10_000);
        big.on_receive(300).unwrap();
        // Really received: 200 blocks; advertised 200 + 2048.
        assert_eq!(big.fccl_with_in_flight(100), 200 + 2048);
        assert_eq!(big.fccl(), 300 + 2048);
    }

    #[test]
    fn fctbs_resync_returns_credits_of_a_lost_packet() {
        let mut tx = TxCredits::new();
        let mut rx = RxCredits::new(100);
        tx.on_fccl(rx.fccl());
        tx.on_send(60); // this packet is corrupted and dropped: rx never stores it
        assert!(!tx.can_send(60));
        // Next flow-control exchange: receiver adopts FCTBS, advertises ABR + 100.
        rx.on_fctbs(tx.fctbs());
        tx.on_fccl(rx.fccl());
        assert_eq!(tx.available(), 100);
    }

    #[test]
    fn overrun_is_reported_and_leaves_state_unchanged() {
        let mut rx = RxCredits::new(10);
        rx.on_receive(8).unwrap();
        assert_eq!(rx.on_receive(3), Err(Overrun { blocks: 3, free: 2 }));
        assert_eq!(rx.abr(), 8);
        assert_eq!(rx.occupied(), 8);
    }
}
