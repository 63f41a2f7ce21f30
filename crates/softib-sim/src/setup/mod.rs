//! Set-up of an experiment's traffic on a built fabric: the applications of [`crate::apps`]
//! attached to the HCAs a scenario's plan names, and after the run the transport counters
//! of their engines for the report.

pub mod counters;
pub mod flows;
mod host;

pub use self::counters::{atomic_counter, flow_buffers, flow_qp_counters, transport_counters};
pub use self::flows::{attach_flows, FlowSetupError, WrapEndpoint};
