//! The `nagless` command: `nagless lab` reproduces Nagle/delayed-ACK stalls strategy by
//! strategy on loopback; `nagless run -- CMD` fixes unmodified programs with a preloaded shim;
//! `nagless doctor FILE` finds Nagle/delayed-ACK stalls in packet captures.

mod run;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use nagless_lab::pattern::{check_pair, Pattern};
use nagless_lab::scenario::SCENARIOS;
use nagless_lab::{report, run_plan, Case, Path, Plan, Scale, Strategy};

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
    Lab(LabArgs),
    /// Run an unmodified program with its TCP sockets coalesced (LD_PRELOAD shim).
    #[command(after_long_help = RUN_HELP)]
    Run(RunArgs),
    /// Find Nagle and delayed-ACK stalls in a packet capture (pcap or pcapng).
    #[command(after_long_help = DOCTOR_HELP)]
    Doctor(DoctorArgs),
}

const DOCTOR_HELP: &str = "\
CAPTURE
  pcap or pcapng, from tcpdump, tshark or Wireshark; Ethernet, Linux cooked (tcpdump -i any),
  raw IP and BSD loopback; IPv4 and IPv6; headers-only captures (-s 128) are enough:
    tcpdump -i any -s 128 -w slow.pcap 'tcp port 8000'

WHAT IT LOOKS FOR
  delayed ACK  a pure ACK 30 ms or more (beyond the round trip) after the data it acknowledges
  stall        a small write held by Nagle until such an ACK: the sender wrote, waited 30 ms or
               more for the ACK of its previous small segment, and sent right after it came
  Patterns named: request split, header then body, tiny trailing frame.

EXIT STATUS
  0 analysed (whether or not stalls were found), 2 unreadable or damaged capture, bad arguments.";

#[derive(clap::Args)]
struct DoctorArgs {
    /// The capture file.
    file: std::path::PathBuf,
    /// Print JSON (schema in docs/doctor-json.md) instead of the summary.
    #[arg(long)]
    json: bool,
    /// Only this flow: its number in the summary, or an address such as 127.0.0.1:8000.
    #[arg(long, value_name = "FLOW")]
    flow: Option<String>,
    /// Write an SVG timeline of the worst (or chosen) flow to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

fn doctor(args: DoctorArgs) -> anyhow::Result<bool> {
    let bytes = std::fs::read(&args.file)
        .map_err(|e| usage(format!("cannot read {}: {e}", args.file.display())))?;
    let diagnosis = nagless_doctor::diagnose(&bytes)
        .map_err(|e| usage(format!("{}: {e}", args.file.display())))?;
    let mut flows = nagless_doctor::report::ranked(&diagnosis);
    if let Some(sel) = &args.flow {
        flows.retain(|f| match sel.parse::<usize>() {
            Ok(n) => f.index == n,
            Err(_) => f.sides.iter().any(|s| &s.addr == sel),
        });
        if flows.is_empty() {
            return Err(usage(format!(
                "no flow '{sel}' in {} ({} flow(s); give a number from the summary or an address like 127.0.0.1:8000)",
                args.file.display(),
                diagnosis.flows.len()
            )));
        }
    }
    if args.json {
        let doc = nagless_doctor::report::json(&diagnosis, &flows);
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", nagless_doctor::report::text(&diagnosis, &flows));
    }
    if let Some(path) = &args.svg {
        let Some(worst) = flows.first() else {
            return Err(usage("the capture has no TCP flow to draw"));
        };
        std::fs::write(path, nagless_doctor::report::svg(worst))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(true)
}

const RUN_HELP: &str = "\
HOW IT WORKS
  CMD starts with libnagless_preload.so preloaded. Every TCP socket it creates, accepts or
  connects gets TCP_NODELAY; each burst of writes is held with TCP_CORK and released when the
  program turns to wait (read/recv, poll/select/epoll, close, shutdown, fork, exec) or after
  --linger-us at the latest. Unsent bytes stay in the kernel, never in a buffer of ours.
  The shim is carried inside the nagless executable and unpacked once to ~/.cache/nagless.
  Without nagless run: LD_PRELOAD=$(nagless run --print-shim) CMD (settings in NAGLESS_MODE,
  NAGLESS_STATS=1, NAGLESS_LOG=FILE, NAGLESS_LINGER_US).

EXAMPLES
  nagless run --stats -- python3 -m http.server --protocol HTTP/1.1 8000
  nagless run --mode nodelay -- ./vendor-daemon --port 179

EXIT STATUS
  CMD's own; 2 if CMD cannot be run or cannot be reached (static or Go binaries).";

#[derive(clap::Args)]
struct RunArgs {
    /// nagless (cork bursts, release on wait), cork (libautocork's rule: release on read and
    /// poll/select only), nodelay (set TCP_NODELAY only).
    #[arg(long, default_value = "nagless", value_parser = ["nagless", "cork", "nodelay"])]
    mode: String,
    /// Print per-process counters to stderr at exit.
    #[arg(long)]
    stats: bool,
    /// Append a debug trace to FILE.
    #[arg(long, value_name = "FILE")]
    log: Option<std::path::PathBuf>,
    /// Longest time a burst is held when the program neither reads nor polls, µs (50..=100000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=100_000))]
    linger_us: u64,
    /// Print the path of the shim library (for LD_PRELOAD by hand) and exit.
    #[arg(long, exclusive = true)]
    print_shim: bool,
    /// The program and its arguments.
    #[arg(
        last = true,
        required_unless_present = "print_shim",
        value_name = "CMD"
    )]
    cmd: Vec<std::ffi::OsString>,
}

