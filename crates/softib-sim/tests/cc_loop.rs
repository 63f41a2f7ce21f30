//! The closed IBA congestion-control loop: Annex A10 switch marking
//! configured with OpenSM's keys, the real engine's BECN return and CCA pacing, on an 8->1
//! incast of RC WRITEs.
//!
//! Topology (4x EDR, 64 KiB receive buffer per VL, cut-through):
//! ```text
//!   h0..h3, v ── sw0 ══ sw1 ── h4..h7, d, w
//! ```
//! h0..h7 write to d (the incast, rooted at sw1's port to d); the victim v writes to w. The
//! victim shares sw0, the sw0->sw1 link and sw1's input buffer from sw0 with h0..h3, and
//! leaves sw1 through the uncongested port to w.
//!
//! The switches' crossbar runs at three times a 4x link (`crossbar_speedup_permille` 3000),
//! as the 12x inter-switch port needs: with speed-up 1 an input feeds an output at the
//! output's rate, so sw1's input from sw0 could move only 100 Gb/s in total, and h0..h3's
//! fair 50 Gb/s to d would make the victim's max-min fair share 50 Gb/s, not its link.

mod support;

use softib_fabric::cc_switch::{parse_opensm_cc, OpensmCc};
use softib_fabric::engine_hca::{EngineHca, HostApp};
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::link::{LinkRate, LinkSpeed, LinkWidth};
use softib_fabric::rng::SeedTree;
use softib_fabric::time::{to_engine_nanos, Picos, PS_PER_US};
use softib_fabric::topology::{NodeKind, Topology};
use softib_sim::cc_trace::{CcSource, CcTrace, PortCcSeries};
use softib_transport::WrOpcode;
use softib_transport::{Device, Mtu, Nanos, SendFlags, SendWr, Sge, WcStatus, WorkCompletion};
use support::engine::*;

const HOT: usize = 8;
/// Port of sw1 towards d, the root of the congestion tree.
const ROOT_PORT: u8 = 5;

/// `ib_write_bw`-like traffic that also records each message's latency (post to
/// completion), as an all-reduce step would see it.
struct Writer {
    me: Side,
    peer: Side,
    size: u32,
    depth: u32,
    posted: std::collections::VecDeque<Nanos>,
    /// (completion time, latency) of each successful message, ns.
    done: Vec<(Nanos, Nanos)>,
    errors: u32,
    wcs: Vec<WorkCompletion>,
}

impl Writer {
    fn new(me: Side, peer: Side, size: u32, depth: u32) -> Self {
        Writer {
            me,
            peer,
            size,
            depth,
            posted: Default::default(),
            done: Vec::new(),
            errors: 0,
            wcs: vec![softib_transport::harness::empty_wc(); 64],
        }
    }

    fn post(&mut self, now: Nanos, dev: &mut Device) {
        while (self.posted.len() as u32) < self.depth && self.errors == 0 {
            let wr = SendWr {
                wr_id: 0,
                opcode: WrOpcode::RdmaWrite,
                sg_list: vec![Sge {
                    addr: self.me.addr,
                    length: self.size,
                    lkey: self.me.keys.lkey,
                }],
                flags: SendFlags::SIGNALED,
                remote_addr: self.peer.addr,
                rkey: self.peer.keys.rkey,
                ..SendWr::default()
            };
            if dev.post_send(now, self.me.qpn, &wr).is_err() {
                return;
            }
            self.posted.push_back(now);
        }
    }

    /// Bytes completed in [from, to) ns.
    fn bytes_between(&self, from: Nanos, to: Nanos) -> u64 {
        self.done
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .count() as u64
            * self.size as u64
    }
}

impl HostApp for Writer {
    fn on_start(&mut self, now: Nanos, dev: &mut Device) {
        self.post(now, dev);
    }

