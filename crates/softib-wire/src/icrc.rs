//! The invariant CRC (ICRC, IBA vol. 1 7.8.1; RoCEv2: Annex A17.3.3) that ends every
//! InfiniBand transport packet, native or RoCEv2.
//!
//! The ICRC is the Ethernet CRC-32 (generator 0x04C11DB7, bit-reflected, seed all ones,
//! complemented result) over every header field that no switch or router may change, with the
//! variant fields replaced by ones, then the transport headers, payload and pad. It is appended
//! least-significant byte first ([`u32::to_le_bytes`]).
//!
//! Variant fields, replaced by all ones before the CRC is computed:
//! - native, local (LRH + BTH): the LRH VL field (switches remap VLs) and the BTH Resv8a byte
//!   (byte 4: FECN, BECN and six reserved bits, which switches may set), IBA 7.8.1;
//! - native, global (LRH + GRH + BTH): the whole LRH (a router rebuilds it, including SL),
//!   the GRH traffic class, flow label and hop limit, and the BTH Resv8a byte;
//! - RoCEv2 (Annex A17.3.3): eight bytes of ones stand in for the LRH that RoCE does not carry;
//!   IPv4 type of service, TTL and header checksum; IPv6 traffic class, flow label and hop
//!   limit; the UDP checksum; and the BTH Resv8a byte. Everything else of the IP and UDP
//!   headers, notably the IPv4 identification and flags/fragment offset, is covered.
//!   Linux Soft-RoCE (`rxe_icrc.c`) masks the same fields; every frame of the bundled rxe
//!   captures verifies with these rules.
//!
//! The eight-byte stand-in costs nothing: the CRC state after it is a compile-time constant
//! that seeds [`crc32fast::Hasher::new_with_initial`].
//!
//! The CRC is computed over the masked header bytes copied into a small stack buffer, then the
//! rest of the packet straight from the caller's slice, so nothing is allocated.

use crc32fast::Hasher;

/// Length of the ICRC field.
pub const ICRC_LEN: usize = 4;

/// Offset of the BTH Resv8a byte (FECN, BECN, reserved), which the ICRC treats as all ones.
const BTH_RESV8A: usize = 4;
/// BTH length, repeated here so this module does not depend on the transport-layer modules.
const BTH_LEN: usize = 12;

/// Reflected CRC-32 polynomial.
pub(crate) const CRC32_POLY_REFLECTED: u32 = 0xEDB8_8320;

/// CRC-32 of `bytes` computed bit by bit at compile time (only used for constants).
const fn crc32_const(bytes: &[u8]) -> u32 {
    let mut crc: u32 = !0;
    let mut i = 0;
    while i < bytes.len() {
        crc ^= bytes[i] as u32;
        let mut k = 0;
        while k < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ CRC32_POLY_REFLECTED
            } else {
                crc >> 1
            };
            k += 1;
        }
        i += 1;
    }
    !crc
}

/// CRC-32 state after the eight 0xFF bytes that stand in for the LRH (Annex A17.3.3), in the
/// form [`Hasher::new_with_initial`] takes.
const LRH_STANDIN_STATE: u32 = crc32_const(&[0xFF; 8]);

/// A hasher already past the eight-byte all-ones LRH stand-in.
fn hasher_after_lrh_standin() -> Hasher {
    Hasher::new_with_initial(LRH_STANDIN_STATE)
}

/// Copies the BTH (or as much of it as `transport` holds) into `out` with Resv8a set to ones
/// and returns the number of bytes copied.
fn masked_bth(transport: &[u8], out: &mut [u8; BTH_LEN]) -> usize {
    let n = transport.len().min(BTH_LEN);
    out[..n].copy_from_slice(&transport[..n]);
    if n > BTH_RESV8A {
        out[BTH_RESV8A] = 0xFF;
    }
    n
}

/// Sets the variant fields of an IPv6 header or GRH (identical layouts for these fields) to
/// ones: traffic class (bits 4..12), flow label (bits 12..32) and hop limit (byte 7).
fn mask_ipv6_like(h: &mut [u8; 40]) {
    h[0] |= 0x0F;
    h[1] = 0xFF;
    h[2] = 0xFF;
    h[3] = 0xFF;
    h[7] = 0xFF;
}

