//! DCQCN, the reaction point (sender) of RoCEv2 congestion control (Zhu et al., "Congestion
//! Control for Large-Scale RDMA Deployments", SIGCOMM 2015, section 3): a current rate Rc and
//! a target rate Rt per QP; on a CNP Rt = Rc, Rc = Rc (1 - alpha/2), alpha = (1 - g) alpha + g;
//! alpha decays, alpha = (1 - g) alpha, after every K without a CNP; a timer (period T) and a
//! byte counter (every B bytes sent) drive the increase: fast recovery Rc = (Rt + Rc) / 2
//! while both counters are below F, additive increase Rt += R_AI once one of them reached F,
//! hyper increase Rt += R_HAI once both passed F.
//!
//! Parameters carry the names (and units) NVIDIA/Mellanox ConnectX NICs use for the same
//! knobs (mlx5 `roce_rp` / `roce_np`: rpg_time_reset, rpg_byte_reset, rpg_threshold,
//! rpg_ai_rate, rpg_hai_rate, rpg_gd, rpg_min_rate, dce_tcp_g, dce_tcp_rtt,
//! initial_alpha_value, rate_reduce_monitor_period, rate_to_set_on_first_cnp,
//! min_time_between_cnps). Defaults are the paper's values where it gives one.
//!
//! Integer arithmetic only (deterministic everywhere): rates in bit/s, alpha in units of
//! 2^-20. A cut is Rc -= Rc x alpha / 2^(20 + rpg_gd) (rpg_gd = log2 of the paper's 2);
//! alpha on a CNP becomes alpha - floor(alpha x g / 1024) + g x 1024, a decay
//! alpha - max(1, floor(alpha x g / 1024)) (so it reaches 0); increases round Rc up:
//! Rc = ceil((Rt + Rc) / 2). Timers are evaluated lazily ([`DcqcnState::advance`]), exactly
//! as if they had fired on time.

use super::iba::CcConfigError;
use crate::time::Nanos;

/// Alpha fixed point: 1.0 = 2^20.
pub const ALPHA_ONE: u32 = 1 << 20;

/// DCQCN reaction point parameters, named and scaled as ConnectX NICs name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DcqcnConfig {
    /// T: microseconds between timer-driven rate increases (0 = no timer). Paper: 55 us.
    pub rpg_time_reset: u32,
    /// B: bytes sent between byte-counter-driven increases (0 = no byte counter, as on
    /// ConnectX). Paper: 10 MB.
    pub rpg_byte_reset: u32,
    /// F: timer or byte-counter events before fast recovery ends. Paper: 5.
    pub rpg_threshold: u32,
    /// R_AI in Mb/s. Paper: 40 Mb/s.
    pub rpg_ai_rate: u32,
    /// R_HAI in Mb/s (the paper leaves it open; 10 x R_AI here).
    pub rpg_hai_rate: u32,
    /// log2 of the cut divisor: Rc *= 1 - alpha / 2^rpg_gd. Paper: alpha/2, so 1.
    pub rpg_gd: u8,
    /// The rate never falls below this, in Mb/s.
    pub rpg_min_rate: u32,
    /// g in units of 1/1024 (4 = 1/256, the paper's value).
    pub dce_tcp_g: u16,
    /// K: microseconds without a CNP after which alpha decays once (0 = never). Paper: 55 us.
    pub dce_tcp_rtt: u32,
    /// Alpha when the rate limiter is set up, in units of 1/1024 (1024 = 1).
    pub initial_alpha_value: u16,
    /// Minimum microseconds between two cuts; CNPs inside it only update alpha (0 = every
    /// CNP cuts, as in the paper).
    pub rate_reduce_monitor_period: u32,
    /// Rate set by the first CNP of an unlimited QP, in Mb/s (0 = the normal alpha cut).
    pub rate_to_set_on_first_cnp: u32,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            rpg_time_reset: 55,
            rpg_byte_reset: 10 * 1024 * 1024,
            rpg_threshold: 5,
            rpg_ai_rate: 40,
            rpg_hai_rate: 400,
            rpg_gd: 1,
            rpg_min_rate: 10,
            dce_tcp_g: 4,
            dce_tcp_rtt: 55,
            initial_alpha_value: 1024,
            rate_reduce_monitor_period: 0,
            rate_to_set_on_first_cnp: 0,
        }
    }
}

