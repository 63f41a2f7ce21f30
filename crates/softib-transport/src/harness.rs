//! A deterministic test bench: two [`Device`]s joined by an in-memory link with a virtual
//! clock, a one-way latency and seeded faults (drop, duplicate, reorder, corrupt, delay,
//! ECN marks). Used by this crate's tests, the property tests, the fuzz target and the
//! benchmarks; also a way to learn RDMA by watching packets (enable [`Pair::trace`]).
//!
//! ```
//! use softib_transport::harness::{Pair, QpOptions};
//! use softib_transport::{SendWr, Sge, WrOpcode, SendFlags};
//! let mut pair = Pair::new(1);
//! let (a, b) = pair.connect(&QpOptions::default());
//! pair.fill(0, &a, 0, b"hello");
//! let wr = SendWr {
//!     wr_id: 7, opcode: WrOpcode::RdmaWrite, flags: SendFlags::SIGNALED,
//!     sg_list: vec![Sge { addr: a.addr, length: 5, lkey: a.keys.lkey }],
//!     remote_addr: b.addr, rkey: b.keys.rkey, ..Default::default()
//! };
//! pair.dev(0).post_send(0, a.qpn, &wr).unwrap();
//! assert!(pair.drive(1_000_000_000));
//! assert_eq!(pair.read(1, &b, 0, 5), b"hello");
//! assert_eq!(pair.completions(0, &a)[0].wr_id, 7);
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::DeviceConfig;
use crate::counters::DriverDrop;
use crate::device::Device;
use crate::memory::VecMemory;
use crate::shared::{RxGrh, RxMeta, Transmit};
use crate::time::Nanos;
use crate::verbs::{
    AccessFlags, AhAttr, CqHandle, GlobalRoute, MrKeys, Mtu, PdHandle, QpAttr, QpAttrMask, QpCap,
    QpInitAttr, QpState, QpType, SrqHandle, WorkCompletion,
};

/// Fault probabilities (each 0.0..=1.0, drawn independently per packet from the seeded RNG).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Lose the packet.
    pub drop: f64,
    /// Deliver it twice (the copy after a random extra delay up to `reorder_window`).
    pub duplicate: f64,
    /// Deliver it late by up to `reorder_window`, so later packets overtake it.
    pub reorder: f64,
    /// Flip a random bit. The receiving driver's ICRC check catches it (counted as an ICRC
    /// drop) unless `corrupt_bypasses_icrc` is set, which hands the bytes to the engine.
    pub corrupt: f64,
    /// Add an extra delay up to `delay_max`.
    pub delay: f64,
    /// Set the ECN Congestion Experienced mark in the metadata.
    pub ecn_mark: f64,
    /// Set FECN in the BTH, as a congested IB switch does (IBA Annex A10).
    pub fecn_mark: f64,
    /// Maximum extra delay of a reordered or duplicated packet.
    pub reorder_window: Nanos,
    /// Maximum extra delay of a delayed packet.
    pub delay_max: Nanos,
    /// Corrupted packets reach `handle_packet` (robustness testing).
    pub corrupt_bypasses_icrc: bool,
}

/// What a [`Pair::filter`] decides for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Normal delivery (random faults still apply).
    Pass,
    /// Lose it.
    Drop,
    /// Deliver it this much later than the link latency.
    Delay(Nanos),
}

/// A packet the harness saw (when tracing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// Virtual time it was sent.
    pub time: Nanos,
    /// Sending device (0 or 1).
    pub from: usize,
    /// BTH opcode byte.
    pub opcode: u8,
    /// BTH PSN.
    pub psn: u32,
    /// BTH DestQP.
    pub dest_qp: u32,
    /// BTH AckReq bit.
    pub ack_req: bool,
    /// AETH syndrome byte, for ACKs and read responses that carry one.
    pub syndrome: Option<u8>,
    /// Packet length (BTH through pad).
    pub len: usize,
    /// False if the link dropped it.
    pub delivered: bool,
}

/// Link statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets sent by each device.
    pub sent: [u64; 2],
    /// Packets handed to the receiving engine.
    pub delivered: u64,
    /// Dropped (random or by filter).
    pub dropped: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Delivered late on purpose.
    pub reordered: u64,
    /// Bits flipped.
    pub corrupted: u64,
    /// Delayed.
    pub delayed: u64,
}

