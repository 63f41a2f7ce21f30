//! Unreliable Datagram receive side (IBA 9.8.3): SEND_ONLY(_IMM) only, the Q_Key check,
//! and the 40-byte GRH area in front of the payload as Linux delivers it.

use softib_wire::{Operation, PacketRepr};

use crate::config::LinkLayer;
use crate::dma;
use crate::qp::Qp;
use crate::shared::{RxGrh, RxMeta, Shared};
use crate::verbs::{VendorErr, WcFlags, WcOpcode, WcStatus};

/// Bytes reserved at the start of every UD receive buffer for the GRH (IBA 11.4.1.2).
pub const GRH_AREA: usize = 40;

fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xFF && gid[11] == 0xFF
}

/// The 40 bytes Linux puts in front of a UD receive (`union rdma_network_hdr`):
/// - RoCEv2 over IPv4 (IPv4-mapped GIDs): 20 zero bytes, then the IPv4 header (rebuilt from
///   the fields the driver reported; the Identification field is not known and is 0);
/// - RoCEv2 over IPv6 (`LinkLayer::Ethernet`): the IPv6 header (next header 17 = UDP);
/// - native IB: the GRH (IBA 8.3.1; next header 0x1B, PayLen = transport bytes + ICRC).
///
/// `transport_len` is the packet from BTH through pad.
pub(crate) fn network_header_area(
    g: &RxGrh,
    transport_len: usize,
    link: LinkLayer,
) -> [u8; GRH_AREA] {
    const ICRC: usize = 4;
    const UDP: usize = 8;
    let mut b = [0u8; GRH_AREA];
    if is_ipv4_mapped(&g.sgid) && is_ipv4_mapped(&g.dgid) {
        let total = (20 + UDP + transport_len + ICRC) as u16;
        let h = &mut b[20..40];
        h[0] = 0x45;
        h[1] = g.traffic_class;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[6] = 0x40; // Don't Fragment, as Linux sends RoCEv2
        h[8] = g.hop_limit;
        h[9] = 17;
        h[12..16].copy_from_slice(&g.sgid[12..16]);
        h[16..20].copy_from_slice(&g.dgid[12..16]);
        let mut sum: u32 = 0;
        for w in h.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        return b;
    }
    let (next_header, payload_len) = match link {
        LinkLayer::Ethernet => (17u8, UDP + transport_len + ICRC),
        LinkLayer::InfiniBand => (0x1B, transport_len + ICRC),
    };
    let word0: u32 = (6 << 28) | ((g.traffic_class as u32) << 20) | (g.flow_label & 0xF_FFFF);
    b[0..4].copy_from_slice(&word0.to_be_bytes());
    b[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    b[6] = next_header;
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
            let bytes = network_header_area(g, pkt.buffer_len(), sh.config.link_layer);
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
        sh.pools.recycle_sges(wqe.sges);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_area_is_twenty_zero_bytes_then_an_ipv4_header_with_a_valid_checksum() {
        let mut g = RxGrh {
            traffic_class: 0x02,
            hop_limit: 64,
            ..Default::default()
        };
        g.sgid[10..16].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 1]);
        g.dgid[10..16].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
        let b = network_header_area(&g, 28, LinkLayer::Ethernet);
        assert_eq!(&b[..20], &[0u8; 20]);
        assert_eq!(b[20], 0x45);
        assert_eq!(u16::from_be_bytes([b[22], b[23]]), 20 + 8 + 28 + 4);
        assert_eq!((b[28], b[29]), (64, 17));
        assert_eq!(&b[32..40], &[10, 0, 0, 1, 10, 0, 0, 2]);
        let mut sum: u32 = b[20..40]
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        assert_eq!(sum, 0xFFFF);
    }

    #[test]
    fn native_ib_area_is_a_grh() {
        let g = RxGrh {
            sgid: [0xfe; 16],
            dgid: [0xfe; 16],
            hop_limit: 1,
            ..Default::default()
        };
        let b = network_header_area(&g, 100, LinkLayer::InfiniBand);
        assert_eq!(b[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), 104);
        assert_eq!(b[6], 0x1B);
    }
}
