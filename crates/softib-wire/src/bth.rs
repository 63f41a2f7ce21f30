//! Base Transport Header (IBA vol. 1, 9.2): the 12 bytes every transport packet starts with.
//!
//! ```text
//!  byte 0   OpCode
//!  byte 1   SE:1 M:1 PadCnt:2 TVer:4
//!  2..4     P_Key
//!  byte 4   FECN:1 BECN:1 reserved:6      (FECN/BECN: IBA Annex A10 congestion marks)
//!  5..8     DestQP (24 bits)
//!  byte 8   AckReq:1 reserved:7
//!  9..12    PSN (24 bits)
//! ```

use crate::bytes::{self, check, check_emit};
use crate::opcode::Opcode;
use crate::{Error, Result};

/// Length of the BTH in bytes.
pub const BTH_LEN: usize = 12;

/// The only transport header version defined (IBA 9.2.5: TVer is 0).
pub const BTH_TVER: u8 = 0;

mod field {
    use crate::bytes::Field;
    pub const OPCODE: usize = 0;
    /// SE, MigReq, PadCnt, TVer.
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    /// FECN, BECN, six reserved bits.
    pub const CONG: usize = 4;
    pub const DEST_QP: Field = 5..8;
    /// AckReq, seven reserved bits.
    pub const ACK: usize = 8;
    pub const PSN: Field = 9..12;
}

const SE: u8 = 0x80;
const MIG: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x30;
const TVER_MASK: u8 = 0x0F;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACK_REQ: u8 = 0x80;
const U24: u32 = 0x00FF_FFFF;

/// A zero-copy view of a BTH at the start of a buffer.
#[derive(Debug, Clone)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    /// Wraps a buffer without checking its length; accessors may panic if it is shorter
    /// than [`BTH_LEN`]. Use [`BthPacket::new_checked`] for untrusted bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        BthPacket { buffer }
    }

    /// Wraps a buffer after checking it holds a whole BTH; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the buffer holds a whole BTH.
    pub fn check_len(&self) -> Result<()> {
        check("BTH", self.buffer.as_ref(), BTH_LEN)
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The raw opcode byte (not yet checked against the opcode table).
    pub fn opcode_raw(&self) -> u8 {
        self.b()[field::OPCODE]
    }
    /// Solicited Event: the receiver should raise a completion event (IBA 9.2.2).
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & SE != 0
    }
    /// MigReq: path migration state (IBA 9.2.3, 17.2.8).
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & MIG != 0
    }
    /// PadCnt: pad bytes (0..=3) after the payload (IBA 9.2.4).
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] & PAD_MASK) >> PAD_SHIFT
    }
    /// TVer: transport header version (IBA 9.2.5).
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & TVER_MASK
    }
    /// P_Key: the partition key (IBA 9.2.6).
    pub fn pkey(&self) -> u16 {
        bytes::get(self.b(), field::PKEY) as u16
    }
    /// FECN: forward congestion notification (IBA Annex A10).
    pub fn fecn(&self) -> bool {
        self.b()[field::CONG] & FECN != 0
    }
    /// BECN: backward congestion notification (IBA Annex A10).
    pub fn becn(&self) -> bool {
        self.b()[field::CONG] & BECN != 0
    }
    /// The reserved bits of byte 4 (zero on the wire, ignored on receive).
    pub fn reserved_cong(&self) -> u8 {
        self.b()[field::CONG] & 0x3F
    }
    /// DestQP: the destination queue pair number, 24 bits (IBA 9.2.7).
    pub fn dest_qp(&self) -> u32 {
        bytes::get(self.b(), field::DEST_QP) as u32
    }
    /// AckReq: the requester asks for an acknowledge (IBA 9.2.8).
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK] & ACK_REQ != 0
    }
    /// The reserved bits of byte 8 (zero on the wire, ignored on receive).
    pub fn reserved_ack(&self) -> u8 {
        self.b()[field::ACK] & 0x7F
    }
    /// PSN: packet sequence number, 24 bits (IBA 9.2.9).
    pub fn psn(&self) -> u32 {
        bytes::get(self.b(), field::PSN) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    fn set_bit(&mut self, at: usize, mask: u8, on: bool) {
        let b = &mut self.bm()[at];
        *b = if on { *b | mask } else { *b & !mask };
    }

    /// Sets the opcode byte.
    pub fn set_opcode(&mut self, opcode: Opcode) {
        self.bm()[field::OPCODE] = opcode.value();
    }
    /// Sets SE.
    pub fn set_solicited(&mut self, on: bool) {
        self.set_bit(field::FLAGS, SE, on);
    }
    /// Sets MigReq.
    pub fn set_mig_req(&mut self, on: bool) {
        self.set_bit(field::FLAGS, MIG, on);
    }
    /// Sets PadCnt (low two bits of `pad`).
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !PAD_MASK) | ((pad << PAD_SHIFT) & PAD_MASK);
    }
    /// Sets TVer (low four bits of `tver`).
    pub fn set_tver(&mut self, tver: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !TVER_MASK) | (tver & TVER_MASK);
    }
    /// Sets P_Key.
    pub fn set_pkey(&mut self, pkey: u16) {
        bytes::put(self.bm(), field::PKEY, u64::from(pkey));
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, on: bool) {
        self.set_bit(field::CONG, FECN, on);
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, on: bool) {
        self.set_bit(field::CONG, BECN, on);
    }
    /// Sets DestQP (low 24 bits).
    pub fn set_dest_qp(&mut self, qp: u32) {
        bytes::put(self.bm(), field::DEST_QP, u64::from(qp & U24));
    }
    /// Sets AckReq.
    pub fn set_ack_req(&mut self, on: bool) {
        self.set_bit(field::ACK, ACK_REQ, on);
    }
    /// Sets the PSN (low 24 bits).
    pub fn set_psn(&mut self, psn: u32) {
        bytes::put(self.bm(), field::PSN, u64::from(psn & U24));
    }
}

