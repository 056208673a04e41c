//! Listeners whose accept queue is full (the acceptor's stall, issue 51): a program that
//! accepts too slowly (its one acceptor busy, a backlog of 1, a burst of connects) fills its
//! listener's accept queue, and the kernel then drops its clients' SYNs (or their handshake's
//! last ACK): each such client's connect waits for its SYN's timer, 1 s, then 3 s. None of it
//! shows in an established connection's `tcp_info`, nor as a Nagle stall.
//!
//! Every [`LOOK_EVERY`] (sampling: at its listings, that often at most) a backend lists each
//! namespace's listeners (sock_diag gives each its queue, `idiag_rqueue`, its backlog,
//! `idiag_wqueue`, and the packets it dropped, `sk_drops` in `INET_DIAG_SKMEMINFO`: a full
//! queue's SYNs and handshake ACKs, each time one is sent again) and reads each namespace's
//! `ListenOverflows` (`/proc/PID/net/netstat`), shared between its listeners the kernel gave
//! no count of; [`Judge`] (pure) turns each
//! look into what it says of each listener, and the backend adds it to its board under the
//! listener's group ([`merge_look`] first joins the listeners of one group: a server's IPv4
//! and IPv6 sockets on one port, or `SO_REUSEPORT`'s).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// How often the listeners are looked at.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(250);

/// A listener at one look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listener {
    /// Its network namespace and port.
    pub(crate) netns: u64,
    pub(crate) port: u16,
    /// Its socket's inode (what names its process) and its owner's uid.
    pub(crate) inode: u32,
    pub(crate) uid: u32,
    /// Connections in its accept queue (handshake done, not accepted yet).
    pub(crate) queued: u32,
    /// Its backlog: the most the queue holds (`listen()`'s argument, capped by
    /// `net.core.somaxconn`).
    pub(crate) backlog: u32,
    /// The packets it dropped (`sk_drops`: a full queue's SYNs and handshake ACKs above all),
    /// when the kernel said (`INET_DIAG_SKMEMINFO`).
    pub(crate) drops: Option<u32>,
}

impl Listener {
    /// The kernel's test (`sk_acceptq_is_full`): the queue holds more than its backlog, and
    /// new connection attempts are dropped.
    pub(crate) fn full(&self) -> bool {
        self.queued > self.backlog
    }
}

/// One look at every listener.
#[derive(Debug, Clone, Default)]
pub(crate) struct Look {
    pub(crate) listeners: Vec<Listener>,
    /// Per namespace, the kernel's count of handshake packets full accept queues dropped
    /// (`TcpExt: ListenOverflows`).
    pub(crate) overflows: Vec<(u64, u64)>,
}

/// What the looks said of a listener (summed over looks, as a board sums tallies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AcceptQueue {
    /// Time it was seen full, µs: each look that found it full counts the time since the
    /// look before (at most two looks' interval).
    pub full_us: u64,
    /// Looks that found it full.
    pub full_looks: u64,
    /// The most connections seen in its queue.
    pub most_queued: u32,
    /// Its backlog, as last seen.
    pub backlog: u32,
    /// Handshake packets dropped (a SYN, or a handshake's last ACK; counted again each time
    /// one is sent again): the rise of its own count (`sk_drops`); for a listener the kernel
    /// gave none of, its namespace's `ListenOverflows`, given to it when it rose while it was
    /// full (or, none being full, held connections) at that look or the one before.
    pub drops: u64,
}

impl AcceptQueue {
    /// Nothing to say: never seen full, and no drop given to it.
    pub fn is_quiet(&self) -> bool {
        self.full_looks == 0 && self.drops == 0
    }

    /// Adds `o`, a later look's.
    pub(crate) fn merge(&mut self, o: &AcceptQueue) {
        self.full_us += o.full_us;
        self.full_looks += o.full_looks;
        self.most_queued = self.most_queued.max(o.most_queued);
        if o.backlog > 0 || o.most_queued > 0 {
            self.backlog = o.backlog;
        }
        self.drops += o.drops;
    }
}

/// What one look says of several listeners of one group (a server's IPv4 and IPv6 sockets on
/// one port, `SO_REUSEPORT`'s): full while any is (its time once), their queues and backlogs
/// added, their drops added.
pub(crate) fn merge_look(a: &AcceptQueue, b: &AcceptQueue) -> AcceptQueue {
    AcceptQueue {
        full_us: a.full_us.max(b.full_us),
        full_looks: a.full_looks.max(b.full_looks),
        most_queued: a.most_queued + b.most_queued,
        backlog: a.backlog + b.backlog,
        drops: a.drops + b.drops,
    }
}

