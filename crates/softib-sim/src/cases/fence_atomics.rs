//! Case 11: what IBV_SEND_FENCE costs an atomic, and what it buys. A fenced work request
//! starts only once every earlier RDMA READ and atomic of its send queue has completed
//! (IBA 10.8.3.3, the fence indicator; softib's requester holds it in `can_start`). With
//! nothing outstanding a fence costs nothing; with READs or atomics outstanding the fenced
//! atomic leaves when their responses are back instead of right behind them, which costs one
//! more round trip of the path, whatever it is: tens of nanoseconds on a bare back-to-back
//! cable, a few hundred through a switch, a microsecond with real HCA latency. With
//! max_rd_atomic operations outstanding the unfenced atomic waits for a slot anyway, and the
//! fence costs little more. What it buys: an operation that uses what an earlier READ or
//! atomic brought back (a FetchAdd's ticket, a READ's data) sees the new bytes; without it
//! the requester gathers them before the response has landed.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome};
use crate::report::Report;
use softib_transport::harness::{Pair, QpOptions};
use softib_transport::{SendFlags, SendWr, Sge, WcStatus, WrOpcode};

/// The case.
pub const CASE: Case = Case {
    slug: "11-fence-atomics",
    title: "The cost of IBV_SEND_FENCE on atomics",
    runs: &[
        CaseRun {
            role: "back-to-back",
            label: "back-to-back",
            text: include_str!("../../../../scenarios/cases/11-fence-atomics/back-to-back.toml"),
        },
        CaseRun {
            role: "one-switch",
            label: "one switch",
            text: include_str!("../../../../scenarios/cases/11-fence-atomics/one-switch.toml"),
        },
        CaseRun {
            role: "hca-latency",
            label: "back-to-back, HCAs 0.5 us",
            text: include_str!("../../../../scenarios/cases/11-fence-atomics/hca-latency.toml"),
        },
    ],
    // 200 atomics per table take well under a second to simulate.
    quick: &[],
    evaluate,
};

/// The flow tables of every run, in order: (lead op, leads, fenced). Table 0 and 1 are the
/// atomic alone; then READ and atomic leads, 1, 4 and 16 of them, each without and with the
/// fence.
const TABLES: &[(&str, u32, bool)] = &[
    ("none", 0, false),
    ("none", 0, true),
    ("READ", 1, false),
    ("READ", 1, true),
    ("READ", 4, false),
    ("READ", 4, true),
    ("READ", 16, false),
    ("READ", 16, true),
    ("atomic", 1, false),
    ("atomic", 1, true),
    ("atomic", 4, false),
    ("atomic", 4, true),
    ("atomic", 16, false),
    ("atomic", 16, true),
];

/// The leads before which max_rd_atomic (16) already holds the unfenced atomic back.
const MAX_RD_ATOMIC: u32 = 16;

/// p50 latency of table `t`'s flow, nanoseconds.
fn p50_ns(r: &Report, t: usize) -> Result<f64, CaseError> {
    r.summary
        .flows
        .get(t)
        .map(|f| f.latency.p50_us * 1000.0)
        .ok_or_else(|| {
            CaseError::Missing(format!("{}: no flow table {t}", r.summary.scenario.name))
        })
}

/// The fence's cost with `lead` x `k` outstanding: fenced p50 minus unfenced p50, ns.
fn cost(r: &Report, lead: &str, k: u32) -> Result<f64, CaseError> {
    let i = TABLES
        .iter()
        .position(|&(l, n, f)| l == lead && n == k && !f)
        .ok_or_else(|| CaseError::Missing(format!("no table {lead} x{k}")))?;
    Ok(p50_ns(r, i + 1)? - p50_ns(r, i)?)
}

