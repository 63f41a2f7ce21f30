//! The bundled scenarios that tests elsewhere do not run end to end, run here on a shorter
//! span (debug builds are slow): the 648-host fat-tree all-to-all.

use softib_sim::report::run::run;
use softib_sim::scenario::overrides::apply_to_text;
use softib_sim::scenario::Scenario;

const A2A_648: &str = include_str!("../../../scenarios/fat-tree-648-all-to-all.toml");

#[test]
fn the_648_host_all_to_all_delivers_every_shift_without_waiting_in_the_switches() {
    // The first 40 shifts of the exchange (40 packet times of 330 ns, ~13.3 us).
    const SHIFTS: u64 = 40;
    let sets = [
        ("stream[0].packets".to_string(), SHIFTS.to_string()),
        ("duration_us".to_string(), "20".to_string()),
    ];
    let text = apply_to_text(A2A_648, &sets).unwrap();
    let s = Scenario::parse(&text).unwrap();
    let r = run(&s, "a2a", &mut |_, _| {}).unwrap();
    let sum = &r.summary;
    assert_eq!(sum.flows.len(), 648);
    assert!(
        sum.flows
            .iter()
            .all(|f| f.packets == SHIFTS && f.messages == SHIFTS),
        "every source's {SHIFTS} packets arrive"
    );
    assert_eq!((sum.totals.errors, sum.totals.drops), (0, 0));
    let hosts: Vec<_> = sum
        .ports
        .iter()
        .filter(|p| p.port.starts_with('h'))
        .collect();
    assert_eq!(hosts.len(), 648);
    assert!(hosts
        .iter()
        .all(|p| p.port_rcv_pkts == SHIFTS && p.port_xmit_pkts == SHIFTS));
    // The shift order never sends two packets to one output at once: no switch port waits.
    let switch_wait: u64 = sum
        .ports
        .iter()
        .filter(|p| !p.port.starts_with('h'))
        .map(|p| p.port_xmit_wait)
        .sum();
    assert_eq!(switch_wait, 0);
    // Every packet between leaves (18 hosts each) crosses exactly one spine.
    let crossing = (0..648u64)
        .flat_map(|i| (1..=SHIFTS).map(move |j| (i, (i + j) % 648)))
        .filter(|(a, b)| a / 18 != b / 18)
        .count() as u64;
    let via_spines: u64 = sum
        .ports
        .iter()
        .filter(|p| p.port.starts_with("spine"))
        .map(|p| p.port_xmit_pkts)
        .sum();
    assert_eq!(via_spines, crossing);
    assert!(crossing > 648 * SHIFTS / 2, "most shifts leave the leaf");
}

const FT_11664: &str = include_str!("../../../scenarios/large/fat-tree-11664-permutation.toml");

#[test]
fn the_11664_host_scale_scenario_is_a_36_port_three_level_fat_tree_run_for_1_ms() {
    // Building and running it takes minutes (docs/design/fabric.md, "Parallel runs"); here
    // only what it is: 11,664 hosts, 1,620 switches, every host a flow, 1 ms.
    let s = Scenario::parse(FT_11664).unwrap();
    let t = s.topology().unwrap();
    assert_eq!(t.hcas().count(), 11_664);
    assert_eq!(t.switches().count(), 1_620);
    assert_eq!(s.duration_us, Some(1000));
    assert_eq!(s.flow_plan(0).unwrap().len(), 11_664);
}
