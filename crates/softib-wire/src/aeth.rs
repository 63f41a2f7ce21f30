//! ACK Extended Transport Header (IBA vol. 1, 9.3.5): the responder's verdict on RC/RD/XRC
//! requests, carried by Acknowledge, ATOMIC Acknowledge and READ response First/Last/Only.
//!
//! ```text
//!  byte 0  Syndrome   bits 7:5 kind, bits 4:0 credit code / RNR timer / NAK code
//!  1..4    MSN        message sequence number (24 bits)
//! ```
//!
//! Syndrome kinds (IBA 9.3.5, AETH syndrome encoding): `000` ACK with an end-to-end credit
//! code (end-to-end flow control, IBA 9.7.7), `001` RNR NAK with the RNR timer code, `011`
//! NAK with an error code (IBA 9.7.5), `010` and `1xx` reserved.

use crate::bytes::{self, check, check_emit};
use crate::Result;

/// Length of the AETH in bytes.
pub const AETH_LEN: usize = crate::opcode::AETH_LEN;

mod field {
    use crate::bytes::Field;
    pub const SYNDROME: usize = 0;
    pub const MSN: Field = 1..4;
}

const KIND_MASK: u8 = 0xE0;
const VALUE_MASK: u8 = 0x1F;
const KIND_ACK: u8 = 0x00;
const KIND_RNR_NAK: u8 = 0x20;
const KIND_NAK: u8 = 0x60;

/// Receive WQE counts for end-to-end credit codes 0..=30 (IBA 9.3.5 credit-count encoding).
const CREDIT_WQES: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// RNR NAK timer codes 0..=31 in microseconds (IBA 9.3.5 RNR timer encoding). Code 0 is the
/// longest delay, not the shortest.
const RNR_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// An end-to-end flow-control credit code (5 bits) from an ACK syndrome (IBA 9.7.7).
///
/// Only the low five bits are meaningful; wider values are masked wherever they are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CreditCode(pub u8);

impl CreditCode {
    /// Code 31: "invalid" credit count, which a responder sends when it does not count
    /// credits (e.g. its QP uses an SRQ); the requester then sends without credit limit.
    pub const UNLIMITED: CreditCode = CreditCode(31);

    /// The number of receive WQEs this code advertises; `None` for code 31 (unlimited).
    pub fn wqes(self) -> Option<u32> {
        CREDIT_WQES.get(usize::from(self.0 & VALUE_MASK)).copied()
    }

    /// The largest code whose WQE count is at most `n` (so a requester never sends more than
    /// the responder can take): 0 for 0, 5 (6 WQEs) for 7, 30 (32768) for anything larger.
    pub fn for_wqes(n: u32) -> CreditCode {
        let code = CREDIT_WQES.iter().rposition(|&w| w <= n).unwrap_or(0);
        CreditCode(code as u8)
    }
}

/// An RNR NAK timer code (5 bits): how long the requester waits before retrying after a
/// Receiver-Not-Ready NAK (IBA 9.3.5, 9.7.5). Also the `min_rnr_timer` QP attribute.
///
/// Only the low five bits are meaningful; wider values are masked wherever they are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RnrTimer(pub u8);

impl RnrTimer {
    /// The delay in microseconds (code 0 = 655.36 ms, 1 = 10 us, ..., 31 = 491.52 ms).
    pub fn micros(self) -> u32 {
        RNR_MICROS[usize::from(self.0 & VALUE_MASK)]
    }

    /// The delay in nanoseconds.
    pub fn nanos(self) -> u64 {
        u64::from(self.micros()) * 1000
    }

    /// The code with the shortest delay that is at least `micros` (code 0, the longest,
    /// when nothing shorter suffices).
    pub fn at_least_micros(micros: u32) -> RnrTimer {
        let mut best: Option<(u32, u8)> = None;
        for (code, &d) in RNR_MICROS.iter().enumerate() {
            if d >= micros && best.is_none_or(|(b, _)| d < b) {
                best = Some((d, code as u8));
            }
        }
        RnrTimer(best.map_or(0, |(_, c)| c))
    }
}

/// The error code of a NAK syndrome (IBA 9.3.5, 9.7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error; the NAK's BTH PSN is the PSN the responder expected and the
    /// requester retransmits from it (go-back-N).
    PsnSequenceError,
    /// 1: invalid request (unsupported opcode, bad length, ...).
    InvalidRequest,
    /// 2: remote access error (R_Key or bounds check failed).
    RemoteAccessError,
    /// 3: remote operational error (the responder could not complete the operation).
    RemoteOperationalError,
    /// 4: invalid RD request (RD only).
    InvalidRdRequest,
    /// 5..=31: reserved code, kept as received.
    Reserved(u8),
}

