//! The `softib` command: one binary for every softib tool. Each subcommand lives in its own
//! module; the logic a library user would also need lives in the library crates.

mod cases;
mod cc;
mod counters;
mod decode;
mod device;
mod perftest;
mod pingpong;
mod run;
mod serve;
mod sim;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use perftest::{Kind, Verb};

/// softib: the InfiniBand transport layer in software.
#[derive(Debug, Parser)]
#[command(name = "softib", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode RoCEv2 and native InfiniBand packets in a pcap/pcapng file, one line each.
    Decode(decode::DecodeArgs),
    /// RDMA WRITE bandwidth (pairs with perftest's ib_write_bw).
    #[command(name = "write-bw")]
    WriteBw(perftest::PerfArgs),
    /// RDMA READ bandwidth (pairs with ib_read_bw).
    #[command(name = "read-bw")]
    ReadBw(perftest::PerfArgs),
    /// SEND bandwidth (pairs with ib_send_bw).
    #[command(name = "send-bw")]
    SendBw(perftest::PerfArgs),
    /// Atomic operations bandwidth (pairs with ib_atomic_bw).
    #[command(name = "atomic-bw")]
    AtomicBw(perftest::PerfArgs),
    /// RDMA WRITE latency (pairs with ib_write_lat).
    #[command(name = "write-lat")]
    WriteLat(perftest::PerfArgs),
    /// RDMA READ latency (pairs with ib_read_lat).
    #[command(name = "read-lat")]
    ReadLat(perftest::PerfArgs),
    /// SEND latency (pairs with ib_send_lat).
    #[command(name = "send-lat")]
    SendLat(perftest::PerfArgs),
    /// Atomic operation latency (pairs with ib_atomic_lat).
    #[command(name = "atomic-lat")]
    AtomicLat(perftest::PerfArgs),
    /// RC SEND ping-pong (pairs with ibv_rc_pingpong).
    Pingpong(pingpong::PingpongArgs),
    /// Show, or compare against a baseline, the counters a tool published with --counters.
    Counters(counters::CountersArgs),
    /// Simulate a native InfiniBand fabric from a scenario file and report what happened.
    Sim(sim::SimArgs),
    /// Run the field-case library (classic transport problems, scenarios/cases/) and check
    /// each case's criteria; --doc regenerates docs/troubleshooting.md's figures.
    Cases(cases::CasesArgs),
    /// Run an unmodified RDMA program on a softib device: preloads the verbs shim, shows
    /// the device in sysfs and /dev/infiniband, and gives it a free loopback address
    /// unless --addr says otherwise (softib run -- ib_write_bw -x 0 ...).
    Run(run::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::WriteBw(a) => perftest::run(Verb::Write, Kind::Bw, "write-bw", &a),
        Command::ReadBw(a) => perftest::run(Verb::Read, Kind::Bw, "read-bw", &a),
        Command::SendBw(a) => perftest::run(Verb::Send, Kind::Bw, "send-bw", &a),
        Command::AtomicBw(a) => perftest::run(Verb::Atomic, Kind::Bw, "atomic-bw", &a),
        Command::WriteLat(a) => perftest::run(Verb::Write, Kind::Lat, "write-lat", &a),
        Command::ReadLat(a) => perftest::run(Verb::Read, Kind::Lat, "read-lat", &a),
        Command::SendLat(a) => perftest::run(Verb::Send, Kind::Lat, "send-lat", &a),
        Command::AtomicLat(a) => perftest::run(Verb::Atomic, Kind::Lat, "atomic-lat", &a),
        Command::Pingpong(a) => pingpong::run(&a),
        Command::Counters(a) => counters::run(&a),
        Command::Sim(args) => sim::run_cli(&args, serve::run),
        Command::Cases(a) => cases::run(&a),
        Command::Run(a) => run::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Print the whole cause chain, never a backtrace: the user needs what and where.
            eprintln!("softib: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
