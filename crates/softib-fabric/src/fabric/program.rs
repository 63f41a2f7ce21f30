//! A subnet manager's configuration taken into the data plane: the LIDs it assigned, the
//! forwarding tables, SL2VL and VL arbitration tables it wrote and the operational VLs it
//! enabled (`softib sim --serve` with an external SM: OpenSM programs the SMAs of a fabric
//! held at time 0, and these tables then carry the traffic). Only before the run starts:
//! a running fabric's tables would change under packets already routed.

use super::{BuildError, Fabric};
use crate::qos::Sl2Vl;
use crate::routing::{Addressing, LidOwner};
use crate::topology::{NodeKind, PortAddr};
use crate::vlarb::{VlArbConfig, VlArbiter};

/// What an SM configured, per node in topology order (see
/// [`crate::agents::Subnet::program`]).
#[derive(Clone, Debug)]
pub struct SubnetProgram {
    /// The LIDs the SM assigned.
    pub addressing: Addressing,
    /// Every switch's linear forwarding table (empty for CAs).
    pub lfts: Vec<Vec<u8>>,
    /// SL2VL tables of every node at `in * (ports + 1) + out` (a CA port `p` at `p`).
    pub sl2vl: Vec<Vec<Sl2Vl>>,
    /// VL arbitration of every port by number (index 0: a switch's port 0, unused).
    pub vlarb: Vec<Vec<VlArbConfig>>,
    /// OperationalVLs of every port by number.
    pub op_vls: Vec<Vec<u8>>,
    /// The congestion control settings of every node (IBA Annex A10.4.3).
    pub cc: Vec<crate::cc_state::NodeCc>,
}

impl Fabric {
    /// Takes `prog` into the data plane: HCA ports send from the LIDs the SM gave them,
    /// switches forward on its tables, outputs arbitrate and map SLs to VLs as it wrote.
    /// OperationalVLs may only shrink what the port was built with (its receive buffers
    /// exist for those VLs). Refused once the fabric has started.
    pub fn program_subnet(&mut self, prog: &SubnetProgram) -> Result<(), BuildError> {
        let bad = |reason: String| BuildError::Setting {
            key: "subnet manager",
            reason,
        };
        if self.started {
            return Err(bad(
                "the fabric is running; its tables are set before it starts".into(),
            ));
        }
        let nodes = self.topo.nodes.len();
        if prog.lfts.len() != nodes
            || prog.sl2vl.len() != nodes
            || prog.vlarb.len() != nodes
            || prog.op_vls.len() != nodes
            || prog.cc.len() != nodes
            || prog.addressing.port_lid.len() != nodes
        {
            return Err(bad(format!(
                "a program for {} nodes, not {nodes}",
                prog.lfts.len()
            )));
        }
        for (ni, node) in self.topo.nodes.iter().enumerate() {
            let np = node.ports as usize + 1;
            if prog.sl2vl[ni].len() != np * np
                || prog.vlarb[ni].len() != np
                || prog.op_vls[ni].len() != np
            {
                return Err(bad(format!(
                    "the tables of `{}` do not fit its ports",
                    node.name
                )));
            }
            for pn in 1..=node.ports {
                let gp = (self.node_first_port[ni] + pn as u32 - 1) as usize;
                let want = prog.op_vls[ni][pn as usize];
                if want == 0 || want > self.ports[gp].op_vls {
                    return Err(bad(format!(
                        "{}:{pn}: {want} operational VLs, the port has {}",
                        node.name, self.ports[gp].op_vls
                    )));
                }
            }
        }
        for (ni, node) in self.topo.nodes.iter().enumerate() {
            let np = node.ports as usize + 1;
            for pn in 1..=node.ports {
                let gp = (self.node_first_port[ni] + pn as u32 - 1) as usize;
                let p = &mut self.ports[gp];
                p.op_vls = prog.op_vls[ni][pn as usize];
                p.arb = VlArbiter::new(prog.vlarb[ni][pn as usize].clone());
                if node.kind == NodeKind::Hca {
                    p.sl2vl = prog.sl2vl[ni][pn as usize];
                    if let Some(h) = p.hca {
                        self.hcas[h as usize].lid =
                            prog.addressing.lid_of(PortAddr { node: ni, port: pn });
                    }
                }
            }
            if node.kind == NodeKind::Switch {
                let gp = self.node_first_port[ni] as usize;
                let Some(s) = self.ports.get(gp).and_then(|p| p.switch) else {
                    continue;
                };
                let sw = &mut self.switches[s as usize];
                sw.lft = prog.lfts[ni].clone();
                sw.sl2vl = prog.sl2vl[ni].clone();
                // Routing reads the pairs of external ports: the shortcut for a switch
                // whose pairs all share one table is judged on those.
                let first = sw.sl2vl[(np + 1).min(np * np - 1)];
                let uniform = (1..np).all(|i| (1..np).all(|o| sw.sl2vl[i * np + o] == first));
                sw.uniform_sl2vl = uniform.then_some(first);
                for pn in 1..=sw.nports {
                    if sw.out_vls[pn as usize] != 0 {
                        sw.out_vls[pn as usize] = prog.op_vls[ni][pn as usize];
                    }
                }
            }
        }
        self.addr = prog.addressing.clone();
        self.program_cc(&prog.cc);
        Ok(())
    }

    /// Takes the nodes' congestion control settings (what the SM wrote, A10.4.3) into the
    /// data plane: the switches mark as their ports' settings say (no marker when no port
    /// marks), and engine HCAs attached afterwards react to BECNs as their CA's setting
    /// says ([`Fabric::ca_congestion_control_of`]). The scenario's own `[congestion_control]`
    /// is replaced: with an external SM, CC is what the SM configured.
    fn program_cc(&mut self, cc: &[crate::cc_state::NodeCc]) {
        use crate::cc_state::NodeCc;
        let seeds = crate::rng::SeedTree::new(self.config.seed);
        self.marker = crate::cc_switch::A10Marker::for_ports(
            crate::cc_state::switch_port_settings(cc),
            self.config.rx_buffer_bytes,
            &seeds,
        )
        .map(|m| Box::new(m) as Box<dyn crate::congestion::CongestionMarker>);
        self.ca_cc = cc.iter().find_map(|n| match n {
            NodeCc::Ca(ca) if ca.active() => Some(ca.opensm()),
            _ => None,
        });
        self.cc_nodes = Some(cc.to_vec());
    }

    /// The owner of `lid` in the fabric's current addressing.
    pub fn lid_owner(&self, lid: u16) -> Option<LidOwner> {
        self.addr.owners.get(lid as usize).copied().flatten()
    }
}
