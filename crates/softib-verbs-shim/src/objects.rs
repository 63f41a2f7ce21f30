//! The objects behind the C handles: each embeds its verbs.h structure as its first field
//! (`repr(C)`), so the pointer the application holds is also a pointer to the object, and
//! carries what the shim needs (engine handles, the shared device).

use std::cell::UnsafeCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use softib_net::context::{Context, WaitMode};
use softib_net::driver::NetConfig;
use softib_transport::{AhHandle, CqHandle, DeviceConfig, PdHandle, QpType, SrqHandle};

use crate::abi::*;
use crate::abi_ex::*;
use crate::config::{Config, ConfigError};
use crate::events::{EventQueue, Registry};
use crate::view::facts::DeviceFacts;

/// The one device of the process (`ibv_get_device_list` lists only it).
#[repr(C)]
pub struct DeviceObj {
    /// What the application sees.
    pub dev: ibv_device,
    /// The environment it was built from.
    pub config: Config,
    /// What the verbs and the device view both show (`crate::view`).
    pub facts: DeviceFacts,
}

/// The device of this process, built from the environment on first use.
pub fn device() -> Result<&'static DeviceObj, &'static ConfigError> {
    static DEVICE: OnceLock<Result<&'static DeviceObj, ConfigError>> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            let config = Config::from_env()?;
            let mut dev = ibv_device {
                _ops: _ibv_device_ops {
                    _dummy1: 0,
                    _dummy2: 0,
                },
                node_type: IBV_NODE_CA,
                transport_type: IBV_TRANSPORT_IB,
                name: [0; 64],
                dev_name: [0; 64],
                dev_path: [0; 256],
                ibdev_path: [0; 256],
            };
            copy_cstr(&mut dev.name, &config.name);
            // As libibverbs fills them from sysfs: the uverbs device's name and directory
            // and the IB device's directory, all present in the device view.
            let facts = DeviceFacts::from_config(&config);
            copy_cstr(&mut dev.dev_name, &facts.uverbs);
            copy_cstr(&mut dev.dev_path, &facts.dev_path());
            copy_cstr(&mut dev.ibdev_path, &facts.ibdev_path());
            Ok(&*Box::leak(Box::new(DeviceObj { dev, config, facts })))
        })
        .as_ref()
        .map(|d| *d)
}

/// Copies `s` into a NUL-terminated C array (truncated to fit).
pub fn copy_cstr(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
    dst[n..].fill(0);
}

/// What every context of the process shares: the softib device (engine + UDP socket +
/// device thread), the event queues and the object registry. Opening the device twice in
/// one process (perftest and ibv_devinfo do) gives two contexts on this one device, since a
/// second socket could not bind the same address.
pub struct Shared {
    /// The softib device.
    pub net: Context,
    /// The configuration.
    pub config: Config,
    /// The engine's limits (for `ibv_query_device`).
    pub limits: DeviceConfig,
    /// Asynchronous events: (element address, `ibv_event_type`).
    pub async_events: EventQueue<(usize, u32)>,
    /// C objects by engine handle, for events.
    pub registry: Mutex<Registry>,
    /// Device memory allocated (at most `device_memory::MAX_DM_SIZE`).
    pub dm_used: AtomicUsize,
    /// XRC domains opened through a file: (device, inode) -> domain and open count.
    pub xrcd_files:
        Mutex<std::collections::HashMap<(u64, u64), (softib_transport::XrcdHandle, u32)>>,
    /// Set once the event thread runs.
    notifier: OnceLock<()>,
}

impl Drop for Shared {
    /// With `SOFTIB_DEBUG=1`, the device's non-zero counters go to stderr when the last
    /// context closes: the quickest way to see retransmissions, drops or RNR NAKs behind a
    /// slow or failing application.
    fn drop(&mut self) {
        if !self.config.debug {
            return;
        }
        let snap = self.net.counter_snapshot();
        let mut line = format!("softib: counters of {}:", self.config.name);
        for (k, v) in snap.device.iter().chain(&snap.driver) {
            if *v != 0 {
                line.push_str(&format!(" {k}={v}"));
            }
        }
        let odp = crate::process_memory::failed_copies();
        if odp != 0 {
            line.push_str(&format!(" odp_failed_copies={odp}"));
        }
        eprintln!("{line}");
    }
}

