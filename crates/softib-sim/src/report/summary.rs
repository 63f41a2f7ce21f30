//! The run summary: per-flow bandwidth and latency, per-port counters with their IBA names
//! and units, totals. Serialised as `summary.json`; every field is a plain value written in
//! declaration order, and floats are rounded to fixed decimals, so the file is a function of
//! the run only.

use super::decimals::round;
use serde::Serialize;
use softib_fabric::counters::PortCounters;

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// What was run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ScenarioInfo {
    /// Scenario name (file stem, or "default").
    pub name: String,
    /// The seed.
    pub seed: u64,
    /// Simulated duration, microseconds.
    pub duration_us: f64,
    /// Topology shape.
    pub topology: String,
    /// HCAs.
    pub hosts: usize,
    /// Switches.
    pub switches: usize,
    /// Cables.
    pub links: usize,
    /// Default link ("4x EDR").
    pub link: String,
    /// Default link data rate, Gb/s.
    pub link_gbps: f64,
    /// PortXmitWait tick, ns.
    pub xmit_wait_tick_ns: f64,
    /// Counter sampling interval, microseconds (0: not sampled).
    pub sample_interval_us: f64,
}

/// Simulator figures of the run (simulated quantities only: no wall-clock time, which
/// would make two identical runs differ).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunInfo {
    /// Events processed.
    pub events: u64,
    /// Data packets delivered to HCAs.
    pub packets_delivered: u64,
    /// Packets still inside the fabric at the end.
    pub packets_in_flight: usize,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    /// What is measured: "message" (post to completion) or "packet" (source queue to
    /// destination HCA).
    pub level: &'static str,
    /// Samples.
    pub count: u64,
    /// Minimum.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

/// One flow.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlowSummary {
    /// Flow tag.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Source node.
    pub src: String,
    /// Destination node.
    pub dst: String,
    /// Packets delivered.
    pub packets: u64,
    /// Wire bytes delivered (LRH through VCRC).
    pub wire_bytes: u64,
    /// Messages completed.
    pub messages: u64,
    /// Payload bytes of completed messages.
    pub payload_bytes: u64,
    /// Messages completed with an error status.
    pub error_completions: u64,
    /// Error completions by status, as libibverbs names them (`IBV_WC_RNR_RETRY_EXC_ERR`,
    /// `IBV_WC_RETRY_EXC_ERR`, `IBV_WC_WR_FLUSH_ERR`, ...).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub error_statuses: std::collections::BTreeMap<String, u64>,
    /// A subnet-management stream on VL15 (absent for data flows).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub management: bool,
    /// UC/UD messages known lost (a later message of the flow arrived; absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub messages_lost: u64,
    /// The counters of the flow's own QPs (engine flows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qp: Option<FlowQp>,
    /// Bandwidth over the whole run, Gb/s (payload if messages were recorded, else wire).
    pub gbps: f64,
    /// Bandwidth between the first and last delivery, Gb/s.
    pub active_gbps: f64,
    /// Messages (packets, for a flow measured by packets) per microsecond over the run,
    /// i.e. millions per second: perftest's `MsgRate[Mpps]`.
    pub msg_rate_mpps: f64,
    /// First delivery, microseconds.
    pub first_us: f64,
    /// Last delivery, microseconds.
    pub last_us: f64,
    /// Latency percentiles.
    pub latency: Latency,
    /// What held the flow below its link's rate: `line_rate` (nothing: the link is full),
    /// `link_credits`, `congestion_control`, `retransmissions`, `receiver_not_ready`,
    /// `errors`, `lost_messages` (UC/UD messages that never arrived), `responder` (its
    /// engine processes what it receives late: a `[[host]]` receive model) or `sender` (the
    /// sender had nothing queued: its window, or its start).
    pub limited_by: &'static str,
    /// The counters behind `limited_by`, in one sentence.
    pub evidence: String,
}

