//! Raw packet streams: a packet generator at the HCAs, for loading the link layer without a
//! transport engine (scenario `[[stream]]` tables).
//!
//! A stream sends UD SEND-only packets (LRH, BTH, DETH, payload; ICRC and VCRC are the
//! fabric's) as fast as its HCA port's send queue takes them, from a start time, for a
//! number of packets or until the end of the run. There are no QPs behind them: nothing is
//! acknowledged or retransmitted, so what a stream measures is the fabric alone (credits,
//! arbitration, switching). Transport-level traffic (RC WRITE bandwidth and the like) is the
//! transport engine's, run by the HCA adapter.
//!
//! ```toml
//! [[stream]]
//! pattern = "incast"        # one-to-one, incast, all-to-all, permutation
//! dst = "h0"                # one-to-one, incast
//! srcs = ["h1", "h2"]       # incast (default: every other host); one-to-one: src = "h1"
//! payload_bytes = 4096      # 0..=4096
//! packets = 1000            # per source; default: until the end of the run
//! start_us = 0
//! sl = 0
//! interval_ns = 1000        # one packet per source every 1 us (default: as fast as it goes)
//! kind = "data"             # or "management": SMP-sized packets on VL15 (below)
//! ```
//!
//! A `management` stream sends subnet-management packets: 256-byte MADs to QP0 on VL15
//! (LRH, BTH, DETH, MAD: 290 bytes on the wire), which are not flow-controlled, win every
//! VL arbitration (IBA 7.6.9) and are dropped by a full VL15 buffer (VL15Dropped). With
//! `interval_ns` they model an SM's sweep or a management tool polling at a rate, whose
//! delivered rate and latency under data load the report gives per flow. `sl` has no
//! meaning for them (VL15 is not reached through SL2VL) and is refused.
//!
//! Patterns: `one-to-one` (`src` to `dst`); `incast` (each of `srcs` to `dst`); `all-to-all`
//! (every host sends to every other host in turn, one packet each); `permutation` (host i to
//! host (i + `shift`) mod N, `shift` default N/2). Every source of every stream is one flow
//! in the report.

use softib_fabric::hca::{Endpoint, HcaTx, TRAILER_BYTES};
use softib_fabric::packet::Packet;
use crate::report::flows::{FlowInfo, SharedRecorder};
use crate::scenario::{Scenario, ScenarioError};
use softib_fabric::time::{Picos, PS_PER_NS, PS_PER_US};
use softib_fabric::topology::Topology;
use softib_fabric::vlarb::VL15;
use serde::Deserialize;
use softib_wire::lrh::{Lnh, LrhPacket, LrhRepr, LRH_LEN};
use softib_wire::{BthRepr, DethRepr, Opcode, BTH_LEN, DETH_LEN};
use toml::Spanned;

/// Largest payload: the IBA's largest MTU.
pub const MAX_PAYLOAD: u32 = 4096;
/// DestQP and source QP the generator writes (there is no QP behind them).
pub const NOMINAL_QPN: u32 = 0x100;
/// Q_Key the generator writes.
pub const NOMINAL_QKEY: u32 = 0x1111_1111;

/// Who sends to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// `src` to `dst`.
    OneToOne,
    /// Each of `srcs` to `dst`.
    Incast,
    /// Every host to every other host, round-robin.
    AllToAll,
    /// Host i to host (i + shift) mod N.
    Permutation,
    /// Each host (of `srcs` in that order, or every host) to the next, the last to the
    /// first.
    Ring,
}

/// A `[[stream]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamEntry {
    /// Pattern.
    pub pattern: Pattern,
    /// Source (one-to-one).
    pub src: Option<Spanned<String>>,
    /// Sources (incast; default every host but `dst`).
    pub srcs: Option<Vec<Spanned<String>>>,
    /// Destination (one-to-one, incast).
    pub dst: Option<Spanned<String>>,
    /// Permutation shift (default hosts / 2).
    pub shift: Option<Spanned<usize>>,
    /// Payload bytes per packet (default 4096).
    pub payload_bytes: Option<Spanned<u32>>,
    /// Packets per source (default: until the end of the run).
    pub packets: Option<u64>,
    /// Start time, microseconds.
    pub start_us: Option<Spanned<f64>>,
    /// Service level.
    pub sl: Option<Spanned<u8>>,
    /// Time between two packets of a source, ns (default: back to back).
    pub interval_ns: Option<Spanned<f64>>,
    /// Data packets (default) or subnet management on VL15.
    pub kind: Option<Spanned<StreamKindEntry>>,
}

