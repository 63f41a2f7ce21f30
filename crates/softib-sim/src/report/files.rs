//! A [`Report`] written as files: `summary.json`, `counters.csv`, `flows.csv`, `cc.csv`,
//! the SVG plots and `capture.pcap`, each only when the run has what it shows.

use super::cc_plots;
use super::csv;
use super::output::Report;
use super::plots;
use std::path::{Path, PathBuf};

impl Report {
    /// Writes `summary.json`, `counters.csv`, `flows.csv` (when there are flows), `cc.csv`
    /// (when congestion control ran) and the SVG plots into `dir` (created if needed). Returns the paths written, in a fixed order.
    pub fn write(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut written = Vec::new();
        let mut put = |name: &str, bytes: Vec<u8>| -> std::io::Result<()> {
            let p = dir.join(name);
            std::fs::write(&p, bytes)?;
            written.push(p);
            Ok(())
        };
        let mut json = serde_json::to_vec_pretty(&self.summary).map_err(std::io::Error::other)?;
        json.push(b'\n');
        put("summary.json", json)?;
        put("counters.csv", csv::counters(self).into_bytes())?;
        if !self.summary.flows.is_empty() {
            put("flows.csv", csv::flows(self).into_bytes())?;
            put("bandwidth.svg", plots::bandwidth(self).into_bytes())?;
        }
        if let Some(c) = &self.summary.congestion_control {
            put("cc.csv", super::cc::csv(c).into_bytes())?;
            put("ccti.svg", cc_plots::ccti_plot(self, c).into_bytes())?;
            put("fecn_becn.svg", cc_plots::marks_plot(self, c).into_bytes())?;
        }
        if let Some(pcap) = &self.pcap {
            put("capture.pcap", pcap.clone())?;
        }
        if self.series.iter().any(|s| !s.is_empty()) {
            put("xmit_wait.svg", plots::xmit_wait(self).into_bytes())?;
            put("buffers.svg", plots::buffers(self).into_bytes())?;
        }
        Ok(written)
    }
}
