//! The `nagless` command: `nagless lab` reproduces Nagle/delayed-ACK stalls strategy by
//! strategy on loopback; `nagless run -- CMD` fixes unmodified programs with a preloaded shim;
//! `nagless doctor FILE` finds Nagle/delayed-ACK stalls in packet captures. One module per
//! subcommand; this file parses the command line and maps results to exit statuses.

mod doctor;
mod lab;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::doctor::{DoctorArgs, DOCTOR_HELP};
use crate::lab::{LabArgs, LAB_HELP};
use crate::run::{RunArgs, RUN_HELP};

#[derive(Parser)]
#[command(
    name = "nagless",
    version,
    about = "Find and fix TCP stalls from Nagle's algorithm and delayed ACK",
    long_about = "nagless: TCP programs that are slow for no visible reason.\n\n\
Nagle's algorithm (sender) and delayed ACK (receiver) together stall any exchange where a \
small write waits behind unacknowledged data: 40 ms per exchange on Linux. The nagless \
library coalesces writes in user space and sends each burst as one sendmsg at the right \
moment. This command measures the stall strategy by strategy (lab), fixes unmodified \
programs (run) and finds stalls in packet captures (doctor)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Reproduce each source case on loopback, strategy by strategy: latency against packets.
    #[command(after_long_help = LAB_HELP)]
    Lab(Box<LabArgs>),
    /// Run an unmodified program with its TCP sockets coalesced (LD_PRELOAD shim).
    #[command(after_long_help = RUN_HELP)]
    Run(RunArgs),
    /// Find Nagle and delayed-ACK stalls in a packet capture (pcap or pcapng, file or stdin).
    #[command(after_long_help = DOCTOR_HELP)]
    Doctor(DoctorArgs),
}

/// A usage error: exit status 2.
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Usage {}

pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    Usage(msg.into()).into()
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Lab(args) => lab::command(*args),
        Command::Doctor(args) => return doctor::command(args),
        Command::Run(args) => return run::command(args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("nagless: some runs failed (see 'error:' lines above)");
            ExitCode::from(1)
        }
        Err(e) if e.is::<Usage>() => {
            eprintln!("nagless: {e}\nTry 'nagless --help'.");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("nagless: {e:#}");
            ExitCode::from(1)
        }
    }
}