/// The transport counters of one engine flow's QP pair: the requester's (retries) and the
/// responder's (what the retries cost it), as `softib_transport::QpCounters` names them.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct FlowQp {
    /// Requester: packets sent again (go-back-N after a timeout or NAK).
    pub retransmitted_packets: u64,
    /// Requester: local ACK timer expiries.
    pub local_ack_timeouts: u64,
    /// Requester: PSN-sequence NAKs received.
    pub seq_naks_received: u64,
    /// Requester: RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Requester: packets sent, retransmissions included.
    pub requester_packets_sent: u64,
    /// Responder: duplicate requests received.
    pub duplicates_received: u64,
    /// Responder: RNR NAKs sent (no receive WR posted).
    pub rnr_naks_sent: u64,
    /// Responder: PSN-sequence NAKs sent.
    pub seq_naks_sent: u64,
    /// Responder: packets dropped for a PSN ahead of the expected one.
    pub out_of_sequence_drops: u64,
    /// Responder: packets accepted.
    pub responder_packets_received: u64,
}

impl FlowQp {
    /// Takes the requester's counters from its QP.
    pub fn set_requester(&mut self, c: &softib_transport::QpCounters) {
        self.retransmitted_packets = c.retransmitted_packets;
        self.local_ack_timeouts = c.local_ack_timeouts;
        self.seq_naks_received = c.seq_naks_received;
        self.rnr_naks_received = c.rnr_naks_received;
        self.requester_packets_sent = c.packets_sent;
    }

    /// Adds the other side's counters, as another partition found them (each field is set
    /// by one side only).
    pub fn absorb(&mut self, o: &FlowQp) {
        self.retransmitted_packets += o.retransmitted_packets;
        self.local_ack_timeouts += o.local_ack_timeouts;
        self.seq_naks_received += o.seq_naks_received;
        self.rnr_naks_received += o.rnr_naks_received;
        self.requester_packets_sent += o.requester_packets_sent;
        self.duplicates_received += o.duplicates_received;
        self.rnr_naks_sent += o.rnr_naks_sent;
        self.seq_naks_sent += o.seq_naks_sent;
        self.out_of_sequence_drops += o.out_of_sequence_drops;
        self.responder_packets_received += o.responder_packets_received;
    }

    /// Takes the responder's counters from its QP.
    pub fn set_responder(&mut self, c: &softib_transport::QpCounters) {
        self.duplicates_received = c.duplicates_received;
        self.rnr_naks_sent = c.rnr_naks_sent;
        self.seq_naks_sent = c.seq_naks_sent;
        self.out_of_sequence_drops = c.out_of_sequence_drops;
        self.responder_packets_received = c.packets_received;
    }
}

/// Aggregate over flows.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlowTotals {
    /// Flows.
    pub flows: usize,
    /// Sum of flow bandwidths, Gb/s.
    pub aggregate_gbps: f64,
    /// Slowest flow, Gb/s.
    pub min_gbps: f64,
    /// Mean flow, Gb/s.
    pub mean_gbps: f64,
    /// Fastest flow, Gb/s.
    pub max_gbps: f64,
    /// Jain's fairness index over flow bandwidths (1 = equal shares).
    pub jain_fairness: f64,
    /// Latency over all flows.
    pub latency: Latency,
}

