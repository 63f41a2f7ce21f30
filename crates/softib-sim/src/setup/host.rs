//! One host of the flows' set-up: its device, PD, CQ and buffers, and its half of each
//! pair it takes part in (responder: receive queue, QP, target buffer, receiver;
//! requester: QP, address handle, work request), connected as perftest's out-of-band
//! exchange would. RD flows share per host an RD domain, the table's RD QPs, and the EE
//! contexts to each peer host ([`Host::rd_qp`], [`Host::create_eecs`]).

use crate::apps::flow::{
    work_request, FlowHost, Ledger, Receiver, RecvQueue, RecvRole, Requester, SharedQueue,
    SharedTarget,
};
use crate::apps::perftest::device_config;
use crate::report::flows::SharedRecorder;
use crate::scenario::flows::{AtomicPlan, FlowOp, FlowPlan, LeadOp, QpPlan, RdPlan, Service};
use softib_fabric::fabric::Fabric;
use softib_fabric::rng::{SeedTree, StreamKind};
use softib_fabric::time::to_engine_nanos;
use softib_transport::{
    AccessFlags, AhAttr, Device, MrKeys, PdHandle, QpAttr, QpCap, QpInitAttr, QpState, QpType,
    RdDest, RddHandle, SendFlags, Sge, SrqAttr, SrqHandle, UdDest, VecMemory, VerbsError, WrOpcode,
};
use std::collections::BTreeMap;

