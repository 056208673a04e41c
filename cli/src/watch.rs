//! `nagless watch`: find processes stalling on Nagle and delayed ACK, live, from the kernel's
//! per-socket TCP state (no capture, no restart).

use std::io::{self, IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nagless_watch::backend::{Backend, Choice};
use nagless_watch::metrics::{Limits, Metrics};
use nagless_watch::serve::Exporter;
use nagless_watch::web_config::WebConfig;
use nagless_watch::{procs, Filter, Row, StallEvent};

use crate::parse_duration;

pub const WATCH_HELP: &str = "\
BACKENDS
  --backend auto (the default) uses eBPF where it loads (root or CAP_BPF+CAP_PERFMON, a
  kernel with BTF and BPF trampolines), else sampling, and says which it took and why.
  eBPF: programs on kernel tracepoints (sock:sock_send_length after each send; tcp:tcp_probe
  and net:net_dev_queue on the ACK path) note each write TCP holds behind unacknowledged data
  (time, bytes, pid, tid, uid, cgroup) and report it when an ACK releases it; the same rule as
  below judges it. Its cost follows sends and held writes, not sockets; it misses no hold,
  sees every network namespace, and its CONNS column counts the connections that stalled.
  Its summary gives the kernel programs' own run time. Sampling: as below.

HOW IT WORKS (sampling)
  It reads TCP sockets' tcp_info through netlink sock_diag (what `ss -ti` shows; how often:
  below) and follows each socket's held writes: bytes written but not sent (notsent) while
  earlier data is unacknowledged and the congestion window has room. When the peer's ACK
  releases them (the ACK arrives and the bytes leave), the hold's length less the path's
  round trip (min_rtt; the smoothed RTT counts the delayed ACKs themselves) is how late that
  ACK came. It is a stall when the held bytes are less than the MSS and the ACK came 30 ms or
  more late (Linux's shortest delayed-ACK timer is 40 ms), with no zero window and no loss
  recovery: the rule `nagless doctor` applies to captures (the nagless-stall-rule crate).

WHAT SAMPLING CAN AND CANNOT SEE
  Every SCAN_INTERVAL (100 ms) it asks the kernel for every ESTABLISHED and CLOSE_WAIT socket
  (listening ones only when a new connection appears); between those listings it looks up,
  each by its exact identity, only the sockets that had data in flight (unacknowledged or
  unsent bytes) in the last 2 s, every INTERVAL (2 ms); with none, it sleeps until the next
  listing. So an idle host costs little, and the cost follows the busy sockets.
  It sees the sending side: a stall shows on the socket whose write waits, on this host. A
  hold shorter than INTERVAL can be missed, and each stall's length is known to within one
  INTERVAL (the default 2 ms is fine for 40 ms and 200 ms delayed-ACK timers). On a
  connection idle for 2 s or more, the first stall after the pause is seen only from the
  listing that finds it busy (up to SCAN_INTERVAL late): shortened, or missed. A remote
  sender waiting for this host's delayed ACKs does not show here (capture at either end and
  use `nagless doctor`).

CONTAINERS
  Every network namespace named by /proc/PID/ns/net (each container, each Kubernetes pod) is
  entered once to list its sockets; new ones are found every 2 s, gone ones dropped. Rows
  name the namespace and, when the owner's cgroup names one, the container (Docker,
  containerd, CRI-O, Podman ids). Entering takes root (CAP_SYS_ADMIN, CAP_SYS_PTRACE);
  without it only the watcher's own namespace is listed, and it says so. The eBPF backend
  sees the stalls of every namespace in the kernel; it enters them only to list their
  listening ports (whether a row serves its port), and names the namespace and container of
  the writing process from /proc/PID.

