//! Set-up of an experiment's traffic on a built fabric: the applications of [`crate::apps`]
//! attached to the HCAs a scenario's plan names, and after the run the transport counters
//! of their engines for the report.

pub mod flows;

pub use self::flows::{
    atomic_counter, attach_flows, flow_qp_counters, transport_counters, FlowSetupError,
    WrapEndpoint,
};
