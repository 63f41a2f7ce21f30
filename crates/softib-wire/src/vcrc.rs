//! The 16-bit CRC of native InfiniBand: the variant CRC (VCRC, IBA vol. 1 7.8.2) that ends
//! every packet on a link, and the link packet CRC (LPCRC, IBA 7.9.4) of flow-control packets.
//!
//! Both use the generator x^16 + x^12 + x^3 + x + 1 (0x100B) with the register seeded to all
//! ones and the result complemented. Like the ICRC, the CRC is defined over the serial bit
//! stream, which an IB link sends least-significant bit of each byte first, so the byte-wise
//! computation is the bit-reflected one (reflected polynomial 0xD008). This is how Endace's
//! DAG capture library (`dagcrc_infiniband_vcrc16_r`: reflected table from 0xD008, seed and
//! final XOR 0xFFFF) computes the VCRC of captured IB frames; Endace wrote Wireshark's
//! InfiniBand/ERF dissector. Wireshark itself (4.0) only displays the VCRC and LPCRC fields
//! and checks neither.
//!
//! Byte order: the value is appended least-significant byte first, exactly as the ICRC is
//! (IBA 7.8.1; confirmed for the ICRC on real rxe frames). With that order a receiver that
//! runs the CRC register over the packet *and* its VCRC always ends on the same residue,
//! which is how serial link hardware checks it.

/// The generator polynomial x^16 + x^12 + x^3 + x + 1, bit-reflected.
const POLY_REFLECTED: u16 = 0xD008;

/// Byte-at-a-time lookup table, built at compile time.
const TABLE: [u16; 256] = build_table();

const fn build_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u16;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ POLY_REFLECTED
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

/// Length of the VCRC field at the end of a native IB packet.
pub const VCRC_LEN: usize = 2;

/// The IB 16-bit CRC of `bytes` (seed 0xFFFF, complemented result), IBA 7.8.2.
///
/// For a packet this is the VCRC over LRH through ICRC; for a flow-control packet the LPCRC
/// over its first four bytes (IBA 7.9.4). Append it with [`u16::to_le_bytes`].
pub fn vcrc(bytes: &[u8]) -> u16 {
    !update(0xFFFF, bytes)
}

/// Runs the CRC register (not complemented) over `bytes`.
fn update(mut crc: u16, bytes: &[u8]) -> u16 {
    for &b in bytes {
        crc = TABLE[usize::from((crc as u8) ^ b)] ^ (crc >> 8);
    }
    crc
}

/// Checks the VCRC that ends `packet` (LRH through ICRC followed by the 2-byte VCRC).
///
/// Returns the received and computed values on mismatch. Under `cfg(fuzzing)` every VCRC is
/// accepted so a fuzzer reaches the code behind the check.
pub fn check(packet: &[u8]) -> crate::Result<()> {
    let Some(split) = packet.len().checked_sub(VCRC_LEN) else {
        return Err(crate::Error::Truncated {
            header: "VCRC",
            needed: VCRC_LEN,
            available: packet.len(),
        });
    };
    let (body, tail) = packet.split_at(split);
    let received = u16::from_le_bytes([tail[0], tail[1]]);
    let computed = vcrc(body);
    if received == computed || cfg!(fuzzing) {
        Ok(())
    } else {
        Err(crate::Error::VcrcMismatch { received, computed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-serial reference straight from the definition: generator 0x100B, seed all ones,
    /// bits taken least-significant first, complemented result.
    fn bitwise(bytes: &[u8]) -> u16 {
        let mut reg: u16 = 0xFFFF;
        for &byte in bytes {
            for i in 0..8 {
                let bit = (byte >> i) & 1;
                let top = ((reg >> 15) & 1) as u8;
                reg <<= 1;
                if top ^ bit != 0 {
                    reg ^= 0x100B;
                }
            }
        }
        // The register holds x^15 in its top bit; the reflected (transmitted) order puts it
        // in bit 0 of the result.
        !reg.reverse_bits()
    }

    #[test]
    fn table_matches_bit_serial_definition() {
        let data: Vec<u8> = (0..=255u8).chain(0..100).collect();
        for len in [0, 1, 2, 3, 7, 8, 64, 300] {
            assert_eq!(vcrc(&data[..len]), bitwise(&data[..len]), "len {len}");
        }
    }

    #[test]
    fn appended_le_vcrc_verifies_and_flipped_bit_fails() {
        let mut pkt = vec![0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0];
        let v = vcrc(&pkt);
        pkt.extend_from_slice(&v.to_le_bytes());
        check(&pkt).unwrap();
        // Running the register over data + VCRC lands on a constant residue.
        let residue = update(0xFFFF, &pkt);
        let mut other = vec![0u8; 20];
        let v2 = vcrc(&other);
        other.extend_from_slice(&v2.to_le_bytes());
        assert_eq!(update(0xFFFF, &other), residue);
        pkt[3] ^= 0x10;
        assert!(matches!(
            check(&pkt),
            Err(crate::Error::VcrcMismatch { .. })
        ));
    }

    #[test]
    fn short_input_is_truncated_not_panic() {
        assert!(matches!(check(&[1]), Err(crate::Error::Truncated { .. })));
    }
}
