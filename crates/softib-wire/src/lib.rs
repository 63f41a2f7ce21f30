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

pub mod dissect;
pub mod error;

// Link and network layer (LRH, GRH, Ethernet/IP/UDP, CRCs, encapsulation, pcap).
pub mod erf;
pub mod ethernet;
pub mod flow_control;
pub mod grh;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod lrh;
pub mod native;
pub mod pcap;
pub mod roce;
pub mod udp;
pub mod vcrc;

pub use error::{Error, Result};
mod bytes;

// Transport layer: BTH and up (IBA vol. 1, chapter 9).
pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod cnp;
pub mod deth;
pub mod ieth;
pub mod immdt;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod rdeth;
pub mod reth;
pub mod xrceth;

// Management datagrams (IBA vol. 1, chapters 12 and 13): the MAD header and CM messages.
pub mod cm;
pub mod mad;

pub use aeth::{AethPacket, AethRepr, CreditCode, NakCode, RnrTimer, Syndrome, AETH_LEN};
pub use atomic_ack_eth::{AtomicAckEthPacket, AtomicAckEthRepr, ATOMIC_ACK_ETH_LEN};
pub use atomic_eth::{AtomicEthPacket, AtomicEthRepr, ATOMIC_ETH_LEN};
pub use bth::{BthPacket, BthRepr, BTH_LEN};
pub use cnp::{CnpPacket, CnpRepr, CNP_BODY_LEN};
pub use deth::{DethPacket, DethRepr, DETH_LEN};
pub use ieth::{Ieth, IethPacket, IETH_LEN};
pub use immdt::{ImmDt, ImmDtPacket, IMMDT_LEN};
pub use opcode::{Opcode, Operation, Service};
pub use packet::{pad_for, PacketRepr};
pub use psn::{Psn, PSN_MASK};
pub use rdeth::{RdethPacket, RdethRepr, RDETH_LEN};
pub use reth::{RethPacket, RethRepr, RETH_LEN};
pub use xrceth::{XrcethPacket, XrcethRepr, XRCETH_LEN};
