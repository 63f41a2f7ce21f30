//! Big-endian field access shared by every header view.
//!
//! A header's private `mod field` names each field as a byte range (`Field`), so an accessor
//! reads like the specification's table. The helpers here index the buffer directly: every
//! view calls them only after `check_len` has proved the buffer covers the whole header, which
//! is what makes "no accessor panics after `new_checked`" hold.

/// A field's byte range inside its header.
pub(crate) type Field = core::ops::Range<usize>;

/// Reads a big-endian integer of `field.len()` (at most 8) bytes.
#[inline]
pub(crate) fn get(buf: &[u8], field: Field) -> u64 {
    buf[field]
        .iter()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Writes the low `field.len()` bytes of `value` big-endian.
#[inline]
pub(crate) fn put(buf: &mut [u8], field: Field, mut value: u64) {
    for b in buf[field].iter_mut().rev() {
        *b = value as u8;
        value >>= 8;
    }
}

/// Checks that `buf` holds at least `needed` bytes of the named header.
#[inline]
pub(crate) fn check(header: &'static str, buf: &[u8], needed: usize) -> crate::Result<()> {
    if buf.len() < needed {
        Err(crate::Error::Truncated {
            header,
            needed,
            available: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Checks that an emit buffer holds at least `needed` bytes.
#[inline]
pub(crate) fn check_emit(buf: &[u8], needed: usize) -> crate::Result<()> {
    if buf.len() < needed {
        Err(crate::Error::BufferTooSmall {
            needed,
            available: buf.len(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_and_put_are_big_endian_and_inverse() {
        let mut buf = [0u8; 8];
        put(&mut buf, 1..4, 0x00AB_CDEF);
        assert_eq!(buf, [0, 0xAB, 0xCD, 0xEF, 0, 0, 0, 0]);
        assert_eq!(get(&buf, 1..4), 0xAB_CDEF);
        put(&mut buf, 0..8, 0x0102_0304_0506_0708);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(get(&buf, 0..8), 0x0102_0304_0506_0708);
    }

    #[test]
    fn put_truncates_to_the_field_width() {
        let mut buf = [0u8; 3];
        put(&mut buf, 0..3, 0xFF12_3456);
        assert_eq!(buf, [0x12, 0x34, 0x56]);
    }
}
