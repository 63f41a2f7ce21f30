//! Zero-copy packet output: headers are emitted in front of a payload slot that the caller
//! fills straight from registered memory (no intermediate buffer, no allocation).

use softib_wire::{pad_for, BthRepr, Opcode, Operation, PacketRepr, Service};

/// A BTH for `opcode` with the fields every sender sets; the rest default to zero/false.
pub(crate) fn bth(opcode: Opcode, pkey: u16, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: true,
        pad_count: 0,
        tver: 0,
        pkey,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: false,
        psn,
    }
}

/// The opcode for a (service, operation) pair the caller knows to be valid.
pub(crate) fn opcode(service: Service, op: Operation) -> Opcode {
    // Every caller passes a combination from IBA table 38; fall back to an ACK (which a
    // peer can always parse) rather than panicking if that ever changes.
    Opcode::new(service, op).unwrap_or_else(|| {
        Opcode::new(Service::Rc, Operation::Acknowledge).expect("RC ACKNOWLEDGE is valid")
    })
}

/// Splits `buf` into a header area for `repr` and a payload slot of `payload_len` bytes,
/// zeroing the pad. `None` if `buf` is too small.
pub(crate) fn layout<'b>(
    buf: &'b mut [u8],
    repr: &PacketRepr<'_>,
    payload_len: usize,
) -> Option<(&'b mut [u8], &'b mut [u8])> {
    let header_len = repr.header_len();
    let pad = pad_for(payload_len);
    if buf.len() < header_len + payload_len + pad {
        return None;
    }
    let (head, rest) = buf.split_at_mut(header_len);
    rest[payload_len..payload_len + pad].fill(0);
    Some((head, &mut rest[..payload_len]))
}

/// Emits the headers of `repr` for a payload of `payload_len` bytes already placed after
/// them; returns the packet length.
pub(crate) fn finish(head: &mut [u8], repr: &PacketRepr<'_>, payload_len: usize) -> Option<usize> {
    let n = repr.emit_headers_for_payload_len(payload_len, head).ok()?;
    Some(n + payload_len + pad_for(payload_len))
}

/// Emits a packet without payload.
pub(crate) fn emit_bare(buf: &mut [u8], repr: &PacketRepr<'_>) -> Option<usize> {
    let (head, _) = layout(buf, repr, 0)?;
    finish(head, repr, 0)
}