/// Feeds the masked BTH and everything after it into `hasher` and returns the final ICRC.
fn finish(mut hasher: Hasher, transport: &[u8]) -> u32 {
    let mut bth = [0u8; BTH_LEN];
    let n = masked_bth(transport, &mut bth);
    hasher.update(&bth[..n]);
    hasher.update(&transport[n..]);
    hasher.finalize()
}

/// ICRC of a RoCEv2 packet over IPv4 (Annex A17.3.3).
///
/// `ip_header` is the 20-byte IPv4 header without options, `udp_header` the UDP header,
/// `transport` the BTH through the pad (without the ICRC). Fields the ICRC treats as variant
/// may hold anything.
pub fn icrc_rocev2_ipv4(ip_header: &[u8; 20], udp_header: &[u8; 8], transport: &[u8]) -> u32 {
    // IP + UDP + BTH masked in one buffer: one short CRC update instead of three.
    let mut h = [0u8; 20 + 8 + BTH_LEN];
    h[..20].copy_from_slice(ip_header);
    h[20..28].copy_from_slice(udp_header);
    h[1] = 0xFF; // type of service (DSCP + ECN)
    h[8] = 0xFF; // TTL
    h[10] = 0xFF; // header checksum
    h[11] = 0xFF;
    h[26] = 0xFF; // UDP checksum
    h[27] = 0xFF;
    let mut bth = [0u8; BTH_LEN];
    let n = masked_bth(transport, &mut bth);
    h[28..28 + n].copy_from_slice(&bth[..n]);
    let mut hasher = hasher_after_lrh_standin();
    hasher.update(&h[..28 + n]);
    hasher.update(&transport[n..]);
    hasher.finalize()
}

/// ICRC of a RoCEv2 packet over IPv6 (Annex A17.3.3).
///
/// `ip_header` is the 40-byte IPv6 header (no extension headers: RoCEv2 uses none),
/// `udp_header` the UDP header, `transport` the BTH through the pad (without the ICRC).
pub fn icrc_rocev2_ipv6(ip_header: &[u8; 40], udp_header: &[u8; 8], transport: &[u8]) -> u32 {
    let mut ip = *ip_header;
    mask_ipv6_like(&mut ip);
    let mut udp = *udp_header;
    udp[6] = 0xFF;
    udp[7] = 0xFF;
    let mut hasher = hasher_after_lrh_standin();
    hasher.update(&ip);
    hasher.update(&udp);
    finish(hasher, transport)
}

/// ICRC of a native InfiniBand packet (IBA 7.8.1).
///
/// `lrh` is the 8-byte LRH, `grh` the 40-byte GRH when the LRH's LNH says one follows,
/// `transport` the BTH through the pad (without ICRC and VCRC). For a local packet the LRH is
/// covered except its VL field; for a global packet the LRH is entirely variant (routers
/// rebuild it) and the GRH's traffic class, flow label and hop limit are masked.
pub fn icrc_native(lrh: &[u8; 8], grh: Option<&[u8; 40]>, transport: &[u8]) -> u32 {
    match grh {
        None => {
            let mut l = *lrh;
            l[0] |= 0xF0; // VL
            let mut hasher = Hasher::new();
            hasher.update(&l);
            finish(hasher, transport)
        }
        Some(grh) => {
            let mut g = *grh;
            mask_ipv6_like(&mut g);
            let mut hasher = hasher_after_lrh_standin();
            hasher.update(&g);
            finish(hasher, transport)
        }
    }
}

/// Reads the ICRC stored after `transport` (little-endian, IBA 7.8.1).
pub fn read_icrc(bytes: [u8; 4]) -> u32 {
    u32::from_le_bytes(bytes)
}

