//! The InfiniBand congestion control agent at a source channel adapter (IBA vol. 1,
//! Annex A10, "CA congestion control"): a congestion control table index (CCTI) per QP or
//! per SL, raised by CCTI_Increase on every BECN (capped at CCTI_Limit), lowered by one every
//! CCTI_Timer (in units of 1.024 us) down to CCTI_Min, and a congestion control table (CCT)
//! whose entry at the current CCTI gives the delay inserted between packets.
//!
//! "Packet time": the CCT entry (shift:2, multiplier:14) scales a packet's transmission time:
//! delay = (packet time >> shift) x multiplier. The Linux hfi1 driver (`set_link_ipg`) applies
//! exactly this formula with the egress time of a maximum-size packet at the port's current
//! egress rate. softib uses the time of the packet being paced at the port's link rate
//! (`pacer::wire_time`), so that an entry means the same rate fraction,
//! 1 / (1 + multiplier / 2^shift), for small and large packets alike; for a stream of
//! full-MTU packets both readings agree.
//!
//! Pure state over `Nanos`: the timer is evaluated lazily ([`CcaState::advance`]), so an idle
//! source costs nothing and the result equals a timer that fired at every period.

use thiserror::Error;

use crate::time::Nanos;

/// Entries a CCT may hold (IBA Annex A10 CongestionControlTable; OpenSM's OSM_CCT_ENTRY_MAX).
pub const CCT_MAX_ENTRIES: usize = 128;

/// One CCTI_Timer unit: 1.024 us (IBA Annex A10, CACongestionSetting).
pub const CCTI_TIMER_UNIT: Nanos = 1024;

/// Largest CCT multiplier (14 bits).
pub const CCT_MAX_MULTIPLIER: u16 = (1 << 14) - 1;

/// Largest CCT shift (2 bits).
pub const CCT_MAX_SHIFT: u8 = 3;

/// A congestion control setting that cannot be used; the message names the field and value.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CcConfigError {
    /// A field is outside its range.
    #[error("{field} = {value} is out of range: {reason}")]
    OutOfRange {
        /// The field (spelled as in the configuration).
        field: &'static str,
        /// The value given.
        value: u64,
        /// The accepted range.
        reason: &'static str,
    },
    /// The CCT has no entry or more than 128.
    #[error("a congestion control table needs 1..=128 entries, got {0}")]
    CctSize(usize),
}

/// One CCT entry: the inter-packet delay is (packet time >> shift) x multiplier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CctEntry {
    /// CCT_Shift, 0..=3.
    pub shift: u8,
    /// CCT_Multiplier, 0..=16383.
    pub multiplier: u16,
}

impl CctEntry {
    /// An entry, refusing values that do not fit the 2-bit shift or 14-bit multiplier.
    pub fn new(shift: u8, multiplier: u16) -> Result<CctEntry, CcConfigError> {
        if shift > CCT_MAX_SHIFT {
            return Err(CcConfigError::OutOfRange {
                field: "CCT_Shift",
                value: shift as u64,
                reason: "a 2-bit field: 0..=3",
            });
        }
        if multiplier > CCT_MAX_MULTIPLIER {
            return Err(CcConfigError::OutOfRange {
                field: "CCT_Multiplier",
                value: multiplier as u64,
                reason: "a 14-bit field: 0..=16383",
            });
        }
        Ok(CctEntry { shift, multiplier })
    }

    /// The delay this entry inserts after a packet whose transmission time is `packet_time`.
    pub fn delay(self, packet_time: Nanos) -> Nanos {
        (packet_time >> self.shift).saturating_mul(self.multiplier as u64)
    }
}

/// A congestion control table of 1..=128 entries; CCTI_Limit is its last index (OpenSM sets
/// CCTI_Limit = entries - 1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cct {
    entries: Vec<CctEntry>,
}

impl Default for Cct {
    /// One entry, 0:0: no delay at any CCTI.
    fn default() -> Self {
        Cct {
            entries: vec![CctEntry::default()],
        }
    }
}

impl Cct {
    /// A table from its entries (1..=128).
    pub fn new(entries: Vec<CctEntry>) -> Result<Cct, CcConfigError> {
        if entries.is_empty() || entries.len() > CCT_MAX_ENTRIES {
            return Err(CcConfigError::CctSize(entries.len()));
        }
        Ok(Cct { entries })
    }

    /// CCTI_Limit: the highest index a BECN can raise the CCTI to.
    pub fn ccti_limit(&self) -> u16 {
        (self.entries.len() - 1) as u16
    }

    /// The entry for `ccti` (indexes above the limit use the last entry).
    pub fn entry(&self, ccti: u16) -> CctEntry {
        self.entries[(ccti as usize).min(self.entries.len() - 1)]
    }

    /// All entries.
    pub fn entries(&self) -> &[CctEntry] {
        &self.entries
    }
}

