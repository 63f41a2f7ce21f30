//! perftest's report lines and the statistics behind them (perftest 4.5,
//! `perftest_parameters.c`: `print_report_bw`, `print_full_bw_report`, `print_report_lat`),
//! so a softib run reads like a stock one and scripts that parse perftest output keep
//! working.

/// The dashed rule perftest prints around its tables.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// Units of the bandwidth columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwUnit {
    /// MiB/s, which perftest labels MB/sec (2^20 bytes).
    MBps,
    /// Gb/s (10^9 bits), `--report_gbits`.
    Gbps,
}

impl BwUnit {
    /// Bytes per second in one unit.
    fn factor(self) -> f64 {
        match self {
            BwUnit::MBps => 1_048_576.0,
            BwUnit::Gbps => 125_000_000.0,
        }
    }
}

/// The bandwidth table's header line.
pub fn bw_header(unit: BwUnit) -> &'static str {
    match unit {
        BwUnit::MBps => {
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        }
        BwUnit::Gbps => {
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        }
    }
}

/// The latency table's header line (iterations mode).
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// The latency table's header line (duration mode).
pub const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// One bandwidth result, as printed and as exchanged with the peer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwResult {
    /// Message size, bytes.
    pub size: u64,
    /// Messages counted.
    pub iters: u64,
    /// Peak bandwidth in `unit` (0 when not measured, as perftest prints it).
    pub peak: f64,
    /// Average bandwidth in `unit`.
    pub avg: f64,
    /// Average message rate, millions per second.
    pub msg_rate: f64,
}

/// Computes a bandwidth result from per-message post and completion times (seconds from
/// any origin). `tcompleted[j]` is when the completion covering message `j` was seen, so
/// messages covered by one signalled completion share it. The peak is the best average
/// over every window that starts at a post and ends at a signalled completion (perftest's
/// definition); `with_peak` false gives 0 (perftest skips it for duration runs, the SEND
/// server and more than 20,000 iterations).
pub fn bw_from_times(
    size: u64,
    tposted: &[f64],
    tcompleted: &[f64],
    cq_mod: usize,
    unit: BwUnit,
    with_peak: bool,
) -> BwResult {
    let n = tposted.len().min(tcompleted.len());
    if n == 0 {
        return BwResult {
            size,
            iters: 0,
            peak: 0.0,
            avg: 0.0,
            msg_rate: 0.0,
        };
    }
    let total = (tcompleted[n - 1] - tposted[0]).max(1e-9);
    let mut peak = 0.0;
    if with_peak {
        let cq_mod = cq_mod.max(1);
        let mut best = tcompleted[0] - tposted[0];
        for (i, &tp) in tposted[..n].iter().enumerate() {
            let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
            while j < n {
                let t = (tcompleted[j] - tp) / (j - i + 1) as f64;
                if t < best {
                    best = t;
                }
                j += cq_mod;
            }
            if n % cq_mod != 0 {
                let j = n - 1;
                let t = (tcompleted[j] - tp) / (j - i + 1) as f64;
                if t < best {
                    best = t;
                }
            }
        }
        peak = size as f64 / best.max(1e-12) / unit.factor();
    }
    rate_result(size, n as u64, total, unit, peak)
}

/// A bandwidth result from a message count over an interval (no peak).
pub fn bw_from_count(size: u64, count: u64, seconds: f64, unit: BwUnit) -> BwResult {
    rate_result(size, count, seconds.max(1e-9), unit, 0.0)
}

fn rate_result(size: u64, n: u64, seconds: f64, unit: BwUnit, peak: f64) -> BwResult {
    BwResult {
        size,
        iters: n,
        peak,
        avg: (size as f64 * n as f64) / seconds / unit.factor(),
        msg_rate: n as f64 / seconds / 1e6,
    }
}

/// A bandwidth line, perftest's `REPORT_FMT` (or `REPORT_FMT_EXT`, with six decimals, when
/// reporting Gb/s below 0.1).
pub fn bw_line(r: &BwResult, unit: BwUnit) -> String {
    if unit == BwUnit::Gbps && r.avg < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.size, r.iters, r.peak, r.avg, r.msg_rate
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            r.size, r.iters, r.peak, r.avg, r.msg_rate
        )
    }
}

/// Latency statistics, microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatResult {
    /// Message size, bytes.
    pub size: u64,
    /// Iterations run.
    pub iters: u64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample kept (perftest drops the two largest as outliers).
    pub max: f64,
    /// Median.
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// Samples perftest drops from the top as outliers (`LAT_MEASURE_TAIL`).
const LAT_MEASURE_TAIL: usize = 2;

