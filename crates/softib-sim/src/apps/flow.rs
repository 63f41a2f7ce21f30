//! The application model of `[[flow]]` traffic on one simulated host: requester QPs that
//! keep a window of work requests posted (perftest's `ib_*_bw` loop), and the receiving
//! application of SEND flows, which keeps receive WRs posted on a QP or a shared receive
//! queue and re-posts each consumed one after a processing delay.
//!
//! Where a message is counted: reliable (RC, RD) flows and UC WRITEs at the requester's
//! completion, as perftest does (an RC or RD completion means the responder acknowledged the
//! data). Unreliable SENDs (UC, UD) are counted where they arrive: a requester completion
//! only says the packets left, so the receiving application records each receive
//! completion, matched to its post time by the sequence number the requester sends as
//! immediate data (4 bytes of ImmDt per message); messages that never arrive are not
//! counted.
//!
//! Ring all-reduce gating: a requester with a `gate` may have posted at most one message
//! more than its gate receiver has received (step k + 1 needs the chunk of step k from the
//! predecessor), which is the data dependency of a ring all-reduce.

use crate::report::flows::{FlowRecorder, SharedRecorder};
use softib_fabric::engine_hca::HostApp;
use softib_fabric::time::{from_engine_nanos, Picos};
use softib_transport::{
    CqHandle, Device, Nanos, RecvWr, SendFlags, SendWr, Sge, SrqHandle, UdDest, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

/// Unreliable messages of a flow posted and not yet received that the settlement keeps at
/// most; older ones count as lost.
const LEDGER_CAP: usize = 1 << 20;

/// The posts and arrivals of unreliable messages (UC and UD SENDs, counted where they
/// arrive), logged as the run goes and matched after it ([`UnreliableLog::settle`]).
///
/// The requester and the receiver of a flow may run in different partitions of a
/// partitioned run, even in different processes, so the receiver cannot look the post time
/// up as the message arrives; matching after the run, from logs merged over the partitions,
/// gives the same figures whatever the partitioning, and the same as an unpartitioned run.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnreliableLog {
    /// Per flow: (sequence number, post time), in post order.
    posts: BTreeMap<u32, Vec<(u32, Picos)>>,
    /// Per flow: (sequence number, arrival time, payload bytes), in arrival order.
    arrivals: BTreeMap<u32, Vec<(u32, Picos, u64)>>,
}

/// The log shared by the hosts of one fabric (one partition runs on one thread).
pub type Ledger = Rc<RefCell<UnreliableLog>>;

impl UnreliableLog {
    /// Message `seq` of `flow` was posted at `at`.
    pub(crate) fn post(&mut self, flow: u32, seq: u32, at: Picos) {
        self.posts.entry(flow).or_default().push((seq, at));
    }

    /// Message `seq` of `flow` arrived at `at` with `payload` bytes.
    pub(crate) fn arrive(&mut self, flow: u32, seq: u32, at: Picos, payload: u64) {
        self.arrivals
            .entry(flow)
            .or_default()
            .push((seq, at, payload));
    }

    /// Adds another partition's log. A flow's posts come from its requester and its
    /// arrivals from its receiver, each in one partition, so nothing interleaves.
    pub fn merge(&mut self, other: UnreliableLog) {
        for (flow, mut v) in other.posts {
            self.posts.entry(flow).or_default().append(&mut v);
        }
        for (flow, mut v) in other.arrivals {
            self.arrivals.entry(flow).or_default().append(&mut v);
        }
    }

    /// Matches every arrival to its post and records the messages and the losses in
    /// `recorder`. Per flow, posts and arrivals are taken in time order (an arrival before
    /// a post of the same picosecond); a post finding [`LEDGER_CAP`] messages outstanding
    /// counts the oldest as lost; an arrival skips (and counts as lost) the messages posted
    /// before it that have not arrived: a flow's messages arrive in order (one path, one QP).
    pub fn settle(&self, recorder: &mut FlowRecorder) {
        let none = Vec::new();
        let flows: std::collections::BTreeSet<u32> = self
            .posts
            .keys()
            .chain(self.arrivals.keys())
            .copied()
            .collect();
        for flow in flows {
            let posts = self.posts.get(&flow).unwrap_or(&none);
            let arrivals = self.arrivals.get(&flow).map_or(&[][..], |v| &v[..]);
            let mut q: VecDeque<(u32, Picos)> = VecDeque::new();
            let mut p = posts.iter().peekable();
            for &(seq, at, payload) in arrivals {
                while let Some(&&(s, t)) = p.peek() {
                    if t >= at {
                        break;
                    }
                    p.next();
                    if q.len() >= LEDGER_CAP {
                        q.pop_front();
                        recorder.record_lost(flow, 1);
                    }
                    q.push_back((s, t));
                }
                let (posted, lost) = take_posted(&mut q, seq);
                if lost > 0 {
                    recorder.record_lost(flow, lost);
                }
                if let Some(posted) = posted {
                    recorder.record_message(flow, at, payload, posted);
                }
            }
            // Posts after the last arrival: only the cap's losses remain to count.
            let rest = q.len() + p.count();
            if rest > LEDGER_CAP {
                recorder.record_lost(flow, (rest - LEDGER_CAP) as u64);
            }
        }
    }
}

