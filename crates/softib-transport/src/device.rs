//! The `Device`: one HCA port. Owns the QP, MR, CQ, SRQ and AH tables, demultiplexes
//! incoming packets by DestQP, schedules transmission round-robin over QPs with work, and
//! keeps a min-heap of per-QP timers.
//!
//! Methods fall into four kinds (quinn-proto's `Connection`): getters, commands (verbs),
//! `handle_*` for input and `poll_*` for output. See docs/design/engine-api.md.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softib_wire::{Opcode, PacketRepr, Service};

use crate::config::{DeviceConfig, ResendPolicy};
use crate::counters::{DeviceCounters, DriverDrop, QpCounters};
use crate::cq::CompletionQueue;
use crate::error::VerbsError;
use crate::events::AsyncEvent;
use crate::mcast::{McastRefusal, McastTable, MULTICAST_QPN};
use crate::memory::{Memory, MrTable};
use crate::qp::recv_queue::RecvWqe;
use crate::qp::send_queue::{SendWqe, UdTarget};
use crate::qp::{Qp, TimerKind};
use crate::qpn::QpnMap;
use crate::shared::{PathInfo, RxMeta, Shared, Transmit, ZeroPayload, ZERO_PAYLOAD_BYTES};
use crate::srq::SharedRecvQueue;
use crate::time::Nanos;
use crate::verbs::{
    AccessFlags, AhAttr, AhHandle, CqHandle, MrKeys, MwBind, MwType, PdHandle, QpAttr, QpAttrMask,
    QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr, SrqAttr, SrqHandle, VendorErr,
    WcStatus, WorkCompletion, WrOpcode, XrcdHandle,
};

mod rd_verbs;

/// First QPN handed out; 0 and 1 are the special QPs (SMI, GSI) of IBA 10.2.5.
pub const FIRST_QPN: u32 = 0x11;

/// One HCA port running the transport engine. See the module documentation.
pub struct Device {
    sh: Shared,
    qps: Vec<Option<Qp>>,
    /// QP slot <-> QPN (sequential or scrambled).
    qpn_map: QpnMap,
    /// The last (QPN, slot) the receive path and the posts looked up: a scrambled QPN
    /// costs four Feistel rounds to map (`qpn.rs`, about 80 instructions), and consecutive
    /// packets and posts mostly name the same QP. Checked against the slot's QPN on use,
    /// so a destroyed or reused slot is never taken for another QP.
    last_qp: (u32, u32),
    /// Counters of destroyed QPs, so device totals never go backwards.
    retired: QpCounters,
    pds: u32,
    /// PDs released by `dealloc_pd` (handles are never reused).
    dead_pds: Vec<u32>,
    /// XRC domains opened so far (handles 1..=xrcds, never reused).
    xrcds: u32,
    /// XRC domains closed by `close_xrcd`.
    dead_xrcds: Vec<u32>,
    rng: ChaCha8Rng,
    /// Round-robin of QP indexes that may have something to send.
    ready: VecDeque<u32>,
    /// (deadline, QP index, timer kind); entries may be stale (lazy invalidation).
    timers: BinaryHeap<Reverse<(Nanos, u32, u8)>>,
    /// UD multicast groups and the QPs attached to them (`mcast.rs`).
    mcast: McastTable,
    /// Reliable datagram domains allocated so far (handles 1..=rdds, never reused).
    rdds: u32,
    /// Reliable datagram domains released by `dealloc_rdd`.
    dead_rdds: Vec<u32>,
}

fn unknown(kind: &'static str, value: u32) -> VerbsError {
    VerbsError::UnknownHandle { kind, value }
}

fn mcast_error(r: McastRefusal, gid: &[u8; 16]) -> VerbsError {
    use crate::mcast::{MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH, MAX_TOTAL_MCAST_QP_ATTACH};
    let gid = std::net::Ipv6Addr::from(*gid);
    match r {
        McastRefusal::NotMulticast => VerbsError::InvalidAttribute {
            attr: "gid",
            reason: format!("{gid} is no multicast address"),
        },
        McastRefusal::NotAttached => VerbsError::InvalidAttribute {
            attr: "gid",
            reason: format!("the QP is not attached to {gid}"),
        },
        McastRefusal::TooManyGroups => VerbsError::LimitReached {
            limit: "max_mcast_grp",
            max: MAX_MCAST_GRP,
        },
        McastRefusal::GroupFull => VerbsError::LimitReached {
            limit: "max_mcast_qp_attach",
            max: MAX_MCAST_QP_ATTACH,
        },
        McastRefusal::TooManyAttachments => VerbsError::LimitReached {
            limit: "max_total_mcast_qp_attach",
            max: MAX_TOTAL_MCAST_QP_ATTACH,
        },
    }
}

impl Device {
    /// A device with `config`; `seed` drives the only randomness (key bytes, initial PSNs).
    pub fn new(config: DeviceConfig, seed: u64) -> Device {
        Device {
            qpn_map: QpnMap::with_prefix(config.qpn_allocation, seed, config.qpn_prefix),
            sh: Shared {
                config,
                mrs: MrTable::default(),
                cqs: Vec::new(),
                srqs: Vec::new(),
                ahs: Vec::new(),
                events: VecDeque::new(),
                counters: DeviceCounters::default(),
                cc: crate::cc::DeviceCc::default(),
                describe_zeros: false,
                pools: Default::default(),
            },
            qps: Vec::new(),
            last_qp: (u32::MAX, 0),
            retired: QpCounters::default(),
            pds: 0,
            dead_pds: Vec::new(),
            xrcds: 0,
            dead_xrcds: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            mcast: McastTable::default(),
            rdds: 0,
            dead_rdds: Vec::new(),
        }
    }

