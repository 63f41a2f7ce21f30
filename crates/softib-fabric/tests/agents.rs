//! The node agents (IBA vol. 1 §14.2, §16.1) on a small fat tree: directed routes walk the
//! cables and fill the return path, LID routes follow the forwarding tables, and bad or
//! unsupported requests get the status or the drop an IB node gives them.

use softib_fabric::agents::delivery::{deliver, Dropped, PERMISSIVE_LID};
use softib_fabric::agents::mad::{status, Mad};
use softib_fabric::agents::{node_guid, port_guid, Subnet};
use softib_fabric::fabric::{Fabric, FabricConfig};
use softib_fabric::topology::{NodeKind, PortAddr, Topology};

fn subnet() -> Subnet {
    let f = Fabric::new(Topology::fat_tree_2(4, 8).unwrap(), FabricConfig::default()).unwrap();
    Subnet::snapshot(&f)
}

fn dr_get(attr: u16, modifier: u32, path: &[u8]) -> Mad {
    let mut m = [0u8; 256];
    m[0] = 1;
    m[1] = 0x81;
    m[2] = 1;
    m[3] = 0x01;
    m[7] = path.len() as u8;
    m[8..16].copy_from_slice(&0x1234_5678_9abc_def0u64.to_be_bytes());
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    m[20..24].copy_from_slice(&modifier.to_be_bytes());
    m[32..36].copy_from_slice(&[0xff; 4]);
    for (i, p) in path.iter().enumerate() {
        m[128 + 1 + i] = *p;
    }
    m
}

fn lid_get(class: u8, attr: u16, modifier: u32) -> Mad {
    let mut m = [0u8; 256];
    m[0] = 1;
    m[1] = class;
    m[2] = 1;
    m[3] = 0x01;
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    m[20..24].copy_from_slice(&modifier.to_be_bytes());
    m
}

fn st(m: &Mad) -> u16 {
    u16::from_be_bytes([m[4], m[5]])
}

const H0: PortAddr = PortAddr { node: 0, port: 1 };

#[test]
fn directed_route_reaches_the_switch_two_hops_away_and_fills_the_return_path() {
    let mut s = subnet();
    // h0 -> leaf0 (port 1 of h0), leaf0 port 3 -> a spine.
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &dr_get(0x0011, 0, &[1, 3])).unwrap();
    assert_eq!(r[3], 0x81, "GetResp");
    assert_eq!(st(&r), 0x8000, "D bit, status 0");
    assert_eq!(
        &r[8..16],
        &0x1234_5678_9abc_def0u64.to_be_bytes(),
        "same TID"
    );
    let leaf0 = s.find_node("leaf0").unwrap();
    let spine = s.nodes[leaf0].ports[3].peer.unwrap();
    assert_eq!(r[128 + 64 + 1], 1, "leaf0 received it on port 1");
    assert_eq!(r[128 + 64 + 2], spine.port, "the spine's receiving port");
    let info = &r[64..104];
    assert_eq!(info[2], 2, "switch");
    assert_eq!(info[3], 4, "4 ports");
    assert_eq!(&info[12..20], &node_guid(spine.node).to_be_bytes());
    assert_eq!(info[36], spine.port, "LocalPortNum");
}

#[test]
fn directed_route_through_an_uncabled_port_or_a_ca_gets_no_response() {
    let mut s = subnet();
    // Port 9 does not exist on a 4-port switch.
    assert_eq!(
        deliver(&mut s, H0, PERMISSIVE_LID, &dr_get(0x0011, 0, &[1, 9])),
        Err(Dropped::NoRoute)
    );
    // Back down to h1 then onwards: a CA does not forward.
    let leaf0 = s.find_node("leaf0").unwrap();
    let to_h1 = (1..=4)
        .find(|&p| s.nodes[leaf0].ports[p].peer.map(|q| q.node) == Some(1))
        .unwrap();
    assert!(deliver(
        &mut s,
        H0,
        PERMISSIVE_LID,
        &dr_get(0x0011, 0, &[1, to_h1 as u8])
    )
    .is_ok());
    assert_eq!(
        deliver(
            &mut s,
            H0,
            PERMISSIVE_LID,
            &dr_get(0x0011, 0, &[1, to_h1 as u8, 1])
        ),
        Err(Dropped::NoRoute)
    );
}

