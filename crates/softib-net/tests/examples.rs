//! The verbs examples as tests: each example's loopback run (both sides in this process, on
//! 127.0.0.1 and 127.0.0.2 with ephemeral ports) checks every byte and completion it moves.
//! The examples are included as modules rather than run as `harness = false` test targets,
//! because such a target would read libtest's arguments (a name filter, `--list`,
//! `--exact`) as its own command line, and `cargo test --workspace FILTER` would fail.
// Each example declares `examples/common` as its own module, as it does when built alone.
#![allow(clippy::duplicate_mod)]

#[allow(dead_code)]
#[path = "../examples/rc_pingpong.rs"]
mod rc_pingpong;

#[allow(dead_code)]
#[path = "../examples/rdma_roundtrip.rs"]
mod rdma_roundtrip;

#[allow(dead_code)]
#[path = "../examples/ud_send.rs"]
mod ud_send;

#[allow(dead_code)]
#[path = "../examples/cm_connect.rs"]
mod cm_connect;

#[test]
fn rc_pingpong_example_round_trips_checked_messages() {
    rc_pingpong::loopback();
}

#[test]
fn rdma_roundtrip_example_writes_reads_and_runs_both_atomics() {
    rdma_roundtrip::loopback();
}

#[test]
fn ud_send_example_delivers_checked_datagrams() {
    ud_send::loopback();
}

#[test]
fn cm_connect_example_connects_through_the_cm_and_checks_every_message() {
    cm_connect::loopback();
}
