//! A burst of 16 FETCH_AND_ADDs that arrives in one receive batch (one UDP GSO group sent
//! by one post, one GRO slot received) is answered in parts: the responder sends the first
//! 8 ATOMIC Acknowledges before it executes the other 8 (driver counter
//! `rx_answered_in_parts`), so the requester can start on them; every result is exact
//! (each operation saw a distinct previous value, the word ends at the count).

mod common;

use common::rc_pair;
use softib_transport::{SendFlags, SendWr, Sge, WcStatus, WrOpcode};

const BURST: u64 = 16;

#[test]
fn a_burst_of_atomics_is_answered_in_parts_with_exact_results() {
    let (a, b) = rc_pair("127.0.0.1:0", "127.0.0.2:0", 1 << 16);
    let (_, b0) = b.ctx.counters();
    let wrs: Vec<SendWr> = (0..BURST)
        .map(|i| SendWr {
            wr_id: i,
            opcode: WrOpcode::AtomicFetchAndAdd,
            flags: SendFlags::SIGNALED,
            sg_list: vec![Sge {
                addr: a.mr.addr + 8 * i,
                length: 8,
                lkey: a.mr.keys.lkey,
            }],
            remote_addr: b.mr.addr,
            rkey: b.mr.keys.rkey,
            compare_add: 1,
            ..Default::default()
        })
        .collect();
    // One post: one send batch, so the responder receives the burst at once.
    a.ctx.post_send(a.qpn, &wrs).unwrap();
    let wcs = a.completions(BURST as usize, 10);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let mut seen: Vec<u64> = (0..BURST)
        .map(|i| u64::from_le_bytes(a.read(8 * i as usize, 8).try_into().unwrap()))
        .collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..BURST).collect::<Vec<_>>(),
        "each saw a distinct value"
    );
    assert_eq!(
        u64::from_le_bytes(b.read(0, 8).try_into().unwrap()),
        BURST,
        "every add landed once"
    );
    let (_, b1) = b.ctx.counters();
    let (_, a1) = a.ctx.counters();
    // The burst arrives as one GRO slot whenever the sender's GSO group went out whole
    // (always on loopback; with GSO off it may still come in one recvmmsg).
    assert!(
        a1.socket.gso && b1.socket.gro,
        "loopback offers GSO and GRO"
    );
    assert!(
        b1.rx_answered_in_parts - b0.rx_answered_in_parts >= 1,
        "the responder answered the burst in one piece: {b1:?}"
    );
}