/// A packet on the link.
struct InFlight {
    to: usize,
    meta: RxMeta,
    /// A buffer of `BUF_LEN` bytes; the packet is its first `len`.
    bytes: Vec<u8>,
    len: usize,
}

/// Size of every packet buffer: the largest MTU plus headers, as `poll_transmit` requires.
const BUF_LEN: usize = 4096 + 256;

/// A user filter: sees (sending device, now, packet bytes) and decides.
pub type Filter = Box<dyn FnMut(usize, Nanos, &[u8]) -> Verdict>;

/// Two devices and the link between them.
pub struct Pair {
    devices: [Device; 2],
    /// Virtual time now.
    pub now: Nanos,
    /// One-way latency of the link.
    pub latency: Nanos,
    /// Random faults.
    pub faults: Faults,
    /// Record every packet in `trace_log`.
    pub trace: bool,
    /// Packets seen (when `trace`).
    pub trace_log: Vec<TraceEntry>,
    /// Link statistics.
    pub stats: LinkStats,
    /// Optional per-packet decision, applied before the random faults.
    pub filter: Option<Filter>,
    rng: ChaCha8Rng,
    /// In-flight packets as (delivery time, send order, slot), earliest first. Packets are
    /// written by `poll_transmit` straight into a buffer that then travels in its slot (no
    /// copy per packet); the heap moves only the small keys.
    queue: BinaryHeap<Reverse<(Nanos, u64, u32)>>,
    slots: Vec<Option<InFlight>>,
    free_slots: Vec<u32>,
    seq: u64,
    /// Recycled packet buffers, each `BUF_LEN` long.
    free: Vec<Vec<u8>>,
}

/// One side of a connection `Pair::connect` built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Which device (0 or 1).
    pub side: usize,
    /// Protection domain.
    pub pd: PdHandle,
    /// Send CQ.
    pub send_cq: CqHandle,
    /// Receive CQ.
    pub recv_cq: CqHandle,
    /// QPN.
    pub qpn: u32,
    /// The registered buffer.
    pub keys: MrKeys,
    /// Its virtual address.
    pub addr: u64,
    /// Its length.
    pub len: usize,
    /// SRQ, if `QpOptions::srq` asked for one.
    pub srq: Option<SrqHandle>,
}

/// How `Pair::connect` builds the two QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpOptions {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// retry_cnt.
    pub retry_cnt: u8,
    /// rnr_retry.
    pub rnr_retry: u8,
    /// min_rnr_timer of the responder.
    pub min_rnr_timer: u8,
    /// max_rd_atomic.
    pub max_rd_atomic: u8,
    /// max_dest_rd_atomic.
    pub max_dest_rd_atomic: u8,
    /// QP and MR access flags.
    pub access: AccessFlags,
    /// Registered buffer size per side.
    pub buf_len: usize,
    /// Send queue depth.
    pub sq_depth: u32,
    /// Receive queue (or SRQ) depth.
    pub rq_depth: u32,
    /// CQ depth.
    pub cq_depth: u32,
    /// Feed receives from an SRQ instead of the QP's queue.
    pub srq: bool,
    /// Initial PSN of side 0's send queue (side 1 uses this + 0x1000).
    pub psn: u32,
    /// UD Q_Key.
    pub qkey: u32,
    /// Virtual address of side 0's buffer (side 1 uses this + 0x1000_0000).
    pub addr: u64,
    /// Build the endpoints in these PDs (side 0, side 1) instead of fresh ones, so several
    /// QPs of one side can share a PD (memory window and SRQ tests).
    pub pds: Option<[PdHandle; 2]>,
}

impl Default for QpOptions {
    fn default() -> Self {
        QpOptions {
            qp_type: QpType::Rc,
            mtu: Mtu::M1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            buf_len: 1 << 20,
            sq_depth: 256,
            rq_depth: 256,
            cq_depth: 4096,
            srq: false,
            psn: 0x100,
            qkey: 0x1111_1111,
            addr: 0x1000_0000,
            pds: None,
        }
    }
}

fn gid_of(side: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..16].copy_from_slice(&[10, 0, 0, side as u8 + 1]);
    g
}

impl Pair {
    /// The GID of device `side` (IPv4-mapped 10.0.0.side+1), for address vectors a test
    /// builds itself (e.g. RD's EE contexts).
    pub fn side_gid(side: usize) -> [u8; 16] {
        gid_of(side)
    }

