//! Helpers for running the real transport engine on simulated HCAs: device set-up, RC
//! connection (the out-of-band exchange perftest does over TCP), and a write_bw-like
//! application.
#![allow(dead_code)]

use softib_fabric::engine_hca::HostApp;
use softib_transport::{
    AccessFlags, AhAttr, CqHandle, Device, DeviceConfig, LinkLayer, MrKeys, Mtu, Nanos, QpAttr,
    QpAttrMask, QpCap, QpInitAttr, QpState, QpType, SendFlags, SendWr, Sge, VecMemory, WcStatus,
    WorkCompletion, WrOpcode,
};
use std::cell::RefCell;
use std::rc::Rc;

/// One side of an RC connection.
#[derive(Clone, Copy, Debug)]
pub struct Side {
    pub cq: CqHandle,
    pub qpn: u32,
    pub keys: MrKeys,
    pub addr: u64,
    pub len: usize,
}

pub fn device(lid: u16, seed: u64) -> Device {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[14..].copy_from_slice(&lid.to_be_bytes());
    Device::new(
        DeviceConfig {
            lid,
            gid,
            max_mtu: Mtu::M4096,
            link_layer: LinkLayer::InfiniBand,
            ..DeviceConfig::default()
        },
        seed,
    )
}

pub fn rc_side(dev: &mut Device, buf_len: usize, addr: u64) -> Side {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(4096).unwrap();
    let keys = dev
        .reg_mr(
            pd,
            Box::new(VecMemory::zeroed(buf_len)),
            addr,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let qpn = dev
        .create_qp(
            pd,
            QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1024,
                    max_recv_wr: 1024,
                    max_send_sge: 4,
                    max_recv_sge: 4,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )
        .unwrap();
    Side {
        cq,
        qpn,
        keys,
        addr,
        len: buf_len,
    }
}

/// RESET -> INIT -> RTR -> RTS towards `peer` at `peer_lid` (SL `sl`, local ACK timeout
/// `timeout`).
pub fn rc_connect(
    dev: &mut Device,
    me: &Side,
    peer: &Side,
    peer_lid: u16,
    sl: u8,
    mtu: Mtu,
    timeout: u8,
) {
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..QpAttr::default()
    };
    dev.modify_qp(
        0,
        me.qpn,
        &attr,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    attr.qp_state = QpState::Rtr;
    attr.path_mtu = mtu;
    attr.dest_qp_num = peer.qpn;
    attr.rq_psn = 0x100;
    attr.max_dest_rd_atomic = 16;
    attr.min_rnr_timer = 12;
    attr.ah_attr = AhAttr {
        dlid: peer_lid,
        sl,
        src_path_bits: 0,
        grh: None,
    };
    dev.modify_qp(
        0,
        me.qpn,
        &attr,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    attr.qp_state = QpState::Rts;
    attr.sq_psn = 0x100;
    attr.timeout = timeout;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 16;
    dev.modify_qp(
        0,
        me.qpn,
        &attr,
        QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

#[derive(Default, Debug)]
pub struct BwStats {
    /// Completion times (ns) of successful messages.
    pub completions: Vec<Nanos>,
    pub errors: Vec<WcStatus>,
}

/// perftest's ib_write_bw in spirit: keeps `tx_depth` RDMA WRITEs of `size` bytes in flight.
pub struct WriteBw {
    pub me: Side,
    pub peer: Side,
    pub size: u32,
    pub tx_depth: u32,
    pub outstanding: u32,
    pub next_id: u64,
    pub stats: Rc<RefCell<BwStats>>,
    wcs: Vec<WorkCompletion>,
}

impl WriteBw {
    pub fn new(
        me: Side,
        peer: Side,
        size: u32,
        tx_depth: u32,
        stats: Rc<RefCell<BwStats>>,
    ) -> Self {
        WriteBw {
            me,
            peer,
            size,
            tx_depth,
            outstanding: 0,
            next_id: 0,
            stats,
            wcs: vec![softib_transport::harness::empty_wc(); 64],
        }
    }

    fn post(&mut self, now: Nanos, dev: &mut Device) {
        while self.outstanding < self.tx_depth {
            let wr = SendWr {
                wr_id: self.next_id,
                opcode: WrOpcode::RdmaWrite,
                sg_list: vec![Sge {
                    addr: self.me.addr,
                    length: self.size,
                    lkey: self.me.keys.lkey,
                }],
                flags: SendFlags::SIGNALED,
                remote_addr: self.peer.addr,
                rkey: self.peer.keys.rkey,
                ..SendWr::default()
            };
            dev.post_send(now, self.me.qpn, &wr).unwrap();
            self.next_id += 1;
            self.outstanding += 1;
        }
    }
}

impl HostApp for WriteBw {
    fn on_start(&mut self, now: Nanos, dev: &mut Device) {
        self.post(now, dev);
    }
    fn on_progress(&mut self, now: Nanos, dev: &mut Device) {
        loop {
            let n = dev.poll_cq(self.me.cq, &mut self.wcs);
            if n == 0 {
                break;
            }
            let mut s = self.stats.borrow_mut();
            for wc in &self.wcs[..n] {
                self.outstanding -= 1;
                if wc.status == WcStatus::Success {
                    s.completions.push(now);
                } else {
                    s.errors.push(wc.status);
                }
            }
        }
        if self.stats.borrow().errors.is_empty() {
            self.post(now, dev);
        }
    }
}

/// An application that only lets its device answer (the passive side of write_bw).
pub struct Passive;

impl HostApp for Passive {
    fn on_start(&mut self, _now: Nanos, _dev: &mut Device) {}
    fn on_progress(&mut self, _now: Nanos, _dev: &mut Device) {}
}
