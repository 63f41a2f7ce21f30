//! Property: XRC is exactly-once and in order per initiator under faults (IBA Annex A14 runs
//! RC's reliability). Up to three initiator QPs on device 0 send random SENDs and RDMA
//! WRITEs through their own target QPs of one XRC domain into one shared XRC SRQ on
//! device 1, over a link that drops, duplicates and reorders. Checked: every WR completes
//! once, successfully, in posting order; the SRQ's CQ holds exactly one receive per SEND,
//! and per target QP they arrive in that initiator's order with its bytes; every WRITE
//! landed byte-exactly; nothing outside the written slots changed.
//!
//! Soak: `SOFTIB_SOAK_CASES=500 cargo test --release -p softib-transport --test prop_xrc`.

use proptest::prelude::*;
use softib_transport::harness::{empty_wc, Faults, Pair, QpOptions};
use softib_transport::{
    AccessFlags, MrKeys, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendWr, Sge, SrqAttr,
    VecMemory, WcOpcode, WcStatus, WrOpcode,
};

const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);
const BASE0: u64 = 0x1000_0000;
const BASE1: u64 = 0x2000_0000;
/// Bytes per message slot (source on device 0, WRITE target or receive buffer on device 1).
const SLOT: u64 = 8192;
const MAX_MSGS: usize = 10;
const MAX_QPS: usize = 3;

fn config(default_cases: u32) -> ProptestConfig {
    let soak = std::env::var("SOFTIB_SOAK_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    ProptestConfig {
        cases: soak.unwrap_or(default_cases),
        max_shrink_iters: 32,
        failure_persistence: None,
        rng_seed: if soak.is_some() {
            proptest::test_runner::RngSeed::Random
        } else {
            proptest::test_runner::RngSeed::Fixed(0x0a14_0a14)
        },
        ..ProptestConfig::default()
    }
}

#[derive(Clone, Debug)]
struct Msg {
    write: bool,
    len: u32,
}

fn bytes_of(qp: usize, k: usize, len: u32) -> Vec<u8> {
    (0..len as usize)
        .map(|i| (i as u8).wrapping_mul(7) ^ (qp as u8 * 41) ^ (k as u8).wrapping_mul(13) | 1)
        .collect()
}