#[test]
fn malformed_requests_are_dropped_and_responses_ignored() {
    let mut s = subnet();
    let mut m = dr_get(0x0011, 0, &[]);
    m[0] = 2;
    assert!(matches!(
        deliver(&mut s, H0, PERMISSIVE_LID, &m),
        Err(Dropped::Malformed(_))
    ));
    let mut m = dr_get(0x0011, 0, &[]);
    m[6] = 3;
    assert!(matches!(
        deliver(&mut s, H0, PERMISSIVE_LID, &m),
        Err(Dropped::Malformed(_))
    ));
    let mut m = dr_get(0x0011, 0, &[]);
    m[3] = 0x81;
    assert_eq!(
        deliver(&mut s, H0, PERMISSIVE_LID, &m),
        Err(Dropped::Response)
    );
    let m = lid_get(0x03, 0x0001, 0);
    assert_eq!(deliver(&mut s, H0, 1, &m), Err(Dropped::NoAgent(0x03)));
}

#[test]
fn unsupported_attributes_and_methods_get_their_status() {
    let mut s = subnet();
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &dr_get(0xFF90, 0, &[])).unwrap();
    assert_eq!(st(&r), 0x8000 | status::METHOD_ATTR_UNSUPPORTED);
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &dr_get(0x0012, 0, &[])).unwrap();
    assert_eq!(
        st(&r) & 0x7fff,
        status::METHOD_ATTR_UNSUPPORTED,
        "SwitchInfo of a CA"
    );
    let mut m = dr_get(0x0015, 9, &[1]);
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &m).unwrap();
    assert_eq!(st(&r) & 0x7fff, status::INVALID_FIELD, "PortInfo of port 9");
    m[3] = 0x05;
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &m).unwrap();
    assert_eq!(st(&r) & 0x7fff, status::METHOD_UNSUPPORTED);
}

#[test]
fn lid_routed_smp_and_pma_reach_the_owner_of_the_lid() {
    let mut s = subnet();
    let far = s.nodes.iter().position(|n| n.name == "h7").unwrap();
    let lid = s.nodes[far].ports[1].lid;
    let r = deliver(&mut s, H0, lid, &lid_get(0x01, 0x0011, 0)).unwrap();
    assert_eq!(st(&r), 0);
    assert_eq!(
        &r[64 + 20..64 + 28],
        &port_guid(far, NodeKind::Hca, 1).to_be_bytes()
    );
    // PortInfo through LID routing: its own LID, 4x EDR active.
    let r = deliver(&mut s, H0, lid, &lid_get(0x01, 0x0015, 1)).unwrap();
    assert_eq!(u16::from_be_bytes([r[64 + 16], r[64 + 17]]), lid);
    assert_eq!(r[64 + 31], 2, "LinkWidthActive 4x");
    assert_eq!(r[64 + 62] >> 4, 2, "LinkSpeedExtActive EDR");
    assert_eq!(r[64 + 32] & 0x0f, 4, "Active");
    // PMA PortCounters with PortSelect 1; a LID no one owns gets nothing.
    let mut m = lid_get(0x04, 0x0012, 0);
    m[65] = 1;
    let r = deliver(&mut s, H0, lid, &m).unwrap();
    assert_eq!(st(&r), 0);
    assert_eq!(r[65], 1);
    assert_eq!(deliver(&mut s, H0, 999, &m), Err(Dropped::NoRoute));
    // PortSelect 7 on a one-port CA: invalid field.
    m[65] = 7;
    let r = deliver(&mut s, H0, lid, &m).unwrap();
    assert_eq!(st(&r), status::INVALID_FIELD);
}

#[test]
fn lft_blocks_are_the_fabric_routing() {
    let mut s = subnet();
    let leaf0 = s.find_node("leaf0").unwrap();
    let lid = s.nodes[leaf0].ports[0].lid;
    let r = deliver(&mut s, H0, lid, &lid_get(0x01, 0x0019, 0)).unwrap();
    assert_eq!(st(&r), 0);
    for (d, port) in s.nodes[leaf0].lft.iter().enumerate().take(64) {
        assert_eq!(r[64 + d], *port, "DLID {d}");
    }
    let r = deliver(&mut s, H0, lid, &lid_get(0x01, 0x0019, 1000)).unwrap();
    assert_eq!(st(&r), status::INVALID_FIELD);
}

