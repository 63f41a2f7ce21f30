//! Random workloads for the property tests (`prop_*.rs`): a description of what each side
//! of each QP posts, a reference model of what memory and the CQs must look like afterwards,
//! and the runner that drives a faulty `Pair` and compares.
//!
//! Memory plan of every endpoint buffer (both sides, every QP; offsets into the buffer):
//! - `S` source area: a constant pattern. Outgoing WRITE/SEND data is gathered from it and
//!   incoming READs read it, so READ results never depend on timing (a retried READ
//!   re-reads memory at the responder, IBA 9.7.5.1.5, so reading an area that later WRITEs
//!   change would make the expected bytes timing-dependent);
//! - `T` write target: incoming RDMA WRITEs land here at random, possibly overlapping
//!   offsets (the responder executes in PSN order and never re-executes a duplicate, so the
//!   result is the sequential one);
//! - `A` atomic slots: 8-byte aligned counters hit by incoming atomics (serial model);
//! - `L` landing area: one private range per READ / atomic result;
//! - `R` receive buffers: one private range per posted receive.
//!
//! Every byte is initialised to a known pattern (never zero, so a stray zero-write shows),
//! and two more regions are registered right before and after the buffer in iova space
//! (guards, full access) and must stay untouched. After the run the whole buffer is
//! compared with the model, so "no byte outside the targeted ranges changed" is checked
//! byte for byte.
#![allow(dead_code)]
// Sides are indices into several parallel per-side arrays (endpoints, plans, seen, memory).
#![allow(clippy::needless_range_loop)]

use proptest::prelude::*;
use softib_transport::harness::{empty_wc, Endpoint, Faults, Pair, QpOptions, Verdict};
use softib_transport::{
    AccessFlags, AhAttr, AhHandle, AsyncEvent, GlobalRoute, MrKeys, Mtu, QpState, QpType, RecvWr,
    SendFlags, SendWr, Sge, UdDest, VecMemory, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};

pub const KIB: usize = 1024;
pub const MIB: usize = 1024 * 1024;

/// Area offsets inside each endpoint buffer.
pub const S_OFF: usize = 0;
pub const S_LEN: usize = MIB + 64 * KIB;
pub const T_OFF: usize = S_OFF + S_LEN;
pub const T_LEN: usize = MIB + 64 * KIB;
pub const A_OFF: usize = T_OFF + T_LEN;
pub const A_SLOTS: usize = 32;
pub const A_LEN: usize = A_SLOTS * 8;
pub const L_OFF: usize = A_OFF + 4 * KIB;
/// Landing + receive space (bounded by the per-case byte budget).
pub const LR_LEN: usize = 2 * BYTE_BUDGET + 256 * KIB;
pub const BUF_LEN: usize = L_OFF + LR_LEN;
pub const GUARD_LEN: usize = 4096;
/// Bytes one side may move in one case (keeps a case's run time bounded).
pub const BYTE_BUDGET: usize = 2 * MIB;

/// Initial content of byte `i` of side `side`'s buffer of QP `qp` (never constant, never
/// all-zero).
pub fn init_byte(side: usize, qp: usize, i: usize) -> u8 {
    let x = (i as u32)
        .wrapping_mul(2_654_435_761)
        .wrapping_add((side as u32) << 8 | qp as u32);
    ((x >> 13) as u8) | 1
}

pub fn init_buffer(side: usize, qp: usize) -> Vec<u8> {
    (0..BUF_LEN).map(|i| init_byte(side, qp, i)).collect()
}

/// One WR as generated (before placement).
#[derive(Clone, Debug)]
pub struct OpSpec {
    pub opcode: WrOpcode,
    /// Total length (atomics: 8).
    pub len: usize,
    /// Random choices: offsets, SGE splits, flags.
    pub seed: u64,
    pub signaled: bool,
    pub fence: bool,
    pub solicited: bool,
    pub inline: bool,
    /// Use an empty SGE list for a zero-length message.
    pub empty_sgl: bool,
}

/// One side's posting plan for one QP.
#[derive(Clone, Debug)]
pub struct SidePlan {
    pub ops: Vec<OpSpec>,
}

/// A whole case.
#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub faults: Faults,
    pub srq: bool,
    pub max_rd_atomic: u8,
    pub timeout: u8,
    /// RC retry_cnt.
    pub retry_cnt: u8,
    /// Bound the losses of any one packet (see `MAX_LOSSES_PER_PACKET`).
    pub bounded_loss: bool,
    /// Post receives only after this much virtual time (RNR NAKs before that).
    pub late_recv: Option<u64>,
    /// Post the sends in this many batches with virtual time in between.
    pub batches: usize,
    /// plans[qp][side]
    pub plans: Vec<[SidePlan; 2]>,
}

fn mtu_strategy() -> impl Strategy<Value = Mtu> {
    prop_oneof![
        Just(Mtu::M256),
        Just(Mtu::M512),
        Just(Mtu::M1024),
        Just(Mtu::M2048),
        Just(Mtu::M4096)
    ]
}

/// Message sizes 0..=1 MiB, skewed small so a case stays fast: most under 4 KiB, some up
/// to 64 KiB, a few up to 1 MiB.
pub fn size_strategy(max: usize) -> BoxedStrategy<usize> {
    let max = max.max(1);
    prop_oneof![
        6 => 0..=4096usize.min(max),
        3 => 0..=(64 * KIB).min(max),
        1 => 0..=MIB.min(max),
    ]
    .boxed()
}

pub fn faults_strategy(max_p: f64) -> impl Strategy<Value = Faults> {
    let p = move || prop_oneof![2 => Just(0.0), 3 => 0.0..=max_p];
    (p(), p(), p(), p(), p(), 0u64..=20_000, 0u64..=2_000_000).prop_map(
        |(drop, duplicate, reorder, corrupt, delay, reorder_window, delay_max)| Faults {
            drop,
            duplicate,
            reorder,
            corrupt,
            delay,
            reorder_window,
            delay_max,
            corrupt_bypasses_icrc: false,
            // ECN/FECN marks do not change delivery; the CC tests cover them.
            ..Faults::default()
        },
    )
}

fn op_strategy(ops: &'static [WrOpcode], max_len: usize) -> impl Strategy<Value = OpSpec> {
    (
        prop::sample::select(ops),
        size_strategy(max_len),
        any::<u64>(),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(opcode, len, seed, signaled, fence, solicited, inline, empty_sgl)| OpSpec {
                len: if opcode.is_atomic() { 8 } else { len },
                opcode,
                seed,
                signaled,
                fence,
                solicited,
                inline,
                empty_sgl,
            },
        )
}

