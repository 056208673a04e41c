//! The end of the watch: the summary of the whole watch (the stalled and ACK-clocked rows,
//! those that held their own writes, their fixes and what the watch cost), as text or as a
//! JSON line. The exit status says whether stalls were seen; ACK-clocked rows and a sender's
//! own holds are reported, and do not change it.

use std::io::Write;

use nagless_watch::backend::{Backend, Run};
use nagless_watch::Row;

use super::json::json_rows;
use super::live::View;
use super::pin::Pin;
use super::table::{accept_lines, cork_lines, stalled_lines, table, waited, waits_lines};
use super::turns::{any_notable, turn_lines};
use super::WatchArgs;

/// Writes the summary; whether any stall was seen.
pub(super) fn write(
    w: &Backend,
    args: &WatchArgs,
    run: &Run,
    view: &View,
    stdout: &mut impl Write,
) -> bool {
    let elapsed = run.elapsed_s;
    let (listed, not_entered, _) = w.namespaces();
    let totals = w.totals();
    let stalled: Vec<Row> = totals.iter().filter(|r| r.stalls > 0).cloned().collect();
    // Stalling, ACK-clocked or holding its own writes: what the summary's table lists.
    let flagged: Vec<Row> = totals
        .iter()
        .filter(|r| r.stalls > 0 || r.ack_clocked.is_some() || r.sender_holds > 0)
        .cloned()
        .collect();
    let res = if args.json {
        let line = serde_json::json!({
            "type": "summary",
            "backend": w.name(),
            "kernel": w.kernel(),
            "duration_s": elapsed,
            "samples": run.samples,
            "full_listings": run.full_samples,
            "sockets_max": run.sockets_max,
            "namespaces": listed,
            "matched": !totals.is_empty(),
            "namespaces_not_entered": not_entered,
            "sample_ms_mean": run.sample_ms_mean(),
            "late_samples": run.late,
            "sockets_unseen": w.sockets_unseen(),
            "cpu_percent": run.cpu_percent,
            "rows": json_rows(&totals, elapsed),
        });
        writeln!(stdout, "{line}")
    } else {
        let mut out = String::new();
        if view.live {
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
        } else if flagged.is_empty() {
            out += "no Nagle/delayed-ACK stall seen";
            out += &match args.port {
                Some(p) => format!(" on port {p}"),
                None => String::new(),
            };
            out += "\n";
        } else {
            table(&flagged, elapsed, view.own_netns, false, &mut out);
            out += "\n";
            stalled_lines(&flagged, view.own_netns, &Pin::all(), &mut out);
        }
        // Writes their own senders held (eBPF).
        if totals.iter().any(|r| r.sender_holds > 0) {
            out += "\nwrites their senders held themselves (not Nagle):\n";
            cork_lines(&totals, view.own_netns, &mut out);
        }
        // Listeners that accepted too slowly.
        if totals.iter().any(|r| !r.accept_queue.is_quiet()) {
            out += "\nlisteners whose accept queue was full, or dropped handshakes (connects waited; not Nagle):\n";
            accept_lines(&totals, view.own_netns, &mut out);
        }
        // Where the time went besides: the kernel's account (sampling backend).
        if totals.iter().any(waited) {
            out += "\nwhere the time went besides stalls, as the kernel counted it (tcp_info):\n";
            waits_lines(&totals, elapsed, view.own_netns, &mut out);
        }
        // Whose turn the time was: servers slow to answer, clients waiting.
        if any_notable(&totals) {
            out +=
                "\nwhose turn the time was (a server's time to answer, a client's wait for it):\n";
            turn_lines(&totals, view.own_netns, &mut out);
        }
        out += &format!("\n{}\n", w.cost(run));
        write!(stdout, "{out}")
    };
    let _ = res.and_then(|_| stdout.flush());
    !stalled.is_empty()
}
