//! A whole transport packet: BTH, the extension headers its opcode implies, payload and pad
//! (everything the ICRC covers after the network headers, without the ICRC itself).
//!
//! Layout (IBA vol. 1, 9.2 and 9.3): BTH, then in this order whichever of RDETH, DETH,
//! XRCETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH the opcode carries (for the
//! RoCEv2 CNP: 16 reserved bytes, Annex A17), then the payload, then PadCnt zero bytes that
//! bring the packet to a multiple of 4 bytes (IBA 9.2.4).
//!
//! [`PacketRepr::parse`] checks, in this order:
//! 1. the BTH is complete, TVer is 0 and the opcode is defined ([`BthRepr::parse`]);
//! 2. every extension header the opcode implies is complete ([`Error::Truncated`] naming it);
//! 3. the packet is a multiple of 4 bytes: all IBA headers are whole 4-byte words and the
//!    payload is padded to one (IBA 9.2.4; the LRH even counts packet length in 4-byte
//!    words), so anything else is malformed;
//! 4. an opcode without payload carries nothing after its headers and PadCnt is 0 (a length
//!    that does not match the opcode is an invalid request, IBA 9.7.5);
//! 5. PadCnt is at most the number of bytes after the headers ([`Error::BadPad`]).
//!
//! Pad bytes are not checked: the sender writes zeros and the receiver ignores them.
//!
//! ```
//! use softib_wire::{CreditCode, Opcode, PacketRepr, Syndrome};
//!
//! // An RC acknowledge as Linux Soft-RoCE sends it (BTH + AETH, ICRC not included).
//! let bytes = [
//!     0x11, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x13, 0x00, 0xA4, 0x2F, 0xF1,
//!     0x1F, 0x00, 0x00, 0x01,
//! ];
//! let packet = PacketRepr::parse(&bytes)?;
//! assert_eq!(packet.opcode(), Opcode::RC_ACKNOWLEDGE);
//! assert_eq!(packet.bth.dest_qp, 0x13);
//! let aeth = packet.aeth.expect("an acknowledge carries an AETH");
//! assert_eq!(aeth.syndrome, Syndrome::Ack { credit: CreditCode::UNLIMITED });
//!
//! let mut out = [0u8; 16];
//! assert_eq!(packet.emit(&mut out)?, packet.buffer_len());
//! assert_eq!(out, bytes);
//! # Ok::<(), softib_wire::Error>(())
//! ```

use crate::aeth::AethRepr;
use crate::atomic_ack_eth::AtomicAckEthRepr;
use crate::atomic_eth::AtomicEthRepr;
use crate::bth::{BthRepr, BTH_LEN};
use crate::bytes::check_emit;
use crate::cnp::CnpRepr;
use crate::deth::DethRepr;
use crate::ieth::Ieth;
use crate::immdt::ImmDt;
use crate::opcode::{ExtHeaders, Opcode};
use crate::rdeth::RdethRepr;
use crate::reth::RethRepr;
use crate::xrceth::XrcethRepr;
use crate::{Error, Result};

/// Pad bytes after a payload of `payload_len` bytes (0..=3), so the packet ends on a 4-byte
/// boundary (IBA 9.2.4).
pub const fn pad_for(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// A parsed (or to-be-emitted) transport packet, BTH through pad, borrowing its payload.
///
/// Exactly the extension headers the opcode implies are `Some` (see [`Opcode::has_reth`] and
/// friends); [`PacketRepr::emit`] refuses a repr that disagrees with its opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketRepr<'a> {
    /// The base transport header.
    pub bth: BthRepr,
    /// RDETH (RD).
    pub rdeth: Option<RdethRepr>,
    /// DETH (UD, RD requests).
    pub deth: Option<DethRepr>,
    /// XRCETH (XRC requests).
    pub xrceth: Option<XrcethRepr>,
    /// RETH (RDMA WRITE First/Only, RDMA READ Request).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (acknowledges, READ response First/Last/Only).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (ATOMIC Acknowledge).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data (the "with Immediate" opcodes), as the big-endian wire value.
    pub immdt: Option<u32>,
    /// R_Key to invalidate (the "with Invalidate" opcodes).
    pub ieth: Option<u32>,
    /// The payload, without pad.
    pub payload: &'a [u8],
}

