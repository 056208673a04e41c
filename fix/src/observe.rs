//! Choosing the fix from what `nagless watch` sees ([`observe`]), when none is asked for:
//! the target's own writes held until a late ACK call for TCP_NODELAY; a local peer's writes
//! held until the target's late ACK call for a delayed-ACK bound on the target.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nagless_watch::backend::{Backend, Choice};
use nagless_watch::Filter;

use crate::existing::tcp_sockets;
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
pub(crate) fn local_ports(pids: &[u32]) -> BTreeSet<u16> {
    pids.iter()
        .flat_map(|&pid| tcp_sockets(pid).unwrap_or_default())
        .map(|r| r.local_port)
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
}