/// One port, counters under their IBA names (IBA 16.1.3.5 PortCounters, 16.1.4.11
/// PortCountersExtended; PortVLXmitWait per VL as in PortVLXmitWaitCounters). `Default` is
/// a port with every counter zero, filled in by `fill_counters`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PortSummary {
    /// `node:port`.
    pub port: String,
    /// The `node:port` at the other end of the cable.
    pub peer: String,
    /// Link ("4x EDR").
    pub link: String,
    /// Link data rate, Gb/s.
    pub link_gbps: f64,
    /// Data VLs in operation.
    pub operational_vls: u8,
    /// 4-byte words of data packets sent, LRH through ICRC.
    #[serde(rename = "PortXmitData")]
    pub port_xmit_data: u64,
    /// 4-byte words received.
    #[serde(rename = "PortRcvData")]
    pub port_rcv_data: u64,
    /// Data packets sent.
    #[serde(rename = "PortXmitPkts")]
    pub port_xmit_pkts: u64,
    /// Data packets received.
    #[serde(rename = "PortRcvPkts")]
    pub port_rcv_pkts: u64,
    /// Ticks with data queued and nothing sent.
    #[serde(rename = "PortXmitWait")]
    pub port_xmit_wait: u64,
    /// PortXmitWait per data VL, ticks, indexed by VL.
    #[serde(rename = "PortVLXmitWait")]
    pub port_vl_xmit_wait: Vec<u64>,
    /// SymbolErrorCounter.
    #[serde(rename = "SymbolErrorCounter")]
    pub symbol_error_counter: u64,
    /// LinkErrorRecoveryCounter.
    #[serde(rename = "LinkErrorRecoveryCounter")]
    pub link_error_recovery_counter: u64,
    /// LinkDownedCounter.
    #[serde(rename = "LinkDownedCounter")]
    pub link_downed_counter: u64,
    /// PortRcvErrors.
    #[serde(rename = "PortRcvErrors")]
    pub port_rcv_errors: u64,
    /// PortRcvRemotePhysicalErrors.
    #[serde(rename = "PortRcvRemotePhysicalErrors")]
    pub port_rcv_remote_physical_errors: u64,
    /// PortRcvSwitchRelayErrors.
    #[serde(rename = "PortRcvSwitchRelayErrors")]
    pub port_rcv_switch_relay_errors: u64,
    /// PortXmitDiscards.
    #[serde(rename = "PortXmitDiscards")]
    pub port_xmit_discards: u64,
    /// PortXmitConstraintErrors.
    #[serde(rename = "PortXmitConstraintErrors")]
    pub port_xmit_constraint_errors: u64,
    /// PortRcvConstraintErrors.
    #[serde(rename = "PortRcvConstraintErrors")]
    pub port_rcv_constraint_errors: u64,
    /// LocalLinkIntegrityErrors.
    #[serde(rename = "LocalLinkIntegrityErrors")]
    pub local_link_integrity_errors: u64,
    /// ExcessiveBufferOverrunErrors.
    #[serde(rename = "ExcessiveBufferOverrunErrors")]
    pub excessive_buffer_overrun_errors: u64,
    /// VL15Dropped.
    #[serde(rename = "VL15Dropped")]
    pub vl15_dropped: u64,
    /// Flow-control packets sent (link packets; not an IBA counter).
    pub flow_control_packets_sent: u64,
    /// Flow-control packets received.
    pub flow_control_packets_rcvd: u64,
    /// Average transmit data rate over the run, Gb/s (from PortXmitData).
    pub xmit_gbps: f64,
    /// `xmit_gbps` / link data rate.
    pub xmit_utilisation: f64,
    /// Share of the run the port had data queued and sent none (PortXmitWait as time).
    pub xmit_wait_fraction: f64,
    /// Largest receive-buffer occupancy seen in a sample, bytes (all data VLs).
    pub rx_buffer_peak_bytes: u64,
}

/// Every error counter of a port with its IBA name.
pub const ERROR_COUNTERS: [&str; 12] = [
    "SymbolErrorCounter",
    "LinkErrorRecoveryCounter",
    "LinkDownedCounter",
    "PortRcvErrors",
    "PortRcvRemotePhysicalErrors",
    "PortRcvSwitchRelayErrors",
    "PortXmitDiscards",
    "PortXmitConstraintErrors",
    "PortRcvConstraintErrors",
    "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors",
    "VL15Dropped",
];

