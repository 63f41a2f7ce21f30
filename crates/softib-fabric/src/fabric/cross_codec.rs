//! The byte form of what one partition sends another, for partitions in separate processes
//! (MPI ranks, `crate::parallel::run_distributed`). Little-endian, one record after another;
//! a malformed buffer is an error, never a panic.

use super::partition::Cross;
use crate::event::Tie;
use crate::packet::{CrcState, Packet, PacketMeta, ZeroSpan};
use crate::port::{WireItem, WireKind};
use crate::time::Picos;

/// Why bytes from another partition could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed exchange from another partition: {0}")]
pub struct CodecError(&'static str);

const DATA: u8 = 1;
const FC: u8 = 2;

/// Appends `msgs` to `out`.
pub(crate) fn encode(msgs: &[Cross], out: &mut Vec<u8>) {
    for m in msgs {
        match m {
            Cross::Data {
                port,
                item,
                arrive_at,
                tie,
                packet,
            } => {
                out.push(DATA);
                out.extend_from_slice(&port.to_le_bytes());
                out.extend_from_slice(&arrive_at.to_le_bytes());
                out.extend_from_slice(&tie.0.to_le_bytes());
                match item {
                    None => out.push(0),
                    Some(w) => {
                        let WireKind::Data {
                            vl, blocks, arrive, ..
                        } = w.kind
                        else {
                            unreachable!("a data packet's item is a data item")
                        };
                        out.push(1);
                        out.extend_from_slice(&w.at.to_le_bytes());
                        out.extend_from_slice(&w.epoch.to_le_bytes());
                        out.push(vl);
                        out.extend_from_slice(&blocks.to_le_bytes());
                        out.extend_from_slice(&arrive.to_le_bytes());
                    }
                }
                encode_packet(packet, out);
            }
            Cross::Fc { port, item } => {
                let WireKind::Fc { vl, fctbs, fccl } = item.kind else {
                    unreachable!("a flow-control item")
                };
                out.push(FC);
                out.extend_from_slice(&port.to_le_bytes());
                out.extend_from_slice(&item.at.to_le_bytes());
                out.extend_from_slice(&item.epoch.to_le_bytes());
                out.push(vl);
                out.extend_from_slice(&fctbs.to_le_bytes());
                out.extend_from_slice(&fccl.to_le_bytes());
            }
        }
    }
}

fn encode_packet(p: &Packet, out: &mut Vec<u8>) {
    let m = &p.meta;
    out.extend_from_slice(&m.dlid.to_le_bytes());
    out.extend_from_slice(&m.slid.to_le_bytes());
    out.push(m.sl);
    out.push(m.vl);
    out.extend_from_slice(&m.len.to_le_bytes());
    out.extend_from_slice(&m.blocks.to_le_bytes());
    out.extend_from_slice(&m.flow.to_le_bytes());
    out.extend_from_slice(&m.injected_at.to_le_bytes());
    out.push(match m.crc {
        CrcState::Implicit => 0,
        CrcState::Materialized => 1,
        CrcState::Corrupted => 2,
    });
    out.push(m.ebp as u8);
    match m.zero_payload {
        None => out.push(0),
        Some(z) => {
            out.push(1);
            out.extend_from_slice(&z.offset.to_le_bytes());
            out.extend_from_slice(&z.len.to_le_bytes());
        }
    }
    out.extend_from_slice(&p.tail_at.to_le_bytes());
    out.extend_from_slice(&p.epoch.to_le_bytes());
    out.push(p.accounted as u8 | (p.rejected as u8) << 1);
    out.extend_from_slice(&p.out_port.to_le_bytes());
    out.push(p.out_vl);
    out.extend_from_slice(p.bytes());
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], CodecError> {
        if self.0.len() < n {
            return Err(CodecError("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

/// Reads what [`encode`] wrote.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<Cross>, CodecError> {
    let mut r = Reader(bytes);
    let mut out = Vec::new();
    while !r.0.is_empty() {
        match r.u8()? {
            DATA => {
                let port = r.u32()?;
                let arrive_at: Picos = r.u64()?;
                let tie = Tie(r.u64()?);
                let item = match r.u8()? {
                    0 => None,
                    1 => {
                        let at = r.u64()?;
                        let epoch = r.u32()?;
                        let vl = r.u8()?;
                        let blocks = r.u16()?;
                        let arrive = r.u64()?;
                        Some(WireItem {
                            at,
                            epoch,
                            kind: WireKind::Data {
                                id: crate::packet::PacketId::placeholder(),
                                vl,
                                blocks,
                                arrive,
                            },
                        })
                    }
                    _ => return Err(CodecError("bad item flag")),
                };
                let packet = decode_packet(&mut r)?;
                out.push(Cross::Data {
                    port,
                    item,
                    arrive_at,
                    tie,
                    packet,
                });
            }
            FC => {
                let port = r.u32()?;
                let at = r.u64()?;
                let epoch = r.u32()?;
                let vl = r.u8()?;
                let fctbs = r.u16()?;
                let fccl = r.u16()?;
                out.push(Cross::Fc {
                    port,
                    item: WireItem {
                        at,
                        epoch,
                        kind: WireKind::Fc { vl, fctbs, fccl },
                    },
                });
            }
            _ => return Err(CodecError("unknown record")),
        }
    }
    Ok(out)
}

fn decode_packet(r: &mut Reader<'_>) -> Result<Packet, CodecError> {
    let dlid = r.u16()?;
    let slid = r.u16()?;
    let sl = r.u8()?;
    let vl = r.u8()?;
    let len = r.u16()?;
    let blocks = r.u16()?;
    let flow = r.u32()?;
    let injected_at = r.u64()?;
    let crc = match r.u8()? {
        0 => CrcState::Implicit,
        1 => CrcState::Materialized,
        2 => CrcState::Corrupted,
        _ => return Err(CodecError("bad CRC state")),
    };
    let ebp = r.u8()? != 0;
    let zero_payload = match r.u8()? {
        0 => None,
        1 => Some(ZeroSpan {
            offset: r.u16()?,
            len: r.u16()?,
        }),
        _ => return Err(CodecError("bad zero-payload flag")),
    };
    let tail_at = r.u64()?;
    let epoch = r.u32()?;
    let flags = r.u8()?;
    let out_port = r.u32()?;
    let out_vl = r.u8()?;
    if !(14..=crate::packet::MAX_PACKET_BYTES).contains(&(len as usize)) {
        return Err(CodecError("bad packet length"));
    }
    let buf = r.take(len as usize)?.to_vec();
    let meta = PacketMeta {
        dlid,
        slid,
        sl,
        vl,
        len,
        blocks,
        flow,
        injected_at,
        crc,
        ebp,
        zero_payload,
    };
    Ok(Packet::from_parts(
        meta,
        (tail_at, epoch, flags & 1 != 0, flags & 2 != 0),
        (out_port, out_vl),
        buf,
    ))
}
