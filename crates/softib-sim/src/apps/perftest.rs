//! perftest-style applications for simulated hosts, and the set-up they need: a device per
//! HCA port (`LinkLayer::InfiniBand`), RC QPs connected the way perftest's out-of-band TCP
//! exchange does (both sides' QPNs and PSNs known before traffic), and `ib_write_bw`'s
//! traffic (`WriteBw`: keep `tx_depth` RDMA WRITEs of `size` bytes in flight, count
//! completions), for tests and benchmarks that wire hosts by hand. Scenario traffic (every
//! operation and service, receive models, patterns) is [`crate::scenario::flows`]'s.

use softib_fabric::engine_hca::HostApp;
use softib_transport::{
    AccessFlags, AhAttr, CqHandle, Device, DeviceConfig, LinkLayer, Memory, MrKeys, Mtu, Nanos,
    QpAttr, QpCap, QpInitAttr, QpState, QpType, ResendPolicy, SendFlags, SendWr, Sge, VecMemory,
    VerbsError, WcStatus, WorkCompletion, WrOpcode,
};

/// A registered buffer whose contents nobody ever looks at, as perftest's bandwidth tests
/// treat theirs: it reads as zeros and drops what is written (`/dev/zero` for reads,
/// `/dev/null` for writes), atomics included (they see 0 and their result is dropped).
///
/// For traffic that only moves data (`ib_write_bw`) the wire is byte for byte what a zeroed
/// [`VecMemory`] gives: the source is never written, so it always reads zeros. It saves
/// holding and copying the bytes: storing every arriving payload into the destination is
/// about a sixth of the simulator's time for a 100 Gb/s RC stream (a 4 KiB copy per packet,
/// and another to gather it at the source, which becomes a fill). It says it
/// [`Memory::reads_as_zeros`], so an engine HCA does not even fill: its packets carry their
/// payload as a description (see `softib_fabric::packet`). Use [`VecMemory`] where a
/// test or an application reads the data back or depends on atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroMemory {
    len: usize,
}

impl ZeroMemory {
    /// A region of `len` bytes.
    pub fn new(len: usize) -> Self {
        ZeroMemory { len }
    }
}

impl Memory for ZeroMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, _offset: usize, dst: &mut [u8]) {
        dst.fill(0);
    }
    fn write(&mut self, _offset: usize, _src: &[u8]) {}
    fn compare_swap(&mut self, _offset: usize, _compare: u64, _swap: u64) -> u64 {
        0
    }
    fn fetch_add(&mut self, _offset: usize, _add: u64) -> u64 {
        0
    }
    fn reads_as_zeros(&self) -> bool {
        true
    }
}

/// One side of an RC connection.
#[derive(Clone, Copy, Debug)]
pub struct Side {
    /// Completion queue (send and receive).
    pub cq: CqHandle,
    /// QP number.
    pub qpn: u32,
    /// Keys of the registered buffer.
    pub keys: MrKeys,
    /// Virtual address of the buffer.
    pub addr: u64,
    /// Buffer length.
    pub len: usize,
}

/// The configuration of a native-IB device for the HCA port with `lid`: GID fe80::LID,
/// MTU 4096, `LinkLayer::InfiniBand`, `ResendPolicy::WholeWindow` (an HCA on a lossless
/// fabric resends its whole window, so a field case shows what hardware shows), engine
/// defaults otherwise.
pub fn device_config(lid: u16) -> DeviceConfig {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[14..].copy_from_slice(&lid.to_be_bytes());
    DeviceConfig {
        lid,
        gid,
        max_mtu: Mtu::M4096,
        link_layer: LinkLayer::InfiniBand,
        resend: ResendPolicy::WholeWindow,
        ..DeviceConfig::default()
    }
}

/// A device with [`device_config`], its random stream seeded with `seed`.
pub fn device(lid: u16, seed: u64) -> Device {
    Device::new(device_config(lid), seed)
}

/// A protection domain, CQ, registered buffer of `buf_len` bytes at `addr` (local write,
/// remote read and write) and an RC QP on `dev`.
pub fn rc_side(dev: &mut Device, buf_len: usize, addr: u64) -> Result<Side, VerbsError> {
    rc_side_with(dev, Box::new(VecMemory::zeroed(buf_len)), addr)
}

