//! The watch's text: the table of rows (each row's process, port, counters and which fix
//! fits it) and the summary's lines on the rows that stalled.

use nagless_doctor::rule::CLOCKED_FIX;
use nagless_watch::Row;

use super::pin::{fix_command, Pin};

/// What names a row's process, in at most `width` characters: its pod (`[namespace/pod]`) or
/// container, or its network namespace when not ours; its pid; its program ([`program_name`](nagless_watch::procs::program_name): the script,
/// module or main class, then the arguments), and outside containers its systemd unit
/// (` (nginx.service)`). Too long, the program's end is cut (`...`), so the unit stays.
pub(super) fn who(r: &Row, own_netns: u64, width: usize) -> String {
    let mut w = match (&r.pod, &r.container) {
        (Some(p), _) => format!("[{}/{}] ", p.namespace, p.name),
        (None, Some(c)) => format!("[{}] ", &c[..c.len().min(12)]),
        // (0: unknown, an eBPF row whose process is gone.)
        (None, None) if r.netns != own_netns && r.netns != 0 => format!("[netns {}] ", r.netns),
        (None, None) => String::new(),
    };
    let Some(pid) = r.pid else {
        return cut(&format!("{w}uid {} (pid not readable)", r.uid), width);
    };
    let unit = r.unit().map_or_else(String::new, |u| format!(" ({u})"));
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
/// An ACK-clocked row's fix comes after them ([`CLOCKED_FIX`]).
fn fixes(rows: &[Row]) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.stalls > 0 && !r.advice.is_empty()) {
        if !v.contains(&r.advice.as_str()) {
            v.push(&r.advice);
        }
    }
    if rows.iter().any(|r| r.ack_clocked.is_some()) {
        v.push(CLOCKED_FIX);
    }
    v
}

/// A fix's line under the table.
fn note(fix: &str) -> String {
    if fix == CLOCKED_FIX {
        format!("ACK-clocked, not a stall: writes wait for the peer's ACKs, one round trip after another; {fix}")
    } else {
        fix.to_owned()
    }
}

/// The fix column of a row: the mark of its stalls' fix, and of the ACK-clocked fix with the
/// share of the time its writes waited (`[2] ACK-clocked 61%`).
fn marks(r: &Row, fixes: &[&str]) -> String {
    let mut m = match fixes.iter().position(|f| r.stalls > 0 && *f == r.advice) {
        Some(i) => format!("[{}]", i + 1),
        None => String::new(),
    };
    if let (Some(c), Some(i)) = (r.ack_clocked, fixes.iter().position(|f| *f == CLOCKED_FIX)) {
        if !m.is_empty() {
            m.push(' ');
        }
        m += &format!("[{}] ACK-clocked {:.0}%", i + 1, c.share * 100.0);
    }
    m
}

pub(super) fn port(r: &Row) -> String {
    if r.serves {
        format!(":{}", r.port)
    } else {
        format!("->:{}", r.port)
    }
}

/// The table of `rows` over `secs`: per row its process ([`who`]), port, counters and, if it
/// stalled, which of the [`fixes`] fits it (`[1]`); with `notes`, each fix once under it (the
/// summary gives them with its own lines instead).
pub(super) fn table(rows: &[Row], secs: f64, own_netns: u64, notes: bool, out: &mut String) {
    use std::fmt::Write as _;
    let fixes = fixes(rows);
    let _ = writeln!(
        out,
        "{:<44} {:>8} {:>6} {:>9} {:>11} {:>9}  fix",
        "process", "port", "conns", "stalls/s", "lost ms/s", "worst ms"
    );
    for r in rows {
        let mut fix = marks(r, &fixes);
        for w in waits_tag(r).into_iter().chain(super::turns::turns_tag(r)) {
            if !fix.is_empty() {
                fix.push(' ');
            }
            fix += &w;
        }
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
            let _ = writeln!(out, "[{}] {}", i + 1, note(f));
        }
    }
}

/// The `nagless fix` command that bounds the delayed ACKs of process `pid` live, and the
/// `nagless run` that does it at its next start.
fn receiver_fix_command(pid: u32) -> String {
    format!("nagless fix --pid {pid} --ack-delay-max 8ms (or start it as `nagless run --ack-delay-max 0 -- CMD`)")
}

