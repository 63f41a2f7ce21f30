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
        bytes[len - VCRC_LEN..].copy_from_slice(&v.to_be_bytes());
    }
    p.meta.crc = CrcState::Materialized;
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
    let stored_vcrc = u16::from_be_bytes([bytes[len - 2], bytes[len - 1]]);
    stored_icrc == icrc && stored_vcrc == vcrc(&bytes[..len - VCRC_LEN])
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
