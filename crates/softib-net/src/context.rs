//! A first verbs-style API over a [`Driver`] and its device thread.
//!
//! [`Context::open`] opens a device and starts its thread, which runs the driver loop
//! (docs/design/net.md, "Threading model") in the [`WaitMode`] the application chose.
//! Verbs lock the driver for the duration of the call; a verb that makes packets ready
//! sends them itself, and wakes the device thread only when it moved the next timer
//! earlier than the thread's current sleep. Completions are polled ([`Context::poll_cq`],
//! which also makes progress itself, so a polling application needs no thread hand-off) or
//! waited for ([`Context::wait_cq`], which sleeps on a condition variable the device thread
//! signals).
//!
//! Names follow libibverbs / rust-ibverbs where they apply; the engine's types
//! (`SendWr`, `QpAttr`, `WorkCompletion`, ...) are used as they are.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use softib_transport::{
    AccessFlags, AhAttr, AsyncEvent, CqHandle, DeviceCounters, GlobalRoute, MrKeys, Mtu, PdHandle,
    QpAttr, QpAttrMask, QpInitAttr, QpState, QpType, RecvWr, SendWr, SrqAttr, SrqHandle, VecMemory,
    VerbsError, WorkCompletion,
};

use crate::channel::{ChannelInner, CompletionChannel};
use crate::driver::{Driver, DriverCounters, NetConfig, NetError, Waker};
use crate::oob::endpoint::{Endpoint, RemoteRegion};
use crate::oob::stream::OobStream;
use crate::oob::OobError;
use crate::roce;

/// How the device thread waits when there is nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Never sleep: lowest latency, one core busy.
    Polling,
    /// Spin for `spin` after the last activity, then sleep in `poll(2)` until a datagram,
    /// a wake-up or the next timer: an idle device costs no CPU.
    Blocking {
        /// How long to keep spinning after the last datagram.
        spin: Duration,
    },
}

impl Default for WaitMode {
    fn default() -> Self {
        WaitMode::Blocking {
            spin: Duration::from_micros(50),
        }
    }
}

/// A registered memory region owned by the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    /// Local and remote keys.
    pub keys: MrKeys,
    /// Virtual address of the first byte (what RDMA peers put in the RETH).
    pub addr: u64,
    /// Length, bytes.
    pub len: u64,
}

impl MemoryRegion {
    /// What a peer needs to access the region remotely.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.addr,
            rkey: self.keys.rkey,
            len: self.len,
        }
    }
}

/// Connection parameters for [`Context::connect`] (RESET to RTS in one call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Path MTU (capped at the device's).
    pub mtu: Mtu,
    /// What the peer may do to our memory through this QP (a UC QP keeps only the local
    /// and remote write bits, IBA 9.8.2).
    pub access: AccessFlags,
    /// Local ACK timeout exponent (IBA 9.7.6.1.3).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// RNR NAK timer code we advertise.
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READ / atomics we may issue.
    pub max_rd_atomic: u8,
    /// RDMA READ / atomics we accept.
    pub max_dest_rd_atomic: u8,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Traffic class of our packets (DSCP << 2).
    pub traffic_class: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: Mtu::M4096,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            qkey: 0x1111_1111,
            traffic_class: 0,
        }
    }
}

struct Shared {
    driver: Mutex<Driver>,
    /// Signalled when the device thread received something (completions may be ready).
    activity: Condvar,
    /// Threads waiting on `activity` (counted under the driver lock before they look at
    /// the state they wait for): the device thread signals only when one waits, because
    /// `notify_all` costs a system call even when nobody listens.
    waiters: AtomicUsize,
    /// The instant the engine's clock counts from: the device thread reads the engine time
    /// without the driver lock.
    epoch: Instant,
    /// The driver's wake-up descriptor (it lives as long as the driver, which `Shared`
    /// owns).
    wake_fd: RawFd,
    stop: AtomicBool,
    /// Engine time until which the device thread sleeps (u64::MAX: forever, 0: awake).
    sleeping_until: AtomicU64,
    waker: Waker,
    next_iova: AtomicU64,
    /// Engine time of the application's last `poll_cq`/`poll_event` (which make progress
    /// themselves); while the application polls, the device thread stands back.
    app_polled_at: AtomicU64,
    /// Where the engine's asynchronous events go (lock order: `driver`, then `router`).
    router: Mutex<Router>,
    /// How many CQs are in `Router::armed` (so polls skip the router lock when none is).
    armed_cqs: AtomicU64,
}

/// The engine's events, sorted: CQ notifications of CQs bound to a completion channel go
/// to the channel, everything else waits for `poll_event`.
#[derive(Default)]
struct Router {
    channels: HashMap<CqHandle, Arc<ChannelInner>>,
    events: VecDeque<AsyncEvent>,
    /// CQs armed by `req_notify_cq` whose notification has not fired yet: the application
    /// will wait for them, so its polls of them do not mean it drives the device.
    armed: std::collections::HashSet<CqHandle>,
}

