//! What crosses between the partitions of a partitioned run, and a partition's own state:
//! plain data, so the fabric can hold it and the codec can encode it without either
//! depending on the window logic in `partition.rs`.

use crate::event::Tie;
use crate::packet::Packet;
use crate::port::WireItem;
use crate::time::Picos;
use std::sync::Arc;

/// What one partition sends another across a cut link.
#[derive(Debug)]
pub(crate) enum Cross {
    /// A data packet towards `port` (see `Fabric::send_data`).
    Data {
        port: u32,
        item: Option<WireItem>,
        arrive_at: Picos,
        tie: Tie,
        packet: Packet,
    },
    /// A flow-control packet towards `port`.
    Fc { port: u32, item: WireItem },
}

pub(crate) struct PartitionState {
    pub(super) owner: Arc<[u16]>,
    pub(super) me: u16,
    /// Per destination partition, what is to be sent at the next window boundary.
    pub(super) outbox: Vec<Vec<Cross>>,
}

impl PartitionState {
    /// Whether this is partition 0.
    pub(super) fn is_first(&self) -> bool {
        self.me == 0
    }
}