/// A parsed BTH. Reserved bits are not kept: they are ignored on receive and sent as zero
/// (IBA 9.2: "reserved fields shall be set to 0 by the sender and ignored by the receiver").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// SE: solicited event.
    pub solicited: bool,
    /// M: MigReq.
    pub mig_req: bool,
    /// PadCnt (0..=3). [`crate::PacketRepr::emit`] overwrites it from the payload length.
    pub pad_count: u8,
    /// TVer; parse accepts only 0.
    pub tver: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// DestQP (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl BthRepr {
    /// Parses a BTH from the start of `buf`: rejects a short buffer, TVer other than 0
    /// (IBA 9.2.5: a receiver drops packets of a version it does not implement) and reserved opcodes.
    pub fn parse(buf: &[u8]) -> Result<BthRepr> {
        let p = BthPacket::new_checked(buf)?;
        if p.tver() != BTH_TVER {
            return Err(Error::BadVersion {
                header: "BTH",
                version: p.tver(),
            });
        }
        Ok(BthRepr {
            opcode: Opcode::from_u8(p.opcode_raw())?,
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }

    /// Bytes [`BthRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes the BTH to the start of `buf` (reserved bits zero); returns [`BTH_LEN`].
    /// Out-of-range values are truncated to their field width (PadCnt 2 bits, TVer 4,
    /// DestQP and PSN 24).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_emit(buf, BTH_LEN)?;
        let mut p = BthPacket::new_unchecked(&mut buf[..BTH_LEN]);
        p.bm().fill(0);
        p.set_opcode(self.opcode);
        p.set_solicited(self.solicited);
        p.set_mig_req(self.mig_req);
        p.set_pad_count(self.pad_count);
        p.set_tver(self.tver);
        p.set_pkey(self.pkey);
        p.set_fecn(self.fecn);
        p.set_becn(self.becn);
        p.set_dest_qp(self.dest_qp);
        p.set_ack_req(self.ack_req);
        p.set_psn(self.psn);
        Ok(BTH_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The BTH of the first RDMA WRITE First in testdata/captures/rxe-write_bw.pcap.
    const RXE_WRITE_FIRST: [u8; 12] = [
        0x06, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x12, 0x00, 0xA4, 0x2F, 0xEE,
    ];
    const RXE_WRITE_FIRST_REPR: BthRepr = BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_FIRST,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: false,
        dest_qp: 0x12,
        ack_req: false,
        psn: 10_760_174,
    };

    /// Every flag set: SE, M, PadCnt 3, FECN, BECN, AckReq.
    const ALL_FLAGS: [u8; 12] = [
        0x03, 0xF0, 0x12, 0x34, 0xC0, 0xAB, 0xCD, 0xEF, 0x80, 0x01, 0x02, 0x03,
    ];
    const ALL_FLAGS_REPR: BthRepr = BthRepr {
        opcode: Opcode::RC_SEND_LAST_IMM,
        solicited: true,
        mig_req: true,
        pad_count: 3,
        tver: 0,
        pkey: 0x1234,
        fecn: true,
        becn: true,
        dest_qp: 0xAB_CDEF,
        ack_req: true,
        psn: 0x01_0203,
    };

    #[test]
    fn parses_known_bytes() {
        assert_eq!(BthRepr::parse(&RXE_WRITE_FIRST), Ok(RXE_WRITE_FIRST_REPR));
        assert_eq!(BthRepr::parse(&ALL_FLAGS), Ok(ALL_FLAGS_REPR));
    }

    #[test]
    fn emits_known_bytes() {
        for (repr, bytes) in [
            (RXE_WRITE_FIRST_REPR, RXE_WRITE_FIRST),
            (ALL_FLAGS_REPR, ALL_FLAGS),
        ] {
            let mut buf = [0x5Au8; 12];
            assert_eq!(repr.emit(&mut buf), Ok(BTH_LEN));
            assert_eq!(buf, bytes);
        }
    }

    #[test]
    fn view_reads_each_field() {
        let p = BthPacket::new_checked(&ALL_FLAGS[..]).unwrap();
        assert_eq!(p.opcode_raw(), 0x03);
        assert!(p.solicited() && p.mig_req() && p.fecn() && p.becn() && p.ack_req());
        assert_eq!((p.pad_count(), p.tver(), p.pkey()), (3, 0, 0x1234));
        assert_eq!((p.dest_qp(), p.psn()), (0xAB_CDEF, 0x01_0203));
        assert_eq!((p.reserved_cong(), p.reserved_ack()), (0, 0));
    }

    #[test]
    fn reserved_bits_are_ignored_on_parse_and_zero_on_emit() {
        let mut bytes = RXE_WRITE_FIRST;
        bytes[4] |= 0x3F;
        bytes[8] |= 0x7F;
        let repr = BthRepr::parse(&bytes).unwrap();
        assert_eq!(repr, RXE_WRITE_FIRST_REPR);
        let mut buf = [0u8; 12];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, RXE_WRITE_FIRST);
    }

    #[test]
    fn rejects_tver_other_than_0_and_reserved_opcodes() {
        let mut bytes = RXE_WRITE_FIRST;
        bytes[1] = 0x01;
        assert_eq!(
            BthRepr::parse(&bytes),
            Err(Error::BadVersion {
                header: "BTH",
                version: 1
            })
        );
        let mut bytes = RXE_WRITE_FIRST;
        bytes[0] = 0x15;
        assert_eq!(BthRepr::parse(&bytes), Err(Error::UnknownOpcode(0x15)));
    }

    #[test]
    fn short_buffers_are_errors() {
        for n in 0..BTH_LEN {
            assert_eq!(
                BthRepr::parse(&RXE_WRITE_FIRST[..n]),
                Err(Error::Truncated {
                    header: "BTH",
                    needed: BTH_LEN,
                    available: n
                })
            );
            let mut buf = vec![0u8; n];
            assert_eq!(
                RXE_WRITE_FIRST_REPR.emit(&mut buf),
                Err(Error::BufferTooSmall {
                    needed: BTH_LEN,
                    available: n
                })
            );
        }
    }

    pub(crate) fn arb_bth() -> impl Strategy<Value = BthRepr> {
        (
            proptest::sample::select(Opcode::ALL),
            any::<(bool, bool, bool, bool, bool)>(),
            0u8..4,
            any::<u16>(),
            0u32..1 << 24,
            0u32..1 << 24,
        )
            .prop_map(
                |(
                    opcode,
                    (solicited, mig_req, fecn, becn, ack_req),
                    pad_count,
                    pkey,
                    dest_qp,
                    psn,
                )| {
                    BthRepr {
                        opcode,
                        solicited,
                        mig_req,
                        pad_count,
                        tver: 0,
                        pkey,
                        fecn,
                        becn,
                        dest_qp,
                        ack_req,
                        psn,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn emit_then_parse_is_identity(repr in arb_bth()) {
            let mut buf = [0u8; BTH_LEN];
            prop_assert_eq!(repr.emit(&mut buf), Ok(repr.buffer_len()));
            prop_assert_eq!(BthRepr::parse(&buf), Ok(repr));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            if let Ok(repr) = BthRepr::parse(&bytes) {
                let mut buf = [0u8; BTH_LEN];
                repr.emit(&mut buf).unwrap();
                prop_assert_eq!(BthRepr::parse(&buf), Ok(repr));
            }
        }
    }
}