    /// Two default devices (LIDs 1 and 2, GIDs ::ffff:10.0.0.1/2), 1 us latency, no faults.
    pub fn new(seed: u64) -> Pair {
        Pair::with_config(seed, DeviceConfig::default())
    }

    /// Two devices with `config` (LID and GID are set per side).
    pub fn with_config(seed: u64, config: DeviceConfig) -> Pair {
        let mk = |side: usize| {
            let mut c = config.clone();
            c.lid = side as u16 + 1;
            c.gid = gid_of(side);
            Device::new(c, seed.wrapping_mul(31).wrapping_add(side as u64))
        };
        Pair {
            devices: [mk(0), mk(1)],
            now: 0,
            latency: 1_000,
            faults: Faults::default(),
            trace: false,
            trace_log: Vec::new(),
            stats: LinkStats::default(),
            filter: None,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0001_1c4e),
            queue: BinaryHeap::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            seq: 0,
            free: Vec::new(),
        }
    }

    /// Device `side` (0 or 1).
    pub fn dev(&mut self, side: usize) -> &mut Device {
        &mut self.devices[side]
    }

    /// Device `side`, read-only.
    pub fn device(&self, side: usize) -> &Device {
        &self.devices[side]
    }

    /// Builds one connected QP per side (or two UD QPs that know each other's address),
    /// each with its own PD, CQs and a registered buffer, and moves them to RTS.
    pub fn connect(&mut self, o: &QpOptions) -> (Endpoint, Endpoint) {
        let eps = [0, 1].map(|side| self.endpoint(side, o));
        self.bring_up([eps[0].qpn, eps[1].qpn], o);
        (eps[0], eps[1])
    }

    /// Moves QP `qpns[0]` of device 0 and QP `qpns[1]` of device 1 from RESET to RTS,
    /// connected to each other, through the real `modify_qp` rules with the attributes of
    /// `o` (`o.qp_type` picks the attribute masks; XRC halves take RC's).
    pub fn bring_up(&mut self, qpns: [u32; 2], o: &QpOptions) {
        for side in 0..2 {
            let peer_qpn = qpns[1 - side];
            let peer_side = 1 - side;
            let my_qpn = qpns[side];
            let dev = &mut self.devices[side];
            let sq_psn = o.psn.wrapping_add(side as u32 * 0x1000) & 0xFF_FFFF;
            let rq_psn = o.psn.wrapping_add((1 - side) as u32 * 0x1000) & 0xFF_FFFF;
            let attr = QpAttr {
                pkey_index: 0,
                port_num: 1,
                qkey: o.qkey,
                qp_access_flags: o.access,
                path_mtu: o.mtu,
                dest_qp_num: peer_qpn,
                rq_psn,
                max_dest_rd_atomic: o.max_dest_rd_atomic,
                min_rnr_timer: o.min_rnr_timer,
                ah_attr: AhAttr {
                    dlid: peer_side as u16 + 1,
                    sl: 0,
                    src_path_bits: 0,
                    grh: Some(GlobalRoute {
                        dgid: gid_of(peer_side),
                        flow_label: 0,
                        sgid_index: 0,
                        hop_limit: 64,
                        traffic_class: 0,
                    }),
                },
                sq_psn,
                timeout: o.timeout,
                retry_cnt: o.retry_cnt,
                rnr_retry: o.rnr_retry,
                max_rd_atomic: o.max_rd_atomic,
                ..QpAttr::default()
            };
            dev.bring_up_qp(0, my_qpn, o.qp_type, &attr, QpState::Rts)
                .expect("RESET->RTS with the attributes ibv_modify_qp(3) lists");
        }
    }

    fn endpoint(&mut self, side: usize, o: &QpOptions) -> Endpoint {
        let dev = &mut self.devices[side];
        let pd = match o.pds {
            Some(pds) => pds[side],
            None => dev.alloc_pd(),
        };
        let send_cq = dev.create_cq(o.cq_depth).expect("CQ");
        let recv_cq = dev.create_cq(o.cq_depth).expect("CQ");
        let addr = o.addr + side as u64 * 0x1000_0000;
        let keys = dev
            .reg_mr(
                pd,
                Box::new(VecMemory::zeroed(o.buf_len)),
                addr,
                o.access | AccessFlags::LOCAL_WRITE,
            )
            .expect("MR");
        let srq = o.srq.then(|| {
            dev.create_srq(
                pd,
                crate::verbs::SrqAttr {
                    max_wr: o.rq_depth,
                    max_sge: 4,
                    srq_limit: 0,
                },
            )
            .expect("SRQ")
        });
        let qpn = dev
            .create_qp(
                pd,
                QpInitAttr {
                    qp_type: o.qp_type,
                    send_cq,
                    recv_cq,
                    srq,
                    cap: QpCap {
                        max_send_wr: o.sq_depth,
                        max_recv_wr: o.rq_depth,
                        max_send_sge: 4,
                        max_recv_sge: 4,
                        max_inline_data: 256,
                    },
                    sq_sig_all: false,
                },
            )
            .expect("QP");
        Endpoint {
            side,
            pd,
            send_cq,
            recv_cq,
            qpn,
            keys,
            addr,
            len: o.buf_len,
            srq,
        }
    }

    /// Writes `data` into an endpoint's buffer at `offset`.
    pub fn fill(&mut self, side: usize, ep: &Endpoint, offset: usize, data: &[u8]) {
        self.devices[side]
            .memory_mut(ep.keys.lkey)
            .expect("registered")
            .write(offset, data);
    }

    /// Reads `len` bytes of an endpoint's buffer at `offset`.
    pub fn read(&self, side: usize, ep: &Endpoint, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.devices[side]
            .memory(ep.keys.lkey)
            .expect("registered")
            .read(offset, &mut out);
        out
    }

    /// Polls every completion of the endpoint's send and receive CQs (send first).
    pub fn completions(&mut self, side: usize, ep: &Endpoint) -> Vec<WorkCompletion> {
        let mut all = Vec::new();
        for cq in [ep.send_cq, ep.recv_cq] {
            let mut batch = [empty_wc(); 64];
            loop {
                let n = self.devices[side].poll_cq(cq, &mut batch);
                all.extend_from_slice(&batch[..n]);
                if n < batch.len() {
                    break;
                }
            }
            if ep.send_cq == ep.recv_cq {
                break;
            }
        }
        all
    }

    fn buffer(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_else(|| vec![0u8; BUF_LEN])
    }

    fn emit(&mut self, from: usize, t: Transmit, mut bytes: Vec<u8>) {
        self.stats.sent[from] += 1;
        let len = t.len;
        let mut verdict = match self.filter.as_mut() {
            Some(f) => f(from, self.now, &bytes[..len]),
            None => Verdict::Pass,
        };
        let r =
            |rng: &mut ChaCha8Rng, p: f64| p > 0.0 && (rng.next_u64() as f64 / u64::MAX as f64) < p;
        if verdict == Verdict::Pass && r(&mut self.rng, self.faults.drop) {
            verdict = Verdict::Drop;
        }
        if self.trace {
            let b = &bytes[..len];
            let syndrome = softib_wire::PacketRepr::parse(b)
                .ok()
                .and_then(|p| p.aeth.map(|a| a.syndrome.to_u8()));
            self.trace_log.push(TraceEntry {
                time: self.now,
                from,
                opcode: b[0],
                psn: u32::from_be_bytes([0, b[9], b[10], b[11]]),
                dest_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
                ack_req: b[8] & 0x80 != 0,
                syndrome,
                len,
                delivered: verdict != Verdict::Drop,
            });
        }
        if verdict == Verdict::Drop {
            self.stats.dropped += 1;
            self.free.push(bytes);
            return;
        }
        let mut at = self.now + self.latency;
        if let Verdict::Delay(d) = verdict {
            at += d;
        }
        let window = self.faults.reorder_window.max(1);
        if r(&mut self.rng, self.faults.reorder) {
            self.stats.reordered += 1;
            at += self.rng.next_u64() % window;
        }
        if r(&mut self.rng, self.faults.delay) {
            self.stats.delayed += 1;
            at += self.rng.next_u64() % self.faults.delay_max.max(1);
        }
        let src = &self.devices[from];
        let grh = t.path.grh.map(|g| RxGrh {
            sgid: src.config().gid,
            dgid: g.dgid,
            traffic_class: g.traffic_class,
            flow_label: g.flow_label,
            hop_limit: g.hop_limit,
        });
        let meta = RxMeta {
            slid: src.config().lid,
            sl: t.path.sl,
            grh,
            ecn_ce: r(&mut self.rng, self.faults.ecn_mark),
        };
        if r(&mut self.rng, self.faults.corrupt) && len > 0 {
            self.stats.corrupted += 1;
            let bit = self.rng.next_u64() as usize % (len * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            if !self.faults.corrupt_bypasses_icrc {
                // The receiving driver's ICRC check would catch it.
                self.devices[1 - from].count_driver_drop(DriverDrop::Icrc);
                self.free.push(bytes);
                return;
            }
        }
        if r(&mut self.rng, self.faults.fecn_mark) && len > 4 {
            bytes[4] |= 0x80;
        }
        if r(&mut self.rng, self.faults.duplicate) {
            self.stats.duplicated += 1;
            let extra = self.rng.next_u64() % window;
            let mut copy = self.buffer();
            copy[..len].copy_from_slice(&bytes[..len]);
            self.push(at + extra, 1 - from, meta, copy, len);
        }
        self.push(at, 1 - from, meta, bytes, len);
    }

    fn push(&mut self, at: Nanos, to: usize, meta: RxMeta, bytes: Vec<u8>, len: usize) {
        self.seq += 1;
        let p = InFlight {
            to,
            meta,
            bytes,
            len,
        };
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(p);
                i
            }
            None => {
                self.slots.push(Some(p));
                self.slots.len() as u32 - 1
            }
        };
        self.queue.push(Reverse((at, self.seq, slot)));
    }

    /// Sends everything both devices have to send at the current time.
    pub fn flush_transmits(&mut self) {
        loop {
            let mut any = false;
            for side in 0..2 {
                loop {
                    let mut bytes = self.buffer();
                    match self.devices[side].poll_transmit(self.now, &mut bytes) {
                        Some(t) => {
                            any = true;
                            self.emit(side, t, bytes);
                        }
                        None => {
                            self.free.push(bytes);
                            break;
                        }
                    }
                }
            }
            if !any {
                break;
            }
        }
    }

    /// The next time something happens (a delivery or a timer), if anything will.
    pub fn next_event(&self) -> Option<Nanos> {
        let q = self.queue.peek().map(|Reverse((t, _, _))| *t);
        let t0 = self.devices[0].poll_timeout();
        let t1 = self.devices[1].poll_timeout();
        [q, t0, t1].into_iter().flatten().min()
    }

    /// Advances to the next event (not beyond `deadline`) and processes everything due then.
    /// Returns false when nothing is left to do at or before `deadline`.
    pub fn step(&mut self, deadline: Nanos) -> bool {
        self.flush_transmits();
        let Some(next) = self.next_event() else {
            return false;
        };
        if next > deadline {
            self.now = self.now.max(deadline);
            return false;
        }
        self.now = self.now.max(next);
        while let Some(&Reverse((t, _, slot))) = self.queue.peek() {
            if t > self.now {
                break;
            }
            self.queue.pop();
            self.free_slots.push(slot);
            let Some(p) = self.slots[slot as usize].take() else {
                continue;
            };
            self.stats.delivered += 1;
            self.devices[p.to].handle_packet(self.now, &p.meta, &p.bytes[..p.len]);
            self.free.push(p.bytes);
        }
        for side in 0..2 {
            if self.devices[side]
                .poll_timeout()
                .is_some_and(|t| t <= self.now)
            {
                self.devices[side].handle_timeout(self.now);
            }
        }
        self.flush_transmits();
        true
    }

    /// Runs until nothing is in flight and no timer is pending (true), or until virtual
    /// time reaches `deadline` (false).
    pub fn drive(&mut self, deadline: Nanos) -> bool {
        while self.step(deadline) {}
        self.next_event().is_none()
    }

    /// Runs until `done(self)` holds (true) or nothing is left to do before `deadline` (false).
    pub fn drive_until(
        &mut self,
        deadline: Nanos,
        mut done: impl FnMut(&mut Pair) -> bool,
    ) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if !self.step(deadline) {
                return done(self);
            }
        }
    }
}

