//! The device-wide congestion state the `Device` holds (in `Shared`): plain data, apart
//! from `engine.rs`, which takes the `Shared` it lives in.

use super::iba::CcaState;

/// Device-wide congestion state: the CCA state of each SL (`PortControl::Sl`).
#[derive(Clone, Debug, Default)]
pub(crate) struct DeviceCc {
    pub sl: [Option<CcaState>; 16],
}