pub const RC_OPS: &[WrOpcode] = &[
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::SendWithInv,
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicCmpAndSwp,
    WrOpcode::AtomicFetchAndAdd,
];
pub const UC_OPS: &[WrOpcode] = &[
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
];
pub const UD_OPS: &[WrOpcode] = &[WrOpcode::Send, WrOpcode::SendWithImm];

/// Trims a plan to the byte budget (sizes are drawn independently).
fn within_budget(mut ops: Vec<OpSpec>) -> Vec<OpSpec> {
    let mut total = 0;
    ops.retain(|o| {
        total += o.len;
        total <= BYTE_BUDGET
    });
    ops
}

pub fn case_strategy(
    qp_type: QpType,
    max_qps: usize,
    max_ops: usize,
    max_fault: f64,
) -> impl Strategy<Value = Case> {
    let ops: &'static [WrOpcode] = match qp_type {
        QpType::Rc => RC_OPS,
        QpType::Uc => UC_OPS,
        QpType::Ud => UD_OPS,
        QpType::XrcSend | QpType::XrcRecv | QpType::Rd => {
            panic!(
                "the workload model connects RC/UC/UD pairs; XRC is tested in tests/xrc.rs, \
                 RD in tests/prop_rd.rs"
            )
        }
    };
    let side = move |mtu: Mtu| {
        let max_len = if qp_type == QpType::Ud {
            mtu.bytes() as usize
        } else {
            MIB
        };
        prop::collection::vec(op_strategy(ops, max_len), 0..=max_ops).prop_map(|ops| SidePlan {
            ops: within_budget(ops),
        })
    };
    (
        any::<u64>(),
        mtu_strategy(),
        1..=max_qps,
        faults_strategy(max_fault),
        any::<bool>(),
        1u8..=8,
        12u8..=16,
        prop::option::weighted(0.2, 10_000u64..=3_000_000),
        1usize..=4,
    )
        .prop_flat_map(
            move |(seed, mtu, nqps, faults, srq, max_rd_atomic, timeout, late_recv, batches)| {
                // UD has one path MTU: the port's (4096 in the harness config).
                let mtu = if qp_type == QpType::Ud {
                    Mtu::M4096
                } else {
                    mtu
                };
                let plans = prop::collection::vec((side(mtu), side(mtu)), nqps)
                    .prop_map(|v| v.into_iter().map(|(a, b)| [a, b]).collect::<Vec<_>>());
                plans.prop_map(move |plans| Case {
                    seed,
                    qp_type,
                    mtu,
                    faults,
                    srq: srq && qp_type != QpType::Ud,
                    max_rd_atomic,
                    timeout,
                    retry_cnt: 7,
                    bounded_loss: true,
                    // Only RC answers a missing receive with RNR NAK and retries; UC and UD
                    // drop the message (IBA 9.8.2.2, 9.8.3), which the exact model excludes.
                    late_recv: late_recv.filter(|_| qp_type == QpType::Rc),
                    batches,
                    plans,
                })
            },
        )
}