impl NakCode {
    /// The code for the low five syndrome bits.
    pub fn from_code(code: u8) -> NakCode {
        match code & VALUE_MASK {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }

    /// The five-bit code.
    pub fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & VALUE_MASK,
        }
    }
}

/// A decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// `000ccccc`: positive acknowledge with an end-to-end credit code.
    Ack {
        /// Credits advertised.
        credit: CreditCode,
    },
    /// `001ttttt`: receiver not ready; retry after the timer.
    RnrNak {
        /// How long to wait.
        timer: RnrTimer,
    },
    /// `011nnnnn`: negative acknowledge.
    Nak(NakCode),
    /// `010xxxxx` or `1xxxxxxx`: reserved, kept as the whole syndrome byte.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte; never fails (reserved encodings become `Reserved`).
    pub fn from_u8(b: u8) -> Syndrome {
        let value = b & VALUE_MASK;
        match b & KIND_MASK {
            KIND_ACK => Syndrome::Ack {
                credit: CreditCode(value),
            },
            KIND_RNR_NAK => Syndrome::RnrNak {
                timer: RnrTimer(value),
            },
            KIND_NAK => Syndrome::Nak(NakCode::from_code(value)),
            _ => Syndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte. `Reserved(b)` encodes as `b` as it is; it round-trips
    /// through [`Syndrome::from_u8`] only for the reserved encodings that function produces.
    pub fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credit } => KIND_ACK | (credit.0 & VALUE_MASK),
            Syndrome::RnrNak { timer } => KIND_RNR_NAK | (timer.0 & VALUE_MASK),
            Syndrome::Nak(code) => KIND_NAK | code.code(),
            Syndrome::Reserved(b) => b,
        }
    }

    /// True for the positive acknowledge.
    pub fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

