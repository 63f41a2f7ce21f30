//! Shared receive queues and address handles.

use std::sync::Arc;

use softib_transport::{AhAttr, AhHandle, GlobalRoute, SrqAttr, SrqHandle, VerbsError};

use super::{PostError, ProtectionDomain, RecvRequest};
use crate::oob::endpoint::Endpoint;
use crate::roce;

impl ProtectionDomain {
    /// Starts building a shared receive queue (default: 256 WRs of 4 SGEs, no limit).
    pub fn create_srq(&self) -> SrqBuilder {
        SrqBuilder::new(self.clone())
    }

    /// Starts building an address handle to the peer device of `remote` (for UD sends).
    pub fn create_ah(&self, remote: &crate::oob::endpoint::Endpoint) -> AhBuilder {
        AhBuilder::new(self.clone(), remote)
    }
}

/// Builds a [`SharedReceiveQueue`] (`ibv_create_srq`). Defaults: 256 WRs of 4 SGEs, no
/// limit event.
#[derive(Debug)]
pub struct SrqBuilder {
    pd: ProtectionDomain,
    attr: SrqAttr,
}

impl SrqBuilder {
    pub(crate) fn new(pd: ProtectionDomain) -> SrqBuilder {
        SrqBuilder {
            pd,
            attr: SrqAttr {
                max_wr: 256,
                max_sge: 4,
                srq_limit: 0,
            },
        }
    }

    /// Queue depth.
    pub fn set_max_wr(mut self, n: u32) -> Self {
        self.attr.max_wr = n;
        self
    }

    /// SGEs per receive WR.
    pub fn set_max_sge(mut self, n: u32) -> Self {
        self.attr.max_sge = n;
        self
    }

    /// Raises `SrqLimitReached` (through `Context::poll_event`) when fewer WRs than this
    /// remain posted (0: never).
    pub fn set_srq_limit(mut self, n: u32) -> Self {
        self.attr.srq_limit = n;
        self
    }

    /// Creates the SRQ.
    pub fn build(self) -> Result<SharedReceiveQueue, VerbsError> {
        let handle = self.pd.context().create_srq(self.pd.handle(), self.attr)?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd: self.pd,
                handle,
            }),
        })
    }
}

#[derive(Debug)]
struct SrqInner {
    pd: ProtectionDomain,
    handle: SrqHandle,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if crate::region_guard::guard_held() {
            return; // see `region_guard::guard_held`
        }
        let _ = self
            .pd
            .context()
            .with_driver(|d| d.engine_mut().destroy_srq(self.handle));
    }
}

/// A shared receive queue (`ibv_srq`). Cloning gives another handle to the same queue.
#[derive(Clone, Debug)]
pub struct SharedReceiveQueue {
    inner: Arc<SrqInner>,
}

impl SharedReceiveQueue {
    /// The engine's handle.
    pub fn handle(&self) -> SrqHandle {
        self.inner.handle
    }

    /// Posts a batch of receive WRs in order (`ibv_post_srq_recv`).
    pub fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> Result<(), PostError> {
        let srq = self.inner.handle;
        self.inner.pd.context().with_driver(|d| {
            for (i, wr) in wrs.iter().enumerate() {
                d.engine_mut()
                    .post_srq_recv(srq, &wr.wr)
                    .map_err(|source| PostError {
                        posted: i,
                        index: i,
                        source,
                    })?;
            }
            Ok(())
        })
    }

    /// Arms (or disarms, with 0) the limit event (`ibv_modify_srq`).
    pub fn set_limit(&self, srq_limit: u32) -> Result<(), VerbsError> {
        self.inner
            .pd
            .context()
            .modify_srq(self.inner.handle, srq_limit)
    }
}

/// Builds an [`AddressHandle`] to a peer device (`ibv_create_ah`). Defaults: hop limit 64,
/// traffic class 0, flow label 0, SL 0.
#[derive(Debug)]
pub struct AhBuilder {
    pd: ProtectionDomain,
    attr: AhAttr,
    udp: Option<std::net::SocketAddr>,
}

impl AhBuilder {
    pub(crate) fn new(pd: ProtectionDomain, remote: &Endpoint) -> AhBuilder {
        AhBuilder {
            pd,
            attr: AhAttr {
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                grh: Some(GlobalRoute {
                    dgid: remote.gid.octets(),
                    flow_label: 0,
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                }),
            },
            udp: remote.udp,
        }
    }

    fn grh(&mut self) -> &mut GlobalRoute {
        self.attr.grh.get_or_insert_with(GlobalRoute::default)
    }

    /// Traffic class (DSCP << 2) of the packets sent with this handle.
    pub fn set_traffic_class(mut self, tc: u8) -> Self {
        self.grh().traffic_class = tc;
        self
    }

    /// IP TTL / hop limit.
    pub fn set_hop_limit(mut self, hops: u8) -> Self {
        self.grh().hop_limit = hops;
        self
    }

    /// IPv6 flow label (20 bits).
    pub fn set_flow_label(mut self, label: u32) -> Self {
        self.grh().flow_label = label;
        self
    }

    /// Service level.
    pub fn set_sl(mut self, sl: u8) -> Self {
        self.attr.sl = sl;
        self
    }

    /// Creates the handle; the peer's UDP port (from its endpoint) is remembered.
    pub fn build(self) -> Result<AddressHandle, VerbsError> {
        let ctx = self.pd.context();
        let (pd, attr, udp) = (self.pd.handle(), self.attr, self.udp);
        let handle = ctx.with_driver(|d| {
            if let (Some(udp), Some(grh)) = (udp, attr.grh) {
                let ip = roce::ip_from_gid(grh.dgid);
                if udp.ip() == ip {
                    d.set_peer_port(ip, udp.port());
                }
            }
            d.engine_mut().create_ah(pd, attr)
        })?;
        Ok(AddressHandle {
            inner: Arc::new(AhInner {
                pd: self.pd,
                handle,
            }),
        })
    }
}

#[derive(Debug)]
struct AhInner {
    pd: ProtectionDomain,
    handle: AhHandle,
}

impl Drop for AhInner {
    fn drop(&mut self) {
        if crate::region_guard::guard_held() {
            return; // see `region_guard::guard_held`
        }
        let _ = self
            .pd
            .context()
            .with_driver(|d| d.engine_mut().destroy_ah(self.handle));
    }
}

/// An address handle (`ibv_ah`): where a UD send goes. Cloning gives another handle.
#[derive(Clone, Debug)]
pub struct AddressHandle {
    inner: Arc<AhInner>,
}

impl AddressHandle {
    /// The engine's handle.
    pub fn handle(&self) -> AhHandle {
        self.inner.handle
    }
}