    // ----- getters -----

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.sh.config
    }

    /// Device-wide counters: the sum over all QPs (also destroyed ones) plus device drops.
    /// Computed on each call (O(QPs)); the engine-api.md signature returns it by value.
    pub fn counters(&self) -> DeviceCounters {
        let mut c = self.sh.counters;
        c.qp = self.retired;
        for qp in self.qps.iter().flatten() {
            c.qp.accumulate(&qp.counters);
        }
        c
    }

    /// Counters of one QP.
    pub fn qp_counters(&self, qpn: u32) -> Option<&QpCounters> {
        self.qp(qpn).map(|q| &q.counters)
    }

    /// A random initial PSN from the device's seeded RNG (for callers that do not choose one).
    pub fn random_psn(&mut self) -> u32 {
        self.rng.next_u32() & crate::psn::PSN_MASK
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqHandle) -> usize {
        self.cq(cq).map_or(0, |q| q.len())
    }

    /// Completions a CQ lost to overflow.
    pub fn cq_overflows(&self, cq: CqHandle) -> u64 {
        self.cq(cq).map_or(0, |q| q.overflows)
    }

    /// QPNs of live QPs, ascending.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.iter().flatten().map(|q| q.qpn)
    }

    /// The congestion control state of a QP at `now` (CCTI, DCQCN rate, pacing gate).
    pub fn cc_status(&self, now: Nanos, qpn: u32) -> Option<crate::cc::CcStatus> {
        self.qp(qpn).map(|q| q.cc_status(now, &self.sh))
    }

    /// The CCTI of service level `sl` at `now` (IBA CCA configured; per-SL state).
    pub fn sl_ccti(&self, now: Nanos, sl: u8) -> Option<u16> {
        crate::cc::sl_ccti(&self.sh, now, sl)
    }

    /// The memory the state of QP `qpn` holds, measured from its structures
    /// ([`crate::footprint`]).
    pub fn qp_footprint(&self, qpn: u32) -> Option<crate::footprint::QpFootprint> {
        self.qp(qpn).map(Qp::footprint)
    }

    /// The memory the device's state holds: QPs, CQs, SRQs, address handles, the region
    /// table and the scheduler, measured from the structures ([`crate::footprint`]).
    pub fn footprint(&self) -> crate::footprint::DeviceFootprint {
        use crate::footprint::slots;
        let sh = &self.sh;
        crate::footprint::DeviceFootprint {
            qps: self.qps.iter().flatten().filter(|q| !q.is_eec()).count(),
            eecs: self.qps.iter().flatten().filter(|q| q.is_eec()).count(),
            address_handles: sh.ahs.iter().flatten().count(),
            // A QP's fixed part lives in its table slot.
            qp_bytes: slots::<Option<Qp>>(self.qps.capacity())
                + self
                    .qps
                    .iter()
                    .flatten()
                    .map(|q| q.footprint().total() - std::mem::size_of::<Qp>())
                    .sum::<usize>(),
            // An EEC's slot and heap parts, as a QP's are counted above.
            eec_bytes: self
                .qps
                .iter()
                .flatten()
                .filter(|q| q.is_eec())
                .map(|q| q.footprint().total())
                .sum::<usize>(),
            cq_bytes: slots::<Option<CompletionQueue>>(sh.cqs.capacity())
                + sh.cqs
                    .iter()
                    .flatten()
                    .map(|q| q.heap_bytes())
                    .sum::<usize>(),
            srq_bytes: slots::<Option<SharedRecvQueue>>(sh.srqs.capacity())
                + sh.srqs
                    .iter()
                    .flatten()
                    .map(|q| q.queue.heap_bytes())
                    .sum::<usize>(),
            ah_bytes: slots::<Option<(PdHandle, AhAttr)>>(sh.ahs.capacity()),
            mr_table_bytes: sh.mrs.heap_bytes(),
            scheduler_bytes: slots::<u32>(self.ready.capacity())
                + slots::<Reverse<(Nanos, u32, u8)>>(self.timers.capacity()),
            device_bytes: std::mem::size_of::<Device>()
                + sh.pools.heap_bytes()
                + slots::<AsyncEvent>(sh.events.capacity())
                + slots::<u32>(self.dead_pds.capacity()),
        }
    }

    /// The state of a QP.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qp(qpn).map(|q| q.state())
    }

    fn cq(&self, cq: CqHandle) -> Option<&CompletionQueue> {
        self.sh.cqs.get(cq.0 as usize)?.as_ref()
    }

    fn qp_index(&self, qpn: u32) -> Option<usize> {
        let i = self.qpn_map.slot_of_offset(qpn.checked_sub(FIRST_QPN)?)? as usize;
        self.qps.get(i)?.as_ref()?;
        Some(i)
    }

    /// [`Device::qp_index`] through the one-entry cache `last_qp`, for the per-packet and
    /// per-post paths.
    fn qp_index_cached(&mut self, qpn: u32) -> Option<usize> {
        let (last, slot) = self.last_qp;
        if last == qpn
            && self
                .qps
                .get(slot as usize)
                .and_then(Option::as_ref)
                .is_some_and(|q| q.qpn == qpn)
        {
            return Some(slot as usize);
        }
        let i = self.qp_index(qpn)?;
        self.last_qp = (qpn, i as u32);
        Some(i)
    }

    fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(self.qp_index(qpn)?)?.as_ref()
    }

    // ----- commands (verbs) -----

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> PdHandle {
        self.pds += 1;
        PdHandle(self.pds)
    }

    /// Releases a protection domain nothing uses any more (`ibv_dealloc_pd`).
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), VerbsError> {
        self.check_pd(pd)?;
        let in_use = |what: &'static str| VerbsError::InUse {
            kind: "PD",
            value: pd.0,
            reason: what,
        };
        if self.qps.iter().flatten().any(|q| q.pd == pd) {
            return Err(in_use("QPs still belong to it; destroy them first"));
        }
        if self.sh.mrs.any_in_pd(pd) {
            return Err(in_use(
                "memory regions are still registered in it; deregister them first",
            ));
        }
        if self.sh.srqs.iter().flatten().any(|s| s.pd == pd) {
            return Err(in_use("SRQs still belong to it; destroy them first"));
        }
        if self.sh.mrs.windows.any_in_pd(pd) {
            return Err(in_use(
                "memory windows are still allocated in it; deallocate them first",
            ));
        }
        if self.sh.ahs.iter().flatten().any(|(p, _)| *p == pd) {
            return Err(in_use(
                "address handles still belong to it; destroy them first",
            ));
        }
        self.dead_pds.push(pd.0);
        Ok(())
    }

    fn check_pd(&self, pd: PdHandle) -> Result<(), VerbsError> {
        if pd.0 == 0 || pd.0 > self.pds || self.dead_pds.contains(&pd.0) {
            return Err(unknown("PD", pd.0));
        }
        Ok(())
    }

    /// Registers `memory` as a region starting at virtual address `iova`.
    pub fn reg_mr(
        &mut self,
        pd: PdHandle,
        memory: Box<dyn Memory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        self.check_pd(pd)?;
        if self.sh.mrs.live() >= self.sh.config.max_mr {
            return Err(VerbsError::LimitReached {
                limit: "max_mr",
                max: self.sh.config.max_mr,
            });
        }
        // IBA 10.6.3.1 / ibv_reg_mr(3): remote write or atomic requires local write.
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidAttribute {
                attr: "access",
                reason: "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE".into(),
            });
        }
        if iova.checked_add(memory.len() as u64).is_none() {
            return Err(VerbsError::InvalidAttribute {
                attr: "iova",
                reason: "iova + length overflows 64 bits".into(),
            });
        }
        let key_byte = (self.rng.next_u32() & 0xFF) as u8;
        let key = self
            .sh
            .mrs
            .insert(pd, memory, iova, access, key_byte)
            .ok_or(VerbsError::LimitReached {
                limit: "24-bit MR index",
                max: 1 << 24,
            })?;
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }

    /// Changes a region in place, keeping its keys (ibv_rereg_mr(3)): a new PD, new
    /// memory at a new virtual address, and/or new access rights; `None` keeps the current
    /// value. Returns the replaced memory (to drop after the call). All checks run before
    /// anything changes, so a refused rereg leaves the region as it was.
    pub fn rereg_mr(
        &mut self,
        lkey: u32,
        pd: Option<PdHandle>,
        translation: Option<(Box<dyn Memory>, u64)>,
        access: Option<AccessFlags>,
    ) -> Result<Option<Box<dyn Memory>>, VerbsError> {
        if let Some(pd) = pd {
            self.check_pd(pd)?;
        }
        let mr = self.sh.mrs.get_mut(lkey).ok_or(unknown("lkey", lkey))?;
        let new_access = access.unwrap_or(mr.access);
        // IBA 10.6.3.1 / ibv_reg_mr(3): remote write or atomic requires local write.
        if new_access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !new_access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidAttribute {
                attr: "access",
                reason: "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE".into(),
            });
        }
        if let Some((memory, iova)) = &translation {
            if iova.checked_add(memory.len() as u64).is_none() {
                return Err(VerbsError::InvalidAttribute {
                    attr: "iova",
                    reason: "iova + length overflows 64 bits".into(),
                });
            }
        }
        if let Some(pd) = pd {
            mr.pd = pd;
        }
        mr.access = new_access;
        Ok(translation.map(|(memory, iova)| {
            mr.iova = iova;
            std::mem::replace(&mut mr.memory, memory)
        }))
    }

    /// Deregisters a region and hands its memory back. Refused while memory windows are
    /// bound to it (IBA 10.6.7.2.6; rxe_dereg_mr fails with EINVAL).
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<Box<dyn Memory>, VerbsError> {
        let mr = self.sh.mrs.get(lkey).ok_or(unknown("lkey", lkey))?;
        if mr.bound_windows > 0 {
            return Err(VerbsError::InUse {
                kind: "MR",
                value: lkey,
                reason: "memory windows are bound to it; invalidate or deallocate them first",
            });
        }
        self.sh
            .mrs
            .remove(lkey)
            .map(|mr| mr.memory)
            .ok_or(unknown("lkey", lkey))
    }

    /// The offset into its region of a local SGE of a QP in `pd`, when the key, PD and
    /// bounds allow it (ibv_advise_mr(3) names ranges this way); no access rights or
    /// residency are checked.
    pub fn local_region_offset(&self, pd: PdHandle, sge: &crate::verbs::Sge) -> Option<usize> {
        let mr = self.sh.mrs.get(sge.lkey)?;
        if mr.pd != pd {
            return None;
        }
        let start = sge.addr.checked_sub(mr.iova)?;
        let end = start.checked_add(u64::from(sge.length))?;
        (end <= mr.memory.len() as u64).then_some(start as usize)
    }

    /// Allocates a memory window of `kind` in `pd` (`ibv_alloc_mw`, IBA 10.6.7.1) and
    /// returns its R_Key. A type 1 window is valid but unbound (length 0); a type 2 window
    /// is free until a BIND_MW work request binds it.
    pub fn alloc_mw(&mut self, pd: PdHandle, kind: MwType) -> Result<u32, VerbsError> {
        self.check_pd(pd)?;
        let max = self.sh.config.max_mw;
        if self.sh.mrs.windows.live() as u32 >= max {
            return Err(VerbsError::LimitReached {
                limit: "max_mw",
                max,
            });
        }
        let key_byte = (self.rng.next_u32() & 0xFF) as u8;
        self.sh
            .mrs
            .alloc_window(pd, kind, key_byte)
            .ok_or(VerbsError::LimitReached {
                limit: "24-bit MW index",
                max: 1 << 23,
            })
    }

    /// Deallocates a memory window (`ibv_dealloc_mw`); a bound window is unbound first, so
    /// its R_Key stops working at once (rxe_dealloc_mw). `rkey` is the window's current
    /// key or the one `alloc_mw` returned.
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), VerbsError> {
        if self.sh.mrs.dealloc_window(rkey) {
            Ok(())
        } else {
            Err(unknown("MW", rkey))
        }
    }

    /// The Bind Memory Window verb for a type 1 window (`ibv_bind_mw`): posts a BIND_MW
    /// work request on `qpn` (as rxe does; the bind runs in order with the QP's other
    /// WRs and completes with `WcOpcode::BindMw` and `wr_id`). `bind.new_rkey` is ignored:
    /// the window's key part moves on by one (`ibv_inc_rkey`). Returns the R_Key the
    /// window will have once the bind completes; on an error completion the old one stays.
    pub fn bind_mw(
        &mut self,
        now: Nanos,
        qpn: u32,
        wr_id: u64,
        flags: SendFlags,
        bind: MwBind,
    ) -> Result<u32, VerbsError> {
        let invalid = |reason: &str| VerbsError::InvalidWr {
            wr_id,
            reason: reason.into(),
        };
        let w = self
            .sh
            .mrs
            .windows
            .by_index(bind.mw_rkey)
            .ok_or(unknown("MW", bind.mw_rkey))?;
        if w.kind != MwType::Type1 {
            return Err(invalid(
                "ibv_bind_mw binds type 1 windows; bind a type 2 window with a BIND_MW WR",
            ));
        }
        if bind.access.contains(AccessFlags::ZERO_BASED) {
            // o10-36.2.2; rxe's provider refuses it before posting.
            return Err(invalid("a type 1 window cannot be zero-based"));
        }
        let new_rkey = crate::mw::next_rkey(bind.mw_rkey);
        let wr = SendWr {
            wr_id,
            opcode: WrOpcode::BindMw,
            flags,
            bind_mw: Some(MwBind { new_rkey, ..bind }),
            ..SendWr::default()
        };
        self.post_send(now, qpn, &wr)?;
        Ok(new_rkey)
    }

    /// The R_Key a window has now, and whether it is bound (for drivers mirroring
    /// `ibv_mw::rkey`). None if `rkey` names no window.
    pub fn mw_bound(&self, rkey: u32) -> Option<bool> {
        self.sh.mrs.windows.get(rkey).map(|w| w.length > 0)
    }

    /// The memory of a region (the application reads its buffers).
    pub fn memory(&self, lkey: u32) -> Option<&dyn Memory> {
        self.sh.mrs.get(lkey).map(|mr| &*mr.memory)
    }

    /// Mutable memory of a region (the application fills its buffers).
    pub fn memory_mut(&mut self, lkey: u32) -> Option<&mut dyn Memory> {
        match self.sh.mrs.get_mut(lkey) {
            Some(mr) => Some(&mut *mr.memory),
            None => None,
        }
    }

    /// Creates a CQ of `cqe` entries.
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqHandle, VerbsError> {
        if cqe == 0 || cqe > self.sh.config.max_cqe {
            return Err(VerbsError::InvalidAttribute {
                attr: "cqe",
                reason: format!("{cqe} is not in 1..={}", self.sh.config.max_cqe),
            });
        }
        let live = self.sh.cqs.iter().flatten().count() as u32;
        if live >= self.sh.config.max_cq {
            return Err(VerbsError::LimitReached {
                limit: "max_cq",
                max: self.sh.config.max_cq,
            });
        }
        self.sh.cqs.push(Some(CompletionQueue::new(cqe)));
        Ok(CqHandle(self.sh.cqs.len() as u32 - 1))
    }

    /// Changes a CQ's capacity to `cqe` entries (ibv_resize_cq(3)): EINVAL-class errors for
    /// a size outside 1..=max_cqe or below the completions waiting in it.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32) -> Result<(), VerbsError> {
        let max = self.sh.config.max_cqe;
        let q = self
            .sh
            .cqs
            .get_mut(cq.0 as usize)
            .and_then(|c| c.as_mut())
            .ok_or(unknown("CQ", cq.0))?;
        if cqe == 0 || cqe > max {
            return Err(VerbsError::InvalidAttribute {
                attr: "cqe",
                reason: format!("{cqe} is not in 1..={max}"),
            });
        }
        let waiting = q.len();
        if !q.resize(cqe) {
            return Err(VerbsError::InvalidAttribute {
                attr: "cqe",
                reason: format!("{waiting} completions wait, more than {cqe}"),
            });
        }
        Ok(())
    }

    /// Destroys a CQ no QP uses.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), VerbsError> {
        let q = self
            .sh
            .cqs
            .get_mut(cq.0 as usize)
            .and_then(|c| c.as_mut())
            .ok_or(unknown("CQ", cq.0))?;
        if q.users > 0 {
            return Err(VerbsError::InUse {
                kind: "CQ",
                value: cq.0,
                reason: "QPs still use it; destroy them first",
            });
        }
        self.sh.cqs[cq.0 as usize] = None;
        Ok(())
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&mut self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle, VerbsError> {
        self.check_pd(pd)?;
        let cfg = &self.sh.config;
        if attr.max_wr == 0 || attr.max_wr > cfg.max_qp_wr {
            return Err(VerbsError::InvalidAttribute {
                attr: "max_wr",
                reason: format!("{} is not in 1..={}", attr.max_wr, cfg.max_qp_wr),
            });
        }
        if attr.max_sge == 0 || attr.max_sge > cfg.max_sge {
            return Err(VerbsError::InvalidAttribute {
                attr: "max_sge",
                reason: format!("{} is not in 1..={}", attr.max_sge, cfg.max_sge),
            });
        }
        if self.sh.srqs.iter().flatten().count() as u32 >= cfg.max_srq {
            return Err(VerbsError::LimitReached {
                limit: "max_srq",
                max: cfg.max_srq,
            });
        }
        self.sh.srqs.push(Some(SharedRecvQueue::new(
            pd,
            attr.max_wr,
            attr.max_sge,
            attr.srq_limit,
        )));
        Ok(SrqHandle(self.sh.srqs.len() as u32 - 1))
    }

    /// Arms the SRQ limit: `SrqLimitReached` fires once when fewer than `srq_limit` WRs remain.
    pub fn modify_srq(&mut self, srq: SrqHandle, srq_limit: u32) -> Result<(), VerbsError> {
        let s = self
            .sh
            .srqs
            .get_mut(srq.0 as usize)
            .and_then(|s| s.as_mut())
            .ok_or(unknown("SRQ", srq.0))?;
        if srq_limit > s.queue.depth() {
            return Err(VerbsError::InvalidAttribute {
                attr: "srq_limit",
                reason: format!("{srq_limit} exceeds the SRQ depth {}", s.queue.depth()),
            });
        }
        s.limit = srq_limit;
        Ok(())
    }

    /// Creates an address handle for UD sends.
    pub fn create_ah(&mut self, pd: PdHandle, attr: AhAttr) -> Result<AhHandle, VerbsError> {
        self.check_pd(pd)?;
        if self.sh.ahs.iter().flatten().count() as u32 >= self.sh.config.max_ah {
            return Err(VerbsError::LimitReached {
                limit: "max_ah",
                max: self.sh.config.max_ah,
            });
        }
        if attr.sl > 15 {
            return Err(VerbsError::InvalidAttribute {
                attr: "sl",
                reason: format!("{} does not fit 4 bits", attr.sl),
            });
        }
        self.sh.ahs.push(Some((pd, attr)));
        Ok(AhHandle(self.sh.ahs.len() as u32 - 1))
    }

    /// Destroys an SRQ no QP uses (`ibv_destroy_srq`); its posted WRs vanish.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), VerbsError> {
        let s = self
            .sh
            .srqs
            .get(srq.0 as usize)
            .and_then(|s| s.as_ref())
            .ok_or(unknown("SRQ", srq.0))?;
        if s.users > 0 {
            return Err(VerbsError::InUse {
                kind: "SRQ",
                value: srq.0,
                reason: "QPs are still attached; destroy them first",
            });
        }
        if let Some(x) = s.xrc {
            if let Some(Some(q)) = self.sh.cqs.get_mut(x.cq.0 as usize) {
                q.users = q.users.saturating_sub(1);
            }
        }
        self.sh.srqs[srq.0 as usize] = None;
        Ok(())
    }

    /// Opens an XRC domain (`ibv_open_xrcd`, IBA Annex A14).
    pub fn open_xrcd(&mut self) -> XrcdHandle {
        self.xrcds += 1;
        XrcdHandle(self.xrcds)
    }

    fn check_xrcd(&self, xrcd: XrcdHandle) -> Result<(), VerbsError> {
        if xrcd.0 == 0 || xrcd.0 > self.xrcds || self.dead_xrcds.contains(&xrcd.0) {
            return Err(unknown("XRCD", xrcd.0));
        }
        Ok(())
    }

    /// Closes an XRC domain no XRC SRQ or target QP uses any more (`ibv_close_xrcd`).
    pub fn close_xrcd(&mut self, xrcd: XrcdHandle) -> Result<(), VerbsError> {
        self.check_xrcd(xrcd)?;
        let in_use = |what: &'static str| VerbsError::InUse {
            kind: "XRCD",
            value: xrcd.0,
            reason: what,
        };
        if self.qps.iter().flatten().any(|q| q.xrcd == Some(xrcd)) {
            return Err(in_use(
                "XRC target QPs still belong to it; destroy them first",
            ));
        }
        if self
            .sh
            .srqs
            .iter()
            .flatten()
            .any(|s| s.xrc.is_some_and(|x| x.xrcd == xrcd))
        {
            return Err(in_use("XRC SRQs still belong to it; destroy them first"));
        }
        self.dead_xrcds.push(xrcd.0);
        Ok(())
    }

    /// Creates an XRC SRQ (`ibv_create_srq_ex` with `IBV_SRQT_XRC`): receives of requests
    /// that name it (its [`Device::srq_num`]) in an XRCETH, through any target QP of
    /// `xrcd`; their completions go to `cq`; `pd` protects the memory they touch.
    pub fn create_xrc_srq(
        &mut self,
        pd: PdHandle,
        xrcd: XrcdHandle,
        cq: CqHandle,
        attr: SrqAttr,
    ) -> Result<SrqHandle, VerbsError> {
        self.check_xrcd(xrcd)?;
        self.cq(cq).ok_or(unknown("CQ", cq.0))?;
        let srq = self.create_srq(pd, attr)?;
        if let Some(Some(s)) = self.sh.srqs.get_mut(srq.0 as usize) {
            s.xrc = Some(crate::srq::XrcSrq { xrcd, cq });
        }
        // The CQ may not go while the SRQ completes into it.
        if let Some(Some(q)) = self.sh.cqs.get_mut(cq.0 as usize) {
            q.users += 1;
        }
        Ok(srq)
    }

    /// The XRC SRQ number of an XRC SRQ (`ibv_get_srq_num`): what an initiator puts in
    /// `SendWr::xrc_remote_srqn`. None for an unknown or non-XRC SRQ.
    pub fn srq_num(&self, srq: SrqHandle) -> Option<u32> {
        let s = self.sh.srqs.get(srq.0 as usize)?.as_ref()?;
        s.xrc.map(|_| srq.0)
    }

    /// Creates an XRC target QP in `xrcd` (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`): no
    /// PD, CQ or queues of its own; it starts in RESET and is connected with `modify_qp`
    /// like an RC QP (IBA Annex A14).
    pub fn create_xrc_target_qp(&mut self, xrcd: XrcdHandle) -> Result<u32, VerbsError> {
        self.check_xrcd(xrcd)?;
        let qpn = self.next_qpn()?;
        let init = QpInitAttr {
            qp_type: QpType::XrcRecv,
            send_cq: crate::rc::xrc::NO_CQ,
            recv_cq: crate::rc::xrc::NO_CQ,
            srq: None,
            cap: crate::verbs::QpCap::default(),
            sq_sig_all: false,
        };
        let mut qp = Qp::new(qpn, crate::rc::xrc::NO_PD, &init);
        qp.xrcd = Some(xrcd);
        self.push_qp(qp);
        Ok(qpn)
    }

    /// The QPN the next QP gets (its slot is the table's end), or `LimitReached`.
    fn next_qpn(&self) -> Result<u32, VerbsError> {
        let cfg = &self.sh.config;
        if self.qps.len() as u32 >= cfg.max_qp.min(self.qpn_map.capacity()) {
            return Err(VerbsError::LimitReached {
                limit: "max_qp",
                max: cfg.max_qp,
            });
        }
        Ok(FIRST_QPN + self.qpn_map.offset_of_slot(self.qps.len() as u32))
    }

    /// Puts a new QP (numbered by [`Self::next_qpn`]) into the table's end.
    fn push_qp(&mut self, qp: Qp) {
        self.qps.push(Some(qp));
        if self.ready.capacity() < self.qps.len() {
            self.ready.reserve(self.qps.len().max(64));
        }
    }

    /// Destroys an address handle (`ibv_destroy_ah`). WRs already posted keep their resolved
    /// destination.
    pub fn destroy_ah(&mut self, ah: AhHandle) -> Result<(), VerbsError> {
        let slot = self
            .sh
            .ahs
            .get_mut(ah.0 as usize)
            .filter(|a| a.is_some())
            .ok_or(unknown("AH", ah.0))?;
        *slot = None;
        Ok(())
    }

    /// Creates a QP in RESET and returns its QPN. RD QPs belong to a reliable datagram
    /// domain: create them with [`Device::create_rd_qp`].
    pub fn create_qp(&mut self, pd: PdHandle, init: QpInitAttr) -> Result<u32, VerbsError> {
        if init.qp_type == QpType::Rd {
            return Err(VerbsError::InvalidAttribute {
                attr: "qp_type",
                reason: "an RD QP belongs to a reliable datagram domain: create it with \
                         create_rd_qp"
                    .into(),
            });
        }
        self.create_qp_in(pd, init)
    }

    /// [`Device::create_qp`] without the RD refusal.
    fn create_qp_in(&mut self, pd: PdHandle, init: QpInitAttr) -> Result<u32, VerbsError> {
        self.check_pd(pd)?;
        let cfg = &self.sh.config;
        let cap = init.cap;
        let check = |attr: &'static str, v: u32, lo: u32, hi: u32| {
            if v < lo || v > hi {
                Err(VerbsError::InvalidAttribute {
                    attr,
                    reason: format!("{v} is not in {lo}..={hi}"),
                })
            } else {
                Ok(())
            }
        };
        // A queue of 0 WRs is legal (a receive-only or send-only QP): Linux providers
        // accept it (rxe_qp.c rxe_qp_chk_cap checks the upper bounds only); posting to it
        // fails with QueueFull.
        check("cap.max_send_wr", cap.max_send_wr, 0, cfg.max_qp_wr)?;
        check("cap.max_send_sge", cap.max_send_sge, 1, cfg.max_sge)?;
        check(
            "cap.max_inline_data",
            cap.max_inline_data,
            0,
            cfg.max_inline_data,
        )?;
        match init.qp_type {
            QpType::XrcRecv => {
                return Err(VerbsError::InvalidAttribute {
                    attr: "qp_type",
                    reason: "an XRC target QP belongs to an XRC domain, not a PD: create it \
                             with create_xrc_target_qp"
                        .into(),
                })
            }
            QpType::XrcSend if init.srq.is_some() => {
                return Err(VerbsError::InvalidAttribute {
                    attr: "srq",
                    reason: "an XRC initiator QP has no receive side".into(),
                });
            }
            QpType::XrcSend => {}
            _ if init.srq.is_none() => {
                check("cap.max_recv_wr", cap.max_recv_wr, 0, cfg.max_qp_wr)?;
                check("cap.max_recv_sge", cap.max_recv_sge, 1, cfg.max_sge)?;
            }
            _ => {}
        }
        for cq in [init.send_cq, init.recv_cq] {
            self.cq(cq).ok_or(unknown("CQ", cq.0))?;
        }
        if let Some(srq) = init.srq {
            let s = self
                .sh
                .srqs
                .get(srq.0 as usize)
                .and_then(|s| s.as_ref())
                .ok_or(unknown("SRQ", srq.0))?;
            if s.pd != pd {
                return Err(VerbsError::InvalidAttribute {
                    attr: "srq",
                    reason: "the SRQ belongs to another protection domain".into(),
                });
            }
        }
        let qpn = self.next_qpn()?;
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(Some(q)) = self.sh.cqs.get_mut(cq.0 as usize) {
                q.users += 1;
            }
        }
        if let Some(srq) = init.srq {
            if let Some(Some(s)) = self.sh.srqs.get_mut(srq.0 as usize) {
                s.users += 1;
            }
        }
        let mut init = init;
        if init.qp_type == QpType::XrcSend {
            // IBA Annex A14: no receive queue on an initiator.
            init.cap.max_recv_wr = 0;
            init.cap.max_recv_sge = 0;
        }
        let mut qp = Qp::new(qpn, pd, &init);
        qp.req.rec.paced = self.sh.config.resend == ResendPolicy::Paced;
        self.push_qp(qp);
        Ok(qpn)
    }

    /// `ibv_modify_qp`: see `qp/modify.rs` for the rules.
    pub fn modify_qp(
        &mut self,
        now: Nanos,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        let i = self.qp_index(qpn).ok_or(unknown("QP", qpn))?;
        let qp = self.qps[i].as_mut().expect("index checked");
        qp.modify(now, attr, mask, &mut self.sh)?;
        if mask.contains(QpAttrMask::STATE) && attr.qp_state == QpState::Reset {
            // A QP back in Reset starts afresh: completions it left in its CQs (flushed
            // WRs of the error state) go, as mlx5's provider cleans them, so the next
            // connection on the QP does not poll its predecessor's.
            for cq in [qp.send_cq, qp.recv_cq] {
                if let Some(Some(q)) = self.sh.cqs.get_mut(cq.0 as usize) {
                    q.purge_qp(qpn);
                }
            }
        }
        self.after_qp(i);
        Ok(())
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr, VerbsError> {
        let qp = self.qp(qpn).ok_or(unknown("QP", qpn))?;
        let mut a = qp.attr;
        a.cur_qp_state = a.qp_state;
        a.sq_psn = qp.req.sq_psn;
        a.rq_psn = qp.resp.epsn;
        Ok(a)
    }

    /// Destroys a QP (its outstanding WRs vanish without completions, as in ibv_destroy_qp).
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let i = self.qp_index(qpn).ok_or(unknown("QP", qpn))?;
        // The kernel's uverbs detaches a QP's multicast groups before destroying it.
        self.mcast.detach_everywhere(qpn);
        let qp = self.qps[i].take().expect("index checked");
        self.retired.accumulate(&qp.counters);
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(Some(q)) = self.sh.cqs.get_mut(cq.0 as usize) {
                q.users = q.users.saturating_sub(1);
            }
        }
        // An XRC target's SRQ is only borrowed per message (rc/xrc.rs), never attached.
        if let Some(srq) = qp.srq.filter(|_| qp.qp_type != QpType::XrcRecv) {
            if let Some(Some(s)) = self.sh.srqs.get_mut(srq.0 as usize) {
                s.users = s.users.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// Attaches UD QP `qpn` to the multicast group `gid` (`ibv_attach_mcast`; IBA 10.5,
    /// 11.3.1): datagrams to the multicast QPN with that destination GID then reach it.
    /// Returns true when the group is new on this device, so the driver joins it on the
    /// network. As the kernel: only UD QPs (EINVAL otherwise), only multicast GIDs; the
    /// LID is not used on RoCE. Attaching twice is no error.
    pub fn attach_mcast(&mut self, qpn: u32, gid: [u8; 16]) -> Result<bool, VerbsError> {
        let i = self.qp_index(qpn).ok_or(unknown("QP", qpn))?;
        let qp_type = self.qps[i].as_ref().expect("index checked").qp_type;
        if qp_type != QpType::Ud {
            return Err(VerbsError::InvalidAttribute {
                attr: "qp",
                reason: format!("only UD QPs join multicast groups, QP {qpn:#x} is {qp_type:?}"),
            });
        }
        self.mcast
            .attach(qpn, gid)
            .map_err(|r| mcast_error(r, &gid))
    }

    /// Detaches `qpn` from `gid` (`ibv_detach_mcast`). Returns true when no QP of the device
    /// is left in the group, so the driver leaves it. A QP not attached there: EINVAL.
    pub fn detach_mcast(&mut self, qpn: u32, gid: [u8; 16]) -> Result<bool, VerbsError> {
        self.qp_index(qpn).ok_or(unknown("QP", qpn))?;
        self.mcast
            .detach(qpn, gid)
            .map_err(|r| mcast_error(r, &gid))
    }

    /// The multicast groups at least one QP of the device is attached to.
    pub fn mcast_groups(&self) -> Vec<[u8; 16]> {
        self.mcast.groups().copied().collect()
    }

    /// Posts a send WR. Malformed WRs are refused here; protection problems of the SGEs
    /// surface as error completions when the WR executes (as on hardware).
    pub fn post_send(&mut self, now: Nanos, qpn: u32, wr: &SendWr) -> Result<(), VerbsError> {
        let _ = now;
        let i = self.qp_index_cached(qpn).ok_or(unknown("QP", qpn))?;
        match self.qps[i].as_ref().expect("index checked") {
            q if q.is_eec() => {
                return Err(VerbsError::InvalidAttribute {
                    attr: "qp",
                    reason: format!(
                        "{qpn:#x} is an EE context: post to an RD QP naming it in `rd`"
                    ),
                })
            }
            q if q.qp_type == QpType::Rd => return self.rd_post_send(i, wr),
            _ => {}
        }
        let inline_buffer = self.inline_buffer_for(wr);
        let wqe = {
            let qp = self.qps[i].as_ref().expect("index checked");
            self.build_send_wqe(qp, wr, inline_buffer)?
        };
        let mut wqe = wqe;
        let qp = self.qps[i].as_mut().expect("index checked");
        if wqe.inline.is_none() {
            let mut sges = qp.sq.take_sge_list();
            sges.extend_from_slice(&wr.sg_list);
            wqe.sges = sges;
        }
        if matches!(qp.state(), QpState::Err | QpState::Sqe) {
            // WRs posted in ERR or SQE complete at once with a flush status (IBA 10.3.1).
            qp.complete_send(&mut self.sh, &wqe, WcStatus::WrFlushErr, VendorErr::Flushed);
            return Ok(());
        }
        qp.sq.wqes.push_back(wqe);
        self.after_qp(i);
        Ok(())
    }

    /// A buffer from the device's pool for the inline data of `wr`, if it asks for inline
    /// (an empty list otherwise, which costs nothing).
    fn inline_buffer_for(&mut self, wr: &SendWr) -> Vec<u8> {
        if wr.flags.contains(SendFlags::INLINE) {
            self.sh.pools.inline_buffer(0)
        } else {
            Vec::new()
        }
    }

    /// Checks `wr` and makes its WQE. Its SGE list is left empty: the caller fills it
    /// from the queue's pool. Inline data is read into `inline_buffer`.
    fn build_send_wqe(
        &self,
        qp: &Qp,
        wr: &SendWr,
        inline_buffer: Vec<u8>,
    ) -> Result<SendWqe, VerbsError> {
        let state = qp.state();
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::WrongState {
                qpn: qp.qpn,
                state,
                queue: "send",
                wr_id: wr.wr_id,
            });
        }
        if qp.sq.is_full() {
            return Err(VerbsError::QueueFull {
                queue: "send",
                owner: format!("QP {:#x}", qp.qpn),
                depth: qp.sq.depth(),
                wr_id: wr.wr_id,
            });
        }
        // A target QP has no send queue (IBA Annex A14): refused at post time, as a
        // provider without the queue must. Every other QP accepts an operation its service
        // does not carry, as rxe and the kernel do (rdma-core 44's rxe `validate_send_wr`
        // checks no opcode against the QP type): the WR fails at the head of the send
        // queue with IBV_WC_LOC_QP_OP_ERR and the QP moves to ERR (qp/local_ops.rs).
        // An RD WQE runs on an EEC that other QPs share, so an operation RD does not carry
        // (IBA 9.7 / table 38: no invalidate, ATOMIC WRITE or memory-window operations)
        // is refused at post time instead of failing the EEC.
        let rd_refuses = qp.qp_type == QpType::Rd && !QpType::Rd.carries(wr.opcode);
        if qp.qp_type == QpType::XrcRecv || rd_refuses {
            return Err(VerbsError::OpcodeNotSupported {
                wr_id: wr.wr_id,
                opcode: wr.opcode,
                qp_type: qp.qp_type,
            });
        }
        let invalid = |reason: String| VerbsError::InvalidWr {
            wr_id: wr.wr_id,
            reason,
        };
        if wr.sg_list.len() > qp.attr.cap.max_send_sge as usize {
            return Err(VerbsError::TooManySge {
                wr_id: wr.wr_id,
                given: wr.sg_list.len(),
                max: qp.attr.cap.max_send_sge,
            });
        }
        let length: u64 = wr.sg_list.iter().map(|s| s.length as u64).sum();
        if length > (1 << 31) {
            return Err(invalid(format!("message of {length} bytes exceeds 2^31")));
        }
        let has_imm = matches!(
            wr.opcode,
            WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
        );
        if has_imm && wr.imm_data.is_none() {
            return Err(invalid(format!("{} needs imm_data", wr.opcode.name())));
        }
        if wr.opcode == WrOpcode::BindMw && wr.bind_mw.is_none() {
            return Err(invalid(
                "BIND_MW needs `bind_mw` (window, region, range, rights)".into(),
            ));
        }
        if wr.opcode.is_local() && !wr.sg_list.is_empty() {
            return Err(invalid(format!(
                "{} moves no data and takes no SGEs",
                wr.opcode.name()
            )));
        }
        if wr.opcode.is_atomic() && length != 8 {
            return Err(invalid(format!(
                "{} needs exactly 8 bytes of local buffer, got {length}",
                wr.opcode.name()
            )));
        }
        if wr.opcode == WrOpcode::AtomicWrite && length != 8 {
            return Err(invalid(format!(
                "ATOMIC_WRITE carries exactly 8 bytes, got {length}"
            )));
        }
        let inline = wr.flags.contains(SendFlags::INLINE);
        // An ATOMIC WRITE's 8 bytes are part of the WQE (rxe keeps them in
        // wqe->dma.atomic_wr), not inline data: max_inline_data does not bound them.
        if inline && wr.opcode != WrOpcode::AtomicWrite {
            if !matches!(
                wr.opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::SendWithInv
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
            ) {
                return Err(invalid(format!("{} cannot be INLINE", wr.opcode.name())));
            }
            if length > qp.attr.cap.max_inline_data as u64 {
                return Err(invalid(format!(
                    "{length} inline bytes exceed max_inline_data {}",
                    qp.attr.cap.max_inline_data
                )));
            }
        }
        let mut ud = None;
        if qp.qp_type == QpType::Ud {
            let dest = wr.ud.ok_or_else(|| {
                invalid("a UD send needs `ud` (address handle, QPN, Q_Key)".into())
            })?;
            let (ah_pd, ah) = self
                .sh
                .ahs
                .get(dest.ah.0 as usize)
                .and_then(|a| *a)
                .ok_or(unknown("AH", dest.ah.0))?;
            if ah_pd != qp.pd {
                return Err(invalid("the address handle belongs to another PD".into()));
            }
            if length > self.sh.config.max_mtu.bytes() as u64 {
                return Err(invalid(format!(
                    "UD message of {length} bytes exceeds the MTU {} (IBA 9.8.3: one packet)",
                    self.sh.config.max_mtu.bytes()
                )));
            }
            // IBA 10.2.5: a WR Q_Key with the high bit set means "use the QP's Q_Key".
            let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
                qp.attr.qkey
            } else {
                dest.remote_qkey
            };
            ud = Some(UdTarget {
                path: PathInfo {
                    dlid: ah.dlid,
                    sl: ah.sl,
                    grh: ah.grh,
                },
                qpn: dest.remote_qpn & crate::psn::PSN_MASK,
                qkey,
            });
        }
        let inline_data = if inline {
            // Inline data is read at post time; the lkeys are not used (ibv_post_send(3)).
            let mut data = inline_buffer;
            data.clear();
            data.resize(length as usize, 0);
            let mut at = 0usize;
            for sge in &wr.sg_list {
                let Some(mr) = self.sh.mrs.get(sge.lkey) else {
                    return Err(unknown("lkey", sge.lkey));
                };
                let off = sge
                    .addr
                    .checked_sub(mr.iova)
                    .filter(|o| {
                        o.checked_add(sge.length as u64)
                            .is_some_and(|end| end <= mr.memory.len() as u64)
                    })
                    .ok_or_else(|| {
                        invalid(format!("inline SGE at {:#x} leaves its region", sge.addr))
                    })?;
                mr.memory
                    .read(off as usize, &mut data[at..at + sge.length as usize]);
                at += sge.length as usize;
            }
            Some(data)
        } else {
            None
        };
        Ok(SendWqe {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            sges: Vec::new(),
            inline: inline_data,
            signaled: wr.flags.contains(SendFlags::SIGNALED),
            solicited: wr.flags.contains(SendFlags::SOLICITED),
            fence: wr.flags.contains(SendFlags::FENCE),
            imm: wr.imm_data,
            inv_rkey: wr.invalidate_rkey,
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
            compare_add: wr.compare_add,
            swap: wr.swap,
            ud,
            bind: wr.bind_mw,
            xrc_srqn: wr.xrc_remote_srqn & crate::psn::PSN_MASK,
            rd: None,
            length,
            first_psn: 0,
            npsn: 0,
            read_done: 0,
        })
    }

    /// Posts a receive WR to a QP's own receive queue.
    pub fn post_recv(&mut self, qpn: u32, wr: &RecvWr) -> Result<(), VerbsError> {
        let i = self.qp_index_cached(qpn).ok_or(unknown("QP", qpn))?;
        let qp = self.qps[i].as_mut().expect("index checked");
        if qp.qp_type.is_xrc() {
            return Err(VerbsError::InvalidWr {
                wr_id: wr.wr_id,
                reason: format!(
                    "XRC QP {qpn:#x} has no receive queue; post to an XRC SRQ (IBA Annex A14)"
                ),
            });
        }
        if qp.srq.is_some() {
            return Err(VerbsError::InvalidWr {
                wr_id: wr.wr_id,
                reason: format!("QP {qpn:#x} uses an SRQ; post to the SRQ"),
            });
        }
        if qp.state() == QpState::Reset {
            return Err(VerbsError::WrongState {
                qpn,
                state: QpState::Reset,
                queue: "receive",
                wr_id: wr.wr_id,
            });
        }
        if wr.sg_list.len() > qp.attr.cap.max_recv_sge as usize {
            return Err(VerbsError::TooManySge {
                wr_id: wr.wr_id,
                given: wr.sg_list.len(),
                max: qp.attr.cap.max_recv_sge,
            });
        }
        if qp.rq.is_full() {
            return Err(VerbsError::QueueFull {
                queue: "receive",
                owner: format!("QP {qpn:#x}"),
                depth: qp.rq.depth(),
                wr_id: wr.wr_id,
            });
        }
        let wqe = RecvWqe::with_sges(wr.wr_id, self.sh.pools.sge_list(&wr.sg_list));
        if qp.state() == QpState::Err {
            qp.rq.push(wqe);
            qp.flush_recv(&mut self.sh);
            return Ok(());
        }
        qp.rq.push(wqe);
        self.after_qp(i);
        Ok(())
    }

    /// Posts a receive WR to a shared receive queue.
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: &RecvWr) -> Result<(), VerbsError> {
        // The SRQ and the pool are disjoint fields of the shared state.
        let Shared { srqs, pools, .. } = &mut self.sh;
        let s = srqs
            .get_mut(srq.0 as usize)
            .and_then(|s| s.as_mut())
            .ok_or(unknown("SRQ", srq.0))?;
        if wr.sg_list.len() > s.max_sge as usize {
            return Err(VerbsError::TooManySge {
                wr_id: wr.wr_id,
                given: wr.sg_list.len(),
                max: s.max_sge,
            });
        }
        if s.queue.is_full() {
            return Err(VerbsError::QueueFull {
                queue: "shared receive",
                owner: format!("SRQ {}", srq.0),
                depth: s.queue.depth(),
                wr_id: wr.wr_id,
            });
        }
        s.queue
            .push(RecvWqe::with_sges(wr.wr_id, pools.sge_list(&wr.sg_list)));
        Ok(())
    }

    /// Moves up to `out.len()` completions out of a CQ; returns how many.
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> usize {
        match self.sh.cqs.get_mut(cq.0 as usize) {
            Some(Some(q)) => q.poll(out),
            _ => 0,
        }
    }

    /// Arms a CQ: the next (solicited, if asked) completion raises `AsyncEvent::CqNotify`.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) {
        if let Some(Some(q)) = self.sh.cqs.get_mut(cq.0 as usize) {
            q.arm(solicited_only);
        }
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.sh.events.pop_front()
    }

    /// The driver dropped a packet before the engine saw it; counted in `counters()`.
    pub fn count_driver_drop(&mut self, why: DriverDrop) {
        let c = &mut self.sh.counters;
        match why {
            DriverDrop::Icrc => c.icrc_drops += 1,
            DriverDrop::Vcrc => c.vcrc_drops += 1,
            DriverDrop::Format => c.format_drops += 1,
        }
    }

    /// The driver could not send a packet of the connected QP that talks to QP `dest_qpn`
    /// at `dgid`, and resending it cannot help: the network refuses it for good (on
    /// RoCEv2, the kernel's EMSGSIZE for a datagram above the path MTU, after the route or
    /// the interface MTU changed under a live connection). Retrying would only end in
    /// "transport retry counter exceeded" with the cause lost, so the QP fails now, as
    /// rxe fails a QP whose packet it could not send: its oldest outstanding send WR
    /// completes with `LocQpOpErr` (vendor error [`VendorErr::TransmitRefused`]), the QP
    /// moves to ERR (the rest flush) and `QpFatal` is raised. Returns the QP that failed;
    /// `None` when no connected QP (RC, UC, XRC) in RTS or SQD talks to that peer QP.
    pub fn transmit_refused(&mut self, dgid: [u8; 16], dest_qpn: u32) -> Option<u32> {
        let i = self.qps.iter().position(|q| {
            q.as_ref().is_some_and(|q| {
                matches!(
                    q.qp_type,
                    QpType::Rc | QpType::Uc | QpType::XrcSend | QpType::XrcRecv
                ) && matches!(q.state(), QpState::Rts | QpState::Sqd)
                    && q.attr.dest_qp_num == dest_qpn
                    && q.attr.ah_attr.grh.is_some_and(|g| g.dgid == dgid)
            })
        })?;
        let qp = self.qps[i].as_mut().expect("found above");
        let qpn = qp.qpn;
        qp.fail_transmit(&mut self.sh);
        self.after_qp(i);
        Some(qpn)
    }

    // ----- input -----

    /// A transport packet (BTH through pad, ICRC already checked and stripped) arrived.
    /// Anything malformed or unexpected is dropped and counted, never a panic.
    pub fn handle_packet(&mut self, now: Nanos, meta: &RxMeta, packet: &[u8]) {
        let Ok(pkt) = PacketRepr::parse(packet) else {
            self.sh.counters.malformed_drops += 1;
            return;
        };
        self.handle_parsed(now, meta, &pkt);
    }

    /// [`Device::handle_packet`] for a packet from [`Device::poll_transmit_described`]:
    /// with `zero_payload` set, the payload bytes in `packet` are not meaningful and the
    /// packet is handled as if they were that many zeros. The description must be where
    /// this device's parse of the headers puts the payload, exactly (offset after the BTH
    /// and the extension headers the opcode implies, length without pad); a packet whose
    /// description disagrees is dropped and counted as malformed, so a sender's placement
    /// error cannot pass as data.
    pub fn handle_packet_described(
        &mut self,
        now: Nanos,
        meta: &RxMeta,
        packet: &[u8],
        zero_payload: Option<ZeroPayload>,
    ) {
        let Ok(mut pkt) = PacketRepr::parse(packet) else {
            self.sh.counters.malformed_drops += 1;
            return;
        };
        if let Some(z) = zero_payload {
            if z.offset != pkt.header_len()
                || z.len != pkt.payload.len()
                || z.len > ZERO_PAYLOAD_BYTES.len()
            {
                self.sh.counters.malformed_drops += 1;
                return;
            }
            pkt.payload = &ZERO_PAYLOAD_BYTES[..z.len];
        }
        self.handle_parsed(now, meta, &pkt);
    }

    /// Everything after the parse of an arriving packet.
    fn handle_parsed(&mut self, now: Nanos, meta: &RxMeta, pkt: &PacketRepr<'_>) {
        if pkt.bth.opcode.service() == Service::Rd {
            // RD packets belong to the EE context their RDETH names (IBA 9.7.1).
            self.rd_demux(now, meta, pkt);
            return;
        }
        let dest = pkt.bth.dest_qp;
        if dest == MULTICAST_QPN {
            self.handle_multicast(now, meta, pkt);
            return;
        }
        let Some(i) = self.qp_index_cached(dest) else {
            self.sh.counters.unknown_qp_drops += 1;
            return;
        };
        self.deliver(now, meta, pkt, i);
    }

    /// A datagram to the multicast QPN (IBA 9.8.4): every UD QP attached to its destination
    /// GID gets it, each through its own checks. A multicast packet of any other service, or
    /// one whose GID no QP is attached to, is dropped and counted as for an unknown QP.
    fn handle_multicast(&mut self, now: Nanos, meta: &RxMeta, pkt: &PacketRepr<'_>) {
        let gid = match (pkt.bth.opcode.service(), meta.grh) {
            (Service::Ud, Some(grh)) => grh.dgid,
            _ => {
                self.sh.counters.unknown_qp_drops += 1;
                return;
            }
        };
        let members = self.mcast.members(&gid).len();
        if members == 0 {
            self.sh.counters.unknown_qp_drops += 1;
            return;
        }
        // By position, not a copy of the member list (no allocation per packet): delivery
        // never attaches or detaches, so the list stays as it is while this loop runs.
        for k in 0..members {
            let Some(&qpn) = self.mcast.members(&gid).get(k) else {
                break;
            };
            if let Some(i) = self.qp_index(qpn) {
                self.deliver(now, meta, pkt, i);
            }
        }
    }

    /// Hands a parsed packet to QP slot `i`, after the checks every QP applies.
    fn deliver(&mut self, now: Nanos, meta: &RxMeta, pkt: &PacketRepr<'_>, i: usize) {
        let qp = self.qps[i].as_mut().expect("index checked");
        let service_ok = matches!(
            (qp.qp_type, pkt.bth.opcode.service()),
            (QpType::Rc, Service::Rc)
                | (QpType::Uc, Service::Uc)
                | (QpType::Ud, Service::Ud)
                | (QpType::XrcSend | QpType::XrcRecv, Service::Xrc)
                | (_, Service::Cnp)
        ) || (qp.is_eec() && pkt.bth.opcode.service() == Service::Rd);
        if !service_ok {
            self.sh.counters.wrong_service_drops += 1;
            return;
        }
        // A connected QP takes packets from its peer only (IBA vol. 1 §9.6.1: the source
        // must be the one in the QP context; rxe's check_addr does the same for RoCEv2).
        // Checked before anything a packet may count on the QP, so a third host leaves no
        // trace on it; a QP before RTR has no peer yet and drops by state below.
        if qp.qp_type != QpType::Ud
            && matches!(
                qp.state(),
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            )
            && !qp.is_from_peer(&self.sh.config, meta)
        {
            self.sh.counters.foreign_source_drops += 1;
            return;
        }
        if !qp.pkey_matches(&self.sh, pkt.bth.pkey) {
            qp.counters.bad_pkey_drops += 1;
            self.sh.counters.bad_pkey_drops += 1;
            return;
        }
        if !matches!(
            qp.state(),
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            qp.counters.wrong_state_drops += 1;
            self.sh.counters.wrong_state_drops += 1;
            return;
        }
        qp.counters.packets_received += 1;
        qp.counters.bytes_received += pkt.payload.len() as u64;
        if pkt.bth.fecn {
            qp.counters.fecn_received += 1;
        }
        if pkt.bth.becn {
            qp.counters.becn_received += 1;
        }
        if meta.ecn_ce {
            qp.counters.ecn_ce_received += 1;
        }
        qp.cc_on_receive(now, meta, pkt, &mut self.sh);
        let mut eec_request = false;
        if pkt.bth.opcode.service() == Service::Cnp {
            qp.counters.cnps_received += 1;
        } else {
            match qp.qp_type {
                QpType::Rc => qp.rc_handle_packet(now, meta, pkt, &mut self.sh),
                // An initiator only takes responses, a target only requests (Annex A14).
                QpType::XrcSend if pkt.bth.opcode.is_response() => {
                    qp.rc_handle_packet(now, meta, pkt, &mut self.sh)
                }
                QpType::XrcRecv if !pkt.bth.opcode.is_response() => {
                    qp.xrc_target_request(meta, pkt, &mut self.sh)
                }
                QpType::XrcSend | QpType::XrcRecv => {
                    self.sh.counters.wrong_service_drops += 1;
                }
                QpType::Uc => qp.uc_handle_packet(meta, pkt, &mut self.sh),
                QpType::Ud => {
                    if qp.ud_handle_packet(meta, pkt, &mut self.sh).is_err() {
                        self.sh.counters.bad_qkey_drops += 1;
                    }
                }
                // Only EECs get here (`rd_demux`); requests need the QP they name too.
                QpType::Rd if pkt.bth.opcode.is_response() => {
                    qp.rc_handle_packet(now, meta, pkt, &mut self.sh)
                }
                QpType::Rd => eec_request = true,
            }
        }
        if eec_request {
            self.rd_eec_request(meta, pkt, i);
        }
        self.after_qp(i);
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        while let Some(&Reverse((t, i, k))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let kind = TimerKind::ALL[k as usize];
            let Some(Some(qp)) = self.qps.get_mut(i as usize) else {
                continue;
            };
            if qp.heap_time[k as usize] == Some(t) {
                qp.heap_time[k as usize] = None;
            }
            match qp.timer(kind) {
                Some(d) if d <= now => {
                    qp.handle_timer(now, kind, &mut self.sh);
                    self.after_qp(i as usize);
                }
                Some(_) => self.sync_timers(i as usize),
                None => {}
            }
        }
    }

    // ----- output -----

    /// Writes the next packet into `buf` (at least MTU + 64 bytes). Round-robin over QPs
    /// with work, in a deterministic order.
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        self.sh.describe_zeros = false;
        self.next_transmit(now, buf)
    }

    /// [`Device::poll_transmit`] for a driver that carries packets whose payload nobody
    /// reads on the way (a simulator): a payload gathered entirely from memory that reads as
    /// zeros ([`crate::Memory::reads_as_zeros`]) is not written into `buf`, and
    /// `Transmit::zero_payload` says where it would be. Every check a copy makes (keys,
    /// bounds, access rights) is made all the same. The driver must materialise those
    /// zeros before anybody looks at the bytes, or hand the packet to a peer's
    /// [`Device::handle_packet_described`] with the description.
    pub fn poll_transmit_described(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        self.sh.describe_zeros = true;
        let t = self.next_transmit(now, buf);
        self.sh.describe_zeros = false;
        t
    }

    /// The next packet, described or not as `Shared::describe_zeros` says.
    fn next_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        let rounds = self.ready.len();
        for _ in 0..rounds {
            let i = self.ready.pop_front()? as usize;
            let Some(Some(qp)) = self.qps.get_mut(i) else {
                continue;
            };
            qp.scheduled = false;
            let mut out = match qp.cc_poll_cnp(buf, &self.sh) {
                Some(t) => Some(t),
                None => qp.poll_transmit(now, buf, &mut self.sh),
            };
            if let Some(t) = &mut out {
                // Derived here, from the opcode just written, so every producer (requester,
                // responder, UC/UD, CNP) follows one rule.
                t.batchable =
                    Opcode::from_u8(buf[0]).is_ok_and(|op| op.has_payload() && !op.ends_message());
                qp.counters.packets_sent += 1;
                qp.counters.bytes_sent += t.len as u64;
                qp.cc_after_transmit(now, t, buf, &mut self.sh);
            }
            self.after_qp(i);
            if out.is_some() {
                return out;
            }
        }
        None
    }

    /// The earliest timer deadline (possibly one that turns out to have been cancelled:
    /// calling `handle_timeout` then does nothing).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// True when no QP has anything to transmit right now.
    pub fn is_idle(&self) -> bool {
        self.ready.is_empty()
    }

    /// After any change to a QP: (re)schedule it for transmission and publish its timers.
    fn after_qp(&mut self, i: usize) {
        let Some(Some(qp)) = self.qps.get_mut(i) else {
            return;
        };
        if !qp.scheduled && qp.has_work(&self.sh) {
            qp.scheduled = true;
            self.ready.push_back(i as u32);
        }
        self.sync_timers(i);
    }

    fn sync_timers(&mut self, i: usize) {
        let Some(Some(qp)) = self.qps.get_mut(i) else {
            return;
        };
        for k in 0..TimerKind::COUNT {
            if let Some(d) = qp.timers[k] {
                if qp.heap_time[k].is_none_or(|h| d < h) {
                    qp.heap_time[k] = Some(d);
                    self.timers.push(Reverse((d, i as u32, k as u8)));
                }
            }
        }
    }
}