/// Q_Key of the flows' UD and RD QPs.
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
    /// The host's reliable datagram domain, allocated for its first RD flow.
    rdd: Option<RddHandle>,
    /// RD QP `q` of each flow table, and its receive queue in `app.srqs` if it receives.
    rd_qps: BTreeMap<(usize, u32), (Side, Option<usize>)>,
    /// RD QPs of each table that receive (SEND, WRITE with immediate), with their depth.
    pub(super) rd_receives: BTreeMap<(usize, u32), u32>,
    /// The EE contexts of each flow table to each peer host, in `eecs` order.
    pub(super) eecs_to: BTreeMap<(usize, String), Vec<u32>>,
    /// Messages each EEC (table, peer, index) may have queued: the windows of the flows
    /// from this host that use it.
    pub(super) eec_send_depth: BTreeMap<(usize, String, u32), u32>,
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
        self.app.buffers.push((table, b.0.lkey));
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

    /// RD QP `rd.qp` of flow table `table` on this host, created on first use in this
    /// host's RD domain and brought to RTS: connectionless, it sends to and receives from
    /// every peer of the table (IBA 9.7). It keeps its table's receives posted (`len`
    /// bytes each) when it receives; its send queue stays empty, since an RD QP's WRs
    /// queue on the EEC they name (the EEC's depth is the window).
    fn rd_qp(
        &mut self,
        table: usize,
        rd: RdPlan,
        len: usize,
    ) -> Result<(Side, Option<usize>), VerbsError> {
        if let Some(&q) = self.rd_qps.get(&(table, rd.qp)) {
            return Ok(q);
        }
        let rdd = *self.rdd.get_or_insert_with(|| self.dev.alloc_rdd());
        let recv_depth = self.rd_receives.get(&(table, rd.qp)).copied();
        let (keys, addr) = self.table_buffer(table, len)?;
        let cq = self.app.cq;
        let qpn = self.dev.create_rd_qp(
            self.pd,
            rdd,
            QpInitAttr {
                qp_type: QpType::Rd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1,
                    max_recv_wr: recv_depth.unwrap_or(1),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )?;
        let attr = QpAttr {
            pkey_index: 0,
            port_num: 1,
            qkey: FLOW_QKEY,
            qp_access_flags: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            ..QpAttr::default()
        };
        self.dev
            .bring_up_qp(0, qpn, QpType::Rd, &attr, QpState::Rts)?;
        let side = Side { qpn, keys, addr };
        let queue = recv_depth.map(|depth| {
            let i = self.app.srqs.len();
            self.app.srqs.push(SharedQueue {
                target: SharedTarget::Qp(qpn),
                sge: Sge {
                    addr,
                    length: len as u32,
                    lkey: keys.lkey,
                },
                depth,
                due: Default::default(),
            });
            // Its receive completions belong to the flow of their sender.
            self.app.recv_roles.insert(qpn, RecvRole::Ud);
            i
        });
        self.rd_qps.insert((table, rd.qp), (side, queue));
        Ok((side, queue))
    }

    /// Creates the `n` EE contexts of flow table `table` from this host to `peer` (in this
    /// host's RD domain, each as deep as the windows of the flows that use it), in RESET;
    /// [`Host::bring_up_eecs`] connects them once the peer's exist.
    pub(super) fn create_eecs(
        &mut self,
        table: usize,
        peer: &str,
        n: u32,
    ) -> Result<Vec<u32>, VerbsError> {
        let rdd = *self.rdd.get_or_insert_with(|| self.dev.alloc_rdd());
        let mut eecs = Vec::with_capacity(n as usize);
        for k in 0..n {
            let depth = self
                .eec_send_depth
                .get(&(table, peer.to_string(), k))
                .copied()
                .unwrap_or(1);
            eecs.push(self.dev.create_eec(rdd, depth)?);
        }
        self.eecs_to.insert((table, peer.to_string()), eecs.clone());
        Ok(eecs)
    }

    /// Brings this host's EECs of `table` to `peer` (at `peer_lid`) to RTS, EEC k connected
    /// to the peer's EEC k (`peer_eecs`) with the table's path and retry attributes, as an
    /// RC QP is: an EEC carries RD's reliability with RC's state machine (IBA 10.2.7).
    pub(super) fn bring_up_eecs(
        &mut self,
        table: usize,
        peer: &str,
        peer_eecs: &[u32],
        peer_lid: u16,
        qp: &QpPlan,
    ) -> Result<(), VerbsError> {
        let mine = self.eecs_to[&(table, peer.to_string())].clone();
        for (me, far) in mine.into_iter().zip(peer_eecs) {
            connect(&mut self.dev, Service::Rc, me, *far, peer_lid, qp)?;
        }
        Ok(())
    }

    /// The EEC flow `p` sends over from this host (its requester) to `p.dst`.
    fn eec_of(&self, p: &FlowPlan, rd: RdPlan) -> u32 {
        self.eecs_to[&(p.table, p.dst.clone())][rd.eec() as usize]
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
            Service::Rc | Service::Ud | Service::Rd => {
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
                buffers: Vec::new(),
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
            rdd: None,
            rd_qps: BTreeMap::new(),
            rd_receives: BTreeMap::new(),
            eecs_to: BTreeMap::new(),
            eec_send_depth: BTreeMap::new(),
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
        // scale); its receive queue serves all of them. RD: the table's RD QP `q`, whose
        // receive queue serves every peer's QP `q`.
        let (peer, ud_queue) = if let Some(rd) = p.rd {
            self.rd_qp(p.table, rd, buf_len)?
        } else if p.service == Service::Ud {
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
        // An RD flow's transport counters are its EEC's (which the flows on it share).
        let counted_qpn = match p.rd {
            Some(rd) => self.eecs_to[&(p.table, p.src.clone())][rd.eec() as usize],
            None => peer.qpn,
        };
        self.app.responders.push((p.flow, counted_qpn));
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
                records: !p.service.reliable(),
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
        let me = if let Some(rd) = p.rd {
            self.rd_qp(p.table, rd, p.size as usize)?.0
        } else if p.service == Service::Ud {
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
        let unreliable_send = p.recv.is_some() && !p.service.reliable();
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
        // RD: each WR names the EEC to the responder's host, the responder's RD QP and
        // the Q_Key (IBA 9.7, 10.2.7).
        let eec = p.rd.map(|rd| self.eec_of(p, rd));
        if let Some(eec) = eec {
            wr.rd = Some(RdDest {
                eec,
                remote_qpn: peer.qpn,
                remote_qkey: FLOW_QKEY,
            });
        }
        self.app.unreliable |= !p.service.reliable();
        self.app.unstarted += 1;
        self.app.requesters.push(Requester {
            flow: p.flow,
            qpn: me.qpn,
            eec,
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
        if !matches!(p.service, Service::Ud | Service::Rd) {
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
