//! The per-packet paths allocate nothing once warm: an RC SEND ping-pong (inline 64-byte
//! SENDs, each answered by an ACK) and an RC WRITE stream run through the pair harness
//! while a counting global allocator counts this thread's heap operations. The count inside
//! `Device::handle_packet` must be zero, and the count of the whole exchange (posts,
//! transmits, receives, completions) must not grow with the number of messages.
//!
//! The allocator is the only `unsafe` here: `GlobalAlloc` is an unsafe trait, and the
//! counting wrapper passes every call straight to the system allocator (the engine crate
//! itself keeps `#![forbid(unsafe_code)]`).

use softib_transport::harness::{empty_wc, Endpoint, Pair, QpOptions};
use softib_transport::{RecvWr, RxGrh, RxMeta, SendFlags, SendWr, Sge, WcStatus, WrOpcode};

/// The counting global allocator: the only `unsafe` of this test, kept in one module.
mod counting_allocator {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// Counts allocations, reallocations and frees made by threads that switched counting on.
    struct Counting;

    thread_local! {
        static COUNTING: Cell<bool> = const { Cell::new(false) };
        static HEAP_OPS: Cell<u64> = const { Cell::new(0) };
    }

    fn count() {
        // `try_with`: the allocator may run while this thread's locals are torn down.
        let _ = COUNTING.try_with(|on| {
            if on.get() {
                let _ = HEAP_OPS.try_with(|n| n.set(n.get() + 1));
            }
        });
    }

    // SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
    // wrapper keeps all of GlobalAlloc's contracts that `System` keeps; the counting touches
    // only const-initialised thread-locals, which never allocate.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: the caller's arguments, unchanged, under the contract it was called with.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            count();
            // SAFETY: the caller's arguments, unchanged, under the contract it was called with.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: the caller's arguments, unchanged, under the contract it was called with.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count();
            // SAFETY: the caller's arguments, unchanged, under the contract it was called with.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    /// Heap operations `f` made on this thread (calls may nest: the count only grows).
    pub fn heap_ops(f: impl FnOnce()) -> u64 {
        let was_on = COUNTING.with(|on| on.replace(true));
        let before = HEAP_OPS.with(Cell::get);
        f();
        COUNTING.with(|on| on.set(was_on));
        HEAP_OPS.with(Cell::get) - before
    }
}
use counting_allocator::heap_ops;

const SEC: u64 = 1_000_000_000;

/// Moves every packet of the pair by hand (the harness's own step also runs timers and
/// delivery; here each packet goes through `handle_packet` under the counter), returning
/// the heap operations counted inside `handle_packet` alone.
fn exchange(pair: &mut Pair, buf: &mut [u8]) -> u64 {
    let mut in_handle = 0;
    loop {
        let mut moved = false;
        for side in 0..2 {
            let now = pair.now;
            while let Some(t) = pair.dev(side).poll_transmit(now, buf) {
                moved = true;
                // What the harness's link delivers: the sender's LID, and its GID when
                // the path is routed.
                let src = pair.device(side).config();
                let meta = RxMeta {
                    slid: src.lid,
                    sl: t.path.sl,
                    grh: t.path.grh.map(|g| RxGrh {
                        sgid: src.gid,
                        dgid: g.dgid,
                        traffic_class: g.traffic_class,
                        flow_label: g.flow_label,
                        hop_limit: g.hop_limit,
                    }),
                    ecn_ce: false,
                };
                let len = t.len;
                let peer = pair.dev(1 - side);
                in_handle += heap_ops(|| peer.handle_packet(now, &meta, &buf[..len]));
            }
        }
        pair.now += 1_000;
        if !moved {
            return in_handle;
        }
    }
}