const MBPS: u64 = 1_000_000;
const US: Nanos = 1_000;

impl DcqcnConfig {
    /// Checks every value against its range; the error names the field.
    pub fn validate(&self, line_rate_mbps: u64) -> Result<(), CcConfigError> {
        let range = |field, value: u64, ok: bool, reason| {
            if ok {
                Ok(())
            } else {
                Err(CcConfigError::OutOfRange {
                    field,
                    value,
                    reason,
                })
            }
        };
        range(
            "dce_tcp_g",
            self.dce_tcp_g as u64,
            (1..=1024).contains(&self.dce_tcp_g),
            "g is given in 1/1024 units: 1..=1024",
        )?;
        range(
            "initial_alpha_value",
            self.initial_alpha_value as u64,
            self.initial_alpha_value <= 1024,
            "alpha is given in 1/1024 units: 0..=1024",
        )?;
        range(
            "rpg_gd",
            self.rpg_gd as u64,
            self.rpg_gd <= 20,
            "log2 of the cut divisor: 0..=20",
        )?;
        range(
            "rpg_min_rate",
            self.rpg_min_rate as u64,
            self.rpg_min_rate >= 1 && self.rpg_min_rate as u64 <= line_rate_mbps,
            "1 Mb/s ..= the link rate",
        )?;
        range(
            "rate_to_set_on_first_cnp",
            self.rate_to_set_on_first_cnp as u64,
            self.rate_to_set_on_first_cnp as u64 <= line_rate_mbps,
            "0 (alpha cut) ..= the link rate",
        )?;
        Ok(())
    }
}

/// The DCQCN state of one QP (its rate limiter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DcqcnState {
    line: u64,
    rc: u64,
    rt: u64,
    alpha: u32,
    /// Last alpha update (CNP or decay); the next decay is K later.
    alpha_anchor: Nanos,
    /// Last cut or timer event; the next timer event is T later.
    timer_anchor: Nanos,
    last_cut: Option<Nanos>,
    time_stage: u32,
    byte_stage: u32,
    bytes: u64,
}

impl DcqcnState {
    /// An unlimited QP at `line_rate_mbps` with alpha = initial_alpha_value.
    pub fn new(cfg: &DcqcnConfig, line_rate_mbps: u64, now: Nanos) -> DcqcnState {
        let line = line_rate_mbps.max(1) * MBPS;
        DcqcnState {
            line,
            rc: line,
            rt: line,
            alpha: (cfg.initial_alpha_value.min(1024) as u32) << 10,
            alpha_anchor: now,
            timer_anchor: now,
            last_cut: None,
            time_stage: 0,
            byte_stage: 0,
            bytes: 0,
        }
    }

    /// The current rate Rc in bit/s (as of the last update).
    pub fn rate(&self) -> u64 {
        self.rc
    }

    /// The target rate Rt in bit/s.
    pub fn target_rate(&self) -> u64 {
        self.rt
    }

    /// Alpha in units of 2^-20.
    pub fn alpha(&self) -> u32 {
        self.alpha
    }

    /// Below the line rate: the QP is paced.
    pub fn limited(&self) -> bool {
        self.rc < self.line
    }

    fn min_rate(&self, cfg: &DcqcnConfig) -> u64 {
        (cfg.rpg_min_rate.max(1) as u64 * MBPS).min(self.line)
    }

    /// A CNP (or a BECN) arrived.
    pub fn on_cnp(&mut self, now: Nanos, cfg: &DcqcnConfig) {
        self.advance(now, cfg);
        let may_cut = match self.last_cut {
            None => true,
            Some(t) => now.saturating_sub(t) >= cfg.rate_reduce_monitor_period as Nanos * US,
        };
        if may_cut {
            let first = !self.limited();
            self.rt = self.rc;
            self.rc = if first && cfg.rate_to_set_on_first_cnp > 0 {
                cfg.rate_to_set_on_first_cnp as u64 * MBPS
            } else {
                let cut = (self.rc as u128 * self.alpha as u128) >> (20 + cfg.rpg_gd.min(20));
                self.rc - (cut as u64).min(self.rc)
            };
            self.rc = self.rc.clamp(self.min_rate(cfg), self.line);
            self.last_cut = Some(now);
            self.timer_anchor = now;
            self.time_stage = 0;
            self.byte_stage = 0;
            self.bytes = 0;
        }
        let g = cfg.dce_tcp_g.clamp(1, 1024) as u64;
        let a = self.alpha as u64;
        self.alpha = (a - ((a * g) >> 10) + (g << 10)).min(ALPHA_ONE as u64) as u32;
        self.alpha_anchor = now;
    }

