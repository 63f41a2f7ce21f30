//! Case 12: "atomics over UC" for distributed locks, a misconception. IBA defines atomics
//! for RC and RD only (IBA 9.8.2: UC carries SEND and RDMA WRITE; 9.4.5: atomics need the
//! responder's reliable, replay-safe execution). As on the kernel's rxe, `ibv_post_send`
//! accepts the work request and it then fails: IBV_WC_LOC_QP_OP_ERR, the QP in ERR. A
//! scenario asking for it does not parse, and the closest thing UC offers, updates
//! sent as UC SENDs, loses some on a link with bit errors without anyone being told. The
//! answer is RC, with updates aggregated locally and written in batches (case 7's fix).

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome};
use crate::report::Report;
use crate::scenario::Scenario;
use softib_transport::harness::{Pair, QpOptions};
use softib_transport::{QpState, QpType, SendFlags, SendWr, Sge, VerbsError, WcStatus, WrOpcode};

/// The case.
pub const CASE: Case = Case {
    slug: "12-atomics-over-uc",
    title: "Atomics over UC (a misconception)",
    runs: &[
        CaseRun {
            role: "07-atomic-hotspot/problem",
            label: "RC FetchAdd, 8 hosts",
            text: include_str!("../../../../scenarios/cases/07-atomic-hotspot/problem.toml"),
        },
        CaseRun {
            role: "07-atomic-hotspot/fix",
            label: "RC, batches of 64",
            text: include_str!("../../../../scenarios/cases/07-atomic-hotspot/fix.toml"),
        },
        CaseRun {
            role: "uc-updates",
            label: "UC SEND updates, BER 1e-5",
            text: include_str!("../../../../scenarios/cases/12-atomics-over-uc/uc-updates.toml"),
        },
    ],
    quick: &[("duration_us", "500")],
    evaluate,
};

/// The scenario that asks for FetchAdd on UC: not a run, it must be refused.
const UC_ATOMIC: &str =
    include_str!("../../../../scenarios/cases/12-atomics-over-uc/uc-atomic.toml");

/// Bytes per counter update (an 8-byte FetchAdd operand, an 8-byte delta in a batch, or an
/// 8-byte UC SEND).
const UPDATE_BYTES: f64 = 8.0;

fn seconds(r: &Report) -> f64 {
    r.duration_ps as f64 / 1e12
}

/// Counter updates that reached h0 per second: payload of completed (RC) or received (UC)
/// messages / 8.
fn updates_per_s(r: &Report) -> f64 {
    let bytes: u64 = r.summary.flows.iter().map(|f| f.payload_bytes).sum();
    bytes as f64 / UPDATE_BYTES / seconds(r)
}

fn lost(r: &Report) -> u64 {
    r.summary.flows.iter().map(|f| f.messages_lost).sum()
}

fn error_completions(r: &Report) -> u64 {
    r.summary.flows.iter().map(|f| f.error_completions).sum()
}

/// What the engine says to a FetchAdd and a CmpSwap posted on a UC QP in RTS, and the QP's
/// state afterwards.
/// What the engine does with FetchAdd then CmpSwap posted to a UC QP, as the kernel's rxe
/// does: both posts are accepted; the first fails at the head of the send queue with
/// `LocQpOpErr`, the QP moves to ERR and the second is flushed. Returns the post results,
/// the completions, the QP's state and the target word afterwards.
fn engine_on_uc() -> UcAtomicsOutcome {
    let mut pair = Pair::new(12);
    let (a, b) = pair.connect(&QpOptions {
        qp_type: QpType::Uc,
        ..Default::default()
    });
    pair.fill(1, &b, 0, &7u64.to_le_bytes());
    let posts = [WrOpcode::AtomicFetchAndAdd, WrOpcode::AtomicCmpAndSwp]
        .into_iter()
        .enumerate()
        .map(|(i, opcode)| {
            let wr = SendWr {
                wr_id: i as u64,
                opcode,
                sg_list: vec![Sge {
                    addr: a.addr,
                    length: 8,
                    lkey: a.keys.lkey,
                }],
                flags: SendFlags::SIGNALED,
                remote_addr: b.addr,
                rkey: b.keys.rkey,
                compare_add: 1,
                ..SendWr::default()
            };
            pair.dev(0).post_send(0, a.qpn, &wr)
        })
        .collect();
    pair.drive(1_000_000);
    let completions = pair
        .completions(0, &a)
        .into_iter()
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    let state = pair
        .device(0)
        .query_qp(a.qpn)
        .map_or(QpState::Err, |q| q.qp_state);
    let word = u64::from_le_bytes(pair.read(1, &b, 0, 8).try_into().expect("8 bytes"));
    UcAtomicsOutcome {
        posts,
        completions,
        state,
        word,
    }
}

