//! The stock Debian binaries (packages ibverbs-utils and perftest, built against rdma-core
//! 44's libibverbs) run unmodified on softib with the shim preloaded: a server on
//! 127.77.N.1 and a client on 127.77.N.2, over loopback, with no kernel RDMA device. Each
//! pair must exit 0 and print its figures; the pingpongs run with `-c`, which checks every
//! byte received. Missing binaries fail the test with the package to install.

mod common;

use std::time::Duration;

use common::{args, binary, run_pair, tcp_port, Pair};

const DEADLINE: Duration = Duration::from_secs(120);

fn pingpong(slot: u8, tool: &str, extra: &[&str]) -> Pair {
    let program = binary(tool, "ibverbs-utils");
    let port = tcp_port(slot).to_string();
    let mut a = args(&["-g", "0", "-n", "200", "-c", "-p", &port]);
    a.extend(args(extra));
    run_pair(slot, &program, &a, &a, DEADLINE, 3)
}

fn check_pingpong(p: &Pair) {
    assert!(
        p.server.ok() && p.client.ok(),
        "pingpong failed:\n{}",
        p.dump()
    );
    for side in [&p.server, &p.client] {
        assert!(
            side.output.contains("200 iters in"),
            "no iteration report:\n{}",
            p.dump()
        );
        // -c compares every received buffer with what the peer sent.
        assert!(
            !side.output.to_lowercase().contains("corrupt"),
            "{}",
            p.dump()
        );
    }
}

#[test]
fn ibv_rc_pingpong() {
    check_pingpong(&pingpong(1, "ibv_rc_pingpong", &[]));
}

#[test]
fn ibv_rc_pingpong_event_mode() {
    check_pingpong(&pingpong(2, "ibv_rc_pingpong", &["-e"]));
}

#[test]
fn ibv_uc_pingpong() {
    check_pingpong(&pingpong(3, "ibv_uc_pingpong", &[]));
}

#[test]
fn ibv_ud_pingpong() {
    check_pingpong(&pingpong(4, "ibv_ud_pingpong", &["-s", "1024"]));
}

#[test]
fn ibv_srq_pingpong() {
    check_pingpong(&pingpong(5, "ibv_srq_pingpong", &["-q", "4"]));
}

/// `ibv_xsrq_pingpong`: XRC (an XRC domain, an XRC SRQ, initiator and target QPs per
/// side, each SEND naming the peer's SRQ number), with completion events. The tool has no
/// byte check; it prints "success" once every test message came back.
#[test]
fn ibv_xsrq_pingpong_event_mode() {
    let program = binary("ibv_xsrq_pingpong", "ibverbs-utils");
    let port = tcp_port(30).to_string();
    let a = args(&["-g", "0", "-n", "50", "-e", "-p", &port]);
    let p = run_pair(30, &program, &a, &a, DEADLINE, 3);
    assert!(
        p.server.ok() && p.client.ok(),
        "xsrq pingpong failed:\n{}",
        p.dump()
    );
    for side in [&p.server, &p.client] {
        assert!(
            side.output.contains("success"),
            "no success line:\n{}",
            p.dump()
        );
    }
}

/// The figures line under perftest's `#bytes` header: (size, iterations, other columns).
fn result_row(output: &str) -> Option<(u64, u64, Vec<f64>)> {
    let mut lines = output.lines();
    lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("#bytes"))?;
    let row = lines.next()?;
    let mut cols = row.split_whitespace();
    let size = cols.next()?.parse().ok()?;
    let iters = cols.next()?.parse().ok()?;
    let rest = cols.filter_map(|c| c.parse().ok()).collect();
    Some((size, iters, rest))
}

/// Runs a perftest tool; `common` goes to both sides. Returns the client's (size,
/// iterations, figures) after checking both sides succeeded.
fn perftest(slot: u8, tool: &str, common: &[&str], size: u64, iters: u64) -> Vec<f64> {
    let program = binary(tool, "perftest");
    let port = tcp_port(slot).to_string();
    let (s, n) = (size.to_string(), iters.to_string());
    let mut a = args(&["-F", "-x", "0", "-p", &port, "-s", &s, "-n", &n]);
    a.extend(args(common));
    let p = run_pair(slot, &program, &a, &a, DEADLINE, 3);
    assert!(
        p.server.ok() && p.client.ok(),
        "{tool} failed:\n{}",
        p.dump()
    );
    let (rs, ri, figures) = result_row(&p.client.output)
        .unwrap_or_else(|| panic!("{tool}: no result row:\n{}", p.dump()));
    assert_eq!((rs, ri), (size, iters), "{}", p.dump());
    assert!(
        !figures.is_empty() && figures.iter().all(|f| *f > 0.0 && f.is_finite()),
        "{tool}: figures {figures:?}\n{}",
        p.dump()
    );
    figures
}

#[test]
fn ib_write_bw() {
    perftest(10, "ib_write_bw", &[], 65536, 500);
}

#[test]
fn ib_write_bw_uc() {
    perftest(11, "ib_write_bw", &["-c", "UC"], 16384, 500);
}

#[test]
fn ib_read_bw() {
    perftest(12, "ib_read_bw", &[], 65536, 500);
}

#[test]
fn ib_send_bw() {
    perftest(13, "ib_send_bw", &[], 65536, 500);
}

#[test]
fn ib_send_bw_ud() {
    perftest(14, "ib_send_bw", &["-c", "UD"], 2048, 500);
}

#[test]
fn ib_send_bw_event_mode() {
    perftest(15, "ib_send_bw", &["-e"], 65536, 500);
}

#[test]
fn ib_atomic_bw_fetch_and_add() {
    perftest(16, "ib_atomic_bw", &[], 8, 500);
}

#[test]
fn ib_atomic_bw_compare_and_swap() {
    perftest(17, "ib_atomic_bw", &["-A", "CMP_AND_SWAP"], 8, 500);
}

#[test]
fn ib_write_lat() {
    perftest(18, "ib_write_lat", &[], 64, 500);
}

#[test]
fn ib_send_lat() {
    perftest(19, "ib_send_lat", &[], 64, 500);
}

#[test]
fn ib_send_lat_event_mode() {
    perftest(20, "ib_send_lat", &["-e"], 64, 200);
}

#[test]
fn ib_read_lat() {
    perftest(21, "ib_read_lat", &[], 64, 500);
}

#[test]
fn ib_atomic_lat() {
    perftest(22, "ib_atomic_lat", &[], 8, 500);
}
