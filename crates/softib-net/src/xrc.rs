//! XRC on a [`Context`] (IBA vol. 1 Annex A14; the engine's rules are in softib-transport's
//! `rc/xrc.rs`). An initiator is an ordinary QP of type `QpType::XrcSend` (create it with
//! [`Context::create_qp`], connect it with [`Context::connect`], name the remote XRC SRQ in
//! `SendWr::xrc_remote_srqn`); a target is created in an XRC domain with
//! [`Context::create_xrc_target_qp`] and connected the same way; receives are posted to an
//! XRC SRQ with [`Context::post_srq_recv`] and complete on the SRQ's CQ.

use softib_transport::{CqHandle, PdHandle, SrqAttr, SrqHandle, VerbsError, XrcdHandle};

use crate::context::Context;

impl Context {
    /// `ibv_open_xrcd`: a new XRC domain.
    pub fn open_xrcd(&self) -> XrcdHandle {
        self.with_driver(|d| d.engine_mut().open_xrcd())
    }

    /// `ibv_close_xrcd`: refused while XRC SRQs or target QPs belong to the domain.
    pub fn close_xrcd(&self, xrcd: XrcdHandle) -> Result<(), VerbsError> {
        self.with_driver(|d| d.engine_mut().close_xrcd(xrcd))
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ of `xrcd` whose receive completions
    /// go to `cq` and whose memory accesses are checked against `pd`.
    pub fn create_xrc_srq(
        &self,
        pd: PdHandle,
        xrcd: XrcdHandle,
        cq: CqHandle,
        attr: SrqAttr,
    ) -> Result<SrqHandle, VerbsError> {
        self.with_driver(|d| d.engine_mut().create_xrc_srq(pd, xrcd, cq, attr))
    }

    /// `ibv_get_srq_num`: the number initiators put in `SendWr::xrc_remote_srqn`; None for
    /// an SRQ that is not an XRC SRQ.
    pub fn srq_num(&self, srq: SrqHandle) -> Option<u32> {
        self.lock().engine().srq_num(srq)
    }

    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP of `xrcd` (no PD, CQ or
    /// queues of its own), in RESET; connect it with [`Context::connect`] and
    /// `QpType::XrcRecv`.
    pub fn create_xrc_target_qp(&self, xrcd: XrcdHandle) -> Result<u32, VerbsError> {
        self.with_driver(|d| d.engine_mut().create_xrc_target_qp(xrcd))
    }

    /// `ibv_destroy_srq` (also for XRC SRQs): refused while QPs are attached.
    pub fn destroy_srq(&self, srq: SrqHandle) -> Result<(), VerbsError> {
        self.with_driver(|d| d.engine_mut().destroy_srq(srq))
    }
}