/// A tiny deterministic generator for the placement choices inside one op.
pub struct Mix(u64);
impl Mix {
    pub fn new(seed: u64) -> Mix {
        Mix(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Splits `len` into 1..=max_pieces lengths (zero-length pieces allowed).
fn split(mix: &mut Mix, len: usize, max_pieces: usize) -> Vec<usize> {
    let k = 1 + mix.below(max_pieces);
    let mut cuts: Vec<usize> = (0..k - 1).map(|_| mix.below(len + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::with_capacity(k);
    let mut prev = 0;
    for c in cuts {
        out.push(c - prev);
        prev = c;
    }
    out.push(len - prev);
    out
}

/// A WR after placement, with everything needed to build it and to predict its effects.
#[derive(Clone, Debug)]
pub struct Placed {
    pub wr: SendWr,
    /// Bytes gathered at the requester, in order (SENDs/WRITEs; inline included).
    pub data: Vec<u8>,
    /// WRITE target offset in the peer buffer.
    pub remote_off: usize,
    /// READ / atomic landing offset in the local buffer.
    pub local_off: usize,
    /// Atomic slot offset in the peer buffer.
    pub slot_off: usize,
    /// SEND_WITH_INV: the rkey invalidated at the peer.
    pub inv_rkey: Option<u32>,
    pub len: usize,
}

/// A posted receive.
#[derive(Clone, Debug)]
pub struct PlacedRecv {
    pub wr: RecvWr,
    pub off: usize,
    pub capacity: usize,
}

/// Bump allocator over the L/R area of one side.
pub struct Bump(usize);
impl Bump {
    pub fn new() -> Bump {
        Bump(L_OFF)
    }
    pub fn take(&mut self, len: usize) -> usize {
        let at = self.0;
        // Keep ranges 8-aligned (atomic results) and apart by 8 bytes of untouched memory.
        self.0 = (self.0 + len + 15) & !7;
        assert!(self.0 <= BUF_LEN, "workload exceeded the L/R area");
        at
    }
}

impl Default for Bump {
    fn default() -> Self {
        Bump::new()
    }
}

pub fn sge(ep: &Endpoint, off: usize, len: usize) -> Sge {
    Sge {
        addr: ep.addr + off as u64,
        length: len as u32,
        lkey: ep.keys.lkey,
    }
}

/// Places one op of `me` (towards `peer`): picks offsets, builds the WR and the data it
/// carries. `src` is `me`'s initial buffer (the S area is constant).
#[allow(clippy::too_many_arguments)]
pub fn place(
    o: &OpSpec,
    wr_id: u64,
    me: &Endpoint,
    peer: &Endpoint,
    src: &[u8],
    bump: &mut Bump,
    inv_rkey: Option<u32>,
    ud: Option<UdDest>,
    max_inline: usize,
    shadow: &mut [u64],
) -> Placed {
    let mut mix = Mix::new(o.seed);
    let len = o.len;
    let mut flags = SendFlags::empty();
    if o.signaled {
        flags |= SendFlags::SIGNALED;
    }
    if o.fence {
        flags |= SendFlags::FENCE;
    }
    if o.solicited {
        flags |= SendFlags::SOLICITED;
    }
    let mut wr = SendWr {
        wr_id,
        opcode: o.opcode,
        flags,
        ud,
        ..Default::default()
    };
    let mut data = Vec::new();
    let mut remote_off = 0;
    let mut local_off = 0;
    let mut slot_off = 0;
    match o.opcode {
        WrOpcode::RdmaRead => {
            // Remote: anywhere in the peer's constant S area; local: a fresh L range,
            // scattered over up to 4 SGEs.
            remote_off = S_OFF + mix.below(S_LEN - len + 1);
            local_off = bump.take(len);
            if !(o.empty_sgl && len == 0) {
                let mut at = local_off;
                for piece in split(&mut mix, len, 4) {
                    wr.sg_list.push(sge(me, at, piece));
                    at += piece;
                }
            }
            wr.remote_addr = peer.addr + remote_off as u64;
            wr.rkey = peer.keys.rkey;
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            slot_off = A_OFF + 8 * mix.below(A_SLOTS);
            local_off = bump.take(8);
            wr.sg_list.push(sge(me, local_off, 8));
            wr.remote_addr = peer.addr + slot_off as u64;
            wr.rkey = peer.keys.rkey;
            let slot = (slot_off - A_OFF) / 8;
            // `shadow` is the slot's value when this atomic executes (atomics of one
            // requester execute in order and nothing else touches the slots), so half of
            // the CMP_AND_SWPs are made to hit.
            wr.compare_add = match mix.below(4) {
                0 | 1 if o.opcode == WrOpcode::AtomicCmpAndSwp => shadow[slot],
                2 => mix.next() % 1000,
                _ => mix.next(),
            };
            wr.swap = mix.next();
            shadow[slot] = if o.opcode == WrOpcode::AtomicFetchAndAdd {
                shadow[slot].wrapping_add(wr.compare_add)
            } else if shadow[slot] == wr.compare_add {
                wr.swap
            } else {
                shadow[slot]
            };
        }
        _ => {
            // SEND / WRITE: gather from up to 4 scattered pieces of S (or inline).
            let inline = o.inline && len <= max_inline;
            if inline {
                wr.flags |= SendFlags::INLINE;
            }
            if !(o.empty_sgl && len == 0) {
                for piece in split(&mut mix, len, 4) {
                    let at = S_OFF + mix.below(S_LEN - piece + 1);
                    data.extend_from_slice(&src[at..at + piece]);
                    wr.sg_list.push(sge(me, at, piece));
                }
            }
            if matches!(o.opcode, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) {
                remote_off = T_OFF + mix.below(T_LEN - len + 1);
                wr.remote_addr = peer.addr + remote_off as u64;
                wr.rkey = peer.keys.rkey;
            }
            if matches!(o.opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm) {
                wr.imm_data = Some(mix.next() as u32);
            }
            if o.opcode == WrOpcode::SendWithInv {
                wr.invalidate_rkey = inv_rkey.expect("an rkey to invalidate");
            }
        }
    }
    Placed {
        wr,
        data,
        remote_off,
        local_off,
        slot_off,
        inv_rkey: (o.opcode == WrOpcode::SendWithInv)
            .then_some(inv_rkey)
            .flatten(),
        len,
    }
}

/// True if the op consumes a receive WQE at the peer.
pub fn consumes_recv(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv | WrOpcode::RdmaWriteWithImm
    )
}

/// The 40 bytes in front of a UD receive for RoCEv2 over IPv4 (the harness's GIDs are
/// IPv4-mapped), as Linux delivers them (`union rdma_network_hdr`): 20 zero bytes, then the
/// IPv4 header of the packet (Identification unknown, so 0; DF set; TTL = hop limit; UDP).
pub fn ud_network_header(sgid: &[u8; 16], dgid: &[u8; 16], p: &Placed) -> [u8; 40] {
    let pad = (4 - p.len % 4) % 4;
    let imm = if p.wr.imm_data.is_some() { 4 } else { 0 };
    // IPv4 + UDP + BTH + DETH + ImmDt + payload + pad + ICRC
    let total = (20 + 8 + 12 + 8 + imm + p.len + pad + 4) as u16;
    let mut b = [0u8; 40];
    let h = &mut b[20..];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[6] = 0x40;
    h[8] = 64;
    h[9] = 17;
    h[12..16].copy_from_slice(&sgid[12..]);
    h[16..20].copy_from_slice(&dgid[12..]);
    let sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xFFFF) + (sum >> 16);
    let folded = (folded & 0xFFFF) + (folded >> 16);
    h[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
    b
}

/// Everything the model predicts for one side of one QP.
pub struct Expect {
    pub send_wcs: Vec<WorkCompletion>,
    pub recv_wcs: Vec<WorkCompletion>,
}

/// Applies the sequential model of `placed` (posted by `me`, executed at the peer in order)
/// to `peer_mem` (the peer's buffer) and `my_mem` (landing areas), and returns the expected
/// completions of both sides.
#[allow(clippy::too_many_arguments)]
pub fn model(
    placed: &[Placed],
    recvs: &[PlacedRecv],
    me: &Endpoint,
    peer: &Endpoint,
    my_mem: &mut [u8],
    peer_mem: &mut [u8],
    peer_src: &[u8],
    ud_grh: Option<[u8; 16]>,
) -> Expect {
    let mut send_wcs = Vec::new();
    let mut recv_wcs = Vec::new();
    let mut next_recv = 0;
    for p in placed {
        let op = p.wr.opcode;
        match op {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                peer_mem[p.remote_off..p.remote_off + p.len].copy_from_slice(&p.data);
            }
            WrOpcode::RdmaRead => {
                my_mem[p.local_off..p.local_off + p.len]
                    .copy_from_slice(&peer_src[p.remote_off..p.remote_off + p.len]);
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let slot = &mut peer_mem[p.slot_off..p.slot_off + 8];
                let old = u64::from_le_bytes(slot.try_into().unwrap());
                let new = if op == WrOpcode::AtomicFetchAndAdd {
                    old.wrapping_add(p.wr.compare_add)
                } else if old == p.wr.compare_add {
                    p.wr.swap
                } else {
                    old
                };
                slot.copy_from_slice(&new.to_le_bytes());
                my_mem[p.local_off..p.local_off + 8].copy_from_slice(&old.to_le_bytes());
            }
            _ => {}
        }
        if consumes_recv(op) {
            let r = &recvs[next_recv];
            next_recv += 1;
            let mut flags = WcFlags::empty();
            let mut byte_len = p.len as u32;
            if op != WrOpcode::RdmaWriteWithImm {
                let mut at = r.off;
                if let Some(sgid) = ud_grh {
                    flags |= WcFlags::GRH;
                    let area = ud_network_header(&sgid, &gid_of(peer.side), p);
                    peer_mem[at..at + 40].copy_from_slice(&area);
                    at += 40;
                    byte_len += 40;
                }
                peer_mem[at..at + p.len].copy_from_slice(&p.data);
            }
            if p.wr.imm_data.is_some() {
                flags |= WcFlags::WITH_IMM;
            }
            if p.inv_rkey.is_some() {
                flags |= WcFlags::WITH_INV;
            }
            if p.wr.flags.contains(SendFlags::SOLICITED) {
                flags |= WcFlags::SOLICITED;
            }
            recv_wcs.push(WorkCompletion {
                wr_id: r.wr.wr_id,
                status: WcStatus::Success,
                opcode: if op == WrOpcode::RdmaWriteWithImm {
                    WcOpcode::RecvRdmaWithImm
                } else {
                    WcOpcode::Recv
                },
                byte_len,
                imm_data: p.wr.imm_data,
                invalidated_rkey: p.inv_rkey,
                qp_num: peer.qpn,
                src_qp: me.qpn,
                slid: me.side as u16 + 1,
                sl: 0,
                wc_flags: flags,
                vendor_err: 0,
            });
        }
        if p.wr.flags.contains(SendFlags::SIGNALED) {
            send_wcs.push(WorkCompletion {
                wr_id: p.wr.wr_id,
                status: WcStatus::Success,
                opcode: op.wc_opcode(),
                byte_len: p.len as u32,
                imm_data: None,
                invalidated_rkey: None,
                qp_num: me.qpn,
                src_qp: if ud_grh.is_some() { 0 } else { peer.qpn },
                slid: 0,
                sl: 0,
                wc_flags: WcFlags::empty(),
                vendor_err: 0,
            });
        }
    }
    Expect { send_wcs, recv_wcs }
}

/// Per-QP state of a run.
pub struct QpRun {
    pub eps: [Endpoint; 2],
    /// Guard regions (lkeys) before and after each side's buffer.
    pub guards: [[MrKeys; 2]; 2],
    pub placed: [Vec<Placed>; 2],
    /// Receives posted at side s (for the messages of side 1-s).
    pub recvs: [Vec<PlacedRecv>; 2],
    pub init: [Vec<u8>; 2],
    pub ahs: [Option<AhHandle>; 2],
}

pub fn gid_of(side: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..16].copy_from_slice(&[10, 0, 0, side as u8 + 1]);
    g
}

/// How many times the link may lose one packet (same direction, opcode, DestQP and PSN).
///
/// Losses are drawn at random (up to 10% drop plus up to 10% corruption caught by the ICRC),
/// but no single packet is lost more than this many times. Without the bound, a case
/// occasionally loses the one packet that recovery depends on in retry_cnt + 1 = 8
/// consecutive rounds (at 20% loss the chance per stall is about 1e-5, and a soak run
/// meets thousands of stalls), and "transport retry counter exceeded" is then the right
/// outcome, not a bug. The bound keeps the exact model applicable without making the link
/// any less hostile to the recovery logic.
pub const MAX_LOSSES_PER_PACKET: u8 = 2;

/// Installs the bounded random loss as the pair's filter; the pair's own drop/corrupt
/// probabilities are zeroed (duplicate, reorder and delay stay with the harness).
pub fn install_bounded_loss(pair: &mut Pair, faults: Faults, seed: u64) {
    let mut mix = Mix::new(seed ^ 0x1055);
    let mut losses: std::collections::HashMap<(usize, u8, u32, u32), u8> =
        std::collections::HashMap::new();
    let p_loss = faults.drop + faults.corrupt;
    pair.faults = Faults {
        drop: 0.0,
        corrupt: 0.0,
        ..faults
    };
    if p_loss <= 0.0 {
        return;
    }
    pair.filter = Some(Box::new(move |from, _now, b| {
        let draw = (mix.next() >> 11) as f64 / (1u64 << 53) as f64;
        if draw >= p_loss || b.len() < 12 {
            return Verdict::Pass;
        }
        let key = (
            from,
            b[0],
            u32::from_be_bytes([0, b[5], b[6], b[7]]),
            u32::from_be_bytes([0, b[9], b[10], b[11]]),
        );
        let n = losses.entry(key).or_insert(0);
        if *n >= MAX_LOSSES_PER_PACKET {
            return Verdict::Pass;
        }
        *n += 1;
        Verdict::Drop
    }));
}

/// Builds the pair, the QPs, registers guards and invalidation targets, fills memory, and
/// places every op.
pub fn setup(case: &Case) -> (Pair, Vec<QpRun>) {
    let mut pair = Pair::new(case.seed);
    if case.bounded_loss {
        install_bounded_loss(&mut pair, case.faults, case.seed);
    } else {
        pair.faults = case.faults;
    }
    let opts = QpOptions {
        qp_type: case.qp_type,
        mtu: case.mtu,
        timeout: case.timeout,
        retry_cnt: case.retry_cnt,
        rnr_retry: 7,
        min_rnr_timer: 1,
        max_rd_atomic: case.max_rd_atomic,
        max_dest_rd_atomic: case.max_rd_atomic,
        buf_len: BUF_LEN,
        sq_depth: 256,
        rq_depth: 256,
        cq_depth: 1024,
        srq: case.srq,
        ..QpOptions::default()
    };
    let mut runs = Vec::new();
    for (qi, plans) in case.plans.iter().enumerate() {
        let o = QpOptions {
            // Each QP gets its own iova range so a wrong-region bug cannot hide.
            addr: 0x1000_0000 + qi as u64 * 0x40_0000 * 2 + 0x10_0000,
            psn: (case.seed as u32).wrapping_add(qi as u32 * 0x33_3333) & 0xFF_FFFF,
            ..opts
        };
        let (a, b) = pair.connect(&o);
        let eps = [a, b];
        let mut guards = [[MrKeys { lkey: 0, rkey: 0 }; 2]; 2];
        let mut init = [Vec::new(), Vec::new()];
        let mut ahs = [None, None];
        for side in 0..2 {
            let ep = eps[side];
            let all = AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC;
            for (g, at) in [
                (0, ep.addr - GUARD_LEN as u64),
                (1, ep.addr + BUF_LEN as u64),
            ] {
                guards[side][g] = pair
                    .dev(side)
                    .reg_mr(ep.pd, Box::new(VecMemory(vec![0xEE; GUARD_LEN])), at, all)
                    .expect("guard MR");
            }
            init[side] = init_buffer(side, qi);
            pair.fill(side, &ep, 0, &init[side]);
            if case.qp_type == QpType::Ud {
                let peer = eps[1 - side];
                ahs[side] = Some(
                    pair.dev(side)
                        .create_ah(
                            ep.pd,
                            AhAttr {
                                dlid: peer.side as u16 + 1,
                                sl: 0,
                                src_path_bits: 0,
                                grh: Some(GlobalRoute {
                                    dgid: gid_of(peer.side),
                                    flow_label: 0,
                                    sgid_index: 0,
                                    hop_limit: 64,
                                    traffic_class: 0,
                                }),
                            },
                        )
                        .expect("AH"),
                );
            }
        }
        let mut placed = [Vec::new(), Vec::new()];
        let mut recvs = [Vec::new(), Vec::new()];
        let mut bumps = [Bump::new(), Bump::new()];
        for side in 0..2 {
            let me = eps[side];
            let peer = eps[1 - side];
            let mut shadow: Vec<u64> = (0..A_SLOTS)
                .map(|i| {
                    let at = A_OFF + 8 * i;
                    u64::from_le_bytes(init[1 - side][at..at + 8].try_into().unwrap())
                })
                .collect();
            for (k, o) in plans[side].ops.iter().enumerate() {
                let inv = if o.opcode == WrOpcode::SendWithInv {
                    // A fresh region at the peer, in the peer QP's PD, for it to invalidate.
                    let keys = pair
                        .dev(1 - side)
                        .reg_mr(
                            peer.pd,
                            Box::new(VecMemory::zeroed(64)),
                            0x7000_0000 + (qi * 1000 + k) as u64 * 0x1000,
                            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                        )
                        .expect("MR to invalidate");
                    Some(keys.rkey)
                } else {
                    None
                };
                let ud = ahs[side].map(|ah| UdDest {
                    ah,
                    remote_qpn: peer.qpn,
                    remote_qkey: QpOptions::default().qkey,
                });
                let wr_id = (qi as u64) << 40 | (side as u64) << 32 | k as u64;
                let p = place(
                    o,
                    wr_id,
                    &me,
                    &peer,
                    &init[side],
                    &mut bumps[side],
                    inv,
                    ud,
                    256,
                    &mut shadow,
                );
                if consumes_recv(o.opcode) {
                    // The receive at the peer: room for the message (+ the GRH area on UD)
                    // plus some slack, scattered over up to 4 SGEs.
                    let mut mix = Mix::new(o.seed ^ 0xabcd);
                    let extra = if case.qp_type == QpType::Ud { 40 } else { 0 };
                    let capacity = o.len + extra + mix.below(64);
                    let off = bumps[1 - side].take(capacity);
                    let mut sg_list = Vec::new();
                    let mut at = off;
                    for piece in split(&mut mix, capacity, 4) {
                        sg_list.push(sge(&peer, at, piece));
                        at += piece;
                    }
                    recvs[1 - side].push(PlacedRecv {
                        wr: RecvWr {
                            wr_id: 0x8000_0000_0000_0000 | wr_id,
                            sg_list,
                        },
                        off,
                        capacity,
                    });
                }
                placed[side].push(p);
            }
        }
        runs.push(QpRun {
            eps,
            guards,
            placed,
            recvs,
            init,
            ahs,
        });
    }
    (pair, runs)
}

pub fn post_recvs(pair: &mut Pair, runs: &[QpRun]) {
    for r in runs {
        for side in 0..2 {
            let ep = r.eps[side];
            for rv in &r.recvs[side] {
                match ep.srq {
                    Some(srq) => pair.dev(side).post_srq_recv(srq, &rv.wr),
                    None => pair.dev(side).post_recv(ep.qpn, &rv.wr),
                }
                .expect("post_recv");
            }
        }
    }
}

/// Posts every send in `case.batches` batches, with virtual time in between, receives
/// first (or late), and drives until every expected completion is there and the link is
/// quiet. Returns the completions seen per [qp][side] as (send, recv).
pub fn run(
    case: &Case,
    pair: &mut Pair,
    runs: &[QpRun],
    expected_send: &[[usize; 2]],
    expected_recv: &[[usize; 2]],
    deadline: u64,
) -> Vec<[(Vec<WorkCompletion>, Vec<WorkCompletion>); 2]> {
    if case.late_recv.is_none() {
        post_recvs(pair, runs);
    }
    let batches = case.batches.max(1);
    let mut seen: Vec<[(Vec<WorkCompletion>, Vec<WorkCompletion>); 2]> = runs
        .iter()
        .map(|_| [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())])
        .collect();
    let mut recvs_posted = case.late_recv.is_none();
    for b in 0..batches {
        for r in runs {
            for side in 0..2 {
                let n = r.placed[side].len();
                let (from, to) = (n * b / batches, n * (b + 1) / batches);
                for p in &r.placed[side][from..to] {
                    let now = pair.now;
                    pair.dev(side)
                        .post_send(now, r.eps[side].qpn, &p.wr)
                        .unwrap_or_else(|e| panic!("post_send {:?}: {e}", p.wr.opcode));
                }
            }
        }
        let until = pair.now + 200_000;
        pair.drive(until);
        if !recvs_posted && pair.now >= case.late_recv.unwrap_or(0) {
            post_recvs(pair, runs);
            recvs_posted = true;
        }
    }
    if !recvs_posted {
        let t = case.late_recv.unwrap_or(0).max(pair.now);
        pair.drive(t);
        post_recvs(pair, runs);
    }
    let done = |pair: &mut Pair,
                seen: &mut Vec<[(Vec<WorkCompletion>, Vec<WorkCompletion>); 2]>| {
        collect(pair, runs, seen);
        seen.iter().enumerate().all(|(q, s)| {
            (0..2).all(|side| {
                s[side].0.len() >= expected_send[q][side]
                    && s[side].1.len() >= expected_recv[q][side]
            })
        })
    };
    pair.drive_until(deadline, |p| done(p, &mut seen));
    // Let every duplicate, late packet and timer play out: nothing may change afterwards.
    pair.drive(deadline);
    collect(pair, runs, &mut seen);
    seen
}

fn collect(
    pair: &mut Pair,
    runs: &[QpRun],
    seen: &mut [[(Vec<WorkCompletion>, Vec<WorkCompletion>); 2]],
) {
    let mut buf = [empty_wc(); 64];
    for (q, r) in runs.iter().enumerate() {
        for side in 0..2 {
            for (i, cq) in [r.eps[side].send_cq, r.eps[side].recv_cq]
                .into_iter()
                .enumerate()
            {
                loop {
                    let n = pair.dev(side).poll_cq(cq, &mut buf);
                    let dst = if i == 0 {
                        &mut seen[q][side].0
                    } else {
                        &mut seen[q][side].1
                    };
                    dst.extend_from_slice(&buf[..n]);
                    if n < buf.len() {
                        break;
                    }
                }
            }
        }
    }
}

/// The events that must never happen in a fault-tolerant run.
pub fn assert_no_bad_events(pair: &mut Pair) -> Result<(), TestCaseError> {
    for side in 0..2 {
        while let Some(ev) = pair.dev(side).poll_event() {
            match ev {
                AsyncEvent::CqOverflow(_) | AsyncEvent::QpFatal(_) => {
                    return Err(TestCaseError::fail(format!("side {side}: event {ev:?}")));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Compares the whole buffer with the model; reports the first differing range.
pub fn assert_memory(what: &str, got: &[u8], want: &[u8]) -> Result<(), TestCaseError> {
    if got == want {
        return Ok(());
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
    let last = got.len()
        - 1
        - got
            .iter()
            .rev()
            .zip(want.iter().rev())
            .position(|(a, b)| a != b)
            .unwrap();
    let area = |i: usize| match i {
        _ if i < T_OFF => "S (source, never written)",
        _ if i < A_OFF => "T (write target)",
        _ if i < L_OFF => "A (atomic slots)",
        _ => "L/R (landing/receive)",
    };
    Err(TestCaseError::fail(format!(
        "{what}: memory differs in bytes {first}..={last} (first in {}, last in {}); \
         got {:02x?} want {:02x?} at {first}",
        area(first),
        area(last),
        &got[first..(first + 16).min(got.len())],
        &want[first..(first + 16).min(want.len())],
    )))
}

pub fn read_all(pair: &Pair, side: usize, ep: &Endpoint) -> Vec<u8> {
    pair.read(side, ep, 0, BUF_LEN)
}

pub fn assert_guards(pair: &Pair, runs: &[QpRun]) -> Result<(), TestCaseError> {
    for (q, r) in runs.iter().enumerate() {
        for side in 0..2 {
            for g in 0..2 {
                let mut b = vec![0u8; GUARD_LEN];
                pair.device(side)
                    .memory(r.guards[side][g].lkey)
                    .expect("guard registered")
                    .read(0, &mut b);
                prop_assert!(
                    b.iter().all(|&x| x == 0xEE),
                    "qp {q} side {side}: guard region {} of the buffer changed",
                    if g == 0 { "before" } else { "after" }
                );
            }
        }
    }
    Ok(())
}

pub fn assert_state(pair: &Pair, runs: &[QpRun], want: QpState) -> Result<(), TestCaseError> {
    for r in runs {
        for side in 0..2 {
            prop_assert_eq!(pair.device(side).qp_state(r.eps[side].qpn), Some(want));
        }
    }
    Ok(())
}

/// Soak knob: `SOFTIB_SOAK_CASES=N` runs N cases per property (and a random proptest seed
/// instead of the fixed one) instead of the default quick run.
pub fn config(default_cases: u32) -> ProptestConfig {
    let soak = std::env::var("SOFTIB_SOAK_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    ProptestConfig {
        cases: soak.unwrap_or(default_cases),
        max_shrink_iters: 64,
        failure_persistence: None,
        rng_seed: if soak.is_some() {
            proptest::test_runner::RngSeed::Random
        } else {
            proptest::test_runner::RngSeed::Fixed(0x50f7_1b5e)
        },
        ..ProptestConfig::default()
    }
}

/// Virtual-time budget of one case: far beyond what recovery needs (the harness link has no
/// bandwidth limit, so only timeouts and RNR waits take virtual time).
pub const DEADLINE: u64 = 100_000 * 1_000_000_000;

/// Runs `case` and checks the exact model: every signaled WR completes exactly once, in
/// order, successfully; every receive completes as predicted; both buffers of every QP are
/// byte-exact; guard regions untouched; QPs still in RTS; no CQ overflow or fatal event.
pub fn check_exact(case: &Case) -> Result<(), TestCaseError> {
    check_exact_traced(case, &mut |_| {})
}

/// [`check_exact`] with a hook that sees the pair before the run and again after it (to
/// turn on and dump the packet trace when debugging a case).
pub fn check_exact_traced(
    case: &Case,
    hook: &mut dyn FnMut(&mut Pair),
) -> Result<(), TestCaseError> {
    let (mut pair, runs) = setup(case);
    hook(&mut pair);
    let ud = case.qp_type == QpType::Ud;
    let mut want_mem: Vec<[Vec<u8>; 2]> = runs
        .iter()
        .map(|r| [r.init[0].clone(), r.init[1].clone()])
        .collect();
    let mut want_send = vec![[Vec::new(), Vec::new()]; runs.len()];
    let mut want_recv = vec![[Vec::new(), Vec::new()]; runs.len()];
    for (q, r) in runs.iter().enumerate() {
        for side in 0..2 {
            let [m0, m1] = &mut want_mem[q];
            let (mine, peer) = if side == 0 { (m0, m1) } else { (m1, m0) };
            let e = model(
                &r.placed[side],
                &r.recvs[1 - side],
                &r.eps[side],
                &r.eps[1 - side],
                mine,
                peer,
                &r.init[1 - side],
                ud.then(|| gid_of(side)),
            );
            want_send[q][side] = e.send_wcs;
            want_recv[q][1 - side] = e.recv_wcs;
        }
    }
    let n_send: Vec<[usize; 2]> = want_send.iter().map(|w| [w[0].len(), w[1].len()]).collect();
    let n_recv: Vec<[usize; 2]> = want_recv.iter().map(|w| [w[0].len(), w[1].len()]).collect();
    let seen = run(case, &mut pair, &runs, &n_send, &n_recv, DEADLINE);
    hook(&mut pair);
    // Error completions anywhere are the most useful report (a QP in ERR explains every
    // later mismatch): the first non-flushed error of every QP side.
    let mut errors = Vec::new();
    for (q, r) in runs.iter().enumerate() {
        for side in 0..2 {
            let (s, rv) = &seen[q][side];
            let mut bad = s.iter().chain(rv).filter(|w| w.status != WcStatus::Success);
            let first = bad.clone().find(|w| w.status != WcStatus::WrFlushErr);
            if let Some(wc) = first.or_else(|| bad.next()) {
                errors.push(format!(
                    "qp {q} side {side} (state {:?}): error completion {wc:?}; counters {:?}",
                    pair.device(side).qp_state(r.eps[side].qpn),
                    pair.device(side).qp_counters(r.eps[side].qpn),
                ));
            }
        }
    }
    if !errors.is_empty() {
        return Err(TestCaseError::fail(format!(
            "{}; link {:?}",
            errors.join("; "),
            pair.stats
        )));
    }
    for (q, r) in runs.iter().enumerate() {
        for side in 0..2 {
            let (got_send, got_recv) = &seen[q][side];
            prop_assert_eq!(
                got_send,
                &want_send[q][side],
                "qp {} side {}: send completions (link {:?}, counters {:?})",
                q,
                side,
                pair.stats,
                pair.device(side).qp_counters(r.eps[side].qpn)
            );
            prop_assert_eq!(
                got_recv,
                &want_recv[q][side],
                "qp {} side {}: receive completions",
                q,
                side
            );
            let got = read_all(&pair, side, &r.eps[side]);
            assert_memory(
                &format!("qp {q} side {side} ({:?})", case.qp_type),
                &got,
                &want_mem[q][side],
            )?;
        }
    }
    assert_guards(&pair, &runs)?;
    assert_state(&pair, &runs, QpState::Rts)?;
    assert_no_bad_events(&mut pair)?;
    Ok(())
}

/// Runs an unreliable (UC/UD) `case` with faults and checks what those services promise
/// (IBA 9.8.2 UC, 9.8.3 UD: messages may be lost, and on this link also duplicated or
/// reordered; a lost message shifts later ones onto earlier receive WQEs):
/// - every signaled send WR completes exactly once, in order, successfully (UC/UD send
///   completions are local);
/// - receive completions consume the posted receive WQEs in order; each is either a
///   success whose bytes, length, immediate and (UD) network header area are exactly those
///   of one message the peer sent, or a local length error (a larger message reached a
///   smaller WQE);
/// - every byte that changed lies in a range the peer targeted: a WRITE target range
///   (holding the byte of one of the WRITEs covering it) or a posted receive buffer (UD:
///   only the consumed part of a consumed buffer); guard regions, source, atomic and
///   landing areas are untouched; the QPs stay in RTS.
pub fn check_unreliable(case: &Case) -> Result<(), TestCaseError> {
    let (mut pair, runs) = setup(case);
    let ud = case.qp_type == QpType::Ud;
    let mut want_send = vec![[Vec::new(), Vec::new()]; runs.len()];
    for (q, r) in runs.iter().enumerate() {
        for side in 0..2 {
            // The model's send completions do not depend on delivery.
            let mut scratch_me = r.init[side].clone();
            let mut scratch_peer = r.init[1 - side].clone();
            let e = model(
                &r.placed[side],
                &r.recvs[1 - side],
                &r.eps[side],
                &r.eps[1 - side],
                &mut scratch_me,
                &mut scratch_peer,
                &r.init[1 - side],
                ud.then(|| gid_of(side)),
            );
            want_send[q][side] = e.send_wcs;
        }
    }
    let n_send: Vec<[usize; 2]> = want_send.iter().map(|w| [w[0].len(), w[1].len()]).collect();
    let n_recv = vec![[0usize; 2]; runs.len()];
    let seen = run(case, &mut pair, &runs, &n_send, &n_recv, DEADLINE);
    for (q, r) in runs.iter().enumerate() {
        for side in 0..2 {
            let (got_send, got_recv) = &seen[q][side];
            prop_assert_eq!(
                got_send,
                &want_send[q][side],
                "qp {} side {}: send completions",
                q,
                side
            );
            let got = read_all(&pair, side, &r.eps[side]);
            let init = &r.init[side];
            let peer_ops = &r.placed[1 - side];
            let posted = &r.recvs[side];
            prop_assert!(
                got_recv.len() <= posted.len(),
                "more receive completions than WQEs"
            );
            // Bytes a receive may legitimately have changed.
            let mut allowed = vec![false; BUF_LEN];
            for (i, wc) in got_recv.iter().enumerate() {
                let rv = &posted[i];
                prop_assert_eq!(
                    wc.wr_id,
                    rv.wr.wr_id,
                    "qp {} side {}: WQEs consumed in order",
                    q,
                    side
                );
                prop_assert_eq!(wc.qp_num, r.eps[side].qpn);
                match wc.status {
                    WcStatus::LocLenErr => continue,
                    WcStatus::Success => {}
                    s => {
                        return Err(TestCaseError::fail(format!(
                            "qp {q} side {side}: receive completed with {s:?}: {wc:?}"
                        )))
                    }
                }
                prop_assert_eq!(wc.src_qp, r.eps[1 - side].qpn);
                let hdr = if ud { 40 } else { 0 };
                let found = peer_ops.iter().any(|p| {
                    if !consumes_recv(p.wr.opcode) || p.wr.imm_data != wc.imm_data {
                        return false;
                    }
                    if p.wr.opcode == WrOpcode::RdmaWriteWithImm {
                        return wc.opcode == WcOpcode::RecvRdmaWithImm
                            && wc.byte_len as usize == p.len;
                    }
                    if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != p.len + hdr {
                        return false;
                    }
                    let body = &got[rv.off + hdr..rv.off + hdr + p.len];
                    let head_ok = !ud
                        || got[rv.off..rv.off + 40]
                            == ud_network_header(&gid_of(1 - side), &gid_of(side), p);
                    body == &p.data[..] && head_ok
                });
                prop_assert!(
                    found,
                    "qp {} side {}: receive {:?} matches no message the peer sent",
                    q,
                    side,
                    wc
                );
                if wc.opcode == WcOpcode::Recv {
                    let n = if ud {
                        wc.byte_len as usize
                    } else {
                        rv.capacity
                    };
                    allowed[rv.off..rv.off + n]
                        .iter_mut()
                        .for_each(|a| *a = true);
                }
            }
            if !ud {
                // UC: an interrupted SEND leaves its bytes in the WQE it started to fill, and
                // the WQE is reused (IBA 9.8.2.2), so any posted buffer may hold partial data.
                for rv in posted {
                    allowed[rv.off..rv.off + rv.capacity]
                        .iter_mut()
                        .for_each(|a| *a = true);
                }
            }
            for i in 0..BUF_LEN {
                if got[i] == init[i] || allowed[i] {
                    continue;
                }
                let by_write = peer_ops.iter().any(|p| {
                    matches!(
                        p.wr.opcode,
                        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm
                    ) && (p.remote_off..p.remote_off + p.len).contains(&i)
                        && p.data[i - p.remote_off] == got[i]
                });
                prop_assert!(
                    by_write,
                    "qp {} side {}: byte {} changed ({:02x} -> {:02x}) outside every targeted range",
                    q, side, i, init[i], got[i]
                );
            }
        }
    }
    assert_guards(&pair, &runs)?;
    assert_state(&pair, &runs, QpState::Rts)?;
    assert_no_bad_events(&mut pair)?;
    Ok(())
}

/// Heavy, unbounded loss: RC QPs may legitimately fail with "transport retry counter
/// exceeded" (IBA 9.7.6.1.3), and then the QP enters ERR and flushes (IBA 10.3.1). Checks
/// that, whatever happens, every WR completes exactly once with a legal status:
/// - send completions are the signaled WRs of a prefix of the posted WRs, all successful,
///   then possibly one RETRY_EXC_ERR for the next WR (signaled or not), then WR_FLUSH_ERR for
///   every later WR, in order; an error leaves the QP in ERR, no error leaves it in RTS;
/// - receive completions consume the posted receives in order: successes (each the bytes,
///   length and immediate of the next message the peer sent), then, in ERR, a flush for
///   every receive left;
/// - no byte outside a targeted range changes (a peer WRITE's target holds a byte of one of
///   the WRITEs covering it; landing areas, targeted atomic slots and receive buffers may
///   change); guard regions never change.
pub fn check_statuses(case: &Case) -> Result<(), TestCaseError> {
    let (mut pair, runs) = setup(case);
    let n_send = vec![[0usize; 2]; runs.len()];
    let n_recv = vec![[0usize; 2]; runs.len()];
    let seen = run(case, &mut pair, &runs, &n_send, &n_recv, DEADLINE);
    for (q, r) in runs.iter().enumerate() {
        for side in 0..2 {
            let (sends, recvs) = &seen[q][side];
            let state = pair.device(side).qp_state(r.eps[side].qpn);
            let wrs = &r.placed[side];
            let ctx = format!("qp {q} side {side} (state {state:?})");
            // Sends.
            let err_at = sends.iter().position(|w| w.status != WcStatus::Success);
            let k = match err_at {
                None => wrs.len(),
                Some(e) => {
                    let k = wrs
                        .iter()
                        .position(|p| p.wr.wr_id == sends[e].wr_id)
                        .ok_or_else(|| TestCaseError::fail(format!("{ctx}: unknown wr_id")))?;
                    prop_assert_eq!(
                        sends[e].status,
                        WcStatus::RetryExcErr,
                        "{}: {:?}",
                        ctx,
                        sends[e]
                    );
                    k
                }
            };
            let mut want: Vec<(u64, WcStatus)> = wrs[..k]
                .iter()
                .filter(|p| p.wr.flags.contains(SendFlags::SIGNALED))
                .map(|p| (p.wr.wr_id, WcStatus::Success))
                .collect();
            if err_at.is_some() {
                want.push((wrs[k].wr.wr_id, WcStatus::RetryExcErr));
                want.extend(
                    wrs[k + 1..]
                        .iter()
                        .map(|p| (p.wr.wr_id, WcStatus::WrFlushErr)),
                );
            }
            let got: Vec<(u64, WcStatus)> = sends.iter().map(|w| (w.wr_id, w.status)).collect();
            prop_assert_eq!(&got, &want, "{}: send completions", ctx);
            if err_at.is_some() {
                prop_assert_eq!(state, Some(QpState::Err), "{}", ctx);
            }
            // Receives.
            let posted = &r.recvs[side];
            prop_assert!(
                recvs.len() <= posted.len(),
                "{}: too many receive completions",
                ctx
            );
            let consumers: Vec<&Placed> = r.placed[1 - side]
                .iter()
                .filter(|p| consumes_recv(p.wr.opcode))
                .collect();
            let got_mem = read_all(&pair, side, &r.eps[side]);
            let mut flushing = false;
            for (i, wc) in recvs.iter().enumerate() {
                prop_assert_eq!(wc.wr_id, posted[i].wr.wr_id, "{}: receives in order", ctx);
                if wc.status == WcStatus::WrFlushErr {
                    flushing = true;
                    continue;
                }
                prop_assert!(
                    !flushing && wc.status == WcStatus::Success,
                    "{}: {:?}",
                    ctx,
                    wc
                );
                let p = consumers[i];
                prop_assert_eq!(
                    wc.byte_len as usize,
                    p.len,
                    "{}: length of message {}",
                    ctx,
                    i
                );
                prop_assert_eq!(wc.imm_data, p.wr.imm_data, "{}", ctx);
                if p.wr.opcode != WrOpcode::RdmaWriteWithImm {
                    let at = posted[i].off;
                    prop_assert!(
                        got_mem[at..at + p.len] == p.data[..],
                        "{}: bytes of message {}",
                        ctx,
                        i
                    );
                }
            }
            if state == Some(QpState::Err) && r.eps[side].srq.is_none() {
                // (Receives on an SRQ belong to the SRQ and outlive the QP's error, IBA
                // 10.2.9.5; the QP raises LastWqeReached instead.)
                prop_assert_eq!(
                    recvs.len(),
                    posted.len(),
                    "{}: ERR flushes every receive",
                    ctx
                );
            } else if state != Some(QpState::Err) {
                prop_assert!(!flushing, "{}: flushes without ERR", ctx);
            }
            // Memory: only targeted ranges change.
            let init = &r.init[side];
            let mut allowed = vec![false; BUF_LEN];
            for p in wrs {
                if matches!(
                    p.wr.opcode,
                    WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
                ) {
                    let n = if p.wr.opcode == WrOpcode::RdmaRead {
                        p.len
                    } else {
                        8
                    };
                    allowed[p.local_off..p.local_off + n]
                        .iter_mut()
                        .for_each(|a| *a = true);
                }
            }
            for p in &r.placed[1 - side] {
                if p.wr.opcode.is_atomic() {
                    allowed[p.slot_off..p.slot_off + 8]
                        .iter_mut()
                        .for_each(|a| *a = true);
                }
            }
            for rv in posted {
                allowed[rv.off..rv.off + rv.capacity]
                    .iter_mut()
                    .for_each(|a| *a = true);
            }
            for i in 0..BUF_LEN {
                if got_mem[i] == init[i] || allowed[i] {
                    continue;
                }
                let by_write = r.placed[1 - side].iter().any(|p| {
                    matches!(
                        p.wr.opcode,
                        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm
                    ) && (p.remote_off..p.remote_off + p.len).contains(&i)
                        && p.data[i - p.remote_off] == got_mem[i]
                });
                prop_assert!(
                    by_write,
                    "{}: byte {} changed outside every targeted range",
                    ctx,
                    i
                );
            }
        }
    }
    assert_guards(&pair, &runs)?;
    Ok(())
}