/// [`rc_side`] with the buffer's storage given (a [`ZeroMemory`] for traffic whose data
/// nobody reads).
pub fn rc_side_with(
    dev: &mut Device,
    memory: Box<dyn Memory>,
    addr: u64,
) -> Result<Side, VerbsError> {
    let buf_len = memory.len();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(4096)?;
    let keys = dev.reg_mr(
        pd,
        memory,
        addr,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let qpn = dev.create_qp(
        pd,
        QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        },
    )?;
    Ok(Side {
        cq,
        qpn,
        keys,
        addr,
        len: buf_len,
    })
}

/// Moves `me`'s QP RESET -> INIT -> RTR -> RTS towards `peer` at `peer_lid` on SL `sl`, with
/// path MTU `mtu` and local ACK timeout `timeout` (4.096 us x 2^timeout); retry counts 7.
pub fn rc_connect(
    dev: &mut Device,
    me: &Side,
    peer: &Side,
    peer_lid: u16,
    sl: u8,
    mtu: Mtu,
    timeout: u8,
) -> Result<(), VerbsError> {
    let attr = QpAttr {
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        path_mtu: mtu,
        dest_qp_num: peer.qpn,
        rq_psn: 0x100,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            dlid: peer_lid,
            sl,
            src_path_bits: 0,
            grh: None,
        },
        sq_psn: 0x100,
        timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..QpAttr::default()
    };
    dev.bring_up_qp(0, me.qpn, QpType::Rc, &attr, QpState::Rts)
}

/// What a bandwidth application saw.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct BwStats {
    /// Completion times (engine nanoseconds) of successful messages.
    pub completions: Vec<Nanos>,
    /// Statuses of failed completions (the application stops posting after one).
    pub errors: Vec<WcStatus>,
}

impl BwStats {
    /// Messages completed in [from, to) nanoseconds.
    pub fn completed_between(&self, from: Nanos, to: Nanos) -> u64 {
        self.completions
            .iter()
            .filter(|&&t| t >= from && t < to)
            .count() as u64
    }
}

/// `ib_write_bw`: keeps `tx_depth` signaled RDMA WRITEs of `size` bytes in flight from
/// `me`'s buffer to `peer`'s, `iterations` in all (`None`: until the run ends).
pub struct WriteBw {
    me: Side,
    peer: Side,
    size: u32,
    tx_depth: u32,
    remaining: Option<u64>,
    outstanding: u32,
    next_id: u64,
    stats: BwStats,
    wcs: Vec<WorkCompletion>,
}

impl WriteBw {
    /// The application for a connected QP pair.
    pub fn new(me: Side, peer: Side, size: u32, tx_depth: u32, iterations: Option<u64>) -> Self {
        WriteBw {
            me,
            peer,
            size,
            tx_depth,
            remaining: iterations,
            outstanding: 0,
            next_id: 0,
            stats: BwStats::default(),
            wcs: vec![softib_transport::harness::empty_wc(); 64],
        }
    }

    /// What it saw so far.
    pub fn stats(&self) -> &BwStats {
        &self.stats
    }

    fn post(&mut self, now: Nanos, dev: &mut Device) {
        while self.outstanding < self.tx_depth && self.remaining != Some(0) {
            let wr = SendWr {
                wr_id: self.next_id,
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
                // The QP left RTS (an error completion is on its way): stop posting.
                return;
            }
            self.next_id += 1;
            self.outstanding += 1;
            if let Some(r) = self.remaining.as_mut() {
                *r -= 1;
            }
        }
    }
}

impl HostApp for WriteBw {
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
                self.outstanding = self.outstanding.saturating_sub(1);
                if wc.status == WcStatus::Success {
                    self.stats.completions.push(now);
                } else {
                    self.stats.errors.push(wc.status);
                }
            }
        }
        if self.stats.errors.is_empty() {
            self.post(now, dev);
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// An application that only lets its device answer (the passive side of write_bw).
pub struct Passive;

impl HostApp for Passive {
    fn on_start(&mut self, _now: Nanos, _dev: &mut Device) {}
    fn on_progress(&mut self, _now: Nanos, _dev: &mut Device) {}
}