impl PortSummary {
    /// The error counters, in [`ERROR_COUNTERS`] order.
    pub fn errors(&self) -> [u64; 12] {
        [
            self.symbol_error_counter,
            self.link_error_recovery_counter,
            self.link_downed_counter,
            self.port_rcv_errors,
            self.port_rcv_remote_physical_errors,
            self.port_rcv_switch_relay_errors,
            self.port_xmit_discards,
            self.port_xmit_constraint_errors,
            self.port_rcv_constraint_errors,
            self.local_link_integrity_errors,
            self.excessive_buffer_overrun_errors,
            self.vl15_dropped,
        ]
    }

    /// Sum of the error counters.
    pub fn error_total(&self) -> u64 {
        self.errors().iter().sum()
    }

    /// The counters that [`super::compare`] and sweeps tabulate, with their IBA names.
    pub fn metrics(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("PortXmitData", self.port_xmit_data),
            ("PortRcvData", self.port_rcv_data),
            ("PortXmitPkts", self.port_xmit_pkts),
            ("PortRcvPkts", self.port_rcv_pkts),
            ("PortXmitWait", self.port_xmit_wait),
        ];
        v.extend(ERROR_COUNTERS.iter().copied().zip(self.errors()));
        v
    }

    pub(crate) fn fill_counters(&mut self, c: &PortCounters, tick_ps: u64) {
        self.port_xmit_data = c.port_xmit_data;
        self.port_rcv_data = c.port_rcv_data;
        self.port_xmit_pkts = c.port_xmit_pkts;
        self.port_rcv_pkts = c.port_rcv_pkts;
        self.port_xmit_wait = c.port_xmit_wait(tick_ps);
        self.port_vl_xmit_wait = (0..self.operational_vls)
            .map(|vl| c.vl_xmit_wait(vl, tick_ps))
            .collect();
        self.symbol_error_counter = c.symbol_error_counter;
        self.link_error_recovery_counter = c.link_error_recovery_counter;
        self.link_downed_counter = c.link_downed_counter;
        self.port_rcv_errors = c.port_rcv_errors;
        self.port_rcv_remote_physical_errors = c.port_rcv_remote_physical_errors;
        self.port_rcv_switch_relay_errors = c.port_rcv_switch_relay_errors;
        self.port_xmit_discards = c.port_xmit_discards;
        self.port_xmit_constraint_errors = c.port_xmit_constraint_errors;
        self.port_rcv_constraint_errors = c.port_rcv_constraint_errors;
        self.local_link_integrity_errors = c.local_link_integrity_errors;
        self.excessive_buffer_overrun_errors = c.excessive_buffer_overrun_errors;
        self.vl15_dropped = c.vl15_dropped;
        self.flow_control_packets_sent = c.fc_packets_sent;
        self.flow_control_packets_rcvd = c.fc_packets_rcvd;
    }
}

/// Sums over every cabled port.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Totals {
    /// Cabled ports reported.
    pub ports: usize,
    /// Sum of PortXmitData, words.
    #[serde(rename = "PortXmitData")]
    pub port_xmit_data: u64,
    /// Sum of PortRcvData, words.
    #[serde(rename = "PortRcvData")]
    pub port_rcv_data: u64,
    /// Sum of PortXmitPkts.
    #[serde(rename = "PortXmitPkts")]
    pub port_xmit_pkts: u64,
    /// Sum of PortRcvPkts.
    #[serde(rename = "PortRcvPkts")]
    pub port_rcv_pkts: u64,
    /// Sum of PortXmitWait, ticks.
    #[serde(rename = "PortXmitWait")]
    pub port_xmit_wait: u64,
    /// Sum of every error counter.
    pub errors: u64,
    /// Packets dropped anywhere (PortRcvErrors, PortRcvSwitchRelayErrors,
    /// PortXmitDiscards, ExcessiveBufferOverrunErrors, VL15Dropped).
    pub drops: u64,
}

