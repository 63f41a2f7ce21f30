//! The MAD common header and SMP fields (IBA vol. 1 §13.4.2, §14.2.1.1-2): reading a request
//! and turning it into its response in place.

/// Every MAD is 256 bytes (IBA §13.4.1).
pub const MAD_LEN: usize = 256;

/// A 256-byte MAD.
pub type Mad = [u8; MAD_LEN];

/// Management classes (IBA §13.4.4).
pub mod class {
    /// LID-routed subnet management.
    pub const SUBN_LID_ROUTED: u8 = 0x01;
    /// Directed-route subnet management.
    pub const SUBN_DIRECTED_ROUTE: u8 = 0x81;
    /// Performance management.
    pub const PERF_MGT: u8 = 0x04;
}

/// Methods (IBA §13.4.5).
pub mod method {
    /// Get.
    pub const GET: u8 = 0x01;
    /// Set.
    pub const SET: u8 = 0x02;
    /// GetResp.
    pub const GET_RESP: u8 = 0x81;
    /// TrapRepress (a response, never answered).
    pub const TRAP_REPRESS: u8 = 0x07;
}

/// MAD status codes (IBA §13.4.7, Table 112), in the 16-bit Status field.
pub mod status {
    /// Success.
    pub const OK: u16 = 0;
    /// Bad version: the class version is not supported.
    pub const BAD_VERSION: u16 = 0x0004;
    /// The method is not supported.
    pub const METHOD_UNSUPPORTED: u16 = 0x0008;
    /// The method/attribute combination is not supported.
    pub const METHOD_ATTR_UNSUPPORTED: u16 = 0x000C;
    /// One or more fields of the attribute or its modifier hold an invalid value.
    pub const INVALID_FIELD: u16 = 0x001C;
}

/// Byte offset of the attribute data in SMPs and PMA MADs (IBA §14.2.1.1, §16.1.1).
pub const SMP_DATA: usize = 64;
/// Size of an SMP's data.
pub const SMP_DATA_LEN: usize = 64;
/// Byte offset of a directed-route SMP's InitialPath (IBA §14.2.1.2).
pub const DR_INITIAL_PATH: usize = 128;
/// Byte offset of a directed-route SMP's ReturnPath.
pub const DR_RETURN_PATH: usize = 192;
/// Largest hop count of a directed-route SMP (IBA §14.2.1.2: 6 bits, at most 63).
pub const MAX_HOPS: u8 = 63;

/// The fields of the common header a request is dispatched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// BaseVersion (1).
    pub base_version: u8,
    /// Management class.
    pub class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method, without the response bit.
    pub method: u8,
    /// The response bit R.
    pub response: bool,
    /// AttributeID.
    pub attr_id: u16,
    /// AttributeModifier.
    pub attr_mod: u32,
}

impl Header {
    /// Reads the common header.
    pub fn parse(m: &Mad) -> Self {
        Header {
            base_version: m[0],
            class: m[1],
            class_version: m[2],
            method: m[3] & 0x7f,
            response: m[3] & 0x80 != 0,
            attr_id: u16::from_be_bytes([m[16], m[17]]),
            attr_mod: u32::from_be_bytes([m[20], m[21], m[22], m[23]]),
        }
    }
}

/// Turns request `m` into its GetResp with `status` (IBA §13.4.6.2: same TID, attribute and
/// modifier; R set). For a directed-route SMP the D bit is set and the status is the 15-bit
/// field after it (IBA §14.2.1.2).
pub fn make_response(m: &mut Mad, status: u16) {
    m[3] = method::GET_RESP;
    if m[1] == class::SUBN_DIRECTED_ROUTE {
        let s = (status & 0x7fff) | 0x8000;
        m[4..6].copy_from_slice(&s.to_be_bytes());
    } else {
        m[4..6].copy_from_slice(&status.to_be_bytes());
    }
}

/// The attribute data of an SMP or PMA MAD.
pub fn data(m: &Mad) -> &[u8] {
    &m[SMP_DATA..]
}

/// The attribute data of an SMP or PMA MAD, to fill in.
pub fn data_mut(m: &mut Mad) -> &mut [u8] {
    &mut m[SMP_DATA..]
}

/// Writes `v` big-endian at `at` of `buf`.
pub fn put_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `at` of `buf`.
pub fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `at` of `buf`.
pub fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_be_bytes());
}