/// How long the notifier waits for an engine event before it checks whether the device
/// is still open.
const NOTIFIER_SLICE: Duration = Duration::from_millis(20);

/// Moves engine events to the queues applications wait on until the device closes (the
/// last strong reference to `Shared` goes away).
pub fn notifier_loop(shared: Weak<Shared>) {
    while let Some(s) = shared.upgrade() {
        if let Some(ev) = s.net.wait_event(NOTIFIER_SLICE) {
            crate::events::dispatch(&s.registry, &s.async_events, ev);
        }
    }
}

impl Shared {
    /// Starts the thread that moves engine events to the channels and the async queue, on
    /// the first completion channel or async event read: it wakes on every burst of device
    /// activity, which costs a polling application (perftest without `-e`) its receive rate
    /// for nothing.
    pub fn ensure_notifier(self: &Arc<Self>) -> Result<(), i32> {
        let mut result = Ok(());
        self.notifier.get_or_init(|| {
            let weak = Arc::downgrade(self);
            if let Err(e) = std::thread::Builder::new()
                .name("softib events".into())
                .spawn(move || notifier_loop(weak))
            {
                eprintln!("softib verbs shim: cannot start the event thread: {e}");
                result = Err(libc::EAGAIN);
            }
        });
        result
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("net", &self.net).finish()
    }
}

/// Why the device cannot be opened.
#[derive(Debug)]
pub struct OpenError {
    /// errno for the application.
    pub errno: i32,
    /// The message printed on stderr.
    pub message: String,
}

/// The device of the process while it is open.
static OPEN: Mutex<Weak<Shared>> = Mutex::new(Weak::new());

/// Writes out the open device's capture: run at process exit (a program that fails exits
/// without closing its device, and its capture is what shows why).
pub fn flush_open_capture() {
    let open = OPEN.lock().unwrap_or_else(|p| p.into_inner()).upgrade();
    if let Some(s) = open.filter(|s| s.net.opened_by_this_process()) {
        s.net.flush_capture();
    }
}

extern "C" fn flush_capture_atexit() {
    let _ = std::panic::catch_unwind(flush_open_capture);
}

/// Registers (once) a process-exit hook that completes the capture file.
fn flush_capture_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| crate::sys::at_exit(flush_capture_atexit));
}

/// The shared device of the process, opened on first use and closed when the last context
/// goes.
pub fn open_shared(config: &Config) -> Result<Arc<Shared>, OpenError> {
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = open.upgrade() {
        if s.net.opened_by_this_process() {
            return Ok(s);
        }
        // A forked child: the parent's device (no thread here) is not ours to use or to
        // close; the child opens its own, which shares the address (softib-net group.rs).
        std::mem::forget(s);
    }
    let bind = SocketAddr::new(config.addr, config.port);
    let mut nc = NetConfig::new(bind);
    nc.mtu = config.mtu;
    nc.pcap = config.pcap.clone();
    // rxe's limit: perftest sets the requester's max_rd_atomic to the peer's advertised
    // outstanding reads, so a stock perftest on rxe (128) would make a smaller limit fail
    // the peer's ibv_modify_qp.
    nc.engine.max_qp_rd_atom = 128;
    let mode = if config.polling {
        WaitMode::Polling
    } else {
        WaitMode::Blocking {
            spin: std::time::Duration::from_micros(config.spin_us),
        }
    };
    // Other processes may hold the address too: the device then shares it with them.
    let net = Context::open(nc, mode).map_err(|e| OpenError {
        errno: libc::ENODEV,
        message: format!(
            "softib verbs shim: cannot open {} on {bind}: {e} (set SOFTIB_ADDR to an address \
             of this host, e.g. 127.0.0.2)",
            config.name
        ),
    })?;
    let limits = net.with_engine(|e, _| e.config().clone());
    let async_events = EventQueue::new().map_err(|e| OpenError {
        errno: e.raw_os_error().unwrap_or(libc::EMFILE),
        message: format!("softib verbs shim: cannot create the async event fd: {e}"),
    })?;
    let shared = Arc::new(Shared {
        net,
        config: config.clone(),
        limits,
        async_events,
        registry: Mutex::new(Registry::default()),
        dm_used: AtomicUsize::new(0),
        xrcd_files: Mutex::new(Default::default()),
        notifier: OnceLock::new(),
    });
    *open = Arc::downgrade(&shared);
    // A forked child inherits the device's sockets: softib-net's fork handler replaces
    // them in the child (docs/design/net.md, "Several processes on one address").
    if config.pcap.is_some() {
        flush_capture_at_exit();
    }
    Ok(shared)
}

