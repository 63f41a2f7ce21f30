//! The link-level flow-control packet (IBA vol. 1 7.9.4): six bytes a port sends per data VL
//! to advertise receive credits, outside any LRH.
//!
//! ```text
//! Op:4 FCTBS:12 · VL:4 FCCL:12 · LPCRC:16
//! ```
//!
//! FCTBS (flow-control total blocks sent) and FCCL (flow-control credit limit) count 64-byte
//! blocks modulo 4096 (IBA 7.9.4.1-2). The LPCRC is the link's 16-bit CRC (generator 0x100B,
//! seed 0xFFFF, complemented; IBA 7.9.4.3 uses the VCRC's CRC) over the first four bytes, see
//! [`crate::vcrc`], and is stored least-significant byte first like the VCRC. Wireshark's
//! `infiniband_link` dissector decodes these fields (Op 0 "Normal Flow Control", 1 "Flow
//! Control Init") but does not check the LPCRC.

use crate::vcrc::vcrc;
use crate::{Error, Result};

/// Length of a flow-control packet.
pub const FLOW_CONTROL_LEN: usize = 6;

/// Mask of the 12-bit block counters.
pub const BLOCK_COUNT_MASK: u16 = 0x0FFF;

mod field {
    pub type Field = core::ops::Range<usize>;
    /// Op:4 FCTBS:12
    pub const OP_FCTBS: Field = 0..2;
    /// VL:4 FCCL:12
    pub const VL_FCCL: Field = 2..4;
    pub const LPCRC: Field = 4..6;
    /// Bytes the LPCRC covers.
    pub const COVERED: Field = 0..4;
}

/// Flow-control packet operand (IBA 7.9.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FcOp {
    /// 0: normal flow-control packet.
    Normal,
    /// 1: flow-control init, sent while the link comes up.
    Init,
}

impl FcOp {
    /// Decodes the 4-bit operand; other values are reserved.
    pub fn from_bits(bits: u8) -> Option<FcOp> {
        match bits {
            0 => Some(FcOp::Normal),
            1 => Some(FcOp::Init),
            _ => None,
        }
    }

    /// The 4-bit operand.
    pub fn bits(self) -> u8 {
        match self {
            FcOp::Normal => 0,
            FcOp::Init => 1,
        }
    }
}

