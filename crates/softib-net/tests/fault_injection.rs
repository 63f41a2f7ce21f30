//! RC traffic between two devices on loopback through the seeded send-path fault injector
//! on both sides (3 % drop, 1 % duplication, 20 % reordering, 0.5 % corruption): every
//! operation completes with memory byte-exact, and the counters show the recovery (ICRC
//! drops from the corruptions, retransmissions, NAKs, duplicates).
//!
//! `SOFTIB_FAULT_SPEC` (e.g. `drop=0.05`) and `SOFTIB_MAX_RD_ATOMIC` (default 16) override
//! the fault mix and the READ/atomic depth.

mod common;

use common::{pattern, side, Side};
use softib_net::inject::FaultSpec;
use softib_transport::{QpType, RecvWr, SendFlags, SendWr, Sge, WrOpcode};

fn sge(s: &Side, offset: u64, len: u32) -> Vec<Sge> {
    vec![Sge {
        addr: s.mr.addr + offset,
        length: len,
        lkey: s.mr.keys.lkey,
    }]
}

#[test]
fn rc_completes_byte_exact_through_loss_duplication_reordering_and_corruption() {
    const MIB: usize = 1 << 20;
    let spec = |seed| -> FaultSpec {
        let base = std::env::var("SOFTIB_FAULT_SPEC")
            .unwrap_or("drop=0.03,dup=0.01,reorder=0.2,corrupt=0.005".into());
        format!("{base},seed={seed}").parse().unwrap()
    };
    let a = side("127.0.0.1:0", QpType::Rc, 16 * MIB, |c| {
        c.inject = Some(spec(1))
    });
    let b = side("127.0.0.2:0", QpType::Rc, 16 * MIB, |c| {
        c.inject = Some(spec(2))
    });
    let (ea, eb) = (a.endpoint(), b.endpoint());
    // ACK timeout 4.096 us x 2^14 = 67 ms: long enough that a device thread descheduled on
    // a loaded machine does not look like loss 8 times in a row (retry_cnt is 7).
    // 16 READs/atomics outstanding: re-sent READ requests must not count against the
    // responder's max_dest_rd_atomic (a false "invalid request" NAK would fail them).
    let max_rd_atomic = std::env::var("SOFTIB_MAX_RD_ATOMIC").map_or(16, |v| v.parse().unwrap());
    let o = softib_net::context::ConnectOptions {
        timeout: 14,
        max_rd_atomic,
        ..Default::default()
    };
    a.ctx.connect(a.qpn, QpType::Rc, a.psn, &eb, &o).unwrap();
    b.ctx.connect(b.qpn, QpType::Rc, b.psn, &ea, &o).unwrap();

    let data = pattern(7, 8 * MIB);
    a.ctx.write_mr(&a.mr, 0, &data).unwrap();
    let mut wrs = Vec::new();
    for i in 0..8u64 {
        wrs.push(SendWr {
            wr_id: i,
            opcode: WrOpcode::RdmaWrite,
            flags: SendFlags::SIGNALED,
            sg_list: sge(&a, i * MIB as u64, MIB as u32),
            remote_addr: b.mr.addr + i * MIB as u64,
            rkey: b.mr.keys.rkey,
            ..Default::default()
        });
    }
    a.ctx.post_send(a.qpn, &wrs).unwrap();
    a.completions(8, 120);
    assert!(
        b.read(0, 8 * MIB) == data,
        "RDMA WRITE data differs at the responder"
    );

    // READ 4 MiB back: one 2 MiB READ and two 1 MiB READs, all outstanding at once (each
    // read response placed in order is forward progress, so retry_cnt restarts with it).
    let pieces = [(0u64, 2 * MIB as u32), (2, MIB as u32), (3, MIB as u32)];
    let reads: Vec<SendWr> = pieces
        .iter()
        .enumerate()
        .map(|(i, &(mib, len))| SendWr {
            wr_id: 10 + i as u64,
            opcode: WrOpcode::RdmaRead,
            flags: SendFlags::SIGNALED,
            sg_list: sge(&a, 8 * MIB as u64 + mib * MIB as u64, len),
            remote_addr: b.mr.addr + MIB as u64 + mib * MIB as u64,
            rkey: b.mr.keys.rkey,
            ..Default::default()
        })
        .collect();
    a.ctx.post_send(a.qpn, &reads).unwrap();
    a.completions(reads.len(), 120);
    assert!(
        a.read(8 * MIB, 4 * MIB) == data[MIB..5 * MIB],
        "RDMA READ data differs"
    );

    let recvs: Vec<RecvWr> = (0..16)
        .map(|i| RecvWr {
            wr_id: 100 + i,
            sg_list: sge(&b, 12 * MIB as u64 + i * 65536, 65536),
        })
        .collect();
    b.ctx.post_recv(b.qpn, &recvs).unwrap();
    let sends: Vec<SendWr> = (0..16u64)
        .map(|i| SendWr {
            wr_id: 20 + i,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: sge(&a, i * 50_000, 50_000),
            ..Default::default()
        })
        .collect();
    a.ctx.post_send(a.qpn, &sends).unwrap();
    a.completions(16, 120);
    let rwcs = b.completions(16, 120);
    for (i, wc) in rwcs.iter().enumerate() {
        assert_eq!(
            (wc.wr_id, wc.byte_len),
            (100 + i as u64, 50_000),
            "receives complete in order"
        );
        let off = 12 * MIB + i * 65536;
        assert!(
            b.read(off, 50_000) == data[i * 50_000..(i + 1) * 50_000],
            "SEND {i} data differs"
        );
    }

    b.ctx
        .write_mr(&b.mr, 16 * MIB - 8, &0u64.to_le_bytes())
        .unwrap();
    let adds: Vec<SendWr> = (0..64u64)
        .map(|i| SendWr {
            wr_id: 200 + i,
            opcode: WrOpcode::AtomicFetchAndAdd,
            flags: SendFlags::SIGNALED,
            sg_list: sge(&a, 15 * MIB as u64 + i * 8, 8),
            remote_addr: b.mr.addr + 16 * MIB as u64 - 8,
            rkey: b.mr.keys.rkey,
            compare_add: 1,
            ..Default::default()
        })
        .collect();
    a.ctx.post_send(a.qpn, &adds).unwrap();
    a.completions(64, 120);
    assert_eq!(
        b.read(16 * MIB - 8, 8),
        64u64.to_le_bytes(),
        "each FETCH_AND_ADD executed exactly once"
    );
    let mut originals: Vec<u64> = (0..64)
        .map(|i| u64::from_le_bytes(a.read(15 * MIB + i * 8, 8).try_into().unwrap()))
        .collect();
    originals.sort_unstable();
    assert_eq!(originals, (0..64).collect::<Vec<u64>>());

    let (da, xa) = a.ctx.counters();
    let (db, xb) = b.ctx.counters();
    let report = format!("A {da:?}\nA {xa:?}\nB {db:?}\nB {xb:?}");
    assert!(
        xa.faults.dropped > 0 && xa.faults.duplicated > 0 && xa.faults.reordered > 0,
        "{report}"
    );
    assert!(xa.faults.corrupted + xb.faults.corrupted > 0, "{report}");
    assert_eq!(
        da.icrc_drops + db.icrc_drops,
        xa.rx.icrc_errors + xb.rx.icrc_errors,
        "driver ICRC errors reach the engine's counters"
    );
    assert!(
        da.icrc_drops + db.icrc_drops > 0,
        "corruptions were caught by the ICRC: {report}"
    );
    assert!(da.qp.retransmitted_packets > 0, "{report}");
    assert!(
        db.qp.duplicates_received + da.qp.duplicates_received > 0,
        "{report}"
    );
    assert!(db.qp.seq_naks_sent > 0, "{report}");
}
