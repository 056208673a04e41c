//! `nagless lab`: reproduce the published cases strategy by strategy, with reports.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use nagless_lab::{
    check_pair, report, run_plan, Case, Link, Path, Pattern, Plan, Scale, Strategy, SCENARIOS,
};

use crate::usage;

pub const LAB_HELP: &str = "\
SCENARIOS (default: all but custom)
  split-write     1024 B sent as K writes (K = 1, 10, 100, 1000), answered alike; 10 round trips
  bgp-burst       connect, OPEN/KEEPALIVE, 255 UPDATEs + End-of-RIB; time connect -> End-of-RIB
  framed-window   4098 B messages through a 4096 B receiver window (tiny-tail) and 4098 (aligned)
  pipelined-read  32 MB read as 8 KiB requests at depth 1, 2, 10; header and data as two writes
  http-keepalive  request in one write; response header then 100 B body; C = 1, 10 connections
  multiplexed     4 writer threads share one connection, 40 B requests, 64 in flight, a reader
                  thread; the server answers each with its own write (cork: TCP_CORK around
                  each request; msgmore is nodelay here; nagless: FlushPolicy::clocked)
  The glue cases (reports of 2025-2026; the strategy is one program's, its peers are fixed):
  sse-stream         a server streams 32 SSE events per request, 2 ms apart, each flushed
  tls-first-request  new rustls TLS 1.3 connections: tickets, then the first answer
  nodelay-server     a TCP_NODELAY server; its Nagle client writes header then body
  relay-hop          a relay whose upstream hop lacks TCP_NODELAY, between NODELAY ends
  custom          your own exchange: --client PATTERN --server PATTERN [--rounds N]

STRATEGIES (default: all)
  nagle     kernel default          nodelay   TCP_NODELAY
  cork      TCP_CORK around bursts   msgmore   TCP_NODELAY + MSG_MORE on all but the last write
  quickack  receiver re-arms TCP_QUICKACK after every read
  nagless   the nagless library, default policy
  run       glue cases only: the program as shipped, in a process of its own under
            `nagless run` (nodelay-server: `nagless run --ack-delay-max 0`)

PATTERNS (custom)
  Comma-separated steps per round: wN writes N bytes in one call, rN reads exactly N bytes.
  Each side must read what the other writes. Write-write-read:
    nagless lab custom --client w100,w100,r100 --server r200,w100

PATHS
  Loopback (MSS ~64 KiB). --mss N sets TCP_MAXSEG on both ends (1448 = Ethernet); by default
  split-write, bgp-burst and framed-window also run at MSS 1448.
  --rtt 20ms runs every case between two network namespaces joined by an emulated link (needs
  root or CAP_NET_ADMIN): one-way delay RTT/2 each way, --rate 100mbit with a drop-tail queue
  of one bandwidth-delay product (--queue BYTES), --mtu 1500, --loss 0.5% (seeded: --seed N).
  A list (--rtt 1ms,10ms,50ms) runs a sweep. Example:
    sudo nagless lab split-write --rtt 1ms,20ms --rate 100mbit
  --peer-ack-delay 200ms (or windows, macos) makes the server end acknowledge as a host whose
  delayed-ACK timer is longer than Linux's 40 ms: the link holds its pure ACKs to that timer.
    sudo nagless lab bgp-burst --rtt 4ms --peer-ack-delay windows

EXIT STATUS
  0 success, 1 a run failed, 2 bad arguments.";

#[derive(clap::Args)]
pub struct LabArgs {
    /// Scenario to run (default: every scenario but custom).
    scenario: Option<String>,
    /// Strategies to compare, comma-separated (default: all).
    #[arg(short, long, value_delimiter = ',')]
    strategy: Vec<String>,
    /// Run every default case small and once: well under a minute.
    #[arg(short, long)]
    quick: bool,
    /// Runs per case and strategy (default 3, or 1 with --quick); medians are reported.
    #[arg(long)]
    repeat: Option<usize>,
    /// Time limit of one open-ended run, e.g. 1500ms or 2s (a bare number is ms, as the older
    /// spelling --limit-ms took; default 1500ms, or 300ms with --quick; on an emulated path 20
    /// round trips, at least 300 ms and at most that).
    #[arg(long, alias = "limit-ms", value_name = "DUR", value_parser = parse_limit)]
    limit: Option<Duration>,
    /// Only this path: TCP_MAXSEG on both ends (e.g. 1448); default: loopback, plus 1448 where segments matter.
    #[arg(long)]
    mss: Option<u32>,
    /// split-write: writes per message (default: 1, 10, 100, 1000).
    #[arg(long)]
    k: Option<usize>,
    /// Client pattern for custom, e.g. w100,w100,r100.
    #[arg(long)]
    client: Option<String>,
    /// Server pattern for custom, e.g. r200,w100.
    #[arg(long)]
    server: Option<String>,
    /// Rounds for custom and split-write.
    #[arg(long)]
    rounds: Option<usize>,
    /// Print the results as JSON on stdout (schema in docs/lab-json.md); the tables then go
    /// to stderr. As `--json` in doctor and watch.
    #[arg(short, long, conflicts_with_all = ["csv", "json_out"])]
    json: bool,
    /// Write the results as JSON to FILE ('-' for stdout).
    #[arg(long, value_name = "FILE")]
    json_out: Option<String>,
    /// Print the results as CSV on stdout; the tables then go to stderr.
    #[arg(long, conflicts_with = "csv_out")]
    csv: bool,
    /// Write the results as CSV to FILE ('-' for stdout).
    #[arg(long, value_name = "FILE")]
    csv_out: Option<String>,
    /// Write a self-contained HTML report with SVG charts to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<String>,
    /// Emulated path round-trip times, comma-separated (e.g. 1ms,20ms): run every case across
    /// two network namespaces joined by an emulated link instead of loopback (needs root).
    #[arg(long, value_delimiter = ',', value_name = "RTT", value_parser = parse_rtt)]
    rtt: Vec<Duration>,
    /// Emulated link rate, e.g. 100mbit, 1gbit, 500kbit (default: unlimited).
    #[arg(long, value_name = "RATE", value_parser = parse_rate, requires = "rtt")]
    rate: Option<u64>,
    /// Emulated link MTU, bytes (576..=65535).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(576..=65535), requires = "rtt")]
    mtu: u32,
    /// Random loss on the emulated link, each direction, e.g. 0.5%.
    #[arg(long, value_name = "PERCENT", value_parser = parse_loss, requires = "rtt")]
    loss: Option<u32>,
    /// Drop-tail queue of the emulated link, bytes (default: one bandwidth-delay product).
    #[arg(long, value_name = "BYTES", requires = "rtt")]
    queue: Option<u64>,
    /// Seed of the emulated link's loss (runs with the same seed lose the same packets).
    #[arg(long, default_value_t = 1, requires = "rtt")]
    seed: u64,
    /// The server end's delayed-ACK timer on the emulated link, as a host that is not Linux
    /// would run it: a duration (8ms..=1s) or `windows` (200 ms) or `macos` (100 ms).
    #[arg(long, value_name = "DUR", value_parser = parse_peer_ack_delay, requires = "rtt")]
    peer_ack_delay: Option<Duration>,
    /// Run each published case in its text's conditions and print the text's figure beside
    /// ours, with a verdict (as root also on emulated paths: BIRD's 3.7 ms path to a 200 ms
    /// peer, a LAN, a 30 ms path; source 004 drives Debian's wrk).
    #[arg(long, conflicts_with_all = ["scenario", "client", "server", "k", "mss"])]
    seeds: bool,
    /// Pin both ends of each connection to this CPU (default: the last CPU).
    #[arg(long, value_name = "CPU", conflicts_with = "no_pin")]
    pin: Option<usize>,
    /// Let the scheduler place client and server threads (cross-CPU wake-ups add noise).
    #[arg(long)]
    no_pin: bool,
    /// No progress bar or progress lines.
    #[arg(long)]
    no_progress: bool,
}

fn plan(args: &LabArgs) -> anyhow::Result<Plan> {
    let scale = if args.quick {
        Scale::Quick
    } else {
        Scale::Full
    };
    let mut plan = Plan::defaults(scale);
    if args.seeds {
        plan.cases = nagless_lab::seeds::cases(scale);
    }
    if !args.strategy.is_empty() {
        plan.strategies = args
            .strategy
            .iter()
            .map(|s| s.parse::<Strategy>().map_err(usage))
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(name) = &args.scenario {
        if !SCENARIOS.contains(&name.as_str()) {
            return Err(usage(format!(
                "unknown scenario '{name}' (expected one of: {})",
                SCENARIOS.join(", ")
            )));
        }
        if name == "custom" {
            let (Some(c), Some(s)) = (&args.client, &args.server) else {
                return Err(usage("custom needs --client PATTERN and --server PATTERN, e.g. --client w100,w100,r100 --server r200,w100"));
            };
            let cp = Pattern::parse(c).map_err(|e| usage(format!("--client: {e}")))?;
            let sp = Pattern::parse(s).map_err(|e| usage(format!("--server: {e}")))?;
            check_pair(&cp, &sp).map_err(|e| usage(e.to_string()))?;
            let case = Case::Custom {
                client: cp.to_string(),
                server: sp.to_string(),
                rounds: args.rounds.unwrap_or(50),
            };
            plan.cases = vec![(case, Path::LOOPBACK)];
        } else {
            plan.cases = Plan::default_cases(Some(name), scale);
        }
    } else if args.client.is_some() || args.server.is_some() {
        return Err(usage("--client/--server go with the custom scenario: nagless lab custom --client ... --server ..."));
    }
    if args.scenario.as_deref().is_some_and(|n| n != "custom")
        && (args.client.is_some() || args.server.is_some())
    {
        return Err(usage("--client/--server go with the custom scenario only"));
    }
    if let Some(k) = args.k {
        if !(1..=1024).contains(&k) {
            return Err(usage("--k must be 1..=1024"));
        }
        let mut kept: Vec<(Case, Path)> = Vec::new();
        for (mut c, p) in std::mem::take(&mut plan.cases) {
            if let Case::SplitWrite { k: kk, .. } = &mut c {
                *kk = k;
                if !kept.contains(&(c.clone(), p)) {
                    kept.push((c, p));
                }
            }
        }
        plan.cases = kept;
        if plan.cases.is_empty() {
            return Err(usage("--k applies to split-write"));
        }
    }
    if let Some(rounds) = args.rounds {
        // Refused where no case has rounds (bgp-burst, framed-window, ...), not dropped.
        if !plan.cases.iter().any(|(c, _)| {
            matches!(
                c,
                Case::SplitWrite { .. }
                    | Case::Custom { .. }
                    | Case::NodelayServer { .. }
                    | Case::RelayHop { .. }
            )
        }) {
            return Err(usage(
                "--rounds applies to split-write, nodelay-server, relay-hop and custom",
            ));
        }
        for (c, _) in &mut plan.cases {
            if let Case::SplitWrite { rounds: r, .. }
            | Case::NodelayServer { rounds: r }
            | Case::RelayHop { rounds: r } = c
            {
                *r = rounds.max(1);
            }
        }
    }
    if let Some(mss) = args.mss {
        if !(88..=32767).contains(&mss) {
            return Err(usage(
                "--mss must be 88..=32767 (the kernel's TCP_MAXSEG range)",
            ));
        }
        let mut seen = Vec::new();
        for (c, mut p) in std::mem::take(&mut plan.cases) {
            // (The glue cases' programs make their own sockets: loopback as it is.)
            if !c.is_glue() {
                p.mss = Some(mss);
            }
            if !seen.contains(&(c.clone(), p)) {
                seen.push((c, p));
            }
        }
        plan.cases = seen;
    }
    if !args.rtt.is_empty() {
        if let Some((c, _)) = plan.cases.iter().find(|(c, _)| c.is_glue()) {
            if args.scenario.is_some() {
                return Err(usage(format!(
                    "{} runs on loopback only: its programs live beside the lab, not in the emulated path's namespaces",
                    c.scenario()
                )));
            }
        }
        // Every case once per link (the loopback MSS variants collapse: the MTU decides);
        // the glue cases stay on loopback.
        let mut cases: Vec<Case> = Vec::new();
        for (c, p) in std::mem::take(&mut plan.cases) {
            if c.is_glue() {
                plan.cases.push((c, p));
                continue;
            }
            if !cases.contains(&c) {
                cases.push(c);
            }
        }
        for rtt in &args.rtt {
            let link = Link {
                rtt_us: rtt.as_micros() as u64,
                rate_bps: args.rate,
                mtu: args.mtu,
                loss_ppm: args.loss.unwrap_or(0),
                queue_bytes: args.queue,
                seed: args.seed,
                peer_ack_delay_us: args.peer_ack_delay.map(|d| d.as_micros() as u64),
            };
            for c in &cases {
                plan.cases.push((
                    c.clone(),
                    Path {
                        mss: args.mss,
                        link: Some(link),
                    },
                ));
            }
        }
    }
    if let Some(r) = args.repeat {
        if r == 0 {
            return Err(usage("--repeat must be at least 1"));
        }
        plan.repeats = r;
    }
    if args.no_pin {
        plan.pin = None;
    } else if let Some(cpu) = args.pin {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpu >= cpus {
            return Err(usage(format!(
                "--pin {cpu}: this machine has CPUs 0..={}",
                cpus - 1
            )));
        }
        plan.pin = Some(cpu);
    }
    if let Some(limit) = args.limit {
        plan.limit = limit.max(Duration::from_millis(1));
        plan.limit_fixed = true;
    }
    // The glue cases' `run` rows start this executable's `lab-end` under `nagless run`,
    // which reaches dynamically linked programs only (not the static build of
    // `scripts/install`).
    if let Ok(exe) = std::env::current_exe() {
        match crate::run::unreachable_reason(&exe) {
            None => plan.exe = Some(exe),
            Some(why)
                if plan.strategies.contains(&Strategy::Run)
                    && plan.cases.iter().any(|(c, _)| c.is_glue()) =>
            {
                errln!("nagless lab: the glue cases have no `run` row here: {why}");
            }
            Some(_) => {}
        }
    }
    Ok(plan)
}

fn write_out(path: &str, content: &str) -> anyhow::Result<()> {
    if path == "-" {
        match std::io::stdout().write_all(content.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                std::process::exit(crate::pipe::CLOSED_PIPE)
            }
            r => Ok(r?),
        }
    } else {
        std::fs::write(path, content).with_context(|| format!("cannot write {path}"))
    }
}

/// `--limit`: a duration; a bare number is ms (`--limit-ms 1500`, the older spelling).
fn parse_limit(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(_) => crate::parse_duration(s),
    }
}

