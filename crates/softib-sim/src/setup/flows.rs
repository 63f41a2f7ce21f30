//! Set-up of `[[flow]]` traffic: a device per host, the QPs of every pair, connected as
//! perftest's out-of-band exchange would, and the hosts attached to the fabric as engine
//! HCAs running [`crate::apps::flow::FlowHost`]. Each host's part is [`super::host`].
//!
//! RD flows: before the first pair of a flow table between two hosts, both hosts create
//! the table's `eecs` EE contexts towards each other and connect them (EEC k to EEC k);
//! every later pair of the table between those hosts, either way, reuses them.

use super::host::{lid, Host};
use crate::apps::flow::Ledger;
use crate::report::flows::SharedRecorder;
use crate::scenario::flows::{FlowPlan, Service};
use softib_fabric::engine_hca::EngineHca;
use softib_fabric::fabric::Fabric;
use softib_fabric::hca::Endpoint;
use softib_fabric::rng::SeedTree;
use softib_transport::VerbsError;
use std::collections::BTreeMap;

/// Why flows could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up flow {flow} ({name}): {reason}")]
pub struct FlowSetupError {
    /// Flow tag.
    pub flow: u32,
    /// Flow name.
    pub name: String,
    /// What the engine refused.
    pub reason: String,
}

/// Something that may wrap a host's endpoint before it is attached (e.g. a capture).
pub type WrapEndpoint<'a> = dyn FnMut(&str, Box<dyn Endpoint>) -> Box<dyn Endpoint> + 'a;

/// Creates a device per host of `plans`, the QPs of every pair, connects them and attaches
/// the hosts to `fabric` (each endpoint passed through `wrap`, e.g. to capture it). Returns
/// the hosts, for [`super::transport_counters`]. Messages go into `recorder`, except the
/// unreliable SENDs counted where they arrive: those go into `ledger`, whose
/// [`crate::apps::flow::UnreliableLog::settle`] records them after the run.
///
/// The order of the verbs calls is part of the result (QPNs, keys and addresses are handed
/// out in call order): hosts are created in the order the plans first name them, and each
/// pair is set up responder first, then requester, then the responder's connection.
pub fn attach_flows(
    fabric: &mut Fabric,
    plans: &[FlowPlan],
    recorder: &SharedRecorder,
    ledger: &Ledger,
    seed: u64,
    wrap: &mut WrapEndpoint<'_>,
) -> Result<Vec<String>, FlowSetupError> {
    let seeds = SeedTree::new(seed);
    let cq_depth = cq_depths(plans);
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    for p in plans {
        for h in [&p.src, &p.dst] {
            if !hosts.contains_key(h) {
                let host = Host::new(fabric, h, cq_depth[h.as_str()], &seeds, recorder, ledger)
                    .map_err(|e| setup_error(p, e.to_string()))?;
                hosts.insert(h.clone(), host);
            }
        }
    }
    check_ud_send_depths(&mut hosts, plans)?;
    plan_rd(&mut hosts, plans)?;
    // Receivers by flow tag, to resolve ring gates: index in their host's receivers.
    let mut receiver_of: BTreeMap<u32, usize> = BTreeMap::new();
    for p in plans {
        let verr = |e: VerbsError| setup_error(p, e.to_string());
        recorder.borrow_mut().define(p.flow, p.info.clone());
        let (ls, ld) = (lid(fabric, &p.src), lid(fabric, &p.dst));
        if p.rd.is_some() {
            connect_eecs(&mut hosts, p, (ls, ld)).map_err(verr)?;
        }
        let responder = hosts.get_mut(&p.dst).expect("created above");
        let served = responder.serve(p, &mut receiver_of).map_err(verr)?;
        let requester = hosts.get_mut(&p.src).expect("created above");
        let me = requester.request(p, &served, ld).map_err(verr)?;
        let responder = hosts.get_mut(&p.dst).expect("created above");
        responder
            .connect_served(p, &served, me.qpn, ls)
            .map_err(verr)?;
    }
    resolve_ring_gates(&mut hosts, plans, &receiver_of);
    let names: Vec<String> = hosts.keys().cloned().collect();
    for (name, h) in hosts {
        fabric
            .attach(
                &name,
                wrap(&name, Box::new(EngineHca::new(h.dev, Box::new(h.app)))),
            )
            .map_err(|e| FlowSetupError {
                flow: 0,
                name: name.clone(),
                reason: e.to_string(),
            })?;
    }
    Ok(names)
}

/// A [`FlowSetupError`] for the pair `p`.
fn setup_error(p: &FlowPlan, reason: String) -> FlowSetupError {
    FlowSetupError {
        flow: p.flow,
        name: p.info.name.clone(),
        reason,
    }
}

