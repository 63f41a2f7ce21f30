//! softib-wire: every InfiniBand and RoCEv2 header softib puts on or reads off the wire.
//!
//! The crate follows smoltcp's two-layer pattern (see `shared/design/STYLE.md`): each header
//! has a zero-copy view (`Packet<T: AsRef<[u8]>>`, checked once with `new_checked`, after
//! which no accessor panics) and a plain validated representation (`*Repr`) with `parse`,
//! `buffer_len` and `emit`. Field offsets live in a private `field` module per header so
//! the accessors read like the specification's tables.
//!
//! Rules every module keeps:
//! - no I/O, no allocation on the parse path, no panic on any input;
//! - all multi-byte fields are big-endian (IBA vol. 1, 5.2 "byte ordering"), except the
//!   ICRC which is appended least-significant byte first;
//! - CRC checks (ICRC, VCRC) are skipped under `cfg(fuzzing)` so a fuzzer reaches the code
//!   behind them.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;

pub use error::{Error, Result};