/// Something a reader should look at first.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Finding {
    /// `error` (something is broken), `warning` (performance), `info`.
    pub severity: &'static str,
    /// Machine-readable kind (`error_counter`, `drops`, `xmit_wait`, `unfair_flows`,
    /// `tail_latency`, `hot_link`, `idle_flow`, `error_completions`, `lost_messages`,
    /// `retransmissions`, `duplicates`, `rnr`, `in_flight`).
    pub kind: &'static str,
    /// The port or flow concerned, if one.
    pub subject: String,
    /// One sentence with the numbers.
    pub message: String,
}

/// The units of every counter, written into `summary.json` so that nobody has to guess.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Units {
    /// PortXmitData/PortRcvData.
    #[serde(rename = "PortXmitData")]
    pub port_xmit_data: &'static str,
    /// PortRcvData.
    #[serde(rename = "PortRcvData")]
    pub port_rcv_data: &'static str,
    /// PortXmitPkts/PortRcvPkts.
    #[serde(rename = "PortXmitPkts")]
    pub port_xmit_pkts: &'static str,
    /// PortXmitWait and PortVLXmitWait.
    #[serde(rename = "PortXmitWait")]
    pub port_xmit_wait: String,
    /// Error counters.
    pub errors: &'static str,
    /// Bandwidths.
    pub gbps: &'static str,
    /// Times.
    pub time: &'static str,
}

/// The transport engine's counters on one host (sums over its QPs), as
/// `softib_transport::DeviceCounters` names them.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct HostTransport {
    /// Host.
    pub host: String,
    /// Transport packets sent.
    pub packets_sent: u64,
    /// Transport packets accepted.
    pub packets_received: u64,
    /// Packets sent again (go-back-N after a timeout or NAK).
    pub retransmitted_packets: u64,
    /// Local ACK timer expiries that caused a retry.
    pub local_ack_timeouts: u64,
    /// PSN-sequence NAKs sent (as responder).
    pub seq_naks_sent: u64,
    /// PSN-sequence NAKs received (as requester).
    pub seq_naks_received: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Duplicate requests received (as responder).
    pub duplicates_received: u64,
    /// Packets dropped for a PSN ahead of the expected one.
    pub out_of_sequence_drops: u64,
    /// Packets received with FECN set.
    pub fecn_received: u64,
    /// Packets received with BECN set.
    pub becn_received: u64,
    /// Remote access, invalid request and remote operational errors.
    pub protocol_errors: u64,
    /// Congestion notification packets received.
    pub cnps_received: u64,
    /// Microseconds congestion control held QPs back while they had work (sum over QPs).
    pub cc_throttled_us: f64,
    /// Packets the device dropped before any QP (malformed, unknown QP, bad P_Key, ...),
    /// plus packets the HCA's encapsulation layer could not parse.
    pub device_drops: u64,
    /// QPs on the device (RC needs one per peer and flow, UD one per flow table): the
    /// connection state the host keeps.
    pub qps: u64,
    /// Mean time from a packet's arrival to its processing by the engine, microseconds
    /// (a `[[host]]` receive model: delay, serial service, atomic unit, stalls; 0 without).
    pub rx_wait_mean_us: f64,
    /// Most received packets waiting for processing at once.
    pub rx_backlog_peak: u64,
    /// Live address handles (UD destinations) on the device.
    pub address_handles: u64,
    /// Memory the transport engine's state holds, bytes, measured from its structures
    /// (`Device::footprint`: QPs with their reserved queues, CQs, SRQs, AHs; registered
    /// memory excluded).
    pub engine_state_bytes: u64,
    /// Of which the QPs (table slots and reserved queues), EE contexts included.
    pub qp_state_bytes: u64,
    /// EE contexts on the device (RD flows: one per peer host and `eecs`, shared by every
    /// RD QP of the flow table; absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub eecs: u64,
    /// Of `qp_state_bytes`, the EE contexts' (absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub eec_state_bytes: u64,
}

