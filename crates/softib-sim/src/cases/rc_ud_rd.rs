//! Case 13: RC vs UD vs RD at scale, case 9's many-clients server with the fourth transport
//! service. Reliable Datagram (IBA 9.7) moves RC's reliability (PSNs, ACKs, timeouts,
//! retries) from the QP to an end-to-end context (EEC) between two channel adapters, which
//! any number of connectionless RD QPs of the node share: a server with N clients of P
//! processes holds P RD QPs and N EECs where RC holds N x P QPs, and unlike UD it loses
//! nothing a link drops. The price: an EEC has at most one message in progress (IBA 9.7.1),
//! so the messages of all the QPs sharing it go one at a time, each waiting for the ACK of
//! the one before. The engine state is measured (`Device::footprint`, EECs apart), the loss
//! is the links' bit errors, the throughput the time the same messages take.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome};
use super::measure::{engine_state_rows, gbps, kib, ratio, transports};
use crate::report::Report;

/// The case.
pub const CASE: Case = Case {
    slug: "13-rc-ud-rd-scale",
    title: "RC vs UD vs RD at scale",
    runs: &[
        CaseRun {
            role: "rc",
            label: "RC, 255 x 8 QPs",
            text: include_str!("../../../../scenarios/cases/13-rc-ud-rd-scale/rc.toml"),
        },
        CaseRun {
            role: "rd",
            label: "RD, 255 x 8 QPs, 1 EEC",
            text: include_str!("../../../../scenarios/cases/13-rc-ud-rd-scale/rd.toml"),
        },
        CaseRun {
            role: "ud",
            label: "UD, 255 clients",
            text: include_str!("../../../../scenarios/cases/13-rc-ud-rd-scale/ud.toml"),
        },
        CaseRun {
            role: "rc-bw",
            label: "RC, 8 QPs, 1 client",
            text: include_str!("../../../../scenarios/cases/13-rc-ud-rd-scale/rc-bw.toml"),
        },
        CaseRun {
            role: "rd-bw",
            label: "RD, 8 QPs on 1 EEC",
            text: include_str!("../../../../scenarios/cases/13-rc-ud-rd-scale/rd-bw.toml"),
        },
        CaseRun {
            role: "rd-bw-8eecs",
            label: "RD, 8 QPs on 8 EECs",
            text: include_str!("../../../../scenarios/cases/13-rc-ud-rd-scale/rd-bw-8eecs.toml"),
        },
    ],
    // 63 clients instead of 255 in the lossy runs; the throughput runs are small already.
    quick: &[
        ("rc:topology.hosts", "64"),
        ("rd:topology.hosts", "64"),
        ("ud:topology.hosts", "64"),
    ],
    evaluate,
};

/// Messages each client sends in the many-clients runs: 8 QPs x 8 (RC, RD) or one UD QP x 64.
const MESSAGES_PER_CLIENT: u64 = 64;
/// Processes (QPs) per client in the many-clients runs.
const QPS_PER_CLIENT: u64 = 8;
/// Messages of the throughput runs: 8 QPs x 250.
const BW_MESSAGES: u64 = 2000;
/// Runs 0..3 are the many-clients server; the rest the one-client throughput runs.
const SCALE_RUNS: usize = 3;

/// Clients of h0: every other host in the many-clients runs, h1 alone in the others.
fn clients(r: &Report, i: usize) -> u64 {
    if i < SCALE_RUNS {
        r.summary.scenario.hosts as u64 - 1
    } else {
        1
    }
}

fn sent(r: &Report, i: usize) -> u64 {
    if i < SCALE_RUNS {
        clients(r, i) * MESSAGES_PER_CLIENT
    } else {
        BW_MESSAGES
    }
}

fn delivered(r: &Report) -> u64 {
    r.summary.flows.iter().map(|f| f.messages).sum()
}

/// When the last message was delivered, microseconds.
fn last_us(r: &Report) -> f64 {
    r.summary
        .flows
        .iter()
        .map(|f| f.last_us)
        .fold(0.0, f64::max)
}

/// Payload Gb/s from the start to the last delivery.
fn goodput(r: &Report) -> f64 {
    let bytes: u64 = r.summary.flows.iter().map(|f| f.payload_bytes).sum();
    bytes as f64 * 8.0 / (last_us(r).max(1e-9) * 1000.0)
}