/// Judges looks, one after another (pure).
#[derive(Debug)]
pub(crate) struct Judge {
    /// How often looks are made: a look that finds a queue full counts the time since the
    /// last, two of these at most.
    every: Duration,
    /// The last look's time, and each namespace's count then.
    last_us: Option<u64>,
    overflows: HashMap<u64, u64>,
    /// Listeners (namespace, port) that were full, or held connections, at the last look.
    full: HashSet<(u64, u16)>,
    holding: HashSet<(u64, u16)>,
    /// Each listener's own count of drops at the last look, by (namespace, port, inode).
    drops: HashMap<(u64, u16, u32), u32>,
}

impl Default for Judge {
    fn default() -> Judge {
        Judge::every(LOOK_EVERY)
    }
}

impl Judge {
    /// Looks made every `every` (at least [`LOOK_EVERY`]).
    pub(crate) fn every(every: Duration) -> Judge {
        Judge {
            every: every.max(LOOK_EVERY),
            last_us: None,
            overflows: HashMap::new(),
            full: HashSet::new(),
            holding: HashSet::new(),
            drops: HashMap::new(),
        }
    }

    /// Looks are made every `every` from now on (at least [`LOOK_EVERY`]).
    pub(crate) fn set_every(&mut self, every: Duration) {
        self.every = every.max(LOOK_EVERY);
    }

    /// What `look`, taken at `at_us` (µs on any steady clock), says of each listener it has
    /// something to say of (seen full, or given drops; and the others on its port). A listener's first count (and a namespace's) is its baseline: drops before the
    /// watch are not counted. A listener's own count gives it its drops; a namespace's count
    /// is shared only between its listeners the kernel gave no count of. Drops nobody can be
    /// given (no such listener full or holding connections at this look or the last) are left
    /// out.
    pub(crate) fn judge<'a>(
        &mut self,
        look: &'a Look,
        at_us: u64,
    ) -> Vec<(&'a Listener, AcceptQueue)> {
        let every_us = self.every.as_micros() as u64;
        let gap_us = self
            .last_us
            .map_or(every_us, |t| at_us.saturating_sub(t))
            .min(2 * every_us);
        let mut out: Vec<(&Listener, AcceptQueue)> = look
            .listeners
            .iter()
            .map(|l| {
                let full = l.full();
                let own = l.drops.map_or(0, |now| {
                    self.drops
                        .get(&(l.netns, l.port, l.inode))
                        .map_or(0, |&before| u64::from(now.saturating_sub(before)))
                });
                let q = AcceptQueue {
                    full_us: if full { gap_us } else { 0 },
                    full_looks: u64::from(full),
                    most_queued: l.queued,
                    backlog: l.backlog,
                    drops: own,
                };
                (l, q)
            })
            .collect();
        self.drops = look
            .listeners
            .iter()
            .filter_map(|l| Some(((l.netns, l.port, l.inode), l.drops?)))
            .collect();
        for &(ns, count) in &look.overflows {
            let rise = self
                .overflows
                .insert(ns, count)
                .map_or(0, |before| count.saturating_sub(before));
            if rise == 0 {
                continue;
            }
            let was = |set: &HashSet<(u64, u16)>, l: &Listener| set.contains(&(l.netns, l.port));
            let takers_by = |test: &dyn Fn(&Listener) -> bool| -> Vec<usize> {
                (0..out.len())
                    .filter(|&i| {
                        let l = out[i].0;
                        l.netns == ns && l.drops.is_none() && test(l)
                    })
                    .collect()
            };
            let mut takers = takers_by(&|l| l.full() || was(&self.full, l));
            if takers.is_empty() {
                takers = takers_by(&|l| l.queued > 0 || was(&self.holding, l));
            }
            // Split among them, the fullest first taking what does not divide.
            takers.sort_by_key(|&i| (std::cmp::Reverse(out[i].0.queued), out[i].0.port));
            let n = takers.len() as u64;
            for (k, &i) in takers.iter().enumerate() {
                out[i].1.drops = rise / n + u64::from((k as u64) < rise % n);
            }
        }
        self.last_us = Some(at_us);
        self.full = look
            .listeners
            .iter()
            .filter(|l| l.full())
            .map(|l| (l.netns, l.port))
            .collect();
        self.holding = look
            .listeners
            .iter()
            .filter(|l| l.queued > 0)
            .map(|l| (l.netns, l.port))
            .collect();
        // (A quiet listener beside one that is not, on the same port, is kept: the two are
        // one queue to their clients, whose backlog is both of theirs.)
        let loud: HashSet<(u64, u16)> = out
            .iter()
            .filter(|(_, q)| !q.is_quiet())
            .map(|(l, _)| (l.netns, l.port))
            .collect();
        out.retain(|(l, _)| loud.contains(&(l.netns, l.port)));
        out
    }
}

