//! Set-up of `[[flow]]` traffic: a device per host, the QPs of every pair, connected as
//! perftest's out-of-band exchange would, and the hosts attached to the fabric as engine
//! HCAs running [`crate::apps::flow::FlowHost`]; after the run, the engines' counters for
//! the report.

use crate::apps::flow::{
    work_request, FlowHost, Ledger, Receiver, RecvQueue, RecvRole, Requester, SharedQueue,
    SharedTarget,
};
use crate::apps::perftest::device_config;
use crate::report::flows::SharedRecorder;
use crate::report::summary::{FlowQp, HostTransport};
use crate::scenario::flows::{AtomicPlan, FlowOp, FlowPlan, QpPlan, Service};
use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::Fabric;
use softib_fabric::hca::Endpoint;
use softib_fabric::rng::{SeedTree, StreamKind};
use softib_fabric::time::{to_engine_nanos, PS_PER_US};
use softib_transport::{
    AccessFlags, AhAttr, Device, MrKeys, PdHandle, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState,
    Sge, SrqAttr, SrqHandle, UdDest, VecMemory, VerbsError, WrOpcode,
};
use std::collections::BTreeMap;

/// Q_Key of the flows' UD QPs.
const FLOW_QKEY: u32 = 0x1111_1111;
/// First PSN of every flow QP, as perftest's exchange would agree on.
const START_PSN: u32 = 0x100;

/// Why flows could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up flow {flow} ({name}): {reason}")]
pub struct FlowSetupError {
    /// Flow tag.
    pub flow: u32,
    /// Flow name.
    pub name: String,
    /// What the engine refused.
    pub reason: String,
}

/// Something that may wrap a host's endpoint before it is attached (e.g. a capture).
pub type WrapEndpoint<'a> = dyn FnMut(&str, Box<dyn Endpoint>) -> Box<dyn Endpoint> + 'a;

/// One side of a flow's connection.
#[derive(Clone, Copy, Debug)]
struct Side {
    qpn: u32,
    keys: MrKeys,
    addr: u64,
}

/// A host's device and what the flows put on it.
struct Host {
    dev: Device,
    pd: PdHandle,
    next_addr: u64,
    app: FlowHost,
    /// SRQ per flow table: index into `app.srqs`.
    srq_of_table: BTreeMap<usize, usize>,
    /// Atomic counter per flow table: (keys, addr).
    counter_of_table: BTreeMap<usize, (MrKeys, u64)>,
    /// The UD QP per flow table, and its receive queue in `app.srqs`.
    ud_of_table: BTreeMap<usize, (Side, usize)>,
    /// The shared buffer per (flow table, length).
    buffer_of_table: BTreeMap<(usize, usize), (MrKeys, u64)>,
    /// Send WRs the UD QP of each flow table may have posted: its requesters' windows.
    ud_send_depth: BTreeMap<usize, u32>,
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
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qkey: FLOW_QKEY,
        qp_access_flags: AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    let base = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
    match service {
        Service::Ud => dev.modify_qp(0, me, &attr, base | QpAttrMask::QKEY)?,
        Service::Uc => {
            attr.qp_access_flags = AccessFlags::REMOTE_WRITE;
            dev.modify_qp(0, me, &attr, base | QpAttrMask::ACCESS_FLAGS)?
        }
        Service::Rc => dev.modify_qp(0, me, &attr, base | QpAttrMask::ACCESS_FLAGS)?,
    }
    attr.qp_state = QpState::Rtr;
    attr.path_mtu = qp.mtu;
    attr.dest_qp_num = peer;
    attr.rq_psn = START_PSN;
    attr.max_dest_rd_atomic = qp.max_rd_atomic;
    attr.min_rnr_timer = qp.rnr_timer;
    attr.ah_attr = AhAttr {
        dlid: peer_lid,
        sl: qp.sl,
        src_path_bits: 0,
        grh: None,
    };
    let connected =
        QpAttrMask::STATE | QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::DEST_QPN;
    match service {
        Service::Ud => dev.modify_qp(0, me, &attr, QpAttrMask::STATE)?,
        Service::Uc => dev.modify_qp(0, me, &attr, connected | QpAttrMask::RQ_PSN)?,
        Service::Rc => dev.modify_qp(
            0,
            me,
            &attr,
            connected
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER,
        )?,
    }
    attr.qp_state = QpState::Rts;
    attr.sq_psn = START_PSN;
    attr.timeout = qp.timeout;
    attr.retry_cnt = qp.retry_cnt;
    attr.rnr_retry = qp.rnr_retry;
    attr.max_rd_atomic = qp.max_rd_atomic;
    let rts = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
    match service {
        Service::Ud | Service::Uc => dev.modify_qp(0, me, &attr, rts),
        Service::Rc => dev.modify_qp(
            0,
            me,
            &attr,
            rts | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        ),
    }
}