/// A zero-copy view of a flow-control packet.
///
/// After [`FlowControlPacket::new_checked`] succeeds no accessor panics.
#[derive(Debug, Clone)]
pub struct FlowControlPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FlowControlPacket<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        FlowControlPacket { buffer }
    }

    /// Wraps a buffer after checking that it holds six bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds six bytes.
    pub fn check_len(&self) -> Result<()> {
        let available = self.buffer.as_ref().len();
        if available < FLOW_CONTROL_LEN {
            return Err(Error::Truncated {
                header: "flow-control packet",
                needed: FLOW_CONTROL_LEN,
                available,
            });
        }
        Ok(())
    }

    fn be16(&self, f: field::Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The 4-bit operand as carried.
    pub fn op_bits(&self) -> u8 {
        (self.be16(field::OP_FCTBS) >> 12) as u8
    }

    /// Flow-control total blocks sent (12 bits).
    pub fn fctbs(&self) -> u16 {
        self.be16(field::OP_FCTBS) & BLOCK_COUNT_MASK
    }

    /// Virtual lane.
    pub fn vl(&self) -> u8 {
        (self.be16(field::VL_FCCL) >> 12) as u8
    }

    /// Flow-control credit limit (12 bits).
    pub fn fccl(&self) -> u16 {
        self.be16(field::VL_FCCL) & BLOCK_COUNT_MASK
    }

    /// The LPCRC as carried.
    pub fn lpcrc(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LPCRC];
        u16::from_le_bytes([b[0], b[1]])
    }

    /// The LPCRC computed over the first four bytes.
    pub fn computed_lpcrc(&self) -> u16 {
        vcrc(&self.buffer.as_ref()[field::COVERED])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FlowControlPacket<T> {
    /// Sets the operand and FCTBS (masked to 12 bits).
    pub fn set_op_fctbs(&mut self, op: FcOp, fctbs: u16) {
        let v = (u16::from(op.bits()) << 12) | (fctbs & BLOCK_COUNT_MASK);
        self.buffer.as_mut()[field::OP_FCTBS].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets VL and FCCL (masked to 4 and 12 bits).
    pub fn set_vl_fccl(&mut self, vl: u8, fccl: u16) {
        let v = (u16::from(vl & 0x0F) << 12) | (fccl & BLOCK_COUNT_MASK);
        self.buffer.as_mut()[field::VL_FCCL].copy_from_slice(&v.to_be_bytes());
    }

    /// Computes and stores the LPCRC.
    pub fn fill_lpcrc(&mut self) {
        let c = self.computed_lpcrc();
        self.buffer.as_mut()[field::LPCRC].copy_from_slice(&c.to_le_bytes());
    }
}

/// A parsed flow-control packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowControlRepr {
    /// Operand.
    pub op: FcOp,
    /// Flow-control total blocks sent, modulo 4096.
    pub fctbs: u16,
    /// Virtual lane the credits are for.
    pub vl: u8,
    /// Flow-control credit limit, modulo 4096.
    pub fccl: u16,
}

impl FlowControlRepr {
    /// Parses a flow-control packet; rejects a reserved operand and a wrong LPCRC (the LPCRC
    /// check is skipped under `cfg(fuzzing)`).
    pub fn parse<T: AsRef<[u8]>>(packet: &FlowControlPacket<T>) -> Result<FlowControlRepr> {
        packet.check_len()?;
        let Some(op) = FcOp::from_bits(packet.op_bits()) else {
            return Err(Error::Malformed {
                header: "flow-control packet",
                reason: "reserved operand (only 0 and 1 are defined)",
            });
        };
        let (received, computed) = (packet.lpcrc(), packet.computed_lpcrc());
        if received != computed && !cfg!(fuzzing) {
            return Err(Error::VcrcMismatch { received, computed });
        }
        Ok(FlowControlRepr {
            op,
            fctbs: packet.fctbs(),
            vl: packet.vl(),
            fccl: packet.fccl(),
        })
    }

    /// Bytes [`FlowControlRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        FLOW_CONTROL_LEN
    }

    /// Writes the packet with its LPCRC.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut FlowControlPacket<T>,
    ) -> Result<()> {
        let available = packet.buffer.as_ref().len();
        if available < FLOW_CONTROL_LEN {
            return Err(Error::BufferTooSmall {
                needed: FLOW_CONTROL_LEN,
                available,
            });
        }
        if self.vl > 15 || self.fctbs > BLOCK_COUNT_MASK || self.fccl > BLOCK_COUNT_MASK {
            return Err(Error::Malformed {
                header: "flow-control packet",
                reason: "VL is 4 bits, FCTBS and FCCL 12 bits",
            });
        }
        packet.set_op_fctbs(self.op, self.fctbs);
        packet.set_vl_fccl(self.vl, self.fccl);
        packet.fill_lpcrc();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const REPR: FlowControlRepr = FlowControlRepr {
        op: FcOp::Init,
        fctbs: 0x123,
        vl: 2,
        fccl: 0xABC,
    };

    /// Op 1, FCTBS 0x123, VL 2, FCCL 0xABC, LPCRC 0xB983 (least-significant byte first).
    fn bytes() -> [u8; 6] {
        [0x11, 0x23, 0x2A, 0xBC, 0x83, 0xB9]
    }

    #[test]
    fn parse_byte_literal() {
        let b = bytes();
        assert_eq!(
            FlowControlRepr::parse(&FlowControlPacket::new_checked(&b[..]).unwrap()).unwrap(),
            REPR
        );
    }

    #[test]
    fn emit_byte_literal() {
        let mut buf = [0u8; 6];
        REPR.emit(&mut FlowControlPacket::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, bytes());
    }

    #[test]
    fn bad_lpcrc_reserved_op_and_short_buffer_are_errors() {
        let mut b = bytes();
        b[3] ^= 0x01;
        assert!(matches!(
            FlowControlRepr::parse(&FlowControlPacket::new_unchecked(&b[..])),
            Err(Error::VcrcMismatch { .. })
        ));
        let mut r = bytes();
        r[0] = 0x21;
        assert!(matches!(
            FlowControlRepr::parse(&FlowControlPacket::new_unchecked(&r[..])),
            Err(Error::Malformed { .. })
        ));
        assert!(FlowControlPacket::new_checked(&bytes()[..5]).is_err());
    }

    proptest! {
        #[test]
        fn emit_parse_identity(init: bool, fctbs in 0u16..4096, vl in 0u8..16, fccl in 0u16..4096) {
            let r = FlowControlRepr { op: if init { FcOp::Init } else { FcOp::Normal }, fctbs, vl, fccl };
            let mut buf = [0u8; 6];
            r.emit(&mut FlowControlPacket::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(FlowControlRepr::parse(&FlowControlPacket::new_checked(&buf[..]).unwrap()).unwrap(), r);
        }
    }
}