#[test]
fn an_sm_sets_lids_states_and_forwarding_and_reads_them_back() {
    let mut s = subnet();
    let leaf0 = s.find_node("leaf0").unwrap();
    // PortInfo Set of h0's port (Active): Armed is no move from Active (IBA §7.2), so the
    // Set is refused whole and the LID stays.
    let mut m = dr_get(0x0015, 1, &[]);
    m[3] = 0x02;
    m[64 + 16..64 + 18].copy_from_slice(&100u16.to_be_bytes());
    m[64 + 18..64 + 20].copy_from_slice(&100u16.to_be_bytes());
    m[64 + 32] = 3;
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &m).unwrap();
    assert_eq!(st(&r), 0x8000 | status::INVALID_FIELD);
    assert_eq!(s.nodes[0].ports[1].lid, 1);
    // Down: the link retrains and the port is back in Init, with the new LID.
    m[64 + 32] = 1;
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &m).unwrap();
    assert_eq!(st(&r), 0x8000);
    assert_eq!(u16::from_be_bytes([r[64 + 16], r[64 + 17]]), 100);
    assert_eq!(r[64 + 32] & 0x0f, 2, "Init");
    // Active straight from Init is refused; Armed, then Active, are taken.
    m[64 + 32] = 4;
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &m).unwrap();
    assert_eq!(st(&r), 0x8000 | status::INVALID_FIELD);
    for state in [3, 4] {
        m[64 + 32] = state;
        let r = deliver(&mut s, H0, PERMISSIVE_LID, &m).unwrap();
        assert_eq!(st(&r), 0x8000);
        assert_eq!(r[64 + 32] & 0x0f, state);
    }
    // LFT Set of block 1 on leaf0, then the new LID is routed through it.
    let mut m = dr_get(0x0019, 1, &[1]);
    m[3] = 0x02;
    for k in 0..64 {
        m[64 + k] = 0xff;
    }
    m[64 + 100 - 64] = 1;
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &m).unwrap();
    assert_eq!(st(&r), 0x8000);
    assert_eq!(s.nodes[leaf0].lft[100], 1);
    let h1 = PortAddr { node: 1, port: 1 };
    let r = deliver(&mut s, h1, 100, &lid_get(0x01, 0x0011, 0)).unwrap();
    assert_eq!(
        &r[64 + 12..64 + 20],
        &node_guid(0).to_be_bytes(),
        "LID 100 is h0 now"
    );
    // NodeInfo is read-only.
    let mut m = dr_get(0x0011, 0, &[]);
    m[3] = 0x02;
    let r = deliver(&mut s, H0, PERMISSIVE_LID, &m).unwrap();
    assert_eq!(st(&r) & 0x7fff, status::METHOD_ATTR_UNSUPPORTED);
}