/// What a stream carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKindEntry {
    /// UD SENDs on the VL of `sl`.
    Data,
    /// Subnet-management packets (SMP-sized MADs to QP0) on VL15.
    Management,
}

/// Payload of a management packet: one MAD (IBA 13.4.2).
pub const MAD_BYTES: u32 = 256;

/// One source of one stream, resolved against the topology.
#[derive(Clone, Debug, PartialEq)]
pub struct SourcePlan {
    /// Flow tag.
    pub flow: u32,
    /// Flow identity for the report.
    pub info: FlowInfo,
    /// Sending host.
    pub host: String,
    /// Destination hosts, visited in turn.
    pub dests: Vec<String>,
    /// Payload bytes.
    pub payload: u32,
    /// Packets to send (`None`: until the end).
    pub packets: Option<u64>,
    /// Start time.
    pub start_ps: Picos,
    /// Service level.
    pub sl: u8,
    /// Pacing: time between two packets (`None`: back to back).
    pub interval_ps: Option<Picos>,
    /// Subnet management on VL15 rather than data.
    pub management: bool,
}

/// The who-sends-to-whom keys shared by `[[stream]]` and `[[flow]]` tables.
pub(crate) struct PatternKeys<'a> {
    pub(crate) pattern: Pattern,
    pub(crate) src: &'a Option<Spanned<String>>,
    pub(crate) srcs: &'a Option<Vec<Spanned<String>>>,
    pub(crate) dst: &'a Option<Spanned<String>>,
    pub(crate) shift: &'a Option<Spanned<usize>>,
}

/// The HCAs of a topology, in node order.
pub(crate) fn host_names(topo: &Topology) -> Vec<String> {
    topo.hcas().map(|i| topo.nodes[i].name.clone()).collect()
}

