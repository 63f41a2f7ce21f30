//! Unreliable SEND flows complete their work requests when the packets leave, with nothing
//! coming back: the host must keep polling as its packets go out, or a flow with few WRs in
//! flight stalls after its second window (it did: 2 of 8 messages with tx_depth 1).

use softib_sim::report::run::run;
use softib_sim::scenario::Scenario;

#[test]
fn a_ud_flow_with_one_wr_in_flight_sends_all_its_iterations() {
    for (service, depth) in [("ud", 1), ("ud", 2), ("uc", 1)] {
        let s = Scenario::parse(&format!(
            "duration_us = 100\n[topology]\nkind = \"back-to-back\"\n[[flow]]\nop = \"send\"\nservice = \"{service}\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 256\ntx_depth = {depth}\niterations = 8\n"
        ))
        .unwrap();
        let r = run(&s, "ud", &mut |_, _| {}).unwrap();
        let f = &r.summary.flows[0];
        assert_eq!(f.messages, 8, "{service} tx_depth {depth}: {f:?}");
    }
}
