//! `nagless doctor CAPTURE`: find Nagle and delayed-ACK stalls in a packet capture.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use nagless_doctor::analysis::{Filter, Options};

pub const DOCTOR_HELP: &str = "\
CAPTURE
  pcap or pcapng from tcpdump, tshark or Wireshark, taken at either end of the path or between;
  plain, gzip or zstd (told by their first bytes); `-` reads stdin. Ethernet, Linux cooked
  (tcpdump -i any), raw IP and BSD loopback; IPv4 and IPv6; headers-only captures (-s 128) are
  enough. A capture cut short (a killed tcpdump) is analysed up to the cut, with a warning.
    tcpdump -i any -s 128 -w slow.pcap 'tcp port 8000'
    tcpdump -i any -s 128 -U -w - 'tcp port 8000' | nagless doctor -

WHAT IT LOOKS FOR
  delayed ACK  a pure ACK 30 to 500 ms (beyond the acker's side of the round trip) after the
               data it acknowledges
  stall        a write smaller than a full segment that Nagle held until such an ACK: it left
               as soon as the ACK reached its sender. Retransmissions (and their ACKs), SACK,
               zero windows, keep-alives and think time are told apart and named, not blamed
               on Nagle. The receiver's timer is named by the delays (40 ms: Linux, FreeBSD;
               100-200 ms: Windows, macOS) and by its packets' TTL (128: Windows, whatever
               the delay), the fix given for each.
  Patterns named: request split, header then body, tiny trailing frame.
  ACK-clocked  a verdict of its own, not a stall: a sender whose small writes queue behind
               Nagle and leave only as the peer's ACK of the last segment arrives (a client
               that shares one connection between threads or tasks, with many requests in
               flight). No timer is involved; each write waits about a round trip. The
               evidence (the share of small segments released at once by an ACK, writes seen
               to merge, Nagle not seen off), the estimated time writes queued, and the fix.

OUTPUT
  A line of totals, a table per server port (flows, flows with stalls, stalls, time lost,
  worst stall, delayed ACKs, retransmission timeouts, zero-window waits), then the flows with
  the most stalled time (--top), each with its evidence (frame numbers and times as Wireshark
  shows them; stalls in capture order, --sort delay for the longest first) and what to change
  at the sender or at the receiver. deploy/wireshark/nagless.lua marks the stalls of
  `--json --every-stall --top 0` in Wireshark (docs/doctor.md).

EXIT STATUS
  0 no stall found, 1 stalls, an ACK-clocked flow or a sender's own hold (a cork left on)
  found (the report says which), 2
  unreadable capture or bad arguments, 3 nothing to judge: the capture holds no packets, no TCP segment, or no flow the --filter matches (a
  CI gate must not read that as all clear).";

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// The capture file (pcap or pcapng, plain, gzip or zstd); `-` for stdin.
    capture: std::path::PathBuf,
    /// Print JSON (schema in docs/doctor-json.md) instead of the report.
    #[arg(short, long)]
    json: bool,
    /// Only this flow: its number in the report.
    #[arg(long, value_name = "N")]
    flow: Option<usize>,
    /// Only flows with this host and/or port on either side: 10.0.0.1, :8000, 10.0.0.1:8000,
    /// [::1]:8000. Repeat to require several.
    #[arg(short, long, value_name = "HOST:PORT")]
    filter: Vec<Filter>,
    /// Report this many flows in full, most stalled time first (0: all).
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10)]
    top: usize,
    /// Keep every stall of each flow in the JSON, not only the worst 32.
    #[arg(long)]
    every_stall: bool,
    /// List each flow's stalls in capture order (`time`, as Wireshark lists frames) or the
    /// longest first (`delay`). Which stalls are listed does not change: the 5 longest per
    /// flow in the report, the 32 longest (or all, --every-stall) in the JSON.
    #[arg(long, value_name = "time|delay", default_value = "time")]
    sort: nagless_doctor::analysis::StallOrder,
    /// Write an SVG timeline of the worst (or chosen) flow to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

/// The exit status when the capture holds nothing to judge.
const NOTHING_TO_JUDGE: u8 = 3;