impl Scenario {
    /// Resolves a pattern of table `table` (e.g. `stream[0]`) to (source, destinations)
    /// pairs over `hosts`; errors name the key and line.
    pub(crate) fn resolve_pattern(
        &self,
        table: &str,
        k: PatternKeys<'_>,
        hosts: &[String],
    ) -> Result<Vec<(String, Vec<String>)>, ScenarioError> {
        let key = |name: &str| format!("{table}.{name}");
        let is_host = |s: &Spanned<String>, key: &str| -> Result<String, ScenarioError> {
            if hosts.iter().any(|h| h == s.get_ref()) {
                Ok(s.get_ref().clone())
            } else {
                Err(self.error_at(
                    key,
                    s.span(),
                    format!(
                        "no HCA called `{}` (hosts are {})",
                        s.get_ref(),
                        host_list(hosts)
                    ),
                ))
            }
        };
        let need = |field: &Option<Spanned<String>>, name: &str| -> Result<String, ScenarioError> {
            match field {
                Some(s) => is_host(s, &key(name)),
                None => Err(self.error_at(
                    table,
                    0..0,
                    format!("pattern {:?} needs `{name}`", k.pattern),
                )),
            }
        };
        let pairs: Vec<(String, Vec<String>)> = match k.pattern {
            Pattern::OneToOne => {
                let (s, d) = (need(k.src, "src")?, need(k.dst, "dst")?);
                if s == d {
                    return Err(self.error_at(
                        &key("dst"),
                        k.dst.as_ref().map_or(0..0, |d| d.span()),
                        "a host does not send to itself over the fabric".into(),
                    ));
                }
                vec![(s, vec![d])]
            }
            Pattern::Incast => {
                let d = need(k.dst, "dst")?;
                let srcs = match k.srcs {
                    Some(v) => v
                        .iter()
                        .map(|s| is_host(s, &key("srcs")))
                        .collect::<Result<Vec<_>, _>>()?,
                    None => hosts.iter().filter(|h| **h != d).cloned().collect(),
                };
                if let Some(bad) = k.srcs.iter().flatten().find(|s| *s.get_ref() == d) {
                    return Err(self.error_at(
                        &key("srcs"),
                        bad.span(),
                        format!("`{d}` is the destination"),
                    ));
                }
                srcs.into_iter().map(|s| (s, vec![d.clone()])).collect()
            }
            Pattern::AllToAll => hosts
                .iter()
                .enumerate()
                .map(|(me, s)| {
                    // Start after oneself, so that not every host hits the same first
                    // destination.
                    let dests = (1..hosts.len())
                        .map(|j| hosts[(me + j) % hosts.len()].clone())
                        .collect();
                    (s.clone(), dests)
                })
                .collect(),
            Pattern::Ring => {
                let ring = match k.srcs {
                    Some(v) => v
                        .iter()
                        .map(|s| is_host(s, &key("srcs")))
                        .collect::<Result<Vec<_>, _>>()?,
                    None => hosts.to_vec(),
                };
                for (j, h) in ring.iter().enumerate() {
                    if ring[..j].contains(h) {
                        let span = k.srcs.as_ref().map_or(0..0, |v| v[j].span());
                        return Err(self.error_at(
                            &key("srcs"),
                            span,
                            format!("`{h}` appears twice in the ring"),
                        ));
                    }
                }
                if ring.len() < 2 {
                    return Err(self.error_at(
                        &key("srcs"),
                        k.srcs
                            .as_ref()
                            .map_or(0..0, |v| v.first().map_or(0..0, |s| s.span())),
                        "a ring needs at least 2 hosts".into(),
                    ));
                }
                let n = ring.len();
                (0..n)
                    .map(|j| (ring[j].clone(), vec![ring[(j + 1) % n].clone()]))
                    .collect()
            }
            Pattern::Permutation => {
                let n = hosts.len();
                let shift = match k.shift {
                    Some(s) if *s.get_ref() % n.max(1) == 0 => {
                        return Err(self.error_at(
                            &key("shift"),
                            s.span(),
                            format!(
                                "a shift of {} maps every host to itself ({n} hosts)",
                                s.get_ref()
                            ),
                        ))
                    }
                    Some(s) => *s.get_ref() % n,
                    None => n / 2,
                };
                hosts
                    .iter()
                    .enumerate()
                    .map(|(j, s)| (s.clone(), vec![hosts[(j + shift) % n].clone()]))
                    .collect()
            }
        };
        if pairs.is_empty() || hosts.len() < 2 {
            return Err(self.error_at(
                table,
                0..0,
                "the pattern has no sender in this topology".into(),
            ));
        }
        Ok(pairs)
    }

    /// The sources of every `[[stream]]`, checked against the topology; errors name the
    /// key and line.
    pub fn stream_plan(&self) -> Result<Vec<SourcePlan>, ScenarioError> {
        let topo = self.topology()?;
        let hosts = host_names(&topo);
        let mut out = Vec::new();
        for (i, e) in self.stream.iter().enumerate() {
            let table = format!("stream[{i}]");
            let key = |k: &str| format!("{table}.{k}");
            let management = e
                .kind
                .as_ref()
                .is_some_and(|k| *k.get_ref() == StreamKindEntry::Management);
            if let (true, Some(sl)) = (management, &e.sl) {
                return Err(self.error_at(
                    &key("sl"),
                    sl.span(),
                    "management packets travel on VL15, which no SL maps to (IBA 7.6.6)".into(),
                ));
            }
            let interval_ps = match &e.interval_ns {
                Some(v) if !(v.get_ref().is_finite() && *v.get_ref() > 0.0) => {
                    return Err(self.error_at(
                        &key("interval_ns"),
                        v.span(),
                        "must be > 0 (omit it to send back to back)".into(),
                    ))
                }
                Some(v) => Some(((v.get_ref() * PS_PER_NS as f64).round() as Picos).max(1)),
                None => None,
            };
            let payload = match &e.payload_bytes {
                Some(p) if *p.get_ref() > MAX_PAYLOAD => {
                    return Err(self.error_at(
                        &key("payload_bytes"),
                        p.span(),
                        format!(
                            "{} bytes: at most {MAX_PAYLOAD} (the largest MTU)",
                            p.get_ref()
                        ),
                    ))
                }
                Some(p) => *p.get_ref(),
                None if management => MAD_BYTES,
                None => MAX_PAYLOAD,
            };
            let sl = self.sl_key(&key("sl"), &e.sl)?;
            let start_ps = self.start_key(&key("start_us"), &e.start_us)?;
            let pairs = self.resolve_pattern(
                &table,
                PatternKeys {
                    pattern: e.pattern,
                    src: &e.src,
                    srcs: &e.srcs,
                    dst: &e.dst,
                    shift: &e.shift,
                },
                &hosts,
            )?;
            for (src, dests) in pairs {
                let flow = out.len() as u32;
                let to = if dests.len() == 1 {
                    dests[0].clone()
                } else {
                    "all".into()
                };
                let tag = if management { "mgmt " } else { "" };
                out.push(SourcePlan {
                    flow,
                    info: FlowInfo {
                        name: format!("s{i} {tag}{src}->{to}"),
                        src: src.clone(),
                        dst: to,
                        data_from: src.clone(),
                        management,
                    },
                    host: src,
                    dests,
                    payload,
                    packets: e.packets,
                    start_ps,
                    sl,
                    interval_ps,
                    management,
                });
            }
        }
        Ok(out)
    }

