//! The layout of a 32-bit L_Key / R_Key: a 24-bit table index above an 8-bit key byte
//! (IBA vol. 1 §10.6.2). Regions take the indexes below [`MW_INDEX_BASE`], windows the
//! ones from it, so a key says by itself which table to look in.

/// The 24-bit index part of a key.
pub(crate) fn key_index(key: u32) -> usize {
    (key >> 8) as usize
}

/// The first 24-bit key index used for windows; region indexes stay below it.
pub(crate) const MW_INDEX_BASE: usize = 1 << 23;

/// True when `key` names a window rather than a region.
pub(crate) fn is_window_key(key: u32) -> bool {
    key_index(key) >= MW_INDEX_BASE
}
