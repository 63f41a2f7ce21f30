//! The `[fabric]` table: link rate and cable, receive buffers, forwarding, flow-control
//! period, counter sampling, routing engine and bit error rate, as a
//! [`softib_fabric::fabric::FabricConfig`].

use super::source::{ScenarioError, Source};
use serde::Deserialize;
use softib_fabric::fabric::{FabricConfig, Forwarding};
use softib_fabric::link::{propagation_ps, LinkRate, LinkSpeed, LinkWidth, DEFAULT_PS_PER_METRE};
use softib_fabric::qos::QosOptions;
use softib_fabric::routing::RoutingEngine;
use softib_fabric::time::{PS_PER_NS, PS_PER_US};
use toml::Spanned;

/// The `[fabric]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSection {
    /// Default link speed.
    pub link_speed: Option<LinkSpeed>,
    /// Default link width.
    pub link_width: Option<LinkWidth>,
    /// Default cable length in metres (5 ns/m).
    pub cable_m: Option<Spanned<f64>>,
    /// Default propagation delay in ns (instead of `cable_m`).
    pub link_delay_ns: Option<u64>,
    /// Receive buffer per data VL, bytes.
    pub rx_buffer_bytes: Option<Spanned<u32>>,
    /// VL15 receive buffer, packets.
    pub vl15_buffer_packets: Option<u32>,
    /// Data VLs the ports support.
    pub vl_cap: Option<Spanned<u8>>,
    /// Switch forwarding mode.
    pub forwarding: Option<Forwarding>,
    /// Crossbar speed-up (1.0 = line rate).
    pub crossbar_speedup: Option<Spanned<f64>>,
    /// Switch pipeline latency, ns.
    pub switch_latency_ns: Option<u64>,
    /// Flow-control refresh period in symbol times (<= 65536).
    pub fc_period_symbols: Option<Spanned<u64>>,
    /// PortXmitWait tick, ns.
    pub xmit_wait_tick_ns: Option<Spanned<u64>>,
    /// HCA send queue depth per VL, packets.
    pub hca_send_queue_packets: Option<Spanned<usize>>,
    /// Counter sampling interval, microseconds.
    pub sample_interval_us: Option<Spanned<u64>>,
    /// OpenSM routing engine: `minhop` (default) or `ftree`.
    pub routing_engine: Option<RoutingEngine>,
    /// Bit error rate of every cable (per bit, both directions).
    pub bit_error_rate: Option<Spanned<f64>>,
}

impl FabricSection {
    /// The fabric settings this table describes, with the scenario's `seed` and `[qos]`.
    pub fn config(
        &self,
        seed: u64,
        qos: Option<&QosOptions>,
        src: &Source,
    ) -> Result<FabricConfig, ScenarioError> {
        let f = self;
        let mut c = FabricConfig::default();
        let rate = LinkRate::new(
            f.link_width.unwrap_or(c.link_rate.width),
            f.link_speed.unwrap_or(c.link_rate.speed),
        );
        c.link_rate = rate;
        if let Some(m) = &f.cable_m {
            if !(m.get_ref().is_finite() && *m.get_ref() >= 0.0) {
                return src.invalid("fabric.cable_m", m.span(), "must be a length >= 0".into());
            }
            c.link_delay_ps = propagation_ps(*m.get_ref(), DEFAULT_PS_PER_METRE);
        }
        if let Some(ns) = f.link_delay_ns {
            c.link_delay_ps = ns * PS_PER_NS;
        }
        if let Some(b) = &f.rx_buffer_bytes {
            if *b.get_ref() < 64 {
                return src.invalid(
                    "fabric.rx_buffer_bytes",
                    b.span(),
                    "a receive buffer needs at least one 64-byte block".into(),
                );
            }
            c.rx_buffer_bytes = *b.get_ref();
        }
        if let Some(v) = f.vl15_buffer_packets {
            c.vl15_buffer_packets = v;
        }
        if let Some(v) = &f.vl_cap {
            if !(1..=15).contains(v.get_ref()) {
                return src.invalid("fabric.vl_cap", v.span(), "data VLs must be 1..=15".into());
            }
            c.vl_cap = *v.get_ref();
        }
        if let Some(m) = f.forwarding {
            c.forwarding = m;
        }
        if let Some(s) = &f.crossbar_speedup {
            let v = *s.get_ref();
            if !(v.is_finite() && (0.001..=64.0).contains(&v)) {
                return src.invalid(
                    "fabric.crossbar_speedup",
                    s.span(),
                    "must be in 0.001..=64".into(),
                );
            }
            c.crossbar_speedup_permille = (v * 1000.0).round() as u32;
        }
        if let Some(ns) = f.switch_latency_ns {
            c.switch_latency_ps = ns * PS_PER_NS;
        }
        if let Some(p) = &f.fc_period_symbols {
            if !(1..=65_536).contains(p.get_ref()) {
                return src.invalid(
                    "fabric.fc_period_symbols",
                    p.span(),
                    "IBA 7.9.4.2 requires a flow-control packet at least every 65,536 symbol times"
                        .into(),
                );
            }
            c.fc_period_symbols = *p.get_ref();
        }
        if let Some(t) = &f.xmit_wait_tick_ns {
            if *t.get_ref() == 0 {
                return src.invalid(
                    "fabric.xmit_wait_tick_ns",
                    t.span(),
                    "must be positive".into(),
                );
            }
            c.xmit_wait_tick_ps = t.get_ref() * PS_PER_NS;
        }
        if let Some(d) = &f.hca_send_queue_packets {
            if *d.get_ref() == 0 {
                return src.invalid(
                    "fabric.hca_send_queue_packets",
                    d.span(),
                    "must be at least 1".into(),
                );
            }
            c.hca_send_queue_packets = *d.get_ref();
        }
        if let Some(s) = &f.sample_interval_us {
            if *s.get_ref() == 0 {
                return src.invalid(
                    "fabric.sample_interval_us",
                    s.span(),
                    "must be positive".into(),
                );
            }
            c.sample_interval_ps = Some(s.get_ref() * PS_PER_US);
        }
        if let Some(r) = f.routing_engine {
            c.routing = r;
        }
        if let Some(b) = &f.bit_error_rate {
            let v = *b.get_ref();
            if !(0.0..1.0).contains(&v) {
                return src.invalid(
                    "fabric.bit_error_rate",
                    b.span(),
                    "a probability in 0..1".into(),
                );
            }
            c.bit_error_rate = v;
        }
        c.seed = seed;
        c.qos = qos.cloned();
        Ok(c)
    }
}
