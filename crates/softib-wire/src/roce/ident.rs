//! Recovering the IPv4 identification from a RoCEv2 ICRC by CRC linearity.
//!
//! The ICRC covers the IPv4 identification, which a UDP socket does not report. CRC-32 is
//! affine over GF(2): for two messages of equal length that differ only in the 16
//! identification bits, the CRCs differ by `e(x) * x^32 mod P(x)`, where `e(x)` is the
//! difference shifted left by the number of bits that follow it. So with `C` the ICRC computed
//! for a guessed identification and `R` the received one, `(R ^ C) * x^-(8k + 32) mod P`, with
//! `k` the bytes after the identification field, is the 16-bit difference when one exists, and
//! a polynomial of degree 16 or more when no identification makes the ICRC correct.
//!
//! Inverse powers of x exist because P(0) = 1. They come from two 256-entry tables built at
//! compile time (`x^-(8j + 32)` and `x^-(2048 j)`), so a recovery costs two carry-less
//! multiplications modulo P and no allocation, ever.
//!
//! Representation: the bit-reflected one the CRC register uses, bit 31 = coefficient of x^0.

use crate::icrc::CRC32_POLY_REFLECTED as POLY;

/// `a(x) * b(x) mod P(x)` in the reflected representation, one bit of `a` at a time. Only
/// used at compile time to build the tables; the run-time path uses [`mulmod_fast`].
const fn mulmod(a: u32, mut b: u32) -> u32 {
    let mut product = 0u32;
    let mut bit = 0;
    while bit < 32 {
        // Coefficient of x^bit in a, branch-free.
        let take = 0u32.wrapping_sub((a >> (31 - bit)) & 1);
        product ^= b & take;
        // b *= x: a right shift, folding x^32 back in as P's low terms.
        let carry = 0u32.wrapping_sub(b & 1);
        b = (b >> 1) ^ (POLY & carry);
        bit += 1;
    }
    product
}

/// `TIMES_X8[n]` = n(x) * x^8 mod P for the low byte n: the CRC-32 byte table, since
/// multiplying by x^8 is what the CRC register does for each zero byte.
static TIMES_X8: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = (c >> 1) ^ (POLY & 0u32.wrapping_sub(c & 1));
            k += 1;
        }
        t[n] = c;
        n += 1;
    }
    t
};

/// `a(x) * b(x) mod P(x)`, Horner's rule over the four bytes of `a` (highest degree first):
/// the eight products `b * x^s` are formed once, each byte of `a` selects a sum of them, and
/// the running product is multiplied by x^8 with the CRC byte table.
fn mulmod_fast(a: u32, b: u32) -> u32 {
    let mut bx = [0u32; 8];
    bx[0] = b;
    for s in 1..8 {
        let prev = bx[s - 1];
        bx[s] = (prev >> 1) ^ (POLY & 0u32.wrapping_sub(prev & 1));
    }
    let mut p = 0u32;
    for j in 0..4 {
        // Byte j of `a` holds x^(31-8j) (bit 0) down to x^(24-8j) (bit 7).
        let digit = a >> (8 * j);
        let mut sum = 0u32;
        for (t, &m) in bx.iter().rev().enumerate() {
            sum ^= m & 0u32.wrapping_sub((digit >> t) & 1);
        }
        p = (p >> 8) ^ TIMES_X8[(p & 0xFF) as usize] ^ sum;
    }
    p
}

/// x^0.
const ONE: u32 = 1 << 31;

/// x^-1 = (P(x) - 1) / x: P's low terms shifted down one degree, plus the x^31 that the
/// division turns x^32 into.
const X_INV: u32 = (POLY << 1) | 1;

const fn pow(base: u32, mut e: u32) -> u32 {
    let mut result = ONE;
    let mut b = base;
    while e != 0 {
        if e & 1 != 0 {
            result = mulmod(result, b);
        }
        b = mulmod(b, b);
        e >>= 1;
    }
    result
}

/// `LOW[j] = x^-(8j + 32)`: the fine part of the shift, with the `x^32` of the CRC folded in.
static LOW: [u32; 256] = {
    let step = pow(X_INV, 8);
    let mut t = [0u32; 256];
    let mut v = pow(X_INV, 32);
    let mut j = 0;
    while j < 256 {
        t[j] = v;
        v = mulmod(v, step);
        j += 1;
    }
    t
};

/// `HIGH[j] = x^-(2048 j)`: the coarse part of the shift (256 bytes per step).
static HIGH: [u32; 256] = {
    let step = pow(X_INV, 2048);
    let mut t = [0u32; 256];
    let mut v = ONE;
    let mut j = 0;
    while j < 256 {
        t[j] = v;
        v = mulmod(v, step);
        j += 1;
    }
    t
};

/// Given `syndrome = received ^ computed` for two messages that differ only in a 16-bit
/// big-endian field followed by `trailing` bytes, returns the XOR difference of that field
/// for which the CRCs agree, or `None` if no value of the field explains the syndrome.
pub(crate) fn field_difference(syndrome: u32, trailing: u16) -> Option<u16> {
    let k = usize::from(trailing);
    let shift = match k >> 8 {
        0 => LOW[k],
        hi => mulmod_fast(LOW[k & 0xFF], HIGH[hi]),
    };
    let m = mulmod_fast(shift, syndrome);
    if m & 0xFFFF != 0 {
        return None;
    }
    // Bits 16..24 hold the first byte's bits 0..8 (sent first = highest degree), 24..32 the
    // second byte's.
    Some(((m >> 16) as u16).swap_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_multiplication_agrees_with_bitwise() {
        let mut a = 0x8765_4321u32;
        let mut b = 0x0F1E_2D3Cu32;
        for _ in 0..1000 {
            assert_eq!(mulmod_fast(a, b), mulmod(a, b));
            a = a.rotate_left(5) ^ b.wrapping_mul(0x9E37_79B9);
            b = b.rotate_right(3) ^ a;
        }
        assert_eq!(mulmod_fast(ONE, 0x1234_5678), 0x1234_5678);
    }

    #[test]
    fn inverse_of_x_is_an_inverse() {
        assert_eq!(mulmod(1 << 30, X_INV), ONE);
        assert_eq!(mulmod(pow(1 << 30, 77), pow(X_INV, 77)), ONE);
    }

    #[test]
    fn recovers_a_field_in_random_messages() {
        let mut seed = 0x1234_5678u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for len in [2usize, 3, 10, 255, 256, 257, 1000, 4200] {
            let mut msg: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let pos = (next() as usize) % (len - 1);
            let truth = u16::from_be_bytes([msg[pos], msg[pos + 1]]);
            let r = crc32fast::hash(&msg);
            let guess = next() as u16;
            msg[pos..pos + 2].copy_from_slice(&guess.to_be_bytes());
            let c = crc32fast::hash(&msg);
            let trailing = (len - pos - 2) as u16;
            let diff = field_difference(r ^ c, trailing).expect("a solution exists");
            assert_eq!(guess ^ diff, truth, "len {len} pos {pos}");
            // A corruption elsewhere is not explained by the field (with this seed).
            msg[pos..pos + 2].copy_from_slice(&truth.to_be_bytes());
            let last = msg.len() - 1;
            if pos + 2 <= last {
                msg[last] ^= 0x01;
                let bad = crc32fast::hash(&msg);
                assert_eq!(field_difference(r ^ bad, trailing), None);
            }
        }
    }
}
