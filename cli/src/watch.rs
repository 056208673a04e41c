//! `nagless watch`: find processes stalling on Nagle and delayed ACK, live, from the kernel's
//! per-socket TCP state (no capture, no restart). This module reads the arguments and starts
//! the backend and the exporter; [`live`] runs the watch, [`summary`] ends it, [`table`],
//! [`json`] and [`pin`] write what it found, [`help`] is the long help.

mod help;
mod json;
mod live;
mod pin;
mod summary;
mod table;
mod turns;

use std::io::{self, IsTerminal as _};
use std::process::ExitCode;
use std::time::Duration;

use nagless_host::{Pid, Proc};
use nagless_watch::backend::{Backend, Choice};
use nagless_watch::metrics::{Limits, Metrics};
use nagless_watch::serve::Exporter;
use nagless_watch::web_config::WebConfig;
use nagless_watch::Filter;

use crate::parse_duration;

pub use help::WATCH_HELP;

#[derive(clap::Args)]
pub struct WatchArgs {
    /// How often to sample the busy sockets (those with data in flight lately; sampling), or
    /// to drain the kernel's reports (eBPF, at least 50 ms: each carries the kernel's time).
    #[arg(long, default_value = "2ms", value_parser = parse_duration)]
    interval: Duration,
    /// How often to list every established socket (finding new and newly busy ones; sampling).
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    scan_interval: Duration,
    /// Where stalls come from: auto (eBPF where it loads, else sampling), ebpf, sampling.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// How long to watch (0: until Ctrl-C) [default: 10s, or 0 with --serve].
    #[arg(short, long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// How often to refresh the table (or print a JSON line).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    refresh: Duration,
    /// Only connections with this local or remote port.
    #[arg(long)]
    port: Option<u16>,
    /// Only this process's connections.
    #[arg(short, long)]
    pid: Option<u32>,
    /// JSON lines instead of the table.
    #[arg(short, long)]
    json: bool,
    /// With --json, also a line for each stall as it ends (`"type": "stall"`): when (Unix
    /// time), the process, the stalled socket's local and remote address, bytes held, ms lost.
    #[arg(long, requires = "json")]
    stalls: bool,
    /// Serve Prometheus metrics on this address (GET /metrics) and run until stopped; `:PORT`
    /// listens on every IPv4 address, as exporters' `:9100` does.
    #[arg(long, value_name = "ADDR", value_parser = listen_address)]
    serve: Option<std::net::SocketAddr>,
    /// With --serve: a group (process, port, role, container) neither refreshed nor stalling
    /// for this long loses its series.
    #[arg(long, default_value = "10m", value_parser = parse_duration, requires = "serve")]
    forget_after: Duration,
    /// With --serve: groups with series of their own at most; the rest share one series
    /// labelled role="overflow" (counted in nagless_watch_groups_overflowed_total).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..), requires = "serve")]
    max_series: u32,
    /// With --serve: TLS and basic authentication from a web configuration file, in the
    /// format of Prometheus's exporters (exporter-toolkit: `tls_server_config`,
    /// `basic_auth_users` with bcrypt hashes); see docs/watch.md.
    #[arg(long, value_name = "FILE", requires = "serve")]
    web_config: Option<std::path::PathBuf>,
}

/// `--serve`'s address: `HOST:PORT`, or `:PORT` for every IPv4 address.
fn listen_address(s: &str) -> Result<std::net::SocketAddr, String> {
    let full = match s.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => s.to_owned(),
    };
    full.parse()
        .map_err(|_| format!("{s:?} is not an address such as 127.0.0.1:9911 or :9911"))
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BackendArg {
    Auto,
    Ebpf,
    Sampling,
}

