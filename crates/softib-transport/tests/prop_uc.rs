//! Property tests of UC over random workloads (SEND, SEND_WITH_IMM, RDMA_WRITE,
//! RDMA_WRITE_WITH_IMM; 0..=1 MiB; path MTU 256..4096; 1..=3 QPs; SGE lists, inline,
//! unsignaled; SRQ or not).
//!
//! Without faults, UC must be exact (the model of `workload/mod.rs`). With faults (each
//! up to 10%), UC may lose messages, and on this link also see them duplicated or
//! reordered; `workload::check_unreliable` asserts what UC still guarantees.
//!
//! Soak: `SOFTIB_SOAK_CASES=2000 cargo test --release -p softib-transport --test prop_uc`.

mod workload;

use proptest::prelude::*;
use softib_transport::QpType;
use workload::*;

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn uc_random_workload_without_faults_is_exact(case in case_strategy(QpType::Uc, 3, 32, 0.0)) {
        check_exact(&case)?;
    }

    #[test]
    fn uc_random_workload_under_faults_keeps_uc_guarantees(
        case in case_strategy(QpType::Uc, 3, 32, 0.10)
    ) {
        check_unreliable(&case)?;
    }
}