/// One QP of [`fixture_all_states`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixtureQp {
    /// Its number.
    pub qpn: u32,
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// The state it was left in.
    pub state: QpState,
    /// R_Key of its 64 KiB buffer (REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC).
    pub rkey: u32,
    /// Virtual address of that buffer.
    pub addr: u64,
}

/// A device holding RC, UC and UD QPs in every state they can reach (RESET, INIT, RTR, RTS,
/// SQD, SQE for UC/UD, ERR), each with a registered buffer and posted receives: the fixture
/// for fuzzing `handle_packet` and for protection tests.
pub fn fixture_all_states(seed: u64) -> (Device, Vec<FixtureQp>) {
    let mut dev = Device::new(DeviceConfig::default(), seed);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(1 << 16).expect("CQ");
    let mut out = Vec::new();
    let states = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];
    let mut addr = 0x1000_0000u64;
    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for state in states {
            if state == QpState::Sqe && qp_type == QpType::Rc {
                continue;
            }
            let keys = dev
                .reg_mr(
                    pd,
                    Box::new(VecMemory::zeroed(64 * 1024)),
                    addr,
                    AccessFlags::LOCAL_WRITE
                        | AccessFlags::REMOTE_WRITE
                        | AccessFlags::REMOTE_READ
                        | AccessFlags::REMOTE_ATOMIC,
                )
                .expect("MR");
            let qpn = dev
                .create_qp(
                    pd,
                    QpInitAttr {
                        qp_type,
                        send_cq: cq,
                        recv_cq: cq,
                        srq: None,
                        cap: QpCap::default(),
                        sq_sig_all: false,
                    },
                )
                .expect("QP");
            if state != QpState::Reset {
                let attr = QpAttr {
                    qkey: 0x1111_1111,
                    qp_access_flags: AccessFlags::REMOTE_WRITE
                        | AccessFlags::REMOTE_READ
                        | AccessFlags::REMOTE_ATOMIC,
                    dest_qp_num: qpn,
                    rq_psn: 0,
                    sq_psn: 0,
                    max_dest_rd_atomic: 4,
                    max_rd_atomic: 4,
                    ..QpAttr::default()
                };
                // INIT and RTR stop there; RTS, SQD, SQE and ERR start from RTS.
                let upto = match state {
                    QpState::Init | QpState::Rtr => state,
                    _ => QpState::Rts,
                };
                dev.bring_up_qp(0, qpn, qp_type, &attr, upto)
                    .expect("fixture transition");
            }
            if state != QpState::Reset {
                for i in 0..8u64 {
                    let sge = crate::verbs::Sge {
                        addr: addr + i * 4096,
                        length: 4096,
                        lkey: keys.lkey,
                    };
                    dev.post_recv(
                        qpn,
                        &crate::verbs::RecvWr {
                            wr_id: i,
                            sg_list: vec![sge],
                        },
                    )
                    .expect("recv");
                }
            }
            if state == QpState::Sqe {
                // SQE is entered only by a send error (IBA 10.3.1): post a WR whose lkey
                // names nothing and let it execute.
                let ah = dev.create_ah(pd, AhAttr::default()).expect("AH");
                let wr = crate::verbs::SendWr {
                    wr_id: 99,
                    sg_list: vec![crate::verbs::Sge {
                        addr,
                        length: 16,
                        lkey: keys.lkey ^ 0xFF,
                    }],
                    ud: Some(crate::verbs::UdDest {
                        ah,
                        remote_qpn: qpn,
                        remote_qkey: 0x1111_1111,
                    }),
                    ..Default::default()
                };
                dev.post_send(0, qpn, &wr).expect("post");
                let mut buf = vec![0u8; 8192];
                while dev.poll_transmit(0, &mut buf).is_some() {}
            }
            if matches!(state, QpState::Sqd | QpState::Err) {
                let attr = QpAttr {
                    qp_state: state,
                    ..QpAttr::default()
                };
                dev.modify_qp(0, qpn, &attr, QpAttrMask::STATE)
                    .expect("fixture transition");
            }
            out.push(FixtureQp {
                qpn,
                qp_type,
                state,
                rkey: keys.rkey,
                addr,
            });
            addr += 0x100_0000;
        }
    }
    (dev, out)
}

/// A zeroed completion for output buffers.
pub fn empty_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: crate::verbs::WcStatus::GeneralErr,
        opcode: crate::verbs::WcOpcode::Send,
        byte_len: 0,
        imm_data: None,
        invalidated_rkey: None,
        qp_num: 0,
        src_qp: 0,
        slid: 0,
        sl: 0,
        wc_flags: crate::verbs::WcFlags::empty(),
        vendor_err: 0,
    }
}