/// Completions each host's CQ may have to hold at once: every send and receive WR of its
/// QPs (it is polled after every engine interaction, so far fewer in practice). A receive
/// queue shared by a table's flows (an SRQ, or the one UD QP of the table on the
/// responder) counts once, not once per flow.
fn cq_depths(plans: &[FlowPlan]) -> BTreeMap<&str, u64> {
    let mut cq_depth: BTreeMap<&str, u64> = BTreeMap::new();
    let mut shared_rq: std::collections::BTreeSet<(&str, usize, u32)> = Default::default();
    for p in plans {
        *cq_depth.entry(&p.src).or_default() += p.tx_depth as u64;
        let dst = cq_depth.entry(&p.dst).or_default();
        if let Some(r) = p.recv {
            // RD: the table's RD QP q receives for every peer's QP q.
            let shared = r.srq || p.service == Service::Ud || p.rd.is_some();
            let q = p.rd.map_or(u32::MAX, |rd| rd.qp);
            if !shared || shared_rq.insert((p.dst.as_str(), p.table, q)) {
                *dst += r.depth as u64;
            }
        }
    }
    cq_depth
}

/// Adds up the send windows of each requester's UD QP per table (one UD QP carries all of
/// the host's flows of the table), refusing one its device cannot hold.
fn check_ud_send_depths(
    hosts: &mut BTreeMap<String, Host>,
    plans: &[FlowPlan],
) -> Result<(), FlowSetupError> {
    for p in plans.iter().filter(|p| p.service == Service::Ud) {
        let host = hosts.get_mut(&p.src).expect("created above");
        let max = host.dev.config().max_qp_wr;
        let d = host.ud_send_depth.entry(p.table).or_insert(0);
        *d += p.tx_depth;
        if *d > max {
            // One UD QP carries all of the host's flows of the table: their windows add up
            // in its send queue.
            return Err(FlowSetupError {
                flow: p.flow,
                name: p.info.name.clone(),
                reason: format!(
                    "{}'s UD QP for flow table {} would need more than {max} send WRs in flight (tx_depth x destinations): lower tx_depth",
                    p.src, p.table
                ),
            });
        }
    }
    Ok(())
}

/// RD: which RD QPs receive (and how deep), and how many messages each EEC may hold (the
/// windows of the flows from its host over it), refusing one the device cannot hold.
fn plan_rd(hosts: &mut BTreeMap<String, Host>, plans: &[FlowPlan]) -> Result<(), FlowSetupError> {
    for p in plans {
        let Some(rd) = p.rd else { continue };
        if p.src == p.dst {
            return Err(setup_error(
                p,
                "an RD flow needs two hosts: EE contexts connect two channel adapters".into(),
            ));
        }
        if let Some(r) = p.recv {
            let dst = hosts.get_mut(&p.dst).expect("created above");
            dst.rd_receives.insert((p.table, rd.qp), r.depth);
        }
        let src = hosts.get_mut(&p.src).expect("created above");
        let max = src.dev.config().max_qp_wr;
        let d = src
            .eec_send_depth
            .entry((p.table, p.dst.clone(), rd.eec()))
            .or_insert(0);
        *d += p.tx_depth;
        if *d > max {
            return Err(setup_error(
                p,
                format!(
                    "{}'s EE context {} to {} for flow table {} would need more than {max} messages queued (tx_depth x the RD QPs sharing it): lower tx_depth or raise eecs",
                    p.src,
                    rd.eec(),
                    p.dst,
                    p.table
                ),
            ));
        }
    }
    Ok(())
}

/// The EE contexts of `p`'s table between its two hosts (at LIDs `ls`, `ld`): created on
/// both (responder first, as a pair's QPs are) and connected, unless an earlier pair of
/// the table between them, either way, already did.
fn connect_eecs(
    hosts: &mut BTreeMap<String, Host>,
    p: &FlowPlan,
    (ls, ld): (u16, u16),
) -> Result<(), VerbsError> {
    let n = p.rd.expect("an RD flow").eecs;
    let key = (p.table, p.dst.clone());
    if hosts[&p.src].eecs_to.contains_key(&key) {
        return Ok(());
    }
    let dst_eecs = hosts
        .get_mut(&p.dst)
        .expect("created above")
        .create_eecs(p.table, &p.src, n)?;
    let src = hosts.get_mut(&p.src).expect("created above");
    let src_eecs = src.create_eecs(p.table, &p.dst, n)?;
    src.bring_up_eecs(p.table, &p.dst, &dst_eecs, ld, &p.qp)?;
    hosts
        .get_mut(&p.dst)
        .expect("created above")
        .bring_up_eecs(p.table, &p.src, &src_eecs, ls, &p.qp)
}

/// Ring gates: the receiver of the gating flow lives on this flow's requester host.
fn resolve_ring_gates(
    hosts: &mut BTreeMap<String, Host>,
    plans: &[FlowPlan],
    receiver_of: &BTreeMap<u32, usize>,
) {
    for p in plans {
        if let Some(g) = p.gate {
            let host = hosts.get_mut(&p.src).expect("created above");
            let r = receiver_of[&g];
            if let Some(i) = host.app.requesters.iter().position(|o| o.flow == p.flow) {
                host.app.requesters[i].gate = Some(r);
                host.app.receivers[r].gates = Some(i);
            }
        }
    }
}
