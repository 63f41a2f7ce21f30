//! One host of the flows' set-up: its device, PD, CQ and buffers, and its half of each
//! pair it takes part in (responder: receive queue, QP, target buffer, receiver;
//! requester: QP, address handle, work request), connected as perftest's out-of-band
//! exchange would.

use crate::apps::flow::{
    work_request, FlowHost, Ledger, Receiver, RecvQueue, RecvRole, Requester, SharedQueue,
    SharedTarget,
};
use crate::apps::perftest::device_config;
use crate::report::flows::SharedRecorder;
use crate::scenario::flows::{AtomicPlan, FlowOp, FlowPlan, LeadOp, QpPlan, Service};
use softib_fabric::fabric::Fabric;
use softib_fabric::rng::{SeedTree, StreamKind};
use softib_fabric::time::to_engine_nanos;
use softib_transport::{
    AccessFlags, AhAttr, Device, MrKeys, PdHandle, QpAttr, QpCap, QpInitAttr, QpState, SendFlags,
    Sge, SrqAttr, SrqHandle, UdDest, VecMemory, VerbsError, WrOpcode,
};
use std::collections::BTreeMap;

/// Q_Key of the flows' UD QPs.
const FLOW_QKEY: u32 = 0x1111_1111;
/// First PSN of every flow QP, as perftest's exchange would agree on.
const START_PSN: u32 = 0x100;

/// One side of a flow's connection.
#[derive(Clone, Copy, Debug)]
pub(super) struct Side {
    pub(super) qpn: u32,
    keys: MrKeys,
    addr: u64,
}

/// A host's device and what the flows put on it.
pub(super) struct Host {
    pub(super) dev: Device,
    pd: PdHandle,
    next_addr: u64,
    pub(super) app: FlowHost,
    /// SRQ per flow table: index into `app.srqs`.
    srq_of_table: BTreeMap<usize, usize>,
    /// Atomic counter per flow table: (keys, addr).
    counter_of_table: BTreeMap<usize, (MrKeys, u64)>,
    /// The UD QP per flow table, and its receive queue in `app.srqs`.
    ud_of_table: BTreeMap<usize, (Side, usize)>,
    /// The shared buffer per (flow table, length).
    buffer_of_table: BTreeMap<(usize, usize), (MrKeys, u64)>,
    /// Send WRs the UD QP of each flow table may have posted: its requesters' windows.
    pub(super) ud_send_depth: BTreeMap<usize, u32>,
}

impl Host {
    /// The buffer the QPs of flow table `table` on this host share (`len` bytes): what
    /// moves is counted, not checked, so one region per table keeps memory per host
    /// rather than per QP, as it must for an all-to-all of thousands of hosts.
    fn table_buffer(&mut self, table: usize, len: usize) -> Result<(MrKeys, u64), VerbsError> {
        if let Some(&b) = self.buffer_of_table.get(&(table, len)) {
            return Ok(b);
        }
        let b = self.buffer(len)?;
        self.buffer_of_table.insert((table, len), b);
        Ok(b)
    }

    /// Registers a zeroed buffer of `len` bytes with every access right the flows use.
    fn buffer(&mut self, len: usize) -> Result<(MrKeys, u64), VerbsError> {
        let addr = self.next_addr;
        self.next_addr += (len as u64).div_ceil(4096) * 4096 + 4096;
        let keys = self.dev.reg_mr(
            self.pd,
            Box::new(VecMemory::zeroed(len)),
            addr,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        )?;
        Ok((keys, addr))
    }

