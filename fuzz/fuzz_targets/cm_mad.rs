//! A script of CM MADs from a few peers into a `softib_cm::Cm` that listens and has an
//! outstanding connect: `handle_mad` never panics, state stays within the configured bounds
//! (half-open and total connections, queued MADs and events), and every MAD the CM sends
//! parses. Records: 1 byte (peer index in the low 2 bits, 0x80 = fire timers after
//! advancing one second), 2 bytes attribute ID offset, then 232 bytes of class data behind
//! a valid CM header (the class version byte is the record's first byte's bit 2 away from
//! 2, so bad versions are reached too).
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_cm::{Cm, CmConfig, ConnectParams};
use softib_wire::cm::CmMessage;
use softib_wire::mad::MadHeader;

const RECORD: usize = 3 + 232;

fuzz_target!(|data: &[u8]| {
    let gid = |p: u8| {
        let mut g = [0u8; 16];
        g[15] = p;
        g
    };
    let mut cfg = CmConfig::new(gid(0xEE), 1);
    cfg.max_half_open = 4;
    cfg.max_connections = 8;
    cfg.max_pending_transmits = 16;
    cfg.max_pending_events = 16;
    let mut cm = Cm::new(cfg);
    cm.listen(0x0106_4853).unwrap();
    cm.connect(0, &ConnectParams::rdma_cm_rc(gid(1), 0x0106_0001, 0x11, 1))
        .unwrap();
    let mut now = 0u64;
    for rec in data.chunks(RECORD) {
        let Some((&ctl, rest)) = rec.split_first() else {
            continue;
        };
        let attr = 0x0010 + u16::from(*rest.first().unwrap_or(&0) % 12);
        let mut mad = [0u8; 256];
        let mut h = MadHeader::cm_send(attr, 7);
        if ctl & 0x04 != 0 {
            h.class_version = 1;
        }
        h.emit(&mut mad).unwrap();
        let body = rest.get(2..).unwrap_or(&[]);
        mad[24..24 + body.len()].copy_from_slice(body);
        cm.handle_mad(now, gid(ctl & 3), 0xffff, &mad);
        if ctl & 0x80 != 0 {
            now += 1_000_000_000;
            cm.handle_timeout(now);
        }
        assert!(cm.half_open_count() <= 4);
        assert!(cm.connection_count() <= 8);
        while let Some(t) = cm.poll_transmit() {
            assert!(CmMessage::parse(&t.mad[..]).is_ok());
        }
        while cm.poll_event().is_some() {}
    }
});
