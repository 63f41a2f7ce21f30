//! Arbitrary input -> `Device::handle_packet` of an engine holding live QPs of every type
//! (RC, UC, UD, XRC initiator and target, RD) in every state (RESET, INIT, RTR, RTS, SQD, SQE,
//! ERR), with send WRs outstanding (writes, reads, atomics, sends) and receive WRs posted
//! (also in an XRC SRQ), and memory windows bound (a type 1 and a type 2 window over the
//! writable region), so random ACKs, read responses and requests meet real requester and
//! responder state, window checks and XRC delivery.
//!
//! The input is a script of records. Each record starts with a tag byte:
//! - `0`: raw bytes (u16 length, then the bytes) handed to `handle_packet` as they are;
//! - `1`: a structured packet: a valid opcode and headers whose fields come from the input
//!   (DestQP picked among the live QPs, PSN near their expected PSNs, the real or a wrong
//!   R_Key (region or window)/Q_Key/P_Key/XRC SRQ, RD packets naming a live EE context
//!   (in RESET, RTS or ERR, with messages of RD QPs queued) or a random one, addresses in and around the registered
//!   region), so the fuzzer gets
//!   past parsing into the transport logic;
//! - `2`: advance virtual time and run the due timers;
//! - `3`: take every packet the engine wants to send (feeding ACKs back into requesters is
//!   left to record `1`).
//!
//! After the script, the engine is drained (transmit, timers, CQs, events). Checks: no
//! panic; the read-only region is unchanged; the guard bytes of every region are unchanged
//! (they are outside the registered length, so the engine must never touch them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_transport::{
    bring_up_steps, AccessFlags, AhAttr, Device, DeviceConfig, GlobalRoute, Memory, MrKeys, Mtu,
    MwBind, MwType, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr, RxGrh, RxMeta,
    SendFlags, SendWr, Sge, SrqAttr, UdDest, VecMemory, WrOpcode,
};
use softib_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, Opcode, PacketRepr, RethRepr,
    Syndrome,
};

const RW_ADDR: u64 = 0x1_0000;
const RW_LEN: usize = 64 * 1024;
const RO_ADDR: u64 = 0x10_0000;
const RO_LEN: usize = 4096;
const PSN_BASE: u32 = 0x00FF_FF00; // close to the 24-bit wrap on purpose
const QKEY: u32 = 0x1234_5678;

/// Bytes of the input, read front to back; running out yields zeros.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Memory that is `guard` bytes larger than the region on each side; the MR sees only the
/// middle, so any access the engine makes must land there.
struct Guarded {
    inner: Vec<u8>,
    len: usize,
}

const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xA5;

impl Guarded {
    fn new(len: usize, fill: u8) -> Self {
        let mut inner = vec![GUARD_BYTE; len + 2 * GUARD];
        inner[GUARD..GUARD + len].fill(fill);
        Guarded { inner, len }
    }
}

impl Memory for Guarded {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "read past the region");
        dst.copy_from_slice(&self.inner[GUARD + offset..GUARD + offset + dst.len()]);
    }
    fn write(&mut self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len, "write past the region");
        self.inner[GUARD + offset..GUARD + offset + src.len()].copy_from_slice(src);
    }
    fn compare_swap(&mut self, offset: usize, compare: u64, swap: u64) -> u64 {
        assert!(offset + 8 <= self.len, "atomic past the region");
        let at = GUARD + offset;
        let old = u64::from_le_bytes(self.inner[at..at + 8].try_into().unwrap());
        if old == compare {
            self.inner[at..at + 8].copy_from_slice(&swap.to_le_bytes());
        }
        old
    }
    fn fetch_add(&mut self, offset: usize, add: u64) -> u64 {
        assert!(offset + 8 <= self.len, "atomic past the region");
        let at = GUARD + offset;
        let old = u64::from_le_bytes(self.inner[at..at + 8].try_into().unwrap());
        self.inner[at..at + 8].copy_from_slice(&old.wrapping_add(add).to_le_bytes());
        old
    }
}