impl<'a> PacketRepr<'a> {
    /// A packet with the given BTH, no extension headers and no payload; fill in what the
    /// opcode needs before emitting.
    pub const fn new(bth: BthRepr) -> PacketRepr<'a> {
        PacketRepr {
            bth,
            rdeth: None,
            deth: None,
            xrceth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            payload: &[],
        }
    }

    /// Parses BTH through pad (no ICRC). Never allocates, never panics; see the module
    /// documentation for the checks.
    pub fn parse(bytes: &'a [u8]) -> Result<PacketRepr<'a>> {
        let bth = BthRepr::parse(bytes)?;
        let op = bth.opcode;
        let mut at = BTH_LEN;
        let mut packet = PacketRepr::new(bth);

        // Each sub-parse checks its own length and names its header when truncated.
        macro_rules! take {
            ($has:ident, $repr:ty) => {
                if op.$has() {
                    let rest = bytes.get(at..).unwrap_or(&[]);
                    let h = <$repr>::parse(rest)?;
                    at += h.buffer_len();
                    Some(h)
                } else {
                    None
                }
            };
        }
        packet.rdeth = take!(has_rdeth, RdethRepr);
        packet.deth = take!(has_deth, DethRepr);
        packet.xrceth = take!(has_xrceth, XrcethRepr);
        packet.reth = take!(has_reth, RethRepr);
        packet.atomic_eth = take!(has_atomic_eth, AtomicEthRepr);
        packet.aeth = take!(has_aeth, AethRepr);
        packet.atomic_ack_eth = take!(has_atomic_ack_eth, AtomicAckEthRepr);
        packet.immdt = take!(has_immdt, ImmDt).map(|i| i.0);
        packet.ieth = take!(has_ieth, Ieth).map(|i| i.rkey);
        let _cnp_body = take!(has_cnp_body, CnpRepr);

        if bytes.len() % 4 != 0 {
            return Err(Error::Malformed {
                header: "transport packet",
                reason: "length is not a multiple of 4 bytes (IBA 9.2.4)",
            });
        }
        let rest = bytes.get(at..).unwrap_or(&[]);
        let pad = usize::from(bth.pad_count);
        if !op.has_payload() {
            if !rest.is_empty() {
                return Err(Error::BadLength {
                    header: op.name(),
                    claimed: at,
                    available: bytes.len(),
                });
            }
            if pad != 0 {
                return Err(Error::BadPad {
                    pad_count: bth.pad_count,
                    available: 0,
                });
            }
        }
        if pad > rest.len() {
            return Err(Error::BadPad {
                pad_count: bth.pad_count,
                available: rest.len(),
            });
        }
        packet.payload = &rest[..rest.len() - pad];
        Ok(packet)
    }

    /// The opcode (shorthand for `self.bth.opcode`).
    pub const fn opcode(&self) -> Opcode {
        self.bth.opcode
    }

    /// Bytes of BTH plus the extension headers the opcode implies.
    pub const fn header_len(&self) -> usize {
        BTH_LEN + self.bth.opcode.ext_headers_len()
    }

    /// Bytes [`PacketRepr::emit`] writes: headers, payload and pad.
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len() + pad_for(self.payload.len())
    }

    /// Writes the whole packet (headers, payload, zero pad) to the start of `buf`; PadCnt is
    /// set from the payload length whatever `bth.pad_count` says. Returns
    /// [`PacketRepr::buffer_len`]. Fails with [`Error::BufferTooSmall`] for a short buffer
    /// and [`Error::Malformed`] when the extension headers or payload disagree with the
    /// opcode; never panics.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        check_emit(buf, len)?;
        let at = self.emit_headers(buf)?;
        let end = at + self.payload.len();
        buf[at..end].copy_from_slice(self.payload);
        buf[end..len].fill(0);
        Ok(len)
    }

    /// Writes only the headers (BTH with PadCnt for `payload.len()`, extension headers), so
    /// the caller can place `payload.len()` bytes of payload and the pad itself right after
    /// them without an intermediate copy. Returns [`PacketRepr::header_len`].
    pub fn emit_headers(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_headers_for_payload_len(self.payload.len(), buf)
    }

    /// Like [`PacketRepr::emit_headers`], for a payload of `payload_len` bytes the caller will
    /// write after the headers (followed by [`pad_for`]`(payload_len)` zero bytes); `payload`
    /// is not read, so a sender can build headers for data it will copy straight from
    /// registered memory.
    pub fn emit_headers_for_payload_len(
        &self,
        payload_len: usize,
        buf: &mut [u8],
    ) -> Result<usize> {
        self.check_consistent(payload_len)?;
        let header_len = self.header_len();
        check_emit(buf, header_len)?;
        let mut bth = self.bth;
        bth.pad_count = pad_for(payload_len) as u8;
        let mut at = bth.emit(buf)?;
        macro_rules! put {
            ($value:expr) => {
                if let Some(h) = $value {
                    at += h.emit(&mut buf[at..])?;
                }
            };
        }
        put!(self.rdeth);
        put!(self.deth);
        put!(self.xrceth);
        put!(self.reth);
        put!(self.atomic_eth);
        put!(self.aeth);
        put!(self.atomic_ack_eth);
        put!(self.immdt.map(ImmDt));
        put!(self.ieth.map(|rkey| Ieth { rkey }));
        if self.bth.opcode.has_cnp_body() {
            at += CnpRepr.emit(&mut buf[at..])?;
        }
        Ok(at)
    }

    /// Checks that exactly the extension headers the opcode implies are present and that an
    /// opcode without payload has none.
    fn check_consistent(&self, payload_len: usize) -> Result<()> {
        let op = self.bth.opcode;
        // Every packet the engine emits passes: one mask compare, and the named checks
        // below only to say what is wrong.
        let bit = |present: bool, b: u32| if present { b } else { 0 };
        let present = bit(self.rdeth.is_some(), ExtHeaders::RDETH)
            | bit(self.deth.is_some(), ExtHeaders::DETH)
            | bit(self.xrceth.is_some(), ExtHeaders::XRCETH)
            | bit(self.reth.is_some(), ExtHeaders::RETH)
            | bit(self.atomic_eth.is_some(), ExtHeaders::ATOMIC_ETH)
            | bit(self.aeth.is_some(), ExtHeaders::AETH)
            | bit(self.atomic_ack_eth.is_some(), ExtHeaders::ATOMIC_ACK_ETH)
            | bit(self.immdt.is_some(), ExtHeaders::IMMDT)
            | bit(self.ieth.is_some(), ExtHeaders::IETH);
        if present == op.ext_headers() && (payload_len == 0 || op.has_payload()) {
            return Ok(());
        }
        let checks: [(&'static str, bool, bool); 9] = [
            ("RDETH", op.has_rdeth(), self.rdeth.is_some()),
            ("DETH", op.has_deth(), self.deth.is_some()),
            ("XRCETH", op.has_xrceth(), self.xrceth.is_some()),
            ("RETH", op.has_reth(), self.reth.is_some()),
            ("AtomicETH", op.has_atomic_eth(), self.atomic_eth.is_some()),
            ("AETH", op.has_aeth(), self.aeth.is_some()),
            (
                "AtomicAckETH",
                op.has_atomic_ack_eth(),
                self.atomic_ack_eth.is_some(),
            ),
            ("ImmDt", op.has_immdt(), self.immdt.is_some()),
            ("IETH", op.has_ieth(), self.ieth.is_some()),
        ];
        for (header, wanted, present) in checks {
            if wanted && !present {
                return Err(Error::Malformed {
                    header,
                    reason: "the opcode requires this header but the packet has none",
                });
            }
            if present && !wanted {
                return Err(Error::Malformed {
                    header,
                    reason: "the opcode does not carry this header",
                });
            }
        }
        if payload_len != 0 && !op.has_payload() {
            return Err(Error::Malformed {
                header: "payload",
                reason: "the opcode carries no payload",
            });
        }
        Ok(())
    }
}
