//! Random and mutated transport packets against QPs in every state: never a panic, never a
//! write outside a registered region (the fixture's regions are the only memory there is).

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softib_transport::harness::fixture_all_states;
use softib_transport::RxMeta;
use softib_wire::Opcode;

#[test]
fn random_packets_never_panic_the_engine() {
    let (mut dev, qps) = fixture_all_states(7);
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let mut buf = vec![0u8; 8192];
    let mut pkt = vec![0u8; 4200];
    let ops = Opcode::ALL;
    let mut now = 0u64;
    for i in 0..60_000u32 {
        let q = qps[rng.next_u32() as usize % qps.len()];
        let (qpn, rkey, addr) = (q.qpn, q.rkey, q.addr);
        let op = ops[rng.next_u32() as usize % ops.len()];
        let hdr = 12 + op.ext_headers_len();
        let payload = if op.has_payload() {
            (rng.next_u32() % 4200) as usize
        } else {
            0
        };
        let len = ((hdr + payload).div_ceil(4) * 4).min(pkt.len());
        rng.fill_bytes(&mut pkt[..len]);
        pkt[0] = op.value();
        if rng.next_u32() % 4 != 0 {
            // Mostly plausible: right P_Key, the QPN, pad count matching, small PSNs.
            pkt[1] = (pkt[1] & 0xC0) | (((len - (hdr + payload).min(len)) as u8 & 3) << 4);
            pkt[2] = 0xFF;
            pkt[3] = 0xFF;
            pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
            let psn = rng.next_u32() % 8;
            pkt[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
            if op.has_reth() || op.has_atomic_eth() {
                let at = 12 + if op.has_deth() { 8 } else { 0 };
                let va = addr + (rng.next_u32() % 70_000) as u64;
                pkt[at..at + 8].copy_from_slice(&va.to_be_bytes());
                pkt[at + 8..at + 12].copy_from_slice(&rkey.to_be_bytes());
            }
        }
        let meta = RxMeta {
            ecn_ce: i % 7 == 0,
            ..Default::default()
        };
        dev.handle_packet(now, &meta, &pkt[..len]);
        if i % 16 == 0 {
            while dev.poll_transmit(now, &mut buf).is_some() {}
            now += 1_000_000;
            dev.handle_timeout(now);
        }
    }
    let c = dev.counters();
    assert!(c.malformed_drops > 0 && c.qp.packets_received > 0);
}
