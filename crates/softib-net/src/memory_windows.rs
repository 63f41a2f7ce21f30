//! Memory windows on a [`Context`] (IBA vol. 1 §10.6.7; the engine's rules are in
//! softib-transport's `mw.rs`). Windows are allocated and deallocated here; type 1 windows
//! are bound with [`Context::bind_mw`], type 2 windows with a `WrOpcode::BindMw` WR through
//! [`Context::post_send`], and `WrOpcode::LocalInv` / `WrOpcode::SendWithInv` WRs free them.

use softib_transport::{MwBind, MwType, PdHandle, SendFlags, VerbsError};

use crate::context::Context;

impl Context {
    /// `ibv_alloc_mw`: a window of `kind` in `pd`; returns its R_Key (which names it).
    pub fn alloc_mw(&self, pd: PdHandle, kind: MwType) -> Result<u32, VerbsError> {
        self.with_driver(|d| d.engine_mut().alloc_mw(pd, kind))
    }

    /// `ibv_dealloc_mw`: a bound window is unbound first, so its R_Key stops working at once.
    pub fn dealloc_mw(&self, rkey: u32) -> Result<(), VerbsError> {
        self.with_driver(|d| d.engine_mut().dealloc_mw(rkey))
    }

    /// `ibv_bind_mw` for a type 1 window: posts the bind on `qpn` (it completes there with
    /// `WcOpcode::BindMw` and `wr_id`, in order with the QP's other WRs). `bind.new_rkey`
    /// is ignored; the returned R_Key (the key part moved on by one, `ibv_inc_rkey`) is the
    /// window's once the bind completes successfully.
    pub fn bind_mw(
        &self,
        qpn: u32,
        wr_id: u64,
        flags: SendFlags,
        bind: MwBind,
    ) -> Result<u32, VerbsError> {
        self.with_driver(|d| {
            let now = d.now();
            d.engine_mut().bind_mw(now, qpn, wr_id, flags, bind)
        })
    }
}
