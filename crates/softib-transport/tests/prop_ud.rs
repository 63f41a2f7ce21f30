//! Property tests of UD over random workloads (SEND and SEND_WITH_IMM, 0..=4096 bytes,
//! 1..=3 QP pairs, SGE lists, inline, unsignaled, solicited).
//!
//! Without faults, UD must be exact, including the 40-byte network header area in front of
//! every receive (for RoCEv2 over IPv4: 20 zero bytes and the IPv4 header, as Linux
//! delivers it). With faults (each up to 10%), messages may be lost, duplicated or
//! reordered; `workload::check_unreliable` asserts what UD still guarantees.
//!
//! Soak: `SOFTIB_SOAK_CASES=2000 cargo test --release -p softib-transport --test prop_ud`.

mod workload;

use proptest::prelude::*;
use softib_transport::QpType;
use workload::*;

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn ud_random_workload_without_faults_is_exact(case in case_strategy(QpType::Ud, 3, 32, 0.0)) {
        check_exact(&case)?;
    }

    #[test]
    fn ud_random_workload_under_faults_keeps_ud_guarantees(
        case in case_strategy(QpType::Ud, 3, 32, 0.10)
    ) {
        check_unreliable(&case)?;
    }
}