/// Every status name [`wc_status_name`] gives.
const WC_STATUS_NAMES: [&str; 18] = [
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_LEN_ERR",
    "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_MW_BIND_ERR",
    "IBV_WC_GENERAL_ERR",
    "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR",
    "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR",
];

/// Reads error counts by status name (another rank's records): a name that is not one of
/// [`wc_status_name`]'s is refused, as the bytes did not come from a softib rank.
pub(crate) fn deserialize_status_names<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<&'static str, u64>, D::Error> {
    let raw: BTreeMap<String, u64> = serde::Deserialize::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| {
            WC_STATUS_NAMES
                .iter()
                .find(|n| **n == k)
                .map(|n| (*n, v))
                .ok_or_else(|| serde::de::Error::custom(format!("unknown status `{k}`")))
        })
        .collect()
}

/// The `IBV_WC_*` name of a completion status, as libibverbs spells it.
pub fn wc_status_name(s: WcStatus) -> &'static str {
    match s {
        WcStatus::Success => "IBV_WC_SUCCESS",
        WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
        WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
        WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
        WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
        WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
        WcStatus::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
        WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
        WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
        WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
        WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
        WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
        WcStatus::MwBindErr => "IBV_WC_MW_BIND_ERR",
        WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
        WcStatus::LocRddViolErr => "IBV_WC_LOC_RDD_VIOL_ERR",
        WcStatus::RemInvRdReqErr => "IBV_WC_REM_INV_RD_REQ_ERR",
        WcStatus::InvEecnErr => "IBV_WC_INV_EECN_ERR",
        WcStatus::InvEecStateErr => "IBV_WC_INV_EEC_STATE_ERR",
    }
}

/// One requester QP.
pub(crate) struct Requester {
    pub(crate) flow: u32,
    pub(crate) qpn: u32,
    /// RD: the EE context its messages go over (it holds the flow's transport counters).
    pub(crate) eec: Option<u32>,
    /// The work request posted every time (only `wr_id` and, unreliable, `imm_data` change).
    pub(crate) wr: SendWr,
    /// Unsignaled work requests posted just before each message, and how many.
    pub(crate) lead: Option<(SendWr, u32)>,
    /// Payload bytes a message counts for.
    pub(crate) size: u32,
    pub(crate) tx_depth: u32,
    pub(crate) remaining: Option<u64>,
    pub(crate) start: Nanos,
    /// When it stops posting.
    pub(crate) stop: Option<Nanos>,
    /// Index of the receiver on this host whose arrivals gate the posts (ring).
    pub(crate) gate: Option<usize>,
    /// Whether the receiver records the messages (unreliable SEND) rather than this side.
    pub(crate) counted_at_receiver: bool,
    pub(crate) posted: VecDeque<Nanos>,
    pub(crate) posted_total: u64,
    pub(crate) started: bool,
    pub(crate) failed: bool,
}

/// Where a receiver's WRs go.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RecvQueue {
    /// The QP's own receive queue.
    Own,
    /// A shared receive queue: index into the host's SRQs.
    Shared(usize),
}

/// The receiving application of one SEND flow's responder QP.
pub(crate) struct Receiver {
    pub(crate) flow: u32,
    pub(crate) qpn: u32,
    pub(crate) queue: RecvQueue,
    pub(crate) sge: Sge,
    /// Receive WRs kept posted (own queue).
    pub(crate) depth: u32,
    /// Time from consuming a receive to re-posting it.
    pub(crate) delay: Nanos,
    /// Bytes of each receive that are not payload (the UD GRH area).
    pub(crate) header: u32,
    /// Whether this side records the flow's messages (unreliable SEND).
    pub(crate) records: bool,
    /// Re-posts waiting for their time (own queue), in order.
    pub(crate) due: VecDeque<Nanos>,
    pub(crate) received: u64,
    /// The requester on this host whose posts this receiver's arrivals gate (ring).
    pub(crate) gates: Option<usize>,
}