/// The device of host `host` (LID `lid`): native IB, with the CAs' congestion control
/// (IBA Annex A10 CCA, BECN answers) when the fabric has it on, at the host port's rate.
fn flow_device(fabric: &Fabric, host: &str, lid: u16, seed: u64) -> Device {
    let mut cfg = device_config(lid);
    if let (Some(cc), Some(rate)) = (fabric.ca_congestion_control(), fabric.port_rate(host, 1)) {
        cfg.cc = cc.device_cc(&rate);
    }
    Device::new(cfg, seed)
}

/// Creates a device per host of `plans`, the QPs of every pair, connects them and attaches
/// the hosts to `fabric` (each endpoint passed through `wrap`, e.g. to capture it). Returns the hosts, for [`transport_counters`].
pub fn attach_flows(
    fabric: &mut Fabric,
    plans: &[FlowPlan],
    recorder: &SharedRecorder,
    seed: u64,
    wrap: &mut WrapEndpoint<'_>,
) -> Result<Vec<String>, FlowSetupError> {
    let seeds = SeedTree::new(seed);
    let ledger = Ledger::default();
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    let lid = |f: &Fabric, h: &str| f.lid(h).expect("the plan names hosts of this topology");
    // Completions a host's CQ may have to hold at once: every send and receive WR of its
    // QPs (it is polled after every engine interaction, so far fewer in practice).
    // A receive queue shared by a table's flows (an SRQ, or the one UD QP of the table on
    // the responder) counts once, not once per flow.
    let mut cq_depth: BTreeMap<&str, u64> = BTreeMap::new();
    let mut shared_rq: std::collections::BTreeSet<(&str, usize)> = Default::default();
    for p in plans {
        *cq_depth.entry(&p.src).or_default() += p.tx_depth as u64;
        let dst = cq_depth.entry(&p.dst).or_default();
        if let Some(r) = p.recv {
            let shared = r.srq || p.service == Service::Ud;
            if !shared || shared_rq.insert((p.dst.as_str(), p.table)) {
                *dst += r.depth as u64;
            }
        }
    }
    for p in plans {
        for h in [&p.src, &p.dst] {
            if !hosts.contains_key(h) {
                let l = lid(fabric, h);
                let mut dev = flow_device(fabric, h, l, seeds.derive(StreamKind::Engine, l as u64));
                let pd = dev.alloc_pd();
                let max = dev.config().max_cqe as u64;
                let cq = dev
                    .create_cq(cq_depth[h.as_str()].clamp(64, max) as u32)
                    .map_err(|e| FlowSetupError {
                        flow: p.flow,
                        name: p.info.name.clone(),
                        reason: e.to_string(),
                    })?;
                hosts.insert(
                    h.clone(),
                    Host {
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
                    },
                );
            }
        }
    }
    for p in plans.iter().filter(|p| p.service == Service::Ud) {
        let host = hosts.get_mut(&p.src).expect("created above");
        let max = host.dev.config().max_qp_wr;
        let d = host.ud_send_depth.entry(p.table).or_insert(0);
        *d += p.tx_depth;
        if *d > max {
            // One UD QP carries all of the host's flows of the table: their windows add up
            // in its send queue.
            return Err(FlowSetupError {
                flow: p.flow,
                name: p.info.name.clone(),
                reason: format!(
                    "{}'s UD QP for flow table {} would need more than {max} send WRs in flight (tx_depth x destinations): lower tx_depth",
                    p.src, p.table
                ),
            });
        }
    }
    // Receivers by flow tag, to resolve ring gates: (host, index in its receivers).
    let mut receiver_of: BTreeMap<u32, usize> = BTreeMap::new();
    for p in plans {
        let err = |reason: String| FlowSetupError {
            flow: p.flow,
            name: p.info.name.clone(),
            reason,
        };
        let verr = |e: VerbsError| err(e.to_string());
        recorder.borrow_mut().define(p.flow, p.info.clone());
        let (ls, ld) = (lid(fabric, &p.src), lid(fabric, &p.dst));
        // UD receives carry the 40-byte GRH area in front of the payload.
        let header = if p.service == Service::Ud { 40 } else { 0 };
        let buf_len = p.size as usize + header as usize;
        let responder = hosts.get_mut(&p.dst).expect("created above");
        let srq = match p.recv {
            Some(r) if r.srq => {
                let next = responder.app.srqs.len();
                let i = *responder.srq_of_table.entry(p.table).or_insert(next);
                if i == next {
                    let handle = responder
                        .dev
                        .create_srq(
                            responder.pd,
                            SrqAttr {
                                max_wr: r.depth,
                                max_sge: 1,
                                srq_limit: 0,
                            },
                        )
                        .map_err(verr)?;
                    let (keys, addr) = responder.table_buffer(p.table, buf_len).map_err(verr)?;
                    responder.app.srqs.push(SharedQueue {
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
                responder.ud_send_depth.get(&p.table).copied().unwrap_or(1),
                recv_depth,
            );
            let (side, q) = responder
                .ud_qp(p.table, buf_len, depths, &p.qp)
                .map_err(verr)?;
            (side, Some(q))
        } else {
            let srq_handle = srq.and_then(|i| match responder.app.srqs[i].target {
                SharedTarget::Srq(h) => Some(h),
                SharedTarget::Qp(_) => None,
            });
            let buf = responder.table_buffer(p.table, buf_len).map_err(verr)?;
            let side = responder
                .side(p.service, buf, (1, recv_depth), srq_handle)
                .map_err(verr)?;
            (side, None)
        };
        let target = match p.atomic {
            Some(_) => {
                let entry = match responder.counter_of_table.get(&p.table) {
                    Some(c) => *c,
                    None => {
                        let c = responder.buffer(8).map_err(verr)?;
                        responder.counter_of_table.insert(p.table, c);
                        responder.app.counters.push((p.table, c.0.lkey, c.1));
                        c
                    }
                };
                entry
            }
            None => (peer.keys, peer.addr),
        };
        responder.app.responders.push((p.flow, peer.qpn));
        let mut ud_receiver = None;
        if let Some(r) = p.recv {
            let index = responder.app.receivers.len();
            receiver_of.insert(p.flow, index);
            let queue = match (ud_queue, srq) {
                (Some(q), _) => {
                    ud_receiver = Some(index);
                    RecvQueue::Shared(q)
                }
                (None, Some(q)) => {
                    responder
                        .app
                        .recv_roles
                        .insert(peer.qpn, RecvRole::Flow(index));
                    RecvQueue::Shared(q)
                }
                (None, None) => {
                    responder
                        .app
                        .recv_roles
                        .insert(peer.qpn, RecvRole::Flow(index));
                    RecvQueue::Own
                }
            };
            responder.app.receivers.push(Receiver {
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
        let requester = hosts.get_mut(&p.src).expect("created above");
        let me = if p.service == Service::Ud {
            let depths = (
                requester.ud_send_depth.get(&p.table).copied().unwrap_or(1),
                recv_depth,
            );
            requester
                .ud_qp(p.table, buf_len, depths, &p.qp)
                .map_err(verr)?
                .0
        } else {
            let buf = requester
                .table_buffer(p.table, p.size as usize)
                .map_err(verr)?;
            let me = requester
                .side(p.service, buf, (p.tx_depth, 1), None)
                .map_err(verr)?;
            connect(&mut requester.dev, p.service, me.qpn, peer.qpn, ld, &p.qp).map_err(verr)?;
            me
        };
        let ud = if p.service == Service::Ud {
            let ah = requester
                .dev
                .create_ah(
                    requester.pd,
                    AhAttr {
                        dlid: ld,
                        sl: p.qp.sl,
                        src_path_bits: 0,
                        grh: None,
                    },
                )
                .map_err(verr)?;
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
        requester.app.unreliable |= p.service != Service::Rc;
        requester.app.unstarted += 1;
        requester.app.requesters.push(Requester {
            flow: p.flow,
            qpn: me.qpn,
            wr: work_request(
                opcode,
                local,
                target.1,
                target.0.rkey,
                compare_add,
                swap,
                ud,
            ),
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
        let responder = hosts.get_mut(&p.dst).expect("created above");
        if let Some(index) = ud_receiver {
            responder.app.ud_sources.insert((ls, me.qpn), index);
        }
        if p.service != Service::Ud {
            connect(&mut responder.dev, p.service, peer.qpn, me.qpn, ls, &p.qp).map_err(verr)?;
        }
    }
    // Ring gates: the receiver of the gating flow lives on this flow's requester host.
    for p in plans {
        if let Some(g) = p.gate {
            let host = hosts.get_mut(&p.src).expect("created above");
            let r = receiver_of[&g];
            if let Some(i) = host.app.requesters.iter().position(|o| o.flow == p.flow) {
                host.app.requesters[i].gate = Some(r);
                host.app.receivers[r].gates = Some(i);
            }
        }
    }
    let names: Vec<String> = hosts.keys().cloned().collect();
    for (name, h) in hosts {
        fabric
            .attach(
                &name,
                wrap(&name, Box::new(EngineHca::new(h.dev, Box::new(h.app)))),
            )
            .map_err(|e| FlowSetupError {
                flow: 0,
                name: name.clone(),
                reason: e.to_string(),
            })?;
    }
    Ok(names)
}

/// The transport counters of the engines on `hosts` (as attached by [`attach_flows`]).
pub fn transport_counters(fabric: &mut Fabric, hosts: &[String]) -> Vec<HostTransport> {
    hosts
        .iter()
        .filter_map(|h| {
            let hca = fabric.endpoint_mut::<EngineHca>(h, 1)?;
            let mut t = HostTransport::new(
                h,
                &hca.device().counters(),
                hca.encap_counters().rx_malformed,
            )
            .with_footprint(&hca.device().footprint());
            let e = hca.encap_counters();
            if e.rx_processed > 0 {
                t.rx_wait_mean_us = crate::report::decimals::round(
                    e.rx_wait_ps as f64 / e.rx_processed as f64 / PS_PER_US as f64,
                    3,
                );
            }
            t.rx_backlog_peak = e.rx_backlog_peak;
            Some(t)
        })
        .collect()
}

/// Per flow, the counters of its requester and responder QPs (hosts as attached by
/// [`attach_flows`]).
pub fn flow_qp_counters(fabric: &mut Fabric, hosts: &[String]) -> BTreeMap<u32, FlowQp> {
    let mut out: BTreeMap<u32, FlowQp> = BTreeMap::new();
    for h in hosts {
        let Some(hca) = fabric.endpoint_mut::<EngineHca>(h, 1) else {
            continue;
        };
        let Some(app) = hca.app::<FlowHost>() else {
            continue;
        };
        for (flow, qpn, requester) in app.qps() {
            let Some(c) = hca.device().qp_counters(qpn) else {
                continue;
            };
            let e = out.entry(flow).or_default();
            if requester {
                e.set_requester(c);
            } else {
                e.set_responder(c);
            }
        }
    }
    out
}

/// The 8-byte counter that the atomic flows of table `table` target on `host`, as it is
/// now (the simulator's memory holds it little-endian, as an x86 host would).
pub fn atomic_counter(fabric: &mut Fabric, host: &str, table: usize) -> Option<u64> {
    let hca = fabric.endpoint_mut::<EngineHca>(host, 1)?;
    let app = hca.app::<FlowHost>()?;
    let &(_, lkey, _) = app.counters.iter().find(|c| c.0 == table)?;
    let mut b = [0u8; 8];
    hca.device().memory(lkey)?.read(0, &mut b);
    Some(u64::from_le_bytes(b))
}
