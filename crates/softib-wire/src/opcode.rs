//! BTH opcodes: which service and operation a packet belongs to, which extension headers
//! follow the BTH, and whether a payload does.
//!
//! The opcode byte splits into a 3-bit transport service and a 5-bit operation
//! (IBA vol. 1, 9.2.1 and Table 38 "OpCode field"): RC 0x00, UC 0x20, RD 0x40, UD 0x60,
//! XRC 0xA0 (XRC: IBA Annex A14). 0x81 is the RoCEv2 congestion notification packet
//! (Annex A17). Every other value is reserved or vendor-defined and rejected by
//! [`Opcode::from_u8`], so an `Opcode` always names a packet layout softib understands.
//!
//! The header map follows IBA 9.2 Table 38 ("packet header fields by opcode"):
//! - RD packets always carry an RDETH; RD *requests* also carry a DETH (IBA 9.3.1, 9.3.2);
//! - UD packets carry a DETH (IBA 9.3.2);
//! - XRC *requests* carry an XRCETH right after the BTH (IBA Annex A14);
//! - RETH on RDMA WRITE First/Only(+Imm) and RDMA READ Request (IBA 9.3.3);
//! - AtomicETH on CmpSwap/FetchAdd (IBA 9.3.4);
//! - RETH and an 8-byte payload on RC ATOMIC WRITE (0x1D, added by IBA vol. 1 release 1.5
//!   with the "ATOMIC WRITE" operation of ch. 9; the Linux kernel's `IB_OPCODE_RC_ATOMIC_WRITE`, rxe since
//!   Linux 6.2). IBA 1.5 defines it for RC only here, as rxe does; its response is an
//!   RDMA READ response Only with no payload;
//! - AETH on Acknowledge, ATOMIC Acknowledge and READ response First/Last/Only (IBA 9.3.5);
//! - AtomicAckETH on ATOMIC Acknowledge (IBA 9.3.6);
//! - ImmDt on the "with Immediate" SEND/WRITE opcodes (IBA 9.3.7);
//! - IETH on the "with Invalidate" SEND opcodes (IBA 9.3.8).
//!
//! Extension headers appear on the wire in this fixed order after the BTH: RDETH, DETH,
//! XRCETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, then payload and pad.

use crate::{Error, Result};

/// The transport service an opcode belongs to (the opcode's top three bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Reliable Connection (0x00-0x1F).
    Rc,
    /// Unreliable Connection (0x20-0x3F).
    Uc,
    /// Reliable Datagram (0x40-0x5F).
    Rd,
    /// Unreliable Datagram (0x60-0x7F).
    Ud,
    /// RoCEv2 congestion notification packet (0x81, Annex A17).
    Cnp,
    /// Extended Reliable Connection (0xA0-0xBF, Annex A14).
    Xrc,
}

impl Service {
    /// The service's top three opcode bits (0x80 for CNP, whose one opcode is
    /// `0x80 | Operation::Cnp.bits()` = 0x81).
    pub const fn base(self) -> u8 {
        match self {
            Service::Rc => 0x00,
            Service::Uc => 0x20,
            Service::Rd => 0x40,
            Service::Ud => 0x60,
            Service::Cnp => 0x80,
            Service::Xrc => 0xA0,
        }
    }

    /// The short name softib prints ("RC", "UC", "RD", "UD", "CNP", "XRC").
    pub const fn name(self) -> &'static str {
        match self {
            Service::Rc => "RC",
            Service::Uc => "UC",
            Service::Rd => "RD",
            Service::Ud => "UD",
            Service::Cnp => "CNP",
            Service::Xrc => "XRC",
        }
    }
}

/// The operation an opcode performs (the opcode's low five bits, IBA Table 38).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND First (0x00).
    SendFirst,
    /// SEND Middle (0x01).
    SendMiddle,
    /// SEND Last (0x02).
    SendLast,
    /// SEND Last with Immediate (0x03).
    SendLastImm,
    /// SEND Only (0x04).
    SendOnly,
    /// SEND Only with Immediate (0x05).
    SendOnlyImm,
    /// RDMA WRITE First (0x06).
    WriteFirst,
    /// RDMA WRITE Middle (0x07).
    WriteMiddle,
    /// RDMA WRITE Last (0x08).
    WriteLast,
    /// RDMA WRITE Last with Immediate (0x09).
    WriteLastImm,
    /// RDMA WRITE Only (0x0A).
    WriteOnly,
    /// RDMA WRITE Only with Immediate (0x0B).
    WriteOnlyImm,
    /// RDMA READ Request (0x0C).
    ReadRequest,
    /// RDMA READ response First (0x0D).
    ReadResponseFirst,
    /// RDMA READ response Middle (0x0E).
    ReadResponseMiddle,
    /// RDMA READ response Last (0x0F).
    ReadResponseLast,
    /// RDMA READ response Only (0x10).
    ReadResponseOnly,
    /// Acknowledge (0x11).
    Acknowledge,
    /// ATOMIC Acknowledge (0x12).
    AtomicAcknowledge,
    /// CmpSwap (0x13).
    CompareSwap,
    /// FetchAdd (0x14).
    FetchAdd,
    /// RESYNC (0x15, RD only).
    Resync,
    /// SEND Last with Invalidate (0x16).
    SendLastInv,
    /// SEND Only with Invalidate (0x17).
    SendOnlyInv,
    /// ATOMIC WRITE (0x1D, IBA 1.5): writes its 8-byte payload at the RETH's VA as one
    /// indivisible store, after every earlier request to the QP has been carried out.
    AtomicWrite,
    /// Congestion notification (the whole of opcode 0x81).
    Cnp,
}