    /// `bytes` were sent: the byte counter may trigger increases.
    pub fn on_sent(&mut self, now: Nanos, bytes: u64, cfg: &DcqcnConfig) {
        self.advance(now, cfg);
        if !self.limited() || cfg.rpg_byte_reset == 0 {
            return;
        }
        self.bytes += bytes;
        let b = cfg.rpg_byte_reset as u64;
        while self.bytes >= b && self.limited() {
            self.bytes -= b;
            self.byte_stage += 1;
            self.increase(cfg);
        }
    }

    /// Applies every alpha decay and timer increase due by `now`.
    pub fn advance(&mut self, now: Nanos, cfg: &DcqcnConfig) {
        if cfg.dce_tcp_rtt > 0 {
            let k = cfg.dce_tcp_rtt as Nanos * US;
            let g = cfg.dce_tcp_g.clamp(1, 1024) as u64;
            let n = now.saturating_sub(self.alpha_anchor) / k;
            self.alpha_anchor += n * k;
            let mut left = n;
            while left > 0 && self.alpha > 0 {
                let a = self.alpha as u64;
                self.alpha = (a - ((a * g) >> 10).max(1)) as u32;
                left -= 1;
            }
        }
        if cfg.rpg_time_reset > 0 {
            let t = cfg.rpg_time_reset as Nanos * US;
            if !self.limited() {
                // Nothing to recover: keep the timer phase current without work.
                self.timer_anchor += now.saturating_sub(self.timer_anchor) / t * t;
                return;
            }
            while self.timer_anchor + t <= now {
                self.timer_anchor += t;
                if !self.limited() {
                    // Recovered: keep the phase, skip the remaining periods.
                    self.timer_anchor += now.saturating_sub(self.timer_anchor) / t * t;
                    break;
                }
                let before = (self.rc, self.rt);
                self.time_stage += 1;
                self.increase(cfg);
                if self.time_stage > cfg.rpg_threshold + 1 && (self.rc, self.rt) == before {
                    // Past F the stage no longer changes and this step changed nothing (e.g.
                    // R_AI = R_HAI = 0): later timer steps cannot either, skip them.
                    self.timer_anchor += now.saturating_sub(self.timer_anchor) / t * t;
                    break;
                }
            }
        }
    }

    /// One increase step (timer or byte counter), by stage.
    fn increase(&mut self, cfg: &DcqcnConfig) {
        let f = cfg.rpg_threshold;
        let hi = self.time_stage.max(self.byte_stage);
        let lo = self.time_stage.min(self.byte_stage);
        if hi < f {
            // Fast recovery: toward the rate before the cut.
        } else if lo > f {
            self.rt = self.rt.saturating_add(cfg.rpg_hai_rate as u64 * MBPS);
        } else {
            self.rt = self.rt.saturating_add(cfg.rpg_ai_rate as u64 * MBPS);
        }
        self.rt = self.rt.min(self.line);
        self.rc = ((self.rt + self.rc).div_ceil(2)).min(self.line);
    }

    /// When the next timer increase is due while the QP is limited.
    pub fn next_event(&self, cfg: &DcqcnConfig) -> Option<Nanos> {
        (self.limited() && cfg.rpg_time_reset > 0)
            .then(|| self.timer_anchor + cfg.rpg_time_reset as Nanos * US)
    }