struct Bench {
    dev: Device,
    rw: MrKeys,
    ro: MrKeys,
    /// (qpn, type, state it was brought to, the PSN its peer would send from).
    qps: Vec<(u32, QpType, QpState, u32)>,
    cq: softib_transport::CqHandle,
    ah: softib_transport::AhHandle,
    now: u64,
    buf: Vec<u8>,
    /// The XRC domain the target QPs belong to, and the number of its XRC SRQ.
    xrcd: softib_transport::XrcdHandle,
    xrc_srqn: u32,
    /// R_Keys of the type 1 and type 2 windows over the writable region (0 until bound).
    mw1: u32,
    mw2: u32,
    /// The reliable datagram domain of the RD QPs and EECs.
    rdd: softib_transport::RddHandle,
    /// EE contexts: (EECN, PSN its peer sends from, its own send PSN).
    eecs: Vec<(u32, u32, u32)>,
}

fn gid(last: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[10, 0, 0, last]);
    g
}

fn av() -> AhAttr {
    AhAttr {
        dlid: 2,
        sl: 0,
        src_path_bits: 0,
        grh: Some(GlobalRoute {
            dgid: gid(2),
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
        }),
    }
}

impl Bench {
    fn new(selector: u8) -> Bench {
        let config = DeviceConfig {
            gid: gid(1),
            lid: 1,
            pkeys: vec![0xFFFF, 0x8001],
            max_unacked_psns: 16,
            ack_req_interval: 4,
            ..DeviceConfig::default()
        };
        let mut dev = Device::new(config, u64::from(selector));
        let pd = dev.alloc_pd();
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let rw = dev
            .reg_mr(
                pd,
                Box::new(Guarded::new(RW_LEN, 0)),
                RW_ADDR,
                all | AccessFlags::MW_BIND,
            )
            .unwrap();
        let ro = dev
            .reg_mr(
                pd,
                Box::new(Guarded::new(RO_LEN, 0x5A)),
                RO_ADDR,
                AccessFlags::REMOTE_READ,
            )
            .unwrap();
        // A region of a plain VecMemory too, the type the simulator uses.
        dev.reg_mr(pd, Box::new(VecMemory::zeroed(256)), 0x20_0000, all)
            .unwrap();
        let cq = dev.create_cq(64).unwrap();
        let srq = dev
            .create_srq(
                pd,
                SrqAttr {
                    max_wr: 16,
                    max_sge: 2,
                    srq_limit: 2,
                },
            )
            .unwrap();
        for i in 0..4u64 {
            let _ = dev.post_srq_recv(srq, &recv(100 + i, rw, 0x8000 + i * 0x1000, 0x1000));
        }
        let ah = dev.create_ah(pd, av()).unwrap();
        let xrcd = dev.open_xrcd();
        let xrc_srq = dev
            .create_xrc_srq(
                pd,
                xrcd,
                cq,
                SrqAttr {
                    max_wr: 16,
                    max_sge: 2,
                    srq_limit: 1,
                },
            )
            .unwrap();
        for i in 0..4u64 {
            let _ = dev.post_srq_recv(xrc_srq, &recv(200 + i, rw, 0xC000 + i * 0x800, 0x800));
        }
        let xrc_srqn = dev.srq_num(xrc_srq).unwrap();
        let mtu = [Mtu::M256, Mtu::M1024, Mtu::M4096][usize::from(selector % 3)];
        let mut bench = Bench {
            dev,
            rw,
            ro,
            qps: Vec::new(),
            cq,
            ah,
            now: 0,
            buf: vec![0u8; 4096 + 256],
            xrcd,
            xrc_srqn,
            mw1: 0,
            mw2: 0,
            rdd: softib_transport::RddHandle(0),
            eecs: Vec::new(),
        };
        bench.bind_windows(pd, cq, mtu);
        bench.rdd = bench.dev.alloc_rdd();
        for state in [QpState::Rts, QpState::Reset, QpState::Err] {
            bench.add_eec(state, mtu);
        }
        let states = [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Err,
        ];
        for qp_type in [
            QpType::Rc,
            QpType::Uc,
            QpType::Ud,
            QpType::XrcSend,
            QpType::XrcRecv,
            QpType::Rd,
        ] {
            for state in states {
                let use_srq = matches!(qp_type, QpType::Rc | QpType::Uc) && selector & 0x80 != 0;
                bench.add_qp(pd, cq, use_srq.then_some(srq), ah, qp_type, state, mtu);
            }
        }
        bench.drain_transmit();
        bench
    }