    fn on_progress(&mut self, now: Nanos, dev: &mut Device) {
        loop {
            let n = dev.poll_cq(self.me.cq, &mut self.wcs);
            if n == 0 {
                break;
            }
            for wc in &self.wcs[..n] {
                // RC completes in order: the oldest post is this completion's.
                let at = self.posted.pop_front().unwrap_or(now);
                if wc.status == WcStatus::Success {
                    self.done.push((now, now - at));
                } else {
                    self.errors += 1;
                }
            }
        }
        self.post(now, dev);
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// Which flows run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Traffic {
    /// The incast and the victim.
    IncastAndVictim,
    /// The victim alone (its uncontended rate).
    VictimAlone,
    /// The incast alone.
    Incast,
}

struct Run {
    fabric: Fabric,
    trace: CcTrace,
    /// Queue of the root output (blocks) at each trace sample.
    root_queue: Vec<u32>,
}

fn topology() -> Topology {
    let mut t = Topology::new();
    let sw0 = t.add_node("sw0", NodeKind::Switch, 8);
    let sw1 = t.add_node("sw1", NodeKind::Switch, 8);
    for i in 0..HOT {
        let h = t.add_node(format!("h{i}"), NodeKind::Hca, 1);
        let (sw, p) = if i < 4 { (sw0, i + 1) } else { (sw1, i - 3) };
        t.connect(h, 1, sw, p as u8);
    }
    let d = t.add_node("d", NodeKind::Hca, 1);
    t.connect(d, 1, sw1, ROOT_PORT);
    let w = t.add_node("w", NodeKind::Hca, 1);
    t.connect(w, 1, sw1, 6);
    let v = t.add_node("v", NodeKind::Hca, 1);
    t.connect(v, 1, sw0, 5);
    // The inter-switch link is 12x, wider than the 4x host links, so that it is no
    // bottleneck of its own: the only congestion is the incast into d, and the victim's fair
    // share is its whole link.
    t.connect(sw0, 8, sw1, 8).rate = Some(LinkRate::new(LinkWidth::X12, LinkSpeed::Edr));
    t
}

/// Builds and runs the scenario for `duration`, tracing every `sample`.
fn run(cc: &OpensmCc, traffic: Traffic, size: u32, depth: u32, duration: Picos) -> Run {
    let config = FabricConfig {
        crossbar_speedup_permille: 3000,
        ..FabricConfig::default()
    };
    let rate = config.link_rate;
    let rx_buffer = config.rx_buffer_bytes;
    let mut f = Fabric::new(topology(), config).unwrap();
    if let Some(m) = cc.marker(rx_buffer, &SeedTree::new(11)) {
        f.set_congestion_marker(Box::new(m));
    }
    let dev_for = |f: &Fabric, name: &str, seed: u64| {
        let mut cfg = device_config(f.lid(name).unwrap());
        cfg.cc = cc.device_cc(&rate);
        Device::new(cfg, seed)
    };
    let mut flows: Vec<(String, String)> = Vec::new();
    if traffic != Traffic::VictimAlone {
        flows.extend((0..HOT).map(|i| (format!("h{i}"), "d".to_string())));
    }
    if traffic != Traffic::Incast {
        flows.push(("v".into(), "w".into()));
    }
    let mut d = dev_for(&f, "d", 100);
    let mut w = dev_for(&f, "w", 101);
    let mut sources = Vec::new();
    for (k, (src, dst)) in flows.iter().enumerate() {
        let mut s = dev_for(&f, src, k as u64);
        let dst_dev = if dst == "d" { &mut d } else { &mut w };
        let a = rc_side(&mut s, size as usize, 0x1000_0000).unwrap();
        let b = rc_side(dst_dev, size as usize, 0x2000_0000 + k as u64 * 0x100_0000).unwrap();
        let (ls, ld) = (f.lid(src).unwrap(), f.lid(dst).unwrap());
        rc_connect(&mut s, &a, &b, ld, 0, Mtu::M4096, 14).unwrap();
        rc_connect(dst_dev, &b, &a, ls, 0, Mtu::M4096, 14).unwrap();
        sources.push(CcSource {
            host: src.clone(),
            port: 1,
            qpn: a.qpn,
        });
        let app = Writer::new(a, b, size, depth);
        f.attach(src, Box::new(EngineHca::new(s, Box::new(app))))
            .unwrap();
    }
    f.attach("d", Box::new(EngineHca::new(d, Box::new(Passive))))
        .unwrap();
    f.attach("w", Box::new(EngineHca::new(w, Box::new(Passive))))
        .unwrap();
    let mut trace = CcTrace::new(sources);
    let mut root_queue = Vec::new();
    let step = 10 * PS_PER_US;
    while f.now() < duration {
        let until = (f.now() + step).min(duration);
        trace.run(&mut f, until, step);
        root_queue.push(f.queued_blocks("sw1", ROOT_PORT, 0).unwrap());
    }
    Run {
        fabric: f,
        trace,
        root_queue,
    }
}

fn writer<'a>(f: &'a mut Fabric, host: &str) -> &'a Writer {
    f.endpoint_mut::<EngineHca>(host, 1)
        .unwrap()
        .app::<Writer>()
        .unwrap()
}