/// The lab's arguments as this version reads them, from a command line that may use the
/// older spellings: `--json FILE` and `--csv FILE` (now `--json-out FILE`, `--csv-out FILE`;
/// `--json` and `--csv` alone print to stdout, as `--json` does in doctor and watch). A word
/// after `--json` or `--csv` that is neither an option nor a scenario is taken as the older
/// spelling's FILE.
pub fn older_spellings(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use std::ffi::OsString;
    let mut out: Vec<OsString> = Vec::with_capacity(args.len());
    let mut words = args.into_iter().peekable();
    while let Some(w) = words.next() {
        let text = w.to_string_lossy();
        if text == "--" {
            out.push(w);
            out.extend(words);
            break;
        }
        let renamed = |flag: &str| format!("{flag}-out");
        if let Some((flag @ ("--json" | "--csv"), file)) = text.split_once('=') {
            out.push(format!("{}={file}", renamed(flag)).into());
            continue;
        }
        if text == "--json" || text == "--csv" {
            let file = words.peek().map(|n| n.to_string_lossy().into_owned());
            if let Some(file) = file
                .filter(|f| (f == "-" || !f.starts_with('-')) && !SCENARIOS.contains(&f.as_str()))
            {
                out.push(renamed(&text).into());
                out.push(file.into());
                words.next();
                continue;
            }
        }
        out.push(w);
    }
    out
}

