//! Case 4: credit shortage vs MTU. Credits are counted in 64-byte blocks and a packet goes
//! only when the receiver has advertised room for all of it (IBA 7.9.4), so a buffer of a
//! few kilobytes holds one 4 KiB-MTU packet and leaves the rest idle, while 1 KiB packets
//! fill it several at a time. With credits short, the large MTU falls further below line
//! rate than the small one; with ample credits the order reverses (the large MTU carries
//! fewer header bytes), which tells this case apart from a plain header-overhead effect.

use super::case::{Case, CaseError, CaseRun, Evaluation, Outcome, Plot};
use super::measure::{
    flow, gbps, link_errors_and_drops, pct, plot, port, ratio, retransmissions, xmit_rate_series,
};

/// The case.
pub const CASE: Case = Case {
    slug: "04-mtu-vs-credits",
    title: "Credit shortage vs MTU",
    runs: &[
        CaseRun {
            role: "problem",
            label: "96 credits, MTU 4096",
            text: include_str!("../../../../scenarios/cases/04-mtu-vs-credits/problem.toml"),
        },
        CaseRun {
            role: "fix",
            label: "96 credits, MTU 1024",
            text: include_str!("../../../../scenarios/cases/04-mtu-vs-credits/fix.toml"),
        },
        CaseRun {
            role: "ample-4096",
            label: "1024 credits, MTU 4096",
            text: include_str!("../../../../scenarios/cases/04-mtu-vs-credits/ample-4096.toml"),
        },
        CaseRun {
            role: "ample-1024",
            label: "1024 credits, MTU 1024",
            text: include_str!("../../../../scenarios/cases/04-mtu-vs-credits/ample-1024.toml"),
        },
    ],
    quick: &[("duration_us", "300")],
    evaluate,
};

fn evaluate(o: &Outcome) -> Result<Evaluation, CaseError> {
    let mut e = Evaluation {
        columns: CASE.columns(),
        ..Evaluation::default()
    };
    let reports = o.reports_in_order(&CASE)?;
    let flows: Vec<_> = reports
        .iter()
        .map(|r| flow(r, "h0", "h1"))
        .collect::<Result<_, _>>()?;
    let ports: Vec<_> = reports
        .iter()
        .map(|r| port(r, "h0:1"))
        .collect::<Result<_, _>>()?;
    let link = ports[0].link_gbps;
    let good: Vec<f64> = flows.iter().map(|f| f.active_gbps).collect();
    let row = |f: &dyn Fn(usize) -> String| (0..reports.len()).map(f).collect::<Vec<_>>();
    e.row(
        "goodput, Gb/s (first to last completion)",
        row(&|i| gbps(good[i])),
    );
    e.row("goodput / link data rate", row(&|i| ratio(good[i] / link)));
    e.row(
        "h0:1 PortXmitPkts",
        row(&|i| ports[i].port_xmit_pkts.to_string()),
    );
    e.row(
        "h0:1 PortXmitWait, ticks",
        row(&|i| ports[i].port_xmit_wait.to_string()),
    );
    e.row(
        "h0:1 share of the run waiting",
        row(&|i| pct(ports[i].xmit_wait_fraction)),
    );
    e.row(
        "errors + drops + retransmissions",
        row(&|i| {
            let s = &reports[i].summary.totals;
            (s.errors + s.drops + retransmissions(reports[i])).to_string()
        }),
    );
    e.row(
        "limited by (--explain)",
        row(&|i| flows[i].limited_by.to_string()),
    );

    let (short4, short1, ample4, ample1) = (good[0], good[1], good[2], good[3]);
    e.check(
        "credits short: MTU 4096 falls further below line rate than MTU 1024",
        format!(
            "{} vs {} of the link",
            ratio(short4 / link),
            ratio(short1 / link)
        ),
        short4 < short1,
    );
    e.check(
        "credits short: the MTU 4096 sender waits for credits (PortXmitWait > 10% of the run, summary says link_credits)",
        format!(
            "{} waiting, limited_by = {}",
            pct(ports[0].xmit_wait_fraction),
            flows[0].limited_by
        ),
        ports[0].xmit_wait_fraction > 0.1 && flows[0].limited_by == "link_credits",
    );
    e.check(
        "ample credits: the order reverses (MTU 4096 >= MTU 1024: fewer header bytes)",
        format!("{} vs {} Gb/s", gbps(ample4), gbps(ample1)),
        ample4 >= ample1,
    );
    let bad: u64 = reports
        .iter()
        .map(|r| link_errors_and_drops(r) + retransmissions(r))
        .sum();
    e.check(
        "no error, drop or retransmission in any run",
        format!("{bad} in all"),
        bad == 0,
    );

    let lines = CASE
        .runs
        .iter()
        .zip(&reports)
        .map(|(run, r)| Ok((run.label.to_string(), xmit_rate_series(r, "h0:1")?)))
        .collect::<Result<Vec<_>, CaseError>>()?;
    e.plots.push(Plot {
        name: "bandwidth",
        caption: "h0:1 transmit rate per sample interval (PortXmitData) for both MTUs, with short and with ample credits (the two MTU 1024 lines coincide)"
            .into(),
        svg: plot(
            "Case 4: h0:1 transmit rate by MTU and credits",
            "Gb/s (PortXmitData per interval)",
            lines,
            "RC WRITE 64 KiB, 16 in flight, back-to-back 4x EDR, 10 m",
        ),
    });
    Ok(e)
}