fn run(seed: u64, plan: &[Vec<Msg>], drop: f64, dup: f64, reorder: f64) -> Result<(), String> {
    let mut pair = Pair::new(seed);
    pair.faults = Faults {
        drop,
        duplicate: dup,
        reorder,
        reorder_window: 5_000,
        ..Default::default()
    };
    let slots = (MAX_QPS * MAX_MSGS) as u64;
    let d0 = pair.dev(0);
    let pd0 = d0.alloc_pd();
    let cq0 = d0.create_cq(4096).unwrap();
    let mr0: MrKeys = d0
        .reg_mr(
            pd0,
            Box::new(VecMemory::zeroed((slots * SLOT) as usize)),
            BASE0,
            ALL,
        )
        .unwrap();
    let d1 = pair.dev(1);
    let pd1 = d1.alloc_pd();
    let xrcd = d1.open_xrcd();
    let srq_cq = d1.create_cq(4096).unwrap();
    let srq = d1
        .create_xrc_srq(
            pd1,
            xrcd,
            srq_cq,
            SrqAttr {
                max_wr: 64,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let srqn = d1.srq_num(srq).unwrap();
    // WRITE targets in slots [0, slots), receive buffers in slots [slots, 2 * slots).
    let mr1: MrKeys = d1
        .reg_mr(
            pd1,
            Box::new(VecMemory::zeroed((2 * slots * SLOT) as usize)),
            BASE1,
            ALL,
        )
        .unwrap();
    let sends: usize = plan.iter().flatten().filter(|m| !m.write).count();
    for r in 0..sends as u64 {
        pair.dev(1)
            .post_srq_recv(
                srq,
                &RecvWr {
                    wr_id: r,
                    sg_list: vec![Sge {
                        addr: BASE1 + (slots + r) * SLOT,
                        length: SLOT as u32,
                        lkey: mr1.lkey,
                    }],
                },
            )
            .unwrap();
    }
    let mut qps = Vec::new();
    for _ in plan {
        let init = QpInitAttr {
            qp_type: QpType::XrcSend,
            send_cq: cq0,
            recv_cq: cq0,
            srq: None,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        };
        let ini = pair.dev(0).create_qp(pd0, init).unwrap();
        let tgt = pair.dev(1).create_xrc_target_qp(xrcd).unwrap();
        let o = QpOptions {
            timeout: 8,
            access: ALL,
            ..QpOptions::default()
        };
        pair.bring_up([ini, tgt], &o);
        qps.push((ini, tgt));
    }
    for (q, msgs) in plan.iter().enumerate() {
        for (k, m) in msgs.iter().enumerate() {
            let slot = (q * MAX_MSGS + k) as u64;
            let data = bytes_of(q, k, m.len);
            pair.dev(0)
                .memory_mut(mr0.lkey)
                .unwrap()
                .write((slot * SLOT) as usize, &data);
            let wr = SendWr {
                wr_id: slot,
                opcode: if m.write {
                    WrOpcode::RdmaWrite
                } else {
                    WrOpcode::Send
                },
                sg_list: vec![Sge {
                    addr: BASE0 + slot * SLOT,
                    length: m.len,
                    lkey: mr0.lkey,
                }],
                flags: SendFlags::SIGNALED,
                remote_addr: BASE1 + slot * SLOT,
                rkey: mr1.rkey,
                xrc_remote_srqn: srqn,
                ..Default::default()
            };
            pair.dev(0)
                .post_send(0, qps[q].0, &wr)
                .map_err(|e| e.to_string())?;
        }
    }
    let total: usize = plan.iter().map(Vec::len).sum();
    let (mut sent, mut recvd) = (Vec::new(), Vec::new());
    pair.drive_until(10_000 * 1_000_000_000, |p| {
        let mut buf = [empty_wc(); 32];
        loop {
            let k = p.dev(0).poll_cq(cq0, &mut buf);
            sent.extend_from_slice(&buf[..k]);
            if k == 0 {
                break;
            }
        }
        loop {
            let k = p.dev(1).poll_cq(srq_cq, &mut buf);
            recvd.extend_from_slice(&buf[..k]);
            if k == 0 {
                break;
            }
        }
        sent.len() >= total && recvd.len() >= sends
    });
    pair.drive(10_000 * 1_000_000_000);
    if sent.len() != total || recvd.len() != sends {
        return Err(format!(
            "{} of {total} send completions, {} of {sends} receives",
            sent.len(),
            recvd.len()
        ));
    }
    // Per initiator: completions once, successful, in posting order.
    for (q, msgs) in plan.iter().enumerate() {
        let ids: Vec<u64> = sent
            .iter()
            .filter(|w| w.qp_num == qps[q].0)
            .map(|w| w.wr_id)
            .collect();
        let want: Vec<u64> = (0..msgs.len()).map(|k| (q * MAX_MSGS + k) as u64).collect();
        if ids != want {
            return Err(format!("initiator {q}: completions {ids:?}, want {want:?}"));
        }
    }
    if let Some(w) = sent.iter().find(|w| w.status != WcStatus::Success) {
        return Err(format!("failed send completion {w:?}"));
    }
    // Receives: per target QP in that initiator's SEND order, with its bytes.
    let mut next = vec![0usize; plan.len()];
    for r in &recvd {
        let q = qps
            .iter()
            .position(|&(_, t)| t == r.qp_num)
            .ok_or(format!("receive on an unknown QP {r:?}"))?;
        let k = (next[q]..plan[q].len())
            .find(|&k| !plan[q][k].write)
            .ok_or(format!("initiator {q}: more receives than SENDs"))?;
        next[q] = k + 1;
        let m = &plan[q][k];
        if (r.status, r.opcode, r.byte_len) != (WcStatus::Success, WcOpcode::Recv, m.len) {
            return Err(format!("receive {r:?} for message {k} of {q} ({m:?})"));
        }
        let mut got = vec![0u8; m.len as usize];
        let off = ((slots + r.wr_id) * SLOT) as usize;
        pair.dev(1).memory(mr1.lkey).unwrap().read(off, &mut got);
        if got != bytes_of(q, k, m.len) {
            return Err(format!(
                "receive {} of initiator {q} message {k}: wrong bytes",
                r.wr_id
            ));
        }
    }
    // WRITE slots hold their message, all other WRITE slots stay zero.
    for q in 0..MAX_QPS {
        for k in 0..MAX_MSGS {
            let slot = (q * MAX_MSGS + k) as u64;
            let mut got = vec![0u8; SLOT as usize];
            pair.dev(1)
                .memory(mr1.lkey)
                .unwrap()
                .read((slot * SLOT) as usize, &mut got);
            let mut want = vec![0u8; SLOT as usize];
            if let Some(m) = plan.get(q).and_then(|p| p.get(k)).filter(|m| m.write) {
                want[..m.len as usize].copy_from_slice(&bytes_of(q, k, m.len));
            }
            if got != want {
                return Err(format!("WRITE slot of initiator {q} message {k} differs"));
            }
        }
    }
    Ok(())
}

fn msg() -> impl Strategy<Value = Msg> {
    (any::<bool>(), 1u32..=5000).prop_map(|(write, len)| Msg { write, len })
}

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn xrc_delivers_exactly_once_and_in_order_per_initiator_under_faults(
        seed in any::<u64>(),
        plan in prop::collection::vec(prop::collection::vec(msg(), 1..=MAX_MSGS), 1..=MAX_QPS),
        drop in 0.0f64..0.15,
        dup in 0.0f64..0.05,
        reorder in 0.0f64..0.1,
    ) {
        if let Err(e) = run(seed, &plan, drop, dup, reorder) {
            return Err(TestCaseError::fail(e));
        }
    }
}
