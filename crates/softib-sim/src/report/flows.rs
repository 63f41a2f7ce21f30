//! Per-flow statistics: what each flow delivered, when, and how long it took.
//!
//! Two levels are kept apart. *Packets* are what the fabric delivers to an HCA (counted by
//! [`Metered`], which wraps any [`Endpoint`] and reads the packet's flow tag and injection
//! time): wire bytes LRH through VCRC and the one-way fabric latency from the moment the
//! packet was queued at its source HCA. *Messages* are what a transport reports complete
//! (a traffic model calls [`FlowRecorder::record_message`]): payload bytes and
//! post-to-completion latency, the figures perftest prints. A report prefers messages when
//! a flow has any.

use super::histogram::Histogram;
use softib_fabric::hca::{Endpoint, HcaTx};
use softib_fabric::packet::Packet;
use softib_fabric::time::{Picos, PS_PER_NS};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// What a flow is, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlowInfo {
    /// Short unique name (e.g. `write_bw h0->h1`).
    pub name: String,
    /// Source node name.
    pub src: String,
    /// Destination node name.
    pub dst: String,
    /// The host whose port carries the flow's data (the responder for a READ).
    pub data_from: String,
    /// Subnet management on VL15 rather than data.
    pub management: bool,
}

/// Everything recorded about one flow.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlowStats {
    /// Identity.
    pub info: FlowInfo,
    /// Packets delivered to the destination HCA.
    pub packets: u64,
    /// Their bytes, LRH through VCRC.
    pub wire_bytes: u64,
    /// Messages completed.
    pub messages: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// Messages completed with an error status.
    pub errors: u64,
    /// Error completions by status (`IBV_WC_*` names).
    #[serde(deserialize_with = "crate::apps::flow::deserialize_status_names")]
    pub error_statuses: BTreeMap<&'static str, u64>,
    /// Unreliable messages known lost: a later one of the same flow arrived first.
    pub lost: u64,
    /// First and last delivery or completion time.
    pub first_ps: Option<Picos>,
    /// Last delivery or completion time.
    pub last_ps: Picos,
    /// Wire bytes delivered per time bin.
    pub wire_bins: Vec<u64>,
    /// Payload bytes completed per time bin.
    pub payload_bins: Vec<u64>,
    /// One-way fabric latency of packets.
    pub packet_latency: Histogram,
    /// Post-to-completion latency of messages.
    pub message_latency: Histogram,
}

impl FlowStats {
    /// Whether the flow is measured by message completions (else by packet deliveries).
    pub fn by_message(&self) -> bool {
        self.messages > 0
    }

    /// Bytes that count for bandwidth: payload if messages were recorded, else wire bytes.
    pub fn bytes(&self) -> u64 {
        if self.by_message() {
            self.payload_bytes
        } else {
            self.wire_bytes
        }
    }

    /// Bytes per time bin, at the level of [`FlowStats::bytes`].
    pub fn bins(&self) -> &[u64] {
        if self.by_message() {
            &self.payload_bins
        } else {
            &self.wire_bins
        }
    }

    /// Latency at the level of [`FlowStats::bytes`].
    pub fn latency(&self) -> &Histogram {
        if self.by_message() {
            &self.message_latency
        } else {
            &self.packet_latency
        }
    }

    fn touch(&mut self, at: Picos) {
        // The earliest, not the first recorded: unreliable messages are recorded after
        // the run (`UnreliableLog::settle`), partitions' records are merged.
        self.first_ps = Some(self.first_ps.map_or(at, |f| f.min(at)));
        self.last_ps = self.last_ps.max(at);
    }

    /// Adds what another recorder saw of this flow (the same flow in another partition).
    fn merge(&mut self, o: &FlowStats) {
        self.packets += o.packets;
        self.wire_bytes += o.wire_bytes;
        self.messages += o.messages;
        self.payload_bytes += o.payload_bytes;
        self.errors += o.errors;
        for (k, v) in &o.error_statuses {
            *self.error_statuses.entry(k).or_default() += v;
        }
        self.lost += o.lost;
        if let Some(f) = o.first_ps {
            self.touch(f);
        }
        self.last_ps = self.last_ps.max(o.last_ps);
        for (bins, other) in [
            (&mut self.wire_bins, &o.wire_bins),
            (&mut self.payload_bins, &o.payload_bins),
        ] {
            if other.len() > bins.len() {
                bins.resize(other.len(), 0);
            }
            for (a, b) in bins.iter_mut().zip(other) {
                *a += b;
            }
        }
        self.packet_latency.merge(&o.packet_latency);
        self.message_latency.merge(&o.message_latency);
    }
}

fn add_bin(bins: &mut Vec<u64>, bin_ps: Picos, at: Picos, bytes: u64) {
    let b = (at / bin_ps) as usize;
    if b >= bins.len() {
        bins.resize(b + 1, 0);
    }
    bins[b] += bytes;
}

/// Collects [`FlowStats`] by flow tag (the `flow` of [`softib_fabric::packet::PacketMeta`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct FlowRecorder {
    bin_ps: Picos,
    flows: BTreeMap<u32, FlowStats>,
}

/// A recorder shared between the endpoints of one run (the simulation is single-threaded).
pub type SharedRecorder = Rc<RefCell<FlowRecorder>>;

