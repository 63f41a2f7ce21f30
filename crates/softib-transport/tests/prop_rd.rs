//! Property test of Reliable Datagram over random workloads and random faults.
//!
//! Every case: 2..=4 RD QPs per side and 1..=3 EE contexts shared by all of them; side 0
//! posts a random mix of SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_READ and FETCH_AND_ADD
//! (4 bytes..=12 KiB, skewed small), each from a random QP over a random EEC to a random
//! QP of side 1, at a random path MTU, while the link drops, duplicates and reorders up to
//! 10% of the packets each way. Checks: every WR completes exactly once with success, at
//! the QP that posted it; per EEC, send completions and the messages' arrival at side 1
//! are in the order posted to that EEC; every SEND lands whole in one receive WQE of the
//! QP it named, with its length, immediate and source QP; every RDMA WRITE and READ moved
//! every byte; the counter ends at the sum of the adds, each fetched value distinct.
//!
//! Soak: `SOFTIB_SOAK_CASES=500 cargo test --release -p softib-transport --test prop_rd`.

mod rd_common;

use proptest::prelude::*;
use rd_common::*;
use softib_transport::harness::Faults;
use softib_transport::{Mtu, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};
use std::collections::BTreeSet;

const SLOT: usize = 16 * 1024;
const MAX_OPS: usize = 24;
const SRC: usize = 0; // side 0: sources of SEND / WRITE
const READ_DST: usize = MAX_OPS * SLOT; // side 0: where READs land
const FETCHED: usize = 2 * MAX_OPS * SLOT; // side 0: FETCH_AND_ADD results
const WRITE_DST: usize = 0; // side 1: WRITE targets
const READ_SRC: usize = MAX_OPS * SLOT; // side 1: READ sources
const RECV: usize = 2 * MAX_OPS * SLOT; // side 1: receive buffers
const COUNTER: usize = 3 * MAX_OPS * SLOT; // side 1: the FETCH_AND_ADD word
const BUF: usize = 3 * MAX_OPS * SLOT + 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    Read,
    FetchAdd,
}

#[derive(Clone, Copy, Debug)]
struct Op {
    kind: Kind,
    from: usize,
    eec: usize,
    to: usize,
    len: usize,
}

#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    qps: usize,
    eecs: usize,
    mtu: Mtu,
    faults: Faults,
    ops: Vec<Op>,
}

fn case_strategy(max_fault: f64) -> impl Strategy<Value = Case> {
    let op = (
        prop_oneof![
            3 => Just(Kind::Send),
            1 => Just(Kind::SendImm),
            2 => Just(Kind::Write),
            2 => Just(Kind::Read),
            1 => Just(Kind::FetchAdd),
        ],
        0usize..4,
        0usize..3,
        0usize..4,
        prop_oneof![3 => 4usize..=256, 2 => 257usize..=4096, 1 => 4097usize..=12 * 1024],
    )
        .prop_map(|(kind, from, eec, to, len)| Op {
            kind,
            from,
            eec,
            to,
            len: if kind == Kind::FetchAdd { 8 } else { len },
        });
    (
        any::<u64>(),
        2usize..=4,
        1usize..=3,
        prop_oneof![Just(Mtu::M256), Just(Mtu::M1024), Just(Mtu::M4096)],
        (0.0..=max_fault, 0.0..=max_fault, 0.0..=max_fault),
        prop::collection::vec(op, 1..=MAX_OPS),
    )
        .prop_map(
            |(seed, qps, eecs, mtu, (drop, duplicate, reorder), ops)| Case {
                seed,
                qps,
                eecs,
                mtu,
                faults: Faults {
                    drop,
                    duplicate,
                    reorder,
                    reorder_window: 200_000,
                    ..Faults::default()
                },
                ops: ops
                    .into_iter()
                    .map(|o| Op {
                        from: o.from % qps,
                        eec: o.eec % eecs,
                        to: o.to % qps,
                        ..o
                    })
                    .collect(),
            },
        )
}