/// Runs the watch; the exit status says whether stalls were seen.
pub fn command(args: WatchArgs) -> ExitCode {
    if let Err(e) = check(&args) {
        errln!("nagless watch: {e}\nTry 'nagless watch --help'.");
        return ExitCode::from(2);
    }
    let duration = args.duration.unwrap_or(if args.serve.is_some() {
        Duration::ZERO
    } else {
        Duration::from_secs(10)
    });
    let Some(mut w) = open(&args) else {
        return ExitCode::from(2);
    };
    let mut metrics = match args.serve {
        Some(addr) => match serve(&args, addr, w.name()) {
            Some(m) => Some(m),
            None => return ExitCode::from(2),
        },
        None => None,
    };
    if metrics.is_some() || args.stalls {
        w.keep_stalls();
    }
    crate::sys::catch_interrupts();
    for c in w.caveats() {
        errln!("nagless watch: {c}");
    }
    let view = live::View {
        own_netns: Proc::host().net_ns(Pid::Own).unwrap_or(0),
        live: !args.json && std::io::stdout().is_terminal(),
    };
    // Buffered: a busy host's stall lines (--stalls) go out a block per refresh, not a write
    // per line (at 1,000 stalls/s, a system call each doubled the watcher's CPU).
    let mut stdout = io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let run = match live::run(
        &mut w,
        &args,
        duration,
        metrics.as_mut(),
        &view,
        &mut stdout,
    ) {
        Ok(run) => run,
        Err(e) => {
            errln!("nagless watch: sampling failed: {e}");
            return ExitCode::from(2);
        }
    };
    let stalled = summary::write(&w, &args, &run, &view, &mut stdout);
    if !stalled || args.serve.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The arguments' bounds, and that `--pid` names a process.
fn check(args: &WatchArgs) -> Result<(), String> {
    if args.interval.is_zero() || args.refresh < args.interval {
        return Err("--interval must be > 0 and no longer than --refresh".into());
    }
    if args.forget_after < args.refresh {
        return Err("--forget-after must be at least --refresh".into());
    }
    if args.scan_interval < args.interval || args.scan_interval > Duration::from_secs(10) {
        return Err("--scan-interval must be between --interval and 10s".into());
    }
    if let Some(pid) = args.pid {
        if !Proc::host().exists(pid) {
            return Err(format!("--pid {pid}: no such process"));
        }
    }
    Ok(())
}

/// Starts the backend asked for and says which runs (or why none could).
fn open(args: &WatchArgs) -> Option<Backend> {
    let filter = Filter {
        port: args.port,
        pid: args.pid,
    };
    let choice = match args.backend {
        BackendArg::Auto => Choice::Auto,
        BackendArg::Ebpf => Choice::Ebpf,
        BackendArg::Sampling => Choice::Sampling,
    };
    match Backend::open(choice, filter) {
        Ok((mut w, why)) => {
            errln!("nagless watch: {why}");
            w.set_scan_interval(args.scan_interval);
            Some(w)
        }
        Err(e) => {
            errln!("nagless watch: {e}");
            None
        }
    }
}

/// `--serve`: the metrics, served on `addr` (with `--web-config`'s TLS and passwords); `None`
/// (said why) if the configuration or the address is refused.
fn serve(args: &WatchArgs, addr: std::net::SocketAddr, backend: &'static str) -> Option<Metrics> {
    let mut m = Metrics::new(Limits {
        forget_after: args.forget_after,
        max_series: args.max_series as usize,
    });
    m.build_info(backend);
    let web = match &args.web_config {
        None => WebConfig::default(),
        Some(path) => match WebConfig::load(path) {
            Ok(w) => w,
            Err(e) => {
                errln!("nagless watch: --web-config {e}");
                return None;
            }
        },
    };
    let scheme = if web.tls.is_some() { "https" } else { "http" };
    let auth = if web.auth.is_some() {
        ", basic authentication required"
    } else {
        ""
    };
    match Exporter::start(addr, web, m.page()) {
        Ok(e) => errln!(
            "nagless watch: serving Prometheus metrics on {scheme}://{}/metrics{auth}",
            e.addr()
        ),
        Err(e) => {
            errln!("nagless watch: --serve: {e}");
            return None;
        }
    }
    Some(m)
}
