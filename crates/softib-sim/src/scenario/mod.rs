//! Scenario files: TOML describing a fabric (settings, topology, QoS).
//!
//! Every table denies unknown keys, and every value is checked; errors name the key and the
//! line (`toml`'s parser reports the position of syntax and type errors; the semantic checks
//! here keep the span of the value they reject).
//!
//! ```toml
//! seed = 7
//! [fabric]
//! link_speed = "EDR"          # SDR DDR QDR FDR10 FDR EDR HDR NDR
//! link_width = "4x"           # 1x 2x 4x 8x 12x
//! cable_m = 2.0               # or link_delay_ns
//! rx_buffer_bytes = 65536     # per data VL, advertised at link bring-up
//! forwarding = "cut-through"  # or "store-and-forward"
//! switch_latency_ns = 100
//! routing_engine = "ftree"    # OpenSM engine name: minhop (default) or ftree
//! [topology]
//! kind = "single-switch"      # back-to-back, single-switch, fat-tree-2, fat-tree-3, explicit
//!                             # (or, instead of kind: ibnetdiscover = "fabric.txt")
//! hosts = 8
//! switch_ports = 36
//! [qos]                       # OpenSM keys, see softib_fabric::qos
//! qos_max_vls = 2
//! qos_vlarb_low = "0:32,1:32"
//! [congestion_control]        # OpenSM keys, see softib_fabric::cc_switch
//! congestion_control = true
//! cc_sw_cong_setting_threshold = 15
//! cc_ca_cong_setting_ccti_timer = ["0 20"]   # per SL: "<SL> <value>"
//! cc_cct = "0:0,0:1,0:2,0:3"
//! ```
//!
//! One child module per table, each owning its schema (the serde structs) and its plan (what
//! the table means once checked against the topology): [`fabric`] `[fabric]`, [`topology`]
//! `[topology]` (with [`ibnetdiscover`], a real fabric's `ibnetdiscover` dump read in),
//! [`congestion`] `[congestion_control]` (`[qos]` is
//! [`softib_fabric::qos::QosOptions`] as it stands), [`streams`] `[[stream]]` raw packet
//! streams, data or VL15 management, [`flows`] `[[flow]]` perftest-like traffic on the
//! transport engine, [`hosts`] `[[host]]` an engine host's receive processing, [`faults`]
//! `[[fault]]` link flaps and responder stalls. [`pattern`] holds the who-sends-to-whom keys
//! streams and flows share, [`source`] the error type and the line lookup every table
//! reports through, [`overrides`] the `--set KEY=VALUE` edits of the text. The children know
//! nothing of [`Scenario`]: it hands each the pieces it needs.

pub mod congestion;
pub mod fabric;
pub mod faults;
pub mod flows;
pub mod hosts;
pub mod ibnetdiscover;
pub mod overrides;
pub mod pattern;
pub mod source;
pub mod streams;
pub mod subnet_manager;
pub mod topology;

pub use self::congestion::CcTable;
pub use self::fabric::FabricSection;
pub use self::faults::FaultEntry;
pub use self::flows::{FlowEntry, FlowPlan};
pub use self::hosts::{HostEntry, RxModel};
pub use self::source::{ScenarioError, Source};
pub use self::streams::{SourcePlan, StreamEntry};
pub use self::topology::{parse_port_ref, TopologyKind, TopologySection};

use serde::Deserialize;
use softib_fabric::cc_switch::OpensmCc;
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::qos::QosOptions;
use softib_fabric::rng::SeedTree;
use softib_fabric::topology::Topology;
use std::collections::BTreeMap;
use toml::Spanned;