/// Goodput of `host` in Gb/s over [from, to).
fn gbps(f: &mut Fabric, host: &str, from: Picos, to: Picos) -> f64 {
    let (a, b) = (to_engine_nanos(from), to_engine_nanos(to));
    writer(f, host).bytes_between(a, b) as f64 * 8.0 / (b - a) as f64
}

/// CC off: OpenSM's `congestion_control FALSE`.
fn cc_off() -> OpensmCc {
    parse_opensm_cc("congestion_control FALSE\n").unwrap()
}

/// A linear CCT of 128 entries: entry i delays `i x mult / 2^shift` packet times.
fn linear_cct(shift: u8, mult: u16) -> String {
    (0..128u16)
        .map(|i| format!("{shift}:{}", i * mult))
        .collect::<Vec<_>>()
        .join(",")
}

/// A quadratic CCT of 128 entries, the shape Simula and LLNL published for InfiniBand CC
/// tuning: entry i delays `i^2 / 512` packet times (shift 3, multiplier i^2 / 64), so the
/// first 8 indexes do not slow a source at all (a flow marked now and then keeps its rate)
/// and the table ends at 31.5 packet times, enough for a 16:1 incast.
fn quadratic_cct() -> String {
    (0..128u32)
        .map(|i| format!("3:{}", i * i / 64))
        .collect::<Vec<_>>()
        .join(",")
}

/// Spec-typical settings in OpenSM's keys: `threshold` at every switch port, every
/// eligible packet of at least 512 bytes marked (ACKs never), no victim ports, per-QP CCA
/// with CCTI_Increase 1, `timer` x 1.024 us of CCTI_Timer, and the table `cct`.
fn cc_on(threshold: u8, timer: u16, cct: &str) -> OpensmCc {
    let text = format!(
        "congestion_control TRUE\n\
         cc_sw_cong_setting_control_map 0x1f\n\
         cc_sw_cong_setting_threshold {threshold}\n\
         cc_sw_cong_setting_packet_size 8\n\
         cc_sw_cong_setting_marking_rate 0\n\
         cc_sw_cong_setting_victim_mask 0x0\n\
         cc_ca_cong_setting_port_control 0x0000\n\
         cc_ca_cong_setting_control_map 0x0001\n\
         cc_ca_cong_setting_ccti_timer 0 {timer}\n\
         cc_ca_cong_setting_ccti_increase 0 1\n\
         cc_ca_cong_setting_trigger_threshold 0 2\n\
         cc_ca_cong_setting_ccti_min 0 0\n\
         cc_cct {cct}\n"
    );
    parse_opensm_cc(&text).unwrap()
}

fn max_after(v: &[u32], from: usize) -> u32 {
    v[from..].iter().copied().max().unwrap_or(0)
}

/// The victim settings: Threshold 14 (mark a packet that waited more than two 4 KiB packet
/// times at the head of its input for its output), CCTI_Timer 60 (61.4 us) and the
/// quadratic table.
fn cc_victim_settings() -> OpensmCc {
    cc_on(14, 60, &quadratic_cct())
}

