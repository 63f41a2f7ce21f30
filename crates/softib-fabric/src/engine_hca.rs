//! An HCA port driven by the real transport engine (`softib_transport::Device`).
//!
//! [`EngineHca`] implements [`Endpoint`]: it pulls `Device::poll_transmit` straight into a
//! pooled packet buffer behind room for the LRH, writes the LRH (and a GRH when the path has
//! one) with softib-wire, and queues the packet on the VL its SL maps to; on receive it reads
//! the LRH/GRH, hands the transport bytes (BTH through pad, without ICRC and VCRC, which the
//! fabric has checked) to `Device::handle_packet`, and it maps the engine's timers to
//! simulator wake-ups. The application on top (a [`HostApp`]) posts work and polls
//! completions after every engine interaction.
//!
//! Time: the engine sees whole nanoseconds ([`to_engine_nanos`]); its timer deadlines become
//! simulator picoseconds ([`from_engine_nanos`]).

use crate::hca::{Endpoint, HcaTx, Outgoing};
use crate::packet::{Packet, ZeroSpan};
use crate::time::{from_engine_nanos, to_engine_nanos, Picos};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softib_transport::{Device, Nanos, RxGrh, RxMeta, ZeroPayload};
use softib_wire::grh::{GrhPacket, GrhRepr};
use softib_wire::lrh::{Lnh, LrhPacket, LrhRepr, LRH_LEN};
use std::collections::VecDeque;

const GRH_LEN: usize = 40;
/// The most packets an engine HCA queues on its port, in units of the per-VL depth.
const BACKLOG_CAP_FACTOR: usize = 64;
/// GRH next-header value for an IBA transport header (IBA 8.3.1).
const NXT_HDR_IBA: u8 = 0x1B;

/// The application running on a simulated host: it drives its device with verbs.
pub trait HostApp {
    /// Called once, at the first transmit opportunity (time 0).
    fn on_start(&mut self, now: Nanos, dev: &mut Device);
    /// Called after every engine interaction (a packet handled, a timer fired, packets
    /// pulled): poll completions, post more work.
    fn on_progress(&mut self, now: Nanos, dev: &mut Device);
    /// When the application next wants `on_progress` without any engine activity.
    fn next_wakeup(&self) -> Option<Nanos> {
        None
    }
    /// Whether `on_progress` should also run after packets were pulled for transmission:
    /// unreliable (UC, UD) send WRs complete when their packets leave, with nothing
    /// coming back to trigger a poll. Off by default, since polling on every transmit
    /// costs time on hosts with many QPs.
    fn progress_on_transmit(&self) -> bool {
        false
    }
    /// The application as `Any`, for [`EngineHca::app`]; `None` keeps it opaque.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// Counters of the encapsulation layer (packets the engine never saw).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncapCounters {
    /// Received packets whose LRH/GRH did not parse or whose LNH is not an IBA transport.
    pub rx_malformed: u64,
    /// Packets the engine produced that the port could not send (SL on no operational VL).
    pub tx_discarded: u64,
    /// Received packets handed to the engine, delayed or not (with a receive model).
    pub rx_processed: u64,
    /// Their total wait between arrival and processing, picoseconds.
    pub rx_wait_ps: u64,
    /// Most packets waiting for processing at once.
    pub rx_backlog_peak: u64,
}

/// A receive processing delay: packets reach the engine between `min` and `max` after they
/// arrived (uniformly drawn from a seeded stream), in arrival order, and never during a
/// stall window (a packet due inside one waits for its end). It models a responder that is
/// slow to process what it received (a host busy with something else) while its HCA keeps
/// accepting packets off the link, so link credits are unaffected. Atomic requests
/// additionally pass one at a time through an atomic unit that takes `atomic` each (the
/// read-modify-write an HCA serializes), so a hotspot saturates at 1 / `atomic`.
struct RxDelay {
    min: Picos,
    max: Picos,
    atomic: Picos,
    /// When the atomic unit finishes its last request.
    atomic_free_at: Picos,
    /// Processing time of every packet, one at a time (a busy, serial responder).
    service: Picos,
    /// When the processor finishes the last packet.
    busy_until: Picos,
    /// Stall windows [start, end), sorted by start.
    stalls: Vec<(Picos, Picos)>,
    rng: ChaCha8Rng,
    /// Packets waiting: (due time, receive metadata, transport bytes, described payload).
    queue: VecDeque<(Picos, RxMeta, Vec<u8>, Option<ZeroPayload>)>,
    /// Buffers of delivered packets, reused.
    spare: Vec<Vec<u8>>,
}