/// A whole scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Seed of every random stream.
    #[serde(default)]
    pub seed: u64,
    /// Simulated duration, microseconds.
    pub duration_us: Option<u64>,
    /// Fabric settings.
    #[serde(default)]
    pub fabric: FabricSection,
    /// The topology.
    pub topology: TopologySection,
    /// QoS in OpenSM's keys; absent = one data VL.
    pub qos: Option<QosOptions>,
    /// Congestion control in OpenSM's keys (`congestion_control`, `cc_sw_cong_setting_*`,
    /// `cc_ca_cong_setting_*`, `cc_cct`); absent = off. A per-SL key takes `"<SL> <value>"`
    /// or an array of them.
    pub congestion_control: Option<CcTable>,
    /// Raw packet streams ([`streams`]).
    #[serde(default)]
    pub stream: Vec<StreamEntry>,
    /// Transport-engine flows ([`flows`]).
    #[serde(default)]
    pub flow: Vec<FlowEntry>,
    /// Scheduled faults ([`faults`]).
    #[serde(default)]
    pub fault: Vec<FaultEntry>,
    /// Per-host behaviour of engine HCAs ([`hosts`]).
    #[serde(default)]
    pub host: Vec<HostEntry>,
    /// Ports whose traffic `softib sim` captures in both directions into `capture.pcap`,
    /// as `"NODE:PORT"` (switch ports too; see [`softib_fabric::tap`]).
    #[serde(default)]
    pub pcap_ports: Vec<Spanned<String>>,
    /// Who configures the fabric ([`subnet_manager`]): softib's routing, or an external SM.
    #[serde(default)]
    pub subnet_manager: subnet_manager::SubnetManagerSection,
    #[serde(skip)]
    source: Source,
}

