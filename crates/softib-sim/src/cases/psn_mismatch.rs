//! Case 10: a PSN mismatch at connection set-up. The requester's `sq_psn` at RTS is not the
//! `rq_psn` its peer moved to RTR with. What the responder does follows from its PSN checks
//! (IBA 9.7.5.1.x, with PSNs compared modulo 2^24 over a half window of 2^23): a request
//! ahead of the expected PSN is out of sequence, answered by one PSN-sequence NAK (and
//! silence until the expected PSN arrives, IBA 9.7.5.2.2); a request behind it is a
//! duplicate, dropped and re-acknowledged (IBA 9.7.5.1.4). Neither answer means anything to
//! the requester, whose PSNs are elsewhere: it ignores them, its local ACK timer fires
//! retry_cnt + 1 times and the QP fails with IBV_WC_RETRY_EXC_ERR. So there is no "NAK
//! storm": one NAK, or none, then a retry every timeout. Behind by less than the send window,
//! the connection works after silently losing the first messages. A lossy link and a
//! too-short ACK timeout (case 2) leave different tells; the fix is to exchange the PSNs.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome};
use super::measure::{error_completions, flow, gbps, link_errors_and_drops};
use crate::report::summary::{FlowQp, FlowSummary};

/// The case.
pub const CASE: Case = Case {
    slug: "10-psn-mismatch",
    title: "PSN mismatch at connection set-up",
    runs: &[
        CaseRun {
            role: "problem",
            label: "sq_psn 1000 ahead",
            text: include_str!("../../../../scenarios/cases/10-psn-mismatch/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "PSNs exchanged",
            text: include_str!("../../../../scenarios/cases/10-psn-mismatch/fix.toml"),
        },
        CaseRun {
            role: "behind",
            label: "sq_psn 1000 behind",
            text: include_str!("../../../../scenarios/cases/10-psn-mismatch/behind.toml"),
        },
        CaseRun {
            role: "behind-window",
            label: "sq_psn 3 behind",
            text: include_str!("../../../../scenarios/cases/10-psn-mismatch/behind-window.toml"),
        },
        CaseRun {
            role: "lossy",
            label: "lossy link (BER 1e-7)",
            text: include_str!("../../../../scenarios/cases/10-psn-mismatch/lossy.toml"),
        },
        CaseRun {
            role: "02-ack-timeout-storm/problem",
            label: "case 2 (ACK timeout)",
            text: include_str!("../../../../scenarios/cases/02-ack-timeout-storm/problem.toml"),
        },
    ],
    // The mismatched runs fail after 8 timeouts of 16.8 ms whatever the size; fewer
    // messages shorten the runs that work. Case 2's run is short already.
    quick: &[
        ("problem:flow[0].iterations", "2000"),
        ("fix:flow[0].iterations", "2000"),
        ("behind:flow[0].iterations", "2000"),
        ("behind-window:flow[0].iterations", "2000"),
        ("lossy:flow[0].iterations", "2000"),
    ],
    evaluate,
};

/// retry_cnt of the case's own scenarios: the QP fails at the (retry_cnt + 1)th timeout.
const RETRY_CNT: u64 = 7;
/// Messages in flight (tx_depth) in the case's own scenarios.
const WINDOW: u64 = 16;
/// How far behind the `behind-window` run's sq_psn is, in one-packet messages.
const BEHIND_WINDOW: u64 = 3;

fn qp(f: &FlowSummary) -> FlowQp {
    f.qp.clone().unwrap_or_default()
}

fn has_status(f: &FlowSummary, status: &str) -> bool {
    f.error_statuses.iter().any(|(k, _)| k == status)
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let reports = o.reports_in_order(&CASE)?;
    let flows: Vec<&FlowSummary> = reports
        .iter()
        .map(|r| flow(r, "h0", "h1"))
        .collect::<Result<_, _>>()?;
    let qps: Vec<FlowQp> = flows.iter().map(|f| qp(f)).collect();
    let n = reports.len();
    let row = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>();
    e.row(
        "messages completed (IBV_WC_SUCCESS)",
        row(&|i| flows[i].messages.to_string()),
    );
    e.row("goodput, Gb/s (whole run)", row(&|i| gbps(flows[i].gbps)));
    e.row(
        "PSN-sequence NAKs sent (responder)",
        row(&|i| qps[i].seq_naks_sent.to_string()),
    );
    e.row(
        "PSN-sequence NAKs acted on (requester)",
        row(&|i| qps[i].seq_naks_received.to_string()),
    );
    e.row(
        "out-of-sequence drops (responder)",
        row(&|i| qps[i].out_of_sequence_drops.to_string()),
    );
    e.row(
        "duplicates received (responder)",
        row(&|i| qps[i].duplicates_received.to_string()),
    );
    e.row(
        "local ACK timeouts (requester)",
        row(&|i| qps[i].local_ack_timeouts.to_string()),
    );
    e.row(
        "retransmitted packets (requester)",
        row(&|i| qps[i].retransmitted_packets.to_string()),
    );
    e.row(
        "link error counters + drops",
        row(&|i| link_errors_and_drops(reports[i]).to_string()),
    );
    e.row("error completions", row(&|i| error_completions(flows[i])));
    e.row(
        "limited by (--explain)",
        row(&|i| flows[i].limited_by.to_string()),
    );

    let (ahead, fix, behind, window, lossy, storm) =
        (&qps[0], &qps[1], &qps[2], &qps[3], &qps[4], &qps[5]);
    let (fa, ff, fb, fw, fl) = (flows[0], flows[1], flows[2], flows[3], flows[4]);
    e.check(
        "ahead: one PSN-sequence NAK for the whole failure, which the requester ignores (its PSN is before anything it sent)",
        format!(
            "{} NAK sent, {} acted on, {} requests dropped out of sequence",
            ahead.seq_naks_sent, ahead.seq_naks_received, ahead.out_of_sequence_drops
        ),
        ahead.seq_naks_sent == 1 && ahead.seq_naks_received == 0 && ahead.out_of_sequence_drops > 0,
    );
    let fails = |q: &FlowQp, f: &FlowSummary| {
        q.local_ack_timeouts == RETRY_CNT + 1
            && f.messages == 0
            && has_status(f, "IBV_WC_RETRY_EXC_ERR")
    };
    e.check(
        "ahead and behind: no message completes; retry_cnt + 1 = 8 local ACK timeouts, then IBV_WC_RETRY_EXC_ERR",
        format!(
            "ahead: {} timeouts, {} messages, {}; behind: {} timeouts, {} messages, {}",
            ahead.local_ack_timeouts,
            fa.messages,
            error_completions(fa),
            behind.local_ack_timeouts,
            fb.messages,
            error_completions(fb)
        ),
        fails(ahead, fa) && fails(behind, fb),
    );
    e.check(
        "behind: every request is a duplicate (re-acknowledged, ignored by the requester), no NAK at all",
        format!(
            "{} duplicates, {} NAKs",
            behind.duplicates_received, behind.seq_naks_sent
        ),
        behind.duplicates_received > 0 && behind.seq_naks_sent == 0,
    );
    // "Storm": the resends are one window per timeout, nothing more.
    let per_timeout =
        |q: &FlowQp| q.retransmitted_packets as f64 / q.local_ack_timeouts.max(1) as f64;
    e.check(
        "not a storm: at most one window (16 packets) resent per timeout, and at most one NAK",
        format!(
            "ahead {:.1}, behind {:.1} packets per timeout; NAKs {} and {}",
            per_timeout(ahead),
            per_timeout(behind),
            ahead.seq_naks_sent,
            behind.seq_naks_sent
        ),
        per_timeout(ahead) <= WINDOW as f64
            && per_timeout(behind) <= WINDOW as f64
            && ahead.seq_naks_sent + behind.seq_naks_sent <= 1,
    );
    e.check(
        "behind by 3 (< the window): every message completes successfully, yet the first 3 were dropped as duplicates, silently",
        format!(
            "{} of {} messages IBV_WC_SUCCESS, {} duplicates, error completions {}",
            fw.messages,
            ff.messages,
            window.duplicates_received,
            error_completions(fw)
        ),
        fw.messages == ff.messages
            && window.duplicates_received == BEHIND_WINDOW
            && fw.error_completions == 0,
    );
    let link_errors = reports[4].summary.totals.errors;
    e.check(
        "lossy link: the link counts errors, the responder's NAKs are all acted on, and every message completes",
        format!(
            "{link_errors} link errors, {} NAKs sent / {} acted on, {} of {} messages",
            lossy.seq_naks_sent, lossy.seq_naks_received, fl.messages, ff.messages
        ),
        link_errors > 0
            && lossy.seq_naks_sent > 0
            && lossy.seq_naks_received == lossy.seq_naks_sent
            && fl.messages == ff.messages,
    );
    e.check(
        "ACK-timeout storm (case 2): timeouts and duplicates too, but messages complete between the timeouts, and no NAK is sent",
        format!(
            "{} timeouts, {} duplicates, {} NAKs, {} messages",
            storm.local_ack_timeouts, storm.duplicates_received, storm.seq_naks_sent, flows[5].messages
        ),
        storm.local_ack_timeouts > 0 && storm.seq_naks_sent == 0 && flows[5].messages > 0,
    );
    e.check(
        "fix: nothing NAKed, duplicated, timed out or resent; every message completes",
        format!(
            "{} NAKs, {} duplicates, {} timeouts, {} resent, {} messages",
            fix.seq_naks_sent,
            fix.duplicates_received,
            fix.local_ack_timeouts,
            fix.retransmitted_packets,
            ff.messages
        ),
        fix.seq_naks_sent == 0
            && fix.duplicates_received == 0
            && fix.local_ack_timeouts == 0
            && fix.retransmitted_packets == 0
            && ff.error_completions == 0
            && ff.messages > 0,
    );
    let clean: u64 = [0, 2, 3]
        .iter()
        .map(|&i| link_errors_and_drops(reports[i]))
        .sum();
    e.check(
        "the mismatched runs have zero link errors and drops: a transport set-up problem, not a physical one",
        format!("{clean}"),
        clean == 0,
    );
    Ok(e)
}
