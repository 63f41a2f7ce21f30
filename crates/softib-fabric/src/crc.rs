//! Materialising and checking the ICRC and VCRC of a packet (see [`crate::packet`] for why
//! they are lazy). Layouts and CRC definitions come from softib-wire (IBA 7.8.1 VCRC,
//! 7.8.2 ICRC).

use crate::packet::{CrcState, Packet};
use softib_wire::icrc::{icrc_native, ICRC_LEN};
use softib_wire::lrh::{Lnh, LrhPacket, LRH_LEN};
use softib_wire::vcrc::{vcrc, VCRC_LEN};

const GRH_LEN: usize = 40;

fn compute_icrc(bytes: &[u8]) -> Option<u32> {
    let len = bytes.len();
    if len < LRH_LEN + ICRC_LEN + VCRC_LEN {
        return None;
    }
    let lrh: &[u8; LRH_LEN] = bytes[..LRH_LEN].try_into().ok()?;
    let lnh = LrhPacket::new_unchecked(bytes).lnh();
    let icrc_at = len - ICRC_LEN - VCRC_LEN;
    let (grh, transport_start) = if lnh == Lnh::Grh {
        if icrc_at < LRH_LEN + GRH_LEN {
            return None;
        }
        let g: &[u8; GRH_LEN] = bytes[LRH_LEN..LRH_LEN + GRH_LEN].try_into().ok()?;
        (Some(g), LRH_LEN + GRH_LEN)
    } else {
        (None, LRH_LEN)
    };
    let icrc = icrc_native(lrh, grh, &bytes[transport_start..icrc_at]);
    Some(icrc)
}

/// Writes the LRH VL nibble from `meta.vl`, the ICRC and the VCRC into the packet's buffer,
/// so its bytes are exactly what the current link carries (for a capture, or before a fault
/// injection flips bits).
pub fn materialize(p: &mut Packet) {
    if p.meta.crc == CrcState::Corrupted {
        return;
    }
    p.materialize_payload();
    let vl = p.meta.vl;
    let bytes = p.bytes_mut();
    let len = bytes.len();
    {
        let mut lrh = LrhPacket::new_unchecked(&mut bytes[..]);
        let lver = lrh.lver();
        lrh.set_vl_lver(vl, lver);
    }
    if let Some(icrc) = compute_icrc(bytes) {
        let icrc_at = len - ICRC_LEN - VCRC_LEN;
        bytes[icrc_at..icrc_at + ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
        let v = vcrc(&bytes[..len - VCRC_LEN]);
        // Least-significant byte first, as softib-wire defines it (IBA 7.8.2).
        bytes[len - VCRC_LEN..].copy_from_slice(&v.to_le_bytes());
    }
    p.meta.crc = CrcState::Materialized;
}

/// The packet as the current link carries it, into `out`: a copy with the LRH VL, ICRC and
/// VCRC materialised ([`materialize`] without touching the packet; a described zero
/// payload written out), or the bytes as they
/// are when the packet was corrupted on the way. For captures taken where only a shared
/// reference is at hand (an HCA's receive callback).
pub fn wire_image(p: &Packet, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(p.bytes());
    if let Some(z) = p.meta.zero_payload {
        let end = (z.offset as usize + z.len as usize).min(out.len());
        out[(z.offset as usize).min(end)..end].fill(0);
    }
    if p.meta.crc == CrcState::Corrupted {
        return;
    }
    let len = out.len();
    if len < LRH_LEN {
        return;
    }
    {
        let mut lrh = LrhPacket::new_unchecked(&mut out[..]);
        let lver = lrh.lver();
        lrh.set_vl_lver(p.meta.vl, lver);
    }
    if let Some(icrc) = compute_icrc(out) {
        let icrc_at = len - ICRC_LEN - VCRC_LEN;
        out[icrc_at..icrc_at + ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
        let v = vcrc(&out[..len - VCRC_LEN]);
        out[len - VCRC_LEN..].copy_from_slice(&v.to_le_bytes());
    }
}

/// Whether a packet's ICRC and VCRC match its contents. Implicit CRCs are valid by
/// construction.
pub fn crcs_valid(p: &Packet) -> bool {
    if p.meta.crc == CrcState::Implicit {
        return true;
    }
    let bytes = p.bytes();
    let len = bytes.len();
    let Some(icrc) = compute_icrc(bytes) else {
        return false;
    };
    let icrc_at = len - ICRC_LEN - VCRC_LEN;
    let stored_icrc = u32::from_le_bytes(
        bytes[icrc_at..icrc_at + ICRC_LEN]
            .try_into()
            .expect("4 bytes"),
    );
    stored_icrc == icrc && softib_wire::vcrc::check(bytes).is_ok()
}

/// Flips bit `bit` (counted from the first LRH bit) of a packet, materialising its CRCs
/// first so the receiver sees a real mismatch. Bits beyond the packet are ignored.
pub fn flip_bit(p: &mut Packet, bit: usize) {
    materialize(p);
    let bytes = p.bytes_mut();
    if let Some(b) = bytes.get_mut(bit / 8) {
        *b ^= 0x80 >> (bit % 8);
        p.meta.crc = CrcState::Corrupted;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{PacketMeta, PacketPool};
    use softib_wire::lrh::LrhRepr;

    fn packet(pool: &mut PacketPool, vl: u8) -> crate::packet::PacketId {
        let len = 8 + 12 + 64 + 6;
        let id = pool.alloc(PacketMeta::new(5, 9, 0, vl, len)).unwrap();
        let b = pool.get_mut(id).bytes_mut();
        LrhRepr {
            vl: 0,
            lver: 0,
            sl: 0,
            lnh: Lnh::Bth,
            dlid: 5,
            pkt_len_words: ((len - 2) / 4) as u16,
            slid: 9,
        }
        .emit(&mut LrhPacket::new_unchecked(&mut b[..]))
        .unwrap();
        for (i, x) in b[8..len - 6].iter_mut().enumerate() {
            *x = i as u8;
        }
        id
    }

    #[test]
    fn materialised_crcs_check_and_a_flipped_bit_is_caught() {
        let mut pool = PacketPool::new();
        let id = packet(&mut pool, 3);
        let p = pool.get_mut(id);
        assert!(crcs_valid(p), "implicit CRCs are valid by construction");
        materialize(p);
        assert_eq!(p.meta.crc, CrcState::Materialized);
        assert!(crcs_valid(p));
        assert_eq!(p.bytes()[0] >> 4, 3, "VL nibble written from meta");
        softib_wire::vcrc::check(p.bytes()).unwrap();
        flip_bit(p, 8 * 30 + 2);
        assert_eq!(p.meta.crc, CrcState::Corrupted);
        assert!(!crcs_valid(p));
    }

    #[test]
    fn vl_change_keeps_icrc_but_changes_vcrc() {
        let mut pool = PacketPool::new();
        let a = packet(&mut pool, 0);
        let b = packet(&mut pool, 7);
        materialize(pool.get_mut(a));
        materialize(pool.get_mut(b));
        let (pa, pb) = (pool.get(a).bytes().to_vec(), pool.get(b).bytes().to_vec());
        let n = pa.len();
        // ICRC masks the VL (IBA 7.8.1), the VCRC covers it.
        assert_eq!(pa[n - 6..n - 2], pb[n - 6..n - 2]);
        assert_ne!(pa[n - 2..], pb[n - 2..]);
    }
}
