//! Link rates and timing: width x speed, line encodings, serialization and propagation.
//!
//! A link's data rate is lanes x signalling rate x encoding efficiency (IBA vol. 2, chapter 5
//! and 6; IBTA release notes for FDR..NDR):
//!
//! | speed | signalling per lane | encoding | data per lane | 4x data rate |
//! |---|---|---|---|---|
//! | SDR | 2.5 Gbaud | 8b/10b | 2 Gb/s | 8 Gb/s |
//! | DDR | 5 Gbaud | 8b/10b | 4 Gb/s | 16 Gb/s |
//! | QDR | 10 Gbaud | 8b/10b | 8 Gb/s | 32 Gb/s |
//! | FDR10 | 10.3125 Gbaud | 64b/66b | 10 Gb/s | 40 Gb/s |
//! | FDR | 14.0625 Gbaud | 64b/66b | 13.64 Gb/s | 54.55 Gb/s |
//! | EDR | 25.78125 Gbaud | 64b/66b | 25 Gb/s | 100 Gb/s |
//! | HDR | 53.125 Gb/s (PAM4) | 256b/257b + RS(544,514) FEC | 50 Gb/s | 200 Gb/s |
//! | NDR | 106.25 Gb/s (PAM4) | 256b/257b + RS(544,514) FEC | 100 Gb/s | 400 Gb/s |
//!
//! (256/257 x 514/544 = 16/17 exactly, so HDR and NDR carry exactly the nominal 50 and 100
//! Gb/s per lane. What is modelled is that nominal data rate over the 53.125/106.25 Gb/s
//! signalling; the 256b/257b + RS(544,514) breakdown is the Ethernet 200G/400G scheme that
//! yields it, not checked against the IBTA physical-layer volume.)
//!
//! Serialization time is computed from the packet length in bytes, LRH through VCRC (or the
//! 6 bytes of a flow-control packet), with exact integer arithmetic, rounded up to the next
//! picosecond. Start/end delimiters, idles and skip ordered sets are not modelled: the link
//! carries packets back to back at the data rate.

use crate::time::Picos;
use serde::Deserialize;

/// Link width (number of lanes), IBA 5.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
pub enum LinkWidth {
    /// 1 lane.
    #[serde(rename = "1x")]
    X1,
    /// 2 lanes.
    #[serde(rename = "2x")]
    X2,
    /// 4 lanes, the common width.
    #[serde(rename = "4x")]
    X4,
    /// 8 lanes.
    #[serde(rename = "8x")]
    X8,
    /// 12 lanes.
    #[serde(rename = "12x")]
    X12,
}

impl LinkWidth {
    /// Number of lanes.
    pub fn lanes(self) -> u64 {
        match self {
            LinkWidth::X1 => 1,
            LinkWidth::X2 => 2,
            LinkWidth::X4 => 4,
            LinkWidth::X8 => 8,
            LinkWidth::X12 => 12,
        }
    }
}

/// Link speed (per-lane signalling and encoding generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum LinkSpeed {
    /// Single data rate, 2.5 Gbaud 8b/10b.
    Sdr,
    /// Double data rate, 5 Gbaud 8b/10b.
    Ddr,
    /// Quad data rate, 10 Gbaud 8b/10b.
    Qdr,
    /// FDR10, 10.3125 Gbaud 64b/66b.
    Fdr10,
    /// Fourteen data rate, 14.0625 Gbaud 64b/66b.
    Fdr,
    /// Enhanced data rate, 25.78125 Gbaud 64b/66b.
    Edr,
    /// High data rate, 53.125 Gb/s PAM4 with FEC.
    Hdr,
    /// Next data rate, 106.25 Gb/s PAM4 with FEC.
    Ndr,
}

impl LinkSpeed {
    /// Signalling rate per lane in kilobaud (bits per second / 1000 on the wire).
    pub fn lane_kbaud(self) -> u64 {
        match self {
            LinkSpeed::Sdr => 2_500_000,
            LinkSpeed::Ddr => 5_000_000,
            LinkSpeed::Qdr => 10_000_000,
            LinkSpeed::Fdr10 => 10_312_500,
            LinkSpeed::Fdr => 14_062_500,
            LinkSpeed::Edr => 25_781_250,
            LinkSpeed::Hdr => 53_125_000,
            LinkSpeed::Ndr => 106_250_000,
        }
    }