/// `ListenOverflows` from the text of `/proc/net/netstat` (a line of `TcpExt:` names, then
/// one of their values).
pub(crate) fn listen_overflows(netstat: &str) -> Option<u64> {
    let mut lines = netstat.lines().filter(|l| l.starts_with("TcpExt:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names
        .split_whitespace()
        .position(|n| n == "ListenOverflows")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(ns: u64, port: u16, queued: u32, backlog: u32) -> Listener {
        Listener {
            netns: ns,
            port,
            inode: u32::from(port),
            uid: 0,
            queued,
            backlog,
            drops: None,
        }
    }

    fn look(listeners: Vec<Listener>, overflows: &[(u64, u64)]) -> Look {
        Look {
            listeners,
            overflows: overflows.to_vec(),
        }
    }

    /// A look, and its time in µs.
    fn at(ms: u64, listeners: Vec<Listener>, overflows: &[(u64, u64)]) -> (Look, u64) {
        (look(listeners, overflows), ms * 1000)
    }

    #[test]
    fn a_full_queue_is_timed_and_given_its_namespaces_drops() {
        let mut j = Judge::default();
        // The first look: the baseline (500 dropped before the watch), nothing full.
        let first = at(
            0,
            vec![listener(1, 80, 0, 128), listener(1, 7777, 1, 1)],
            &[(1, 500)],
        );
        assert!(j.judge(&first.0, first.1).is_empty());
        // Full (2 queued, backlog 1); 4 drops since: all its own.
        let second = at(
            250,
            vec![listener(1, 80, 0, 128), listener(1, 7777, 2, 1)],
            &[(1, 504)],
        );
        let said = j.judge(&second.0, second.1);
        assert_eq!(said.len(), 1, "{said:?}");
        let (l, q) = &said[0];
        assert_eq!(l.port, 7777);
        assert_eq!(
            *q,
            AcceptQueue {
                full_us: 250_000,
                full_looks: 1,
                most_queued: 2,
                backlog: 1,
                drops: 4
            }
        );
        // Emptied (accepted) but drops counted since: given to the one full at the last look.
        let third = at(
            500,
            vec![listener(1, 80, 0, 128), listener(1, 7777, 0, 1)],
            &[(1, 506)],
        );
        let said = j.judge(&third.0, third.1);
        assert_eq!(
            (said[0].0.port, said[0].1.drops, said[0].1.full_us),
            (7777, 2, 0)
        );
        // Nothing full or holding since: drops nobody can be given are left out.
        let fourth = at(
            750,
            vec![listener(1, 80, 0, 128), listener(1, 7777, 0, 1)],
            &[(1, 509)],
        );
        assert!(j.judge(&fourth.0, fourth.1).is_empty());
    }

    #[test]
    fn drops_stay_in_their_namespace_and_split_between_full_listeners() {
        let mut j = Judge::default();
        let base = [(1, 0), (2, 0)];
        let first = at(0, vec![], &base);
        j.judge(&first.0, first.1);
        let l = vec![
            listener(1, 80, 3, 2),
            listener(1, 81, 5, 4),
            listener(2, 80, 0, 1),
        ];
        let second = at(250, l, &[(1, 5), (2, 7)]);
        let said = j.judge(&second.0, second.1);
        let drops: Vec<(u64, u16, u64)> = said
            .iter()
            .map(|(l, q)| (l.netns, l.port, q.drops))
            .collect();
        // 5 split between namespace 1's two full listeners, the fuller first; namespace 2's
        // 7 have no listener to be given to.
        assert_eq!(drops, [(1, 80, 2), (1, 81, 3)]);
        // Without a full one, a listener holding connections takes them.
        let third = at(500, vec![listener(2, 80, 1, 1)], &[(2, 9)]);
        let said = j.judge(&third.0, third.1);
        assert_eq!(
            (said[0].0.port, said[0].1.drops, said[0].1.full_looks),
            (80, 2, 0)
        );
    }

    #[test]
    fn a_listener_s_own_count_gives_it_its_drops_and_keeps_it_out_of_the_share() {
        let mut j = Judge::default();
        let own = |port: u16, queued: u32, drops: u32| Listener {
            drops: Some(drops),
            ..listener(1, port, queued, 1)
        };
        // Baselines: 40 dropped before the watch by :80, 500 in the namespace.
        let first = at(0, vec![own(80, 0, 40), listener(1, 81, 0, 1)], &[(1, 500)]);
        assert!(j.judge(&first.0, first.1).is_empty());
        // :80 full with 6 drops of its own; the namespace's 9 more: 3 are :81's (full, no
        // count of its own), 6 are :80's, already counted.
        let second = at(
            250,
            vec![own(80, 2, 46), listener(1, 81, 2, 1)],
            &[(1, 509)],
        );
        let said = j.judge(&second.0, second.1);
        let drops: Vec<(u16, u64)> = said.iter().map(|(l, q)| (l.port, q.drops)).collect();
        assert_eq!(drops, [(80, 6), (81, 9)], "the share goes to :81 alone");
        // Not full, but dropping (a SYN flood, cookies off): named by its own count.
        let third = at(
            500,
            vec![own(80, 0, 50), listener(1, 81, 0, 1)],
            &[(1, 513)],
        );
        let said = j.judge(&third.0, third.1);
        let drops: Vec<(u16, u64)> = said.iter().map(|(l, q)| (l.port, q.drops)).collect();
        assert_eq!(drops, [(80, 4), (81, 4)]);
        // A listener made again (a new inode) starts from its own baseline.
        let again = Listener {
            inode: 99,
            ..own(80, 0, 7)
        };
        let fourth = at(750, vec![again], &[(1, 513)]);
        assert!(j.judge(&fourth.0, fourth.1).is_empty());
    }

    #[test]
    fn a_quiet_listener_beside_a_full_one_of_its_port_is_kept() {
        let mut j = Judge::default();
        let v6 = Listener {
            inode: 6,
            ..listener(1, 80, 0, 1)
        };
        let first = at(0, vec![], &[]);
        j.judge(&first.0, first.1);
        let second = at(
            250,
            vec![listener(1, 80, 2, 1), v6, listener(1, 81, 0, 1)],
            &[],
        );
        let said = j.judge(&second.0, second.1);
        let kept: Vec<(u16, u32)> = said.iter().map(|(l, _)| (l.port, l.inode)).collect();
        assert_eq!(kept, [(80, 80), (80, 6)], "both of :80, not :81");
    }

    #[test]
    fn a_long_gap_counts_two_looks_at_most() {
        let mut j = Judge::default();
        let first = at(0, vec![], &[]);
        j.judge(&first.0, first.1);
        let late = at(5000, vec![listener(1, 80, 2, 1)], &[]);
        let said = j.judge(&late.0, late.1);
        assert_eq!(said[0].1.full_us, 500_000);
        // Looks made every 2 s (sampling's listings at a long scan interval) count theirs.
        let mut j = Judge::every(Duration::from_secs(2));
        j.judge(&first.0, first.1);
        let said = j.judge(&late.0, 2_100_000);
        assert_eq!(said[0].1.full_us, 2_100_000);
    }

    #[test]
    fn one_look_at_two_listeners_of_a_group_counts_its_time_once() {
        let q = |full: bool, queued: u32, drops: u64| AcceptQueue {
            full_us: if full { 250_000 } else { 0 },
            full_looks: u64::from(full),
            most_queued: queued,
            backlog: 1,
            drops,
        };
        let m = merge_look(&q(true, 2, 3), &q(true, 2, 4));
        assert_eq!(
            m,
            AcceptQueue {
                full_us: 250_000,
                full_looks: 1,
                most_queued: 4,
                backlog: 2,
                drops: 7
            }
        );
        assert_eq!(merge_look(&q(false, 0, 1), &q(true, 2, 0)).full_looks, 1);
    }

    #[test]
    fn the_overflow_count_is_read_from_netstat() {
        let text = "TcpExt: SyncookiesSent SyncookiesRecv ListenOverflows ListenDrops\n\
                    TcpExt: 0 0 12 14\n\
                    IpExt: InNoRoutes\nIpExt: 0\n";
        assert_eq!(listen_overflows(text), Some(12));
        assert_eq!(listen_overflows("IpExt: a\nIpExt: 1\n"), None);
        assert_eq!(
            listen_overflows("TcpExt: ListenOverflows\nTcpExt: x\n"),
            None
        );
    }
}