/// A zero-copy view of an AETH.
#[derive(Debug, Clone)]
pub struct AethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AethPacket<T> {
    /// Wraps a buffer without checking its length (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        AethPacket { buffer }
    }
    /// Wraps a buffer after checking it holds a whole AETH; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer holds a whole AETH.
    pub fn check_len(&self) -> Result<()> {
        check("AETH", self.buffer.as_ref(), AETH_LEN)
    }
    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }
    /// The decoded syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_u8(self.syndrome_raw())
    }
    /// MSN.
    pub fn msn(&self) -> u32 {
        bytes::get(self.buffer.as_ref(), field::MSN) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AethPacket<T> {
    /// Sets the syndrome byte.
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.buffer.as_mut()[field::SYNDROME] = s.to_u8();
    }
    /// Sets the MSN (low 24 bits).
    pub fn set_msn(&mut self, msn: u32) {
        bytes::put(
            self.buffer.as_mut(),
            field::MSN,
            u64::from(msn & 0x00FF_FFFF),
        );
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// What the responder says.
    pub syndrome: Syndrome,
    /// Message sequence number: messages the responder has completed (24 bits, IBA 9.7.5).
    pub msn: u32,
}

impl AethRepr {
    /// Parses an AETH from the start of `buf`. Reserved syndromes are returned as
    /// [`Syndrome::Reserved`] for the transport to reject, not refused here.
    pub fn parse(buf: &[u8]) -> Result<AethRepr> {
        let p = AethPacket::new_checked(buf)?;
        Ok(AethRepr {
            syndrome: p.syndrome(),
            msn: p.msn(),
        })
    }
    /// Bytes [`AethRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        AETH_LEN
    }
    /// Writes the AETH to the start of `buf`; returns [`AETH_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, AETH_LEN)?;
        let mut p = AethPacket::new_unchecked(&mut buf[..AETH_LEN]);
        p.set_syndrome(self.syndrome);
        p.set_msn(self.msn);
        Ok(AETH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use proptest::prelude::*;

    /// The AETH of the first Acknowledge in testdata/captures/rxe-write_bw.pcap: ACK with
    /// credit code 31 (rxe does not count credits), MSN 1.
    const RXE_ACK: [u8; 4] = [0x1F, 0x00, 0x00, 0x01];

    #[test]
    fn parses_known_bytes() {
        assert_eq!(
            AethRepr::parse(&RXE_ACK),
            Ok(AethRepr {
                syndrome: Syndrome::Ack {
                    credit: CreditCode::UNLIMITED
                },
                msn: 1
            })
        );
        assert_eq!(
            AethRepr::parse(&[0x60, 0xAB, 0xCD, 0xEF]),
            Ok(AethRepr {
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                msn: 0xAB_CDEF
            })
        );
        assert_eq!(
            AethRepr::parse(&[0x2E, 0, 0, 7]),
            Ok(AethRepr {
                syndrome: Syndrome::RnrNak {
                    timer: RnrTimer(14)
                },
                msn: 7
            })
        );
    }

    #[test]
    fn emits_known_bytes() {
        let repr = AethRepr {
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
            msn: 0x01_0203,
        };
        let mut buf = [0xFFu8; 4];
        assert_eq!(repr.emit(&mut buf), Ok(AETH_LEN));
        assert_eq!(buf, [0x62, 0x01, 0x02, 0x03]);
        let ack = AethRepr {
            syndrome: Syndrome::Ack {
                credit: CreditCode::UNLIMITED,
            },
            msn: 1,
        };
        ack.emit(&mut buf).unwrap();
        assert_eq!(buf, RXE_ACK);
    }

    #[test]
    fn syndrome_kinds_decode_per_the_top_three_bits() {
        assert_eq!(
            Syndrome::from_u8(0x05),
            Syndrome::Ack {
                credit: CreditCode(5)
            }
        );
        assert_eq!(
            Syndrome::from_u8(0x61),
            Syndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            Syndrome::from_u8(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            Syndrome::from_u8(0x64),
            Syndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(Syndrome::from_u8(0x65), Syndrome::Nak(NakCode::Reserved(5)));
        assert_eq!(Syndrome::from_u8(0x40), Syndrome::Reserved(0x40));
        assert_eq!(Syndrome::from_u8(0x9F), Syndrome::Reserved(0x9F));
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_u8(b).to_u8(), b);
        }
    }

    #[test]
    fn credit_codes_follow_the_table() {
        assert_eq!(CreditCode(0).wqes(), Some(0));
        assert_eq!(CreditCode(5).wqes(), Some(6));
        assert_eq!(CreditCode(30).wqes(), Some(32768));
        assert_eq!(CreditCode::UNLIMITED.wqes(), None);
        assert_eq!(CreditCode::for_wqes(0), CreditCode(0));
        assert_eq!(CreditCode::for_wqes(7), CreditCode(5));
        assert_eq!(CreditCode::for_wqes(8), CreditCode(6));
        assert_eq!(CreditCode::for_wqes(u32::MAX), CreditCode(30));
        for code in 0..31u8 {
            let n = CreditCode(code).wqes().unwrap();
            assert_eq!(CreditCode::for_wqes(n), CreditCode(code));
        }
    }

    #[test]
    fn rnr_timer_codes_follow_the_table() {
        assert_eq!(RnrTimer(0).micros(), 655_360);
        assert_eq!(RnrTimer(1).micros(), 10);
        assert_eq!(RnrTimer(14).micros(), 1280);
        assert_eq!(RnrTimer(31).micros(), 491_520);
        assert_eq!(RnrTimer(12).nanos(), 640_000);
        assert_eq!(RnrTimer::at_least_micros(0), RnrTimer(1));
        assert_eq!(RnrTimer::at_least_micros(1000), RnrTimer(14));
        assert_eq!(RnrTimer::at_least_micros(500_000), RnrTimer(0));
        assert_eq!(RnrTimer::at_least_micros(700_000), RnrTimer(0));
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..AETH_LEN {
            assert!(matches!(
                AethRepr::parse(&RXE_ACK[..n]),
                Err(Error::Truncated { header: "AETH", .. })
            ));
        }
        let repr = AethRepr::parse(&RXE_ACK).unwrap();
        assert!(matches!(
            repr.emit(&mut [0u8; 3]),
            Err(Error::BufferTooSmall { .. })
        ));
    }

    proptest! {
        #[test]
        fn emit_then_parse_is_identity(syndrome: u8, msn in 0u32..1 << 24) {
            let repr = AethRepr { syndrome: Syndrome::from_u8(syndrome), msn };
            let mut buf = [0u8; AETH_LEN];
            prop_assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
            prop_assert_eq!(AethRepr::parse(&buf), Ok(repr));
        }
    }
}