/// Where a shared queue's receive WRs go.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SharedTarget {
    /// A shared receive queue (RC QPs of one table).
    Srq(SrqHandle),
    /// The receive queue of a UD QP that every sender of the table reaches.
    Qp(u32),
}

/// A receive queue serving several flows, and the re-posting of its WRs.
pub(crate) struct SharedQueue {
    pub(crate) target: SharedTarget,
    pub(crate) sge: Sge,
    pub(crate) depth: u32,
    /// Re-posts waiting for their time (at the delay of the receiver that used the WR).
    pub(crate) due: VecDeque<Nanos>,
}

/// Whose receive completions a QP produces.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RecvRole {
    /// One flow's: index into `receivers`.
    Flow(usize),
    /// A shared UD or RD QP's: the flow is found from the sender (`ud_sources`).
    Ud,
}

/// The wr_id of a requester's WRs: its index in the high half (send completions of a QP
/// that several flows share, UD, are dispatched by it), its message count in the low half.
fn wr_id(index: usize, seq: u64) -> u64 {
    ((index as u64) << 32) | (seq & 0xffff_ffff)
}

/// The application of one host: its requesters, receivers and shared receive queues. All
/// its QPs complete into one CQ, so a poll costs the same with one QP or a thousand.
pub(crate) struct FlowHost {
    pub(crate) cq: CqHandle,
    /// Receiving QPs by QPN (send completions are dispatched by wr_id).
    pub(crate) recv_roles: BTreeMap<u32, RecvRole>,
    /// Receivers of shared UD and RD QPs by sender (source LID, source QPN).
    pub(crate) ud_sources: BTreeMap<(u16, u32), usize>,
    pub(crate) requesters: Vec<Requester>,
    pub(crate) receivers: Vec<Receiver>,
    pub(crate) srqs: Vec<SharedQueue>,
    /// Responder QPs on this host: (flow, QPN).
    pub(crate) responders: Vec<(u32, u32)>,
    /// 8-byte atomic targets on this host: (flow table, lkey, addr).
    pub(crate) counters: Vec<(usize, u32, u64)>,
    /// The buffers the QPs of each flow table share on this host: (flow table, lkey).
    pub(crate) buffers: Vec<(usize, u32)>,
    pub(crate) recorder: SharedRecorder,
    pub(crate) ledger: Ledger,
    pub(crate) wcs: Vec<WorkCompletion>,
    /// Some requester is UC or UD (its WRs complete on transmit; RD's, like RC's, on ACK).
    pub(crate) unreliable: bool,
    /// Requesters that may be able to post (a completion freed a slot, a gate opened).
    pub(crate) dirty: Vec<usize>,
    /// Requesters not started yet: while any, every requester is looked at.
    pub(crate) unstarted: usize,
}