    /// The state at `now` without changing this one.
    pub fn at(&self, now: Nanos, cfg: &DcqcnConfig) -> DcqcnState {
        let mut s = *self;
        s.advance(now, cfg);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: u64 = 100_000; // Mb/s

    fn cut(rc: u64, alpha: u32, gd: u8) -> u64 {
        rc - ((rc as u128 * alpha as u128) >> (20 + gd)) as u64
    }

    fn cnp_alpha(a: u32, g: u64) -> u32 {
        let a = a as u64;
        (a - ((a * g) >> 10) + (g << 10)).min(1 << 20) as u32
    }

    #[test]
    fn first_cnp_halves_the_rate_and_raises_alpha_toward_one() {
        let cfg = DcqcnConfig::default();
        let mut s = DcqcnState::new(&cfg, LINE, 0);
        assert!(!s.limited());
        assert_eq!(s.rate(), 100_000_000_000);
        s.on_cnp(1_000, &cfg);
        // alpha = 1: Rc = line x (1 - 1/2).
        assert_eq!(s.rate(), 50_000_000_000);
        assert_eq!(s.target_rate(), 100_000_000_000);
        assert_eq!(s.alpha(), ALPHA_ONE, "(1 - g) x 1 + g = 1");
        // A second CNP: Rt = Rc, cut by alpha/2 again.
        s.on_cnp(2_000, &cfg);
        assert_eq!(s.rate(), 25_000_000_000);
        assert_eq!(s.target_rate(), 50_000_000_000);
    }

    #[test]
    fn alpha_decays_every_k_without_cnp_and_scales_the_next_cut() {
        let cfg = DcqcnConfig {
            initial_alpha_value: 512,
            ..Default::default()
        };
        let mut s = DcqcnState::new(&cfg, LINE, 0);
        s.on_cnp(0, &cfg);
        let a0 = cnp_alpha(512 << 10, 4);
        assert_eq!(s.alpha(), a0);
        assert_eq!(s.rate(), cut(100_000_000_000, 512 << 10, 1));
        // Three K periods (55 us each) pass: three decays.
        let mut a = a0;
        for _ in 0..3 {
            a -= ((a as u64 * 4) >> 10).max(1) as u32;
        }
        let t = 3 * 55_000 + 10;
        assert_eq!(s.at(t, &cfg).alpha(), a);
        assert_eq!(s.at(3 * 55_000 - 1, &cfg).alpha(), {
            let mut a = a0;
            for _ in 0..2 {
                a -= ((a as u64 * 4) >> 10).max(1) as u32;
            }
            a
        });
        // The next cut uses the decayed alpha.
        let rc_before = s.at(t, &cfg).rate();
        s.on_cnp(t, &cfg);
        assert_eq!(s.rate(), cut(rc_before, a, 1));
        assert_eq!(s.alpha(), cnp_alpha(a, 4));
        // Long silence: alpha reaches 0 and stays there.
        assert_eq!(s.at(1_000_000_000_000, &cfg).alpha(), 0);
    }

    #[test]
    fn fast_recovery_then_additive_then_hyper_increase() {
        let cfg = DcqcnConfig {
            rpg_byte_reset: 1000,
            ..Default::default()
        };
        let mut s = DcqcnState::new(&cfg, LINE, 0);
        s.on_cnp(0, &cfg);
        let (mut rc, rt) = (50_000_000_000u64, 100_000_000_000u64);
        assert_eq!((s.rate(), s.target_rate()), (rc, rt));
        // Timer events at 55, 110, ... us: five of fast recovery (stage 1..=4 < F = 5 ...).
        let t = |k: u64| k * 55_000;
        for k in 1..=4u64 {
            s.advance(t(k), &cfg);
            rc = (rt + rc).div_ceil(2);
            assert_eq!(
                (s.rate(), s.target_rate()),
                (rc, rt),
                "fast recovery step {k}"
            );
        }
        // Cut again to get room below the line, then step stage by stage.
        s.on_cnp(t(4), &cfg);
        assert_eq!(s.target_rate(), rc, "Rt = Rc before the cut");
        let mut rc = s.rate();
        let mut rt2 = s.target_rate();
        // Timer stages 1..=4: fast recovery; stage 5 (= F, byte stage 0): additive.
        for k in 1..=5u64 {
            s.advance(t(4) + t(k), &cfg);
            if k == 5 {
                rt2 += 40_000_000;
            }
            rc = (rt2 + rc).div_ceil(2);
            assert_eq!((s.rate(), s.target_rate()), (rc, rt2), "timer stage {k}");
        }
        // Byte stages 1..=6 at the same instant: min(T, BC) = min(5, b) <= F -> additive
        // until both exceed F; time stage 6 comes with the next timer event.
        let now = t(4) + t(5);
        for b in 1..=6u32 {
            s.on_sent(now, 1000, &cfg);
            rt2 += 40_000_000;
            rc = (rt2 + rc).div_ceil(2);
            assert_eq!((s.rate(), s.target_rate()), (rc, rt2), "byte stage {b}");
        }
        // Timer stage 6 > F and byte stage 6 > F: hyper increase by R_HAI.
        s.advance(t(4) + t(6), &cfg);
        rt2 = (rt2 + 400_000_000).min(100_000_000_000);
        rc = (rt2 + rc).div_ceil(2);
        assert_eq!((s.rate(), s.target_rate()), (rc, rt2));
    }

    #[test]
    fn recovery_ends_at_the_line_rate_and_stops_the_timer() {
        let cfg = DcqcnConfig::default();
        let mut s = DcqcnState::new(&cfg, LINE, 0);
        s.on_cnp(0, &cfg);
        assert!(s.next_event(&cfg).is_some());
        // Additive increase of 40 Mb/s per 55 us from 50 Gb/s needs < 1300 steps.
        let end = 2_000 * 55_000;
        let r = s.at(end, &cfg);
        assert_eq!(r.rate(), 100_000_000_000);
        // Once recovered, an hour later costs no step per period.
        assert_eq!(s.at(3_600_000_000_000, &cfg).rate(), 100_000_000_000);
        assert!(!r.limited());
        assert_eq!(r.next_event(&cfg), None);
    }

    #[test]
    fn min_rate_monitor_period_and_first_cnp_rate() {
        let cfg = DcqcnConfig {
            rpg_min_rate: 30_000,
            rate_reduce_monitor_period: 10,
            rate_to_set_on_first_cnp: 60_000,
            ..Default::default()
        };
        assert!(cfg.validate(LINE).is_ok());
        let mut s = DcqcnState::new(&cfg, LINE, 0);
        s.on_cnp(0, &cfg);
        assert_eq!(s.rate(), 60_000_000_000, "rate_to_set_on_first_cnp");
        s.on_cnp(9_999, &cfg);
        assert_eq!(
            s.rate(),
            60_000_000_000,
            "inside the monitor period: no cut"
        );
        s.on_cnp(20_000, &cfg);
        assert_eq!(s.rate(), 30_000_000_000, "cut floored at rpg_min_rate");
    }

    #[test]
    fn a_rate_that_cannot_grow_does_not_cost_a_step_per_period() {
        // R_AI = R_HAI = 0: after fast recovery Rc sits at Rt forever. An hour of idle time
        // (65 million timer periods) must still evaluate at once and keep the timer phase.
        let cfg = DcqcnConfig {
            rpg_ai_rate: 0,
            rpg_hai_rate: 0,
            ..Default::default()
        };
        let mut s = DcqcnState::new(&cfg, LINE, 0);
        s.on_cnp(0, &cfg);
        s.on_cnp(0, &cfg);
        let hour = 3_600_000_000_000u64;
        let r = s.at(hour, &cfg);
        assert_eq!(r.rate(), 50_000_000_000, "Rc reached Rt and stays");
        assert!(r.limited());
        assert_eq!(r.next_event(&cfg), Some(hour / 55_000 * 55_000 + 55_000));
    }

    #[test]
    fn validation_names_the_field() {
        let bad = DcqcnConfig {
            dce_tcp_g: 0,
            ..Default::default()
        };
        assert!(bad
            .validate(LINE)
            .unwrap_err()
            .to_string()
            .contains("dce_tcp_g = 0"));
        let bad = DcqcnConfig {
            rpg_min_rate: 200_000,
            ..Default::default()
        };
        assert!(bad
            .validate(LINE)
            .unwrap_err()
            .to_string()
            .contains("rpg_min_rate = 200000"));
    }
}
