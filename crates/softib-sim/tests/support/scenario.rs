//! Running a scenario given as TOML text and finding its flows in the report: what the
//! scenario-level tests (flows, RD flows, management traffic, the report) all start from.

use softib_sim::report::run::run;
use softib_sim::report::summary::FlowSummary;
use softib_sim::report::Report;
use softib_sim::scenario::Scenario;

/// Parses `text` and runs it to the end; a scenario that does not parse or run fails the
/// test with the error.
pub fn run_text(text: &str) -> Report {
    let s = Scenario::parse(text).unwrap();
    run(&s, "test", &mut |_, _| {}).unwrap()
}

/// The flow called `name`; a missing one fails the test, listing the flows there are.
pub fn flow<'a>(r: &'a Report, name: &str) -> &'a FlowSummary {
    r.summary
        .flows
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no flow {name}: {:?}", r.summary.flows))
}