/// An RTT: a duration of 0 to 10 s.
fn parse_rtt(s: &str) -> Result<Duration, String> {
    let d = crate::parse_duration(s)?;
    if d > Duration::from_secs(10) {
        return Err(format!("{s:?}: an RTT must be 0..=10 s"));
    }
    Ok(d)
}

/// A delayed-ACK timer: `200ms`, or a named host (`windows` 200 ms, `macos` 100 ms).
fn parse_peer_ack_delay(s: &str) -> Result<Duration, String> {
    let d = match s.to_ascii_lowercase().as_str() {
        "windows" => Duration::from_millis(200),
        "macos" => Duration::from_millis(100),
        _ => crate::parse_duration(s)
            .map_err(|e| format!("{e} (or a host: windows = 200ms, macos = 100ms)"))?,
    };
    if !(Duration::from_millis(8)..=Duration::from_secs(1)).contains(&d) {
        return Err(format!("{s:?}: a delayed-ACK timer must be 8ms..=1s"));
    }
    Ok(d)
}

/// `100mbit`, `1gbit`, `500kbit`, `2000000` (bits per second).
fn parse_rate(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let (num, mult) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(u, m)| lower.strip_suffix(u).map(|n| (n.to_string(), *m)))
        .unwrap_or((lower.clone(), 1.0));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a rate such as 100mbit"))?;
    let bps = v * mult;
    if !(1e3..=1e11).contains(&bps) {
        return Err(format!("{s:?}: a rate must be 1kbit..=100gbit"));
    }
    Ok(bps as u64)
}