/// One inline 64-byte SEND from `a` to `b` and its ACK; `b`'s receive is re-posted and both
/// completions are taken. Returns the heap operations inside `handle_packet`.
fn send_round(pair: &mut Pair, a: &Endpoint, b: &Endpoint, wrs: &(SendWr, RecvWr)) -> u64 {
    let (send, recv) = wrs;
    pair.dev(1).post_recv(b.qpn, recv).expect("post_recv");
    let now = pair.now;
    pair.dev(0).post_send(now, a.qpn, send).expect("post_send");
    let mut buf = [0u8; 4200];
    let in_handle = exchange(pair, &mut buf);
    let mut wcs = [empty_wc(); 4];
    let got = pair.dev(0).poll_cq(a.send_cq, &mut wcs);
    assert_eq!(got, 1, "one send completion per round");
    assert_eq!(wcs[0].status, WcStatus::Success);
    let got = pair.dev(1).poll_cq(b.recv_cq, &mut wcs);
    assert_eq!(got, 1, "one receive completion per round");
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].byte_len, 64);
    in_handle
}

fn send_wrs(a: &Endpoint, b: &Endpoint) -> (SendWr, RecvWr) {
    let send = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        sg_list: vec![Sge {
            addr: a.addr,
            length: 64,
            lkey: a.keys.lkey,
        }],
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..Default::default()
    };
    let recv = RecvWr {
        wr_id: 2,
        sg_list: vec![Sge {
            addr: b.addr,
            length: 4096,
            lkey: b.keys.lkey,
        }],
    };
    (send, recv)
}

#[test]
fn a_send_ping_pong_allocates_nothing_per_packet_once_warm() {
    let mut pair = Pair::new(7);
    let (a, b) = pair.connect(&QpOptions::default());
    let wrs = send_wrs(&a, &b);
    // Warm-up: queues, pools and the CQs reach their working size (a few containers
    // still double once within the first thousand rounds).
    for _ in 0..1_000 {
        send_round(&mut pair, &a, &b, &wrs);
    }
    let mut in_handle = 0;
    let short = heap_ops(|| {
        for _ in 0..100 {
            in_handle += send_round(&mut pair, &a, &b, &wrs);
        }
    });
    let long = heap_ops(|| {
        for _ in 0..1_000 {
            in_handle += send_round(&mut pair, &a, &b, &wrs);
        }
    });
    assert_eq!(
        in_handle, 0,
        "handle_packet reached the allocator {in_handle} times in 1,100 SENDs and their ACKs"
    );
    assert_eq!(
        (short, long),
        (0, 0),
        "heap operations of 100 and 1,000 warm ping-pong rounds (posts, transmits, receives, \
         completions)"
    );
}

#[test]
fn a_write_stream_allocates_nothing_per_packet_once_warm() {
    let mut pair = Pair::new(8);
    let (a, b) = pair.connect(&QpOptions::default());
    // 8 KiB WRITEs at MTU 1024: 8 packets each, 16 outstanding.
    let wr = SendWr {
        wr_id: 3,
        opcode: WrOpcode::RdmaWrite,
        sg_list: vec![Sge {
            addr: a.addr,
            length: 8192,
            lkey: a.keys.lkey,
        }],
        flags: SendFlags::SIGNALED,
        remote_addr: b.addr,
        rkey: b.keys.rkey,
        ..Default::default()
    };
    let mut buf = [0u8; 4200];
    let mut wcs = [empty_wc(); 32];
    let mut round = |pair: &mut Pair| -> u64 {
        let now = pair.now;
        for _ in 0..16 {
            pair.dev(0).post_send(now, a.qpn, &wr).expect("post_send");
        }
        let in_handle = exchange(pair, &mut buf);
        let got = pair.dev(0).poll_cq(a.send_cq, &mut wcs);
        assert_eq!(got, 16, "every WRITE completed");
        assert!(wcs[..got].iter().all(|w| w.status == WcStatus::Success));
        in_handle
    };
    for _ in 0..100 {
        round(&mut pair);
    }
    let mut in_handle = 0;
    let short = heap_ops(|| {
        for _ in 0..10 {
            in_handle += round(&mut pair);
        }
    });
    let long = heap_ops(|| {
        for _ in 0..100 {
            in_handle += round(&mut pair);
        }
    });
    assert_eq!(in_handle, 0, "handle_packet reached the allocator");
    assert_eq!(
        (short, long),
        (0, 0),
        "heap operations of 10 and 100 rounds"
    );
    assert!(pair.now < 10 * SEC, "no retransmission timeout was needed");
}