PERMISSIONS
  Without root, every socket is still sampled, but only your own processes' sockets can be
  attributed (other users' /proc/PID/fd are unreadable); theirs show as `uid N`. Run as root
  (or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH) to name every process.

PROMETHEUS
  With --serve ADDR (127.0.0.1:9911, or :9911 for every address) it runs until stopped
  (SIGINT or SIGTERM, then a clean exit 0) and serves GET /metrics (OpenMetrics to clients
  that ask for it, as Prometheus does; Prometheus's text format to others):
  nagless_stalls_total, nagless_stall_seconds_total and the histogram
  nagless_stall_duration_seconds, labelled by process (command name), port (served local
  port, or remote port; `ephemeral` for one clients may get), role (serves|connects) and
  container; nagless_connections; the watcher's own cost (nagless_watch_cpu_seconds_total
  and the usual process_* metrics); nagless_build_info. A group unseen for --forget-after
  loses its series, and beyond --max-series groups the rest share one role=\"overflow\"
  series. Many clients are served at once, each with 10 s for its request. The page names
  every process: beyond loopback, serve it with TLS and a password (--web-config FILE, the
  web configuration file of Prometheus's exporters: tls_server_config, basic_auth_users).
  deploy/ holds a systemd unit, a Kubernetes DaemonSet, an example web configuration and
  alerting rules.

OUTPUT
  A table refreshed in place in a terminal (process, port, connections, stalls/s, time lost
  per second, worst stall, fix); JSON lines with --json (one per refresh, then a summary;
  with --stalls also one per stall, to be matched with those of `nagless doctor --json
  --every-stall --top 0` on a capture); a summary of the whole watch at the end, and the
  watcher's own CPU use.
  The process column names the program, not its interpreter: PID, then the script, module
  or main class (`4242 python3 app.py`, `77 java com.example.Main`, `java -jar app.jar`) or
  the executable's name, then its arguments as room allows; its container (`[0123456789ab]`)
  or, outside containers, its systemd unit (`901 redis-server (redis.service)`). A stalling
  row's FIX column points (`[1]`) to one line of advice under the table, shared by every row
  it fits; the summary groups the rows the same way.

EXAMPLES
  nagless watch                                  # the whole host for 10 s, then a summary
  nagless watch --duration 30s                   # for 30 s
  nagless watch --port 8080                      # one port (local or remote)
  nagless watch --pid 4242 --duration 0          # one process, until Ctrl-C
  nagless watch --json --stalls > stalls.jsonl   # JSON lines, one per refresh and per stall
  nagless watch --serve 127.0.0.1:9911           # Prometheus metrics, until stopped
  nagless watch --serve :9911 --web-config /etc/nagless/web.yml   # over TLS, with a password
  nagless watch --backend sampling               # sock_diag sampling even where eBPF loads

EXIT STATUS
  0 no stall seen (or stopped after --serve), 1 stalls seen, 2 bad arguments, no access to
  sock_diag, the --serve address unusable, or a --web-config file refused.";

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
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// How often to refresh the table (or print a JSON line).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    refresh: Duration,
    /// Only connections with this local or remote port.
    #[arg(long)]
    port: Option<u16>,
    /// Only this process's connections.
    #[arg(long)]
    pid: Option<u32>,
    /// JSON lines instead of the table.
    #[arg(long)]
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

/// CPU time this process used so far (user + system).
fn cpu_time() -> Option<Duration> {
    nagless_watch::own_process::read().map(|p| p.cpu)
}

/// What names a row's process, in at most `width` characters: its container, or its network
/// namespace when not ours; its pid; its program ([`procs::program_name`]: the script,
/// module or main class, then the arguments), and outside containers its systemd unit
/// (` (nginx.service)`). Too long, the program's end is cut (`...`), so the unit stays.
fn who(r: &Row, own_netns: u64, width: usize) -> String {
    let mut w = match &r.container {
        Some(c) => format!("[{}] ", &c[..c.len().min(12)]),
        // (0: unknown, an eBPF row whose process is gone.)
        None if r.netns != own_netns && r.netns != 0 => format!("[netns {}] ", r.netns),
        None => String::new(),
    };
    let Some(pid) = r.pid else {
        return cut(&format!("{w}uid {} (pid not readable)", r.uid), width);
    };
    let unit = match &r.container {
        Some(_) => None,
        None => r.cgroup.as_deref().and_then(procs::unit),
    }
    .map_or_else(String::new, |u| format!(" ({u})"));
    w += &pid.to_string();
    // (No program: an eBPF row whose process is gone, named `[task]` by its cmd.)
    if let Some(p) = r.program.as_ref().or(r.cmd.as_ref()) {
        let used = w.chars().count() + 1 + unit.chars().count();
        w = format!("{w} {}", cut(p, width.saturating_sub(used).max(16)));
    }
    cut(&(w + &unit), width)
}

/// `s` in at most `n` characters: cut from the right, ending in `...`.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    s.chars().take(n.saturating_sub(3)).collect::<String>() + "..."
}

/// The distinct fixes of the stalling rows, in the order they first come: rows that share
/// one (the same peer timer) point to one line (`[1]`), rather than each repeating it.
fn fixes(rows: &[Row]) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.stalls > 0 && !r.advice.is_empty()) {
        if !v.contains(&r.advice.as_str()) {
            v.push(&r.advice);
        }
    }
    v
}