    #[allow(clippy::too_many_arguments)]
    fn add_qp(
        &mut self,
        pd: softib_transport::PdHandle,
        cq: softib_transport::CqHandle,
        srq: Option<softib_transport::SrqHandle>,
        ah: softib_transport::AhHandle,
        qp_type: QpType,
        target: QpState,
        mtu: Mtu,
    ) {
        let created = if qp_type == QpType::XrcRecv {
            self.dev.create_xrc_target_qp(self.xrcd)
        } else if qp_type == QpType::Rd {
            self.dev.create_rd_qp(
                pd,
                self.rdd,
                QpInitAttr {
                    qp_type,
                    send_cq: cq,
                    recv_cq: cq,
                    srq,
                    cap: QpCap {
                        max_send_wr: 16,
                        max_recv_wr: 16,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 64,
                    },
                    sq_sig_all: false,
                },
            )
        } else {
            self.dev.create_qp(
                pd,
                QpInitAttr {
                    qp_type,
                    send_cq: cq,
                    recv_cq: cq,
                    srq,
                    cap: QpCap {
                        max_send_wr: 16,
                        max_recv_wr: 16,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 64,
                    },
                    sq_sig_all: false,
                },
            )
        };
        let Ok(qpn) = created else {
            return;
        };
        let rq_psn = PSN_BASE.wrapping_add(qpn * 0x10) & 0xFF_FFFF;
        self.qps.push((qpn, qp_type, target, rq_psn));
        let path: &[QpState] = match target {
            QpState::Reset => &[],
            QpState::Init => &[QpState::Init],
            QpState::Rtr => &[QpState::Init, QpState::Rtr],
            QpState::Rts | QpState::Sqe => &[QpState::Init, QpState::Rtr, QpState::Rts],
            QpState::Sqd => &[QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd],
            QpState::Err => &[QpState::Init, QpState::Rtr, QpState::Rts, QpState::Err],
        };
        // UC allows only remote writes (IBA 9.8.2); UD ignores the flags.
        let all = match qp_type {
            QpType::Uc => AccessFlags::REMOTE_WRITE,
            _ => AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        };
        let mut attr = QpAttr {
            pkey_index: 0,
            port_num: 1,
            qkey: QKEY,
            qp_access_flags: all,
            path_mtu: mtu,
            dest_qp_num: 0x77,
            rq_psn,
            sq_psn: PSN_BASE.wrapping_add(0x8000 + qpn) & 0xFF_FFFF,
            max_rd_atomic: 2,
            max_dest_rd_atomic: 2,
            min_rnr_timer: 1,
            timeout: 8,
            retry_cnt: 2,
            rnr_retry: 1,
            ah_attr: av(),
            ..QpAttr::default()
        };
        let bring_up = bring_up_steps(qp_type, QpState::Rts).expect("RTS is a bring-up target");
        for &s in path {
            if s == QpState::Init && target != QpState::Reset {
                // Receives can be posted from INIT on.
                if srq.is_none() {
                    for i in 0..3u64 {
                        let _ = self.dev.post_recv(
                            qpn,
                            &recv(i, self.rw, 0x4000 + (qpn as u64 % 4) * 0x1000, 0x800),
                        );
                    }
                }
            }
            attr.qp_state = s;
            // INIT, RTR and RTS take the bring-up masks of the transition table; SQD and
            // ERR need nothing but the state.
            let mask = bring_up
                .iter()
                .find(|(state, _)| *state == s)
                .map_or(QpAttrMask::STATE, |&(_, m)| m);
            if s == QpState::Sqd {
                self.post_sends(qpn, qp_type);
            }
            self.dev
                .modify_qp(0, qpn, &attr, mask)
                .expect("the state path uses the attributes ibv_modify_qp(3) lists");
            if s == QpState::Rts && target != QpState::Sqe {
                self.post_sends(qpn, qp_type);
            }
        }
        if target == QpState::Sqe {
            // UC/UD enter SQE on a send error; an SGE with an unknown lkey is one.
            // (RC has no SQE: the same error moves it to ERR.)
            let bad = SendWr {
                wr_id: 999,
                opcode: WrOpcode::Send,
                sg_list: vec![Sge {
                    addr: RW_ADDR,
                    length: 16,
                    lkey: self.rw.lkey ^ 0x100,
                }],
                flags: SendFlags::SIGNALED,
                ud: (qp_type == QpType::Ud).then_some(UdDest {
                    ah,
                    remote_qpn: 0x77,
                    remote_qkey: QKEY,
                }),
                ..Default::default()
            };
            let _ = self.dev.post_send(0, qpn, &bad);
            self.drain_transmit();
        }
    }

