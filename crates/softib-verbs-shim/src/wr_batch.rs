//! The work requests an application builds with the `ibv_wr_*` post-send API between
//! `ibv_wr_start` and `ibv_wr_complete` (ibv_wr_post(3)). Each opcode call starts a WR
//! (taking the `wr_id` and `wr_flags` the application set in `ibv_qp_ex` at that moment),
//! the `wr_set_*` calls fill in the last one, and `ibv_wr_complete` turns the batch into
//! classic `ibv_send_wr`s for the same conversion `ibv_post_send` uses, so both APIs post
//! identical engine WRs.
//!
//! A builder call that cannot be honoured (inline data beyond `max_inline_data`, more SGEs
//! than `max_send_sge`, a `wr_set_*` without a WR, an opcode the QP was not created for)
//! records the error; `ibv_wr_complete` then posts nothing and returns it, as rxe's
//! provider does.

use crate::abi::*;
use crate::abi_ex::*;

/// Why a batch cannot be posted: errno and the reason for `SOFTIB_DEBUG`.
pub type BatchError = (i32, String);

/// One WR being built.
#[derive(Debug)]
pub struct PendingWr {
    /// `wr_id` at the opcode call.
    pub wr_id: u64,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    /// `wr_flags` at the opcode call (`enum ibv_send_flags`).
    pub send_flags: u32,
    /// Immediate data (network order) or the rkey to invalidate.
    pub imm_data: u32,
    /// The remote address, rkey, atomic operands or UD destination, in `ibv_send_wr`'s
    /// union layout.
    pub wr: ibv_send_wr_wr,
    /// The gather list (`wr_set_sge`, `wr_set_sge_list`).
    pub sges: Vec<ibv_sge>,
    /// Inline payload copied at the `wr_set_inline_data*` call (the application may reuse
    /// its buffer as soon as the call returns).
    pub inline: Option<Vec<u8>>,
    /// `bind_mw` of `ibv_send_wr` for a BIND_MW WR (see [`bind_mw_words`]).
    pub bind_mw: [u64; 6],
    /// `qp_type.xrc.remote_srqn` (`ibv_wr_set_xrc_srqn`).
    pub remote_srqn: u32,
}

/// The batch of one `ibv_wr_start` .. `ibv_wr_complete` section.
#[derive(Debug, Default)]
pub struct WrBatch {
    /// The WRs, in posting order.
    pub wrs: Vec<PendingWr>,
    /// The first builder error; the batch is refused as a whole.
    pub err: Option<BatchError>,
}

/// The QP's limits the builder enforces (granted at creation).
#[derive(Clone, Copy, Debug)]
pub struct BuildLimits {
    /// `send_ops_flags` of `ibv_create_qp_ex`.
    pub send_ops: u64,
    /// `cap.max_send_sge`.
    pub max_send_sge: u32,
    /// `cap.max_inline_data`.
    pub max_inline_data: u32,
}

/// The `IBV_QP_EX_WITH_*` bit that enables an `ibv_wr_opcode`.
pub fn send_op_bit(opcode: u32) -> u64 {
    match opcode {
        IBV_WR_RDMA_WRITE => IBV_QP_EX_WITH_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM => IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        IBV_WR_SEND => IBV_QP_EX_WITH_SEND,
        IBV_WR_SEND_WITH_IMM => IBV_QP_EX_WITH_SEND_WITH_IMM,
        IBV_WR_RDMA_READ => IBV_QP_EX_WITH_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP => IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD => IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV => IBV_QP_EX_WITH_LOCAL_INV,
        IBV_WR_BIND_MW => IBV_QP_EX_WITH_BIND_MW,
        IBV_WR_SEND_WITH_INV => IBV_QP_EX_WITH_SEND_WITH_INV,
        IBV_WR_TSO => IBV_QP_EX_WITH_TSO,
        IBV_WR_ATOMIC_WRITE => IBV_QP_EX_WITH_ATOMIC_WRITE,
        _ => 0,
    }
}