/// Compares a received and a computed ICRC; every value passes under `cfg(fuzzing)`.
pub fn check(received: u32, computed: u32) -> crate::Result<()> {
    if received == computed || cfg!(fuzzing) {
        Ok(())
    } else {
        Err(crate::Error::IcrcMismatch { received, computed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(parts: &[&[u8]]) -> u32 {
        let mut h = Hasher::new();
        for p in parts {
            h.update(p);
        }
        h.finalize()
    }

    #[test]
    fn lrh_standin_constant_matches_runtime_crc() {
        assert_eq!(LRH_STANDIN_STATE, reference(&[&[0xFF; 8]]));
        let mut h = hasher_after_lrh_standin();
        h.update(b"abc");
        assert_eq!(h.finalize(), reference(&[&[0xFF; 8], b"abc"]));
    }

    #[test]
    fn ipv4_masks_exactly_tos_ttl_checksums_and_resv8a() {
        let ip: [u8; 20] = [
            0x45, 0x02, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0xab, 0xcd, 10, 0, 0, 1,
            10, 0, 0, 2,
        ];
        let udp: [u8; 8] = [0xc0, 0x01, 0x12, 0xb7, 0x00, 0x28, 0x55, 0x66];
        let transport: Vec<u8> = (0..32u8).collect();
        let base = icrc_rocev2_ipv4(&ip, &udp, &transport);
        let mut ip2 = ip;
        ip2[1] = 0x03;
        ip2[8] = 1;
        ip2[10] = 0;
        ip2[11] = 0;
        let mut udp2 = udp;
        udp2[6] = 0;
        udp2[7] = 0;
        let mut t2 = transport.clone();
        t2[4] = 0x80;
        assert_eq!(icrc_rocev2_ipv4(&ip2, &udp2, &t2), base);
        // A covered field (the identification) changes the ICRC.
        let mut ip3 = ip;
        ip3[5] ^= 1;
        assert_ne!(icrc_rocev2_ipv4(&ip3, &udp, &transport), base);
        // The same value computed the long way round.
        let mut masked = Vec::new();
        masked.extend_from_slice(&[0xFF; 8]);
        let mut m = ip;
        m[1] = 0xFF;
        m[8] = 0xFF;
        m[10] = 0xFF;
        m[11] = 0xFF;
        masked.extend_from_slice(&m);
        masked.extend_from_slice(&[0xc0, 0x01, 0x12, 0xb7, 0x00, 0x28, 0xFF, 0xFF]);
        let mut t = transport.clone();
        t[4] = 0xFF;
        masked.extend_from_slice(&t);
        assert_eq!(reference(&[&masked]), base);
    }

    #[test]
    fn ipv6_masks_tclass_flow_label_hop_limit() {
        let mut ip = [0u8; 40];
        ip[0] = 0x60;
        ip[4] = 0;
        ip[5] = 40;
        ip[6] = 17;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&[0xfe; 16]);
        ip[24..40].copy_from_slice(&[0xfd; 16]);
        let udp = [0xc0, 0x00, 0x12, 0xb7, 0x00, 0x28, 0, 0];
        let transport = [7u8; 24];
        let base = icrc_rocev2_ipv6(&ip, &udp, &transport);
        let mut ip2 = ip;
        ip2[0] = 0x6A;
        ip2[1] = 0x12;
        ip2[2] = 0x34;
        ip2[3] = 0x56;
        ip2[7] = 1;
        assert_eq!(icrc_rocev2_ipv6(&ip2, &udp, &transport), base);
        let mut ip3 = ip;
        ip3[5] = 41;
        assert_ne!(icrc_rocev2_ipv6(&ip3, &udp, &transport), base);
    }

    #[test]
    fn native_local_masks_only_vl_and_global_masks_whole_lrh() {
        let lrh = [0x70, 0x02, 0x00, 0x05, 0x00, 0x08, 0x00, 0x09];
        let transport = [3u8; 20];
        let base = icrc_native(&lrh, None, &transport);
        let mut l2 = lrh;
        l2[0] = 0x10; // other VL
        assert_eq!(icrc_native(&l2, None, &transport), base);
        let mut l3 = lrh;
        l3[1] = 0x32; // other SL: covered in a local packet
        assert_ne!(icrc_native(&l3, None, &transport), base);
        let grh = [0x60u8; 40];
        let g = icrc_native(&lrh, Some(&grh), &transport);
        assert_eq!(icrc_native(&l3, Some(&grh), &transport), g);
        // Global native IB and RoCEv2 over IPv6 share the stand-in and masks, so an IPv6
        // header equal to the GRH plus nothing else gives the same CRC as a GRH packet whose
        // transport starts with those UDP bytes: check the stand-in path is the same.
        let mut h = hasher_after_lrh_standin();
        let mut gm = grh;
        mask_ipv6_like(&mut gm);
        h.update(&gm);
        let mut t = transport;
        t[4] = 0xFF;
        h.update(&t);
        assert_eq!(h.finalize(), g);
    }

    #[test]
    fn short_transport_does_not_panic() {
        let ip = [0u8; 20];
        let udp = [0u8; 8];
        for len in 0..14 {
            let t = vec![1u8; len];
            let _ = icrc_rocev2_ipv4(&ip, &udp, &t);
            let _ = icrc_native(&[0; 8], None, &t);
        }
    }
}