impl HostTransport {
    /// Adds the device's measured state footprint.
    pub fn with_footprint(mut self, f: &softib_transport::footprint::DeviceFootprint) -> Self {
        self.qps = f.qps as u64;
        self.address_handles = f.address_handles as u64;
        self.engine_state_bytes = f.total() as u64;
        self.qp_state_bytes = f.qp_bytes as u64;
        self.eecs = f.eecs as u64;
        self.eec_state_bytes = f.eec_bytes as u64;
        self
    }

    /// From a device's counters and the HCA's malformed-encapsulation count.
    pub fn new(host: &str, c: &softib_transport::DeviceCounters, rx_malformed: u64) -> Self {
        let q = &c.qp;
        HostTransport {
            host: host.to_string(),
            packets_sent: q.packets_sent,
            packets_received: q.packets_received,
            retransmitted_packets: q.retransmitted_packets,
            local_ack_timeouts: q.local_ack_timeouts,
            seq_naks_sent: q.seq_naks_sent,
            seq_naks_received: q.seq_naks_received,
            rnr_naks_sent: q.rnr_naks_sent,
            rnr_naks_received: q.rnr_naks_received,
            duplicates_received: q.duplicates_received,
            out_of_sequence_drops: q.out_of_sequence_drops,
            fecn_received: q.fecn_received,
            becn_received: q.becn_received,
            protocol_errors: q.remote_access_errors
                + q.invalid_requests
                + q.remote_operational_errors,
            cnps_received: q.cnps_received,
            cc_throttled_us: round(q.throttled_ns as f64 / 1000.0, 3),
            device_drops: c.malformed_drops
                + c.unknown_qp_drops
                + c.bad_pkey_drops
                + c.bad_qkey_drops
                + c.wrong_state_drops
                + c.wrong_service_drops
                + c.icrc_drops
                + c.vcrc_drops
                + c.format_drops
                + rx_malformed,
            qps: 0,
            rx_wait_mean_us: 0.0,
            rx_backlog_peak: 0,
            address_handles: 0,
            engine_state_bytes: 0,
            qp_state_bytes: 0,
            eecs: 0,
            eec_state_bytes: 0,
        }
    }

    /// The counters [`super::compare`] tabulates, by name.
    pub fn metrics(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("packets_sent", self.packets_sent),
            ("packets_received", self.packets_received),
            ("retransmitted_packets", self.retransmitted_packets),
            ("local_ack_timeouts", self.local_ack_timeouts),
            ("seq_naks_sent", self.seq_naks_sent),
            ("seq_naks_received", self.seq_naks_received),
            ("rnr_naks_sent", self.rnr_naks_sent),
            ("rnr_naks_received", self.rnr_naks_received),
            ("duplicates_received", self.duplicates_received),
            ("out_of_sequence_drops", self.out_of_sequence_drops),
            ("fecn_received", self.fecn_received),
            ("becn_received", self.becn_received),
            ("protocol_errors", self.protocol_errors),
            ("cnps_received", self.cnps_received),
            (
                "cc_throttled_ns",
                (self.cc_throttled_us * 1000.0).round() as u64,
            ),
            ("device_drops", self.device_drops),
            ("qps", self.qps),
            ("engine_state_bytes", self.engine_state_bytes),
        ]
    }
}

/// The whole `summary.json`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Producer and version.
    pub generator: String,
    /// What was run.
    pub scenario: ScenarioInfo,
    /// Simulator figures.
    pub run: RunInfo,
    /// Units.
    pub units: Units,
    /// Port totals.
    pub totals: Totals,
    /// Aggregate over flows (absent when the run had none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_totals: Option<FlowTotals>,
    /// Flows, by id.
    pub flows: Vec<FlowSummary>,
    /// What stood out, most important first.
    pub stood_out: Vec<Finding>,
    /// Transport-engine counters per host (hosts running `[[flow]]` traffic).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transport: Vec<HostTransport>,
    /// The congestion-control loop over time (runs with `[congestion_control]` on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion_control: Option<super::cc::CcSummary>,
    /// Every cabled port, in node then port order.
    pub ports: Vec<PortSummary>,
}