/// The `send_ops_flags` softib's engine carries out, per service, as rxe's provider
/// grants them (RC: everything but TSO, ATOMIC WRITE included (IBA 1.5, rxe since Linux
/// 6.2); XRC initiators: RC's set without ATOMIC WRITE, which rxe has on RC only; UC: no READ, atomics or local
/// invalidate, IBA 9.8 / o9-1; UD: SEND only, IBA 9.8.3).
pub fn supported_send_ops(qp_type: u32) -> u64 {
    let uc = IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | IBV_QP_EX_WITH_SEND
        | IBV_QP_EX_WITH_SEND_WITH_IMM
        | IBV_QP_EX_WITH_SEND_WITH_INV
        | IBV_QP_EX_WITH_BIND_MW;
    match qp_type {
        IBV_QPT_RC => {
            uc | IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | IBV_QP_EX_WITH_LOCAL_INV
                | IBV_QP_EX_WITH_ATOMIC_WRITE
        }
        IBV_QPT_UC => uc,
        IBV_QPT_UD => IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
        // An XRC initiator carries RC's operations to the SRQ it names (IBA A14.4).
        IBV_QPT_XRC_SEND => {
            uc | IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | IBV_QP_EX_WITH_LOCAL_INV
        }
        _ => 0,
    }
}

/// Two consecutive `uint32_t` fields of the WR union as the 8-byte word holding them.
fn two_u32(first: u32, second: u32) -> u64 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&first.to_ne_bytes());
    b[4..].copy_from_slice(&second.to_ne_bytes());
    u64::from_ne_bytes(b)
}

/// `wr.rdma` of `ibv_send_wr`: remote address and rkey.
pub fn rdma_wr(rkey: u32, remote_addr: u64) -> ibv_send_wr_wr {
    ibv_send_wr_wr {
        word0: remote_addr,
        word1: two_u32(rkey, 0),
        ..Default::default()
    }
}

/// `wr.atomic` of `ibv_send_wr`: remote address, operands and rkey.
pub fn atomic_wr(rkey: u32, remote_addr: u64, compare_add: u64, swap: u64) -> ibv_send_wr_wr {
    ibv_send_wr_wr {
        word0: remote_addr,
        word1: compare_add,
        word2: swap,
        word3: rkey,
    }
}

/// `bind_mw` of `ibv_send_wr` (`{ mw, rkey, bind_info { mr, addr, length,
/// mw_access_flags } }`) as the six words of its union: window and region as addresses.
pub fn bind_mw_words(
    mw: usize,
    rkey: u32,
    mr: usize,
    addr: u64,
    length: u64,
    access: u32,
) -> [u64; 6] {
    [
        mw as u64,
        two_u32(rkey, 0),
        mr as u64,
        addr,
        length,
        two_u32(access, 0),
    ]
}

impl WrBatch {
    /// `ibv_wr_start`: a new, empty batch.
    pub fn start(&mut self) {
        self.wrs.clear();
        self.err = None;
    }

    fn fail(&mut self, errno: i32, why: String) {
        if self.err.is_none() {
            self.err = Some((errno, why));
        }
    }

    /// An opcode call (`ibv_wr_send`, `ibv_wr_rdma_write`, ...): starts a WR.
    pub fn begin(
        &mut self,
        limits: &BuildLimits,
        wr_id: u64,
        wr_flags: u32,
        opcode: u32,
        imm_data: u32,
        wr: ibv_send_wr_wr,
    ) {
        if limits.send_ops & send_op_bit(opcode) == 0 {
            self.fail(
                libc::EINVAL,
                format!(
                    "opcode {opcode}: the QP was created without its IBV_QP_EX_WITH_* flag \
                     (send_ops_flags {:#x})",
                    limits.send_ops
                ),
            );
        }
        self.wrs.push(PendingWr {
            wr_id,
            opcode,
            send_flags: wr_flags,
            imm_data,
            wr,
            sges: Vec::new(),
            inline: None,
            bind_mw: [0; 6],
            remote_srqn: 0,
        });
    }