impl Operation {
    /// The operation's low five opcode bits (1 for CNP, whose opcode is 0x81).
    pub const fn bits(self) -> u8 {
        match self {
            Operation::SendFirst => 0x00,
            Operation::SendMiddle => 0x01,
            Operation::SendLast => 0x02,
            Operation::SendLastImm => 0x03,
            Operation::SendOnly => 0x04,
            Operation::SendOnlyImm => 0x05,
            Operation::WriteFirst => 0x06,
            Operation::WriteMiddle => 0x07,
            Operation::WriteLast => 0x08,
            Operation::WriteLastImm => 0x09,
            Operation::WriteOnly => 0x0A,
            Operation::WriteOnlyImm => 0x0B,
            Operation::ReadRequest => 0x0C,
            Operation::ReadResponseFirst => 0x0D,
            Operation::ReadResponseMiddle => 0x0E,
            Operation::ReadResponseLast => 0x0F,
            Operation::ReadResponseOnly => 0x10,
            Operation::Acknowledge => 0x11,
            Operation::AtomicAcknowledge => 0x12,
            Operation::CompareSwap => 0x13,
            Operation::FetchAdd => 0x14,
            Operation::Resync => 0x15,
            Operation::SendLastInv => 0x16,
            Operation::SendOnlyInv => 0x17,
            Operation::AtomicWrite => 0x1D,
            Operation::Cnp => 0x01,
        }
    }
}

// Per-opcode facts, packed into one word per opcode byte so every query is one table load.
const VALID: u32 = 1 << 0;
const RDETH: u32 = 1 << 1;
const DETH: u32 = 1 << 2;
const XRCETH: u32 = 1 << 3;
const RETH: u32 = 1 << 4;
const ATOMIC_ETH: u32 = 1 << 5;
const AETH: u32 = 1 << 6;
const ATOMIC_ACK_ETH: u32 = 1 << 7;
const IMMDT: u32 = 1 << 8;
const IETH: u32 = 1 << 9;
const PAYLOAD: u32 = 1 << 10;
const CNP_BODY: u32 = 1 << 11;
const FIRST: u32 = 1 << 12;
const MIDDLE: u32 = 1 << 13;
const LAST: u32 = 1 << 14;
const ONLY: u32 = 1 << 15;
const SEND: u32 = 1 << 16;
const WRITE: u32 = 1 << 17;
const READ_RESPONSE: u32 = 1 << 18;
const RESPONSE: u32 = 1 << 19;
const ATOMIC: u32 = 1 << 20;
const ATOMIC_WRITE: u32 = 1 << 21;

/// Extension-header lengths in bytes (IBA 9.3; XRCETH Annex A14; CNP body Annex A17).
/// The bits of [`Opcode::ext_headers`]: which of the extension headers checked against a
/// packet's contents an opcode implies (the CNP body is the opcode's own, never optional).
pub(crate) struct ExtHeaders;

impl ExtHeaders {
    pub(crate) const RDETH: u32 = RDETH;
    pub(crate) const DETH: u32 = DETH;
    pub(crate) const XRCETH: u32 = XRCETH;
    pub(crate) const RETH: u32 = RETH;
    pub(crate) const ATOMIC_ETH: u32 = ATOMIC_ETH;
    pub(crate) const AETH: u32 = AETH;
    pub(crate) const ATOMIC_ACK_ETH: u32 = ATOMIC_ACK_ETH;
    pub(crate) const IMMDT: u32 = IMMDT;
    pub(crate) const IETH: u32 = IETH;
    /// All of the above.
    pub(crate) const ALL: u32 =
        RDETH | DETH | XRCETH | RETH | ATOMIC_ETH | AETH | ATOMIC_ACK_ETH | IMMDT | IETH;
}

pub(crate) const RDETH_LEN: usize = 4;
pub(crate) const DETH_LEN: usize = 8;
pub(crate) const XRCETH_LEN: usize = 4;
pub(crate) const RETH_LEN: usize = 16;
pub(crate) const ATOMIC_ETH_LEN: usize = 28;
pub(crate) const AETH_LEN: usize = 4;
pub(crate) const ATOMIC_ACK_ETH_LEN: usize = 8;
pub(crate) const IMMDT_LEN: usize = 4;
pub(crate) const IETH_LEN: usize = 4;
pub(crate) const CNP_BODY_LEN: usize = 16;

/// The facts the operation alone decides (header map of IBA Table 38, minus the
/// service-specific RDETH/DETH/XRCETH).
const fn operation_flags(op: Operation) -> u32 {
    match op {
        Operation::SendFirst => SEND | PAYLOAD | FIRST,
        Operation::SendMiddle => SEND | PAYLOAD | MIDDLE,
        Operation::SendLast => SEND | PAYLOAD | LAST,
        Operation::SendLastImm => SEND | PAYLOAD | LAST | IMMDT,
        Operation::SendOnly => SEND | PAYLOAD | ONLY,
        Operation::SendOnlyImm => SEND | PAYLOAD | ONLY | IMMDT,
        Operation::SendLastInv => SEND | PAYLOAD | LAST | IETH,
        Operation::SendOnlyInv => SEND | PAYLOAD | ONLY | IETH,
        Operation::WriteFirst => WRITE | PAYLOAD | FIRST | RETH,
        Operation::WriteMiddle => WRITE | PAYLOAD | MIDDLE,
        Operation::WriteLast => WRITE | PAYLOAD | LAST,
        Operation::WriteLastImm => WRITE | PAYLOAD | LAST | IMMDT,
        Operation::WriteOnly => WRITE | PAYLOAD | ONLY | RETH,
        Operation::WriteOnlyImm => WRITE | PAYLOAD | ONLY | RETH | IMMDT,
        Operation::ReadRequest => RETH,
        Operation::ReadResponseFirst => READ_RESPONSE | RESPONSE | PAYLOAD | FIRST | AETH,
        Operation::ReadResponseMiddle => READ_RESPONSE | RESPONSE | PAYLOAD | MIDDLE,
        Operation::ReadResponseLast => READ_RESPONSE | RESPONSE | PAYLOAD | LAST | AETH,
        Operation::ReadResponseOnly => READ_RESPONSE | RESPONSE | PAYLOAD | ONLY | AETH,
        Operation::Acknowledge => RESPONSE | AETH,
        Operation::AtomicAcknowledge => RESPONSE | AETH | ATOMIC_ACK_ETH,
        Operation::CompareSwap | Operation::FetchAdd => ATOMIC | ATOMIC_ETH,
        Operation::AtomicWrite => ATOMIC_WRITE | RETH | PAYLOAD,
        Operation::Resync => 0,
        Operation::Cnp => CNP_BODY,
    }
}