const LAB_HELP: &str = "\
SCENARIOS (default: all but custom)
  split-write     1024 B sent as K writes (K = 1, 10, 100, 1000), answered alike; 10 round trips
  bgp-burst       connect, OPEN/KEEPALIVE, 255 UPDATEs + End-of-RIB; time connect -> End-of-RIB
  framed-window   4098 B messages through a 4096 B receiver window (tiny-tail) and 4098 (aligned)
  pipelined-read  32 MB read as 8 KiB requests at depth 1, 2, 10; header and data as two writes
  http-keepalive  request in one write; response header then 100 B body; C = 1, 10 connections
  custom          your own exchange: --client PATTERN --server PATTERN [--rounds N]

STRATEGIES (default: all)
  nagle     kernel default          nodelay   TCP_NODELAY
  cork      TCP_CORK around bursts   msgmore   TCP_NODELAY + MSG_MORE on all but the last write
  quickack  receiver re-arms TCP_QUICKACK after every read
  nagless   the nagless library, default policy

PATTERNS (custom)
  Comma-separated steps per round: wN writes N bytes in one call, rN reads exactly N bytes.
  Each side must read what the other writes. Write-write-read:
    nagless lab custom --client w100,w100,r100 --server r200,w100

PATHS
  Loopback (MSS ~64 KiB). --mss N sets TCP_MAXSEG on both ends (1448 = Ethernet); by default
  split-write, bgp-burst and framed-window also run at MSS 1448.

EXIT STATUS
  0 success, 1 a run failed, 2 bad arguments.";