fn port(r: &Row) -> String {
    if r.serves {
        format!(":{}", r.port)
    } else {
        format!("->:{}", r.port)
    }
}

/// The table of `rows` over `secs`: per row its process ([`who`]), port, counters and, if it
/// stalled, which of the [`fixes`] fits it (`[1]`); with `notes`, each fix once under it (the
/// summary gives them with its own lines instead).
fn table(rows: &[Row], secs: f64, own_netns: u64, notes: bool, out: &mut String) {
    use std::fmt::Write as _;
    let fixes = fixes(rows);
    let _ = writeln!(
        out,
        "{:<44} {:>8} {:>6} {:>9} {:>11} {:>9}  fix",
        "process", "port", "conns", "stalls/s", "lost ms/s", "worst ms"
    );
    for r in rows {
        let fix = match fixes.iter().position(|f| r.stalls > 0 && *f == r.advice) {
            Some(i) => format!("[{}]", i + 1),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{:<44} {:>8} {:>6} {:>9.1} {:>11.1} {:>9.1}  {fix}",
            who(r, own_netns, 44),
            port(r),
            r.connections,
            r.stalls as f64 / secs,
            r.lost_ms / secs,
            r.worst_ms
        );
    }
    if notes && !fixes.is_empty() {
        out.push('\n');
        for (i, f) in fixes.iter().enumerate() {
            let _ = writeln!(out, "[{}] {f}", i + 1);
        }
    }
}

/// The summary's lines on the rows that stalled: each row's process (in full), port, stalls
/// and time lost, grouped by fix; under each group, once, its peers' timer and the fix,
/// numbered as in the table.
fn stalled_lines(stalled: &[Row], own_netns: u64, pins: &[Pin], out: &mut String) {
    use std::fmt::Write as _;
    let fixes = fixes(stalled);
    // (Rows without a fix, whose timer was not judged, last.)
    for (i, fix) in fixes.iter().map(|f| Some(*f)).chain([None]).enumerate() {
        let rows: Vec<&Row> = stalled
            .iter()
            .filter(|r| fix.map_or(!fixes.contains(&r.advice.as_str()), |f| r.advice == f))
            .collect();
        for r in &rows {
            let _ = writeln!(
                out,
                "{} {}: {} stall(s), {:.1} ms lost",
                who(r, own_netns, usize::MAX),
                port(r),
                r.stalls,
                r.lost_ms
            );
            match pins.iter().find(|p| p.covers(r)) {
                Some(p) => {
                    let _ = writeln!(
                        out,
                        "  a `nagless fix` covers its new connections ({})",
                        p.what
                    );
                }
                None => {
                    if let Some(cmd) = fix_command(r) {
                        let _ = writeln!(out, "  repair it live: {cmd}");
                    }
                }
            }
        }
        if let (Some(fix), Some(r)) = (fix, rows.first()) {
            let timer = r.ack_timer.map_or("a delayed-ACK timer", |t| t.describe());
            let peers = if rows.len() == 1 {
                "peer ACKs"
            } else {
                "peers ACK"
            };
            let _ = writeln!(out, "  {peers} with {timer}.\n  fix [{}]: {fix}", i + 1);
        }
    }
}