    /// Encoding efficiency as (data bits, line bits).
    pub fn encoding(self) -> (u64, u64) {
        match self {
            LinkSpeed::Sdr | LinkSpeed::Ddr | LinkSpeed::Qdr => (8, 10),
            LinkSpeed::Fdr10 | LinkSpeed::Fdr | LinkSpeed::Edr => (64, 66),
            // 256b/257b transcoding times RS(544,514) FEC = 16/17.
            LinkSpeed::Hdr | LinkSpeed::Ndr => (16, 17),
        }
    }

    /// Human name as IB tools print it.
    pub fn name(self) -> &'static str {
        match self {
            LinkSpeed::Sdr => "SDR",
            LinkSpeed::Ddr => "DDR",
            LinkSpeed::Qdr => "QDR",
            LinkSpeed::Fdr10 => "FDR10",
            LinkSpeed::Fdr => "FDR",
            LinkSpeed::Edr => "EDR",
            LinkSpeed::Hdr => "HDR",
            LinkSpeed::Ndr => "NDR",
        }
    }
}

/// The rate of one link direction, with exact timing arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkRate {
    /// Width.
    pub width: LinkWidth,
    /// Speed.
    pub speed: LinkSpeed,
}

impl LinkRate {
    /// A rate from width and speed.
    pub fn new(width: LinkWidth, speed: LinkSpeed) -> Self {
        LinkRate { width, speed }
    }

    /// Data rate in bits per second (after encoding), rounded down to whole bits.
    pub fn data_bps(&self) -> u64 {
        let (num, den) = self.speed.encoding();
        self.speed.lane_kbaud() * 1000 * self.width.lanes() * num / den
    }

    /// Time to serialize `bytes` bytes on this link, rounded up to a picosecond.
    ///
    /// t = bytes x 8 x den / (num x kbaud x 1000 x lanes) seconds.
    pub fn serialize_ps(&self, bytes: u64) -> Picos {
        let (num, den) = self.speed.encoding();
        let numer = bytes as u128 * 8 * den as u128 * 1_000_000_000;
        let denom = num as u128 * self.speed.lane_kbaud() as u128 * self.width.lanes() as u128;
        numer.div_ceil(denom) as Picos
    }

    /// One symbol time: the time a single lane takes to carry one byte of data. Flow-control
    /// packets are due at least every 65,536 symbol times (IBA 7.9.4.2).
    pub fn symbol_time_ps(&self) -> Picos {
        let (num, den) = self.speed.encoding();
        let numer = 8u128 * den as u128 * 1_000_000_000;
        let denom = num as u128 * self.speed.lane_kbaud() as u128;
        numer.div_ceil(denom) as Picos
    }

    /// `n` symbol times, computed without per-symbol rounding.
    pub fn symbol_times_ps(&self, n: u64) -> Picos {
        let (num, den) = self.speed.encoding();
        let numer = n as u128 * 8 * den as u128 * 1_000_000_000;
        let denom = num as u128 * self.speed.lane_kbaud() as u128;
        numer.div_ceil(denom) as Picos
    }

    /// Precomputed serialization arithmetic for per-packet use (no 128-bit division).
    pub fn timing(&self) -> SerTiming {
        let (num, den) = self.speed.encoding();
        let mut n = 8u128 * den as u128 * 1_000_000_000;
        let mut d = num as u128 * self.speed.lane_kbaud() as u128 * self.width.lanes() as u128;
        let g = gcd(n, d);
        n /= g;
        d /= g;
        SerTiming {
            num: n as u64,
            den: d as u64,
        }
    }

