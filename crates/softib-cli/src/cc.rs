//! Congestion control options of the traffic tools: which algorithm (`--cc`), its settings
//! (`--dcqcn` with ConnectX's parameter names, `--cc-config` with an OpenSM configuration
//! for the IBA CCA), the CNP spacing and the line rate. Both ends should use the same
//! `--cc`: the receiver answers ECN CE marks with CNPs, the sender slows down on them.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context as _};
use softib_net::cc::{parse_dcqcn, RoceCc};
use softib_transport::cc::{parse_opensm_ca, DcqcnConfig};

/// The congestion control algorithm (`--cc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CcChoice {
    /// No congestion control: data is not ECN-capable, CE marks are not answered.
    #[default]
    None,
    /// DCQCN (what RoCEv2 NICs run): CE marks -> CNPs -> per-QP rate limiting.
    Dcqcn,
    /// The InfiniBand CCA (IBA Annex A10) driven by CNPs; settings from --cc-config.
    Iba,
}

/// Congestion control options.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Congestion control")]
pub struct CcArgs {
    /// Congestion control algorithm; give the same on both sides.
    #[arg(long = "cc", value_enum, default_value_t = CcChoice::None)]
    pub cc: CcChoice,
    /// DCQCN settings as key=value,... with ConnectX's names (roce_rp), e.g.
    /// rpg_ai_rate=5,rpg_time_reset=300. Keys: rpg_time_reset (us), rpg_byte_reset (bytes),
    /// rpg_threshold, rpg_ai_rate, rpg_hai_rate, rpg_min_rate (Mb/s), rpg_gd (log2),
    /// dce_tcp_g, initial_alpha_value (/1024), dce_tcp_rtt, rate_reduce_monitor_period (us),
    /// rate_to_set_on_first_cnp (Mb/s).
    #[arg(long = "dcqcn", value_name = "SPEC")]
    pub dcqcn: Option<String>,
    /// OpenSM configuration file (opensm.conf syntax) with the CA's congestion settings for
    /// --cc iba: congestion_control TRUE, cc_ca_cong_setting_* per SL, cc_cct.
    #[arg(long = "cc-config", value_name = "FILE")]
    pub cc_config: Option<PathBuf>,
    /// Minimum microseconds between two CNPs to one QP (ConnectX min_time_between_cnps).
    #[arg(long = "min-time-between-cnps", value_name = "US")]
    pub min_time_between_cnps: Option<u32>,
    /// Line rate in Mb/s that congestion control paces against (default: the interface's
    /// speed from /sys/class/net, 100000 where it reports none).
    #[arg(long = "link-rate", value_name = "MBPS")]
    pub link_rate: Option<u64>,
}