    /// The UD QP of flow table `table` on this host, created (ready to send and receive,
    /// `recv_depth` receives of `len` bytes kept posted) on first use.
    fn ud_qp(
        &mut self,
        table: usize,
        len: usize,
        (send_depth, recv_depth): (u32, u32),
        qp: &QpPlan,
    ) -> Result<(Side, usize), VerbsError> {
        if let Some(&q) = self.ud_of_table.get(&table) {
            return Ok(q);
        }
        let buf = self.table_buffer(table, len)?;
        let side = self.side(Service::Ud, buf, (send_depth, recv_depth), None)?;
        connect(&mut self.dev, Service::Ud, side.qpn, 0, 0, qp)?;
        let i = self.app.srqs.len();
        self.app.srqs.push(SharedQueue {
            target: SharedTarget::Qp(side.qpn),
            sge: Sge {
                addr: side.addr,
                length: len as u32,
                lkey: side.keys.lkey,
            },
            depth: recv_depth,
            due: Default::default(),
        });
        self.app.recv_roles.insert(side.qpn, RecvRole::Ud);
        self.ud_of_table.insert(table, (side, i));
        Ok((side, i))
    }

    /// A QP of `service` (on `srq` if given) completing into the host's CQ, with queues of
    /// the depths it needs (the engine reserves them) and the buffer `buf`.
    fn side(
        &mut self,
        service: Service,
        (keys, addr): (MrKeys, u64),
        (send_depth, recv_depth): (u32, u32),
        srq: Option<SrqHandle>,
    ) -> Result<Side, VerbsError> {
        let cq = self.app.cq;
        let qpn = self.dev.create_qp(
            self.pd,
            QpInitAttr {
                qp_type: service.qp_type(),
                send_cq: cq,
                recv_cq: cq,
                srq,
                cap: QpCap {
                    max_send_wr: send_depth.max(1),
                    max_recv_wr: recv_depth.max(1),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )?;
        Ok(Side { qpn, keys, addr })
    }
}

/// Moves `me`'s QP RESET -> INIT -> RTR -> RTS: connected to `peer` at `peer_lid` (RC, UC)
/// or ready for datagrams (UD), with the attributes of `qp`.
fn connect(
    dev: &mut Device,
    service: Service,
    me: u32,
    peer: u32,
    peer_lid: u16,
    qp: &QpPlan,
) -> Result<(), VerbsError> {
    let attr = QpAttr {
        pkey_index: 0,
        port_num: 1,
        qkey: FLOW_QKEY,
        // UC has neither RDMA READ nor atomics (IBA 9.8.2).
        qp_access_flags: match service {
            Service::Uc => AccessFlags::REMOTE_WRITE,
            Service::Rc | Service::Ud => {
                AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
            }
        },
        path_mtu: qp.mtu,
        dest_qp_num: peer,
        rq_psn: START_PSN,
        max_dest_rd_atomic: qp.max_rd_atomic,
        min_rnr_timer: qp.rnr_timer,
        ah_attr: AhAttr {
            dlid: peer_lid,
            sl: qp.sl,
            src_path_bits: 0,
            grh: None,
        },
        // A scenario may reproduce a set-up mistake: an sq_psn that is not the PSN the peer
        // moved to RTR with (PSNs are 24 bits, IBA 9.7.1).
        sq_psn: (START_PSN + qp.sq_psn_offset) & 0x00ff_ffff,
        timeout: qp.timeout,
        retry_cnt: qp.retry_cnt,
        rnr_retry: qp.rnr_retry,
        max_rd_atomic: qp.max_rd_atomic,
        ..QpAttr::default()
    };
    dev.bring_up_qp(0, me, service.qp_type(), &attr, QpState::Rts)
}

/// The device of host `host` (LID `lid`): native IB, with the CAs' congestion control
/// (IBA Annex A10 CCA, BECN answers) when the fabric has it on at this CA (the scenario's,
/// or what an external SM wrote into its agent), at the host port's rate.
fn flow_device(fabric: &Fabric, host: &str, lid: u16, seed: u64) -> Device {
    let mut cfg = device_config(lid);
    if let (Some(cc), Some(rate)) = (
        fabric.ca_congestion_control_of(host),
        fabric.port_rate(host, 1),
    ) {
        cfg.cc = cc.device_cc(&rate);
    }
    Device::new(cfg, seed)
}

/// What the responder of a pair set up for it, for the requester's side.
pub(super) struct Served {
    /// The responder's QP, keys and buffer.
    peer: Side,
    /// The remote buffer (or atomic counter) the requester's work requests target.
    target: (MrKeys, u64),
    /// The table's atomic counter, when the flow's messages or leads are atomics.
    counter: Option<(MrKeys, u64)>,
    /// The receiver index, if the responder's receives are on its table's UD QP.
    ud_receiver: Option<usize>,
    /// Receive buffer bytes (payload plus a UD GRH area).
    buf_len: usize,
    /// Receive WRs of the responder's own receive queue.
    recv_depth: u32,
}

impl Host {
    /// A host's device, PD and CQ, with an empty flow application.
    pub(super) fn new(
        fabric: &Fabric,
        h: &str,
        cq_depth: u64,
        seeds: &SeedTree,
        recorder: &SharedRecorder,
        ledger: &Ledger,
    ) -> Result<Host, VerbsError> {
        let l = lid(fabric, h);
        let mut dev = flow_device(fabric, h, l, seeds.derive(StreamKind::Engine, l as u64));
        let pd = dev.alloc_pd();
        let max = dev.config().max_cqe as u64;
        let cq = dev.create_cq(cq_depth.clamp(64, max) as u32)?;
        Ok(Host {
            dev,
            pd,
            next_addr: 0x1000_0000,
            app: FlowHost {
                cq,
                recv_roles: BTreeMap::new(),
                ud_sources: BTreeMap::new(),
                requesters: Vec::new(),
                receivers: Vec::new(),
                srqs: Vec::new(),
                responders: Vec::new(),
                counters: Vec::new(),
                recorder: recorder.clone(),
                ledger: ledger.clone(),
                wcs: vec![softib_transport::harness::empty_wc(); 64],
                unreliable: false,
                dirty: Vec::new(),
                unstarted: 0,
            },
            srq_of_table: BTreeMap::new(),
            ud_of_table: BTreeMap::new(),
            buffer_of_table: BTreeMap::new(),
            ud_send_depth: BTreeMap::new(),
            counter_of_table: BTreeMap::new(),
        })
    }

    /// The responder's half of pair `p`: its receive queue (own, SRQ or the table's UD QP),
    /// its QP, the buffer or atomic counter the requester targets, and its receiver.
    pub(super) fn serve(
        &mut self,
        p: &FlowPlan,
        receiver_of: &mut BTreeMap<u32, usize>,
    ) -> Result<Served, VerbsError> {
        // UD receives carry the 40-byte GRH area in front of the payload.
        let header = if p.service == Service::Ud { 40 } else { 0 };
        let buf_len = (p.size as usize + header as usize).max(read_lead_bytes(p));
        let srq = match p.recv {
            Some(r) if r.srq => {
                let next = self.app.srqs.len();
                let i = *self.srq_of_table.entry(p.table).or_insert(next);
                if i == next {
                    let handle = self.dev.create_srq(
                        self.pd,
                        SrqAttr {
                            max_wr: r.depth,
                            max_sge: 1,
                            srq_limit: 0,
                        },
                    )?;
                    let (keys, addr) = self.table_buffer(p.table, buf_len)?;
                    self.app.srqs.push(SharedQueue {
                        target: SharedTarget::Srq(handle),
                        sge: Sge {
                            addr,
                            length: buf_len as u32,
                            lkey: keys.lkey,
                        },
                        depth: r.depth,
                        due: Default::default(),
                    });
                }
                Some(i)
            }
            _ => None,
        };
        let recv_depth = match p.recv {
            Some(r) if !r.srq => r.depth,
            _ => 1,
        };
        // UD: one QP per host and table, which every peer reaches (the point of UD at
        // scale); its receive queue serves all of them.
        let (peer, ud_queue) = if p.service == Service::Ud {
            let depths = (
                self.ud_send_depth.get(&p.table).copied().unwrap_or(1),
                recv_depth,
            );
            let (side, q) = self.ud_qp(p.table, buf_len, depths, &p.qp)?;
            (side, Some(q))
        } else {
            let srq_handle = srq.and_then(|i| match self.app.srqs[i].target {
                SharedTarget::Srq(h) => Some(h),
                SharedTarget::Qp(_) => None,
            });
            let buf = self.table_buffer(p.table, buf_len)?;
            let side = self.side(p.service, buf, (1, recv_depth), srq_handle)?;
            (side, None)
        };
        let counted = p.atomic.is_some() || p.lead.is_some_and(|l| l.op == LeadOp::Atomic);
        let counter = match counted {
            true => {
                let entry = match self.counter_of_table.get(&p.table) {
                    Some(c) => *c,
                    None => {
                        let c = self.buffer(8)?;
                        self.counter_of_table.insert(p.table, c);
                        self.app.counters.push((p.table, c.0.lkey, c.1));
                        c
                    }
                };
                Some(entry)
            }
            false => None,
        };
        let target = match (p.atomic, counter) {
            (Some(_), Some(c)) => c,
            _ => (peer.keys, peer.addr),
        };
        self.app.responders.push((p.flow, peer.qpn));
        let mut ud_receiver = None;
        if let Some(r) = p.recv {
            let index = self.app.receivers.len();
            receiver_of.insert(p.flow, index);
            let queue = match (ud_queue, srq) {
                (Some(q), _) => {
                    ud_receiver = Some(index);
                    RecvQueue::Shared(q)
                }
                (None, Some(q)) => {
                    self.app.recv_roles.insert(peer.qpn, RecvRole::Flow(index));
                    RecvQueue::Shared(q)
                }
                (None, None) => {
                    self.app.recv_roles.insert(peer.qpn, RecvRole::Flow(index));
                    RecvQueue::Own
                }
            };
            self.app.receivers.push(Receiver {
                flow: p.flow,
                qpn: peer.qpn,
                queue,
                sge: Sge {
                    addr: peer.addr,
                    length: buf_len as u32,
                    lkey: peer.keys.lkey,
                },
                depth: r.depth,
                delay: to_engine_nanos(r.post_delay_ps),
                header,
                records: p.service != Service::Rc,
                due: Default::default(),
                received: 0,
                gates: None,
            });
        }
        Ok(Served {
            peer,
            target,
            counter,
            ud_receiver,
            buf_len,
            recv_depth,
        })
    }

    /// The requester's half of pair `p`: its QP (connected to the responder's, or the
    /// table's UD QP with an address handle) and the work request it keeps posting.
    pub(super) fn request(
        &mut self,
        p: &FlowPlan,
        served: &Served,
        ld: u16,
    ) -> Result<Side, VerbsError> {
        let Served {
            peer,
            target,
            counter,
            buf_len,
            recv_depth,
            ..
        } = *served;
        let me = if p.service == Service::Ud {
            let depths = (
                self.ud_send_depth.get(&p.table).copied().unwrap_or(1),
                recv_depth,
            );
            self.ud_qp(p.table, buf_len, depths, &p.qp)?.0
        } else {
            let buf = self.table_buffer(p.table, (p.size as usize).max(read_lead_bytes(p)))?;
            // Each message may have its leads in the send queue with it.
            let per_message = 1 + p.lead.map_or(0, |l| l.count);
            let me = self.side(p.service, buf, (p.tx_depth * per_message, 1), None)?;
            connect(&mut self.dev, p.service, me.qpn, peer.qpn, ld, &p.qp)?;
            me
        };
        let ud = if p.service == Service::Ud {
            let ah = self.dev.create_ah(
                self.pd,
                AhAttr {
                    dlid: ld,
                    sl: p.qp.sl,
                    src_path_bits: 0,
                    grh: None,
                },
            )?;
            Some(UdDest {
                ah,
                remote_qpn: peer.qpn,
                remote_qkey: FLOW_QKEY,
            })
        } else {
            None
        };
        // Unreliable messages that consume a receive are counted where they arrive.
        let unreliable_send = p.recv.is_some() && p.service != Service::Rc;
        let (opcode, compare_add, swap) = match (p.op, p.atomic) {
            (FlowOp::Write, _) if p.recv.is_some() => (WrOpcode::RdmaWriteWithImm, 0, 0),
            (FlowOp::Write, _) => (WrOpcode::RdmaWrite, 0, 0),
            (FlowOp::Read, _) => (WrOpcode::RdmaRead, 0, 0),
            (FlowOp::Send, _) if unreliable_send => (WrOpcode::SendWithImm, 0, 0),
            (FlowOp::Send, _) => (WrOpcode::Send, 0, 0),
            (FlowOp::Atomic, Some(AtomicPlan::CmpSwap { compare, swap })) => {
                (WrOpcode::AtomicCmpAndSwp, compare, swap)
            }
            (FlowOp::Atomic, a) => {
                let add = match a {
                    Some(AtomicPlan::FetchAdd { add }) => add,
                    _ => 1,
                };
                (WrOpcode::AtomicFetchAndAdd, add, 0)
            }
        };
        let local = Sge {
            addr: me.addr,
            length: p.size,
            lkey: me.keys.lkey,
        };
        let lead = p.lead.map(|l| {
            let local = Sge {
                addr: me.addr,
                length: l.size,
                lkey: me.keys.lkey,
            };
            let mut wr = match (l.op, counter) {
                (LeadOp::Atomic, Some((keys, addr))) => work_request(
                    WrOpcode::AtomicFetchAndAdd,
                    local,
                    addr,
                    keys.rkey,
                    1,
                    0,
                    None,
                ),
                _ => work_request(
                    WrOpcode::RdmaRead,
                    local,
                    peer.addr,
                    peer.keys.rkey,
                    0,
                    0,
                    None,
                ),
            };
            // Unsignaled: the message's completion, after them in the send queue, is the
            // one that counts (RC completes in order).
            wr.flags = SendFlags::empty();
            (wr, l.count)
        });
        let mut wr = work_request(
            opcode,
            local,
            target.1,
            target.0.rkey,
            compare_add,
            swap,
            ud,
        );
        if p.fence {
            wr.flags |= SendFlags::FENCE;
        }
        self.app.unreliable |= p.service != Service::Rc;
        self.app.unstarted += 1;
        self.app.requesters.push(Requester {
            flow: p.flow,
            qpn: me.qpn,
            wr,
            lead,
            size: p.size,
            tx_depth: p.tx_depth,
            remaining: p.iterations,
            start: to_engine_nanos(p.start_ps),
            stop: p.stop_ps.map(to_engine_nanos),
            gate: None,
            counted_at_receiver: unreliable_send,
            posted: Default::default(),
            posted_total: 0,
            started: false,
            failed: false,
        });
        Ok(me)
    }

    /// Completes the responder's half of pair `p` once the requester's QP `me_qpn` (at LID
    /// `ls`) exists: UD receives learn their source, connected QPs connect back.
    pub(super) fn connect_served(
        &mut self,
        p: &FlowPlan,
        served: &Served,
        me_qpn: u32,
        ls: u16,
    ) -> Result<(), VerbsError> {
        if let Some(index) = served.ud_receiver {
            self.app.ud_sources.insert((ls, me_qpn), index);
        }
        if p.service != Service::Ud {
            // The mistake a scenario may reproduce is the requester's; the responder sends
            // no requests, and its sq_psn is the agreed one.
            let qp = QpPlan {
                sq_psn_offset: 0,
                ..p.qp
            };
            connect(&mut self.dev, p.service, served.peer.qpn, me_qpn, ls, &qp)?;
        }
        Ok(())
    }
}

/// Bytes the READ leads of `p` move (0 without READ leads): both ends' buffers hold them.
fn read_lead_bytes(p: &FlowPlan) -> usize {
    p.lead
        .filter(|l| l.op == LeadOp::Read)
        .map_or(0, |l| l.size as usize)
}

/// The LID of a host the plan names.
pub(super) fn lid(fabric: &Fabric, host: &str) -> u16 {
    fabric
        .lid(host)
        .expect("the plan names hosts of this topology")
}
