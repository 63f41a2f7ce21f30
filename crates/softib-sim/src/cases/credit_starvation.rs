//! Case 1: credit starvation after a firmware change. One switch port advertises a receive
//! buffer of one packet per VL at link bring-up (IBA 7.9.4: the credit limit a receiver
//! advertises bounds what the transmitter may send), so the host feeding it can have one
//! packet in flight per credit round trip: its bandwidth drops to about 60% of the link
//! with every error counter at zero, its PortXmitWait climbs, and traffic on other ports is
//! untouched. The fix restores the advertisement.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome, Plot};
use super::measure::{
    flow, gbps, link_errors_and_drops, pct, plot, port, ratio, retransmissions, wait_series,
    xmit_rate_series,
};

/// The case.
pub const CASE: Case = Case {
    slug: "01-credit-starvation",
    title: "Credit starvation after a firmware change",
    runs: &[
        CaseRun {
            role: "problem",
            label: "problem (65 credits)",
            text: include_str!("../../../../scenarios/cases/01-credit-starvation/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "fix (1024 credits)",
            text: include_str!("../../../../scenarios/cases/01-credit-starvation/fix.toml"),
        },
    ],
    quick: &[("duration_us", "300")],
    evaluate,
};

/// The starved sender's port, and the two pairs.
const SENDER_PORT: &str = "h0:1";
const PAIR: (&str, &str) = ("h0", "h1");
const OTHER: (&str, &str) = ("h2", "h3");

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let (p, f) = (o.report("problem")?, o.report("fix")?);
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let link = port(p, SENDER_PORT)?.link_gbps;
    // Goodput between the first and the last completion: the start-up does not dilute it.
    let good = |x: &crate::report::summary::FlowSummary| x.active_gbps;
    let (pp, fp) = (flow(p, PAIR.0, PAIR.1)?, flow(f, PAIR.0, PAIR.1)?);
    let (po, fo) = (flow(p, OTHER.0, OTHER.1)?, flow(f, OTHER.0, OTHER.1)?);
    let (pw, fw) = (port(p, SENDER_PORT)?, port(f, SENDER_PORT)?);
    let (rp, rf) = (good(pp) / link, good(fp) / link);
    e.row(
        "h0 -> h1 goodput, Gb/s (first to last completion)",
        vec![gbps(good(pp)), gbps(good(fp))],
    );
    e.row("h0 -> h1 / link data rate", vec![ratio(rp), ratio(rf)]);
    e.row(
        "h2 -> h3 goodput, Gb/s (other pair)",
        vec![gbps(good(po)), gbps(good(fo))],
    );
    e.row(
        "h0:1 PortXmitWait, ticks",
        vec![pw.port_xmit_wait.to_string(), fw.port_xmit_wait.to_string()],
    );
    e.row(
        "h0:1 share of the run waiting",
        vec![pct(pw.xmit_wait_fraction), pct(fw.xmit_wait_fraction)],
    );
    e.row(
        "h0:1 flow-control packets received",
        vec![
            pw.flow_control_packets_rcvd.to_string(),
            fw.flow_control_packets_rcvd.to_string(),
        ],
    );
    let errors = link_errors_and_drops;
    e.row(
        "error counters + drops, all ports",
        vec![errors(p).to_string(), errors(f).to_string()],
    );
    e.row(
        "retransmitted packets, all hosts",
        vec![
            retransmissions(p).to_string(),
            retransmissions(f).to_string(),
        ],
    );
    e.row(
        "h0 -> h1 limited by (--explain)",
        vec![pp.limited_by.to_string(), fp.limited_by.to_string()],
    );

    e.check(
        "problem: h0 -> h1 runs at 0.5-0.7 of the link",
        format!("{} of {link:.2} Gb/s", ratio(rp)),
        (0.5..=0.7).contains(&rp),
    );
    e.check(
        "fix: h0 -> h1 back to >= 0.9 of the link",
        format!("{} of {link:.2} Gb/s", ratio(rf)),
        rf >= 0.9,
    );
    let (wp, wf) = (pw.port_xmit_wait, fw.port_xmit_wait);
    e.check(
        "PortXmitWait on the sender port at least 10x higher in the problem",
        format!("{wp} vs {wf} ticks"),
        wp > 0 && wp >= 10 * wf,
    );
    e.check(
        "no error counter, drop or retransmission anywhere, in either run",
        format!(
            "errors+drops {} / {}, retransmissions {} / {}",
            errors(p),
            errors(f),
            retransmissions(p),
            retransmissions(f)
        ),
        errors(p) + errors(f) + retransmissions(p) + retransmissions(f) == 0,
    );
    let moved = (good(po) - good(fo)).abs() / good(fo).max(1e-9);
    e.check(
        "the other pair is unaffected (within 2%, at >= 0.9 of the link)",
        format!(
            "h2 -> h3 {} vs {} Gb/s ({} apart)",
            gbps(good(po)),
            gbps(good(fo)),
            pct(moved)
        ),
        moved <= 0.02 && good(po) / link >= 0.9,
    );
    e.check(
        "the summary names link credits as the limit in the problem",
        format!("limited_by = {}", pp.limited_by),
        pp.limited_by == "link_credits",
    );

    e.plots.push(Plot {
        name: "bandwidth",
        caption: "h0:1 transmit rate per sample interval (PortXmitData), problem and fix".into(),
        svg: plot(
            "Case 1: h0:1 transmit rate",
            "Gb/s (PortXmitData per interval)",
            vec![
                (
                    "problem: 65 credits".into(),
                    xmit_rate_series(p, SENDER_PORT)?,
                ),
                (
                    "fix: 1024 credits".into(),
                    xmit_rate_series(f, SENDER_PORT)?,
                ),
            ],
            "RC WRITE 64 KiB, 16 in flight, 4x EDR; data packets LRH through ICRC",
        ),
    });
    e.plots.push(Plot {
        name: "xmit-wait",
        caption: "share of each sample interval h0:1 waited with data queued (PortXmitWait)".into(),
        svg: plot(
            "Case 1: h0:1 PortXmitWait",
            "% of interval waiting",
            vec![
                ("problem".into(), wait_series(p, SENDER_PORT)?),
                ("fix".into(), wait_series(f, SENDER_PORT)?),
            ],
            "PortXmitWait increase x tick / sample interval",
        ),
    });
    Ok(e)
}