    /// An `sl` key: 0..=15, default 0.
    pub(crate) fn sl_key(&self, key: &str, v: &Option<Spanned<u8>>) -> Result<u8, ScenarioError> {
        match v {
            Some(s) if *s.get_ref() > 15 => {
                Err(self.error_at(key, s.span(), "SLs are 0..=15".into()))
            }
            Some(s) => Ok(*s.get_ref()),
            None => Ok(0),
        }
    }

    /// A `start_us` key: >= 0, default 0.
    pub(crate) fn start_key(
        &self,
        key: &str,
        v: &Option<Spanned<f64>>,
    ) -> Result<Picos, ScenarioError> {
        match v {
            Some(s) if !(s.get_ref().is_finite() && *s.get_ref() >= 0.0) => {
                Err(self.error_at(key, s.span(), "must be >= 0".into()))
            }
            Some(s) => Ok((s.get_ref() * PS_PER_US as f64).round() as Picos),
            None => Ok(0),
        }
    }
}

fn host_list(hosts: &[String]) -> String {
    match hosts.len() {
        0 => "none".into(),
        1..=4 => hosts.join(", "),
        n => format!("{} .. {} ({n})", hosts[0], hosts[n - 1]),
    }
}

/// A stream source at run time.
#[derive(Clone, Debug)]
struct Active {
    dlids: Vec<u16>,
    next: usize,
    remaining: Option<u64>,
    flow: u32,
    payload: u32,
    start: Picos,
    sl: u8,
    psn: u32,
    interval: Option<Picos>,
    management: bool,
    /// Earliest time of the next packet (paced sources).
    next_at: Picos,
}

/// The endpoint of one HCA port: its stream sources, served round-robin. Every UD
/// SEND-only packet it receives is one completed message of its payload, recorded in the
/// flow recorder if it has one (packet-level figures come from
/// [`crate::report::flows::Metered`]).
#[derive(Clone, Default)]
pub struct Generator {
    sources: Vec<Active>,
    /// The time of the last callback.
    now: Picos,
    rr: usize,
    recorder: Option<SharedRecorder>,
}

impl Generator {
    /// A generator with no sources (a pure sink).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records received messages in `recorder`.
    pub fn with_recorder(recorder: SharedRecorder) -> Self {
        Generator {
            recorder: Some(recorder),
            ..Self::default()
        }
    }

    /// Adds a source sending to `dlids` in turn.
    pub fn add(&mut self, plan: &SourcePlan, dlids: Vec<u16>) {
        self.sources.push(Active {
            dlids,
            next: 0,
            remaining: plan.packets,
            flow: plan.flow,
            payload: plan.payload,
            start: plan.start_ps,
            sl: plan.sl,
            psn: 0,
            interval: plan.interval_ps,
            management: plan.management,
            next_at: plan.start_ps,
        });
    }