impl Shared {
    /// The engine's time, read without the driver lock.
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Until when the application drives the device with its polls (`APP_DRIVES_FOR` after
    /// its latest one), or `None` when it does not (it never polled, stopped a while ago,
    /// or said it is about to block).
    fn app_drives_until(&self, now: u64) -> Option<u64> {
        let polled = self.app_polled_at.load(Ordering::Relaxed);
        let until = polled.checked_add(APP_DRIVES_FOR.as_nanos() as u64)?;
        (polled != 0 && until > now).then_some(until)
    }

    /// Wakes the threads waiting for the device thread's progress, if any.
    fn notify_activity(&self) {
        if self.waiters.load(Ordering::Acquire) != 0 {
            self.activity.notify_all();
        }
    }

    /// Waits on `activity` for at most `timeout`, counted in `waiters`.
    fn wait_activity<'a>(
        &self,
        d: MutexGuard<'a, Driver>,
        timeout: Duration,
    ) -> MutexGuard<'a, Driver> {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let d = match self.activity.wait_timeout(d, timeout) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        d
    }

    fn router(&self) -> MutexGuard<'_, Router> {
        self.router.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the engine's pending events to their channel or the event queue.
    fn route_events(&self, d: &mut Driver) {
        let Some(first) = d.engine_mut().poll_event() else {
            return;
        };
        let mut r = self.router();
        let mut next = Some(first);
        while let Some(ev) = next {
            if let AsyncEvent::CqNotify(cq) = ev {
                if r.armed.remove(&cq) {
                    self.armed_cqs.fetch_sub(1, Ordering::Relaxed);
                }
                if let Some(ch) = r.channels.get(&cq) {
                    ch.push(cq);
                    next = d.engine_mut().poll_event();
                    continue;
                }
            }
            r.events.push_back(ev);
            next = d.engine_mut().poll_event();
        }
    }
}

/// How long after the application's last poll the device thread leaves the socket to it.
///
/// A trade-off measured under load (docs/design/net.md, "Threading model"): an
/// application that stops polling to wait some other way (a stock `ib_write_lat` server
/// spinning on its buffer) waits up to this long for the device thread, so shorter is
/// better for it (1 ms gave such a server a typical 540 us, 200 us gives 135-180 us); but
/// each turn the device thread takes while the application still polls contends for the
/// driver lock, and on a loaded machine a thread that sleeps on a lock can wait
/// milliseconds for a core (50 us made `softib pingpong` 1.2-2.2 ms per iteration instead
/// of 25-90 us).
const APP_DRIVES_FOR: Duration = Duration::from_micros(200);

/// An open softib device with its device thread.
pub struct Context {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The process that opened the device: a forked child holds a copy of this handle
    /// without the device thread (and possibly with a lock the thread held at the fork).
    pid: u32,
    local: SocketAddr,
    gid: [u8; 16],
    mtu: Mtu,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("local", &self.local)
            .field("mtu", &self.mtu)
            .finish()
    }
}

