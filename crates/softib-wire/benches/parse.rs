//! Wire-layer throughput: how many transport packets per second one core parses.
//!
//! `cargo bench -p softib-wire --bench parse` prints time per packet and packets/s
//! ("elem/s"). The packet is a 4 KiB RC RDMA WRITE Middle (BTH + 4096 bytes payload), the bulk
//! of any large RDMA transfer. Each case lives in the `parse` group so the encapsulation
//! layer can add its own cases (e.g. parse plus ICRC verification of a whole RoCEv2 frame)
//! next to it with the same throughput unit.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use softib_wire::{BthRepr, Opcode, PacketRepr};

/// BTH..pad of a 4 KiB RC RDMA WRITE Middle.
fn write_middle_4k() -> Vec<u8> {
    let payload: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    let mut repr = PacketRepr::new(BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_MIDDLE,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: false,
        dest_qp: 0x12,
        ack_req: false,
        psn: 0x00A4_2FEF,
    });
    repr.payload = &payload;
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).expect("emit");
    buf
}

fn parse(c: &mut Criterion) {
    let packet = write_middle_4k();
    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Elements(1));
    group.bench_function("transport/rc_rdma_write_middle_4k", |b| {
        b.iter(|| {
            let repr = PacketRepr::parse(black_box(&packet)).expect("parse");
            black_box(repr.payload.len())
        })
    });
    let mut out = vec![0u8; packet.len()];
    let repr = PacketRepr::parse(&packet).expect("parse");
    group.bench_function("transport/emit_headers_rc_rdma_write_middle_4k", |b| {
        b.iter(|| {
            black_box(&repr)
                .emit_headers(black_box(&mut out))
                .expect("emit")
        })
    });
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