impl FlowHost {
    /// The requester and responder QP numbers of each flow on this host (for RD flows, the
    /// EE contexts', which do the transport work): (flow, QPN, is requester).
    pub(crate) fn qps(&self) -> impl Iterator<Item = (u32, u32, bool)> + '_ {
        self.requesters
            .iter()
            .map(|r| (r.flow, r.eec.unwrap_or(r.qpn), true))
            .chain(
                self.responders
                    .iter()
                    .map(|&(flow, qpn)| (flow, qpn, false)),
            )
    }

    fn post_recv(dev: &mut Device, qpn: u32, queue: RecvQueue, srqs: &[SharedQueue], sge: Sge) {
        let wr = RecvWr {
            wr_id: 0,
            sg_list: vec![sge],
        };
        // A refusal means the QP left service (its completions say why) or the queue is
        // full; either way there is nothing to re-post.
        match queue {
            RecvQueue::Own => {
                let _ = dev.post_recv(qpn, &wr);
            }
            RecvQueue::Shared(i) => Self::post_shared(dev, &srqs[i]),
        }
    }

    fn post_shared(dev: &mut Device, q: &SharedQueue) {
        let wr = RecvWr {
            wr_id: 0,
            sg_list: vec![q.sge],
        };
        let _ = match q.target {
            SharedTarget::Srq(srq) => dev.post_srq_recv(srq, &wr),
            SharedTarget::Qp(qpn) => dev.post_recv(qpn, &wr),
        };
    }

    fn repost_due(&mut self, now: Nanos, dev: &mut Device) {
        for r in &mut self.receivers {
            while r.due.front().is_some_and(|&t| t <= now) {
                r.due.pop_front();
                Self::post_recv(dev, r.qpn, r.queue, &self.srqs, r.sge);
            }
        }
        for s in &mut self.srqs {
            while s.due.front().is_some_and(|&t| t <= now) {
                s.due.pop_front();
                Self::post_shared(dev, s);
            }
        }
    }

    fn poll(&mut self, now: Nanos, dev: &mut Device) {
        let at = from_engine_nanos(now);
        let mut reposted_now = false;
        loop {
            let n = dev.poll_cq(self.cq, &mut self.wcs);
            if n == 0 {
                break;
            }
            for wc in &self.wcs[..n] {
                let receive = matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
                let role = if receive {
                    match self.recv_roles.get(&wc.qp_num) {
                        Some(&RecvRole::Flow(i)) => Some(Err(i)),
                        Some(&RecvRole::Ud) => {
                            self.ud_sources.get(&(wc.slid, wc.src_qp)).map(|&i| Err(i))
                        }
                        None => None,
                    }
                } else {
                    Some(Ok((wc.wr_id >> 32) as usize))
                };
                match role {
                    Some(Ok(i)) if i < self.requesters.len() => {
                        self.dirty.push(i);
                        let op = &mut self.requesters[i];
                        let posted = op.posted.pop_front().unwrap_or(now);
                        if wc.status == WcStatus::Success {
                            if !op.counted_at_receiver {
                                self.recorder.borrow_mut().record_message(
                                    op.flow,
                                    at,
                                    op.size as u64,
                                    from_engine_nanos(posted),
                                );
                            }
                        } else {
                            self.recorder
                                .borrow_mut()
                                .record_error(op.flow, wc_status_name(wc.status));
                            op.failed = true;
                        }
                    }
                    Some(Err(i)) => {
                        let r = &mut self.receivers[i];
                        if wc.status != WcStatus::Success {
                            // Flushed receives after the QP failed say nothing new.
                            if wc.status != WcStatus::WrFlushErr {
                                self.recorder
                                    .borrow_mut()
                                    .record_error(r.flow, wc_status_name(wc.status));
                            }
                            continue;
                        }
                        r.received += 1;
                        if let Some(g) = r.gates {
                            self.dirty.push(g);
                        }
                        let due = now + r.delay;
                        reposted_now |= r.delay == 0;
                        match r.queue {
                            RecvQueue::Own => r.due.push_back(due),
                            RecvQueue::Shared(q) => self.srqs[q].due.push_back(due),
                        }
                        if r.records {
                            let payload = wc.byte_len.saturating_sub(r.header) as u64;
                            if let Some(seq) = wc.imm_data {
                                self.ledger.borrow_mut().arrive(r.flow, seq, at, payload);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        if reposted_now {
            self.repost_due(now, dev);
        }
    }

    fn post_sends(&mut self, now: Nanos, dev: &mut Device) {
        // Once every requester has started, only those a completion or a gate touched can
        // post: a host with a thousand QPs does not look at all of them per packet.
        let mut dirty = std::mem::take(&mut self.dirty);
        if self.unstarted > 0 {
            dirty.clear();
            dirty.extend(0..self.requesters.len());
            self.unstarted = 0;
        }
        for &index in &dirty {
            let op = &mut self.requesters[index];
            if op.failed || op.stop.is_some_and(|t| now >= t) {
                continue;
            }
            if now < op.start {
                self.unstarted += 1;
                continue;
            }
            op.started = true;
            let allowed = match op.gate {
                Some(g) => 1 + self.receivers[g].received,
                None => u64::MAX,
            };
            while (op.posted.len() as u32) < op.tx_depth
                && op.remaining != Some(0)
                && op.posted_total < allowed
            {
                let seq = op.posted_total as u32;
                if let Some((lead, count)) = op.lead.as_mut() {
                    // Errors of a lead complete (signaled or not) under the message's wr_id.
                    lead.wr_id = wr_id(index, op.posted_total);
                    if (0..*count).any(|_| dev.post_send(now, op.qpn, lead).is_err()) {
                        op.failed = true;
                        break;
                    }
                }
                op.wr.wr_id = wr_id(index, op.posted_total);
                if op.counted_at_receiver {
                    op.wr.imm_data = Some(seq);
                }
                if dev.post_send(now, op.qpn, &op.wr).is_err() {
                    // The QP left RTS: its error completions tell the report why.
                    op.failed = true;
                    break;
                }
                if op.counted_at_receiver {
                    self.ledger
                        .borrow_mut()
                        .post(op.flow, seq, from_engine_nanos(now));
                }
                op.posted.push_back(now);
                op.posted_total += 1;
                if let Some(r) = op.remaining.as_mut() {
                    *r -= 1;
                }
            }
        }
        // Keep the allocation for the next round.
        dirty.clear();
        self.dirty = dirty;
    }
}

/// The post time of message `seq` from a flow's outstanding posts `q`; earlier messages
/// still in it were lost. Also returns how many earlier messages were skipped: a flow's
/// messages arrive in order (one path, one QP), so those will never arrive.
fn take_posted(q: &mut VecDeque<(u32, Picos)>, seq: u32) -> (Option<Picos>, u64) {
    let mut lost = 0;
    while let Some(&(s, t)) = q.front() {
        q.pop_front();
        if s == seq {
            return (Some(t), lost);
        }
        // Sequence numbers wrap at 2^32; one still ahead stays for a later arrival.
        if s.wrapping_sub(seq) < u32::MAX / 2 {
            q.push_front((s, t));
            return (None, lost);
        }
        lost += 1;
    }
    (None, lost)
}

impl HostApp for FlowHost {
    fn on_start(&mut self, now: Nanos, dev: &mut Device) {
        for r in &self.receivers {
            if let RecvQueue::Own = r.queue {
                for _ in 0..r.depth {
                    Self::post_recv(dev, r.qpn, r.queue, &self.srqs, r.sge);
                }
            }
        }
        for s in &self.srqs {
            for _ in 0..s.depth {
                Self::post_shared(dev, s);
            }
        }
        self.post_sends(now, dev);
    }

    fn on_progress(&mut self, now: Nanos, dev: &mut Device) {
        self.repost_due(now, dev);
        self.poll(now, dev);
        self.post_sends(now, dev);
    }

    fn next_wakeup(&self) -> Option<Nanos> {
        // Future start times and re-posts; completions drive the rest.
        let starts = self
            .requesters
            .iter()
            .take(if self.unstarted > 0 { usize::MAX } else { 0 })
            .filter(|o| !o.started && o.remaining != Some(0) && !o.failed)
            .map(|o| o.start);
        let reposts = self
            .receivers
            .iter()
            .filter_map(|r| r.due.front().copied())
            .chain(self.srqs.iter().filter_map(|s| s.due.front().copied()));
        starts.chain(reposts).min()
    }

    fn progress_on_transmit(&self) -> bool {
        self.unreliable
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// Builds the work request a requester posts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn work_request(
    opcode: WrOpcode,
    local: Sge,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
    ud: Option<UdDest>,
) -> SendWr {
    SendWr {
        wr_id: 0,
        opcode,
        sg_list: vec![local],
        flags: SendFlags::SIGNALED,
        remote_addr,
        rkey,
        compare_add,
        swap,
        ud,
        // The *_WITH_IMM opcodes need a value; unreliable flows put their sequence number
        // there at each post.
        imm_data: matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm).then_some(0),
        ..SendWr::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arrivals are matched to their posts after the run; messages that a later one
    /// overtook count as lost; logs of two partitions (posts in one, arrivals in the
    /// other) settle as one log does.
    #[test]
    fn a_settled_log_matches_arrivals_to_posts_and_counts_the_skipped_as_lost() {
        let mut posts = UnreliableLog::default();
        for seq in 0..6u32 {
            posts.post(7, seq, 1_000_000 * seq as Picos);
        }
        let mut arrivals = UnreliableLog::default();
        // 0 and 2 arrive (1 is lost), then 5 (3 and 4 lost).
        arrivals.arrive(7, 0, 1_500_000, 100);
        arrivals.arrive(7, 2, 3_500_000, 100);
        arrivals.arrive(7, 5, 6_500_000, 100);
        let mut one = posts.clone();
        one.merge(arrivals.clone());
        let mut split = arrivals;
        split.merge(posts);
        for log in [one, split] {
            let mut rec = FlowRecorder::new(1_000_000);
            log.settle(&mut rec);
            let f = &rec.flows()[&7];
            assert_eq!((f.messages, f.payload_bytes, f.lost), (3, 300, 3));
            // Every message took 1.5 us from post to arrival.
            assert_eq!(f.message_latency.max(), 1500);
            assert_eq!((f.first_ps, f.last_ps), (Some(1_500_000), 6_500_000));
        }
    }

    /// A post that finds the cap's worth of messages outstanding counts the oldest lost.
    #[test]
    fn posts_beyond_the_cap_count_the_oldest_as_lost() {
        let mut log = UnreliableLog::default();
        for seq in 0..(LEDGER_CAP as u32 + 3) {
            log.post(1, seq, seq as Picos);
        }
        let mut rec = FlowRecorder::new(1_000);
        log.settle(&mut rec);
        assert_eq!(rec.flows()[&1].lost, 3);
        assert_eq!(rec.flows()[&1].messages, 0);
    }
}
