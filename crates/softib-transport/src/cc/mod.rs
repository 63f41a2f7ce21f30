//! Congestion control: the source's reaction (IBA Annex A10 CCA or DCQCN), the
//! destination's notification (BECN in ACKs, CNPs) and per-QP pacing. Each mechanism is a
//! pure module over `Nanos`; `engine.rs` is the glue the `Device` calls at three places
//! (packet received, packet transmitted, pacing timer expired). See docs/design/engine.md,
//! "Congestion control".

pub mod dcqcn;
mod device_state;
mod engine;
pub mod iba;
pub mod np;
pub mod opensm;
pub mod pacer;
mod qp_state;

pub use dcqcn::{DcqcnConfig, DcqcnState};
pub use iba::{
    CaCongestionEntry, CcConfigError, CcaState, Cct, CctEntry, IbaCcConfig, PortControl,
};
pub use opensm::{parse_cct, parse_opensm_ca, OpensmCa, OpensmError};

pub(crate) use device_state::DeviceCc;
pub(crate) use engine::sl_ccti;
pub(crate) use qp_state::QpCc;

use crate::time::Nanos;

/// The source-side algorithm of a device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CcAlgorithm {
    /// No reaction to BECN/CNP; no pacing.
    #[default]
    None,
    /// The InfiniBand CCA (IBA Annex A10), per QP or per SL.
    Iba(IbaCcConfig),
    /// DCQCN (the RoCEv2 practice), per QP.
    Dcqcn(DcqcnConfig),
}

/// Congestion control of one device (part of `DeviceConfig`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CcConfig {
    /// What the source does with BECNs and CNPs.
    pub algorithm: CcAlgorithm,
    /// Whether the destination answers FECN / ECN CE with BECN in ACKs and CNPs.
    pub notify: bool,
    /// Minimum microseconds between two CNPs of one QP (ConnectX `min_time_between_cnps`;
    /// the DCQCN paper's N = 50 us). 0 = one CNP per marked packet.
    pub min_time_between_cnps: u32,
    /// The port's data rate in Mb/s: the line rate of DCQCN and the basis of the IBA
    /// "packet time". Default 100000 (4x EDR).
    pub link_rate_mbps: u64,
    /// Bytes the driver adds to every transport packet on the wire (headers below the BTH,
    /// ICRC, VCRC / FCS), counted in packet times and DCQCN gaps. Default 14: native IB
    /// LRH 8 + ICRC 4 + VCRC 2.
    pub wire_overhead: u32,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            algorithm: CcAlgorithm::None,
            notify: false,
            min_time_between_cnps: 50,
            link_rate_mbps: 100_000,
            wire_overhead: 14,
        }
    }
}

impl CcConfig {
    /// Checks the settings a driver or CLI took from its user; the error names the field.
    pub fn validate(&self) -> Result<(), CcConfigError> {
        if self.link_rate_mbps == 0 {
            return Err(CcConfigError::OutOfRange {
                field: "link_rate_mbps",
                value: 0,
                reason: "the link rate must be at least 1 Mb/s",
            });
        }
        if let CcAlgorithm::Dcqcn(d) = &self.algorithm {
            d.validate(self.link_rate_mbps)?;
        }
        Ok(())
    }
}

/// A snapshot of a QP's congestion state (`Device::cc_status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CcStatus {
    /// IBA CCA: the CCTI that paces this QP (its own, or its SL's).
    pub ccti: Option<u16>,
    /// IBA CCA: the CCTI is at or above the SL's Trigger_Threshold (and that is non-zero).
    pub above_trigger: bool,
    /// DCQCN: the current rate Rc in bit/s, once a CNP created the rate limiter.
    pub rate_bps: Option<u64>,
    /// DCQCN: alpha in units of 2^-20.
    pub alpha: Option<u32>,
    /// The QP may not send paced packets before this time.
    pub paced_until: Option<Nanos>,
}
