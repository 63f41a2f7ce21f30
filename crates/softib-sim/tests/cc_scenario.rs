//! Congestion control from a scenario file: `scenarios/cc-victim.toml`'s
//! `[congestion_control]` table configures both the switches' Annex A10 marking and the
//! engine HCAs that run its `[[flow]]`s (their CCA, BECN answers), and the report carries
//! the loop's time series (CCTI per source, FECN/BECN per port) in `summary.json`,
//! `cc.csv` and two plots.

use softib_sim::report::cc::CC_HEADER;
use softib_sim::report::run::run;
use softib_sim::report::Report;
use softib_sim::scenario::Scenario;

const CC_VICTIM: &str = include_str!("../../../scenarios/cc-victim.toml");

fn run_text(text: &str) -> Report {
    let s = Scenario::parse(text).unwrap();
    run(&s, "cc-victim", &mut |_, _| {}).unwrap()
}

fn gbps(r: &Report, name: &str) -> f64 {
    r.summary
        .flows
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no flow {name}"))
        .gbps
}

#[test]
fn the_scenario_table_throttles_the_flows_and_the_report_shows_the_loop() {
    let on = run_text(CC_VICTIM);
    let off =
        run_text(&CC_VICTIM.replace("congestion_control = true", "congestion_control = false"));
    let (v_on, v_off) = (gbps(&on, "f1 write v->w"), gbps(&off, "f1 write v->w"));
    eprintln!("victim over the whole run: {v_on:.2} Gb/s with CC, {v_off:.2} without");
    // The [[flow]] engines are paced by their CCTs: the victim recovers (averaged over the
    // whole run, start-up included; the steady state is asserted in tests/cc_loop.rs).
    assert!(
        v_off < 10.0,
        "without CC the victim should collapse: {v_off:.2}"
    );
    assert!(
        v_on > 5.0 * v_off,
        "with CC {v_on:.2} Gb/s, without {v_off:.2}"
    );
    // The engines saw BECNs and were held back.
    let hot: Vec<_> = on
        .summary
        .transport
        .iter()
        .filter(|h| h.host.starts_with('h'))
        .collect();
    assert_eq!(hot.len(), 8);
    for h in &hot {
        assert!(h.becn_received > 0 && h.cc_throttled_us > 0.0, "{h:?}");
    }
    // The time series: every requester's CCTI, the root port's marks, the sources' BECNs.
    let cc = on.summary.congestion_control.as_ref().expect("CC series");
    assert!(off.summary.congestion_control.is_none());
    assert_eq!(cc.sources.len(), 9);
    assert!(cc.times_us.len() >= 290, "{} samples", cc.times_us.len());
    for s in &cc.sources {
        assert_eq!(s.ccti.len(), cc.times_us.len());
        if s.host.starts_with('h') {
            assert!(
                s.max_ccti > 8,
                "{} reached CCTI {} only",
                s.name,
                s.max_ccti
            );
        }
    }
    let root = cc.ports.iter().find(|p| p.port == "sw1:5").expect("root");
    assert!(root.fecn_marked.windows(2).all(|w| w[0] <= w[1]));
    assert!(*root.fecn_marked.last().unwrap() > 100);
    let d = cc.ports.iter().find(|p| p.port == "d:1").expect("d");
    // d's engine saw the root's marks (and those sw0's uplink put on h0..h3's packets), the
    // last few still on the wire at the end aside.
    let (got, marked) = (
        *d.fecn_received.last().unwrap(),
        *root.fecn_marked.last().unwrap(),
    );
    assert!(
        got + 32 >= marked,
        "d received {got} FECNs, the root marked {marked}"
    );
    // Written out.
    let dir = std::env::temp_dir().join(format!("softib-cc-scenario-{}", std::process::id()));
    let files = on.write(&dir).unwrap();
    for f in ["cc.csv", "ccti.svg", "fecn_becn.svg"] {
        assert!(files.iter().any(|p| p.ends_with(f)), "{f} not written");
    }
    let csv = std::fs::read_to_string(dir.join("cc.csv")).unwrap();
    assert!(csv.starts_with(CC_HEADER));
    assert!(csv.contains(",ccti,f1 write v->w,"));
    assert!(csv.contains(",fecn_marked,sw1:5,"));
    assert!(csv.contains(",becn_received,h0:1,"));
    let svg = std::fs::read_to_string(dir.join("ccti.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("CCTI"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `[congestion_control]` table of `scenarios/cc-victim.toml`.
fn cc_table() -> &'static str {
    let start = CC_VICTIM.find("[congestion_control]").unwrap();
    let end = CC_VICTIM[start..].find("[[flow]]").unwrap() + start;
    &CC_VICTIM[start..end]
}

#[test]
fn read_flows_are_paced_at_their_responders() {
    // h0 reads 64 KiB from each of h1..h8 at once: the READ responses are an 8:1 incast into
    // h0. A READ response is never acknowledged, so h0 answers FECN with CNPs (IBA Annex
    // A10) and the responders' CCAs pace the responses.
    let mut text = String::from(
        "seed = 3\nduration_us = 1000\n[fabric]\nlink_speed = \"EDR\"\n\
         [topology]\nkind = \"single-switch\"\nhosts = 9\nswitch_ports = 16\n",
    );
    for i in 1..=8 {
        text.push_str(&format!(
            "[[flow]]\nop = \"read\"\npattern = \"one-to-one\"\nsrc = \"h0\"\ndst = \"h{i}\"\n\
             size = 65536\ntx_depth = 8\n"
        ));
    }
    let on = run_text(&format!("{text}{}", cc_table()));
    let off = run_text(&text);
    let responders = |r: &Report| -> Vec<(u64, u64, f64)> {
        r.summary
            .transport
            .iter()
            .filter(|h| h.host != "h0")
            .map(|h| (h.fecn_received, h.cnps_received, h.cc_throttled_us))
            .collect()
    };
    let (r_on, r_off) = (responders(&on), responders(&off));
    eprintln!("responders (FECN, CNPs received, throttled us) with CC: {r_on:?}");
    assert_eq!(r_on.len(), 8);
    for &(_, cnps, throttled) in &r_on {
        assert!(cnps > 0 && throttled > 0.0, "{r_on:?}");
    }
    for &(_, cnps, throttled) in &r_off {
        assert!(cnps == 0 && throttled == 0.0, "{r_off:?}");
    }
    let h0 = on
        .summary
        .transport
        .iter()
        .find(|h| h.host == "h0")
        .unwrap();
    assert!(h0.fecn_received > 0, "{h0:?}");
    // The report traces the paced responders next to the requesters.
    let cc = on.summary.congestion_control.as_ref().unwrap();
    let paced: Vec<_> = cc
        .sources
        .iter()
        .filter(|s| s.role == "responder")
        .collect();
    assert_eq!(paced.len(), 8, "{:?}", cc.sources);
    assert!(paced
        .iter()
        .all(|s| s.max_ccti > 0 && s.name.ends_with("(responder)")));
    assert_eq!(
        cc.sources.iter().filter(|s| s.role == "requester").count(),
        8
    );
    assert!(cc.ports.iter().any(|p| p.port == "h0:1"));
}