/// An open context: the `verbs_context` (whose last field is the `ibv_context` handed out).
#[repr(C)]
pub struct ContextObj {
    /// Extended-ops block, `sz`, then the `ibv_context`.
    pub vctx: verbs_context,
    /// The device.
    pub shared: Arc<Shared>,
    /// What `context->cmd_fd` refers to: `/dev/null`, since softib has no uverbs command
    /// file, but a real descriptor, so a program that duplicates or passes it on (to
    /// `ibv_import_device`, which then fails with EOPNOTSUPP) gets a valid fd, not EBADF.
    pub cmd_file: Option<std::fs::File>,
}

/// A protection domain, with the bounce region inline sends are staged in.
#[repr(C)]
pub struct PdObj {
    /// C view.
    pub pd: ibv_pd,
    /// Engine handle.
    pub handle: PdHandle,
    /// lkey of the PD's inline staging region (`max_inline_data` bytes, iova 0).
    pub bounce_lkey: std::sync::atomic::AtomicU32,
    /// For a parent domain (`ibv_alloc_parent_domain`): what it was built from.
    pub parent: Option<crate::domain::ParentDomain>,
    /// Parent domains built on this PD, or for a parent domain the QPs in it (it cannot
    /// be deallocated under them).
    pub children: std::sync::atomic::AtomicU32,
    /// The device.
    pub shared: Arc<Shared>,
}

/// A memory region.
#[repr(C)]
pub struct MrObj {
    /// C view.
    pub mr: ibv_mr,
    /// The device memory it is registered on (`ibv_reg_dm_mr`), else NULL.
    pub dm: *const DmObj,
    /// The `ibv_reg_mr` access flags (`ibv_rereg_mr` keeps what it does not change).
    pub access: u32,
    /// The region's first virtual address for its keys (`iova`).
    pub iova: u64,
    /// The device.
    pub shared: Arc<Shared>,
}

/// An XRC domain (`ibv_open_xrcd`).
#[repr(C)]
pub struct XrcdObj {
    /// C view (`struct ibv_xrcd`: its context).
    pub xrcd: *mut ibv_context,
    /// Engine handle.
    pub handle: softib_transport::XrcdHandle,
    /// The file it was opened through, as (device, inode); None for `fd` -1.
    pub file: Option<(u64, u64)>,
    /// The device.
    pub shared: Arc<Shared>,
}

/// A device-memory allocation (`ibv_alloc_dm`).
#[repr(C)]
pub struct DmObj {
    /// C view (its function pointers are the shim's copies).
    pub dm: ibv_dm,
    /// The memory.
    pub buf: crate::device_memory::DmBuffer,
    /// MRs registered on it (it cannot be freed under them).
    pub mrs: AtomicU32,
    /// The device.
    pub shared: Arc<Shared>,
}

