//! Arbitrary bytes as a capture file -> `CaptureReader` + `dissect`, the library half of
//! `softib decode`: never a panic, whatever the file holds; every frame that dissects
//! answers the questions the decoder asks of it (CRC verdicts, endpoints, ECN) without a
//! panic either, and a transport packet that parses re-emits to its own length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::dissect::dissect;
use softib_wire::pcap::CaptureReader;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = CaptureReader::new(data) else {
        return;
    };
    let _ = reader.linktype();
    // A record count bound keeps one input fast; libFuzzer inputs are small anyway.
    for _ in 0..10_000 {
        let Some(record) = reader.next_record() else {
            break;
        };
        let Ok(record) = record else {
            // An error ends the file for the decoder (it reports it and stops).
            continue;
        };
        let Ok(d) = dissect(record.linktype, &record.data) else {
            continue;
        };
        let _ = d.icrc_ok();
        let _ = d.vcrc_ok();
        let _ = d.endpoints();
        let _ = d.ecn();
        if let Ok(p) = d.packet {
            let mut buf = vec![0u8; p.buffer_len()];
            assert_eq!(p.emit(&mut buf), Ok(buf.len()));
        }
    }
});