    /// `ibv_wr_atomic_write`: an ATOMIC WRITE of the 8 bytes the caller passed, copied
    /// now (the application may reuse its buffer when the call returns, as with rxe, whose
    /// provider copies them into the WQE). They travel as the WR's inline payload, which
    /// `max_inline_data` does not bound (they are part of the WQE, not inline data).
    pub fn begin_atomic_write(
        &mut self,
        limits: &BuildLimits,
        wr_id: u64,
        wr_flags: u32,
        rkey: u32,
        remote_addr: u64,
        value: [u8; 8],
    ) {
        self.begin(
            limits,
            wr_id,
            wr_flags,
            IBV_WR_ATOMIC_WRITE,
            0,
            rdma_wr(rkey, remote_addr),
        );
        if let Some(w) = self.wrs.last_mut() {
            w.inline = Some(value.to_vec());
        }
    }

    /// `ibv_wr_bind_mw`: a BIND_MW WR (no gather list).
    pub fn begin_bind(&mut self, limits: &BuildLimits, wr_id: u64, wr_flags: u32, bind: [u64; 6]) {
        self.begin(
            limits,
            wr_id,
            wr_flags,
            IBV_WR_BIND_MW,
            0,
            Default::default(),
        );
        if let Some(w) = self.wrs.last_mut() {
            w.bind_mw = bind;
        }
    }

    fn last(&mut self, what: &str) -> Option<&mut PendingWr> {
        if self.wrs.is_empty() {
            self.fail(libc::EINVAL, format!("{what} before any opcode call"));
            return None;
        }
        self.wrs.last_mut()
    }

    /// `ibv_wr_set_ud_addr`: the UD destination of the last WR (`ah` as an address).
    pub fn set_ud_addr(&mut self, ah: usize, remote_qpn: u32, remote_qkey: u32) {
        if let Some(w) = self.last("wr_set_ud_addr") {
            w.wr.word0 = ah as u64;
            w.wr.word1 = two_u32(remote_qpn, remote_qkey);
        }
    }

    /// `ibv_wr_set_xrc_srqn`: the remote XRC SRQ of the last WR.
    pub fn set_xrc_srqn(&mut self, remote_srqn: u32) {
        if let Some(w) = self.last("wr_set_xrc_srqn") {
            w.remote_srqn = remote_srqn;
        }
    }

    /// `ibv_wr_set_sge_list` (and `ibv_wr_set_sge` with one entry; a zero-length single
    /// SGE means no data, as in rxe).
    pub fn set_sges(&mut self, limits: &BuildLimits, sges: Vec<ibv_sge>) {
        let n = sges.len();
        let max = limits.max_send_sge;
        let Some(w) = self.last("wr_set_sge") else {
            return;
        };
        if n > max as usize {
            self.fail(libc::ENOSPC, format!("{n} SGEs exceed max_send_sge {max}"));
            return;
        }
        w.sges = sges;
        w.inline = None;
    }

    /// `ibv_wr_set_inline_data_list` (and `ibv_wr_set_inline_data` with one buffer): the
    /// bytes, already copied by the caller.
    pub fn set_inline(&mut self, limits: &BuildLimits, bytes: Vec<u8>) {
        let max = limits.max_inline_data;
        let n = bytes.len();
        let Some(w) = self.last("wr_set_inline_data") else {
            return;
        };
        if n > max as usize {
            self.fail(
                libc::ENOSPC,
                format!("{n} inline bytes exceed max_inline_data {max}"),
            );
            return;
        }
        w.inline = Some(bytes);
        w.sges.clear();
    }

    /// Records an error found by the caller (e.g. an unsupported builder).
    pub fn refuse(&mut self, errno: i32, why: String) {
        self.fail(errno, why);
    }

    /// Takes the finished batch (`ibv_wr_complete`): the WRs, or the recorded error.
    pub fn finish(&mut self) -> Result<Vec<PendingWr>, BatchError> {
        let wrs = std::mem::take(&mut self.wrs);
        match self.err.take() {
            Some(e) => Err(e),
            None => Ok(wrs),
        }
    }
}