/// A memory window.
#[repr(C)]
pub struct MwObj {
    /// C view (`rkey` is the window's current key as the application sees it).
    pub mw: ibv_mw,
    /// The key `ibv_alloc_mw` returned: names the window to the engine whatever the
    /// application did with `mw.rkey` (a failed bind leaves it ahead of the window's key).
    pub alloc_rkey: u32,
    /// The device.
    pub shared: Arc<Shared>,
}

/// A completion channel.
#[repr(C)]
pub struct ChannelObj {
    /// C view (its `fd` is the queue's eventfd); in an `UnsafeCell` because its `refcnt`
    /// changes while the application holds the pointer.
    pub ch: UnsafeCell<ibv_comp_channel>,
    /// CQs using the channel (mirrored into `ch.refcnt`).
    pub refcnt: AtomicI32,
    /// CQ addresses, one per completion event.
    pub queue: Arc<EventQueue<usize>>,
}

/// A completion queue. Every CQ carries the extended structure (`ibv_cq_ex` starts with
/// the fields of `ibv_cq`, so the classic handle is the same pointer, as
/// `ibv_cq_ex_to_cq` assumes); the polling functions are set only for `ibv_create_cq_ex`.
#[repr(C)]
pub struct CqObj {
    /// C view (`comp_events_completed`, `status` and `wr_id` change under the
    /// application's pointer).
    pub cq: UnsafeCell<ibv_cq_ex>,
    /// The extended-poll state (`None` for a classic CQ).
    pub ex: Option<crate::cq_ex::CqExState>,
    /// The channel given at creation (NULL: none).
    pub channel: *mut ibv_comp_channel,
    /// Engine handle.
    pub handle: CqHandle,
    /// The device.
    pub shared: Arc<Shared>,
}

/// A shared receive queue.
#[repr(C)]
pub struct SrqObj {
    /// C view.
    pub srq: ibv_srq,
    /// Engine handle.
    pub handle: SrqHandle,
    /// Its attributes as created / last modified.
    pub attr: Mutex<ibv_srq_attr>,
    /// The device.
    pub shared: Arc<Shared>,
}

/// A queue pair: libibverbs' `struct verbs_qp` first (the `ibv_qp` handle, and for
/// `ibv_create_qp_ex` the `ibv_qp_ex` builder functions around it).
#[repr(C)]
pub struct QpObj {
    /// C view (`state`, `wr_id` and `wr_flags` change under the application's pointer).
    pub qp: UnsafeCell<verbs_qp>,
    /// The WRs built between `ibv_wr_start` and `ibv_wr_complete`.
    pub batch: Mutex<crate::wr_batch::WrBatch>,
    /// `send_ops_flags` of `ibv_create_qp_ex` (0 for `ibv_create_qp`).
    pub send_ops: u64,
    /// The send staging region from a parent domain's allocator (None: the PD's).
    pub staging: Option<crate::domain::AllocatedStaging>,
    /// QP number.
    pub qpn: u32,
    /// The PD it was created in.
    pub pd: *mut ibv_pd,
    /// The creation attributes `ibv_query_qp` returns.
    pub init: InitCopy,
    /// Service.
    pub qp_type: QpType,
    /// Capacities granted at creation.
    pub cap: ibv_qp_cap,
    /// `sq_sig_all` at creation.
    pub sq_sig_all: bool,
    /// The device.
    pub shared: Arc<Shared>,
}

/// The pointers of `ibv_qp_init_attr` a QP was created with.
#[derive(Clone, Copy, Debug)]
pub struct InitCopy {
    /// qp_context.
    pub qp_context: *mut std::ffi::c_void,
    /// send_cq.
    pub send_cq: *mut ibv_cq,
    /// recv_cq.
    pub recv_cq: *mut ibv_cq,
    /// srq.
    pub srq: *mut ibv_srq,
}

/// An address handle.
#[repr(C)]
pub struct AhObj {
    /// C view.
    pub ah: ibv_ah,
    /// Engine handle.
    pub handle: AhHandle,
    /// The device.
    pub shared: Arc<Shared>,
}