/// A `nagless fix` on this host (pinned with `--persist`, or running): which cgroup
/// (relative to the cgroup v2 mount, as rows name theirs), which ports, and what it sets.
struct Pin {
    cgroup: String,
    ports: Vec<u16>,
    what: String,
}

impl Pin {
    /// Every fix on this host that sets TCP_NODELAY: pinned ones, then running ones (a
    /// `nagless fix` attached to a cgroup), each with its ports, read from its own map.
    /// None when there is no cgroup v2.
    fn all() -> Vec<Pin> {
        let Ok(root) = nagless_fix::target::cgroup2_root() else {
            return Vec::new();
        };
        let relative =
            |dir: &std::path::Path| Some(format!("/{}", dir.strip_prefix(&root).ok()?.display()));
        let pinned = nagless_fix::attach::pinned(&root);
        let mut pins: Vec<Pin> = pinned
            .iter()
            .filter_map(|p| {
                let (action, ports) = p.config?.action();
                let cgroup = relative(p.cgroup.as_ref()?)?;
                (action.nodelay).then(|| Pin {
                    cgroup,
                    ports: ports.as_slice().to_vec(),
                    what: format!("pinned: {} on {}", action.describe(), p.dir.display()),
                })
            })
            .collect();
        let pinned_ids: Vec<u64> = pinned
            .iter()
            .filter_map(|p| nagless_fix::attach::cgroup_id(p.cgroup.as_ref()?).ok())
            .collect();
        for run in nagless_fix::attach::running() {
            if pinned_ids.contains(&run.cgroup) {
                continue;
            }
            // A fix whose options cannot be read, or that sets no TCP_NODELAY (a delayed-ACK
            // bound), covers no held write: its row is told the command as usual.
            let Some((action, ports)) = run.config.map(|c| c.action()) else {
                continue;
            };
            let Some(dir) = nagless_fix::attach::find_cgroup(&root, run.cgroup) else {
                continue;
            };
            if let (true, Some(cgroup)) = (action.nodelay, relative(&dir)) {
                pins.push(Pin {
                    what: format!("running: {} on {}", action.describe(), dir.display()),
                    cgroup,
                    ports: ports.as_slice().to_vec(),
                });
            }
        }
        pins
    }

    /// Whether the pin sets TCP_NODELAY on the row's new connections: the row's cgroup is
    /// the pin's or under it, and the pin takes every port or the row's.
    fn covers(&self, r: &Row) -> bool {
        let under = r.cgroup.as_deref().is_some_and(|c| {
            c == self.cgroup
                || self.cgroup == "/"
                || c.strip_prefix(self.cgroup.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        });
        under && (self.ports.is_empty() || self.ports.contains(&r.port))
    }
}

/// The `nagless fix` command that repairs a stalling row's process live (its held writes:
/// TCP_NODELAY): by container, systemd unit or pid, narrowed to the row's port.
fn fix_command(r: &Row) -> Option<String> {
    let who = if let Some(c) = &r.container {
        format!("--container {}", &c[..c.len().min(12)])
    } else if let Some(u) = r.cgroup.as_deref().and_then(nagless_watch::procs::unit) {
        format!("--unit {u}")
    } else {
        format!("--pid {}", r.pid?)
    };
    Some(format!("nagless fix {who} --port {} --nodelay", r.port))
}

/// One stall as a JSON line (`--stalls`), serialized straight from the event.
#[derive(serde::Serialize)]
struct StallLine<'a> {
    r#type: &'static str,
    time_unix_s: f64,
    pid: Option<u32>,
    comm: &'a Option<String>,
    container: &'a Option<String>,
    port: u16,
    serves: bool,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
    held: u32,
    lost_ms: f64,
    ack_timer: Option<nagless_doctor::rule::AckTimer>,
}

