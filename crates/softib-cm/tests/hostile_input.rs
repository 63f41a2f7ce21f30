//! Hostile input never panics the CM and never grows its state past the configured bounds:
//! random bytes behind valid and invalid CM headers, for every attribute ID, from many
//! peers, mixed with timer firings.

use proptest::prelude::*;
use softib_cm::{Cm, CmConfig};
use softib_wire::mad::MadHeader;

const SERVICE: u64 = 0x0106_4853;

fn mad(attr: u16, version: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    let mut h = MadHeader::cm_send(attr, 42);
    h.class_version = version;
    h.emit(&mut m).unwrap();
    let n = body.len().min(232);
    m[24..24 + n].copy_from_slice(&body[..n]);
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_mads_never_panic_and_state_stays_bounded(
        inputs in prop::collection::vec(
            (0x000Fu16..0x001C, prop::sample::select(vec![2u8, 2, 2, 1]), prop::collection::vec(any::<u8>(), 0..232), 0u8..8, any::<bool>()),
            1..200,
        )
    ) {
        let gid = |p: u8| { let mut g = [0u8; 16]; g[15] = p; g };
        let mut cfg = CmConfig::new(gid(0xEE), 1);
        cfg.max_half_open = 8;
        cfg.max_connections = 16;
        cfg.max_pending_transmits = 32;
        cfg.max_pending_events = 32;
        let mut cm = Cm::new(cfg);
        cm.listen(SERVICE).unwrap();
        let mut now = 0u64;
        for (attr, version, mut body, peer, truncate) in inputs {
            // Point REQs at the listened service often enough to reach the REQ path.
            if attr == 0x0010 && body.len() >= 16 {
                body[8..16].copy_from_slice(&SERVICE.to_be_bytes());
            }
            let m = mad(attr, version, &body);
            let len = if truncate { m.len() / 2 } else { m.len() };
            cm.handle_mad(now, gid(peer), 0xffff, &m[..len]);
            now += 1_000_000_000;
            if let Some(t) = cm.poll_timeout() {
                if t <= now {
                    cm.handle_timeout(now);
                }
            }
            prop_assert!(cm.connection_count() <= 16);
            prop_assert!(cm.half_open_count() <= 8);
            // Whatever it sends parses.
            while let Some(t) = cm.poll_transmit() {
                prop_assert!(softib_wire::cm::CmMessage::parse(&t.mad[..]).is_ok());
            }
            while cm.poll_event().is_some() {}
        }
        let c = cm.counters();
        prop_assert!(c.rx_mads >= c.malformed_drops);
    }
}