/// Computes latency statistics from the post times of `iters` messages (seconds): the
/// samples are the gaps between consecutive posts divided by `rtt_factor` (2 for
/// ping-pong tests, which time a round trip, 1 for READ and atomics). Needs at least
/// four posts.
pub fn lat_from_posts(size: u64, tposted: &[f64], rtt_factor: f64) -> Option<LatResult> {
    if tposted.len() < 4 {
        return None;
    }
    let mut d: Vec<f64> = tposted
        .windows(2)
        .map(|w| (w[1] - w[0]) * 1e6 / rtt_factor)
        .collect();
    d.sort_by(|a, b| a.total_cmp(b));
    let n = d.len() - LAT_MEASURE_TAIL;
    let median = if n % 2 == 0 {
        (d[n / 2] + d[n / 2 - 1]) / 2.0
    } else {
        d[n / 2]
    };
    let avg = d[..n].iter().sum::<f64>() / n as f64;
    let var = d[..n].iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    let p99 = ((n as f64 * 0.99).ceil() as usize).min(d.len() - 1);
    let p999 = ((n as f64 * 0.999).ceil() as usize).min(d.len() - 1);
    Some(LatResult {
        size,
        iters: tposted.len() as u64,
        min: d[0],
        max: d[n],
        typical: median,
        avg,
        stdev: var.sqrt(),
        p99: d[p99],
        p999: d[p999],
    })
}

/// A latency line, perftest's `REPORT_FMT_LAT`.
pub fn lat_line(r: &LatResult) -> String {
    format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        r.size, r.iters, r.min, r.max, r.typical, r.avg, r.stdev, r.p99, r.p999
    )
}

/// A duration-mode latency line, perftest's `REPORT_FMT_LAT_DUR`: mean latency and
/// transactions per second over `seconds`.
pub fn lat_dur_line(size: u64, iters: u64, seconds: f64, rtt_factor: f64) -> String {
    let n = iters.max(1) as f64;
    let lat = seconds * 1e6 / rtt_factor / n;
    let tps = iters as f64 / seconds.max(1e-9);
    format!(" {size:<7}       {iters}            {lat:<7.2}        {tps:<7.2}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_average_rate_and_peak_follow_perftest() {
        // 4 messages of 1 MiB, posted at 0, 1, 2, 3 s, all completed (cq_mod 2) at 2 and 4 s.
        let tp = [0.0, 1.0, 2.0, 3.0];
        let tc = [2.0, 2.0, 4.0, 4.0];
        let r = bw_from_times(1 << 20, &tp, &tc, 2, BwUnit::MBps, true);
        assert_eq!(r.iters, 4);
        assert!((r.avg - 1.0).abs() < 1e-9, "{r:?}");
        assert!((r.msg_rate - 1e-6).abs() < 1e-15);
        // Best window: message 1..1 (posted 1, completed 2) or 2..3 ((4-2)/2 = 1 s each),
        // i.e. 1 s per message.
        assert!((r.peak - 1.0).abs() < 1e-9, "{r:?}");
        let g = bw_from_times(125_000_000, &tp, &tc, 2, BwUnit::Gbps, false);
        assert!((g.avg - 1.0).abs() < 1e-9 && g.peak == 0.0);
    }

    #[test]
    fn lines_have_perftest_columns() {
        let r = BwResult {
            size: 65536,
            iters: 5000,
            peak: 2713.5,
            avg: 2700.25,
            msg_rate: 0.043204,
        };
        assert_eq!(
            bw_line(&r, BwUnit::MBps),
            " 65536      5000             2713.50            2700.25\t\t   0.043204"
        );
        let small = BwResult { avg: 0.05, ..r };
        assert!(bw_line(&small, BwUnit::Gbps).contains("0.050000"));
        assert!(bw_header(BwUnit::Gbps).contains("BW average[Gb/sec]"));
    }

    #[test]
    fn latency_statistics_drop_the_tail_and_take_the_median() {
        // Gaps 1..=10 us (round trips of 2..=20 us with rtt factor 2 -> 1..=10).
        let mut t = vec![0.0];
        for g in 1..=10 {
            let last = *t.last().unwrap();
            t.push(last + 2.0 * g as f64 * 1e-6);
        }
        let r = lat_from_posts(2, &t, 2.0).unwrap();
        assert_eq!(r.iters, 11);
        assert!((r.min - 1.0).abs() < 1e-9);
        // 10 samples, the two largest dropped: 1..=8; median (4+5)/2, max is sample 9.
        assert!((r.typical - 4.5).abs() < 1e-9, "{r:?}");
        assert!((r.avg - 4.5).abs() < 1e-9);
        assert!((r.max - 9.0).abs() < 1e-9);
        assert!(lat_line(&r).starts_with(" 2       11          1.00"));
        assert!(lat_from_posts(2, &[0.0, 1.0, 2.0], 2.0).is_none());
    }
}