impl Context {
    /// Opens a device and starts its thread.
    pub fn open(config: NetConfig, mode: WaitMode) -> Result<Context, NetError> {
        let driver = Driver::open(config)?;
        let waker = driver.waker().map_err(NetError::Wake)?;
        let (local, gid, mtu) = (driver.local_addr(), driver.gid(), driver.mtu());
        let (epoch, wake_fd) = (driver.epoch(), driver.wait_fds().1);
        let shared = Arc::new(Shared {
            driver: Mutex::new(driver),
            activity: Condvar::new(),
            waiters: AtomicUsize::new(0),
            epoch,
            wake_fd,
            stop: AtomicBool::new(false),
            sleeping_until: AtomicU64::new(0),
            waker,
            next_iova: AtomicU64::new(0x10_0000),
            app_polled_at: AtomicU64::new(0),
            router: Mutex::new(Router::default()),
            armed_cqs: AtomicU64::new(0),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("softib {local}"))
            .spawn(move || device_loop(&s, mode))
            .map_err(NetError::Wake)?;
        Ok(Context {
            shared,
            thread: Some(thread),
            pid: std::process::id(),
            local,
            gid,
            mtu,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Driver> {
        // A verb needs the driver, whose thread may be waiting for the region this thread
        // holds: that would never end, so say so instead (as RefCell does for a borrow).
        crate::region_guard::assert_no_guard_held();
        // A panic in another verb leaves the engine consistent (verbs are transactional in
        // the engine), so a poisoned lock is still usable.
        self.shared.driver.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the driver, sends what it made ready, and wakes the device thread if the
    /// next timer moved before its sleep.
    pub(crate) fn with_driver<T>(&self, f: impl FnOnce(&mut Driver) -> T) -> T {
        let mut d = self.lock();
        let out = f(&mut d);
        let _ = d.flush();
        self.after_verb(d);
        out
    }

    /// [`Context::with_driver`] for a verb that needs the engine time: read once, when the
    /// lock is taken, given to `f` and used by the flush after it (one clock read per
    /// `post_send` instead of two; the engine sees one time for the whole verb, and a
    /// timer that falls due while a long verb runs fires at the next turn).
    pub(crate) fn with_driver_at<T>(
        &self,
        f: impl FnOnce(&mut Driver, softib_transport::Nanos) -> T,
    ) -> T {
        let mut d = self.lock();
        let now = d.now();
        let out = f(&mut d, now);
        let _ = d.flush_at_time(now);
        self.after_verb(d);
        out
    }

    /// What every verb does after its flush: routes the events it made and wakes the
    /// device thread if the next timer moved before its sleep.
    fn after_verb(&self, mut d: MutexGuard<'_, Driver>) {
        self.shared.route_events(&mut d);
        let next = d.next_deadline().unwrap_or(u64::MAX);
        // Datagrams left behind by a full socket buffer are the device thread's to send.
        let pending = d.tx_pending();
        drop(d);
        if pending || next < self.shared.sleeping_until.load(Ordering::Acquire) {
            self.shared.waker.wake();
        }
    }

    /// Runs `f` on the engine with the driver's current time, then sends what it made
    /// ready, like every verb of this type. For callers that need an engine verb this type
    /// does not wrap (registering their own [`softib_transport::Memory`], `dealloc_pd`,
    /// `destroy_ah`, ...): the libibverbs shim builds its C API on it.
    pub fn with_engine<T>(
        &self,
        f: impl FnOnce(&mut softib_transport::Device, softib_transport::Nanos) -> T,
    ) -> T {
        self.with_driver_at(|d, now| f(d.engine_mut(), now))
    }

    /// Sends to the peer at `ip` on UDP `port` instead of RoCEv2's 4791 (for peers that,
    /// like this device, run on another port).
    pub fn set_peer_port(&self, ip: std::net::IpAddr, port: u16) {
        self.lock().set_peer_port(ip, port);
    }

    /// Writes out what the pcap capture holds so far (it is also flushed when the device
    /// closes; a program that exits without dropping its last handle needs this).
    pub fn flush_capture(&self) {
        self.lock().flush_capture();
    }

    /// The device's UDP address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The device's GID (its IPv6 address or IPv4-mapped address).
    pub fn gid(&self) -> [u8; 16] {
        self.gid
    }

    /// The device's largest path MTU.
    pub fn mtu(&self) -> Mtu {
        self.mtu
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> PdHandle {
        self.with_driver(|d| d.engine_mut().alloc_pd())
    }

    /// Registers a zeroed buffer of `len` bytes owned by the device.
    pub fn reg_mr(
        &self,
        pd: PdHandle,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, VerbsError> {
        self.reg_mr_with(pd, Box::new(VecMemory::zeroed(len)), access)
    }

    /// Registers any [`softib_transport::Memory`] implementation (the device calls it for
    /// every access, under the device lock) at a virtual address the device chooses.
    pub fn reg_mr_with(
        &self,
        pd: PdHandle,
        memory: Box<dyn softib_transport::Memory>,
        access: AccessFlags,
    ) -> Result<MemoryRegion, VerbsError> {
        let len = memory.len();
        let addr = self.alloc_iova(len);
        self.reg_mr_at(pd, memory, addr, access)
    }

    /// Registers `memory` at virtual address `addr`.
    pub(crate) fn reg_mr_at(
        &self,
        pd: PdHandle,
        memory: Box<dyn softib_transport::Memory>,
        addr: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion, VerbsError> {
        let len = memory.len() as u64;
        let keys = self.with_driver(|d| d.engine_mut().reg_mr(pd, memory, addr, access))?;
        Ok(MemoryRegion { keys, addr, len })
    }

    /// Distinct, page-aligned virtual addresses, as a real process's buffers would have
    /// (with a guard page between regions, so an overrun is a protection error).
    pub(crate) fn alloc_iova(&self, len: usize) -> u64 {
        let span = (len as u64).div_ceil(4096).max(1) * 4096 + 4096;
        self.shared.next_iova.fetch_add(span, Ordering::Relaxed)
    }

    /// Copies `src` into a region at `offset`. Errors if the region does not exist or the
    /// range is outside it.
    pub fn write_mr(&self, mr: &MemoryRegion, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        self.with_driver(|d| {
            let m = d
                .engine_mut()
                .memory_mut(mr.keys.lkey)
                .ok_or(VerbsError::UnknownHandle {
                    kind: "lkey",
                    value: mr.keys.lkey,
                })?;
            check_range(offset, src.len(), m.len())?;
            m.write(offset, src);
            Ok(())
        })
    }

    /// Copies from a region at `offset` into `dst`.
    pub fn read_mr(
        &self,
        mr: &MemoryRegion,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), VerbsError> {
        let d = self.lock();
        let m = d
            .engine()
            .memory(mr.keys.lkey)
            .ok_or(VerbsError::UnknownHandle {
                kind: "lkey",
                value: mr.keys.lkey,
            })?;
        check_range(offset, dst.len(), m.len())?;
        m.read(offset, dst);
        Ok(())
    }

    /// Creates a completion queue of `cqe` entries.
    pub fn create_cq(&self, cqe: u32) -> Result<CqHandle, VerbsError> {
        self.with_driver(|d| d.engine_mut().create_cq(cqe))
    }

    /// Creates a QP and returns its number.
    pub fn create_qp(&self, pd: PdHandle, init: QpInitAttr) -> Result<u32, VerbsError> {
        self.with_driver(|d| d.engine_mut().create_qp(pd, init))
    }

    /// `ibv_modify_qp`. A path MTU above the port's is refused naming the interface behind
    /// it, so the user sees why (a datagram the interface cannot carry would be refused by
    /// the kernel, and the connection would die of retries).
    pub fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        self.with_driver(|d| {
            if mask.contains(QpAttrMask::PATH_MTU) && attr.path_mtu > d.mtu() {
                let why = match d.interface() {
                    Some((name, if_mtu)) => format!(
                        "{} exceeds the port MTU {}: interface {name} has MTU {if_mtu}, so the largest IB MTU it carries is {}",
                        attr.path_mtu.bytes(),
                        d.mtu().bytes(),
                        d.mtu().bytes()
                    ),
                    None => format!(
                        "{} exceeds the port MTU {}",
                        attr.path_mtu.bytes(),
                        d.mtu().bytes()
                    ),
                };
                return Err(VerbsError::InvalidAttribute {
                    attr: "path_mtu",
                    reason: why,
                });
            }
            let now = d.now();
            d.engine_mut().modify_qp(now, qpn, attr, mask)
        })
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr, VerbsError> {
        self.lock().engine().query_qp(qpn)
    }

    /// Creates an address handle.
    pub fn create_ah(
        &self,
        pd: PdHandle,
        attr: AhAttr,
    ) -> Result<softib_transport::AhHandle, VerbsError> {
        self.with_driver(|d| d.engine_mut().create_ah(pd, attr))
    }

    /// Posts send WRs in order; stops at the first error (the WRs before it are posted).
    pub fn post_send(&self, qpn: u32, wrs: &[SendWr]) -> Result<(), VerbsError> {
        self.with_driver_at(|d, now| {
            wrs.iter()
                .try_for_each(|wr| d.engine_mut().post_send(now, qpn, wr))
        })
    }

    /// Posts receive WRs in order.
    pub fn post_recv(&self, qpn: u32, wrs: &[RecvWr]) -> Result<(), VerbsError> {
        self.with_driver(|d| {
            wrs.iter()
                .try_for_each(|wr| d.engine_mut().post_recv(qpn, wr))
        })
    }

    /// Takes up to `out.len()` completions; makes progress first (receives and sends what
    /// is waiting), so a polling caller needs no hand-off to the device thread.
    pub fn poll_cq(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> usize {
        self.poll_cq_progress(cq, out).0
    }

    /// [`Context::poll_cq`], also saying whether the device received or sent a datagram in
    /// this call: a polling loop that sees neither for a while can yield its core (on a
    /// loaded machine the peer it waits for may need it).
    pub fn poll_cq_progress(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> (usize, bool) {
        let mut d = self.lock();
        let armed = self.shared.armed_cqs.load(Ordering::Relaxed) != 0
            && self.shared.router().armed.contains(&cq);
        // A polling application answers what it receives with its next verb: the ACKs of
        // this turn leave behind that answer (driver::Driver::process_then_answer). An armed
        // CQ's owner is about to sleep instead, so its ACKs go now.
        let moved = if armed {
            d.process()
        } else {
            d.process_then_answer()
        }
        .is_ok_and(|p| p.any());
        if !armed {
            self.shared
                .app_polled_at
                .store(d.last_now().max(1), Ordering::Relaxed);
        }
        self.shared.route_events(&mut d);
        if moved {
            // Another thread of the application may wait (`wait_cq`, a CM wait) for what
            // this poll received: the device thread stands back now and will not tell it.
            self.shared.notify_activity();
        }
        let n = d.engine_mut().poll_cq(cq, out);
        if n == 0 && d.holds_only_new_acks() {
            // This turn's ACKs, and nothing for the application to answer them with (a
            // WRITE stream makes no completion at its receiver): they go now. ACKs of an
            // earlier turn wait on: the application may still answer what it took then.
            let _ = d.release_acks();
        } else if d.holds_acks() {
            // Held ACKs wait at most for the device thread's next turn, which comes within
            // APP_DRIVES_FOR of this poll unless the thread sleeps on the socket (it went
            // to sleep before the application started polling): then wake it.
            let until = self.shared.sleeping_until.load(Ordering::Acquire);
            if until > d.last_now() + APP_DRIVES_FOR.as_nanos() as u64 {
                self.shared.waker.wake();
            }
        }
        (n, moved)
    }

    /// For a polling loop that found nothing for a while (the peer it waits for is not
    /// running, on a busy machine): sleeps in this thread until a datagram is readable on
    /// the device's sockets, the engine's next timer, or `max`, without the driver lock;
    /// the caller's next poll then receives what arrived, so nothing is handed over to the
    /// device thread, which keeps standing back meanwhile. Held ACKs leave first.
    ///
    /// Why not `sched_yield`: the scheduler (CFS and EEVDF alike) keeps a yielding thread
    /// runnable behind every other runnable thread, so on a machine with more of them than
    /// cores each yield can cost a whole time slice of some unrelated job (milliseconds),
    /// while a sleeping thread is woken as soon as its datagram arrives and keeps its claim
    /// to the core.
    pub fn sleep_until_readable(&self, max: Duration) {
        let mut d = self.lock();
        let _ = d.release_acks();
        let now = d.now();
        let until = d
            .next_deadline()
            .unwrap_or(u64::MAX)
            .min(now.saturating_add(max.as_nanos() as u64));
        if until <= now {
            return;
        }
        let (fds, _) = d.wait_fds();
        // The device thread stands back until APP_DRIVES_FOR after this sleep ends.
        self.shared.app_polled_at.store(until, Ordering::Relaxed);
        drop(d);
        // No wake-up descriptor (-1: ppoll skips it): a verb of another thread sends what
        // it makes itself, and the timers bound the sleep.
        let _ = crate::driver::wait_on(&fds, -1, Some(Duration::from_nanos(until - now)));
    }

    /// The application is about to block: the device thread must watch the socket again
    /// instead of leaving it to the application's polls.
    fn app_waits(&self) {
        if self.shared.app_polled_at.swap(0, Ordering::Relaxed) != 0 {
            self.shared.waker.wake();
        }
    }

    /// Waits up to `timeout` for completions; returns how many were taken (0: timed out).
    pub fn wait_cq(&self, cq: CqHandle, out: &mut [WorkCompletion], timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        self.app_waits();
        let mut d = self.lock();
        loop {
            let n = d.engine_mut().poll_cq(cq, out);
            if n > 0 {
                return n;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return 0;
            }
            d = self
                .shared
                .wait_activity(d, left.min(Duration::from_millis(10)));
        }
    }

    /// Waits up to `timeout` until `f` (run on the driver under its lock, each time the
    /// device thread made progress, and at least every 10 ms) returns something. For waits
    /// on state the device thread changes, such as CM events.
    pub(crate) fn wait_for<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&mut Driver) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        self.app_waits();
        let mut d = self.lock();
        loop {
            if let Some(out) = f(&mut d) {
                // `f` may have queued MADs (e.g. an automatic answer); send them.
                let _ = d.flush();
                return Some(out);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            d = self
                .shared
                .wait_activity(d, left.min(Duration::from_millis(10)));
        }
    }

    /// Runs `f` on the device's CM with the driver's time, then sends what it queued. For a
    /// consumer that drives the CM itself and takes all its events with
    /// [`Context::wait_cm_event`] (the verbs shim's librdmacm layer); the per-connection
    /// [`crate::verbs::CmListener`] API must not be used on the same device then.
    pub fn with_cm<T>(
        &self,
        f: impl FnOnce(&mut softib_cm::Cm, softib_transport::Nanos) -> T,
    ) -> T {
        self.with_driver(|d| {
            let now = d.now();
            f(d.gsi_mut().cm_mut(), now)
        })
    }

    /// Listens on `service_id` (see [`Driver::listen`]: refused when another process on
    /// this address listens on it).
    pub fn cm_listen(&self, service_id: u64) -> Result<softib_cm::ListenerId, softib_cm::CmError> {
        self.with_driver(|d| d.listen(service_id))
    }

    /// Waits up to `timeout` for the CM's next event, whichever connection, listener or
    /// SIDR request it is for (see [`Context::with_cm`]).
    pub fn wait_cm_event(&self, timeout: Duration) -> Option<softib_cm::CmEvent> {
        self.wait_for(timeout, |d| d.gsi_mut().cm_mut().poll_event())
    }

    /// The engine's counters and the driver's.
    pub fn counters(&self) -> (DeviceCounters, DriverCounters) {
        let d = self.lock();
        (d.engine().counters(), d.counters())
    }

    /// The Communication Manager's counters and QP1's (see [`crate::gsi`]).
    pub fn cm_counters(&self) -> (softib_cm::CmCounters, crate::gsi::GsiCounters) {
        let d = self.lock();
        (d.gsi().cm().counters(), d.gsi().counters())
    }

    /// One QP's engine counters.
    pub fn qp_counters(&self, qpn: u32) -> Option<softib_transport::QpCounters> {
        self.lock().engine().qp_counters(qpn).copied()
    }

    /// Every counter of the device and its live QPs, by name (see [`crate::counters`]).
    pub fn counter_snapshot(&self) -> crate::counters::CounterSnapshot {
        let d = self.lock();
        let e = d.engine();
        let now = d.now();
        crate::counters::CounterSnapshot::new(
            &e.counters(),
            &d.counters(),
            e.qpns().filter_map(|q| e.qp_counters(q).map(|c| (q, c))),
        )
        .with_cc_status(
            now,
            e.qpns().filter_map(|q| e.cc_status(now, q).map(|s| (q, s))),
        )
    }

    /// A QP's state.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.lock().engine().qp_state(qpn)
    }

    /// A random starting PSN from the engine's seeded RNG.
    pub fn random_psn(&self) -> u32 {
        self.with_driver(|d| d.engine_mut().random_psn())
    }

    /// Our side of a connection for the out-of-band exchange.
    pub fn endpoint(&self, qpn: u32, psn: u32, regions: &[MemoryRegion]) -> Endpoint {
        Endpoint {
            qpn,
            psn,
            gid: std::net::Ipv6Addr::from(self.gid),
            lid: 0,
            udp: Some(self.local),
            mtu: Some(self.mtu.bytes()),
            qkey: None,
            regions: regions.iter().map(|r| r.remote()).collect(),
        }
    }

    /// Moves `qpn` from RESET through INIT and RTR to RTS, connected to `remote` (RC/UC), or
    /// to RTS for UD (`remote` only gives its UDP port then). `psn` is our first PSN (the
    /// one we announced in our endpoint). The path MTU is the smallest of the options',
    /// ours and the peer's.
    pub fn connect(
        &self,
        qpn: u32,
        qp_type: QpType,
        psn: u32,
        remote: &Endpoint,
        o: &ConnectOptions,
    ) -> Result<(), VerbsError> {
        let peer_gid = remote.gid.octets();
        let mut mtu = o.mtu.min(self.mtu);
        if let Some(m) = remote.mtu.and_then(Mtu::from_bytes) {
            mtu = mtu.min(m);
        }
        self.with_driver(|d| {
            if let Some(udp) = remote.udp {
                let ip = roce::ip_from_gid(peer_gid);
                if udp.ip() == ip {
                    d.set_peer_port(ip, udp.port());
                }
            }
            let now = d.now();
            let e = d.engine_mut();
            let attr = QpAttr {
                pkey_index: 0,
                port_num: 1,
                qkey: o.qkey,
                // UC has neither RDMA READ nor atomics (IBA 9.8.2): keep what applies.
                qp_access_flags: if qp_type == QpType::Uc {
                    o.access
                        .difference(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
                } else {
                    o.access
                },
                path_mtu: mtu,
                dest_qp_num: remote.qpn,
                rq_psn: remote.psn,
                max_dest_rd_atomic: o.max_dest_rd_atomic,
                min_rnr_timer: o.min_rnr_timer,
                ah_attr: AhAttr {
                    dlid: 0,
                    sl: 0,
                    src_path_bits: 0,
                    grh: Some(GlobalRoute {
                        dgid: peer_gid,
                        flow_label: 0,
                        sgid_index: 0,
                        hop_limit: 64,
                        traffic_class: o.traffic_class,
                    }),
                },
                sq_psn: psn,
                timeout: o.timeout,
                retry_cnt: o.retry_cnt,
                rnr_retry: o.rnr_retry,
                max_rd_atomic: o.max_rd_atomic,
                ..QpAttr::default()
            };
            e.bring_up_qp(now, qpn, qp_type, &attr, QpState::Rts)
        })
    }
}

impl Context {
    /// Creates a shared receive queue.
    pub fn create_srq(&self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle, VerbsError> {
        self.with_driver(|d| d.engine_mut().create_srq(pd, attr))
    }

    /// Arms (or disarms, with 0) an SRQ's limit event.
    pub fn modify_srq(&self, srq: SrqHandle, srq_limit: u32) -> Result<(), VerbsError> {
        self.with_driver(|d| d.engine_mut().modify_srq(srq, srq_limit))
    }

    /// Posts receive WRs to a shared receive queue.
    pub fn post_srq_recv(&self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<(), VerbsError> {
        self.with_driver(|d| {
            wrs.iter()
                .try_for_each(|wr| d.engine_mut().post_srq_recv(srq, wr))
        })
    }

    /// Destroys a QP.
    pub fn destroy_qp(&self, qpn: u32) -> Result<(), VerbsError> {
        self.with_driver(|d| {
            d.engine_mut().destroy_qp(qpn)?;
            // Its multicast groups were left in the engine; leave them on the network too.
            let _ = d.sync_multicast();
            Ok(())
        })
    }

    /// Attaches UD QP `qpn` to the multicast group `gid` (`ibv_attach_mcast`): the engine
    /// delivers the group's datagrams to it, and the device joins the group on its
    /// interface when it is the first QP of the device there (`mcast.rs`). IPv6 groups
    /// are not carried yet: `VerbsError::Unsupported` (EOPNOTSUPP).
    pub fn attach_mcast(&self, qpn: u32, gid: [u8; 16]) -> Result<(), VerbsError> {
        let out = self.with_driver(|d| {
            if d.engine_mut().attach_mcast(qpn, gid)? {
                if let Err((_, e)) = d.sync_multicast() {
                    // Not joined on the network: undo the attach so nothing half-works.
                    let _ = d.engine_mut().detach_mcast(qpn, gid);
                    let _ = d.sync_multicast();
                    return Err(if e.kind() == std::io::ErrorKind::Unsupported {
                        VerbsError::Unsupported {
                            attr: "IPv6 multicast groups",
                        }
                    } else {
                        VerbsError::InvalidAttribute {
                            attr: "gid",
                            reason: format!(
                                "cannot join {} on the network: {e}",
                                std::net::Ipv6Addr::from(gid)
                            ),
                        }
                    });
                }
            }
            Ok(())
        });
        // A sleeping device thread waits on the descriptors it had: a new group socket is
        // not among them until it looks again.
        self.shared.waker.wake();
        out
    }

    /// Detaches `qpn` from `gid` (`ibv_detach_mcast`); the device leaves the group when no
    /// QP of it is left there.
    pub fn detach_mcast(&self, qpn: u32, gid: [u8; 16]) -> Result<(), VerbsError> {
        let out = self.with_driver(|d| {
            if d.engine_mut().detach_mcast(qpn, gid)? {
                let _ = d.sync_multicast();
            }
            Ok(())
        });
        // The thread may be waiting on the group's (now closed) socket: let it look again.
        self.shared.waker.wake();
        out
    }

    /// Destroys a CQ (no QP may still use it).
    pub fn destroy_cq(&self, cq: CqHandle) -> Result<(), VerbsError> {
        self.with_driver(|d| d.engine_mut().destroy_cq(cq))?;
        let mut r = self.shared.router();
        r.channels.remove(&cq);
        if r.armed.remove(&cq) {
            self.shared.armed_cqs.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Creates a completion queue of `cqe` entries whose notifications
    /// ([`Context::req_notify_cq`]) go to `channel` instead of [`Context::poll_event`].
    pub fn create_cq_with_channel(
        &self,
        cqe: u32,
        channel: &CompletionChannel,
    ) -> Result<CqHandle, VerbsError> {
        // A new CQ is not armed, so no notification can fire before it is bound.
        let cq = self.create_cq(cqe)?;
        self.shared
            .router()
            .channels
            .insert(cq, channel.inner.clone());
        Ok(cq)
    }

    /// Deregisters a memory region; its bytes are returned.
    pub fn dereg_mr(&self, mr: &MemoryRegion) -> Result<Vec<u8>, VerbsError> {
        let memory = self.with_driver(|d| d.engine_mut().dereg_mr(mr.keys.lkey))?;
        let mut bytes = vec![0u8; memory.len()];
        memory.read(0, &mut bytes);
        Ok(bytes)
    }

    /// Requests a `CqNotify` event for the next completion on `cq` (the next solicited one
    /// with `solicited_only`), as `ibv_req_notify_cq`.
    pub fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) {
        self.with_driver(|d| {
            d.engine_mut().req_notify_cq(cq, solicited_only);
            if self.shared.router().armed.insert(cq) {
                self.shared.armed_cqs.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Arming means the application will wait (in `wait_event` or on a channel's
        // descriptor): the device thread must make progress for it.
        self.app_waits();
    }

    /// Takes the next asynchronous event (CQ notification, SRQ limit, QP fatal, ...).
    pub fn poll_event(&self) -> Option<AsyncEvent> {
        let mut d = self.lock();
        let moved = d.process().is_ok_and(|p| p.any());
        self.shared
            .app_polled_at
            .store(d.last_now().max(1), Ordering::Relaxed);
        self.shared.route_events(&mut d);
        drop(d);
        if moved {
            // As in `poll_cq_progress`: a waiting thread learns of it from this poll.
            self.shared.notify_activity();
        }
        self.shared.router().events.pop_front()
    }

    /// Waits up to `timeout` for the next asynchronous event.
    pub fn wait_event(&self, timeout: Duration) -> Option<AsyncEvent> {
        let deadline = Instant::now() + timeout;
        self.app_waits();
        let mut d = self.lock();
        loop {
            self.shared.route_events(&mut d);
            if let Some(e) = self.shared.router().events.pop_front() {
                return Some(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            d = self
                .shared
                .wait_activity(d, left.min(Duration::from_millis(10)));
        }
    }

    /// The `handshake` shortcut: exchanges softib [`Endpoint`]s over TCP on `port` (as the
    /// client of `peer` when given, else as the server waiting at most `timeout` for one),
    /// moves `qpn` to RTS connected to the peer with `options`, and returns the peer's
    /// endpoint (its regions tell where RDMA may go).
    #[allow(clippy::too_many_arguments)]
    pub fn handshake(
        &self,
        qpn: u32,
        qp_type: QpType,
        regions: &[MemoryRegion],
        peer: Option<&str>,
        port: u16,
        timeout: Duration,
        options: &ConnectOptions,
    ) -> Result<Endpoint, HandshakeError> {
        let psn = self.random_psn();
        let mut mine = self.endpoint(qpn, psn, regions);
        if qp_type == QpType::Ud {
            mine.qkey = Some(options.qkey);
        }
        let mut stream = match peer {
            Some(host) => OobStream::connect(host, port, timeout)?,
            None => {
                let listener =
                    std::net::TcpListener::bind(("0.0.0.0", port)).map_err(|source| {
                        OobError::Io {
                            what: format!("listen on TCP port {port}"),
                            source,
                        }
                    })?;
                OobStream::accept(&listener, timeout)?
            }
        };
        let theirs = stream.exchange_endpoint(&mine)?;
        self.connect(qpn, qp_type, psn, &theirs, options)?;
        Ok(theirs)
    }
}

/// Why [`Context::handshake`] failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The TCP exchange failed.
    #[error(transparent)]
    Exchange(#[from] OobError),
    /// Connecting the QP failed.
    #[error("connecting the QP: {0}")]
    Connect(#[from] VerbsError),
}

impl Context {
    /// Whether this handle was opened by the calling process (not inherited through
    /// `fork()`, whose child has no device thread and must open a device of its own).
    pub fn opened_by_this_process(&self) -> bool {
        self.pid == std::process::id()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if !self.opened_by_this_process() {
            // Inherited through fork(): the device thread is not in this process and a lock
            // it held stays held, so joining or locking would hang. The sockets were
            // already replaced in the child (sys::ForkGuard); leave the rest alone.
            std::mem::forget(self.shared.clone());
            std::mem::forget(self.thread.take());
            return;
        }
        self.shared.stop.store(true, Ordering::Release);
        self.shared.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut d = self.lock();
        let _ = d.release_acks();
        d.flush_capture();
    }
}

fn check_range(offset: usize, len: usize, region: usize) -> Result<(), VerbsError> {
    if offset.checked_add(len).is_none_or(|end| end > region) {
        return Err(VerbsError::InvalidAttribute {
            attr: "offset",
            reason: format!("{len} bytes at offset {offset} do not fit a region of {region} bytes"),
        });
    }
    Ok(())
}

/// The device thread: process, then spin or sleep as the wait mode says.
fn device_loop(s: &Shared, mode: WaitMode) {
    let mut last_activity = Instant::now();
    let mut woken = false;
    while !s.stop.load(Ordering::Acquire) {
        // While the application polls, its polls receive, fire the timers and send
        // (`Context::poll_cq_progress`): stand back without touching the driver lock until
        // it stops, so the polling thread never sleeps on the lock behind a device turn (a
        // futex sleep costs the polling thread its core, tens of us or more on a busy
        // machine). A verb that needs the thread sooner (datagrams left behind a full
        // socket buffer, a timer earlier than this sleep) wakes it.
        if !woken && mode != WaitMode::Polling {
            if let Some(until) = s.app_drives_until(s.now()) {
                s.sleeping_until.store(until, Ordering::Release);
                let timeout = Duration::from_nanos(until.saturating_sub(s.now()));
                woken = crate::driver::wait_on(&[], s.wake_fd, Some(timeout)).is_ok_and(|(_, w)| w);
                s.sleeping_until.store(0, Ordering::Release);
                continue;
            }
        }
        let mut d = s.driver.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::take(&mut woken) {
            d.drain_wake();
        }
        let progress = d.process();
        s.route_events(&mut d);
        let active = progress.as_ref().is_ok_and(|p| p.any());
        // An application polling in a loop already receives, times and sends: spinning
        // here too would only take its core (on a 2-core machine, the peer's). Sleep until
        // it stops polling or a timer is due, without watching the socket.
        let polled = s.app_polled_at.load(Ordering::Relaxed);
        let now = d.last_now();
        let app_drives = mode != WaitMode::Polling
            && polled != 0
            && now.saturating_sub(polled) < APP_DRIVES_FOR.as_nanos() as u64;
        if app_drives && !d.tx_pending() {
            let until = d
                .next_deadline()
                .unwrap_or(u64::MAX)
                .min(now + APP_DRIVES_FOR.as_nanos() as u64);
            s.sleeping_until.store(until, Ordering::Release);
            let (_, wake_fd) = d.wait_fds();
            drop(d);
            if active {
                s.notify_activity();
            }
            let timeout = Duration::from_nanos(until.saturating_sub(now));
            woken = crate::driver::wait_on(&[], wake_fd, Some(timeout)).is_ok_and(|(_, w)| w);
            s.sleeping_until.store(0, Ordering::Release);
            continue;
        }
        if active {
            last_activity = Instant::now();
            drop(d);
            s.notify_activity();
            continue;
        }
        // A timer due within the spin window is cheaper to spin for than to sleep for.
        let timer_soon = |spin: Duration| {
            d.next_deadline()
                .is_some_and(|t| t.saturating_sub(d.now()) < spin.as_nanos() as u64)
        };
        // Sleeping on readability would strand datagrams queued behind a full send buffer.
        let spin = d.tx_pending()
            || match mode {
                WaitMode::Polling => true,
                WaitMode::Blocking { spin } => last_activity.elapsed() < spin || timer_soon(spin),
            };
        if spin {
            drop(d);
            std::hint::spin_loop();
            std::thread::yield_now();
            continue;
        }
        // Sleep without holding the lock, so verbs proceed; a verb that moves the next
        // timer earlier than `sleeping_until` wakes us.
        let deadline = d.next_deadline();
        s.sleeping_until
            .store(deadline.unwrap_or(u64::MAX), Ordering::Release);
        d.flush_capture();
        let (fd, wake_fd) = d.wait_fds();
        let timeout = deadline.map(|t| Duration::from_nanos(t.saturating_sub(d.now())));
        drop(d);
        woken = crate::driver::wait_on(&fd, wake_fd, timeout).is_ok_and(|(_, w)| w);
        s.sleeping_until.store(0, Ordering::Release);
        s.notify_activity();
    }
}
