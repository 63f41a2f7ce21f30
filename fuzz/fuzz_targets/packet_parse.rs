//! Arbitrary bytes -> `PacketRepr::parse`; whatever parses must emit into a buffer of exactly
//! `buffer_len()` bytes, with the input's length, and re-parse to the same packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::PacketRepr;

fuzz_target!(|data: &[u8]| {
    let Ok(repr) = PacketRepr::parse(data) else {
        return;
    };
    assert_eq!(repr.buffer_len(), data.len());
    let mut buf = vec![0u8; repr.buffer_len()];
    let written = repr.emit(&mut buf).expect("emit into buffer_len bytes");
    assert_eq!(written, buf.len());
    assert_eq!(PacketRepr::parse(&buf), Ok(repr));
});
