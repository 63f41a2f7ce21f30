//! Two devices with RD QPs of one reliable datagram domain and EE contexts between them,
//! joined by the engine's faulty in-memory link (`softib_transport::harness::Pair`).
#![allow(dead_code)]

use softib_transport::harness::Pair;
use softib_transport::{
    AccessFlags, AhAttr, CqHandle, GlobalRoute, MrKeys, Mtu, PdHandle, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, RdDest, RddHandle, RecvWr, SendWr, Sge, VecMemory, WorkCompletion,
};

/// Shape of an RD set-up.
#[derive(Clone, Copy, Debug)]
pub struct RdOptions {
    pub qps: usize,
    pub eecs: usize,
    pub qkey: u32,
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub buf_len: usize,
    pub eec_depth: u32,
    pub rq_depth: u32,
    pub psn: u32,
}

impl Default for RdOptions {
    fn default() -> Self {
        RdOptions {
            qps: 2,
            eecs: 1,
            qkey: 0x1111_2222,
            mtu: Mtu::M1024,
            timeout: 12,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            buf_len: 1 << 20,
            eec_depth: 256,
            rq_depth: 256,
            psn: 0x00_1000,
        }
    }
}

/// One device's RD objects.
#[derive(Clone, Debug)]
pub struct RdSide {
    pub pd: PdHandle,
    pub rdd: RddHandle,
    pub send_cq: CqHandle,
    pub recv_cq: CqHandle,
    pub keys: MrKeys,
    pub addr: u64,
    pub qps: Vec<u32>,
    pub eecs: Vec<u32>,
}

/// The pair and both sides' RD objects; EEC `k` of side 0 is connected to EEC `k` of side 1.
pub struct RdFabric {
    pub pair: Pair,
    pub sides: [RdSide; 2],
    pub o: RdOptions,
}

pub const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

impl RdFabric {
    pub fn new(seed: u64, o: RdOptions) -> RdFabric {
        let mut pair = Pair::new(seed);
        let sides = [0, 1].map(|side| {
            let dev = pair.dev(side);
            let pd = dev.alloc_pd();
            let rdd = dev.alloc_rdd();
            let send_cq = dev.create_cq(4096).unwrap();
            let recv_cq = dev.create_cq(4096).unwrap();
            let addr = 0x10_0000 + side as u64 * 0x1000_0000;
            let keys = dev
                .reg_mr(pd, Box::new(VecMemory::zeroed(o.buf_len)), addr, ACCESS)
                .unwrap();
            let qps = (0..o.qps)
                .map(|_| {
                    let qpn = dev
                        .create_rd_qp(
                            pd,
                            rdd,
                            QpInitAttr {
                                qp_type: QpType::Rd,
                                send_cq,
                                recv_cq,
                                srq: None,
                                cap: QpCap {
                                    max_send_wr: 64,
                                    max_recv_wr: o.rq_depth,
                                    max_send_sge: 4,
                                    max_recv_sge: 4,
                                    max_inline_data: 64,
                                },
                                sq_sig_all: false,
                            },
                        )
                        .unwrap();
                    let attr = QpAttr {
                        pkey_index: 0,
                        port_num: 1,
                        qkey: o.qkey,
                        qp_access_flags: ACCESS,
                        sq_psn: 0,
                        ..QpAttr::default()
                    };
                    dev.bring_up_qp(0, qpn, QpType::Rd, &attr, QpState::Rts)
                        .unwrap();
                    qpn
                })
                .collect();
            let eecs = (0..o.eecs)
                .map(|_| dev.create_eec(rdd, o.eec_depth).unwrap())
                .collect();
            RdSide {
                pd,
                rdd,
                send_cq,
                recv_cq,
                keys,
                addr,
                qps,
                eecs,
            }
        });
        let mut f = RdFabric { pair, sides, o };
        for k in 0..o.eecs {
            for side in 0..2 {
                f.bring_up_eec(side, k, f.o.psn);
            }
        }
        f
    }