/// The bytes of message `i`: its number first, so a receiver can tell whose they are.
fn pattern(i: usize, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|k| (i as u8).wrapping_mul(37).wrapping_add((k * 7) as u8))
        .collect();
    v[..4].copy_from_slice(&(i as u32).to_le_bytes());
    v
}

fn check(case: &Case) -> Result<(), TestCaseError> {
    let o = RdOptions {
        qps: case.qps,
        eecs: case.eecs,
        mtu: case.mtu,
        buf_len: BUF,
        timeout: 10,
        retry_cnt: 7,
        ..RdOptions::default()
    };
    let mut f = RdFabric::new(case.seed, o);
    f.pair.faults = case.faults;
    let mut counter_start = 1000u64;
    f.fill(1, COUNTER, &counter_start.to_le_bytes());
    let mut recv_slot = 0usize;
    for (i, op) in case.ops.iter().enumerate() {
        let data = pattern(i, op.len);
        let rkey = f.sides[1].keys.rkey;
        let mut wr = SendWr {
            wr_id: i as u64,
            flags: SendFlags::SIGNALED,
            rd: Some(f.dest(0, op.eec, op.to)),
            ..SendWr::default()
        };
        match op.kind {
            Kind::Send | Kind::SendImm => {
                f.fill(0, SRC + i * SLOT, &data);
                f.post_recv(1, op.to, recv_slot as u64, RECV + recv_slot * SLOT, SLOT);
                recv_slot += 1;
                wr.opcode = if op.kind == Kind::Send {
                    WrOpcode::Send
                } else {
                    wr.imm_data = Some(0xabc0_0000 | i as u32);
                    WrOpcode::SendWithImm
                };
                wr.sg_list = vec![f.sge(0, SRC + i * SLOT, op.len)];
            }
            Kind::Write => {
                f.fill(0, SRC + i * SLOT, &data);
                wr.opcode = WrOpcode::RdmaWrite;
                wr.sg_list = vec![f.sge(0, SRC + i * SLOT, op.len)];
                wr.remote_addr = f.va(1, WRITE_DST + i * SLOT);
                wr.rkey = rkey;
            }
            Kind::Read => {
                f.fill(1, READ_SRC + i * SLOT, &data);
                wr.opcode = WrOpcode::RdmaRead;
                wr.sg_list = vec![f.sge(0, READ_DST + i * SLOT, op.len)];
                wr.remote_addr = f.va(1, READ_SRC + i * SLOT);
                wr.rkey = rkey;
            }
            Kind::FetchAdd => {
                wr.opcode = WrOpcode::AtomicFetchAndAdd;
                wr.sg_list = vec![f.sge(0, FETCHED + i * 8, 8)];
                wr.remote_addr = f.va(1, COUNTER);
                wr.rkey = rkey;
                wr.compare_add = i as u64 + 1;
            }
        }
        f.post(0, op.from, wr);
    }
    prop_assert!(f.drive(), "the link went idle within a virtual minute");

    // Requester: exactly once, success, at the posting QP, in order per EEC.
    let sends = f.send_completions(0);
    prop_assert_eq!(
        sends.len(),
        case.ops.len(),
        "one completion per WR: {:?}",
        sends
    );
    let mut seen = BTreeSet::new();
    let mut last_per_eec = vec![None::<u64>; case.eecs];
    for wc in &sends {
        let op = case.ops[wc.wr_id as usize];
        prop_assert!(seen.insert(wc.wr_id), "WR {} completed twice", wc.wr_id);
        prop_assert_eq!(wc.status, WcStatus::Success, "{:?}", wc);
        prop_assert_eq!(wc.qp_num, f.sides[0].qps[op.from]);
        let want = match op.kind {
            Kind::Send | Kind::SendImm => WcOpcode::Send,
            Kind::Write => WcOpcode::RdmaWrite,
            Kind::Read => WcOpcode::RdmaRead,
            Kind::FetchAdd => WcOpcode::FetchAdd,
        };
        prop_assert_eq!(wc.opcode, want);
        if let Some(prev) = last_per_eec[op.eec] {
            prop_assert!(
                prev < wc.wr_id,
                "EEC {} completed {} after {}",
                op.eec,
                wc.wr_id,
                prev
            );
        }
        last_per_eec[op.eec] = Some(wc.wr_id);
    }
    // Responder: every SEND whole in one receive WQE of the QP it named, once, in EEC order.
    let recvs = f.recv_completions(1);
    let sends_posted: Vec<usize> = (0..case.ops.len())
        .filter(|&i| matches!(case.ops[i].kind, Kind::Send | Kind::SendImm))
        .collect();
    prop_assert_eq!(recvs.len(), sends_posted.len());
    let mut got = BTreeSet::new();
    let mut last_per_eec = vec![None::<usize>; case.eecs];
    for wc in &recvs {
        prop_assert_eq!(wc.status, WcStatus::Success, "{:?}", wc);
        let at = RECV + wc.wr_id as usize * SLOT;
        let head = f.read(1, at, 4);
        let i = u32::from_le_bytes(head.try_into().unwrap()) as usize;
        prop_assert!(
            i < case.ops.len(),
            "receive {} holds no message number",
            wc.wr_id
        );
        let op = case.ops[i];
        prop_assert!(got.insert(i), "message {} received twice", i);
        prop_assert_eq!(wc.byte_len as usize, op.len);
        prop_assert_eq!(
            wc.qp_num,
            f.sides[1].qps[op.to],
            "message {} at the wrong QP",
            i
        );
        prop_assert_eq!(wc.src_qp, f.sides[0].qps[op.from]);
        let imm = (op.kind == Kind::SendImm).then_some(0xabc0_0000 | i as u32);
        prop_assert_eq!(wc.imm_data, imm);
        prop_assert!(
            f.read(1, at, op.len) == pattern(i, op.len),
            "bytes of message {}",
            i
        );
        if let Some(prev) = last_per_eec[op.eec] {
            prop_assert!(prev < i, "EEC {} delivered {} after {}", op.eec, i, prev);
        }
        last_per_eec[op.eec] = Some(i);
    }
    // Memory: every WRITE and READ byte, the atomics' sum.
    let mut fetched = BTreeSet::new();
    for (i, op) in case.ops.iter().enumerate() {
        match op.kind {
            Kind::Write => prop_assert!(
                f.read(1, WRITE_DST + i * SLOT, op.len) == pattern(i, op.len),
                "WRITE {}",
                i
            ),
            Kind::Read => prop_assert!(
                f.read(0, READ_DST + i * SLOT, op.len) == pattern(i, op.len),
                "READ {}",
                i
            ),
            Kind::FetchAdd => {
                let v = u64::from_le_bytes(f.read(0, FETCHED + i * 8, 8).try_into().unwrap());
                prop_assert!(fetched.insert(v), "two adds fetched {}", v);
                counter_start += i as u64 + 1;
            }
            _ => {}
        }
    }
    let end = u64::from_le_bytes(f.read(1, COUNTER, 8).try_into().unwrap());
    prop_assert_eq!(end, counter_start, "every add applied once");
    Ok(())
}

fn config(default_cases: u32) -> ProptestConfig {
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
            proptest::test_runner::RngSeed::Fixed(0x5d19)
        },
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn rd_qps_sharing_eecs_under_loss_reordering_and_duplication_are_exact(
        case in case_strategy(0.10)
    ) {
        check(&case)?;
    }
}

proptest! {
    #![proptest_config(config(16))]

    /// Without faults, the same model.
    #[test]
    fn rd_qps_sharing_eecs_without_faults_are_exact(case in case_strategy(0.0)) {
        check(&case)?;
    }
}