    /// Posts one WR of each kind the QP type allows (some fail to post; that is fine).
    fn post_sends(&mut self, qpn: u32, qp_type: QpType) {
        let ops: &[WrOpcode] = match qp_type {
            QpType::Rc | QpType::XrcSend => &[
                WrOpcode::RdmaWrite,
                WrOpcode::RdmaRead,
                WrOpcode::AtomicFetchAndAdd,
                WrOpcode::Send,
                WrOpcode::AtomicCmpAndSwp,
                WrOpcode::RdmaWriteWithImm,
                WrOpcode::SendWithInv,
            ],
            QpType::Uc => &[WrOpcode::RdmaWrite, WrOpcode::Send, WrOpcode::SendWithImm],
            QpType::Ud => &[WrOpcode::Send, WrOpcode::SendWithImm],
            QpType::XrcRecv => &[],
            QpType::Rd => &[
                WrOpcode::Send,
                WrOpcode::RdmaWrite,
                WrOpcode::RdmaRead,
                WrOpcode::AtomicFetchAndAdd,
                WrOpcode::SendWithImm,
            ],
        };
        for (i, &op) in ops.iter().enumerate() {
            let len = if op.is_atomic() {
                8
            } else if qp_type == QpType::Ud {
                200
            } else {
                3000
            };
            let wr = SendWr {
                wr_id: u64::from(qpn) << 8 | i as u64,
                opcode: op,
                sg_list: vec![Sge {
                    addr: RW_ADDR + 0x100 * i as u64,
                    length: len,
                    lkey: self.rw.lkey,
                }],
                flags: SendFlags::SIGNALED,
                imm_data: Some(0x1234),
                invalidate_rkey: 0x4242,
                remote_addr: 0x9_0000,
                rkey: 0x4242,
                compare_add: 1,
                swap: 2,
                ud: (qp_type == QpType::Ud).then_some(UdDest {
                    ah: self.ah,
                    remote_qpn: 0x77,
                    remote_qkey: QKEY,
                }),
                bind_mw: None,
                xrc_remote_srqn: self.xrc_srqn,
                // RD: over each EEC in turn (one in RTS, one in RESET, one in ERR).
                rd: (qp_type == QpType::Rd && !self.eecs.is_empty()).then(|| {
                    softib_transport::RdDest {
                        eec: self.eecs[i % self.eecs.len()].0,
                        remote_qpn: 0x77,
                        remote_qkey: QKEY,
                    }
                }),
            };
            let _ = self.dev.post_send(self.now, qpn, &wr);
        }
    }

