//! The state behind an extended CQ (`ibv_create_cq_ex`): the completion the application is
//! reading between `ibv_start_poll` and `ibv_end_poll`, with the timestamps the shim gives
//! it when it moves the completion out of the engine (the engine never reads a clock; the
//! shim is the "HCA" here). The completion clock is `CLOCK_MONOTONIC` in nanoseconds, so
//! the device reports `hca_core_clock` [`HCA_CORE_CLOCK_KHZ`] (1 GHz) and a
//! `completion_timestamp_mask` of all 64 bits, and `ibv_query_rt_values_ex` reads the same
//! clock.

use std::sync::Mutex;

use crate::abi::ibv_wc;
use crate::abi_ex::*;

/// `hca_core_clock` in kHz: completion timestamps count nanoseconds.
pub const HCA_CORE_CLOCK_KHZ: u64 = 1_000_000;

/// `completion_timestamp_mask`: the timestamp uses all 64 bits.
pub const COMPLETION_TIMESTAMP_MASK: u64 = u64::MAX;

/// The `wc_flags` of `ibv_create_cq_ex` softib fills: the standard fields and both
/// timestamps (no VLAN, flow tag or tag matching: softib has none of them).
pub const SUPPORTED_WC_FLAGS: u64 = IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

/// The `flags` of `ibv_cq_init_attr_ex` softib accepts: both only promise less to the
/// library (one polling thread, overruns ignored), which a software CQ can honour as is.
pub const SUPPORTED_CQ_FLAGS: u32 =
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;

/// A completion as the extended readers return it.
#[derive(Clone, Copy, Debug, Default)]
pub struct CurrentWc {
    /// The completion in verbs.h form (network-order immediate data, C opcodes).
    pub wc: ibv_wc,
    /// `CLOCK_MONOTONIC` nanoseconds when the shim took it from the engine.
    pub ts: u64,
    /// `CLOCK_REALTIME` nanoseconds at the same moment.
    pub wallclock_ns: u64,
}

/// An extended CQ's polling state.
#[derive(Debug, Default)]
pub struct CqExState {
    /// `wc_flags` requested at creation.
    pub wc_flags: u64,
    /// The completion being read (after a successful start/next poll).
    pub current: Mutex<Option<CurrentWc>>,
}

impl CqExState {
    /// A state for a CQ created with `wc_flags`.
    pub fn new(wc_flags: u64) -> CqExState {
        CqExState {
            wc_flags,
            current: Mutex::new(None),
        }
    }

    /// The completion being read, or a zeroed one (a reader called outside a poll
    /// section gets zeros, never stale memory).
    pub fn current(&self) -> CurrentWc {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or_default()
    }

    /// Replaces the completion being read.
    pub fn set(&self, wc: Option<CurrentWc>) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = wc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_outside_a_poll_section_see_zeros() {
        let s = CqExState::new(SUPPORTED_WC_FLAGS);
        assert_eq!(s.current().wc.byte_len, 0);
        let mut c = CurrentWc::default();
        c.wc.byte_len = 9;
        c.ts = 5;
        s.set(Some(c));
        assert_eq!((s.current().wc.byte_len, s.current().ts), (9, 5));
        s.set(None);
        assert_eq!(s.current().ts, 0);
    }

    #[test]
    fn the_timestamp_clock_is_consistent() {
        // 1 GHz and a 64-bit mask: a timestamp in ns is the raw clock itself.
        assert_eq!(HCA_CORE_CLOCK_KHZ * 1000, 1_000_000_000);
        assert_eq!(COMPLETION_TIMESTAMP_MASK, !0);
        assert_eq!(SUPPORTED_WC_FLAGS & IBV_WC_EX_WITH_CVLAN, 0);
    }
}