fn write_stall(out: &mut impl io::Write, e: &StallEvent) -> io::Result<()> {
    let line = StallLine {
        r#type: "stall",
        time_unix_s: e
            .at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        pid: e.key.pid,
        comm: &e.comm,
        container: &e.container,
        port: e.key.port,
        serves: e.key.serves,
        local: e.local,
        remote: e.remote,
        held: e.stall.held,
        lost_ms: e.stall.lost_us as f64 / 1000.0,
        ack_timer: e.stall.timer,
    };
    serde_json::to_writer(&mut *out, &line).map_err(io::Error::from)?;
    out.write_all(b"\n")
}

fn json_rows(rows: &[Row], secs: f64) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["stalls_per_s"] = (r.stalls as f64 / secs).into();
            v["lost_ms_per_s"] = (r.lost_ms / secs).into();
            v
        })
        .collect()
}

/// Runs the watch; the exit status says whether stalls were seen.
pub fn command(args: WatchArgs) -> ExitCode {
    if args.interval.is_zero() || args.refresh < args.interval {
        errln!("nagless watch: --interval must be > 0 and no longer than --refresh");
        return ExitCode::from(2);
    }
    if args.forget_after < args.refresh {
        errln!("nagless watch: --forget-after must be at least --refresh");
        return ExitCode::from(2);
    }
    if args.scan_interval < args.interval || args.scan_interval > Duration::from_secs(10) {
        errln!("nagless watch: --scan-interval must be between --interval and 10s");
        return ExitCode::from(2);
    }
    if let Some(pid) = args.pid {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            errln!("nagless watch: --pid {pid}: no such process");
            return ExitCode::from(2);
        }
    }
    let filter = Filter {
        port: args.port,
        pid: args.pid,
    };
    let duration = args.duration.unwrap_or(if args.serve.is_some() {
        Duration::ZERO
    } else {
        Duration::from_secs(10)
    });
    let choice = match args.backend {
        BackendArg::Auto => Choice::Auto,
        BackendArg::Ebpf => Choice::Ebpf,
        BackendArg::Sampling => Choice::Sampling,
    };
    let mut w = match Backend::open(choice, filter) {
        Ok((mut w, why)) => {
            errln!("nagless watch: {why}");
            w.set_scan_interval(args.scan_interval);
            w
        }
        Err(e) => {
            errln!("nagless watch: {e}");
            return ExitCode::from(2);
        }
    };
    let interval = match w {
        Backend::Ebpf(_) => args.interval.max(Duration::from_millis(50)),
        Backend::Sampling(_) => args.interval,
    };
    let mut metrics = None;
    if let Some(addr) = args.serve {
        let mut m = Metrics::new(Limits {
            forget_after: args.forget_after,
            max_series: args.max_series as usize,
        });
        m.build_info(w.name());
        let web = match &args.web_config {
            None => WebConfig::default(),
            Some(path) => match WebConfig::load(path) {
                Ok(w) => w,
                Err(e) => {
                    errln!("nagless watch: --web-config {e}");
                    return ExitCode::from(2);
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
                return ExitCode::from(2);
            }
        }
        metrics = Some(m);
    }
    if metrics.is_some() || args.stalls {
        w.keep_stalls();
    }
    crate::sys::catch_interrupts();
    if nagless_watch::procs::euid() != Some(0) && w.denied_processes() > 0 {
        errln!(
            "nagless watch: not root: {} processes' sockets cannot be attributed (shown as `uid N`), and other network namespaces (containers) cannot be entered; run as root, or with CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_SYS_ADMIN, to see them",
            w.denied_processes()
        );
    }
    let (_, not_entered, why) = w.namespaces();
    if not_entered > 0 {
        errln!(
            "nagless watch: {not_entered} network namespaces (containers) not entered ({}): {}; run as root, or with CAP_SYS_ADMIN and CAP_SYS_PTRACE",
            why.map_or_else(|| "unknown".to_owned(), |k| io::Error::from(k).to_string()),
            match w {
                Backend::Ebpf(_) => "their stalls are seen, but not which ports they serve",
                Backend::Sampling(_) => "their sockets are not watched",
            }
        );
    }
    let own_netns = nagless_watch::netns::netns_of("self").unwrap_or(0);
    let live = !args.json && std::io::stdout().is_terminal();
    let start = Instant::now();
    let cpu0 = cpu_time();
    let (mut samples, mut overruns, mut sockets_max) = (0u64, 0u64, 0usize);
    let mut busy = Duration::ZERO;
    let mut next = Instant::now();
    let mut next_refresh = start + args.refresh;
    let mut window_start = start;
    // Buffered: a busy host's stall lines (--stalls) go out a block per refresh, not a write
    // per line (at 1,000 stalls/s, a system call each doubled the watcher's CPU).
    let mut stdout = io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut error = None;
    let (mut last_sockets, mut full_samples) = (0, 0u64);
    let mut idle;
    loop {
        let t = Instant::now();
        match w.sample() {
            Ok(s) => {
                if s.full {
                    sockets_max = sockets_max.max(s.sockets);
                    last_sockets = s.sockets;
                    full_samples += 1;
                }
                idle = s.busy == 0 && matches!(w, Backend::Sampling(_));
                let mut write = args.stalls;
                for e in w.take_stalls() {
                    if let Some(m) = &mut metrics {
                        m.stall(&e);
                    }
                    // (stdout closed: the metrics still count; the refresh below stops.)
                    write = write && write_stall(&mut stdout, &e).is_ok();
                }
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
        busy += t.elapsed();
        samples += 1;
        let now = Instant::now();
        if now >= next_refresh {
            let secs = now.duration_since(window_start).as_secs_f64();
            window_start = now;
            next_refresh += args.refresh;
            let rows = w.take_window();
            if let Some(m) = &mut metrics {
                m.window(&rows);
                m.watcher(nagless_watch::own_process::read(), last_sockets);
            }
            let res = if args.json {
                let line = serde_json::json!({
                    "type": "window",
                    "t_s": now.duration_since(start).as_secs_f64(),
                    "window_s": secs,
                    "rows": json_rows(&rows, secs),
                });
                writeln!(stdout, "{line}")
            } else if live {
                let mut out = String::from("\x1b[H\x1b[J");
                let what = match &w {
                    Backend::Ebpf(e) => format!("{} kernel reports (eBPF)", e.events()),
                    Backend::Sampling(_) => format!(
                        "{sockets_max} sockets, sampled every {interval:?} ({samples} samples)"
                    ),
                };
                out += &format!(
                    "nagless watch: {:.0} s, {what}{}\n\n",
                    now.duration_since(start).as_secs_f64(),
                    args.port.map(|p| format!(", port {p}")).unwrap_or_default()
                );
                table(&rows, secs, own_netns, true, &mut out);
                write!(stdout, "{out}")
            } else {
                Ok(())
            };
            if res.is_err() {
                break; // stdout closed: stop quietly
            }
            let _ = stdout.flush();
        }
        if crate::sys::interrupted() || (!duration.is_zero() && start.elapsed() >= duration) {
            break;
        }
        // Nothing busy: nothing to look at until the next listing (sampling; eBPF drains
        // its reports every interval).
        next += if idle { args.scan_interval } else { interval };
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            overruns += 1;
            next = now;
        }
    }
    if let Some(e) = error {
        errln!("nagless watch: sampling failed: {e}");
        return ExitCode::from(2);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = match (cpu0, cpu_time()) {
        (Some(a), Some(b)) => (b - a).as_secs_f64() / elapsed * 100.0,
        _ => f64::NAN,
    };
    let (listed, not_entered, _) = w.namespaces();
    let totals = w.totals();
    let stalled: Vec<Row> = totals.iter().filter(|r| r.stalls > 0).cloned().collect();
    let cost = match &w {
        Backend::Ebpf(e) => {
            let c = e.counters();
            let kernel = e.kernel_cost().map_or(String::new(), |(t, runs)| {
                format!(
                    "; in the kernel {runs} program runs, {:.1} ms ({:.3}% of one core)",
                    t.as_secs_f64() * 1000.0,
                    t.as_secs_f64() / elapsed * 100.0
                )
            });
            format!(
                "eBPF in {elapsed:.1} s, on the whole host: {} held writes followed, {} released by an ACK, {} sent without one, {} long holds reported ({} lost); watcher CPU {cpu:.1}% of one core{kernel}",
                c.holds, c.released, c.sent_without_ack, c.reported, c.lost
            )
        }
        Backend::Sampling(_) => format!(
            "{samples} samples of up to {sockets_max} sockets ({full_samples} full listings, the rest lookups of busy sockets) in {listed} network namespace(s) in {elapsed:.1} s: {:.2} ms per sample, {overruns} late; watcher CPU {cpu:.1}% of one core",
            busy.as_secs_f64() * 1000.0 / samples.max(1) as f64
        ),
    };
    let res = if args.json {
        let line = serde_json::json!({
            "type": "summary",
            "backend": w.name(),
            "kernel": match &w {
                Backend::Ebpf(e) => serde_json::json!({
                    "counters": e.counters(),
                    "program_runs": e.kernel_cost().map(|c| c.1),
                    "program_ms": e.kernel_cost().map(|c| c.0.as_secs_f64() * 1000.0),
                }),
                Backend::Sampling(_) => serde_json::Value::Null,
            },
            "duration_s": elapsed,
            "samples": samples,
            "full_listings": full_samples,
            "sockets_max": sockets_max,
            "namespaces": listed,
            "matched": !totals.is_empty(),
            "namespaces_not_entered": not_entered,
            "sample_ms_mean": busy.as_secs_f64() * 1000.0 / samples.max(1) as f64,
            "late_samples": overruns,
            "cpu_percent": cpu,
            "rows": json_rows(&totals, elapsed),
        });
        writeln!(stdout, "{line}")
    } else {
        let mut out = String::new();
        if live {
            out += "\x1b[H\x1b[J";
        }
        out += &format!("nagless watch: summary of {elapsed:.1} s\n\n");
        if totals.is_empty() && (args.port.is_some() || args.pid.is_some()) {
            out += &format!(
                "nothing matched: no connection{}{} was seen\n",
                args.port
                    .map(|p| format!(" with port {p}"))
                    .unwrap_or_default(),
                args.pid
                    .map(|p| format!(" of process {p}"))
                    .unwrap_or_default()
            );
        } else if stalled.is_empty() {
            out += "no Nagle/delayed-ACK stall seen";
            out += &match args.port {
                Some(p) => format!(" on port {p}"),
                None => String::new(),
            };
            out += "\n";
        } else {
            table(&stalled, elapsed, own_netns, false, &mut out);
            out += "\n";
            stalled_lines(&stalled, own_netns, &Pin::all(), &mut out);
        }
        out += &format!("\n{cost}\n");
        write!(stdout, "{out}")
    };
    let _ = res.and_then(|_| stdout.flush());
    if stalled.is_empty() || args.serve.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagless_doctor::rule::AckTimer;

    fn row(pid: u32, program: &str, port: u16, stalls: u64, timer: Option<AckTimer>) -> Row {
        Row {
            pid: Some(pid),
            cmd: Some(format!("/usr/local/bin/long/path/to/{program}")),
            program: Some(program.into()),
            port,
            serves: true,
            netns: 1,
            cgroup: Some("/".into()),
            connections: 1,
            stalls,
            lost_ms: stalls as f64 * 40.0,
            ack_timer: timer,
            advice: timer.map_or(String::new(), |t| format!("fix for {t:?}")),
            ..Row::default()
        }
    }

    #[test]
    fn the_process_column_names_the_program_then_cuts_its_arguments() {
        let mut r = row(
            4242,
            "python3 app.py --workers 4 --port 8080 --verbose",
            80,
            0,
            None,
        );
        assert_eq!(
            who(&r, 1, 44),
            "4242 python3 app.py --workers 4 --port 80..."
        );
        assert_eq!(
            who(&r, 1, usize::MAX),
            "4242 python3 app.py --workers 4 --port 8080 --verbose"
        );
        // A systemd unit stays when the program is cut.
        r.cgroup = Some("/system.slice/app.service".into());
        assert_eq!(
            who(&r, 1, 44),
            "4242 python3 app.py --worke... (app.service)"
        );
        // A container names it instead.
        r.container = Some("0123456789abcdef".repeat(4));
        r.cgroup = Some(format!(
            "/system.slice/docker-{}.scope",
            "0123456789abcdef".repeat(4)
        ));
        r.program = Some("nginx".into());
        assert_eq!(who(&r, 1, 44), "[0123456789ab] 4242 nginx");
        // Another network namespace; a process that is gone (its cmd: `[task]`).
        let gone = Row {
            program: None,
            cmd: Some("[java]".into()),
            netns: 7,
            ..row(77, "", 80, 0, None)
        };
        assert_eq!(who(&gone, 1, 44), "[netns 7] 77 [java]");
        let unknown = Row {
            pid: None,
            uid: 1000,
            ..Row::default()
        };
        assert_eq!(who(&unknown, 0, 44), "uid 1000 (pid not readable)");
    }

    #[test]
    fn each_fix_is_given_once_for_the_rows_it_fits() {
        let linux = Some(AckTimer::Linux40ms);
        let rows = [
            row(1, "python3 a.py", 8000, 10, linux),
            row(
                2,
                "java com.example.Main",
                9000,
                5,
                Some(AckTimer::Classic200ms),
            ),
            row(3, "node server.js", 3000, 2, linux),
            row(4, "redis-server", 6379, 0, None),
        ];
        let mut t = String::new();
        table(&rows, 1.0, 1, true, &mut t);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].ends_with("  fix"), "{t}");
        assert!(
            lines[1].starts_with("1 python3 a.py ") && lines[1].ends_with("  [1]"),
            "{t}"
        );
        assert!(lines[2].ends_with("  [2]"), "{t}");
        assert!(lines[3].ends_with("  [1]"), "{t}");
        assert!(
            lines[4].ends_with("0.0  "),
            "no fix for a row without stalls: {t}"
        );
        assert_eq!(
            &lines[5..],
            ["", "[1] fix for Linux40ms", "[2] fix for Classic200ms"]
        );
        assert_eq!(t.matches("fix for Linux40ms").count(), 1, "{t}");

        let mut s = String::new();
        // A fix pinned on node's cgroup covers it; the others are told the command.
        let pins = [Pin {
            cgroup: "/apps".into(),
            ports: vec![3000],
            what: "pinned: TCP_NODELAY on /sys/fs/bpf/nagless-fix/7".into(),
        }];
        let mut rows = rows;
        rows[2].cgroup = Some("/apps/node".into());
        rows[1].cgroup = Some("/system.slice/java.service".into());
        stalled_lines(&rows[..3], 1, &pins, &mut s);
        assert_eq!(
            s,
            "1 python3 a.py :8000: 10 stall(s), 400.0 ms lost\n  \
             repair it live: nagless fix --pid 1 --port 8000 --nodelay\n\
             3 node server.js :3000: 2 stall(s), 80.0 ms lost\n  \
             a `nagless fix` covers its new connections (pinned: TCP_NODELAY on /sys/fs/bpf/nagless-fix/7)\n  \
             peers ACK with a 40 ms delayed-ACK timer, as Linux and FreeBSD (since 2020) have.\n  \
             fix [1]: fix for Linux40ms\n\
             2 java com.example.Main (java.service) :9000: 5 stall(s), 200.0 ms lost\n  \
             repair it live: nagless fix --unit java.service --port 9000 --nodelay\n  \
             peer ACKs with a 100-200 ms delayed-ACK timer, as Windows (200 ms) and macOS (100 ms) have.\n  \
             fix [2]: fix for Classic200ms\n"
        );
        let mut t = String::new();
        table(&rows[..3], 1.0, 1, false, &mut t);
        assert!(
            !t.contains("fix for"),
            "the summary's table points to its lines: {t}"
        );
    }
}
