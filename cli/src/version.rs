//! `nagless --version` and `nagless version [--verbose]`: what this binary is (version,
//! commit, target, linkage, profile, features), and with `--verbose` what this host offers
//! the commands ([`crate::host`]).

use std::process::ExitCode;

use clap::Args;

/// What `nagless --version` prints after "nagless ": the build, one fact a line. `build.rs`
/// sets the variables (the commit is "unknown" outside a git tree).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit:   ",
    env!("NAGLESS_GIT_COMMIT"),
    "\ntarget:   ",
    env!("NAGLESS_TARGET"),
    " (",
    env!("NAGLESS_LINKAGE"),
    ", ",
    env!("NAGLESS_PROFILE"),
    ")",
    "\nfeatures: ",
    env!("NAGLESS_FEATURES"),
    " (built in: the run shim, the watch eBPF and sampling backends, the fix sock_ops program)"
);

pub const VERSION_HELP: &str = "\
OUTPUT
  The version, the git commit it was built from (\"unknown\" when built outside a git
  tree), the target it was built for and how it is linked, and its cargo features: what
  `nagless --version` prints. With --verbose, then what this host offers each command,
  one line each, \"yes\" or \"no\" with the reason and what the command does without:
    watch eBPF backend     bpf(2), kernel BTF, Linux 6.2+, root or CAP_BPF+CAP_PERFMON
                           (else watch samples sock_diag)
    fix sock_ops (cgroup)  a cgroup v2 mount, and the privilege to attach (new connections)
    fix pidfd_getfd        pidfd_open and pidfd_getfd (Linux 5.6), CAP_SYS_PTRACE
                           (connections open now)
    TCP_DELACK_MAX_US      the socket option of Linux 6.15 (fix --ack-delay-max on
                           connections open now)
    run's dynamic loader   glibc's loader, which loads the shim into programs
  The probes change nothing: a refused bpf(2) request, a copy of one of its own
  descriptors, an option set on a socket closed at once.

EXIT STATUS
  0";

/// `nagless version`.
#[derive(Args)]
pub struct VersionArgs {
    /// Also say what this host offers each command (eBPF, sock_ops, pidfd_getfd,
    /// TCP_DELACK_MAX_US, the shim's loader).
    #[arg(long, short = 'v')]
    verbose: bool,
}

pub fn command(args: VersionArgs) -> ExitCode {
    outln!("nagless {LONG_VERSION}");
    if args.verbose {
        let facts = crate::host::facts();
        outln!(
            "host:     Linux {} {}",
            facts.release.as_deref().unwrap_or("(release unknown)"),
            std::env::consts::ARCH
        );
        for p in crate::host::probe_all(&facts) {
            match p.verdict {
                Ok(what) => outln!("  {:<22} yes: {what}", p.name),
                Err(why) => outln!("  {:<22} no: {why}", p.name),
            }
        }
    }
    ExitCode::SUCCESS
}
