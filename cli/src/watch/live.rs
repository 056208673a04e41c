//! The watch itself: samples the backend every interval (a scan interval when nothing is
//! busy), hands each stall to the metrics and `--stalls`, and every refresh writes the
//! window (the table in a terminal, a JSON line with `--json`), until the duration is up, an
//! interrupt comes or stdout closes.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use nagless_watch::backend::{Backend, Run};
use nagless_watch::metrics::Metrics;

use super::json::{json_rows, write_stall};
use super::table::table;
use super::WatchArgs;

/// How the watch is shown.
pub(super) struct View {
    /// This process's network namespace (rows in others name theirs).
    pub(super) own_netns: u64,
    /// A table refreshed in place in a terminal (not `--json`).
    pub(super) live: bool,
}

/// CPU time this process used so far (user + system).
fn cpu_time() -> Option<Duration> {
    nagless_watch::own_process::read().map(|p| p.cpu)
}

/// Watches for `duration` (0: until interrupted); what it counted, or the error sampling
/// failed with.
pub(super) fn run(
    w: &mut Backend,
    args: &WatchArgs,
    duration: Duration,
    mut metrics: Option<&mut Metrics>,
    view: &View,
    stdout: &mut impl Write,
) -> io::Result<Run> {
    let start = Instant::now();
    let cpu0 = cpu_time();
    let mut run = Run {
        interval: w.interval(args.interval),
        ..Run::default()
    };
    let mut next = Instant::now();
    let mut next_refresh = start + args.refresh;
    let mut window_start = start;
    let mut last_sockets = 0;
    // The fixes in force, listed every 10 s (BPF links: a few system calls each).
    let mut fixes_at: Option<Instant> = None;
    loop {
        let t = Instant::now();
        let s = w.sample()?;
        if s.full {
            run.sockets_max = run.sockets_max.max(s.sockets);
            last_sockets = s.sockets;
            run.full_samples += 1;
        }
        let idle = w.idle(&s);
        let mut write = args.stalls;
        for e in w.take_stalls() {
            if let Some(m) = &mut metrics {
                m.stall(&e);
            }
            // (stdout closed: the metrics still count; the refresh below stops.)
            write = write && write_stall(stdout, &e).is_ok();
        }
        run.sampling += t.elapsed();
        run.samples += 1;
        let now = Instant::now();
        if now >= next_refresh {
            let secs = now.duration_since(window_start).as_secs_f64();
            window_start = now;
            next_refresh += args.refresh;
            let rows = w.take_window();
            if let Some(m) = &mut metrics {
                m.window(&rows);
                m.watcher(nagless_watch::own_process::read(), last_sockets);
                m.blind_spots(nagless_watch::metrics::BlindSpots {
                    events_lost: w.kernel().map_or(0, |k| k.counters.lost),
                    late_samples: run.late,
                    namespaces_not_entered: w.namespaces().1,
                    processes_unattributed: w.denied_processes(),
                    sockets_unseen: w.sockets_unseen().unwrap_or(0),
                });
                if fixes_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    fixes_at = Some(Instant::now());
                    if let Ok(f) = crate::fix::in_force() {
                        m.fixes(&f.into_iter().map(|f| f.labels()).collect::<Vec<_>>());
                    }
                }
                // The policy agent's status: a small file, read every refresh.
                m.policy(&crate::fix::policy_status(std::path::Path::new(
                    crate::fix::STATE_DIR,
                )));
            }
            let t_s = now.duration_since(start).as_secs_f64();
            if refresh(w, args, &run, view, &rows, (t_s, secs), stdout).is_err() {
                break; // stdout closed: stop quietly
            }
            let _ = stdout.flush();
        }
        if crate::sys::interrupted() || (!duration.is_zero() && start.elapsed() >= duration) {
            break;
        }
        // Nothing busy: nothing to look at until the next listing, taken as soon as it is
        // made (sampling; eBPF drains its reports every interval).
        if idle {
            let until = (t + args.scan_interval).min(next_refresh);
            w.wait_idle(until.saturating_duration_since(Instant::now()));
            next = Instant::now();
            continue;
        }
        next += run.interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            run.late += 1;
            next = now;
        }
    }
    run.elapsed_s = start.elapsed().as_secs_f64();
    run.cpu_percent = match (cpu0, cpu_time()) {
        (Some(a), Some(b)) => (b - a).as_secs_f64() / run.elapsed_s * 100.0,
        _ => f64::NAN,
    };
    Ok(run)
}

/// Writes one window's rows, `t_s` into the watch and `secs` long: a JSON line, or the table
/// in a terminal (else nothing).
fn refresh(
    w: &Backend,
    args: &WatchArgs,
    run: &Run,
    view: &View,
    rows: &[nagless_watch::Row],
    (t_s, secs): (f64, f64),
    stdout: &mut impl Write,
) -> io::Result<()> {
    if args.json {
        let line = serde_json::json!({
            "type": "window",
            "t_s": t_s,
            "window_s": secs,
            "rows": json_rows(rows, secs),
        });
        writeln!(stdout, "{line}")
    } else if view.live {
        let mut out = String::from("\x1b[H\x1b[J");
        out += &format!(
            "nagless watch: {t_s:.0} s, {}{}\n\n",
            w.status(run),
            args.port.map(|p| format!(", port {p}")).unwrap_or_default()
        );
        table(rows, secs, view.own_netns, true, &mut out);
        write!(stdout, "{out}")
    } else {
        Ok(())
    }
}