/// A fabric powered up for an external SM: Init, no LIDs, no routes; what the SM writes
/// (here: LIDs by directed route, then Armed and Active) is what `program` hands the data
/// plane, which takes it only before it starts and never with more VLs than it was built
/// with.
#[test]
fn an_unconfigured_fabric_is_brought_up_and_its_program_taken_before_the_run() {
    let topo = Topology::single_switch(2, 4).unwrap();
    let mut fabric = Fabric::new(topo, FabricConfig::default()).unwrap();
    let mut s = Subnet::unconfigured(&fabric);
    assert!(!s.all_active());
    assert_eq!(
        s.inactive_ports(8).len(),
        4,
        "two CA ports, two switch ports"
    );
    let h0 = PortAddr {
        node: s.find_node("h0").unwrap(),
        port: 1,
    };
    // No LID answers yet.
    assert_eq!(
        deliver(&mut s, h0, 1, &lid_get(0x01, 0x0011, 0)).unwrap_err(),
        Dropped::NoRoute
    );
    let set = |path: &[u8], modifier: u32, lid: u16, state: u8| {
        let mut m = dr_get(0x0015, modifier, path);
        m[3] = 0x02;
        m[64 + 16..64 + 18].copy_from_slice(&lid.to_be_bytes());
        m[64 + 32] = state;
        m
    };
    // h0 = LID 1, the switch (port 0) = LID 3, h1 = LID 2; then every port Armed, Active.
    let sw = s.find_node("sw0").unwrap();
    for state in [0, 3, 4] {
        for (path, modifier, lid) in [
            (&[][..], 0, 1),
            (&[1][..], 0, 3),
            (&[1][..], 1, 0),
            (&[1][..], 2, 0),
            (&[1, 2][..], 0, 2),
        ] {
            let r = deliver(&mut s, h0, PERMISSIVE_LID, &set(path, modifier, lid, state)).unwrap();
            assert_eq!(
                st(&r),
                0x8000,
                "path {path:?} port {modifier} state {state}"
            );
        }
    }
    assert!(s.all_active(), "{:?}", s.inactive_ports(8));
    assert_eq!(s.nodes[sw].ports[0].lid, 3);
    let mut prog = s.program();
    assert_eq!(prog.addressing.port_lid[h0.node][1], 1);
    // More VLs than the port was built with are refused.
    let mut too_many = prog.clone();
    too_many.op_vls[h0.node][1] = 8;
    assert!(fabric.program_subnet(&too_many).is_err());
    prog.lfts[sw] = vec![255, 1, 2, 0];
    fabric.program_subnet(&prog).unwrap();
    assert_eq!(fabric.lid("h1"), Some(2));
    assert_eq!(fabric.lft("sw0").unwrap(), &[255, 1, 2, 0]);
    fabric.run_until(1_000);
    assert!(
        fabric.program_subnet(&prog).is_err(),
        "refused once running"
    );
}

/// A congestion control MAD (class 0x21, version 2, IBA A10.4.1) with `data` at byte 64.
fn cc_mad(method: u8, attr: u16, modifier: u32, data: &[u8]) -> Mad {
    let mut m = lid_get(0x21, attr, modifier);
    m[2] = 2;
    m[3] = method;
    m[64..64 + data.len()].copy_from_slice(data);
    m
}