/// [`engine_on_uc`]'s findings.
struct UcAtomicsOutcome {
    posts: Vec<Result<(), VerbsError>>,
    completions: Vec<(u64, WcStatus)>,
    state: QpState,
    word: u64,
}

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let reports = o.reports_in_order(&CASE)?;
    let n = reports.len();
    let row = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>();
    e.row(
        "counter updates reaching h0, million/s",
        row(&|i| format!("{:.3}", updates_per_s(reports[i]) / 1e6)),
    );
    e.row(
        "updates lost (never arrived, never resent)",
        row(&|i| lost(reports[i]).to_string()),
    );
    e.row(
        "error completions",
        row(&|i| error_completions(reports[i]).to_string()),
    );
    e.row(
        "link error counters",
        row(&|i| reports[i].summary.totals.errors.to_string()),
    );
    e.row(
        "atomic, every update applied exactly once",
        vec![
            "yes (RC)".into(),
            "yes (RC)".into(),
            "no atomicity, no delivery guarantee".into(),
        ],
    );

    let refused = Scenario::parse(UC_ATOMIC).err().map(|err| err.to_string());
    e.check(
        "a scenario asking for FetchAdd on UC is refused, naming the key and IBA 9.8.2",
        refused.clone().unwrap_or_else(|| "it parsed".into()),
        refused.is_some_and(|m| m.contains("flow[0].service") && m.contains("9.8.2")),
    );
    let uc = engine_on_uc();
    let as_kernel = uc.posts.iter().all(Result::is_ok)
        && uc.completions == [(0, WcStatus::LocQpOpErr), (1, WcStatus::WrFlushErr)]
        && uc.state == QpState::Err
        && uc.word == 7;
    e.check(
        "the engine, as the kernel's rxe: FetchAdd and CmpSwap posted on a UC QP are accepted, the first completes with LOC_QP_OP_ERR, the QP goes to ERR, the second is flushed, and the target is untouched",
        format!(
            "posts: {}; completions: {}; QP {:?}; target {}",
            uc.posts
                .iter()
                .map(|r| match r {
                    Ok(()) => "accepted".to_string(),
                    Err(err) => err.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", "),
            uc.completions
                .iter()
                .map(|(id, st)| format!("wr {id} {st}"))
                .collect::<Vec<_>>()
                .join(", "),
            uc.state,
            uc.word
        ),
        as_kernel,
    );
    let (p, f, uc) = (reports[0], reports[1], reports[2]);
    e.check(
        "UC updates on a link with bit errors: some are lost, and no completion says so",
        format!(
            "{} lost of {:.0} arrived, {} link errors, {} error completions",
            lost(uc),
            updates_per_s(uc) * seconds(uc),
            uc.summary.totals.errors,
            error_completions(uc)
        ),
        lost(uc) > 0 && error_completions(uc) == 0,
    );
    let (up, uf) = (updates_per_s(p), updates_per_s(f));
    e.check(
        "the guide's answer, RC with local aggregation (case 7's fix), carries at least 10x the updates of RC FetchAdd",
        format!(
            "{:.3} vs {:.3} million/s ({:.0}x)",
            uf / 1e6,
            up / 1e6,
            uf / up.max(1e-9)
        ),
        uf >= 10.0 * up,
    );
    let bad: u64 = [p, f]
        .iter()
        .map(|r| r.summary.totals.errors + r.summary.totals.drops + error_completions(r) + lost(r))
        .sum();
    e.check(
        "the RC runs lose nothing and complete every update successfully",
        format!("{bad} errors, drops, failed completions or losses"),
        bad == 0,
    );
    Ok(e)
}
