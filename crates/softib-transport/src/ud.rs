//! Unreliable Datagram receive side (IBA 9.8.3): SEND_ONLY(_IMM) only, the Q_Key check,
//! and the 40-byte GRH area in front of the payload as Linux delivers it.

use softib_wire::{Operation, PacketRepr};

use crate::device::{RxGrh, RxMeta, Shared};
use crate::dma;
use crate::qp::Qp;
use crate::verbs::{VendorErr, WcFlags, WcOpcode, WcStatus};

/// Bytes reserved at the start of every UD receive buffer for the GRH (IBA 11.4.1.2).
pub const GRH_AREA: usize = 40;

/// The 40-byte GRH as it sits in a UD receive buffer (IBA 8.3.1 layout; the IP version
/// nibble is 6, next header 0x1B = IBA transport).
pub(crate) fn grh_bytes(g: &RxGrh, payload_len: u16) -> [u8; GRH_AREA] {
    let mut b = [0u8; GRH_AREA];
    let word0: u32 = (6 << 28) | ((g.traffic_class as u32) << 20) | (g.flow_label & 0xF_FFFF);
    b[0..4].copy_from_slice(&word0.to_be_bytes());
    b[4..6].copy_from_slice(&payload_len.to_be_bytes());
    b[6] = 0x1B;
    b[7] = g.hop_limit;
    b[8..24].copy_from_slice(&g.sgid);
    b[24..40].copy_from_slice(&g.dgid);
    b
}

impl Qp {
    /// A UD packet. `Err(())` means a Q_Key mismatch (counted by the device as well).
    pub(crate) fn ud_handle_packet(
        &mut self,
        meta: &RxMeta,
        pkt: &PacketRepr<'_>,
        sh: &mut Shared,
    ) -> Result<(), ()> {
        let op = pkt.bth.opcode.operation();
        if !matches!(op, Operation::SendOnly | Operation::SendOnlyImm) {
            self.counters.invalid_requests += 1;
            return Ok(());
        }
        let Some(deth) = pkt.deth else { return Ok(()) };
        // IBA 10.2.5 / C10-15: the packet's Q_Key must equal the QP's.
        if deth.qkey != self.attr.qkey {
            self.counters.bad_qkey_drops += 1;
            return Err(());
        }
        if pkt.payload.len() > sh.config.max_mtu.bytes() as usize {
            self.counters.invalid_requests += 1;
            return Ok(());
        }
        let Some(wqe) = self.take_recv(sh) else {
            // No receive WQE: UD drops silently (IBA 9.8.3.2).
            self.counters.out_of_sequence_drops += 1;
            return Ok(());
        };
        let total = GRH_AREA as u64 + pkt.payload.len() as u64;
        let mut flags = WcFlags::empty();
        if pkt.immdt.is_some() {
            flags |= WcFlags::WITH_IMM;
        }
        if pkt.bth.solicited {
            flags |= WcFlags::SOLICITED;
        }
        let src = deth.src_qp;
        if total > wqe.capacity {
            self.complete_recv(
                sh,
                wqe.wr_id,
                WcStatus::LocLenErr,
                WcOpcode::Recv,
                0,
                flags,
                None,
                None,
                src,
                meta.slid,
                meta.sl,
                VendorErr::RecvBufferTooSmall,
            );
            return Ok(());
        }
        let mut placed = Ok(());
        if let Some(g) = &meta.grh {
            flags |= WcFlags::GRH;
            let bytes = grh_bytes(g, (pkt.payload.len() + 12 + 8) as u16);
            placed = dma::scatter(&mut sh.mrs, self.pd, &wqe.sges, 0, &bytes);
        }
        if placed.is_ok() {
            placed = dma::scatter(
                &mut sh.mrs,
                self.pd,
                &wqe.sges,
                GRH_AREA as u64,
                pkt.payload,
            );
        }
        if placed.is_err() {
            self.complete_recv(
                sh,
                wqe.wr_id,
                WcStatus::LocProtErr,
                WcOpcode::Recv,
                0,
                flags,
                None,
                None,
                src,
                meta.slid,
                meta.sl,
                VendorErr::NoLocalWrite,
            );
            return Ok(());
        }
        self.complete_recv(
            sh,
            wqe.wr_id,
            WcStatus::Success,
            WcOpcode::Recv,
            total as u32,
            flags,
            pkt.immdt,
            None,
            src,
            meta.slid,
            meta.sl,
            VendorErr::None,
        );
        Ok(())
    }
}
