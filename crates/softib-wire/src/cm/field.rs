//! The field layout the CM message codecs share (IBA vol. 1 §12.6): the length of the CM
//! class data, sub-byte fields in IBA's bit numbering, fixed-length byte fields and the
//! length check. Apart from `mod.rs`, which dispatches to the codecs, so the codecs do not
//! import their dispatcher.

use crate::mad::{MAD_HEADER_LEN, MAD_LEN};
use crate::Result;

/// Length of the CM class data (a MAD minus its common header).
pub const CM_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// A sub-byte field: `width` bits starting `msb_offset` bits below the most significant bit
/// of byte `byte` (IBA's bit numbering within a byte, bit 0 = MSB).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bits {
    pub byte: usize,
    pub msb_offset: u8,
    pub width: u8,
}

impl Bits {
    pub(crate) const fn new(byte: usize, msb_offset: u8, width: u8) -> Bits {
        Bits {
            byte,
            msb_offset,
            width,
        }
    }
    fn shift_mask(self) -> (u8, u8) {
        let shift = 8 - self.msb_offset - self.width;
        let mask = ((1u16 << self.width) - 1) as u8;
        (shift, mask)
    }
    /// Reads the field; the caller has checked the buffer length.
    pub(crate) fn get(self, buf: &[u8]) -> u8 {
        let (shift, mask) = self.shift_mask();
        (buf[self.byte] >> shift) & mask
    }
    /// Writes the low `width` bits of `value`, leaving the byte's other bits alone.
    pub(crate) fn put(self, buf: &mut [u8], value: u8) {
        let (shift, mask) = self.shift_mask();
        buf[self.byte] = (buf[self.byte] & !(mask << shift)) | ((value & mask) << shift);
    }
}

/// Copies a fixed-length field out of the class data.
pub(crate) fn array<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[at..at + N]);
    out
}

/// Checks the class data holds all 232 bytes.
pub(crate) fn check_data(name: &'static str, data: &[u8]) -> Result<()> {
    crate::bytes::check(name, data, CM_DATA_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_iba_numbering() {
        let mut b = [0u8; 1];
        Bits::new(0, 0, 5).put(&mut b, 20);
        Bits::new(0, 5, 3).put(&mut b, 7);
        assert_eq!(b[0], 0xa7);
        assert_eq!(Bits::new(0, 0, 5).get(&b), 20);
        assert_eq!(Bits::new(0, 5, 3).get(&b), 7);
        assert_eq!(Bits::new(0, 7, 1).get(&b), 1);
    }
}