impl RxDelay {
    /// When a packet arriving at `now` reaches the engine (`atomic`: an atomic request).
    fn due(&mut self, now: Picos, atomic: bool) -> Picos {
        let delay = if self.max > self.min {
            self.rng.gen_range(self.min..=self.max)
        } else {
            self.min
        };
        let last = self.queue.back().map_or(0, |(due, _, _, _)| *due);
        let mut due = (now + delay).max(last);
        // Windows may overlap or abut: move past each one the time falls into.
        for &(start, end) in &self.stalls {
            if due >= start && due < end {
                due = end;
            }
        }
        if self.service > 0 {
            due = due.max(self.busy_until) + self.service;
            self.busy_until = due;
        }
        if atomic && self.atomic > 0 {
            due = due.max(self.atomic_free_at) + self.atomic;
            self.atomic_free_at = due;
        }
        due
    }
}

/// Serial processing costs of a host's receive path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxTiming {
    /// Every received packet occupies the host's processing this long, one at a time
    /// (after the delay), so duplicates cost the same work as originals.
    pub service: Picos,
    /// Every atomic request occupies the HCA's atomic unit this long, one at a time.
    pub atomic: Picos,
}

/// An HCA port running the transport engine and an application.
pub struct EngineHca {
    dev: Device,
    app: Box<dyn HostApp>,
    started: bool,
    max_len: usize,
    counters: EncapCounters,
    rx_delay: Option<RxDelay>,
}

impl EngineHca {
    /// Wraps a configured device (QPs created and connected, as applications do out of band
    /// before traffic starts) and its application.
    pub fn new(dev: Device, app: Box<dyn HostApp>) -> Self {
        // LRH + GRH + MTU + the largest header stack the engine writes (it asks for mtu + 64)
        // + ICRC + VCRC.
        let max_len = LRH_LEN + GRH_LEN + dev.config().max_mtu.bytes() as usize + 64 + 6;
        EngineHca {
            dev,
            app,
            started: false,
            max_len,
            counters: EncapCounters::default(),
            rx_delay: None,
        }
    }

    /// Delays every received packet by a time drawn uniformly from [`min`, `max`]
    /// picoseconds (from a ChaCha8 stream seeded with `seed`) before the engine sees it,
    /// keeping arrival order: the slow-responder model.
    pub fn with_rx_delay(mut self, min: Picos, max: Picos, seed: u64) -> Self {
        self.set_rx_delay(min, max, Vec::new(), RxTiming::default(), seed);
        self
    }

    /// Sets the receive processing model: a delay drawn uniformly from [`min`, `max`]
    /// picoseconds (seeded with `seed`), `stalls`, windows [start, end) in which the host
    /// processes nothing it received (what arrives or falls due inside one waits for its
    /// end), and the serial costs of `timing`. Packets already waiting keep their times.
    pub fn set_rx_delay(
        &mut self,
        min: Picos,
        max: Picos,
        mut stalls: Vec<(Picos, Picos)>,
        timing: RxTiming,
        seed: u64,
    ) {
        stalls.retain(|(s, e)| e > s);
        stalls.sort_unstable();
        let queue = self.rx_delay.take().map(|d| d.queue).unwrap_or_default();
        self.rx_delay = Some(RxDelay {
            min: min.min(max),
            max: max.max(min),
            atomic: timing.atomic,
            atomic_free_at: 0,
            service: timing.service,
            busy_until: 0,
            stalls,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue,
            spare: Vec::new(),
        });
    }

    /// Packets received but not yet processed (with a receive delay).
    pub fn rx_backlog(&self) -> usize {
        self.rx_delay.as_ref().map_or(0, |d| d.queue.len())
    }