/// The full facts of one (service, operation) pair, including the service's own headers.
const fn flags(service: Service, op: Operation) -> u32 {
    let f = operation_flags(op);
    let is_request = f & RESPONSE == 0;
    let service_headers = match service {
        Service::Rd if is_request => RDETH | DETH,
        Service::Rd => RDETH,
        Service::Ud => DETH,
        Service::Xrc if is_request => XRCETH,
        _ => 0,
    };
    VALID | f | service_headers
}

macro_rules! opcodes {
    ($( $konst:ident = $value:literal, $service:ident, $op:ident, $name:literal, $ws:expr; )*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", $name, "` (", stringify!($value), ").")]
                pub const $konst: Opcode = Opcode($value);
            )*

            /// Every opcode softib understands, in numeric order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$konst),*];
        }

        /// (service, operation, softib name, Wireshark name) per opcode byte.
        const fn describe(value: u8) -> Option<(Service, Operation, &'static str, Option<&'static str>)> {
            match value {
                $( $value => Some((Service::$service, Operation::$op, $name, $ws)), )*
                _ => None,
            }
        }
    };
}

/// (service, operation) per opcode byte, from `describe` at compile time (reserved values
/// never reach it: an `Opcode` always holds a defined value).
const SERVICE_OPERATION: [(Service, Operation); 256] = {
    let mut t = [(Service::Cnp, Operation::Cnp); 256];
    let mut i = 0;
    while i < 256 {
        if let Some((service, operation, _, _)) = describe(i as u8) {
            t[i] = (service, operation);
        }
        i += 1;
    }
    t
};

/// A BTH opcode softib understands (never a reserved value).
///
/// Build one from a wire byte with [`Opcode::from_u8`], from its parts with [`Opcode::new`],
/// or use the associated constants (`Opcode::RC_SEND_FIRST`, ..., `Opcode::CNP`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(u8);

const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        if let Some((service, op, _, _)) = describe(i as u8) {
            table[i] = flags(service, op);
        }
        i += 1;
    }
    table
};

/// [`Opcode::ext_headers_len`] per opcode byte, at compile time (0 for reserved values).
const EXT_HEADERS_LEN: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode(i as u8).ext_headers_len_of_flags() as u8;
        i += 1;
    }
    t
};

impl Opcode {
    /// The opcode for a wire byte; reserved and vendor-defined values are
    /// [`Error::UnknownOpcode`] (IBA 9.2.1: a reserved opcode makes the packet invalid).
    pub const fn from_u8(value: u8) -> Result<Opcode> {
        if TABLE[value as usize] & VALID != 0 {
            Ok(Opcode(value))
        } else {
            Err(Error::UnknownOpcode(value))
        }
    }

    /// The opcode of `operation` on `service`, or `None` where Table 38 does not define it
    /// (e.g. UC RDMA READ, UD SEND First, any operation but `Cnp` on `Service::Cnp`).
    pub const fn new(service: Service, operation: Operation) -> Option<Opcode> {
        let value = match (service, operation) {
            (Service::Cnp, Operation::Cnp) => 0x81,
            (Service::Cnp, _) | (_, Operation::Cnp) => return None,
            _ => service.base() | operation.bits(),
        };
        match Opcode::from_u8(value) {
            Ok(op) => Some(op),
            Err(_) => None,
        }
    }

    /// The wire byte.
    pub const fn value(self) -> u8 {
        self.0
    }

    const fn describe(self) -> (Service, Operation, &'static str, Option<&'static str>) {
        match describe(self.0) {
            Some(d) => d,
            // An Opcode is only ever built from a value `describe` knows.
            None => (Service::Cnp, Operation::Cnp, "CNP", None),
        }
    }

    /// The transport service.
    pub const fn service(self) -> Service {
        // A table lookup: the engine asks this for every packet, and `describe` (a match
        // building the names too) showed up at ~10% of the per-packet cost in profiles.
        SERVICE_OPERATION[self.0 as usize].0
    }

    /// The operation.
    pub const fn operation(self) -> Operation {
        SERVICE_OPERATION[self.0 as usize].1
    }

    /// The name softib prints, service then operation as in the constant's name,
    /// e.g. `"RC SEND_FIRST"`, `"UD SEND_ONLY_IMM"`, `"CNP"`.
    pub const fn name(self) -> &'static str {
        self.describe().2
    }

    /// The text Wireshark's InfiniBand dissector gives this value in the
    /// `infiniband.bth.opcode` field (its value_string, as `tshark -G values` lists it in
    /// Wireshark 4.0), e.g. `"Reliable Connection (RC) - SEND First"`, for conformance tests.
    /// `None` for the CNP: Wireshark 4.0 names 0x80 "CNP" and shows 0x81 as unknown.
    pub const fn wireshark_name(self) -> Option<&'static str> {
        self.describe().3
    }

    const fn has(self, flag: u32) -> bool {
        TABLE[self.0 as usize] & flag != 0
    }

    /// The extension headers the opcode implies, as a mask of [`ExtHeaders`] bits (one
    /// table read, for the emit path's consistency check).
    pub(crate) const fn ext_headers(self) -> u32 {
        TABLE[self.0 as usize] & ExtHeaders::ALL
    }

    /// An RDETH follows the BTH (every RD packet, IBA 9.3.1).
    pub const fn has_rdeth(self) -> bool {
        self.has(RDETH)
    }
    /// A DETH follows (UD packets and RD requests, IBA 9.3.2).
    pub const fn has_deth(self) -> bool {
        self.has(DETH)
    }
    /// An XRCETH follows the BTH (XRC requests, IBA Annex A14).
    pub const fn has_xrceth(self) -> bool {
        self.has(XRCETH)
    }
    /// A RETH follows (RDMA WRITE First/Only, RDMA READ Request, IBA 9.3.3; ATOMIC WRITE,
    /// IBA 1.5).
    pub const fn has_reth(self) -> bool {
        self.has(RETH)
    }
    /// An AtomicETH follows (CmpSwap, FetchAdd, IBA 9.3.4).
    pub const fn has_atomic_eth(self) -> bool {
        self.has(ATOMIC_ETH)
    }
    /// An AETH follows (Acknowledge, ATOMIC Acknowledge, READ response First/Last/Only,
    /// IBA 9.3.5).
    pub const fn has_aeth(self) -> bool {
        self.has(AETH)
    }
    /// An AtomicAckETH follows (ATOMIC Acknowledge, IBA 9.3.6).
    pub const fn has_atomic_ack_eth(self) -> bool {
        self.has(ATOMIC_ACK_ETH)
    }
    /// Immediate data follows (the "with Immediate" SEND and WRITE opcodes, IBA 9.3.7).
    pub const fn has_immdt(self) -> bool {
        self.has(IMMDT)
    }
    /// An IETH follows (the "with Invalidate" SEND opcodes, IBA 9.3.8).
    pub const fn has_ieth(self) -> bool {
        self.has(IETH)
    }
    /// The 16-byte reserved CNP body follows the BTH (opcode 0x81, Annex A17).
    pub const fn has_cnp_body(self) -> bool {
        self.has(CNP_BODY)
    }
    /// The packet may carry payload (SEND, RDMA WRITE, READ response and ATOMIC WRITE
    /// packets). Other
    /// opcodes carry none: their packet ends with their last extension header.
    pub const fn has_payload(self) -> bool {
        self.has(PAYLOAD)
    }

    /// Total length of the extension headers that follow the BTH for this opcode (a table
    /// read: every packet parsed and emitted asks).
    pub const fn ext_headers_len(self) -> usize {
        EXT_HEADERS_LEN[self.0 as usize] as usize
    }

    /// [`Self::ext_headers_len`] from the flags, for the table.
    const fn ext_headers_len_of_flags(self) -> usize {
        let mut len = 0;
        if self.has_rdeth() {
            len += RDETH_LEN;
        }
        if self.has_deth() {
            len += DETH_LEN;
        }
        if self.has_xrceth() {
            len += XRCETH_LEN;
        }
        if self.has_reth() {
            len += RETH_LEN;
        }
        if self.has_atomic_eth() {
            len += ATOMIC_ETH_LEN;
        }
        if self.has_aeth() {
            len += AETH_LEN;
        }
        if self.has_atomic_ack_eth() {
            len += ATOMIC_ACK_ETH_LEN;
        }
        if self.has_immdt() {
            len += IMMDT_LEN;
        }
        if self.has_ieth() {
            len += IETH_LEN;
        }
        if self.has_cnp_body() {
            len += CNP_BODY_LEN;
        }
        len
    }

    /// First packet of a multi-packet SEND, RDMA WRITE or READ response.
    pub const fn is_first(self) -> bool {
        self.has(FIRST)
    }
    /// Middle packet of a multi-packet SEND, RDMA WRITE or READ response.
    pub const fn is_middle(self) -> bool {
        self.has(MIDDLE)
    }
    /// Last packet of a multi-packet SEND, RDMA WRITE or READ response.
    pub const fn is_last(self) -> bool {
        self.has(LAST)
    }
    /// The only packet of a SEND, RDMA WRITE or READ response. Opcodes that are never
    /// segmented (READ Request, atomics, acknowledges, RESYNC, CNP) are none of
    /// first/middle/last/only.
    pub const fn is_only(self) -> bool {
        self.has(ONLY)
    }
    /// Starts a message: first or only.
    pub const fn starts_message(self) -> bool {
        self.has(FIRST | ONLY)
    }
    /// Ends a message: last or only.
    pub const fn ends_message(self) -> bool {
        self.has(LAST | ONLY)
    }
    /// Any SEND opcode (including with Immediate / with Invalidate).
    pub const fn is_send(self) -> bool {
        self.has(SEND)
    }
    /// Any RDMA WRITE opcode (including with Immediate).
    pub const fn is_write(self) -> bool {
        self.has(WRITE)
    }
    /// Any RDMA READ response opcode.
    pub const fn is_read_response(self) -> bool {
        self.has(READ_RESPONSE)
    }
    /// CmpSwap or FetchAdd.
    pub const fn is_atomic(self) -> bool {
        self.has(ATOMIC)
    }
    /// ATOMIC WRITE (IBA 1.5): RETH plus an 8-byte payload, never segmented, answered by
    /// an RDMA READ response Only without payload. Not [`Opcode::is_atomic`] (which means
    /// the AtomicETH operations) and not [`Opcode::is_write`].
    pub const fn is_atomic_write(self) -> bool {
        self.has(ATOMIC_WRITE)
    }
    /// Sent by the responder: READ responses, Acknowledge, ATOMIC Acknowledge
    /// (IBA 9.7: the responder's packets). Everything else except the CNP is a request.
    pub const fn is_response(self) -> bool {
        self.has(RESPONSE)
    }
}

impl core::fmt::Debug for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Opcode({:#04x} {})", self.0, self.name())
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl TryFrom<u8> for Opcode {
    type Error = Error;
    fn try_from(value: u8) -> Result<Opcode> {
        Opcode::from_u8(value)
    }
}

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> u8 {
        op.0
    }
}

opcodes! {
    RC_SEND_FIRST = 0x00, Rc, SendFirst, "RC SEND_FIRST", Some("Reliable Connection (RC) - SEND First");
    RC_SEND_MIDDLE = 0x01, Rc, SendMiddle, "RC SEND_MIDDLE", Some("Reliable Connection (RC) - SEND Middle");
    RC_SEND_LAST = 0x02, Rc, SendLast, "RC SEND_LAST", Some("Reliable Connection (RC) - SEND Last");
    RC_SEND_LAST_IMM = 0x03, Rc, SendLastImm, "RC SEND_LAST_IMM", Some("Reliable Connection (RC) - SEND Last with Immediate");
    RC_SEND_ONLY = 0x04, Rc, SendOnly, "RC SEND_ONLY", Some("Reliable Connection (RC) - SEND Only");
    RC_SEND_ONLY_IMM = 0x05, Rc, SendOnlyImm, "RC SEND_ONLY_IMM", Some("Reliable Connection (RC) - SEND Only with Immediate");
    RC_RDMA_WRITE_FIRST = 0x06, Rc, WriteFirst, "RC RDMA_WRITE_FIRST", Some("Reliable Connection (RC) - RDMA WRITE First");
    RC_RDMA_WRITE_MIDDLE = 0x07, Rc, WriteMiddle, "RC RDMA_WRITE_MIDDLE", Some("Reliable Connection (RC) - RDMA WRITE Middle");
    RC_RDMA_WRITE_LAST = 0x08, Rc, WriteLast, "RC RDMA_WRITE_LAST", Some("Reliable Connection (RC) - RDMA WRITE Last");
    RC_RDMA_WRITE_LAST_IMM = 0x09, Rc, WriteLastImm, "RC RDMA_WRITE_LAST_IMM", Some("Reliable Connection (RC) - RDMA WRITE Last with Immediate");
    RC_RDMA_WRITE_ONLY = 0x0A, Rc, WriteOnly, "RC RDMA_WRITE_ONLY", Some("Reliable Connection (RC) - RDMA WRITE Only");
    RC_RDMA_WRITE_ONLY_IMM = 0x0B, Rc, WriteOnlyImm, "RC RDMA_WRITE_ONLY_IMM", Some("Reliable Connection (RC) - RDMA WRITE Only with Immediate");
    RC_RDMA_READ_REQUEST = 0x0C, Rc, ReadRequest, "RC RDMA_READ_REQUEST", Some("Reliable Connection (RC) - RDMA READ Request");
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D, Rc, ReadResponseFirst, "RC RDMA_READ_RESPONSE_FIRST", Some("Reliable Connection (RC) - RDMA READ response First");
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E, Rc, ReadResponseMiddle, "RC RDMA_READ_RESPONSE_MIDDLE", Some("Reliable Connection (RC) - RDMA READ response Middle");
    RC_RDMA_READ_RESPONSE_LAST = 0x0F, Rc, ReadResponseLast, "RC RDMA_READ_RESPONSE_LAST", Some("Reliable Connection (RC) - RDMA READ response Last");
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, Rc, ReadResponseOnly, "RC RDMA_READ_RESPONSE_ONLY", Some("Reliable Connection (RC) - RDMA READ response Only");
    RC_ACKNOWLEDGE = 0x11, Rc, Acknowledge, "RC ACKNOWLEDGE", Some("Reliable Connection (RC) - Acknowledge");
    RC_ATOMIC_ACKNOWLEDGE = 0x12, Rc, AtomicAcknowledge, "RC ATOMIC_ACKNOWLEDGE", Some("Reliable Connection (RC) - ATOMIC Acknowledge");
    RC_COMPARE_SWAP = 0x13, Rc, CompareSwap, "RC COMPARE_SWAP", Some("Reliable Connection (RC) - CmpSwap");
    RC_FETCH_ADD = 0x14, Rc, FetchAdd, "RC FETCH_ADD", Some("Reliable Connection (RC) - FetchAdd");
    RC_SEND_LAST_INV = 0x16, Rc, SendLastInv, "RC SEND_LAST_INV", Some("Reliable Connection (RC) - SEND Last with Invalidate");
    RC_SEND_ONLY_INV = 0x17, Rc, SendOnlyInv, "RC SEND_ONLY_INV", Some("Reliable Connection (RC) - SEND Only with Invalidate");
    // Wireshark 4.0 predates IBA 1.5 and has no name for 0x1D.
    RC_ATOMIC_WRITE = 0x1D, Rc, AtomicWrite, "RC ATOMIC_WRITE", None;

    UC_SEND_FIRST = 0x20, Uc, SendFirst, "UC SEND_FIRST", Some("Unreliable Connection (UC) - SEND First");
    UC_SEND_MIDDLE = 0x21, Uc, SendMiddle, "UC SEND_MIDDLE", Some("Unreliable Connection (UC) - SEND Middle");
    UC_SEND_LAST = 0x22, Uc, SendLast, "UC SEND_LAST", Some("Unreliable Connection (UC) - SEND Last");
    UC_SEND_LAST_IMM = 0x23, Uc, SendLastImm, "UC SEND_LAST_IMM", Some("Unreliable Connection (UC) - SEND Last with Immediate");
    UC_SEND_ONLY = 0x24, Uc, SendOnly, "UC SEND_ONLY", Some("Unreliable Connection (UC) - SEND Only");
    UC_SEND_ONLY_IMM = 0x25, Uc, SendOnlyImm, "UC SEND_ONLY_IMM", Some("Unreliable Connection (UC) - SEND Only with Immediate");
    UC_RDMA_WRITE_FIRST = 0x26, Uc, WriteFirst, "UC RDMA_WRITE_FIRST", Some("Unreliable Connection (UC) - RDMA WRITE First");
    UC_RDMA_WRITE_MIDDLE = 0x27, Uc, WriteMiddle, "UC RDMA_WRITE_MIDDLE", Some("Unreliable Connection (UC) - RDMA WRITE Middle");
    UC_RDMA_WRITE_LAST = 0x28, Uc, WriteLast, "UC RDMA_WRITE_LAST", Some("Unreliable Connection (UC) - RDMA WRITE Last");
    UC_RDMA_WRITE_LAST_IMM = 0x29, Uc, WriteLastImm, "UC RDMA_WRITE_LAST_IMM", Some("Unreliable Connection (UC) - RDMA WRITE Last with Immediate");
    UC_RDMA_WRITE_ONLY = 0x2A, Uc, WriteOnly, "UC RDMA_WRITE_ONLY", Some("Unreliable Connection (UC) - RDMA WRITE Only");
    UC_RDMA_WRITE_ONLY_IMM = 0x2B, Uc, WriteOnlyImm, "UC RDMA_WRITE_ONLY_IMM", Some("Unreliable Connection (UC) - RDMA WRITE Only with Immediate");

    RD_SEND_FIRST = 0x40, Rd, SendFirst, "RD SEND_FIRST", Some("Reliable Datagram (RD) - SEND First");
    RD_SEND_MIDDLE = 0x41, Rd, SendMiddle, "RD SEND_MIDDLE", Some("Reliable Datagram (RD) - SEND Middle");
    RD_SEND_LAST = 0x42, Rd, SendLast, "RD SEND_LAST", Some("Reliable Datagram (RD) - SEND Last");
    RD_SEND_LAST_IMM = 0x43, Rd, SendLastImm, "RD SEND_LAST_IMM", Some("Reliable Datagram (RD) - SEND Last with Immediate");
    RD_SEND_ONLY = 0x44, Rd, SendOnly, "RD SEND_ONLY", Some("Reliable Datagram (RD) - SEND Only");
    RD_SEND_ONLY_IMM = 0x45, Rd, SendOnlyImm, "RD SEND_ONLY_IMM", Some("Reliable Datagram (RD) - SEND Only with Immediate");
    RD_RDMA_WRITE_FIRST = 0x46, Rd, WriteFirst, "RD RDMA_WRITE_FIRST", Some("Reliable Datagram (RD) - RDMA WRITE First");
    RD_RDMA_WRITE_MIDDLE = 0x47, Rd, WriteMiddle, "RD RDMA_WRITE_MIDDLE", Some("Reliable Datagram (RD) - RDMA WRITE Middle");
    RD_RDMA_WRITE_LAST = 0x48, Rd, WriteLast, "RD RDMA_WRITE_LAST", Some("Reliable Datagram (RD) - RDMA WRITE Last");
    RD_RDMA_WRITE_LAST_IMM = 0x49, Rd, WriteLastImm, "RD RDMA_WRITE_LAST_IMM", Some("Reliable Datagram (RD) - RDMA WRITE Last with Immediate");
    RD_RDMA_WRITE_ONLY = 0x4A, Rd, WriteOnly, "RD RDMA_WRITE_ONLY", Some("Reliable Datagram (RD) - RDMA WRITE Only");
    RD_RDMA_WRITE_ONLY_IMM = 0x4B, Rd, WriteOnlyImm, "RD RDMA_WRITE_ONLY_IMM", Some("Reliable Datagram (RD) - RDMA WRITE Only with Immediate");
    RD_RDMA_READ_REQUEST = 0x4C, Rd, ReadRequest, "RD RDMA_READ_REQUEST", Some("Reliable Datagram (RD) - RDMA READ Request");
    RD_RDMA_READ_RESPONSE_FIRST = 0x4D, Rd, ReadResponseFirst, "RD RDMA_READ_RESPONSE_FIRST", Some("Reliable Datagram (RD) - RDMA READ response First");
    RD_RDMA_READ_RESPONSE_MIDDLE = 0x4E, Rd, ReadResponseMiddle, "RD RDMA_READ_RESPONSE_MIDDLE", Some("Reliable Datagram (RD) - RDMA READ response Middle");
    RD_RDMA_READ_RESPONSE_LAST = 0x4F, Rd, ReadResponseLast, "RD RDMA_READ_RESPONSE_LAST", Some("Reliable Datagram (RD) - RDMA READ response Last");
    RD_RDMA_READ_RESPONSE_ONLY = 0x50, Rd, ReadResponseOnly, "RD RDMA_READ_RESPONSE_ONLY", Some("Reliable Datagram (RD) - RDMA READ response Only");
    RD_ACKNOWLEDGE = 0x51, Rd, Acknowledge, "RD ACKNOWLEDGE", Some("Reliable Datagram (RD) - Acknowledge");
    RD_ATOMIC_ACKNOWLEDGE = 0x52, Rd, AtomicAcknowledge, "RD ATOMIC_ACKNOWLEDGE", Some("Reliable Datagram (RD) - ATOMIC Acknowledge");
    RD_COMPARE_SWAP = 0x53, Rd, CompareSwap, "RD COMPARE_SWAP", Some("Reliable Datagram (RD) - CmpSwap");
    RD_FETCH_ADD = 0x54, Rd, FetchAdd, "RD FETCH_ADD", Some("Reliable Datagram (RD) - FetchAdd");
    RD_RESYNC = 0x55, Rd, Resync, "RD RESYNC", Some("Reliable Datagram (RD) - RESYNC");

    UD_SEND_ONLY = 0x64, Ud, SendOnly, "UD SEND_ONLY", Some("Unreliable Datagram (UD) - SEND only");
    UD_SEND_ONLY_IMM = 0x65, Ud, SendOnlyImm, "UD SEND_ONLY_IMM", Some("Unreliable Datagram (UD) - SEND only with Immediate");

    XRC_SEND_FIRST = 0xA0, Xrc, SendFirst, "XRC SEND_FIRST", Some("Extended Reliable Connection (XRC) - SEND First");
    XRC_SEND_MIDDLE = 0xA1, Xrc, SendMiddle, "XRC SEND_MIDDLE", Some("Extended Reliable Connection (XRC) - SEND Middle");
    XRC_SEND_LAST = 0xA2, Xrc, SendLast, "XRC SEND_LAST", Some("Extended Reliable Connection (XRC) - SEND Last");
    XRC_SEND_LAST_IMM = 0xA3, Xrc, SendLastImm, "XRC SEND_LAST_IMM", Some("Extended Reliable Connection (XRC) - SEND Last with Immediate");
    XRC_SEND_ONLY = 0xA4, Xrc, SendOnly, "XRC SEND_ONLY", Some("Extended Reliable Connection (XRC) - SEND Only");
    XRC_SEND_ONLY_IMM = 0xA5, Xrc, SendOnlyImm, "XRC SEND_ONLY_IMM", Some("Extended Reliable Connection (XRC) - SEND Only with Immediate");
    XRC_RDMA_WRITE_FIRST = 0xA6, Xrc, WriteFirst, "XRC RDMA_WRITE_FIRST", Some("Extended Reliable Connection (XRC) - RDMA WRITE First");
    XRC_RDMA_WRITE_MIDDLE = 0xA7, Xrc, WriteMiddle, "XRC RDMA_WRITE_MIDDLE", Some("Extended Reliable Connection (XRC) - RDMA WRITE Middle");
    XRC_RDMA_WRITE_LAST = 0xA8, Xrc, WriteLast, "XRC RDMA_WRITE_LAST", Some("Extended Reliable Connection (XRC) - RDMA WRITE Last");
    XRC_RDMA_WRITE_LAST_IMM = 0xA9, Xrc, WriteLastImm, "XRC RDMA_WRITE_LAST_IMM", Some("Extended Reliable Connection (XRC) - RDMA WRITE Last with Immediate");
    XRC_RDMA_WRITE_ONLY = 0xAA, Xrc, WriteOnly, "XRC RDMA_WRITE_ONLY", Some("Extended Reliable Connection (XRC) - RDMA WRITE Only");
    XRC_RDMA_WRITE_ONLY_IMM = 0xAB, Xrc, WriteOnlyImm, "XRC RDMA_WRITE_ONLY_IMM", Some("Extended Reliable Connection (XRC) - RDMA WRITE Only with Immediate");
    XRC_RDMA_READ_REQUEST = 0xAC, Xrc, ReadRequest, "XRC RDMA_READ_REQUEST", Some("Extended Reliable Connection (XRC) - RDMA READ Request");
    XRC_RDMA_READ_RESPONSE_FIRST = 0xAD, Xrc, ReadResponseFirst, "XRC RDMA_READ_RESPONSE_FIRST", Some("Extended Reliable Connection (XRC) - RDMA READ response First");
    XRC_RDMA_READ_RESPONSE_MIDDLE = 0xAE, Xrc, ReadResponseMiddle, "XRC RDMA_READ_RESPONSE_MIDDLE", Some("Extended Reliable Connection (XRC) - RDMA READ response Middle");
    XRC_RDMA_READ_RESPONSE_LAST = 0xAF, Xrc, ReadResponseLast, "XRC RDMA_READ_RESPONSE_LAST", Some("Extended Reliable Connection (XRC) - RDMA READ response Last");
    XRC_RDMA_READ_RESPONSE_ONLY = 0xB0, Xrc, ReadResponseOnly, "XRC RDMA_READ_RESPONSE_ONLY", Some("Extended Reliable Connection (XRC) - RDMA READ response Only");
    XRC_ACKNOWLEDGE = 0xB1, Xrc, Acknowledge, "XRC ACKNOWLEDGE", Some("Extended Reliable Connection (XRC) - Acknowledge");
    XRC_ATOMIC_ACKNOWLEDGE = 0xB2, Xrc, AtomicAcknowledge, "XRC ATOMIC_ACKNOWLEDGE", Some("Extended Reliable Connection (XRC) - ATOMIC Acknowledge");
    XRC_COMPARE_SWAP = 0xB3, Xrc, CompareSwap, "XRC COMPARE_SWAP", Some("Extended Reliable Connection (XRC) - CmpSwap");
    XRC_FETCH_ADD = 0xB4, Xrc, FetchAdd, "XRC FETCH_ADD", Some("Extended Reliable Connection (XRC) - FetchAdd");
    XRC_SEND_LAST_INV = 0xB6, Xrc, SendLastInv, "XRC SEND_LAST_INV", Some("Extended Reliable Connection (XRC) - SEND Last with Invalidate");
    XRC_SEND_ONLY_INV = 0xB7, Xrc, SendOnlyInv, "XRC SEND_ONLY_INV", Some("Extended Reliable Connection (XRC) - SEND Only with Invalidate");

    CNP = 0x81, Cnp, Cnp, "CNP", None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_header_mask_says_what_each_has_function_says() {
        for &op in Opcode::ALL {
            let m = op.ext_headers();
            let has = [
                (ExtHeaders::RDETH, op.has_rdeth()),
                (ExtHeaders::DETH, op.has_deth()),
                (ExtHeaders::XRCETH, op.has_xrceth()),
                (ExtHeaders::RETH, op.has_reth()),
                (ExtHeaders::ATOMIC_ETH, op.has_atomic_eth()),
                (ExtHeaders::AETH, op.has_aeth()),
                (ExtHeaders::ATOMIC_ACK_ETH, op.has_atomic_ack_eth()),
                (ExtHeaders::IMMDT, op.has_immdt()),
                (ExtHeaders::IETH, op.has_ieth()),
            ];
            let mut expected = 0;
            for (bit, present) in has {
                if present {
                    expected |= bit;
                }
            }
            assert_eq!(m, expected, "{}", op.name());
            assert_eq!(
                op.ext_headers_len(),
                op.ext_headers_len_of_flags(),
                "{}",
                op.name()
            );
        }
    }

    #[test]
    fn exactly_the_table_38_opcodes_and_cnp_are_known() {
        let known = (0..=255u8).filter(|&v| Opcode::from_u8(v).is_ok()).count();
        // RC 24 (23 of IBA 1.4 + ATOMIC WRITE) + UC 12 + RD 22 + UD 2 + XRC 23 + CNP 1.
        assert_eq!(known, 84);
        assert_eq!(Opcode::ALL.len(), 84);
        assert_eq!(Opcode::from_u8(0x1C), Err(Error::UnknownOpcode(0x1C)));
        assert_eq!(Opcode::from_u8(0x3D), Err(Error::UnknownOpcode(0x3D)));
        assert_eq!(Opcode::from_u8(0xBD), Err(Error::UnknownOpcode(0xBD)));
        assert_eq!(Opcode::from_u8(0x15), Err(Error::UnknownOpcode(0x15)));
        assert_eq!(Opcode::from_u8(0x2C), Err(Error::UnknownOpcode(0x2C)));
        assert_eq!(Opcode::from_u8(0x80), Err(Error::UnknownOpcode(0x80)));
        assert_eq!(Opcode::from_u8(0x63), Err(Error::UnknownOpcode(0x63)));
        assert_eq!(Opcode::from_u8(0xB5), Err(Error::UnknownOpcode(0xB5)));
        assert_eq!(Opcode::from_u8(0xFF), Err(Error::UnknownOpcode(0xFF)));
    }

    #[test]
    fn new_service_and_operation_round_trip_for_every_opcode() {
        for &op in Opcode::ALL {
            assert_eq!(
                Opcode::new(op.service(), op.operation()),
                Some(op),
                "{op:?}"
            );
            assert_eq!(Opcode::from_u8(op.value()), Ok(op));
        }
        assert_eq!(Opcode::new(Service::Uc, Operation::ReadRequest), None);
        assert_eq!(Opcode::new(Service::Ud, Operation::SendFirst), None);
        assert_eq!(Opcode::new(Service::Rc, Operation::Resync), None);
        assert_eq!(Opcode::new(Service::Rc, Operation::Cnp), None);
        assert_eq!(Opcode::new(Service::Cnp, Operation::Cnp), Some(Opcode::CNP));
        assert_eq!(Opcode::CNP.value(), 0x81);
    }

    #[test]
    fn header_map_follows_table_38() {
        let o = Opcode::RC_RDMA_WRITE_ONLY_IMM;
        assert!(o.has_reth() && o.has_immdt() && o.has_payload() && o.is_only() && o.is_write());
        assert_eq!(o.ext_headers_len(), 20);
        let o = Opcode::RC_RDMA_READ_RESPONSE_MIDDLE;
        assert!(!o.has_aeth() && o.has_payload() && o.is_middle() && o.is_response());
        let o = Opcode::RC_RDMA_READ_RESPONSE_FIRST;
        assert!(o.has_aeth() && o.is_first() && o.is_read_response());
        let o = Opcode::RC_ATOMIC_ACKNOWLEDGE;
        assert!(o.has_aeth() && o.has_atomic_ack_eth() && !o.has_payload());
        assert_eq!(o.ext_headers_len(), 12);
        let o = Opcode::RC_COMPARE_SWAP;
        assert!(o.has_atomic_eth() && o.is_atomic() && !o.has_payload() && !o.is_response());
        let o = Opcode::UD_SEND_ONLY_IMM;
        assert!(o.has_deth() && o.has_immdt() && !o.has_rdeth());
        let o = Opcode::RD_SEND_FIRST;
        assert!(o.has_rdeth() && o.has_deth());
        let o = Opcode::RD_ACKNOWLEDGE;
        assert!(o.has_rdeth() && !o.has_deth() && o.has_aeth());
        let o = Opcode::RD_RESYNC;
        assert!(o.has_rdeth() && o.has_deth() && !o.has_payload());
        let o = Opcode::XRC_FETCH_ADD;
        assert!(o.has_xrceth() && o.has_atomic_eth());
        let o = Opcode::XRC_RDMA_READ_RESPONSE_ONLY;
        assert!(!o.has_xrceth() && o.has_aeth());
        let o = Opcode::RC_SEND_ONLY_INV;
        assert!(o.has_ieth() && o.is_send() && o.is_only() && o.has_payload());
        let o = Opcode::RC_RDMA_READ_REQUEST;
        assert!(o.has_reth() && !o.has_payload() && !o.starts_message());
        assert!(Opcode::CNP.has_cnp_body() && !Opcode::CNP.has_payload());
        assert_eq!(Opcode::CNP.ext_headers_len(), 16);
        // IBA 1.5 ATOMIC WRITE: RETH, then the 8-byte payload; a request, not an AtomicETH op.
        let o = Opcode::RC_ATOMIC_WRITE;
        assert_eq!(o.value(), 0x1D);
        assert!(o.has_reth() && o.has_payload() && o.is_atomic_write());
        assert!(!o.is_atomic() && !o.is_write() && !o.is_response() && !o.has_atomic_eth());
        assert_eq!(o.ext_headers_len(), 16);
        assert_eq!(Opcode::new(Service::Uc, Operation::AtomicWrite), None);
        assert_eq!(Opcode::new(Service::Xrc, Operation::AtomicWrite), None);
    }

    #[test]
    fn names_follow_the_constants_and_wireshark() {
        assert_eq!(Opcode::RC_SEND_FIRST.name(), "RC SEND_FIRST");
        assert_eq!(Opcode::UD_SEND_ONLY_IMM.name(), "UD SEND_ONLY_IMM");
        assert_eq!(
            Opcode::XRC_RDMA_READ_RESPONSE_LAST.wireshark_name(),
            Some("Extended Reliable Connection (XRC) - RDMA READ response Last")
        );
        assert_eq!(
            Opcode::UD_SEND_ONLY.wireshark_name(),
            Some("Unreliable Datagram (UD) - SEND only")
        );
        assert_eq!(Opcode::CNP.wireshark_name(), None);
        assert_eq!(
            format!("{:?}", Opcode::RC_ACKNOWLEDGE),
            "Opcode(0x11 RC ACKNOWLEDGE)"
        );
    }
}