#[test]
fn victim_flow_collapses_without_cc_and_recovers_with_it() {
    // 6 ms, measured over the second half: the loop has settled (CCTI_Timer 61 us, CCTIs
    // in the tens) and the start-up transient is out of the window.
    let dur = 6_000 * PS_PER_US;
    let (from, to) = (dur / 2, dur);
    // Trace samples are 10 us apart: the first one in the window.
    let k0 = (from / (10 * PS_PER_US)) as usize;
    let alone = {
        let mut r = run(&cc_off(), Traffic::VictimAlone, 4_096, 32, dur);
        gbps(&mut r.fabric, "v", from, to)
    };
    // Max-min fair share of the victim: nothing on its path is oversubscribed (h0..h3 need
    // half of d's link between them, the 12x link and its crossbar input carry three host
    // links), so its share is what it gets alone.
    let fair = alone;
    let mut off = run(&cc_off(), Traffic::IncastAndVictim, 4_096, 32, dur);
    let victim_off = gbps(&mut off.fabric, "v", from, to);
    let q_off = max_after(&off.root_queue, k0);
    let mut on = run(
        &cc_victim_settings(),
        Traffic::IncastAndVictim,
        4_096,
        32,
        dur,
    );
    let victim_on = gbps(&mut on.fabric, "v", from, to);
    let q_on = max_after(&on.root_queue, k0);
    let hot: Vec<f64> = (0..HOT)
        .map(|i| gbps(&mut on.fabric, &format!("h{i}"), from, to))
        .collect();
    let d_on: f64 = hot.iter().sum();
    // FECN marks and BECNs in the window, from the trace's per-port series.
    let in_window = |node: &str, port: u8, f: fn(&PortCcSeries) -> &Vec<u64>| {
        on.trace
            .ports
            .iter()
            .find(|p| p.node == node && p.port == port)
            .map_or(0, |p| f(p)[f(p).len() - 1] - f(p)[k0])
    };
    let root_marks = in_window("sw1", ROOT_PORT, |p| &p.fecn_marked);
    let exit_marks = in_window("sw1", 6, |p| &p.fecn_marked);
    let victim_becns = in_window("v", 1, |p| &p.becn_received);
    let (vccti, _) = on.trace.ccti_mean_std(HOT, from);
    eprintln!(
        "victim alone {alone:.2} Gb/s (fair share); CC off {victim_off:.2} (root queue max \
         {q_off} blocks); CC on {victim_on:.2} = {:.0}% (root queue max {q_on} blocks, \
         incast total {d_on:.2} Gb/s, per sender {hot:.1?}); in the window: {root_marks} \
         FECN marked at the root, {exit_marks} at the victim's exit port, {victim_becns} \
         BECNs at the victim (CCTI mean {vccti:.1})",
        100.0 * victim_on / fair
    );
    // Without CC the victim collapses through head-of-line blocking.
    assert!(
        victim_off < 0.1 * fair,
        "without CC the victim should collapse: {victim_off:.2} of {fair:.2} Gb/s"
    );
    // With CC it keeps at least 80% of its fair share.
    assert!(
        victim_on >= 0.8 * fair,
        "with CC the victim should keep 80% of {fair:.2} Gb/s: {victim_on:.2}"
    );
    // The root's queue stays bounded: within one input buffer (1024 blocks) at every
    // sample, where without CC it holds every buffer of the congestion tree.
    assert!(q_on <= 1024, "root queue reached {q_on} blocks with CC");
    assert!(
        q_off > 4 * 1024,
        "root queue without CC only {q_off} blocks"
    );
    // The loop is closed at the root: the hot senders are marked there and the victim is
    // left alone (its exit port is served promptly, so it is not a root).
    assert!(root_marks > 100, "{root_marks} marks at the root");
    assert_eq!(exit_marks, 0, "the victim's exit port marked");
    // The incast still fills most of d's link.
    assert!(d_on > 0.75 * alone, "incast total {d_on:.2} Gb/s");
}

