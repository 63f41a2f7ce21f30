//! Parse + ICRC verification of 4 KiB RoCEv2/IPv4 packets, packets per second on one core.
//!
//! `cargo bench -p softib-wire --bench rocev2`. Three receive paths:
//! - `frame`: a whole IPv4 packet (capture decoder / raw socket): IPv4 + UDP parse, ICRC,
//!   then the transport headers (PacketRepr);
//! - `datagram_exact`: a UDP payload from a socket with the IPv4 identification known;
//! - `datagram_recover`: the same with the identification unknown and recovered.
//!
//! Measured on the 2-core AMD EPYC development VM (AVX-512 VPCLMULQDQ, which crc32fast uses),
//! best of six 3 M-packet runs (criterion's wall-clock figures there swing 2x with the load
//! of other jobs): CRC-32 alone over the 4,128-byte UDP payload 77 ns (13 M/s, 53 GB/s);
//! `frame` 124 ns (8.1 M packets/s); `datagram_exact` 117 ns (8.5 M/s); `datagram_recover`
//! 137 ns (7.3 M/s). The CRC is about two thirds of the time, so the 10 M packets/s goal for
//! 4 KiB packets needs a CRC faster than crc32fast's; headers and parsing cost 40-60 ns.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use softib_wire::bth::BthRepr;
use softib_wire::reth::RethRepr;
use softib_wire::roce::{
    emit_ip, ip_buffer_len, verify_datagram, IpInfo, Ipv4IdentPolicy, Ipv4Info, RoceFrame, UdpInfo,
};
use softib_wire::{Opcode, PacketRepr};
use std::net::Ipv4Addr;

fn packet() -> (IpInfo, UdpInfo, Vec<u8>) {
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 31) as u8).collect();
    let mut repr = PacketRepr::new(BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: 0xFFFF,
        fecn: false,
        becn: false,
        dest_qp: 0x12,
        ack_req: true,
        psn: 77,
    });
    repr.reth = Some(RethRepr {
        va: 0x7f00_0000_1000,
        rkey: 0x1234,
        dma_len: 4096,
    });
    repr.payload = &payload;
    let mut transport = vec![0u8; repr.buffer_len()];
    repr.emit(&mut transport).unwrap();
    let ip = IpInfo::V4(Ipv4Info {
        ident: 0x4242,
        ..Ipv4Info::new(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
    });
    let udp = UdpInfo::for_qps(0x11, 0x12);
    let mut pkt = vec![0u8; ip_buffer_len(&ip, transport.len())];
    emit_ip(&ip, &udp, &transport, &mut pkt).unwrap();
    (ip, udp, pkt)
}

fn bench(c: &mut Criterion) {
    let (ip, udp, pkt) = packet();
    let datagram = &pkt[28..];
    let mut g = c.benchmark_group("rocev2_4k_ipv4");
    g.throughput(Throughput::Elements(1));
    g.bench_function("frame", |b| {
        b.iter(|| {
            let f = RoceFrame::parse_ip(black_box(&pkt)).unwrap();
            f.check_icrc().unwrap();
            black_box(PacketRepr::parse(f.transport).unwrap());
        })
    });
    g.bench_function("datagram_exact", |b| {
        b.iter(|| {
            let (t, _) =
                verify_datagram(&ip, &udp, black_box(datagram), Ipv4IdentPolicy::Exact).unwrap();
            black_box(PacketRepr::parse(t).unwrap());
        })
    });
    let IpInfo::V4(v4) = ip else { unreachable!() };
    let blind = IpInfo::V4(Ipv4Info { ident: 0, ..v4 });
    g.bench_function("datagram_recover", |b| {
        b.iter(|| {
            let (t, _) =
                verify_datagram(&blind, &udp, black_box(datagram), Ipv4IdentPolicy::Recover)
                    .unwrap();
            black_box(PacketRepr::parse(t).unwrap());
        })
    });
    // The pieces, to see where the time goes.
    let frame = RoceFrame::parse_ip(&pkt).unwrap();
    let h4: [u8; 20] = pkt[..20].try_into().unwrap();
    let hu: [u8; 8] = pkt[20..28].try_into().unwrap();
    g.bench_function("piece_icrc_only", |b| {
        b.iter(|| {
            black_box(softib_wire::icrc::icrc_rocev2_ipv4(
                &h4,
                &hu,
                black_box(frame.transport),
            ))
        })
    });
    g.bench_function("piece_packet_repr_only", |b| {
        b.iter(|| black_box(PacketRepr::parse(black_box(frame.transport)).unwrap()))
    });
    g.finish();
    let mut crc = c.benchmark_group("crc32fast_4k");
    crc.throughput(Throughput::Bytes(datagram.len() as u64));
    crc.bench_function("hash", |b| {
        b.iter(|| black_box(crc32fast::hash(black_box(datagram))))
    });
    crc.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
