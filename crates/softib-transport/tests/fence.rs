//! IBV_SEND_FENCE (IBA 10.8.3.3, the fence indicator): a fenced work request starts only
//! once every earlier RDMA READ and atomic of its send queue has completed; earlier SENDs
//! and WRITEs do not hold it. Checked on the wire (when the fenced request leaves against
//! when the earlier responses arrived) and in memory: an operation that uses what an
//! earlier READ or atomic brought back sees the new bytes only with the fence (field case 11).

mod common;
use common::*;
use softib_transport::harness::{Endpoint, Pair, QpOptions};
use softib_transport::{SendFlags, WcStatus, WrOpcode};

/// BTH opcodes (RC): FETCH_ADD, RDMA READ response only, ATOMIC ACKNOWLEDGE, ACKNOWLEDGE.
const FETCH_ADD: u8 = 0x14;
const READ_RESPONSE_ONLY: u8 = 0x10;
const ATOMIC_ACK: u8 = 0x12;
const ACK: u8 = 0x11;

fn pair() -> (Pair, Endpoint, Endpoint) {
    let mut pair = Pair::new(11);
    pair.trace = true;
    pair.latency = 1_000;
    let (a, b) = pair.connect(&QpOptions {
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..Default::default()
    });
    (pair, a, b)
}

fn fenced(mut w: softib_transport::SendWr, fence: bool) -> softib_transport::SendWr {
    if fence {
        w.flags |= SendFlags::FENCE;
    }
    w
}

fn fetch_add(id: u64, a: &Endpoint, b: &Endpoint, fence: bool) -> softib_transport::SendWr {
    let mut w = wr(WrOpcode::AtomicFetchAndAdd, id, a, 0x800, b, 0x800, 8);
    w.compare_add = 1;
    fenced(w, fence)
}

/// Send time of the first packet side `from` sent with `opcode`.
fn sent_at(pair: &Pair, from: usize, opcode: u8) -> u64 {
    pair.trace_log
        .iter()
        .find(|t| t.from == from && t.opcode == opcode)
        .unwrap_or_else(|| panic!("no opcode {opcode:#x} from side {from}"))
        .time
}

/// Runs READ (or FetchAdd, with `atomic_first`) then FetchAdd, fenced or not; returns
/// (when the FetchAdd request left, when the earlier response left side 1).
fn order(fence: bool, atomic_first: bool) -> (u64, u64) {
    let (mut pair, a, b) = pair();
    let first = if atomic_first {
        let mut w = wr(WrOpcode::AtomicFetchAndAdd, 1, &a, 0x900, &b, 0x900, 8);
        w.compare_add = 1;
        w
    } else {
        wr(WrOpcode::RdmaRead, 1, &a, 0, &b, 0, 64)
    };
    pair.dev(0).post_send(0, a.qpn, &first).unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &fetch_add(2, &a, &b, fence))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 2, 10 * SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let fa = pair
        .trace_log
        .iter()
        .rfind(|t| t.from == 0 && t.opcode == FETCH_ADD)
        .expect("the fenced FetchAdd")
        .time;
    let response = sent_at(
        &pair,
        1,
        if atomic_first {
            ATOMIC_ACK
        } else {
            READ_RESPONSE_ONLY
        },
    );
    (fa, response)
}

#[test]
fn a_fenced_atomic_leaves_only_after_the_earlier_read_response_arrived() {
    let (fa, resp) = order(true, false);
    // The response left side 1 at `resp` and took the link latency to arrive.
    assert!(
        fa >= resp + 1_000,
        "FetchAdd at {fa}, READ response at {resp}"
    );
    let (fa, resp) = order(false, false);
    assert!(
        fa < resp,
        "unfenced: FetchAdd at {fa} right behind the READ, response at {resp}"
    );
}

#[test]
fn a_fenced_atomic_waits_for_an_earlier_atomic_too() {
    let (fa, resp) = order(true, true);
    assert!(
        fa >= resp + 1_000,
        "FetchAdd at {fa}, first atomic's response at {resp}"
    );
    let (fa, resp) = order(false, true);
    assert!(fa < resp);
}

#[test]
fn a_fence_does_not_wait_for_earlier_writes() {
    let (mut pair, a, b) = pair();
    pair.dev(0)
        .post_send(
            0,
            a.qpn,
            &wr(WrOpcode::RdmaWrite, 1, &a, 0, &b, 0, 16 * 1024),
        )
        .unwrap();
    pair.dev(0)
        .post_send(0, a.qpn, &fetch_add(2, &a, &b, true))
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 2, 10 * SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let fa = sent_at(&pair, 0, FETCH_ADD);
    let ack = sent_at(&pair, 1, ACK);
    assert!(
        fa < ack + 1_000,
        "FetchAdd at {fa} waited for the WRITE's ACK at {ack}"
    );
}

/// READ remote bytes into a local buffer, then WRITE that buffer elsewhere remotely (the
/// read-and-forward pattern): returns what the WRITE delivered.
fn read_then_forward(fence: bool) -> Vec<u8> {
    let (mut pair, a, b) = pair();
    pair.fill(1, &b, 0, &[0x5a; 64]);
    pair.fill(0, &a, 0, &[0x11; 64]);
    pair.dev(0)
        .post_send(0, a.qpn, &wr(WrOpcode::RdmaRead, 1, &a, 0, &b, 0, 64))
        .unwrap();
    pair.dev(0)
        .post_send(
            0,
            a.qpn,
            &fenced(wr(WrOpcode::RdmaWrite, 2, &a, 0, &b, 0x400, 64), fence),
        )
        .unwrap();
    let wcs = wait_send(&mut pair, &a, 2, 10 * SEC);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    pair.read(1, &b, 0x400, 64)
}

#[test]
fn without_a_fence_a_write_of_read_data_sends_the_old_bytes() {
    assert_eq!(read_then_forward(false), vec![0x11; 64]);
    assert_eq!(read_then_forward(true), vec![0x5a; 64]);
}