/// Whether the CA keeps one CCA state per QP or per SL (IBA Annex A10 CACongestionSetting
/// Port_Control bit 0; OpenSM `cc_ca_cong_setting_port_control`: 0 = QP, 1 = SL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PortControl {
    /// One state per QP.
    Qp,
    /// One state per service level, shared by every QP sending on it.
    #[default]
    Sl,
}

/// The CACongestionSetting entry of one SL (IBA Annex A10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CaCongestionEntry {
    /// CCTI_Timer in units of 1.024 us; 0 means the CCTI never decreases by itself.
    pub ccti_timer: u16,
    /// Added to the CCTI on every BECN.
    pub ccti_increase: u8,
    /// Trigger_Threshold: a CCTI at or above it is reported in `CcStatus::above_trigger`.
    pub trigger_threshold: u8,
    /// The CCTI never goes below this (a permanent minimum delay).
    pub ccti_min: u8,
}

impl CaCongestionEntry {
    /// The timer period in nanoseconds, `None` when the timer is 0.
    pub fn timer_period(&self) -> Option<Nanos> {
        (self.ccti_timer > 0).then(|| self.ccti_timer as Nanos * CCTI_TIMER_UNIT)
    }
}

/// The IBA congestion control configuration of a CA port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IbaCcConfig {
    /// Per QP or per SL state.
    pub port_control: PortControl,
    /// CACongestionSetting per SL.
    pub entries: [CaCongestionEntry; 16],
    /// The congestion control table.
    pub cct: Cct,
}

impl IbaCcConfig {
    /// The setting for service level `sl` (only its low 4 bits count).
    pub fn entry(&self, sl: u8) -> &CaCongestionEntry {
        &self.entries[(sl & 0xF) as usize]
    }
}

/// The CCA state of one source (a QP, or an SL under `PortControl::Sl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CcaState {
    ccti: u16,
    /// When the CCTI timer last fired (or started); `None` while CCTI sits at CCTI_Min.
    /// The timer starts with the BECN that lifts the CCTI above CCTI_Min and stops when the
    /// CCTI is back there (as the Linux hfi1 driver's `cca_timer_fn` does).
    timer_anchor: Option<Nanos>,
}

impl CcaState {
    /// A source at rest: CCTI = CCTI_Min.
    pub fn new(entry: &CaCongestionEntry) -> CcaState {
        CcaState {
            ccti: entry.ccti_min as u16,
            timer_anchor: None,
        }
    }

    /// The CCTI as of the last `advance` / `on_becn`.
    pub fn ccti(&self) -> u16 {
        self.ccti
    }

    /// Applies every CCTI_Timer expiry due by `now`: one decrement each, not below CCTI_Min.
    pub fn advance(&mut self, now: Nanos, entry: &CaCongestionEntry) {
        let min = entry.ccti_min as u16;
        let Some(anchor) = self.timer_anchor else {
            return;
        };
        if self.ccti <= min {
            self.timer_anchor = None;
            return;
        }
        let Some(period) = entry.timer_period() else {
            return;
        };
        let fired = now.saturating_sub(anchor) / period;
        let room = (self.ccti - min) as u64;
        if fired >= room {
            self.ccti = min;
            self.timer_anchor = None;
        } else {
            self.ccti -= fired as u16;
            self.timer_anchor = Some(anchor + fired * period);
        }
    }

    /// The CCTI at `now` without changing the state.
    pub fn ccti_at(&self, now: Nanos, entry: &CaCongestionEntry) -> u16 {
        let mut s = *self;
        s.advance(now, entry);
        s.ccti
    }

    /// A BECN arrived (in an ACK or a CNP): CCTI += CCTI_Increase, capped at CCTI_Limit
    /// (IBA Annex A10, CA reaction to BECN).
    pub fn on_becn(&mut self, now: Nanos, entry: &CaCongestionEntry, ccti_limit: u16) {
        self.advance(now, entry);
        if self.ccti < ccti_limit {
            self.ccti = self
                .ccti
                .saturating_add(entry.ccti_increase as u16)
                .min(ccti_limit);
        }
        if self.ccti > entry.ccti_min as u16 && self.timer_anchor.is_none() {
            self.timer_anchor = Some(now);
        }
    }