    /// Hands the delayed packets that are due to the engine.
    fn deliver_due(&mut self, now: Picos) {
        let Some(d) = self.rx_delay.as_mut() else {
            return;
        };
        while d.queue.front().is_some_and(|(due, _, _, _)| *due <= now) {
            let (_, meta, bytes, zero_payload) = d.queue.pop_front().expect("checked");
            self.dev
                .handle_packet_described(to_engine_nanos(now), &meta, &bytes, zero_payload);
            d.spare.push(bytes);
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The device, mutable (verbs between runs).
    pub fn device_mut(&mut self) -> &mut Device {
        &mut self.dev
    }

    /// The application, as its concrete type (when it exposes itself via
    /// [`HostApp::as_any`]).
    pub fn app<T: 'static>(&self) -> Option<&T> {
        self.app.as_any()?.downcast_ref::<T>()
    }

    /// Encapsulation counters.
    pub fn encap_counters(&self) -> &EncapCounters {
        &self.counters
    }

    /// Moves packets from the engine to the port's send queues while there is room;
    /// returns how many.
    fn pull(&mut self, tx: &mut HcaTx<'_>) -> usize {
        let mut pulled = 0;
        let now = to_engine_nanos(tx.now());
        let slid = tx.lid();
        let sl2vl = tx.sl2vl();
        let sgid = self.dev.config().gid;
        // An HCA schedules its QPs per VL: a QP on a VL that cannot send (no credits, lost
        // arbitration) must not hold back QPs on other VLs. The engine offers packets in its
        // own order without saying their SL first, so pull while any VL queue has room; a
        // blocked VL's queue may then grow past the depth, bounded by the engine's windows
        // and by a cap on the whole backlog.
        let cap = tx.depth() * BACKLOG_CAP_FACTOR;
        while tx.any_room() && tx.backlog() < cap {
            // No QP is scheduled: the engine has nothing to offer, and asking would cost a
            // packet buffer taken from the pool and given back (after every received
            // packet, whose handling rarely makes one ready).
            if self.dev.is_idle() {
                break;
            }
            let dev = &mut self.dev;
            let r = tx.send_with(self.max_len, 0, |buf| {
                // A payload of zeros (ZeroMemory) stays a description: no fill, no copy.
                let t = dev.poll_transmit_described(now, &mut buf[LRH_LEN..])?;
                let mut off = LRH_LEN;
                let lnh = match t.path.grh {
                    None => Lnh::Bth,
                    Some(g) => {
                        // Make room for the GRH; a described payload's bytes need no move.
                        let moved = t.zero_payload.map_or(t.len, |z| z.offset);
                        buf.copy_within(LRH_LEN..LRH_LEN + moved, LRH_LEN + GRH_LEN);
                        if let Some(z) = t.zero_payload {
                            let pad = LRH_LEN + z.offset + z.len..LRH_LEN + t.len;
                            buf.copy_within(pad.clone(), pad.start + GRH_LEN);
                        }
                        let grh = GrhRepr {
                            traffic_class: g.traffic_class,
                            flow_label: g.flow_label,
                            payload_len: (t.len + 4) as u16,
                            next_header: NXT_HDR_IBA,
                            hop_limit: g.hop_limit,
                            sgid,
                            dgid: g.dgid,
                        };
                        grh.emit(&mut GrhPacket::new_unchecked(&mut buf[LRH_LEN..]))
                            .ok()?;
                        off += GRH_LEN;
                        Lnh::Grh
                    }
                };
                let len = off + t.len;
                let lrh = LrhRepr {
                    vl: sl2vl.vl(t.path.sl),
                    lver: 0,
                    sl: t.path.sl,
                    lnh,
                    dlid: t.path.dlid,
                    // LRH through ICRC, in words (IBA 7.7.8).
                    pkt_len_words: ((len + 4) / 4) as u16,
                    slid,
                };
                lrh.emit(&mut LrhPacket::new_unchecked(&mut buf[..LRH_LEN]))
                    .ok()?;
                let zero_payload = t.zero_payload.map(|z| ZeroSpan {
                    offset: (off + z.offset) as u16,
                    len: z.len as u16,
                });
                Some(Outgoing {
                    len,
                    dlid: t.path.dlid,
                    sl: t.path.sl,
                    management: false,
                    zero_payload,
                })
            });
            match r {
                Ok(true) => pulled += 1,
                Ok(false) => break,
                Err(_) => self.counters.tx_discarded += 1,
            }
        }
        pulled
    }

    fn progress(&mut self, tx: &mut HcaTx<'_>) {
        let now = to_engine_nanos(tx.now());
        self.app.on_progress(now, &mut self.dev);
        self.pull(tx);
    }
}

fn rx_meta(packet: &Packet) -> Option<(RxMeta, usize)> {
    let bytes = packet.bytes();
    let lrh = LrhRepr::parse(&LrhPacket::new_checked(bytes).ok()?).ok()?;
    let (grh, off) = match lrh.lnh {
        Lnh::Bth => (None, LRH_LEN),
        Lnh::Grh => {
            let g = GrhRepr::parse(&GrhPacket::new_checked(&bytes[LRH_LEN..]).ok()?).ok()?;
            (
                Some(RxGrh {
                    sgid: g.sgid,
                    dgid: g.dgid,
                    traffic_class: g.traffic_class,
                    flow_label: g.flow_label,
                    hop_limit: g.hop_limit,
                }),
                LRH_LEN + GRH_LEN,
            )
        }
        _ => return None,
    };
    if bytes.len() < off + 6 {
        return None;
    }
    Some((
        RxMeta {
            slid: packet.meta.slid,
            sl: packet.meta.sl,
            grh,
            ecn_ce: false,
        },
        off,
    ))
}

impl Endpoint for EngineHca {
    fn on_transmit_ready(&mut self, tx: &mut HcaTx<'_>) {
        if !self.started {
            self.started = true;
            let now = to_engine_nanos(tx.now());
            self.app.on_start(now, &mut self.dev);
        }
        self.pull(tx);
        // Poll even when nothing was pulled now: the packets pulled by the previous
        // `progress` completed their WRs as they left, and this call (their send queue
        // slot freed) is the only moment left to see those completions and post more.
        if self.app.progress_on_transmit() {
            self.progress(tx);
        }
    }

