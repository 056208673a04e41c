//! Choosing the fix from what `nagless watch` sees ([`observe`]), when none is asked for:
//! the target's own writes held until a late ACK call for TCP_NODELAY; a local peer's writes
//! held until the target's late ACK call for a delayed-ACK bound on the target.

use std::collections::BTreeSet;
use std::fs;
use std::time::{Duration, Instant};

use nagless_watch::backend::{Backend, Choice};
use nagless_watch::Filter;

use crate::existing::sockets;
use crate::plan::{Action, Ports};
use crate::target::Target;

/// What a watch of the host saw of a target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// Stalls of the target's own writes (it sends, a peer's delayed ACK holds it).
    pub own: u64,
    /// Stalls of local peers' writes to the target's ports (its delayed ACK holds them).
    pub peers: u64,
}

impl Seen {
    /// The fix for what was seen: TCP_NODELAY for the target's own stalls, a delayed-ACK bound
    /// of two ticks for its peers'; `None` when nothing stalled.
    pub fn action(&self, tick: Duration) -> Option<Action> {
        let a = Action {
            nodelay: self.own > 0,
            ack_delay_max: (self.peers > 0).then_some(2 * tick),
        };
        (a.nodelay || a.ack_delay_max.is_some()).then_some(a)
    }
}

/// The local ports of the TCP sockets `pids` hold (from `/proc/PID/net/tcp{,6}`, by inode).
pub fn local_ports(pids: &[u32]) -> BTreeSet<u16> {
    let mut out = BTreeSet::new();
    for &pid in pids {
        let inodes: BTreeSet<u64> = sockets(pid).unwrap_or_default().into_values().collect();
        for table in ["tcp", "tcp6"] {
            let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
                continue;
            };
            out.extend(ports_of(&text, &inodes));
        }
    }
    out
}

/// The local ports of the rows of a `/proc/net/tcp` text whose inode is in `inodes`.
fn ports_of(text: &str, inodes: &BTreeSet<u64>) -> Vec<u16> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let inode: u64 = f.get(9)?.parse().ok()?;
            let port = f.get(1)?.rsplit(':').next()?;
            inodes
                .contains(&inode)
                .then(|| u16::from_str_radix(port, 16).ok())?
        })
        .collect()
}

/// Watches the host for `how_long` (eBPF where it loads, else sampling; sooner if `stop`
/// says so) and counts the stalls of `target` and of its local peers, on `ports`.
pub fn observe(
    target: &Target,
    ports: &Ports,
    how_long: Duration,
    stop: impl Fn() -> bool,
) -> Result<Seen, String> {
    let (mut w, _) = Backend::open(Choice::Auto, Filter::default()).map_err(|e| e.to_string())?;
    w.keep_stalls();
    let every = if w.name() == "ebpf" {
        Duration::from_millis(50)
    } else {
        Duration::from_millis(2)
    };
    let mine = local_ports(&target.pids);
    let mut seen = Seen::default();
    let start = Instant::now();
    while start.elapsed() < how_long && !stop() {
        w.sample().map_err(|e| e.to_string())?;
        for e in w.take_stalls() {
            if !ports.selects(e.local.port(), e.remote.port()) {
                continue;
            }
            if e.key.pid.is_some_and(|p| target.pids.contains(&p)) {
                seen.own += 1;
            } else if e.remote.ip().is_loopback() && mine.contains(&e.remote.port()) {
                seen.peers += 1;
            }
        }
        std::thread::sleep(every);
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_seen_chooses_the_fix() {
        let tick = Duration::from_millis(4);
        assert_eq!(Seen::default().action(tick), None);
        let own = Seen { own: 3, peers: 0 }.action(tick).unwrap();
        assert!(own.nodelay && own.ack_delay_max.is_none());
        let peers = Seen { own: 0, peers: 2 }.action(tick).unwrap();
        assert!(!peers.nodelay && peers.ack_delay_max == Some(Duration::from_millis(8)));
    }

    #[test]
    fn ports_come_from_the_rows_of_the_processes_sockets() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0
   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 99 1 0 20 4 30 10 -1
";
        assert_eq!(ports_of(text, &BTreeSet::from([4242])), vec![8000]);
        assert_eq!(ports_of(text, &BTreeSet::from([7])), Vec::<u16>::new());
    }
}