    /// The attributes of EEC `k` of `side` towards its peer, sending from `sq_psn`.
    pub fn eec_attr(&self, side: usize, k: usize, sq_psn: u32, rq_psn: u32) -> QpAttr {
        let peer = 1 - side;
        QpAttr {
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: ACCESS,
            path_mtu: self.o.mtu,
            dest_qp_num: self.sides[peer].eecs[k],
            rq_psn,
            max_dest_rd_atomic: 4,
            min_rnr_timer: self.o.min_rnr_timer,
            ah_attr: AhAttr {
                dlid: peer as u16 + 1,
                sl: 0,
                src_path_bits: 0,
                grh: Some(GlobalRoute {
                    dgid: Pair::side_gid(peer),
                    flow_label: 0,
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                }),
            },
            sq_psn,
            timeout: self.o.timeout,
            retry_cnt: self.o.retry_cnt,
            rnr_retry: self.o.rnr_retry,
            max_rd_atomic: 4,
            ..QpAttr::default()
        }
    }

    /// RESET -> RTS for EEC `k` of `side`, both directions' PSNs derived from `psn`.
    pub fn bring_up_eec(&mut self, side: usize, k: usize, psn: u32) {
        let sq = psn.wrapping_add(side as u32 * 0x1000) & 0xFF_FFFF;
        let rq = psn.wrapping_add((1 - side) as u32 * 0x1000) & 0xFF_FFFF;
        let attr = self.eec_attr(side, k, sq, rq);
        let eecn = self.sides[side].eecs[k];
        self.pair
            .dev(side)
            .bring_up_qp(0, eecn, QpType::Rc, &attr, QpState::Rts)
            .expect("EEC RESET->RTS with RC's attributes");
    }

    /// A local SGE `len` bytes at `offset` of `side`'s buffer.
    pub fn sge(&self, side: usize, offset: usize, len: usize) -> Sge {
        Sge {
            addr: self.sides[side].addr + offset as u64,
            length: len as u32,
            lkey: self.sides[side].keys.lkey,
        }
    }

    /// The remote address of `offset` in `side`'s buffer.
    pub fn va(&self, side: usize, offset: usize) -> u64 {
        self.sides[side].addr + offset as u64
    }

    /// The destination of a send from `side` over EEC `k` to QP `q` of the peer.
    pub fn dest(&self, side: usize, k: usize, q: usize) -> RdDest {
        RdDest {
            eec: self.sides[side].eecs[k],
            remote_qpn: self.sides[1 - side].qps[q],
            remote_qkey: self.o.qkey,
        }
    }

    /// Posts `wr` on RD QP `q` of `side`.
    pub fn post(&mut self, side: usize, q: usize, wr: SendWr) {
        let qpn = self.sides[side].qps[q];
        let now = self.pair.now;
        self.pair.dev(side).post_send(now, qpn, &wr).unwrap();
    }

    /// Posts a receive of `len` bytes at `offset` on RD QP `q` of `side`.
    pub fn post_recv(&mut self, side: usize, q: usize, wr_id: u64, offset: usize, len: usize) {
        let sge = self.sge(side, offset, len);
        let qpn = self.sides[side].qps[q];
        self.pair
            .dev(side)
            .post_recv(
                qpn,
                &RecvWr {
                    wr_id,
                    sg_list: vec![sge],
                },
            )
            .unwrap();
    }

    pub fn fill(&mut self, side: usize, offset: usize, data: &[u8]) {
        let lkey = self.sides[side].keys.lkey;
        self.pair
            .dev(side)
            .memory_mut(lkey)
            .unwrap()
            .write(offset, data);
    }

    pub fn read(&self, side: usize, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.pair
            .device(side)
            .memory(self.sides[side].keys.lkey)
            .unwrap()
            .read(offset, &mut out);
        out
    }

    /// Every completion of `side`'s send CQ, then of its receive CQ.
    pub fn send_completions(&mut self, side: usize) -> Vec<WorkCompletion> {
        let cq = self.sides[side].send_cq;
        drain(&mut self.pair, side, cq)
    }

    pub fn recv_completions(&mut self, side: usize) -> Vec<WorkCompletion> {
        let cq = self.sides[side].recv_cq;
        drain(&mut self.pair, side, cq)
    }

    /// Runs the link until idle or one virtual second passes.
    pub fn drive(&mut self) -> bool {
        let deadline = self.pair.now + 60_000_000_000;
        self.pair.drive(deadline)
    }
}

fn drain(pair: &mut Pair, side: usize, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut buf = [softib_transport::harness::empty_wc(); 64];
    loop {
        let n = pair.dev(side).poll_cq(cq, &mut buf);
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return out;
        }
    }
}