    /// An EE context brought to `target` (RESET, RTS or ERR) with RC's attributes.
    fn add_eec(&mut self, target: QpState, mtu: Mtu) {
        let Ok(eecn) = self.dev.create_eec(self.rdd, 16) else {
            return;
        };
        let rq_psn = PSN_BASE.wrapping_add(eecn * 0x10) & 0xFF_FFFF;
        let sq_psn = PSN_BASE.wrapping_add(0x8000 + eecn) & 0xFF_FFFF;
        self.eecs.push((eecn, rq_psn, sq_psn));
        if target == QpState::Reset {
            return;
        }
        let attr = QpAttr {
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: AccessFlags::REMOTE_WRITE,
            path_mtu: mtu,
            dest_qp_num: 0x99,
            rq_psn,
            sq_psn,
            max_rd_atomic: 2,
            max_dest_rd_atomic: 2,
            min_rnr_timer: 1,
            timeout: 8,
            retry_cnt: 2,
            rnr_retry: 1,
            ah_attr: av(),
            ..QpAttr::default()
        };
        self.dev
            .bring_up_qp(0, eecn, QpType::Rc, &attr, QpState::Rts)
            .expect("an EEC comes up with RC's attributes");
        if target == QpState::Err {
            let err = QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            };
            let _ = self.dev.modify_eec(0, eecn, &err, QpAttrMask::STATE);
        }
    }

    /// Binds a type 1 window over the first half of the writable region and a type 2
    /// window over its second half (READ/WRITE/atomic), through a dedicated RC QP brought
    /// to RTS with nothing else posted (a bind runs once it heads the send queue).
    fn bind_windows(
        &mut self,
        pd: softib_transport::PdHandle,
        cq: softib_transport::CqHandle,
        mtu: Mtu,
    ) {
        let n = self.qps.len();
        self.add_qp(pd, cq, None, self.ah, QpType::Rc, QpState::Rtr, mtu);
        let Some(&(qpn, _, _, _)) = self.qps.get(n) else {
            return;
        };
        let attr = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 0,
            timeout: 8,
            retry_cnt: 2,
            rnr_retry: 1,
            max_rd_atomic: 2,
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
        if self.dev.modify_qp(0, qpn, &attr, mask).is_err() {
            return;
        }
        let rights =
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
        let half = RW_LEN as u64 / 2;
        let (Ok(w1), Ok(w2)) = (
            self.dev.alloc_mw(pd, MwType::Type1),
            self.dev.alloc_mw(pd, MwType::Type2),
        ) else {
            return;
        };
        let bind = |mw_rkey, new_rkey, addr, mr_lkey| MwBind {
            mw_rkey,
            new_rkey,
            mr_lkey,
            addr,
            length: half,
            access: rights,
        };
        if let Ok(k) = self.dev.bind_mw(
            0,
            qpn,
            1,
            SendFlags::SIGNALED,
            bind(w1, 0, RW_ADDR, self.rw.lkey),
        ) {
            self.mw1 = k;
        }
        let k2 = softib_transport::next_rkey(w2);
        let wr = SendWr {
            wr_id: 2,
            opcode: WrOpcode::BindMw,
            flags: SendFlags::SIGNALED,
            bind_mw: Some(bind(w2, k2, RW_ADDR + half, self.rw.lkey)),
            ..Default::default()
        };
        if self.dev.post_send(0, qpn, &wr).is_ok() {
            self.mw2 = k2;
        }
        self.drain_transmit();
        // The setup itself must work, or the fuzzer would only ever meet unknown keys.
        assert_eq!(
            self.dev.mw_bound(self.mw1),
            Some(true),
            "type 1 window bound"
        );
        assert_eq!(
            self.dev.mw_bound(self.mw2),
            Some(true),
            "type 2 window bound"
        );
    }

    fn drain_transmit(&mut self) {
        // Bounded: an engine that never stops sending would be a bug the fuzzer should see
        // as a hang, but keep each input fast.
        for _ in 0..4096 {
            if self.dev.poll_transmit(self.now, &mut self.buf).is_none() {
                break;
            }
        }
    }

    fn meta(&self, inp: &mut Input) -> RxMeta {
        let f = inp.u8();
        RxMeta {
            slid: 2,
            sl: f & 0xF,
            grh: (f & 0x10 != 0).then_some(RxGrh {
                sgid: gid(2),
                dgid: gid(1),
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            }),
            ecn_ce: f & 0x20 != 0,
        }
    }

    fn structured(&mut self, inp: &mut Input, out: &mut Vec<u8>) {
        let opcode = Opcode::ALL[usize::from(inp.u8()) % Opcode::ALL.len()];
        let pick = inp.u8();
        let (dest_qp, base_psn) = match self.qps.get(usize::from(pick) % (self.qps.len() + 2)) {
            Some(&(qpn, _, _, psn)) => (qpn, psn),
            None => (u32::from(pick) << 8 | 0x11, 0),
        };
        let flags = inp.u8();
        let psn_delta = i32::from(inp.u8() as i8);
        // Requests count up from rq_psn; ACKs/responses aim at the QP's send PSNs.
        let base = if opcode.is_response() || opcode.has_aeth() {
            PSN_BASE.wrapping_add(0x8000 + dest_qp)
        } else {
            base_psn
        };
        // RD packets name an EE context, live most of the time; its PSNs are the base.
        let eec = (opcode.has_rdeth() && !self.eecs.is_empty())
            .then(|| {
                self.eecs
                    .get(usize::from(pick >> 4) % (self.eecs.len() + 1))
                    .copied()
            })
            .flatten();
        let base = match eec {
            Some((_, rq, sq)) => {
                if opcode.is_response() || opcode.has_aeth() {
                    sq
                } else {
                    rq
                }
            }
            None => base,
        };
        let psn = (base as i32).wrapping_add(psn_delta) as u32 & 0xFF_FFFF;
        let pkey = match flags & 3 {
            0 | 1 => 0xFFFF,
            2 => 0x8001,
            _ => inp.u16(),
        };
        let key_sel = inp.u8();
        let rkey = match (key_sel & 3, key_sel & 0x18) {
            (0, 0x08) => self.mw1,
            (0, 0x10) => self.mw2,
            (0, 0x18) => self.mw1 ^ 1,
            (0, _) => self.rw.rkey,
            (1, _) => self.ro.rkey,
            (2, _) => self.rw.rkey ^ 1,
            _ => inp.u32(),
        };
        let addr_sel = inp.u8();
        let va = match addr_sel & 3 {
            0 => RW_ADDR + u64::from(inp.u16()),
            1 => RO_ADDR + u64::from(inp.u16() & 0x1FFF),
            2 => RW_ADDR + RW_LEN as u64 - u64::from(inp.u8()),
            _ => inp.u64(),
        };
        let dma_len = if addr_sel & 4 != 0 {
            inp.u32()
        } else {
            u32::from(inp.u16())
        };
        let payload_len = if opcode.has_payload() {
            usize::from(inp.u16() % 4200)
        } else {
            0
        };
        let fill = inp.u8();
        let payload = vec![fill; payload_len];
        let mut repr = PacketRepr::new(BthRepr {
            opcode,
            solicited: flags & 4 != 0,
            mig_req: flags & 8 != 0,
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: flags & 0x10 != 0,
            becn: flags & 0x20 != 0,
            dest_qp,
            ack_req: flags & 0x40 != 0,
            psn,
        });
        if opcode.has_reth() {
            repr.reth = Some(RethRepr { va, rkey, dma_len });
        }
        if opcode.has_atomic_eth() {
            repr.atomic_eth = Some(AtomicEthRepr {
                va,
                rkey,
                swap_or_add: inp.u64(),
                compare: inp.u64(),
            });
        }
        if opcode.has_aeth() {
            repr.aeth = Some(AethRepr {
                syndrome: Syndrome::from_u8(inp.u8()),
                msn: inp.u32() & 0xFF_FFFF,
            });
        }
        if opcode.has_atomic_ack_eth() {
            repr.atomic_ack_eth = Some(AtomicAckEthRepr {
                orig_remote_data: inp.u64(),
            });
        }
        if opcode.has_deth() {
            repr.deth = Some(DethRepr {
                qkey: if key_sel & 4 != 0 { inp.u32() } else { QKEY },
                src_qp: inp.u32() & 0xFF_FFFF,
            });
        }
        if opcode.has_immdt() {
            repr.immdt = Some(inp.u32());
        }
        if opcode.has_ieth() {
            repr.ieth = Some(rkey);
        }
        if opcode.has_rdeth() {
            let random = inp.u32();
            repr.rdeth = Some(softib_wire::RdethRepr {
                ee_context: eec.map_or(random, |(n, _, _)| n),
            });
        }
        if opcode.has_xrceth() {
            let xrc_srq = if key_sel & 0x20 == 0 {
                self.xrc_srqn
            } else {
                inp.u32() & 0xFF_FFFF
            };
            repr.xrceth = Some(softib_wire::XrcethRepr { xrc_srq });
        }
        repr.payload = &payload;
        out.clear();
        out.resize(repr.buffer_len(), 0);
        if repr.emit(out).is_err() {
            out.clear();
        }
    }

    fn check(&self) {
        let mut ro = vec![0u8; RO_LEN];
        self.dev
            .memory(self.ro.lkey)
            .expect("registered")
            .read(0, &mut ro);
        assert!(
            ro.iter().all(|&b| b == 0x5A),
            "a region without REMOTE_WRITE/ATOMIC changed"
        );
    }
}

