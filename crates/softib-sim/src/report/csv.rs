//! Time series as CSV: `counters.csv` (every cabled port at every sample: cumulative
//! counters with their IBA names, receive-buffer occupancy, and when the fabric runs more
//! than one data VL, PortVLXmitWait per VL in columns `PortVLXmitWait.VL0`, ...) and `flows.csv` (bytes and
//! bandwidth of every flow per time bin). Times are exact: picoseconds written as
//! microseconds with six decimals.

use super::decimals::us;
use super::output::Report;
use softib_fabric::time::Picos;
use std::fmt::Write;

/// Header of `counters.csv`.
pub const COUNTERS_HEADER: &str = "time_us,port,PortXmitData,PortRcvData,PortXmitPkts,PortRcvPkts,PortXmitWait,errors,rx_buffer_bytes";

/// `counters.csv`: one row per sample and cabled port, in time then port order.
pub fn counters(r: &Report) -> String {
    let mut out = String::new();
    out.push_str(COUNTERS_HEADER);
    for v in 0..r.series_vls {
        let _ = write!(out, ",PortVLXmitWait.VL{v}");
    }
    out.push('\n');
    let rows = r.series.iter().map(Vec::len).max().unwrap_or(0);
    for k in 0..rows {
        for (i, (p, s)) in r.summary.ports.iter().zip(&r.series).enumerate() {
            let Some(x) = s.get(k) else { continue };
            let _ = write!(
                out,
                "{},{},{},{},{},{},{},{},{}",
                us(x.time_ps),
                p.port,
                x.xmit_data,
                x.rcv_data,
                x.xmit_pkts,
                x.rcv_pkts,
                x.xmit_wait,
                x.errors,
                x.rx_blocks as u64 * 64
            );
            let vls = r.series_vls;
            if let Some(w) = r
                .vl_series
                .get(i)
                .and_then(|w| w.get(k * vls..(k + 1) * vls))
            {
                for x in w {
                    let _ = write!(out, ",{x}");
                }
            }
            out.push('\n');
        }
    }
    out
}

/// Header of `flows.csv`.
pub const FLOWS_HEADER: &str = "bin_start_us,bin_end_us,flow,name,bytes,gbps";

/// Number of flow bins covering the run.
pub fn bin_count(r: &Report) -> usize {
    (r.duration_ps.div_ceil(r.bin_ps.max(1)) as usize).max(1)
}

/// `flows.csv`: one row per time bin and flow, in time then flow order. The bandwidth is
/// the bin's bytes over the bin's width (the last bin is cut at the end of the run).
pub fn flows(r: &Report) -> String {
    let mut out = String::new();
    out.push_str(FLOWS_HEADER);
    out.push('\n');
    for k in 0..bin_count(r) {
        let start = k as Picos * r.bin_ps;
        let end = (start + r.bin_ps).min(r.duration_ps.max(start + 1));
        for (f, bins) in r.summary.flows.iter().zip(&r.flow_bins) {
            let bytes = bins.get(k).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{},{},{},{},{},{:.4}",
                us(start),
                us(end),
                f.id,
                f.name,
                bytes,
                bytes as f64 * 8_000.0 / (end - start) as f64
            );
        }
    }
    out
}