    fn fill(&mut self, tx: &mut HcaTx<'_>) {
        let n = self.sources.len();
        if n == 0 {
            return;
        }
        let now = tx.now();
        self.now = now;
        loop {
            let mut sent = false;
            for k in 0..n {
                let i = (self.rr + k) % n;
                let s = &mut self.sources[i];
                let room = if s.management {
                    tx.has_management_room()
                } else {
                    tx.has_room(s.sl)
                };
                if now < s.start
                    || now < s.next_at
                    || s.remaining == Some(0)
                    || s.dlids.is_empty()
                    || !room
                {
                    continue;
                }
                let dlid = s.dlids[s.next % s.dlids.len()];
                let pad = (4 - s.payload % 4) % 4;
                let body = LRH_LEN + BTH_LEN + DETH_LEN + (s.payload + pad) as usize;
                let len = body + TRAILER_BYTES;
                let lrh = LrhRepr {
                    vl: if s.management { VL15 } else { tx.vl_for(s.sl) },
                    lver: 0,
                    sl: s.sl,
                    lnh: Lnh::Bth,
                    dlid,
                    pkt_len_words: ((len - 2) / 4) as u16,
                    slid: tx.lid(),
                };
                let bth = BthRepr {
                    opcode: Opcode::UD_SEND_ONLY,
                    solicited: false,
                    mig_req: false,
                    pad_count: pad as u8,
                    tver: 0,
                    pkey: 0xffff,
                    fecn: false,
                    becn: false,
                    // Subnet management goes to QP0 (IBA 13.5.1).
                    dest_qp: if s.management { 0 } else { NOMINAL_QPN },
                    ack_req: false,
                    psn: s.psn,
                };
                let deth = DethRepr {
                    qkey: if s.management { 0 } else { NOMINAL_QKEY },
                    src_qp: if s.management { 0 } else { NOMINAL_QPN },
                };
                let write = |b: &mut [u8]| {
                    // The buffer is exactly `body` bytes: these writes cannot fail.
                    let _ = lrh.emit(&mut LrhPacket::new_unchecked(&mut b[..LRH_LEN]));
                    let _ = bth.emit(&mut b[LRH_LEN..]);
                    let _ = deth.emit(&mut b[LRH_LEN + BTH_LEN..]);
                    b[LRH_LEN + BTH_LEN + DETH_LEN..].fill(0);
                };
                let r = if s.management {
                    tx.send_management(dlid, len, s.flow, write)
                } else {
                    tx.send(dlid, s.sl, len, s.flow, write)
                };
                if r.is_err() {
                    // The SL maps to no operational VL: counted in PortXmitDiscards by the
                    // port; this source stops rather than spin.
                    s.remaining = Some(0);
                    continue;
                }
                s.next += 1;
                s.psn = (s.psn + 1) & 0xff_ffff;
                if let Some(iv) = s.interval {
                    // Paced from the schedule, not from when the packet could go, so a
                    // source held up by a full queue catches up rather than drifting.
                    s.next_at += iv;
                }
                if let Some(r) = &mut s.remaining {
                    *r -= 1;
                }
                sent = true;
            }
            self.rr = (self.rr + 1) % n;
            if !sent {
                return;
            }
        }
    }
}

impl Endpoint for Generator {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        self.fill(tx);
    }

    fn on_receive(&mut self, packet: &Packet, tx: &mut HcaTx<'_>) {
        let Some(rec) = &self.recorder else { return };
        let bytes = packet.bytes();
        let Some(bth) = bytes.get(LRH_LEN..).and_then(|b| BthRepr::parse(b).ok()) else {
            return;
        };
        if bth.opcode != Opcode::UD_SEND_ONLY {
            return;
        }
        let headers = LRH_LEN + BTH_LEN + DETH_LEN + bth.pad_count as usize + TRAILER_BYTES;
        let payload = bytes.len().saturating_sub(headers) as u64;
        let m = &packet.meta;
        rec.borrow_mut()
            .record_message(m.flow, tx.now(), payload, m.injected_at);
    }

    fn next_wakeup(&self) -> Option<Picos> {
        // Only start times need a timer: afterwards the port's transmit-ready calls drive
        // the sources. A start already passed is served by those calls.
        self.sources
            .iter()
            .filter(|s| s.remaining != Some(0))
            .map(|s| s.start.max(s.next_at))
            // A time already passed is served by the port's transmit-ready calls (the
            // source waits for queue room).
            .filter(|&t| t > self.now)
            .min()
    }

    fn on_timer(&mut self, tx: &mut HcaTx<'_>) {
        let now = tx.now();
        self.fill(tx);
        // Started sources no longer need their timer.
        for s in &mut self.sources {
            if s.start <= now {
                s.start = 0;
            }
        }
    }
}