/// CC Sets (A10.4.3.6-9) change the node's settings, are answered with the new value, and
/// what they wrote is the congestion control the programmed data plane runs; refused Sets
/// change nothing.
#[test]
fn cc_sets_are_read_back_and_programmed_into_the_fabric() {
    let topo = Topology::fat_tree_2(4, 8).unwrap();
    let mut fabric = Fabric::new(topo, FabricConfig::default()).unwrap();
    let mut s = Subnet::snapshot(&fabric);
    let h1 = s.find_node("h1").unwrap();
    let leaf = s.find_node("leaf0").unwrap();
    let (h1_lid, leaf_lid) = (s.nodes[h1].ports[1].lid, s.nodes[leaf].ports[0].lid);
    assert!(fabric.ca_congestion_control_of("h1").is_none(), "power-on");

    // CACongestionSetting: per SL, Control_Map SL 0 only, timer 150, increase 2, trigger 3.
    let mut ca = [0u8; 12];
    ca[0..2].copy_from_slice(&1u16.to_be_bytes());
    ca[2..4].copy_from_slice(&1u16.to_be_bytes());
    ca[4..6].copy_from_slice(&150u16.to_be_bytes());
    ca[6] = 2;
    ca[7] = 3;
    let r = deliver(&mut s, H0, h1_lid, &cc_mad(2, 0x16, 0, &ca)).unwrap();
    assert_eq!((st(&r), r[3]), (0, 0x81));
    assert_eq!(&r[64..76], &ca, "answered with the new value");
    // CongestionControlTable block 0: CCTI_Limit 1, entries 0:0 and 1:10.
    let mut cct = [0u8; 8];
    cct[0..2].copy_from_slice(&1u16.to_be_bytes());
    cct[6..8].copy_from_slice(&((1u16 << 14) | 10).to_be_bytes());
    assert_eq!(
        st(&deliver(&mut s, H0, h1_lid, &cc_mad(2, 0x17, 0, &cct)).unwrap()),
        0
    );
    // Refused: block 2, CCTI_Limit 128, a CA setting on a switch, a read-only attribute,
    // class version 1.
    let mut big = cct;
    big[0..2].copy_from_slice(&128u16.to_be_bytes());
    for (dlid, m, want) in [
        (h1_lid, cc_mad(2, 0x17, 2, &cct), status::INVALID_FIELD),
        (h1_lid, cc_mad(2, 0x17, 0, &big), status::INVALID_FIELD),
        (
            leaf_lid,
            cc_mad(2, 0x16, 0, &ca),
            status::METHOD_ATTR_UNSUPPORTED,
        ),
        (
            h1_lid,
            cc_mad(2, 0x12, 0, &[]),
            status::METHOD_ATTR_UNSUPPORTED,
        ),
        (
            h1_lid,
            cc_mad(2, 0x13, 0, &[]),
            status::METHOD_ATTR_UNSUPPORTED,
        ),
    ] {
        assert_eq!(st(&deliver(&mut s, H0, dlid, &m).unwrap()), want);
    }
    let mut v1 = cc_mad(1, 0x11, 0, &[]);
    v1[2] = 1;
    assert_eq!(
        st(&deliver(&mut s, H0, h1_lid, &v1).unwrap()),
        status::BAD_VERSION
    );
    let r = deliver(&mut s, H0, h1_lid, &cc_mad(1, 0x17, 0, &[])).unwrap();
    assert_eq!(&r[64..72], &cct, "the refused table Set changed nothing");

    // SwitchCongestionSetting: Control_Map Threshold only, Threshold 12, Packet_Size 4.
    let mut sw = [0u8; 76];
    sw[0..4].copy_from_slice(&4u32.to_be_bytes());
    sw[68] = 12 << 4;
    sw[69] = 4;
    sw[74..76].copy_from_slice(&7u16.to_be_bytes()); // not in the Control_Map: ignored
    let r = deliver(&mut s, H0, leaf_lid, &cc_mad(2, 0x14, 0, &sw)).unwrap();
    assert_eq!((st(&r), r[64 + 68], r[64 + 69]), (0, 12 << 4, 4));
    assert_eq!(
        &r[64 + 74..64 + 76],
        &[0, 0],
        "Marking_Rate kept its power-on 0"
    );
    // SwitchPortCongestionSetting block 0: port 3 valid, Threshold 5.
    let mut ports = [0u8; 16];
    ports[12] = 0x80 | 5;
    let r = deliver(&mut s, H0, leaf_lid, &cc_mad(2, 0x15, 0, &ports)).unwrap();
    assert_eq!((st(&r), r[64 + 12]), (0, 0x85));
    assert_eq!(
        st(&deliver(&mut s, H0, leaf_lid, &cc_mad(2, 0x15, 1, &ports)).unwrap()),
        status::INVALID_FIELD,
        "an 8-port switch has one block"
    );

    // The program carries them into the data plane.
    fabric.program_subnet(&s.program()).unwrap();
    let cc = fabric
        .ca_congestion_control_of("h1")
        .expect("h1 reacts to BECNs");
    let e = cc.ca.config.entries[0];
    assert_eq!(
        (e.ccti_timer, e.ccti_increase, e.trigger_threshold),
        (150, 2, 3)
    );
    assert_eq!(
        cc.ca.config.entries[1],
        Default::default(),
        "SL 1 not in the map"
    );
    assert_eq!(cc.ca.config.cct.ccti_limit(), 1);
    assert_eq!(cc.ca.config.cct.entry(1).multiplier, 10);
    assert!(
        fabric.ca_congestion_control_of("h2").is_none(),
        "h2 was not configured"
    );
    let settings = fabric.cc_settings();
    let softib_fabric::cc_state::NodeCc::Switch(sw) = &settings[leaf] else {
        panic!("leaf0 is a switch")
    };
    assert_eq!(sw.port_effective(3).threshold, 5);
    assert_eq!(sw.port_effective(1).threshold, 12);
    assert_eq!(sw.port_effective(1).packet_size, 4);
    assert_eq!(Subnet::snapshot(&fabric).cc_nodes, s.cc_nodes);
}
