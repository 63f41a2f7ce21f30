//! Placement of an incoming RDMA WRITE, shared by the RC responder and UC receive
//! (IBA 9.4.3): where the next payload byte goes, how much the RETH's DMA length still
//! allows, and the receive completion a WRITE with immediate ends with. What a violation
//! costs differs (RC NAKs, IBA 9.7.5.2.4; UC drops the message, IBA 9.8.2.2), so the
//! callers keep their error paths.

use softib_wire::PacketRepr;

use crate::memory::MrTable;
use crate::psn;
use crate::qp::recv_queue::RecvWqe;
use crate::qp::Qp;
use crate::shared::{RxMeta, Shared};
use crate::verbs::{VendorErr, WcFlags, WcOpcode, WcStatus};

/// The state of a WRITE being received: the region (by key) and where the next byte goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WriteCursor {
    /// R_Key of the target region (checked when the message started).
    pub key: u32,
    /// Offset in the region of the next byte.
    pub offset: u64,
    /// Bytes the RETH's DMA length still allows.
    pub remaining: u64,
    /// The RETH's DMA length.
    pub total: u64,
}

impl WriteCursor {
    /// Can a packet of `len` payload bytes come next? It may not overrun the DMA length,
    /// and the last packet must end it exactly (IBA 9.7.5.2.4 / C9-112 for RC).
    pub(crate) fn fits(&self, len: u64, ends: bool) -> bool {
        len <= self.remaining && (!ends || len == self.remaining)
    }

    /// Writes `payload` at the cursor and moves it on; false (nothing written) if the
    /// region has gone or shrunk since the message started.
    pub(crate) fn place(&mut self, mrs: &mut MrTable, payload: &[u8]) -> bool {
        let len = payload.len() as u64;
        if len > 0 {
            match mrs.get_mut(self.key) {
                Some(mr) if self.offset + len <= mr.memory.len() as u64 => {
                    mr.memory.write(self.offset as usize, payload)
                }
                _ => return false,
            }
        }
        self.offset += len;
        self.remaining -= len;
        true
    }
}

impl Qp {
    /// The last packet of a WRITE was placed: the message counts (MSN, IBA 9.7.5.1.2), and
    /// a WRITE with immediate completes the receive WQE it took (IBA 9.4.3).
    pub(crate) fn finish_write(
        &mut self,
        sh: &mut Shared,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        recv: Option<RecvWqe>,
        total: u64,
    ) {
        self.resp.msg = None;
        self.resp.msn = psn::add(self.resp.msn, 1);
        let Some(wqe) = recv else {
            return;
        };
        let src = self.attr.dest_qp_num;
        let mut flags = WcFlags::WITH_IMM;
        if pkt.bth.solicited {
            flags |= WcFlags::SOLICITED;
        }
        self.complete_recv(
            sh,
            wqe.wr_id,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            total as u32,
            flags,
            pkt.immdt,
            None,
            src,
            meta.slid,
            meta.sl,
            VendorErr::None,
        );
        sh.pools.recycle_sges(wqe.sges);
    }
}