impl Scenario {
    /// Parses a scenario from TOML text; files it names (`[topology] ibnetdiscover`) are
    /// relative to the current directory.
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        Self::parse_in(text, std::path::Path::new("."))
    }

    /// Parses a scenario from TOML text whose file lives in `dir`: the files it names are
    /// relative to `dir`.
    pub fn parse_in(text: &str, dir: &std::path::Path) -> Result<Self, ScenarioError> {
        let mut s: Scenario = toml::from_str(text)?;
        s.source = Source::new(text);
        let default_rate = s.config()?.link_rate;
        s.topology.import(dir, default_rate, &s.source)?;
        // Build once to surface semantic errors at load time.
        s.topology()?;
        s.config()?;
        s.traffic_check()?;
        s.fault_check()?;
        s.host_models()?;
        s.congestion_control()?;
        s.capture_ports()?;
        s.external_sm_host()?;
        Ok(s)
    }

    /// Reads and parses a scenario file.
    pub fn load(path: &std::path::Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse_in(&text, path.parent().unwrap_or(std::path::Path::new(".")))
    }

    /// The text this scenario was parsed from, for errors found after parsing.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The fabric settings this scenario describes ([`fabric`]).
    pub fn config(&self) -> Result<FabricConfig, ScenarioError> {
        self.fabric
            .config(self.seed, self.qos.as_ref(), &self.source)
    }

    /// The topology this scenario describes ([`topology`]).
    pub fn topology(&self) -> Result<Topology, ScenarioError> {
        self.topology.build(&|| self.config(), &self.source)
    }

    /// The `[congestion_control]` table as OpenSM would read it (`None` without the table).
    /// HCAs take their `DeviceConfig::cc` from [`OpensmCc::device_cc`].
    pub fn congestion_control(&self) -> Result<Option<OpensmCc>, ScenarioError> {
        congestion::opensm_cc(self.congestion_control.as_ref(), &self.source)
    }

    /// The ports of `pcap_ports` as (node name, port number), each checked to exist and be
    /// cabled.
    pub fn capture_ports(&self) -> Result<Vec<(String, u8)>, ScenarioError> {
        let topo = self.topology()?;
        let mut out = Vec::with_capacity(self.pcap_ports.len());
        for (i, entry) in self.pcap_ports.iter().enumerate() {
            let key = format!("pcap_ports[{i}]");
            match parse_port_ref(&topo, entry.get_ref()) {
                Ok(p) => out.push(p),
                Err(reason) => return self.source.invalid(&key, entry.span(), reason),
            }
        }
        Ok(out)
    }

    /// The sources of every `[[stream]]`, checked against the topology ([`streams`]).
    pub fn stream_plan(&self) -> Result<Vec<SourcePlan>, ScenarioError> {
        streams::stream_plan(&self.stream, &self.topology()?, &self.source)
    }

    /// The QP pairs of every `[[flow]]`, tagged from `first_flow` ([`flows`]).
    pub fn flow_plan(&self, first_flow: u32) -> Result<Vec<FlowPlan>, ScenarioError> {
        flows::flow_plan(&self.flow, &self.topology()?, first_flow, &self.source)
    }

    /// Checks every `[[stream]]` and `[[flow]]`, and that no host carries both (an HCA
    /// port runs either the packet generator or the transport engine).
    pub fn traffic_check(&self) -> Result<(), ScenarioError> {
        let streams = self.stream_plan()?;
        let flows = self.flow_plan(streams.len() as u32)?;
        let mut generator_hosts = std::collections::BTreeSet::new();
        for s in &streams {
            generator_hosts.insert(s.host.as_str());
            generator_hosts.extend(s.dests.iter().map(String::as_str));
        }
        for (i, f) in flows.iter().enumerate() {
            for h in [&f.src, &f.dst] {
                if generator_hosts.contains(h.as_str()) {
                    return Err(self.source.error_at(
                        "flow",
                        0..0,
                        format!(
                            "{} (pair {i}) uses {h}, which a [[stream]] also uses: a host runs either a stream or engine flows",
                            f.info.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks the `[[fault]]` tables against the topology ([`faults`]).
    fn fault_check(&self) -> Result<(), ScenarioError> {
        faults::check(&self.fault, &self.topology()?, &self.source)
    }

    /// The receive models of the hosts that have one, checked ([`hosts`]).
    pub fn host_models(&self) -> Result<BTreeMap<String, RxModel>, ScenarioError> {
        hosts::models(&self.host, &self.fault, &|| self.flow_plan(0), &self.source)
    }

    /// Installs the receive models on the engine HCAs of `fabric` (attached by
    /// [`crate::setup::attach_flows`]).
    pub fn apply_host_models(&self, fabric: &mut Fabric) -> Result<(), ScenarioError> {
        hosts::apply(self.host_models()?, self.seed, fabric);
        Ok(())
    }

    /// The HCA an external subnet manager runs on (`[subnet_manager] external = true`), or
    /// `None` when softib's own routing configures the fabric.
    pub fn external_sm_host(&self) -> Result<Option<usize>, ScenarioError> {
        self.subnet_manager.sm_host(&self.topology()?, &self.source)
    }

    /// Builds the fabric (endpoints are attached by the caller), with the Annex A10 switch
    /// marking of `[congestion_control]` installed when it is on and its CA setting recorded
    /// for the engine HCAs (`Fabric::ca_congestion_control`).
    pub fn build(&self) -> Result<Fabric, ScenarioError> {
        let config = self.config()?;
        let (rx, seeds) = (config.rx_buffer_bytes, SeedTree::new(config.seed));
        let mut fabric = Fabric::new(self.topology()?, config)?;
        faults::schedule(&self.fault, &mut fabric, &self.source)?;
        if let Some(cc) = self.congestion_control()?.filter(|cc| cc.enabled) {
            if let Some(m) = cc.marker(rx, &seeds) {
                fabric.set_congestion_marker(Box::new(m));
            }
            fabric.set_ca_congestion_control(cc);
        }
        Ok(fabric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_fabric::fabric::Forwarding;
    use softib_fabric::link::LinkSpeed;
    use softib_fabric::routing::RoutingEngine;

    #[test]
    fn congestion_control_table_uses_opensm_keys() {
        let base = "[topology]\nkind = \"single-switch\"\nhosts = 2\n";
        let s = Scenario::parse(&format!(
            "{base}[congestion_control]\ncongestion_control = true\n\
             cc_sw_cong_setting_threshold = 12\n\
             cc_ca_cong_setting_ccti_timer = [\"0 20\", \"1 40\"]\n\
             cc_cct = \"0:0,0:1\"\n"
        ))
        .unwrap();
        let cc = s.congestion_control().unwrap().unwrap();
        assert!(cc.enabled);
        assert_eq!(cc.switch.threshold, 12);
        assert_eq!(cc.ca.config.entries[1].ccti_timer, 40);
        s.build().unwrap();
        let e = Scenario::parse(&format!(
            "{base}[congestion_control]\ncc_sw_cong_setting_threshold = 16\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 5") && e.contains("cc_sw_cong_setting_threshold"),
            "{e}"
        );
        let e = Scenario::parse(&format!("{base}[congestion_control]\nthreshold = 3\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an OpenSM"), "{e}");
    }

    #[test]
    fn a_full_scenario_parses_and_builds() {
        let s = Scenario::parse(
            r#"
seed = 9
duration_us = 100
[fabric]
link_speed = "HDR"
link_width = "4x"
cable_m = 3.0
rx_buffer_bytes = 32768
forwarding = "store-and-forward"
crossbar_speedup = 1.5
switch_latency_ns = 130
routing_engine = "ftree"
xmit_wait_tick_ns = 4
sample_interval_us = 5
[topology]
kind = "single-switch"
hosts = 4
switch_ports = 8
[[topology.links]]
a = "sw0:2"
b = "h1:1"
rx_buffer_bytes_b = 8192
speed = "EDR"
[qos]
qos_max_vls = 2
qos_vlarb_low = "0:32,1:32"
qos_sl2vl = "0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1"
"#,
        )
        .unwrap();
        let c = s.config().unwrap();
        assert_eq!(c.link_rate.speed, LinkSpeed::Hdr);
        assert_eq!(c.link_delay_ps, 15_000);
        assert_eq!(c.crossbar_speedup_permille, 1500);
        assert_eq!(c.forwarding, Forwarding::StoreAndForward);
        assert_eq!(c.routing, RoutingEngine::Ftree);
        let t = s.topology().unwrap();
        let l = t
            .links
            .iter()
            .find(|l| t.nodes[l.a.node].name == "h1")
            .unwrap();
        // Written as sw0 -- h1 in the file, stored h1 -- sw0: the buffer follows h1.
        assert_eq!(l.rx_buffer_a, Some(8192));
        assert_eq!(l.rate.unwrap().speed, LinkSpeed::Edr);
        let f = s.build().unwrap();
        assert_eq!(f.operational_vls("h0", 1), Some(2));
    }

    #[test]
    fn extra_delay_adds_to_the_cable() {
        let s = Scenario::parse(
            "[fabric]\ncable_m = 2.0\n[topology]\nkind = \"single-switch\"\nhosts = 2\n\
             [[topology.links]]\na = \"h1:1\"\nb = \"sw0:2\"\nextra_delay_ns = 500\n\
             [[topology.links]]\na = \"h0:1\"\nb = \"sw0:1\"\nlength_m = 10.0\nextra_delay_ns = 1\n",
        )
        .unwrap();
        let t = s.topology().unwrap();
        let delay = |h: &str| {
            t.links
                .iter()
                .find(|l| t.nodes[l.a.node].name == h || t.nodes[l.b.node].name == h)
                .and_then(|l| l.delay_ps)
        };
        // 2 m of default cable (10 ns) + 500 ns; 10 m (50 ns) + 1 ns.
        assert_eq!(delay("h1"), Some(510_000));
        assert_eq!(delay("h0"), Some(51_000));
    }

    #[test]
    fn unknown_keys_are_errors_with_their_line() {
        let e =
            Scenario::parse("[topology]\nkind = \"back-to-back\"\n[fabric]\nlink_sped = \"EDR\"\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("line 4"), "{e}");
        assert!(e.contains("link_sped"), "{e}");
        let e = Scenario::parse(
            "[topology]\nkind = \"back-to-back\"\n[qos]\nqos_vlarb_mid = \"0:1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 4") && e.contains("qos_vlarb_mid"), "{e}");
    }

    #[test]
    fn bad_values_are_errors_with_key_and_line() {
        let e = Scenario::parse(
            "[topology]\nkind = \"back-to-back\"\n[fabric]\nlink_speed = \"XDR\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 4") && e.contains("XDR"), "{e}");
        let e =
            Scenario::parse("[topology]\nkind = \"back-to-back\"\n[qos]\nqos_sl2vl = \"0,1\"\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("line 4") && e.contains("expected 16"), "{e}");
        let e = Scenario::parse(
            "[topology]\nkind = \"back-to-back\"\n[fabric]\n\nfc_period_symbols = 70000\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("line 5: fabric.fc_period_symbols"), "{e}");
        let e = Scenario::parse(
            "[topology]\nkind = \"single-switch\"\nhosts = 40\nswitch_ports = 36\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("line 3: topology.hosts"), "{e}");
        let e = Scenario::parse(
            "[topology]\nkind = \"explicit\"\nnodes = [{name = \"a\", kind = \"hca\"}]\n[[topology.links]]\na = \"a:1\"\nb = \"zz:1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("line 6: topology.links[0].b: no node called `zz`"),
            "{e}"
        );
    }
}
