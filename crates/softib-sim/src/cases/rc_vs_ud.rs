//! Case 9: RC vs UD at scale. A reliable connection is a QP pair per peer (IBA 9.7): a
//! server talking to N clients over RC keeps N QPs, each with its own send and receive
//! queues and its own connection to establish (a QP goes RESET -> INIT -> RTR -> RTS,
//! IBA 10.3, after the peers exchanged QPNs and PSNs, e.g. by CM REQ/REP/RTU, IBA 12.6).
//! Unreliable datagram needs one QP however many peers (IBA 9.8.3): each message names its
//! destination through an address handle. The engine state is measured
//! (`Device::footprint`), not estimated.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome};
use super::measure::{engine_state_rows, kib, transports};
use crate::report::Report;

/// The case.
pub const CASE: Case = Case {
    slug: "09-rc-vs-ud-scale",
    title: "RC vs UD at scale",
    runs: &[
        CaseRun {
            role: "problem",
            label: "RC, 2047 clients",
            text: include_str!("../../../../scenarios/cases/09-rc-vs-ud-scale/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "UD, 2047 clients",
            text: include_str!("../../../../scenarios/cases/09-rc-vs-ud-scale/fix.toml"),
        },
        CaseRun {
            role: "rc-srq",
            label: "RC + SRQ, 2047 clients",
            text: include_str!("../../../../scenarios/cases/09-rc-vs-ud-scale/rc-srq.toml"),
        },
        CaseRun {
            role: "rc-64",
            label: "RC, 63 clients",
            text: include_str!("../../../../scenarios/cases/09-rc-vs-ud-scale/rc-64.toml"),
        },
        CaseRun {
            role: "ud-64",
            label: "UD, 63 clients",
            text: include_str!("../../../../scenarios/cases/09-rc-vs-ud-scale/ud-64.toml"),
        },
    ],
    // 1023 clients instead of 2047 in the large runs: still 16 times the small ones.
    quick: &[
        ("problem:topology.hosts", "1024"),
        ("fix:topology.hosts", "1024"),
        ("rc-srq:topology.hosts", "1024"),
    ],
    evaluate,
};

/// QP state transitions to bring a QP to RTS (RESET -> INIT -> RTR -> RTS, IBA 10.3.1).
const TRANSITIONS_PER_QP: u64 = 3;
/// Messages each client sends (`iterations`).
const MESSAGES_PER_CLIENT: u64 = 8;

fn clients(r: &Report) -> u64 {
    r.summary.scenario.hosts as u64 - 1
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let reports = o.reports_in_order(&CASE)?;
    let server = transports(&reports, "h0")?;
    let client = transports(&reports, "h1")?;
    let n = reports.len();
    let row = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>();
    e.row("clients", row(&|i| clients(reports[i]).to_string()));
    e.row("server h0: QPs", row(&|i| server[i].qps.to_string()));
    engine_state_rows(&mut e, "server h0", &server, "QPs");
    e.row(
        "server h0: bytes per QP",
        row(&|i| (server[i].qp_state_bytes / server[i].qps.max(1)).to_string()),
    );
    e.row(
        "server h0: QP state transitions to set up (3 per QP)",
        row(&|i| (TRANSITIONS_PER_QP * server[i].qps).to_string()),
    );
    e.row(
        "server h0: per-client connection handshakes",
        row(&|i| {
            // A connected QP per client needs its own exchange of QPN and PSN; a UD QP
            // serves every client after publishing its QPN and Q_Key once.
            let connected = reports[i]
                .summary
                .flows
                .first()
                .is_some_and(|f| !f.name.contains("ud-"));
            if connected { server[i].qps } else { 0 }.to_string()
        }),
    );
    e.row(
        "client h1: QPs / address handles",
        row(&|i| format!("{} / {}", client[i].qps, client[i].address_handles)),
    );
    e.row(
        "client h1: engine state, KiB",
        row(&|i| kib(client[i].engine_state_bytes)),
    );
    e.row(
        "messages delivered / sent",
        row(&|i| {
            let got: u64 = reports[i].summary.flows.iter().map(|f| f.messages).sum();
            format!("{got} / {}", clients(reports[i]) * MESSAGES_PER_CLIENT)
        }),
    );

    let (rc, ud, srq, rc_s, ud_s) = (server[0], server[1], server[2], server[3], server[4]);
    let (nl, ns) = (clients(reports[0]), clients(reports[3]));
    let scale = nl as f64 / ns as f64;
    e.check(
        "RC: the server keeps one QP per client",
        format!("{} QPs for {nl} clients, {} for {ns}", rc.qps, rc_s.qps),
        rc.qps == nl && rc_s.qps == ns,
    );
    let growth = rc.engine_state_bytes as f64 / rc_s.engine_state_bytes as f64;
    e.check(
        "RC: the server's engine state grows with the clients (at least 0.8 x linearly)",
        format!(
            "x{growth:.1} for x{scale:.1} clients ({} -> {} KiB)",
            kib(rc_s.engine_state_bytes),
            kib(rc.engine_state_bytes)
        ),
        growth >= 0.8 * scale,
    );
    let flat = ud.engine_state_bytes as f64 / ud_s.engine_state_bytes as f64;
    e.check(
        "UD: one QP on the server and a flat engine state (within 5%) whatever the clients",
        format!(
            "{} / {} QPs, x{flat:.3} ({} -> {} KiB)",
            ud_s.qps,
            ud.qps,
            kib(ud_s.engine_state_bytes),
            kib(ud.engine_state_bytes)
        ),
        ud.qps == 1 && ud_s.qps == 1 && flat <= 1.05,
    );
    e.check(
        "at the large size RC holds at least 10x the server state of UD",
        format!(
            "{} vs {} KiB",
            kib(rc.engine_state_bytes),
            kib(ud.engine_state_bytes)
        ),
        rc.engine_state_bytes >= 10 * ud.engine_state_bytes,
    );
    let per_rc = rc.qp_state_bytes / rc.qps.max(1);
    let per_srq = srq.qp_state_bytes / srq.qps.max(1);
    e.check(
        "an SRQ shrinks each RC QP (its receive queue moves to the SRQ) but the QPs, and the state, still grow with the clients",
        format!(
            "{per_srq} vs {per_rc} bytes per QP; {} QPs, {} KiB",
            srq.qps,
            kib(srq.engine_state_bytes)
        ),
        per_srq < per_rc && srq.qps == nl && srq.engine_state_bytes >= 10 * ud.engine_state_bytes,
    );
    let all_delivered = reports.iter().all(|r| {
        let got: u64 = r.summary.flows.iter().map(|f| f.messages).sum();
        got == clients(r) * MESSAGES_PER_CLIENT
    });
    e.check(
        "both services deliver every message (the comparison is like for like)",
        format!("all runs complete: {all_delivered}"),
        all_delivered,
    );
    Ok(e)
}