/// The summary's lines on the rows that stalled: each row's process (in full), port, stalls
/// and time lost, grouped by fix; under each group, once, its peers' timer and the fix,
/// numbered as in the table.
pub(super) fn stalled_lines(stalled: &[Row], own_netns: u64, pins: &[Pin], out: &mut String) {
    use std::fmt::Write as _;
    let fixes = fixes(stalled);
    // (Rows without a fix, whose timer was not judged, last.)
    for (i, fix) in fixes.iter().map(|f| Some(*f)).chain([None]).enumerate() {
        if fix == Some(CLOCKED_FIX) {
            continue;
        }
        let rows: Vec<&Row> = stalled
            .iter()
            .filter(|r| r.stalls > 0)
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
            if let Some(rcv) = &r.acked_by {
                let _ = writeln!(
                    out,
                    "  its writes wait for the delayed ACKs of {} {} on this host: or repair that side live: {}",
                    rcv.pid,
                    rcv.comm,
                    receiver_fix_command(rcv.pid)
                );
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
    clocked_lines(stalled, own_netns, pins, &fixes, out);
}

/// A wait the kernel counted worth naming: this much time, µs.
const NOTABLE_WAIT_US: u64 = 20_000;

/// Whether `r`'s waits are worth a line: a window or a buffer that held its connections back
/// [`NOTABLE_WAIT_US`] or more, or losses.
pub(super) fn waited(r: &Row) -> bool {
    let w = &r.waits;
    w.rwnd_limited_us >= NOTABLE_WAIT_US
        || w.sndbuf_limited_us >= NOTABLE_WAIT_US
        || w.retransmits > 0
        || w.timeouts > 0
        || w.backoff > 0
}

/// A row's waits in the table's last column, when [`waited`] or it held its own writes: the
/// time the peers' windows and its own send buffers held it back (ms, as counted since the
/// last reading: the eBPF backend's readings can be further apart than a refresh), the
/// segments it sent again, and the writes its own cork held; the summary says what each
/// means.
fn waits_tag(r: &Row) -> Option<String> {
    if !waited(r) && r.sender_holds == 0 && r.accept_queue.is_quiet() {
        return None;
    }
    let w = &r.waits;
    let ms = |us: u64| us as f64 / 1000.0;
    let mut parts = Vec::new();
    let q = &r.accept_queue;
    if !q.is_quiet() {
        parts.push(format!(
            "accept queue full {:.1} s, {} handshake packet(s) dropped",
            q.full_us as f64 / 1e6,
            q.drops
        ));
    }
    if r.sender_holds > 0 {
        parts.push(format!("{} held by its own cork", r.sender_holds));
    }
    if w.rwnd_limited_us >= NOTABLE_WAIT_US {
        parts.push(format!("window {:.0} ms", ms(w.rwnd_limited_us)));
    }
    if w.sndbuf_limited_us >= NOTABLE_WAIT_US {
        parts.push(format!("buffer {:.0} ms", ms(w.sndbuf_limited_us)));
    }
    if w.retransmits > 0 || w.timeouts > 0 {
        parts.push(format!("{} resent", w.retransmits));
    }
    if w.backoff > 1 {
        parts.push(format!("backoff {}", w.backoff));
    }
    Some(format!("(not Nagle: {})", parts.join(", ")))
}

/// The summary's lines on where the rows' time went besides stalls, as the kernel counted it
/// (`tcp_info`): per row its busy time, what held it back and its losses, and what each
/// means.
pub(super) fn waits_lines(rows: &[Row], secs: f64, own_netns: u64, out: &mut String) {
    use std::fmt::Write as _;
    let secs = secs.max(1e-3);
    for r in rows.iter().filter(|r| waited(r)) {
        let w = &r.waits;
        let ms = |us: u64| us as f64 / 1000.0;
        let share = |us: u64| {
            if w.busy_us > 0 {
                format!(" ({:.0}% of it)", us as f64 * 100.0 / w.busy_us as f64)
            } else {
                String::new()
            }
        };
        let mut parts = vec![format!(
            "busy sending {:.1} ms/s over its {} connection(s)",
            ms(w.busy_us) / secs,
            r.connections
        )];
        let mut meaning: Vec<String> = Vec::new();
        // How far the kernel backed off (the most seen): its timeouts' doubling, or its
        // zero-window probes'.
        let backed_off = if w.backoff > 0 {
            format!(
                ", backed off up to {} time(s) in a row (each doubled the wait)",
                w.backoff
            )
        } else {
            String::new()
        };
        let probing = w.probes > 0 && w.timeouts == 0;
        if w.rwnd_limited_us >= NOTABLE_WAIT_US {
            let probes = if w.probes > 0 {
                let b = if probing { &backed_off[..] } else { "" };
                format!(", closed: {} zero-window probe(s){b}", w.probes)
            } else {
                String::new()
            };
            parts.push(format!(
                "held back by the peers' receive windows {:.1} ms{}{probes}",
                ms(w.rwnd_limited_us),
                share(w.rwnd_limited_us)
            ));
            meaning.push("the readers at the other end read slowly or not at all (look at them, or raise their receive buffers)".into());
        }
        if w.sndbuf_limited_us >= NOTABLE_WAIT_US {
            parts.push(format!(
                "by send buffers too small for the path {:.1} ms{}",
                ms(w.sndbuf_limited_us),
                share(w.sndbuf_limited_us)
            ));
            meaning.push(
                "its send buffers were too small for the path's round trip and rate, so the network waited for the program (raise its SO_SNDBUF and net.core.wmem_max if it sets one, else the maximum of net.ipv4.tcp_wmem)".into(),
            );
        }
        if w.retransmits > 0 || w.timeouts > 0 {
            let b = if probing { "" } else { &backed_off[..] };
            parts.push(format!(
                "{} segment(s) sent again, {} retransmission timeout(s){b}",
                w.retransmits, w.timeouts
            ));
            // (A connect's SYN sent again counts here too: a server whose listen queue is full
            // drops SYNs, and its clients wait 1 s, then 3 s, to connect.) A listener of this
            // host that dropped handshakes on the port it connects to is named: the row does not
            // say whether its connections go to it (a proxy may connect to the same port
            // elsewhere), so the loss's other causes stay.
            let full_listener = rows.iter().find(|l| {
                !r.serves
                    && l.serves
                    && l.port == r.port
                    && l.netns == r.netns
                    && l.accept_queue.drops > 0
            });
            let lost = "packets were lost: on the path, at a full receiver, or SYNs dropped by a server whose listen queue was full (its clients' connects wait 1 s, then 3 s): look at loss, and at the listeners' accept queues (`ss -lnt`: Recv-Q against Send-Q)";
            meaning.push(match full_listener {
                Some(l) => format!(
                    "{lost}; {} on :{} here dropped handshakes meanwhile (see its line): if these connections go to it, its full accept queue is where their SYNs went",
                    who(l, own_netns, usize::MAX),
                    l.port
                ),
                None => lost.to_owned(),
            });
        }
        let _ = writeln!(
            out,
            "{} {}: {}: {}; not Nagle",
            who(r, own_netns, usize::MAX),
            port(r),
            parts.join(", "),
            meaning.join("; ")
        );
    }
}

/// The summary's lines on the listeners whose accept queue was full (or to which connection
/// attempts were dropped): each row's process, port, how long and how full, the drops, what
/// it means and the fix.
pub(super) fn accept_lines(rows: &[Row], own_netns: u64, out: &mut String) {
    use std::fmt::Write as _;
    for r in rows.iter().filter(|r| !r.accept_queue.is_quiet()) {
        let q = &r.accept_queue;
        let full = if q.full_looks > 0 {
            format!(
                "was full for {:.1} s ({} look(s), up to {} connection(s) waiting to be accepted, backlog {})",
                q.full_us as f64 / 1e6,
                q.full_looks,
                q.most_queued,
                q.backlog
            )
        } else {
            format!(
                "held up to {} connection(s) waiting to be accepted (backlog {})",
                q.most_queued, q.backlog
            )
        };
        let _ = writeln!(
            out,
            "{} {}: its listener's accept queue {full}; {} handshake packet(s) dropped (SYNs, or a handshake's last ACK; each sent again counts again): its clients' connects wait for their SYN to be sent again (1 s after the first, then 3 s, 7 s), not Nagle: accept faster (more acceptor threads, or accept in a loop until EAGAIN), or raise the backlog (listen()'s argument; the kernel caps it at net.core.somaxconn)",
            who(r, own_netns, usize::MAX),
            port(r),
            q.drops,
        );
    }
}

/// The summary's lines on the rows that held their own writes (a cork the kernel's ceiling
/// released; eBPF only): each row's process, port, how many writes and how long, what it
/// means and the fix.
pub(super) fn cork_lines(rows: &[Row], own_netns: u64, out: &mut String) {
    use std::fmt::Write as _;
    for r in rows.iter().filter(|r| r.sender_holds > 0) {
        let _ = writeln!(
            out,
            "{} {}: {} write(s) held {:.0} ms each on average by its own cork (TCP_CORK, or a last send with MSG_MORE), with no ACK to come, until the kernel's ceiling sent them (200 ms, or the retransmission timeout when longer); not Nagle, and TCP_NODELAY does not end it: {}",
            who(r, own_netns, usize::MAX),
            port(r),
            r.sender_holds,
            r.sender_hold_ms / r.sender_holds as f64,
            nagless_doctor::rule::CORK_FIX
        );
    }
}

/// The summary's lines on the ACK-clocked rows: each row's process, port, and the cost in
/// the units users feel (how much of the time its writes queued behind the peer's ACKs),
/// with the command that repairs it live (or the `nagless fix` already covering it); then,
/// once, the fix, numbered as in the table.
fn clocked_lines(rows: &[Row], own_netns: u64, pins: &[Pin], fixes: &[&str], out: &mut String) {
    use std::fmt::Write as _;
    let Some(i) = fixes.iter().position(|f| *f == CLOCKED_FIX) else {
        return;
    };
    for r in rows {
        let Some(c) = r.ack_clocked else { continue };
        let _ = writeln!(
            out,
            "{} {}: ACK-clocked, not a stall: writes queued behind the peer's ACKs {:.0} % of the time ({:.0} ms/s), {} writes released one ACK at a time",
            who(r, own_netns, usize::MAX),
            port(r),
            c.share * 100.0,
            c.held_ms_per_s,
            c.releases
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
    let _ = writeln!(out, "  fix [{}]: {CLOCKED_FIX}", i + 1);
}

#[cfg(test)]
mod tests;
