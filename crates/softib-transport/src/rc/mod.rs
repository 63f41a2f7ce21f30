//! Reliable Connected service (IBA 9.7): the requester (`requester.rs`) and the responder
//! (`responder.rs`) of one QP.

pub(crate) mod recovery;
pub(crate) mod recovery_state;
pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod xrc;

use softib_wire::PacketRepr;

use crate::qp::Qp;
use crate::shared::{RxMeta, Shared};
use crate::time::Nanos;

impl Qp {
    /// An RC packet for this QP: responses go to the requester, requests to the responder.
    pub(crate) fn rc_handle_packet(
        &mut self,
        now: Nanos,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        sh: &mut Shared,
    ) {
        if pkt.bth.opcode.is_response() {
            self.rc_handle_response(now, pkt, sh);
        } else {
            self.rc_handle_request(meta, pkt, sh);
        }
    }
}