fn retransmitted(r: &Report) -> u64 {
    r.summary
        .transport
        .iter()
        .map(|t| t.retransmitted_packets)
        .sum()
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
    e.row("clients", row(&|i| clients(reports[i], i).to_string()));
    e.row("server h0: QPs", row(&|i| server[i].qps.to_string()));
    e.row("server h0: EECs", row(&|i| server[i].eecs.to_string()));
    engine_state_rows(&mut e, "server h0", &server, "QPs and EECs");
    e.row(
        "server h0: of which EECs, KiB",
        row(&|i| kib(server[i].eec_state_bytes)),
    );
    e.row(
        "client h1: QPs / EECs",
        row(&|i| format!("{} / {}", client[i].qps, client[i].eecs)),
    );
    e.row(
        "client h1: engine state, KiB",
        row(&|i| kib(client[i].engine_state_bytes)),
    );
    e.row(
        "packets the links dropped (bit errors)",
        row(&|i| reports[i].summary.totals.drops.to_string()),
    );
    e.row(
        "packets retransmitted",
        row(&|i| retransmitted(reports[i]).to_string()),
    );
    e.row(
        "messages delivered / sent",
        row(&|i| format!("{} / {}", delivered(reports[i]), sent(reports[i], i))),
    );
    e.row(
        "last delivery, us",
        row(&|i| format!("{:.1}", last_us(reports[i]))),
    );
    e.row(
        "payload to the last delivery, Gb/s",
        row(&|i| gbps(goodput(reports[i]))),
    );

    let (rc, rd, ud) = (server[0], server[1], server[2]);
    let nl = clients(reports[0], 0);
    e.check(
        "RC: the server keeps one QP per client process",
        format!("{} QPs for {nl} clients x {QPS_PER_CLIENT}", rc.qps),
        rc.qps == nl * QPS_PER_CLIENT && rc.eecs == 0,
    );
    e.check(
        "RD: the server keeps one RD QP per process slot and one EEC per client; a client one EEC for its 8 QPs",
        format!(
            "server {} QPs + {} EECs for {} clients; client {} QPs + {} EEC",
            rd.qps,
            rd.eecs,
            clients(reports[1], 1),
            client[1].qps,
            client[1].eecs
        ),
        rd.qps == QPS_PER_CLIENT
            && rd.eecs == clients(reports[1], 1)
            && client[1].qps == QPS_PER_CLIENT
            && client[1].eecs == 1,
    );
    e.check(
        "RD: the server's engine state is at most a quarter of RC's (8 QPs per client share one EEC)",
        format!(
            "{} vs {} KiB (x{})",
            kib(rd.engine_state_bytes),
            kib(rc.engine_state_bytes),
            ratio(rd.engine_state_bytes as f64 / rc.engine_state_bytes.max(1) as f64)
        ),
        4 * rd.engine_state_bytes <= rc.engine_state_bytes,
    );
    e.check(
        "UD: one QP on the server, and less state than RD",
        format!(
            "{} QP, {} vs {} KiB",
            ud.qps,
            kib(ud.engine_state_bytes),
            kib(rd.engine_state_bytes)
        ),
        ud.qps == 1 && ud.eecs == 0 && ud.engine_state_bytes < rd.engine_state_bytes,
    );
    let drops: Vec<u64> = (0..SCALE_RUNS)
        .map(|i| reports[i].summary.totals.drops)
        .collect();
    let full = |i: usize| delivered(reports[i]) == sent(reports[i], i);
    let ud_got = delivered(reports[2]);
    e.check(
        "under the same loss (every lossy run's links dropped packets) RC and RD deliver every message, UD does not",
        format!(
            "dropped {drops:?}; RC {} / {}, RD {} / {}, UD {ud_got} / {}",
            delivered(reports[0]),
            sent(reports[0], 0),
            delivered(reports[1]),
            sent(reports[1], 1),
            sent(reports[2], 2)
        ),
        drops.iter().all(|&d| d > 0) && full(0) && full(1) && ud_got < sent(reports[2], 2),
    );
    let rd_errors: u64 = reports[1]
        .summary
        .flows
        .iter()
        .map(|f| f.error_completions)
        .sum();
    e.check(
        "RD recovers its losses on the EECs (retransmissions, no error completions)",
        format!(
            "{} packets retransmitted, {rd_errors} error completions",
            retransmitted(reports[1])
        ),
        retransmitted(reports[1]) > 0 && rd_errors == 0,
    );
    let (g_rc, g_rd, g_rd8) = (
        goodput(reports[3]),
        goodput(reports[4]),
        goodput(reports[5]),
    );
    let bw_full = (3..n).all(full);
    e.check(
        "8 RD QPs sharing one EEC get at most half of RC's throughput (one message in progress per EEC, IBA 9.7.1)",
        format!(
            "{} vs {} Gb/s (x{}); every message delivered: {bw_full}",
            gbps(g_rd),
            gbps(g_rc),
            ratio(g_rd / g_rc.max(1e-9))
        ),
        bw_full && 2.0 * g_rd <= g_rc,
    );
    e.check(
        "an EEC per QP gives RC's throughput back (within 10%), at 8 EECs per peer",
        format!(
            "{} vs {} Gb/s; {} EECs on h0",
            gbps(g_rd8),
            gbps(g_rc),
            server[5].eecs
        ),
        g_rd8 >= 0.9 * g_rc && server[5].eecs == 8,
    );
    Ok(e)
}
