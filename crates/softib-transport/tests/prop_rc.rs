//! Property tests of RC over random workloads and random faults.
//!
//! Every case: 1..=3 RC QP pairs, both sides posting a random mix of every RC opcode
//! (SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ,
//! ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD), sizes 0..=1 MiB (skewed small), 1..=4 SGEs,
//! inline / fence / solicited / unsignaled at random, a random path MTU (256..4096),
//! max_rd_atomic 1..=8, ACK timeout 12..=16, receives from the QP or an SRQ, posted up
//! front or late (RNR NAKs), and link faults each drawn up to 10% (drop, duplicate, reorder,
//! corrupt caught by the ICRC, delay). The reference model is in `workload/mod.rs`.
//!
//! Soak: `SOFTIB_SOAK_CASES=2000 cargo test --release -p softib-transport --test prop_rc`
//! runs 2000 cases with a random seed (the default is a quick run with a fixed seed).
//! A failure prints the minimal case; replay it by pasting it into a unit test that calls
//! `workload::check_exact`.

mod workload;

use proptest::prelude::*;
use softib_transport::QpType;
use workload::*;

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn rc_random_workload_under_faults_is_exact(case in case_strategy(QpType::Rc, 3, 24, 0.10)) {
        check_exact(&case)?;
    }
}

proptest! {
    #![proptest_config(config(16))]

    /// No faults at all: the same model, and many more ops per case.
    #[test]
    fn rc_random_workload_without_faults_is_exact(
        case in case_strategy(QpType::Rc, 4, 48, 0.0)
    ) {
        check_exact(&case)?;
    }
}

proptest! {
    #![proptest_config(config(16))]

    /// Heavy, unbounded loss (up to 30% dropped plus up to 10% corrupted, in both
    /// directions) and a small retry_cnt (0..=3): QPs may fail with "transport retry counter
    /// exceeded"; every WR still completes exactly once with a legal status, and nothing
    /// outside the targeted ranges changes (`workload::check_statuses`).
    #[test]
    fn rc_under_heavy_loss_every_wr_completes_once_with_a_legal_status(
        case in (case_strategy(QpType::Rc, 2, 16, 0.10), 0.0..=0.30f64, 0u8..=3)
            .prop_map(|(mut c, drop, retry_cnt)| {
                c.faults.drop = drop;
                c.retry_cnt = retry_cnt;
                c.bounded_loss = false;
                c.timeout = 10;
                c
            })
    ) {
        check_statuses(&case)?;
    }
}