impl CcArgs {
    /// The device's congestion control as the options describe it.
    pub fn roce_cc(&self) -> anyhow::Result<RoceCc> {
        if self.dcqcn.is_some() && self.cc != CcChoice::Dcqcn {
            bail!("--dcqcn sets DCQCN parameters: it needs --cc dcqcn");
        }
        if self.cc_config.is_some() && self.cc != CcChoice::Iba {
            bail!("--cc-config sets the IBA CCA: it needs --cc iba");
        }
        if self.link_rate == Some(0) {
            bail!("--link-rate must be at least 1 Mb/s");
        }
        let mut cc = match self.cc {
            CcChoice::None => RoceCc::default(),
            CcChoice::Dcqcn => {
                let spec = self.dcqcn.as_deref().unwrap_or("");
                let cfg = parse_dcqcn(spec, DcqcnConfig::default())
                    .map_err(|e| anyhow!("--dcqcn {spec:?}: {e}"))?;
                RoceCc::dcqcn(cfg)
            }
            CcChoice::Iba => {
                let path = self.cc_config.as_ref().ok_or_else(|| {
                    anyhow!(
                        "--cc iba needs --cc-config FILE: an opensm.conf with \
                         cc_ca_cong_setting_* and cc_cct (the CCT decides the slow-down)"
                    )
                })?;
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read --cc-config {}", path.display()))?;
                let ca = parse_opensm_ca(&text)
                    .map_err(|e| anyhow!("--cc-config {}: {e}", path.display()))?;
                if !ca.enabled {
                    bail!(
                        "--cc-config {}: congestion_control is not TRUE (OpenSM's default is \
                         FALSE), so OpenSM would not configure the CCA; set it to TRUE",
                        path.display()
                    );
                }
                RoceCc::iba(ca.config)
            }
        };
        if let Some(us) = self.min_time_between_cnps {
            cc.min_time_between_cnps = us;
        }
        cc.link_rate_mbps = self.link_rate;
        Ok(cc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_transport::cc::CcAlgorithm;

    fn args(cc: CcChoice) -> CcArgs {
        CcArgs {
            cc,
            ..CcArgs::default()
        }
    }

    #[test]
    fn choices_map_to_the_device_settings() {
        assert_eq!(args(CcChoice::None).roce_cc().unwrap(), RoceCc::default());
        let mut a = args(CcChoice::Dcqcn);
        a.dcqcn = Some("rpg_ai_rate=5,rpg_time_reset=300".into());
        a.min_time_between_cnps = Some(4);
        a.link_rate = Some(1000);
        let cc = a.roce_cc().unwrap();
        let CcAlgorithm::Dcqcn(d) = cc.algorithm else {
            panic!("not DCQCN: {cc:?}")
        };
        assert_eq!((d.rpg_ai_rate, d.rpg_time_reset), (5, 300));
        assert!(cc.notify);
        assert_eq!(cc.min_time_between_cnps, 4);
        assert_eq!(cc.link_rate_mbps, Some(1000));
    }

    #[test]
    fn mismatched_or_bad_options_are_refused_with_the_reason() {
        let mut a = args(CcChoice::None);
        a.dcqcn = Some("rpg_ai_rate=5".into());
        assert!(a.roce_cc().unwrap_err().to_string().contains("--cc dcqcn"));
        let mut a = args(CcChoice::Dcqcn);
        a.dcqcn = Some("rpg_ai=5".into());
        let e = a.roce_cc().unwrap_err().to_string();
        assert!(e.contains("rpg_ai") && e.contains("rpg_ai_rate"), "{e}");
        let e = args(CcChoice::Iba).roce_cc().unwrap_err().to_string();
        assert!(e.contains("--cc-config"), "{e}");
        let mut a = args(CcChoice::Dcqcn);
        a.link_rate = Some(0);
        assert!(a.roce_cc().is_err());
    }

    #[test]
    fn iba_settings_come_from_an_opensm_file() {
        let dir = std::env::temp_dir().join(format!("softib-cli-cc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let on = dir.join("on.conf");
        std::fs::write(
            &on,
            "congestion_control TRUE\ncc_ca_cong_setting_ccti_increase 0 2\n\
             cc_ca_cong_setting_ccti_timer 0 10\ncc_cct 0:0,1:1,2:2,3:3\n",
        )
        .unwrap();
        let mut a = args(CcChoice::Iba);
        a.cc_config = Some(on);
        let cc = a.roce_cc().unwrap();
        let CcAlgorithm::Iba(c) = cc.algorithm else {
            panic!("not IBA: {cc:?}")
        };
        assert_eq!(c.entries[0].ccti_increase, 2);
        assert_eq!(c.cct.entries().len(), 4);
        let off = dir.join("off.conf");
        std::fs::write(&off, "cc_cct 0:0,1:1\n").unwrap();
        a.cc_config = Some(off);
        let e = a.roce_cc().unwrap_err().to_string();
        assert!(e.contains("congestion_control"), "{e}");
        a.cc_config = Some(dir.join("missing.conf"));
        assert!(a.roce_cc().unwrap_err().to_string().contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