    /// "4x EDR" style name.
    pub fn name(&self) -> String {
        format!("{}x {}", self.width.lanes(), self.speed.name())
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Picoseconds per byte of a link as a reduced fraction `num / den`, for the per-packet
/// path: at EDR, HDR and NDR `den` is 1 and serialization is one multiplication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SerTiming {
    num: u64,
    den: u64,
}

impl SerTiming {
    /// Time to serialize `bytes` (at most 2^20), rounded up to a picosecond; equal to
    /// [`LinkRate::serialize_ps`].
    #[inline]
    pub fn ps(&self, bytes: u64) -> Picos {
        let n = bytes * self.num;
        if self.den == 1 {
            n
        } else {
            n.div_ceil(self.den)
        }
    }
}

/// Default signal propagation delay in cables: 5 ns per metre (copper and fibre are both
/// close to 2/3 c).
pub const DEFAULT_PS_PER_METRE: Picos = 5_000;

/// Propagation delay of a cable of `metres` at `ps_per_metre`.
pub fn propagation_ps(metres: f64, ps_per_metre: Picos) -> Picos {
    // Rounded to the picosecond once, at configuration time; never on a per-packet path.
    (metres * ps_per_metre as f64).round().max(0.0) as Picos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_rates_match_the_ibta_table() {
        let r = |w, s| LinkRate::new(w, s).data_bps();
        assert_eq!(r(LinkWidth::X4, LinkSpeed::Sdr), 8_000_000_000);
        assert_eq!(r(LinkWidth::X4, LinkSpeed::Ddr), 16_000_000_000);
        assert_eq!(r(LinkWidth::X4, LinkSpeed::Qdr), 32_000_000_000);
        assert_eq!(r(LinkWidth::X4, LinkSpeed::Fdr10), 40_000_000_000);
        assert_eq!(r(LinkWidth::X4, LinkSpeed::Fdr), 54_545_454_545);
        assert_eq!(r(LinkWidth::X4, LinkSpeed::Edr), 100_000_000_000);
        assert_eq!(r(LinkWidth::X4, LinkSpeed::Hdr), 200_000_000_000);
        assert_eq!(r(LinkWidth::X4, LinkSpeed::Ndr), 400_000_000_000);
        assert_eq!(r(LinkWidth::X1, LinkSpeed::Edr), 25_000_000_000);
        assert_eq!(r(LinkWidth::X12, LinkSpeed::Qdr), 96_000_000_000);
    }

    #[test]
    fn serialization_is_exact_at_edr_and_rounds_up_at_fdr() {
        let edr = LinkRate::new(LinkWidth::X4, LinkSpeed::Edr);
        // 100 Gb/s: 80 ps per byte.
        assert_eq!(edr.serialize_ps(1), 80);
        assert_eq!(edr.serialize_ps(4122), 4122 * 80);
        assert_eq!(edr.serialize_ps(6), 480);
        let ndr = LinkRate::new(LinkWidth::X4, LinkSpeed::Ndr);
        assert_eq!(ndr.serialize_ps(64), 1280);
        let fdr = LinkRate::new(LinkWidth::X4, LinkSpeed::Fdr);
        // 8 x 66 / (64 x 14.0625 x 4) ns = 146.66.. ps per byte.
        assert_eq!(fdr.serialize_ps(3), 440);
        assert_eq!(fdr.serialize_ps(1), 147);
        let sdr1 = LinkRate::new(LinkWidth::X1, LinkSpeed::Sdr);
        assert_eq!(sdr1.serialize_ps(1), 4_000);
    }

    #[test]
    fn fast_timing_matches_exact_serialization() {
        for speed in [
            LinkSpeed::Sdr,
            LinkSpeed::Ddr,
            LinkSpeed::Qdr,
            LinkSpeed::Fdr10,
            LinkSpeed::Fdr,
            LinkSpeed::Edr,
            LinkSpeed::Hdr,
            LinkSpeed::Ndr,
        ] {
            for width in [
                LinkWidth::X1,
                LinkWidth::X2,
                LinkWidth::X4,
                LinkWidth::X8,
                LinkWidth::X12,
            ] {
                let r = LinkRate::new(width, speed);
                let t = r.timing();
                for bytes in [1u64, 6, 8, 30, 282, 4122, 4185, 8190] {
                    assert_eq!(t.ps(bytes), r.serialize_ps(bytes), "{} {bytes}", r.name());
                }
            }
        }
        assert_eq!(LinkRate::new(LinkWidth::X4, LinkSpeed::Edr).timing().den, 1);
    }

    #[test]
    fn symbol_time_is_one_byte_on_one_lane() {
        let sdr = LinkRate::new(LinkWidth::X4, LinkSpeed::Sdr);
        assert_eq!(sdr.symbol_time_ps(), 4_000);
        let edr = LinkRate::new(LinkWidth::X4, LinkSpeed::Edr);
        assert_eq!(edr.symbol_time_ps(), 320);
        assert_eq!(edr.symbol_times_ps(65_536), 65_536 * 320);
        let fdr = LinkRate::new(LinkWidth::X4, LinkSpeed::Fdr);
        assert_eq!(fdr.symbol_times_ps(3), 1_760);
    }

    #[test]
    fn propagation_per_metre() {
        assert_eq!(propagation_ps(2.0, DEFAULT_PS_PER_METRE), 10_000);
        assert_eq!(propagation_ps(0.0, DEFAULT_PS_PER_METRE), 0);
    }
}