    /// When the next CCTI decrement happens, if one is pending.
    pub fn next_decrement(&self, entry: &CaCongestionEntry) -> Option<Nanos> {
        Some(self.timer_anchor? + entry.timer_period()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(timer: u16, inc: u8, min: u8) -> CaCongestionEntry {
        CaCongestionEntry {
            ccti_timer: timer,
            ccti_increase: inc,
            trigger_threshold: 0,
            ccti_min: min,
        }
    }

    #[test]
    fn entry_ranges_are_enforced_and_named() {
        assert!(CctEntry::new(3, 16383).is_ok());
        let e = CctEntry::new(4, 1).unwrap_err();
        assert!(e.to_string().contains("CCT_Shift = 4"), "{e}");
        let e = CctEntry::new(0, 16384).unwrap_err();
        assert!(e.to_string().contains("CCT_Multiplier = 16384"), "{e}");
        assert_eq!(Cct::new(vec![]), Err(CcConfigError::CctSize(0)));
        assert_eq!(
            Cct::new(vec![CctEntry::default(); 129]),
            Err(CcConfigError::CctSize(129))
        );
        assert_eq!(
            Cct::new(vec![CctEntry::default(); 128])
                .unwrap()
                .ccti_limit(),
            127
        );
    }

    #[test]
    fn delay_is_packet_time_shifted_then_multiplied() {
        // 4096 ns packet: shift 2 -> 1024, x 3 = 3072.
        assert_eq!(CctEntry::new(2, 3).unwrap().delay(4096), 3072);
        // The shift truncates before the multiply: 1001 >> 1 = 500, x 7 = 3500.
        assert_eq!(CctEntry::new(1, 7).unwrap().delay(1001), 3500);
        assert_eq!(CctEntry::new(0, 0).unwrap().delay(123_456), 0);
        assert_eq!(CctEntry::new(3, 16383).unwrap().delay(8), 16383);
        let cct = Cct::new(vec![
            CctEntry::new(0, 0).unwrap(),
            CctEntry::new(0, 1).unwrap(),
        ])
        .unwrap();
        // Indexes beyond the table use its last entry.
        assert_eq!(cct.entry(9), CctEntry::new(0, 1).unwrap());
    }

    #[test]
    fn becn_adds_the_increase_and_caps_at_the_limit() {
        let e = entry(0, 3, 0);
        let mut s = CcaState::new(&e);
        assert_eq!(s.ccti(), 0);
        s.on_becn(0, &e, 10);
        assert_eq!(s.ccti(), 3);
        s.on_becn(0, &e, 10);
        s.on_becn(0, &e, 10);
        assert_eq!(s.ccti(), 9);
        s.on_becn(0, &e, 10);
        assert_eq!(s.ccti(), 10, "capped at CCTI_Limit");
        s.on_becn(0, &e, 10);
        assert_eq!(s.ccti(), 10);
        // Without a timer it never comes down.
        assert_eq!(s.ccti_at(1 << 40, &e), 10);
    }

    #[test]
    fn timer_decrements_once_per_period_down_to_the_floor() {
        // CCTI_Timer 10 = 10.24 us, increase 5, floor 2.
        let e = entry(10, 5, 2);
        let mut s = CcaState::new(&e);
        assert_eq!(s.ccti(), 2);
        assert_eq!(s.next_decrement(&e), None, "at the floor the timer is idle");
        s.on_becn(1_000, &e, 127);
        assert_eq!(s.ccti(), 7);
        assert_eq!(s.next_decrement(&e), Some(1_000 + 10_240));
        assert_eq!(s.ccti_at(1_000 + 10_239, &e), 7);
        assert_eq!(s.ccti_at(1_000 + 10_240, &e), 6);
        assert_eq!(s.ccti_at(1_000 + 3 * 10_240 + 5, &e), 4);
        assert_eq!(s.ccti_at(1_000 + 5 * 10_240, &e), 2);
        assert_eq!(
            s.ccti_at(1_000 + 500 * 10_240, &e),
            2,
            "never below CCTI_Min"
        );
        // A BECN while the timer runs keeps its phase.
        s.on_becn(1_000 + 10_240 + 7, &e, 127);
        assert_eq!(s.ccti(), 6 + 5);
        assert_eq!(s.next_decrement(&e), Some(1_000 + 2 * 10_240));
        s.advance(1_000 + 20 * 10_240, &e);
        assert_eq!(s.ccti(), 2);
        assert_eq!(s.next_decrement(&e), None);
        // The next BECN restarts the timer from its own time.
        s.on_becn(900_000, &e, 127);
        assert_eq!(s.next_decrement(&e), Some(900_000 + 10_240));
    }

    #[test]
    fn lazy_evaluation_equals_a_timer_firing_every_period() {
        let e = entry(3, 2, 1);
        let period = 3 * CCTI_TIMER_UNIT;
        let becns = [0u64, 100, 5_000, 5_001, 20_000, 20_500, 40_000];
        let mut lazy = CcaState::new(&e);
        let mut eager = CcaState::new(&e);
        let mut bi = 0;
        for t in 0..60_000u64 {
            // The eager copy is advanced every nanosecond.
            eager.advance(t, &e);
            while bi < becns.len() && becns[bi] == t {
                lazy.on_becn(t, &e, 20);
                eager.on_becn(t, &e, 20);
                bi += 1;
            }
            if t % 997 == 0 {
                assert_eq!(lazy.ccti_at(t, &e), eager.ccti(), "t = {t}");
            }
        }
        assert!(period > 0);
    }
}