/// `0.5%` (or `0.005`) as parts per million.
fn parse_loss(s: &str) -> Result<u32, String> {
    let v: f64 = match s.strip_suffix('%') {
        Some(p) => p.parse::<f64>().map(|p| p / 100.0),
        None => s.parse(),
    }
    .map_err(|_| format!("{s:?} is not a loss such as 0.5%"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("{s:?}: loss must be 0..=100%"));
    }
    Ok((v * 1e6).round() as u32)
}

/// Refuses a report file that cannot be written before the run, not after it: its folder
/// must exist and the file must open for writing (a file this check made is removed again).
fn check_writable(flag: &str, path: &str) -> anyhow::Result<()> {
    if path == "-" {
        return Ok(());
    }
    let existed = std::path::Path::new(path).exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| usage(format!("{flag} {path}: cannot write it ({e})")))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

pub fn command(args: LabArgs) -> anyhow::Result<bool> {
    let mut plan = plan(&args)?;
    let stdout = Some("-".to_owned());
    let json = if args.json { &stdout } else { &args.json_out };
    let csv = if args.csv { &stdout } else { &args.csv_out };
    for (flag, path) in [
        ("--json-out", json),
        ("--csv-out", csv),
        ("--html", &args.html),
    ] {
        if let Some(path) = path {
            check_writable(flag, path)?;
        }
    }
    if args.seeds {
        // Also on paths like the texts describe (a LAN, a 30 ms path), where we may.
        let scale = if args.quick {
            Scale::Quick
        } else {
            Scale::Full
        };
        plan.cases.extend(nagless_lab::seeds::path_cases(scale));
        // Source 004 drives Debian's wrk: without it, left out (as the paths are without
        // root), not failed.
        if crate::run::resolve("wrk").is_none() {
            errln!("nagless lab: source 004 left out: it drives wrk, which is not installed (Debian package wrk)");
            plan.cases
                .retain(|(c, _)| !matches!(c, Case::HttpWrk { .. }));
        }
    }
    let nets = match nagless_lab::make_paths(&plan) {
        Ok(nets) => nets,
        Err(e @ nagless_netpath::PathError::NotPermitted(_)) if args.seeds => {
            errln!("nagless lab: loopback only ({e})");
            plan.cases.retain(|(_, p)| p.link.is_none());
            Vec::new()
        }
        Err(e @ nagless_netpath::PathError::NotPermitted(_)) => {
            return Err(usage(format!("{e}; loopback (no --rtt) needs neither")))
        }
        Err(e) => return Err(e.into()),
    };
    if !nets.is_empty() {
        // Ctrl-C stops after the run in progress; the paths' namespaces are removed on the
        // way out.
        crate::sys::catch_interrupts();
    }
    let info = report::RunInfo::here(&std::env::args().collect::<Vec<_>>().join(" "), &plan);
    let total = plan.run_count();
    let bar = if args.no_progress || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let hidden = bar.is_hidden();
    let mut last_scenario = String::new();
    let tables = run_plan(
        &plan,
        &nets,
        &crate::sys::interrupted,
        &mut |done, _, what| {
            bar.set_position(done as u64);
            bar.set_message(what.to_string());
            // Without a bar (CI, pipes), say which case is running now and then.
            let scenario = what.split(' ').next().unwrap_or("").to_string();
            if hidden && !args.no_progress && !what.is_empty() && scenario != last_scenario {
                errln!("[{done}/{total}] {scenario}");
                last_scenario = scenario;
            }
        },
    );
    bar.finish_and_clear();
    if crate::sys::interrupted() {
        errln!("nagless lab: interrupted; the emulated paths are removed");
        return Ok(false);
    }
    let to_stdout = [json, csv].iter().any(|o| o.as_deref() == Some("-"));
    let text = report::text(&tables) + &report::sweep_text(&tables);
    if to_stdout {
        err!("{text}");
        errln!("\n{}", report::corner_summary(&tables));
    } else {
        out!("{text}");
        outln!("\n{}", report::corner_summary(&tables));
    }
    if args.seeds {
        let seeds = nagless_lab::seeds::report(&tables);
        if to_stdout {
            err!("{seeds}");
        } else {
            out!("{seeds}");
        }
    }
    if let Some(path) = json {
        let doc = report::json(&tables, serde_json::to_value(&info)?);
        write_out(path, &(serde_json::to_string_pretty(&doc)? + "\n"))?;
    }
    if let Some(path) = csv {
        write_out(path, &report::csv(&tables))?;
    }
    if let Some(path) = &args.html {
        let page = report::html(&tables, &info).map_err(anyhow::Error::msg)?;
        write_out(path, &page)?;
    }
    Ok(tables.iter().all(|t| t.errors.is_empty()))
}
