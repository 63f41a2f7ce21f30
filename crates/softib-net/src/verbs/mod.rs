//! The verbs API as rust-ibverbs users know it: owned objects, builders with defaults,
//! owned memory so that posting is safe.
//!
//! ```no_run
//! use softib_net::driver::NetConfig;
//! use softib_net::verbs::{Hca, SendRequest};
//! use softib_transport::QpType;
//!
//! let hca = Hca::open(NetConfig::new("127.0.0.1:0".parse().unwrap()))?;
//! let pd = hca.alloc_pd();
//! let cq = hca.create_cq().build()?;
//! let mr = pd.register(vec![0u8; 4096])?;
//! let prepared = pd.create_qp(&cq, &cq, QpType::Rc).set_max_send_wr(64).build()?;
//! let mine = prepared.endpoint(&[mr.remote()]);
//! # let theirs = mine.clone();
//! // ... exchange `mine` for the peer's `theirs` (serde, or `prepared.exchange`) ...
//! let qp = prepared.handshake(&theirs)?;
//! mr.write()[..5].copy_from_slice(b"hello");
//! qp.post_send(&[SendRequest::send(1, mr.slice(0..5))])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Objects hold what they depend on (a QP its CQs and PD, a region its PD, everything the
//! device), so they can be dropped in any order; dropping one destroys it in the device.
//! Memory: [`ProtectionDomain::register`] takes ownership of a buffer (`Vec<u8>`,
//! `Box<[u8]>`, an array...), so the device can never touch freed memory, and work requests
//! name sub-ranges of registered regions ([`MemoryRegion::slice`]) whose lifetime ends with
//! the region. The application reads and writes the bytes through short-lived guards
//! ([`MemoryRegion::read`] / [`MemoryRegion::write`]); [`ProtectionDomain::register_raw`]
//! registers foreign memory under an `unsafe` contract. Completions are polled
//! ([`CompletionQueue::poll`]), waited for ([`CompletionQueue::wait`]) or announced on a
//! [`CompletionChannel`] whose descriptor fits an epoll/mio/tokio loop.
//!
//! This layer sits on [`Context`], the handle-based API (PD/CQ handles, QP numbers), which
//! stays available through [`Hca::context`] for what the objects do not cover.

mod cm;
mod cq;
pub(crate) mod mr;
mod post;
mod qp;
mod srq_ah;

use std::net::SocketAddr;
use std::sync::Arc;

use softib_transport::{Mtu, PdHandle};

pub use crate::channel::CompletionChannel;
pub use crate::context::{ConnectOptions, Context, WaitMode};
use crate::driver::{NetConfig, NetError};
pub use crate::rd::{Eec, PreparedEec};
pub use cm::{CmApiError, CmConnection, CmListener, ConnectRequest};
pub use cq::{CompletionQueue, CqBuilder};
pub use mr::{Buffer, LocalSlice, MemoryRegion, MrRead, MrWrite, RawMemoryRegion, RemoteSlice};
pub use post::{PostError, RecvRequest};
pub use qp::{PreparedQueuePair, QueuePair, QueuePairBuilder, SendRequest};
pub use srq_ah::{AddressHandle, AhBuilder, SharedReceiveQueue, SrqBuilder};

/// An open device (host channel adapter): a cheap, cloneable handle to a [`Context`].
#[derive(Clone, Debug)]
pub struct Hca {
    ctx: Arc<Context>,
}

impl Hca {
    /// Opens a device on `config.bind` with the default (blocking) wait mode.
    pub fn open(config: NetConfig) -> Result<Hca, NetError> {
        Hca::open_with(config, WaitMode::default())
    }

    /// Opens a device with the given wait mode.
    pub fn open_with(config: NetConfig, mode: WaitMode) -> Result<Hca, NetError> {
        Ok(Hca::from_context(Context::open(config, mode)?))
    }

    /// Wraps an open context.
    pub fn from_context(ctx: Context) -> Hca {
        Hca { ctx: Arc::new(ctx) }
    }

    /// The handle-based API of the same device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> ProtectionDomain {
        let handle = self.ctx.alloc_pd();
        ProtectionDomain {
            inner: Arc::new(PdInner {
                hca: self.clone(),
                handle,
            }),
        }
    }

    /// Creates a completion channel (`ibv_create_comp_channel`).
    pub fn create_comp_channel(&self) -> std::io::Result<CompletionChannel> {
        CompletionChannel::new()
    }

    /// The device's UDP address.
    pub fn local_addr(&self) -> SocketAddr {
        self.ctx.local_addr()
    }

    /// The device's GID.
    pub fn gid(&self) -> [u8; 16] {
        self.ctx.gid()
    }

    /// The device's largest path MTU.
    pub fn mtu(&self) -> Mtu {
        self.ctx.mtu()
    }
}

#[derive(Debug)]
struct PdInner {
    hca: Hca,
    handle: PdHandle,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if crate::region_guard::guard_held() {
            return; // see `region_guard::guard_held`
        }
        // Everything registered in it holds this PD, so nothing is left; an object created
        // in it through the handle API keeps it alive in the device instead.
        let _ = self
            .hca
            .ctx
            .with_driver(|d| d.engine_mut().dealloc_pd(self.handle));
    }
}

/// A protection domain (`ibv_pd`): memory regions, QPs, SRQs and address handles are
/// created in one.
#[derive(Clone, Debug)]
pub struct ProtectionDomain {
    inner: Arc<PdInner>,
}

impl ProtectionDomain {
    /// The device.
    pub fn hca(&self) -> &Hca {
        &self.inner.hca
    }

    /// The handle-based API of the device.
    pub fn context(&self) -> &Context {
        &self.inner.hca.ctx
    }

    /// The engine's handle of this PD (for the [`Context`] API).
    pub fn handle(&self) -> PdHandle {
        self.inner.handle
    }
}