impl FlowRecorder {
    /// A recorder binning bandwidth every `bin_ps` of simulated time.
    pub fn new(bin_ps: Picos) -> Self {
        FlowRecorder {
            bin_ps: bin_ps.max(1),
            flows: BTreeMap::new(),
        }
    }

    /// A recorder to share between endpoints.
    pub fn shared(bin_ps: Picos) -> SharedRecorder {
        Rc::new(RefCell::new(Self::new(bin_ps)))
    }

    /// The bin width.
    pub fn bin_ps(&self) -> Picos {
        self.bin_ps
    }

    fn flow(&mut self, id: u32) -> &mut FlowStats {
        self.flows.entry(id).or_insert_with(|| FlowStats {
            info: FlowInfo {
                name: format!("flow{id}"),
                ..FlowInfo::default()
            },
            ..FlowStats::default()
        })
    }

    /// Names flow `id` (flows seen without a definition are called `flow<id>`).
    pub fn define(&mut self, id: u32, info: FlowInfo) {
        self.flow(id).info = info;
    }

    /// A packet of flow `id` and `len` wire bytes, queued at `injected_at`, was delivered at
    /// `at`.
    pub fn record_packet(&mut self, id: u32, at: Picos, len: u64, injected_at: Picos) {
        let bin = self.bin_ps;
        let f = self.flow(id);
        f.packets += 1;
        f.wire_bytes += len;
        f.touch(at);
        add_bin(&mut f.wire_bins, bin, at, len);
        f.packet_latency
            .record(at.saturating_sub(injected_at) / PS_PER_NS);
    }

    /// A message of flow `id` with `payload` bytes, posted at `posted_at`, completed at `at`.
    pub fn record_message(&mut self, id: u32, at: Picos, payload: u64, posted_at: Picos) {
        let bin = self.bin_ps;
        let f = self.flow(id);
        f.messages += 1;
        f.payload_bytes += payload;
        f.touch(at);
        add_bin(&mut f.payload_bins, bin, at, payload);
        f.message_latency
            .record(at.saturating_sub(posted_at) / PS_PER_NS);
    }

    /// A message of flow `id` completed with the error status `status` (its `IBV_WC_*`
    /// name).
    pub fn record_error(&mut self, id: u32, status: &'static str) {
        let f = self.flow(id);
        f.errors += 1;
        *f.error_statuses.entry(status).or_default() += 1;
    }

    /// `n` messages of flow `id` were lost (an unreliable service: a later one arrived).
    pub fn record_lost(&mut self, id: u32, n: u64) {
        self.flow(id).lost += n;
    }

    /// Every flow, by id.
    pub fn flows(&self) -> &BTreeMap<u32, FlowStats> {
        &self.flows
    }

    /// Adds what `other` (another partition's recorder, same bins and flow definitions)
    /// recorded. Every figure is a sum, a minimum or a maximum, so the merged recorder
    /// is the one a single fabric would have filled, in whatever order partitions merge.
    pub fn merge(&mut self, other: &FlowRecorder) {
        for (&id, o) in &other.flows {
            match self.flows.get_mut(&id) {
                Some(f) => f.merge(o),
                None => {
                    self.flows.insert(id, o.clone());
                }
            }
        }
    }
}

/// Wraps an endpoint and records every packet it receives in a [`FlowRecorder`].
pub struct Metered<E> {
    inner: E,
    recorder: SharedRecorder,
}

impl<E: Endpoint> Metered<E> {
    /// Meters `inner`'s deliveries into `recorder`.
    pub fn new(inner: E, recorder: SharedRecorder) -> Self {
        Metered { inner, recorder }
    }
}

impl<E: Endpoint> Endpoint for Metered<E> {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        self.inner.on_transmit_ready(tx);
    }

    fn on_receive(&mut self, packet: &Packet, tx: &mut HcaTx<'_>) {
        let m = &packet.meta;
        self.recorder
            .borrow_mut()
            .record_packet(m.flow, tx.now(), m.len as u64, m.injected_at);
        self.inner.on_receive(packet, tx);
    }

    fn next_wakeup(&self) -> Option<Picos> {
        self.inner.next_wakeup()
    }

    fn on_timer(&mut self, tx: &mut HcaTx<'_>) {
        self.inner.on_timer(tx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_take_precedence_over_packets() {
        let mut r = FlowRecorder::new(1_000_000);
        r.define(
            3,
            FlowInfo {
                name: "a".into(),
                src: "h0".into(),
                dst: "h1".into(),
                data_from: "h0".into(),
                management: false,
            },
        );
        r.record_packet(3, 1_500_000, 4122, 500_000);
        r.record_packet(3, 2_500_000, 4122, 1_500_000);
        let f = &r.flows()[&3];
        assert!(!f.by_message());
        assert_eq!(f.bytes(), 8244);
        assert_eq!(f.bins(), &[0, 4122, 4122]);
        assert_eq!(f.latency().max(), 1000);
        r.record_message(3, 2_600_000, 8192, 0);
        let f = &r.flows()[&3];
        assert!(f.by_message());
        assert_eq!(f.bytes(), 8192);
        assert_eq!(f.bins(), &[0, 0, 8192]);
        assert_eq!(f.latency().max(), 2600);
        assert_eq!((f.first_ps, f.last_ps), (Some(1_500_000), 2_600_000));
        // An undeclared flow gets a name.
        r.record_packet(9, 0, 30, 0);
        assert_eq!(r.flows()[&9].info.name, "flow9");
    }
}
