//! The `softib` command: one binary for every softib tool. Each subcommand lives in its own
//! module; the logic a library user would also need lives in the library crates.

mod decode;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => decode::run(&args),
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
