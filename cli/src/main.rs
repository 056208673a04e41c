//! The `nagless` command: `nagless lab` reproduces Nagle/delayed-ACK stalls strategy by
//! strategy on loopback; `nagless run -- CMD` fixes unmodified programs with a preloaded shim;
//! `nagless doctor FILE` finds Nagle/delayed-ACK stalls in packet captures; `nagless watch`
//! finds them live from the kernel's socket state. One module per
//! subcommand; this file parses the command line and maps results to exit statuses.

/// `println!` that a closed stdout ends quietly ([`pipe`]).
macro_rules! outln {
    ($($t:tt)*) => { $crate::pipe::write(false, format_args!($($t)*), true) };
}
/// `print!` that a closed stdout ends quietly.
macro_rules! out {
    ($($t:tt)*) => { $crate::pipe::write(false, format_args!($($t)*), false) };
}
/// `eprintln!` that a closed stderr ends quietly.
macro_rules! errln {
    ($($t:tt)*) => { $crate::pipe::write(true, format_args!($($t)*), true) };
}
/// `eprint!` that a closed stderr ends quietly.
macro_rules! err {
    ($($t:tt)*) => { $crate::pipe::write(true, format_args!($($t)*), false) };
}

mod doctor;
mod elf;
mod fix;
mod generate;
mod host;
mod lab;
mod pipe;
mod run;
mod sys;
mod version;
mod watch;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::doctor::{DoctorArgs, DOCTOR_HELP};
use crate::fix::{FixArgs, FIX_HELP};
use crate::lab::{LabArgs, LAB_HELP};
use crate::run::{RunArgs, RUN_HELP};
use crate::version::{VersionArgs, LONG_VERSION, VERSION_HELP};
use crate::watch::{WatchArgs, WATCH_HELP};

#[derive(Parser)]
#[command(
    name = "nagless",
    version,
    long_version = LONG_VERSION,
    propagate_version = true,
    about = "Find and fix TCP stalls from Nagle's algorithm and delayed ACK",
    long_about = "nagless: TCP programs that are slow for no visible reason.\n\n\
Nagle's algorithm (sender) and delayed ACK (receiver) together stall any exchange where a \
small write waits behind unacknowledged data: 40 ms per exchange on Linux. The nagless \
library coalesces writes in user space and sends each burst as one sendmsg at the right \
moment. This command measures the stall strategy by strategy (lab), fixes unmodified \
programs (run), finds stalls in packet captures (doctor) and on a running host (watch), and repairs a \
running program from outside (fix)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Reproduce each published case on loopback, strategy by strategy: latency against packets.
    #[command(after_long_help = LAB_HELP)]
    Lab(Box<LabArgs>),
    /// Run an unmodified program with its TCP sockets coalesced (LD_PRELOAD shim).
    #[command(after_long_help = RUN_HELP)]
    Run(RunArgs),
    /// Find Nagle and delayed-ACK stalls in a packet capture (pcap or pcapng, file or stdin).
    #[command(after_long_help = DOCTOR_HELP)]
    Doctor(DoctorArgs),
    /// Find processes stalling on Nagle and delayed ACK, live, from the kernel's socket state.
    #[command(after_long_help = WATCH_HELP)]
    Watch(WatchArgs),
    /// Fix a running program's stalls from outside, no restart: TCP_NODELAY, a delayed-ACK bound.
    #[command(after_long_help = FIX_HELP)]
    Fix(FixArgs),
    /// Print the version, commit, target and features; with --verbose, what this host offers.
    #[command(after_long_help = VERSION_HELP)]
    Version(VersionArgs),
    /// Write the man pages and shell completions (deploy/man, deploy/completions).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
    /// Serve the end under test of a lab glue case: what the lab starts under `nagless run`
    /// for a `run` row.
    #[command(hide = true)]
    LabEnd {
        /// The end's description (JSON, made by the lab).
        spec: String,
    },
}

/// `20ms`, `0.1ms`, `1s`, `500us`, `2m`.
/// `nagless run` alone, parsed without building the other subcommands' many arguments: the
/// short-lived programs started through it (cron jobs, git, curl) pay its start-up every
/// time (`scripts/bench-run-startup`). Its help and errors read as the subcommand's.
#[derive(Parser)]
#[command(
    name = "nagless run",
    bin_name = "nagless run",
    version,
    long_version = LONG_VERSION,
    about = "Run an unmodified program with its TCP sockets coalesced (LD_PRELOAD shim).",
    after_long_help = RUN_HELP
)]
struct RunOnly {
    #[command(flatten)]
    args: RunArgs,
}

/// Prints a parse error or help and gives the exit status: 2 for an error, 0 for help.
fn parse_failed(e: clap::Error) -> ExitCode {
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    nagless_fix::plan::parse_duration(s)
}

/// Defines an error that is its message, told apart from others by its type.
macro_rules! message_error {
    ($(#[$doc:meta])* $name:ident, $make:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub(crate) struct $name(String);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::error::Error for $name {}

        pub(crate) fn $make(msg: impl Into<String>) -> anyhow::Error {
            $name(msg.into()).into()
        }
    };
}

message_error!(
    /// A usage error: exit status 2, with a pointer to `--help`.
    Usage,
    usage
);
message_error!(
    /// A refusal that is no misuse of the command (nothing to select, nothing to do): exit
    /// status 2, with no pointer to `--help`.
    Refused,
    refused
);

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == "run") {
        return match RunOnly::try_parse_from(std::env::args_os().skip(1)) {
            Ok(r) => run::command(r.args),
            Err(e) => parse_failed(e),
        };
    }
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "lab") {
        args = lab::older_spellings(args);
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => return parse_failed(e),
    };
    // (Usage errors below come from `lab`: the others map their own.)
    let result = match cli.command {
        Command::Lab(args) => lab::command(*args),
        Command::Doctor(args) => return doctor::command(args),
        Command::Run(args) => return run::command(args),
        Command::Watch(args) => return watch::command(args),
        Command::Fix(args) => return fix::command(args),
        Command::Version(args) => return version::command(args),
        Command::Generate(args) => return generate::command(args, Cli::command()),
        Command::LabEnd { spec } => {
            return match nagless_lab::serve_end(&spec) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    errln!("nagless lab-end: {e}");
                    ExitCode::from(2)
                }
            }
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            errln!("nagless: some runs failed (see 'error:' lines above)");
            ExitCode::from(1)
        }
        Err(e) if e.is::<Usage>() => {
            errln!("nagless lab: {e}\nTry 'nagless lab --help'.");
            ExitCode::from(2)
        }
        Err(e) => {
            errln!("nagless: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// clap's own checks of the definitions: no two options of a command share a short or
    /// long flag, every `requires` and `conflicts_with` names an argument.
    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
        super::RunOnly::command().debug_assert();
    }
}