/// Per-sender coefficient of variation of the rate in `window` windows over [from, to),
/// averaged over senders; and the 99th-percentile message latency (ns) over all senders.
fn oscillation_and_p99(r: &mut Run, from: Picos, to: Picos, window: Picos) -> (f64, Nanos) {
    let mut cov_sum = 0.0;
    let mut lat = Vec::new();
    for i in 0..HOT {
        let w = writer(&mut r.fabric, &format!("h{i}"));
        let mut rates = Vec::new();
        let mut t = from;
        while t + window <= to {
            rates.push(w.bytes_between(to_engine_nanos(t), to_engine_nanos(t + window)) as f64);
            t += window;
        }
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let var = rates.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / rates.len() as f64;
        cov_sum += if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
        lat.extend(
            w.done
                .iter()
                .filter(|(t, _)| *t >= to_engine_nanos(from))
                .map(|(_, l)| *l),
        );
    }
    lat.sort_unstable();
    let p99 = lat[(lat.len() * 99 / 100).min(lat.len() - 1)];
    (cov_sum / HOT as f64, p99)
}

#[test]
fn a_shallow_slope_with_a_long_timer_oscillates_and_inflates_the_tail() {
    // 6 ms of 16 KiB WRITEs, 4 in flight per sender, measured after the first millisecond
    // in 250 us windows (about 20 messages per sender and window, so that counting whole
    // messages does not drown the rate swings).
    let dur = 6_000 * PS_PER_US;
    let (from, window) = (1_000 * PS_PER_US, 250 * PS_PER_US);
    // Shallow: each CCTI step adds half a packet time, CCTI_Timer 300 (307 us).
    let mut shallow = run(
        &cc_on(15, 300, &linear_cct(1, 1)),
        Traffic::Incast,
        16_384,
        4,
        dur,
    );
    // Steep: each step adds a whole packet time, CCTI_Timer 40 (41 us).
    let mut steep = run(
        &cc_on(15, 40, &linear_cct(0, 1)),
        Traffic::Incast,
        16_384,
        4,
        dur,
    );
    let (cov_sh, p99_sh) = oscillation_and_p99(&mut shallow, from, dur, window);
    let (cov_st, p99_st) = oscillation_and_p99(&mut steep, from, dur, window);
    let spread = |r: &Run| {
        (0..HOT)
            .map(|s| r.trace.ccti_mean_std(s, from))
            .map(|(m, s)| if m > 0.0 { s / m } else { 0.0 })
            .sum::<f64>()
            / HOT as f64
    };
    let (sp_sh, sp_st) = (spread(&shallow), spread(&steep));
    let k0 = (from / (10 * PS_PER_US)) as usize;
    let q_sh = max_after(&shallow.root_queue, k0);
    let q_st = max_after(&steep.root_queue, k0);
    eprintln!(
        "shallow: rate CoV {cov_sh:.3}, CCTI CoV {sp_sh:.3}, p99 {p99_sh} ns, queue max \
         {q_sh}; steep: rate CoV {cov_st:.3}, CCTI CoV {sp_st:.3}, p99 {p99_st} ns, queue \
         max {q_st}"
    );
    // Oscillation: the senders' rates swing more with the shallow table and long timer
    // (the CCTI climbs for long before it slows a sender enough, then takes 307 us per step
    // to come back), and their CCTIs swing more relative to their level.
    assert!(
        cov_sh > 1.5 * cov_st,
        "shallow slope should vary the rates more: rate CoV {cov_sh:.3} vs {cov_st:.3}"
    );
    assert!(
        sp_sh > 1.5 * sp_st,
        "shallow slope should swing the CCTI more: CCTI CoV {sp_sh:.3} vs {sp_st:.3}"
    );
    // The tail: the senders caught high on the slow way down wait longest.
    assert!(
        p99_sh as f64 > 1.5 * p99_st as f64,
        "shallow slope should have the worse tail: p99 {p99_sh} ns vs {p99_st} ns"
    );
    // The steep table holds the root queue within one input buffer.
    assert!(
        q_st <= 1024,
        "steep table: root queue reached {q_st} blocks"
    );
}
