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