/// What a WRITE sourced from the local buffer of an earlier FetchAdd (posted right after
/// it) carries to the peer: the fetched value with `fence`, the buffer's old bytes without.
/// Returns (the value the WRITE carried, the value the FetchAdd fetched).
fn ticket_then_publish(fence: bool) -> (u64, u64) {
    let mut pair = Pair::new(11);
    let (a, b) = pair.connect(&QpOptions::default());
    // b: the ticket counter at 0, the published slot at 64. a: the fetched ticket at 0.
    pair.fill(1, &b, 0, &41u64.to_le_bytes());
    pair.fill(0, &a, 0, &0xdeadu64.to_le_bytes());
    let local = Sge {
        addr: a.addr,
        length: 8,
        lkey: a.keys.lkey,
    };
    let take = SendWr {
        wr_id: 1,
        opcode: WrOpcode::AtomicFetchAndAdd,
        sg_list: vec![local],
        flags: SendFlags::SIGNALED,
        remote_addr: b.addr,
        rkey: b.keys.rkey,
        compare_add: 1,
        ..SendWr::default()
    };
    let publish = SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaWrite,
        sg_list: vec![local],
        flags: if fence {
            SendFlags::SIGNALED | SendFlags::FENCE
        } else {
            SendFlags::SIGNALED
        },
        remote_addr: b.addr + 64,
        rkey: b.keys.rkey,
        ..SendWr::default()
    };
    let ok = pair.dev(0).post_send(0, a.qpn, &take).is_ok()
        && pair.dev(0).post_send(0, a.qpn, &publish).is_ok()
        && pair.drive(1_000_000_000)
        && pair
            .completions(0, &a)
            .iter()
            .all(|w| w.status == WcStatus::Success);
    let word = |v: Vec<u8>| u64::from_le_bytes(v.try_into().unwrap_or([0xff; 8]));
    if !ok {
        return (u64::MAX, u64::MAX);
    }
    (word(pair.read(1, &b, 64, 8)), word(pair.read(0, &a, 0, 8)))
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let reports = o.reports_in_order(&CASE)?;
    for (t, &(lead, k, fence)) in TABLES.iter().enumerate() {
        let what = match lead {
            "none" => "atomic alone".to_string(),
            _ => format!("{k} {lead}{} before it", if k > 1 { "s" } else { "" }),
        };
        let values = reports
            .iter()
            .map(|r| p50_ns(r, t).map(|v| format!("{v:.0}")))
            .collect::<Result<Vec<_>, _>>()?;
        e.row(
            format!(
                "{what}, {}: FetchAdd p50, ns",
                if fence { "fenced" } else { "no fence" }
            ),
            values,
        );
    }
    let mut costs = Vec::new();
    for lead in ["READ", "atomic"] {
        for k in [1u32, 4, 16] {
            let c = reports
                .iter()
                .map(|r| cost(r, lead, k))
                .collect::<Result<Vec<_>, _>>()?;
            e.row(
                format!(
                    "fence cost with {k} {lead}{} outstanding, ns",
                    if k > 1 { "s" } else { "" }
                ),
                c.iter().map(|v| format!("{v:.0}")).collect(),
            );
            costs.push((lead, k, c));
        }
    }
    e.row(
        "error completions",
        reports
            .iter()
            .map(|r| {
                r.summary
                    .flows
                    .iter()
                    .map(|f| f.error_completions)
                    .sum::<u64>()
                    .to_string()
            })
            .collect(),
    );

    let bare: Vec<f64> = reports
        .iter()
        .map(|r| p50_ns(r, 0))
        .collect::<Result<_, _>>()?;
    let alone: Vec<f64> = reports
        .iter()
        .map(|r| p50_ns(r, 1))
        .collect::<Result<_, _>>()?;
    let free = bare
        .iter()
        .zip(&alone)
        .all(|(b, f)| (f - b).abs() <= 0.02 * b);
    e.check(
        "with nothing outstanding the fence costs nothing (within 2%)",
        bare.iter()
            .zip(&alone)
            .zip(&e.columns)
            .map(|((b, f), c)| format!("{c}: {b:.0} vs {f:.0} ns"))
            .collect::<Vec<_>>()
            .join("; "),
        free,
    );
    // Below max_rd_atomic outstanding, the fence adds one round trip (the atomic alone).
    let mut rt = Vec::new();
    let mut round_trip = true;
    for (lead, k, c) in costs.iter().filter(|(_, k, _)| *k < MAX_RD_ATOMIC) {
        for (i, v) in c.iter().enumerate() {
            let r = v / bare[i];
            round_trip &= (0.8..=1.2).contains(&r);
            rt.push(format!("{k} {lead} {}: {r:.2}", e.columns[i]));
        }
    }
    e.check(
        "with 1 or 4 READs or atomics outstanding, the fence costs one round trip: 0.8-1.2x the atomic alone, in every run",
        rt.join(", "),
        round_trip,
    );
    let mut full = Vec::new();
    let mut less = true;
    for (lead, _, c) in costs.iter().filter(|(_, k, _)| *k == MAX_RD_ATOMIC) {
        // Back-to-back, 16 responses take longer to arrive than the bare round trip, so
        // the slot frees in time and the fence still costs a round trip: judged where the
        // round trip dominates (through the switch, with HCA latency).
        for (i, v) in c.iter().enumerate().skip(1) {
            less &= *v > 0.0 && *v < 0.8 * bare[i];
            full.push(format!("{lead} {}: {v:.0} ns", e.columns[i]));
        }
    }
    e.check(
        "with 16 outstanding (max_rd_atomic), the unfenced atomic already waits for a slot: where the round trip dominates (switch, HCA latency) the fence costs more than nothing and less than 0.8 round trip",
        full.join(", "),
        less,
    );
    let c1 = |i: usize| costs[0].2[i];
    e.check(
        "the cost is the path's round trip, not a constant: through a switch at least 5x back-to-back, with HCA latency at least 20x",
        format!(
            "1 READ outstanding: {:.0} ns back-to-back, {:.0} ns through a switch, {:.0} ns with HCA latency",
            c1(0),
            c1(1),
            c1(2)
        ),
        c1(1) >= 5.0 * c1(0) && c1(2) >= 20.0 * c1(0),
    );
    let (stale, fetched_unfenced) = ticket_then_publish(false);
    let (published, fetched) = ticket_then_publish(true);
    e.check(
        "what the fence buys (engine): a WRITE of a FetchAdd's result posted right behind it carries the buffer's old bytes without the fence, the fetched value with it",
        format!(
            "no fence: wrote {stale:#x} (fetched {fetched_unfenced}); fence: wrote {published} (fetched {fetched})"
        ),
        stale == 0xdead && fetched_unfenced == 41 && published == 41 && fetched == 41,
    );
    let bad: u64 = reports
        .iter()
        .flat_map(|r| r.summary.flows.iter().map(|f| f.error_completions))
        .sum();
    e.check("no error completion in any run", format!("{bad}"), bad == 0);
    Ok(e)
}