#[derive(clap::Args)]
struct LabArgs {
    /// Scenario to run (default: every scenario but custom).
    scenario: Option<String>,
    /// Strategies to compare, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    strategy: Vec<String>,
    /// Run every default case small and once: well under a minute.
    #[arg(long)]
    quick: bool,
    /// Runs per case and strategy (default 3, or 1 with --quick); medians are reported.
    #[arg(long)]
    repeat: Option<usize>,
    /// Time limit of one open-ended run, ms (default 1500, or 300 with --quick).
    #[arg(long)]
    limit_ms: Option<u64>,
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
    /// Write the results as JSON to FILE ('-' for stdout); schema in docs/lab-json.md.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Write the results as CSV to FILE ('-' for stdout).
    #[arg(long, value_name = "FILE")]
    csv: Option<String>,
    /// Write a self-contained HTML report with SVG charts to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<String>,
    /// Run each source case's headline case and print the figures its text reports beside ours.
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

/// A usage error: exit status 2.
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Usage {}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    Usage(msg.into()).into()
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
            plan.cases = vec![(case, Path { mss: None })];
        } else {
            plan.cases = Plan::default_cases(Some(name), scale);
        }
    } else if args.client.is_some() || args.server.is_some() {
        return Err(usage("--client/--server go with the custom scenario: nagless lab custom --client ... --server ..."));
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
        for (c, _) in &mut plan.cases {
            if let Case::SplitWrite { rounds: r, .. } = c {
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
            p.mss = Some(mss);
            if !seen.contains(&(c.clone(), p)) {
                seen.push((c, p));
            }
        }
        plan.cases = seen;
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
    if let Some(ms) = args.limit_ms {
        plan.limit = Duration::from_millis(ms.max(1));
    }
    Ok(plan)
}

fn write_out(path: &str, content: &str) -> anyhow::Result<()> {
    if path == "-" {
        std::io::stdout().write_all(content.as_bytes())?;
        Ok(())
    } else {
        std::fs::write(path, content).with_context(|| format!("cannot write {path}"))
    }
}

fn lab(args: LabArgs) -> anyhow::Result<bool> {
    let plan = plan(&args)?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
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
    let tables = run_plan(&plan, &mut |done, _, what| {
        bar.set_position(done as u64);
        bar.set_message(what.to_string());
        // Without a bar (CI, pipes), say which case is running now and then.
        let scenario = what.split(' ').next().unwrap_or("").to_string();
        if hidden && !args.no_progress && !what.is_empty() && scenario != last_scenario {
            eprintln!("[{done}/{total}] {scenario}");
            last_scenario = scenario;
        }
    });
    bar.finish_and_clear();
    let to_stdout = [&args.json, &args.csv]
        .iter()
        .any(|o| o.as_deref() == Some("-"));
    let text = report::text(&tables);
    if to_stdout {
        eprint!("{text}");
        eprintln!("\n{}", report::corner_summary(&tables));
    } else {
        print!("{text}");
        println!("\n{}", report::corner_summary(&tables));
    }
    if args.seeds {
        let seeds = nagless_lab::seeds::report(&tables);
        if to_stdout {
            eprint!("{seeds}");
        } else {
            print!("{seeds}");
        }
    }
    if let Some(path) = &args.json {
        let meta = serde_json::json!({
            "command": command,
            "repeats": plan.repeats,
            "limit_ms": plan.limit.as_millis() as u64,
            "pin": plan.pin,
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        });
        let doc = report::json(&tables, meta);
        write_out(path, &(serde_json::to_string_pretty(&doc)? + "\n"))?;
    }
    if let Some(path) = &args.csv {
        write_out(path, &report::csv(&tables))?;
    }
    if let Some(path) = &args.html {
        let page = report::html(&tables, &command).map_err(anyhow::Error::msg)?;
        write_out(path, &page)?;
    }
    Ok(tables.iter().all(|t| t.errors.is_empty()))
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
        Command::Lab(args) => lab(args),
        Command::Doctor(args) => doctor(args),
        Command::Run(args) if args.print_shim => match run::find_shim() {
            Ok(path) => {
                println!("{}", path.display());
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                eprintln!("nagless run: {e}");
                return ExitCode::from(2);
            }
        },
        Command::Run(args) => {
            let opts = run::RunOptions {
                mode: args.mode,
                stats: args.stats,
                log: args.log,
                linger_us: args.linger_us,
            };
            let Err(e) = run::run(&opts, &args.cmd);
            eprintln!("nagless run: {e}");
            return ExitCode::from(2);
        }
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