/// Runs the doctor; the exit status says whether stalls were found.
pub fn command(args: DoctorArgs) -> ExitCode {
    match diagnose(&args) {
        Ok(code) => code,
        Err(msg) => {
            errln!("nagless doctor: {msg}");
            ExitCode::from(2)
        }
    }
}

fn diagnose(args: &DoctorArgs) -> Result<ExitCode, String> {
    let name = args.capture.display();
    let input = nagless_doctor::input::open(&args.capture)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    // Progress on stderr, when it is a terminal, for big or unsized inputs.
    let bar = match (input.file_size, input.compressed) {
        _ if !std::io::stderr().is_terminal() => ProgressBar::hidden(),
        (Some(n), false) if n < 64 << 20 => ProgressBar::hidden(),
        (Some(n), false) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        _ => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {bytes} of capture read, {bytes_per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    let src = input.reader;
    let opts = Options {
        top: if args.flow.is_some() { 0 } else { args.top },
        filters: args.filter.clone(),
        flow: args.flow,
        timeline: args.svg.is_some(),
        every_stall: args.every_stall,
        order: args.sort,
    };
    let d = nagless_doctor::diagnose_reader(src, opts, |n| bar.set_position(n))
        .map_err(|e| format!("{name}: {e}"))?;
    bar.finish_and_clear();
    if d.frames > 0 && d.tcp_segments == 0 && !d.unsupported_linktypes.is_empty() {
        return Err(format!(
            "{name}: none of its {} frames could be read: link type(s) {:?} are not supported (Ethernet, Linux cooked v1/v2, raw IP, BSD loopback are)",
            d.frames, d.unsupported_linktypes
        ));
    }
    if d.flows_judged_early > 0 {
        errln!(
            "nagless doctor: warning: more than {} flows were open at once in {name}: {} were judged before they ended (a later packet of one starts a new flow)",
            nagless_doctor::analysis::MAX_LIVE_FLOWS,
            d.flows_judged_early
        );
    }
    if let Some(why) = &d.damage {
        errln!(
            "nagless doctor: warning: {name} is cut or damaged; analysed the {} frames before it: {why}",
            d.frames
        );
    }
    if let Some(n) = args.flow {
        if d.flows.is_empty() {
            return Err(format!(
                "no flow {n} in {name} ({} flow(s) match; give a number from the report)",
                d.flows_matching
            ));
        }
    }
    if d.flows_total == 0 {
        let why = if !args.filter.is_empty() {
            format!(
                "no TCP flow of its {} segment(s) matches the filter(s) {}",
                d.tcp_segments,
                args.filter
                    .iter()
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        } else if d.frames == 0 {
            "it holds no packets".to_owned()
        } else if d.tcp_fragments > 0 {
            format!(
                "none of its {} frames is a whole TCP segment: {} are fragments of IP packets carrying TCP, which the doctor does not reassemble",
                d.frames, d.tcp_fragments
            )
        } else {
            format!("none of its {} frames is a TCP segment", d.frames)
        };
        errln!("nagless doctor: {name}: nothing to judge: {why}");
        return Ok(ExitCode::from(NOTHING_TO_JUDGE));
    }
    let out = if args.json {
        let doc = nagless_doctor::report::json(&d);
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n"
    } else {
        nagless_doctor::report::text(&d)
    };
    // A closed stdout (`| head`) ends the output quietly.
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|_| stdout.flush())
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(format!("cannot write the report: {e}")),
    }
    if let Some(path) = &args.svg {
        let Some(worst) = d.flows.first() else {
            return Err("the capture has no TCP flow to draw".into());
        };
        std::fs::write(path, nagless_doctor::report::svg(worst))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if d.stalls_total == 0 && d.flows_ack_clocked > 0 {
        errln!(
            "nagless doctor: no stall, but {} ACK-clocked flow(s): exit 1",
            d.flows_ack_clocked
        );
    }
    if d.stalls_total == 0 && d.flows_sender_held > 0 {
        errln!(
            "nagless doctor: no Nagle stall, but {} flow(s) whose sender held its own writes (a cork left on): exit 1",
            d.flows_sender_held
        );
    }
    Ok(
        if d.stalls_total > 0 || d.flows_ack_clocked > 0 || d.flows_sender_held > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}
