//! Moving message bytes between packets and scatter/gather lists, with every piece checked
//! against its region before the first byte moves (IBA 10.6.3: no byte outside a region).

use crate::memory::{for_each_sge_piece, LocalAccessFault, MrTable};
use crate::verbs::{PdHandle, Sge};

/// Checks every SGE of a WR (`write`: the HCA writes into them).
pub(crate) fn check_sges(
    mrs: &MrTable,
    pd: PdHandle,
    sges: &[Sge],
    write: bool,
) -> Result<(), LocalAccessFault> {
    for s in sges {
        if s.length > 0 {
            mrs.check_local(s, pd, write)?;
        }
    }
    Ok(())
}

/// Copies message bytes [`offset`, `offset + dst.len()`) from the SGEs (or inline data) into `dst`.
///
/// With `describe_zeros`, when every piece lies in memory that reads as zeros
/// ([`crate::Memory::reads_as_zeros`]) nothing is copied and the result is `Ok(true)`: `dst`
/// keeps its old bytes and the caller describes the payload instead. Every piece is checked
/// against its region exactly as for a copy. Otherwise (`Ok(false)`) `dst` holds the bytes.
pub(crate) fn gather(
    mrs: &MrTable,
    pd: PdHandle,
    sges: &[Sge],
    inline: Option<&[u8]>,
    offset: u64,
    dst: &mut [u8],
    describe_zeros: bool,
) -> Result<bool, LocalAccessFault> {
    if let Some(data) = inline {
        let start = offset as usize;
        let src = data
            .get(start..start + dst.len())
            .ok_or(LocalAccessFault::OutOfBounds)?;
        dst.copy_from_slice(src);
        return Ok(false);
    }
    let mut result = Ok(());
    let mut at = 0usize;
    // Pieces left unread because their memory reads as zeros, and pieces copied.
    let (mut described, mut copied) = (false, false);
    for_each_sge_piece(sges, offset, dst.len() as u64, |sge, off, len| {
        if result.is_err() {
            return;
        }
        let Some(addr) = sge.addr.checked_add(off) else {
            result = Err(LocalAccessFault::OutOfBounds);
            return;
        };
        let piece = Sge {
            addr,
            length: len as u32,
            lkey: sge.lkey,
        };
        match mrs.check_local(&piece, pd, false) {
            Ok(region_off) => {
                if let Some(mr) = mrs.get(sge.lkey) {
                    if describe_zeros && mr.memory.reads_as_zeros() {
                        described = true;
                    } else {
                        mr.memory.read(region_off, &mut dst[at..at + len as usize]);
                        copied = true;
                    }
                }
                at += len as usize;
            }
            Err(e) => result = Err(e),
        }
    });
    if result.is_ok() && at != dst.len() {
        return Err(LocalAccessFault::OutOfBounds);
    }
    result?;
    if described && copied {
        // Zeros and data mixed in one payload: it can only travel as bytes.
        return gather(mrs, pd, sges, None, offset, dst, false);
    }
    Ok(described)
}

/// Writes `src` at message offset `offset` into the SGEs. Every piece is checked first; on
/// error nothing was written.
pub(crate) fn scatter(
    mrs: &mut MrTable,
    pd: PdHandle,
    sges: &[Sge],
    offset: u64,
    src: &[u8],
) -> Result<(), LocalAccessFault> {
    let mut result = Ok(());
    let mut covered = 0u64;
    for_each_sge_piece(sges, offset, src.len() as u64, |sge, off, len| {
        if result.is_ok() {
            result = match sge.addr.checked_add(off) {
                Some(addr) => {
                    let piece = Sge {
                        addr,
                        length: len as u32,
                        lkey: sge.lkey,
                    };
                    mrs.check_local(&piece, pd, true).map(|_| ())
                }
                None => Err(LocalAccessFault::OutOfBounds),
            };
        }
        covered += len;
    });
    result?;
    if covered != src.len() as u64 {
        return Err(LocalAccessFault::OutOfBounds);
    }
    let mut at = 0usize;
    for_each_sge_piece(sges, offset, src.len() as u64, |sge, off, len| {
        if let Some(mr) = mrs.get_mut(sge.lkey) {
            let region_off = (sge.addr + off - mr.iova) as usize;
            mr.memory.write(region_off, &src[at..at + len as usize]);
        }
        at += len as usize;
    });
    Ok(())
}