    fn on_receive(&mut self, packet: &Packet, tx: &mut HcaTx<'_>) {
        let Some((meta, off)) = rx_meta(packet) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let bytes = packet.bytes();
        // BTH through pad: without ICRC (4) and VCRC (2).
        let transport = &bytes[off..bytes.len() - 6];
        // A described payload, from the BTH (a span inside the LRH or GRH is malformed:
        // the engine's check of the description then drops the packet).
        let zero_payload = packet.meta.zero_payload.map(|z| ZeroPayload {
            offset: (z.offset as usize).wrapping_sub(off),
            len: z.len as usize,
        });
        if let Some(d) = self.rx_delay.as_mut() {
            // RC COMPARE_SWAP (0x13) and FETCH_ADD (0x14) requests (IBA 9.2 opcodes).
            let atomic = matches!(transport.first(), Some(0x13 | 0x14));
            let due = d.due(tx.now(), atomic);
            self.counters.rx_processed += 1;
            self.counters.rx_wait_ps += due - tx.now();
            if due > tx.now() || !d.queue.is_empty() {
                let mut buf = d.spare.pop().unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(transport);
                d.queue.push_back((due, meta, buf, zero_payload));
                self.counters.rx_backlog_peak =
                    self.counters.rx_backlog_peak.max(d.queue.len() as u64);
                return;
            }
        }
        self.dev
            .handle_packet_described(to_engine_nanos(tx.now()), &meta, transport, zero_payload);
        self.progress(tx);
    }

    fn takes_described_payloads(&self) -> bool {
        true
    }

    fn next_wakeup(&self) -> Option<Picos> {
        let engine = self.dev.poll_timeout();
        let app = self.app.next_wakeup();
        let t = match (engine, app) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let t = t.map(from_engine_nanos);
        let rx = self
            .rx_delay
            .as_ref()
            .and_then(|d| d.queue.front().map(|(due, _, _, _)| *due));
        match (t, rx) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_timer(&mut self, tx: &mut HcaTx<'_>) {
        self.deliver_due(tx.now());
        let now = to_engine_nanos(tx.now());
        if self.dev.poll_timeout().is_some_and(|t| t <= now) {
            self.dev.handle_timeout(now);
        }
        self.progress(tx);
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}