impl PendingWr {
    /// The classic WR for `ibv_post_send`'s conversion. `sge_store` receives the gather
    /// list the returned WR points at (an inline payload becomes one SGE over `inline` with
    /// `IBV_SEND_INLINE`), so it must outlive the WR's use.
    pub fn to_send_wr(&self, sge_store: &mut Vec<ibv_sge>) -> ibv_send_wr {
        sge_store.clear();
        let mut flags = self.send_flags;
        match &self.inline {
            Some(bytes) => {
                flags |= IBV_SEND_INLINE;
                if !bytes.is_empty() {
                    sge_store.push(ibv_sge {
                        addr: bytes.as_ptr() as u64,
                        length: bytes.len() as u32,
                        lkey: 0,
                    });
                }
            }
            None => sge_store.extend(self.sges.iter().filter(|g| g.length > 0).copied()),
        }
        ibv_send_wr {
            wr_id: self.wr_id,
            next: std::ptr::null_mut(),
            sg_list: if sge_store.is_empty() {
                std::ptr::null_mut()
            } else {
                sge_store.as_mut_ptr()
            },
            num_sge: sge_store.len() as i32,
            opcode: self.opcode,
            send_flags: flags,
            imm_data: self.imm_data,
            wr: self.wr,
            remote_srqn: self.remote_srqn,
            bind_mw_or_tso: self.bind_mw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: BuildLimits = BuildLimits {
        send_ops: IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
        max_send_sge: 2,
        max_inline_data: 8,
    };

    #[test]
    fn a_batch_keeps_order_ids_flags_and_gather_lists() {
        let mut b = WrBatch::default();
        b.start();
        b.begin(
            &LIMITS,
            7,
            IBV_SEND_SIGNALED,
            IBV_WR_SEND,
            0,
            Default::default(),
        );
        b.set_sges(
            &LIMITS,
            vec![ibv_sge {
                addr: 0x1000,
                length: 16,
                lkey: 5,
            }],
        );
        let rdma = rdma_wr(0x77, 0xdead_0000);
        b.begin(&LIMITS, 8, 0, IBV_WR_RDMA_WRITE, 0, rdma);
        b.set_inline(&LIMITS, b"hello".to_vec());
        let wrs = b.finish().unwrap();
        assert_eq!(wrs.len(), 2);
        let mut store = Vec::new();
        let w0 = wrs[0].to_send_wr(&mut store);
        assert_eq!((w0.wr_id, w0.opcode, w0.send_flags), (7, IBV_WR_SEND, 2));
        assert_eq!((w0.num_sge, store[0].lkey, store[0].length), (1, 5, 16));
        let w1 = wrs[1].to_send_wr(&mut store);
        assert_eq!(w1.send_flags & IBV_SEND_INLINE, IBV_SEND_INLINE);
        assert_eq!((w1.num_sge, store[0].length), (1, 5));
        assert_eq!(w1.wr.remote_addr(), 0xdead_0000);
        assert_eq!(w1.wr.rdma_rkey(), 0x77);
    }

    #[test]
    fn builder_errors_refuse_the_whole_batch() {
        let mut b = WrBatch::default();
        b.start();
        b.set_sges(&LIMITS, Vec::new());
        assert_eq!(b.finish().unwrap_err().0, libc::EINVAL);

        b.start();
        b.begin(&LIMITS, 1, 0, IBV_WR_SEND, 0, Default::default());
        b.set_inline(&LIMITS, vec![0; 9]);
        assert_eq!(b.finish().unwrap_err().0, libc::ENOSPC);

        b.start();
        b.begin(&LIMITS, 1, 0, IBV_WR_SEND, 0, Default::default());
        b.set_sges(&LIMITS, vec![ibv_sge::default(); 3]);
        assert_eq!(b.finish().unwrap_err().0, libc::ENOSPC);

        // An opcode the QP was not created for.
        b.start();
        b.begin(&LIMITS, 1, 0, IBV_WR_RDMA_READ, 0, Default::default());
        assert_eq!(b.finish().unwrap_err().0, libc::EINVAL);

        // A new start forgets the failed batch.
        b.start();
        b.begin(&LIMITS, 1, 0, IBV_WR_SEND, 0, Default::default());
        assert_eq!(b.finish().unwrap().len(), 1);
    }

    #[test]
    fn ud_address_lands_where_post_send_reads_it() {
        let mut b = WrBatch::default();
        b.start();
        b.begin(&LIMITS, 1, 0, IBV_WR_SEND, 0, Default::default());
        b.set_ud_addr(0x5000, 0x12, 0x1111_2222);
        let w = b.finish().unwrap().remove(0).to_send_wr(&mut Vec::new());
        assert_eq!(w.wr.ud_ah(), 0x5000);
        assert_eq!(w.wr.ud_remote_qpn(), 0x12);
        assert_eq!(w.wr.ud_remote_qkey(), 0x1111_2222);
    }

    #[test]
    fn supported_ops_follow_the_service() {
        assert_ne!(supported_send_ops(IBV_QPT_RC) & IBV_QP_EX_WITH_RDMA_READ, 0);
        assert_eq!(supported_send_ops(IBV_QPT_UC) & IBV_QP_EX_WITH_RDMA_READ, 0);
        assert_eq!(
            supported_send_ops(IBV_QPT_UD) & IBV_QP_EX_WITH_RDMA_WRITE,
            0
        );
        assert_ne!(supported_send_ops(IBV_QPT_RC) & IBV_QP_EX_WITH_BIND_MW, 0);
        assert_eq!(supported_send_ops(IBV_QPT_UC) & IBV_QP_EX_WITH_LOCAL_INV, 0);
        // IBA 1.5 ATOMIC WRITE: RC only, as rxe.
        assert_ne!(
            supported_send_ops(IBV_QPT_RC) & IBV_QP_EX_WITH_ATOMIC_WRITE,
            0
        );
        for t in [IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_XRC_SEND] {
            assert_eq!(
                supported_send_ops(t) & IBV_QP_EX_WITH_ATOMIC_WRITE,
                0,
                "{t}"
            );
        }
        assert_eq!(supported_send_ops(IBV_QPT_RC) & IBV_QP_EX_WITH_TSO, 0);
    }

    #[test]
    fn an_atomic_write_carries_its_8_bytes_inline_in_rdma_layout() {
        let l = BuildLimits {
            send_ops: IBV_QP_EX_WITH_ATOMIC_WRITE,
            max_inline_data: 0,
            ..LIMITS
        };
        let mut b = WrBatch::default();
        b.start();
        b.begin_atomic_write(
            &l,
            9,
            IBV_SEND_SIGNALED,
            0x1234,
            0xdead_beef_0008,
            *b"8 bytes!",
        );
        let wrs = b.finish().unwrap();
        let mut store = Vec::new();
        let w = wrs[0].to_send_wr(&mut store);
        assert_eq!(w.opcode, IBV_WR_ATOMIC_WRITE);
        assert_eq!(w.send_flags, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
        assert_eq!(
            (w.wr.remote_addr(), w.wr.rdma_rkey()),
            (0xdead_beef_0008, 0x1234)
        );
        assert_eq!(w.num_sge, 1);
        assert_eq!(store[0].length, 8);
        let inline = wrs[0].inline.as_deref().unwrap();
        assert_eq!(inline, b"8 bytes!");
        assert_eq!(store[0].addr, inline.as_ptr() as u64);
        // A QP created without the flag refuses it.
        let mut b = WrBatch::default();
        b.start();
        b.begin_atomic_write(&LIMITS, 1, 0, 1, 0, [0; 8]);
        assert_eq!(b.finish().unwrap_err().0, libc::EINVAL);
    }

    #[test]
    fn a_bind_lands_where_the_classic_conversion_reads_it() {
        let l = BuildLimits {
            send_ops: IBV_QP_EX_WITH_BIND_MW,
            ..LIMITS
        };
        let mut b = WrBatch::default();
        b.start();
        b.begin_bind(&l, 3, 0, bind_mw_words(0x10, 0x1234, 0x20, 0x3000, 64, 2));
        let w = b.finish().unwrap().remove(0).to_send_wr(&mut Vec::new());
        assert_eq!(w.opcode, IBV_WR_BIND_MW);
        assert_eq!(w.bind_mw_mw() as usize, 0x10);
        assert_eq!(w.bind_mw_rkey(), 0x1234);
        let i = w.bind_mw_info();
        assert_eq!(
            (i.mr as usize, i.addr, i.length, i.mw_access_flags),
            (0x20, 0x3000, 64, 2)
        );
    }
}