fn recv(wr_id: u64, mr: MrKeys, addr: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id,
        sg_list: vec![Sge {
            addr,
            length: len,
            lkey: mr.lkey,
        }],
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let mut bench = Bench::new(inp.u8());
    let mut packet = Vec::new();
    let mut records = 0;
    while !inp.is_empty() && records < 64 {
        records += 1;
        match inp.u8() % 4 {
            0 => {
                let meta = bench.meta(&mut inp);
                let len = usize::from(inp.u16()) % 4400;
                let bytes = inp.take(len).to_vec();
                bench.dev.handle_packet(bench.now, &meta, &bytes);
            }
            1 => {
                let meta = bench.meta(&mut inp);
                let repeat = 1 + inp.u8() % 3;
                bench.structured(&mut inp, &mut packet);
                if !packet.is_empty() {
                    for _ in 0..repeat {
                        bench.dev.handle_packet(bench.now, &meta, &packet);
                    }
                }
            }
            2 => {
                bench.now += u64::from(inp.u32()) * 16;
                if bench.dev.poll_timeout().is_some_and(|t| t <= bench.now) {
                    bench.dev.handle_timeout(bench.now);
                }
            }
            _ => bench.drain_transmit(),
        }
    }
    // Drain: transmit, run timers far into the future, collect completions and events.
    for _ in 0..16 {
        bench.drain_transmit();
        match bench.dev.poll_timeout() {
            Some(t) => {
                bench.now = bench.now.max(t);
                bench.dev.handle_timeout(bench.now);
            }
            None => break,
        }
    }
    let mut wcs = [softib_transport::harness::empty_wc(); 32];
    while bench.dev.poll_cq(bench.cq, &mut wcs) > 0 {}
    while bench.dev.poll_event().is_some() {}
    let _ = bench.dev.counters();
    bench.check();
});
