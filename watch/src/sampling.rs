//! The sampling backend: every scan interval a thread of its own (`lister`)
//! lists every established socket in every network namespace through netlink `sock_diag`,
//! with the owners /proc names; every interval the sockets with data in flight lately are
//! looked up one by one ([`Lookups`]), so the cost follows the busy sockets. Each socket's
//! held writes are followed ([`HoldTracker`]) and its stalls (and the short holds a prompt
//! ACK released: [`Release::Clocked`]) tallied, then added to its group's on the board
//! ([`crate::board`]) when the rows are made.
//!
//! A little over 600 lines, kept whole: one type, the [`Watcher`], whose pass (`process`) and
//! whose [`Source`] answers read and write the same per-socket state; split, each half would
//! reach into the other's fields.

use std::collections::{HashMap, HashSet};
use std::io;
use std::time::Instant;

use crate::backend::{Run, Source};
use crate::board::{Board, GroupKey, Row, Tally, Who};
use crate::detect::{HoldTracker, Release};
use crate::diag::SocketRow;
use crate::netns::{Lookups, Namespaces};
use crate::procs::{ProcMap, Process};
use crate::turns::{Look, Turns};
use crate::waits::Reading;
use crate::{lister, role, wall_clock_ago, Filter, SampleStats, StallEvent};

/// What the watcher keeps per socket.
struct Tracked {
    tracker: HoldTracker,
    key: GroupKey,
    who: Who,
    last_us: u64,
    /// This window's stalls (`conns` 1 once seen in it) and the whole watch's.
    window: Tally,
    total: Tally,
    /// When it was last observed (µs).
    observed_us: u64,
    /// Its identity, for exact lookups.
    id: SocketRow,
    /// It had data in flight lately: looked up every interval until then (µs).
    busy_until_us: u64,
    /// Its owner is its listener's (it was not in a process's fds yet): asked again when its
    /// own inode is attributed (a pre-fork server's workers share one listener).
    by_listener: bool,
    /// When it was first seen (µs).
    born_us: u64,
    /// What the kernel counted of its time and losses, as last read.
    reading: Option<Reading>,
    /// Whose turn it was, look by look.
    turns: Turns,
    /// To be looked up at the next sample, busy or not (a connection made while watching,
    /// or one whose time came), and when it is next due (µs).
    look_once: bool,
    look_again_us: u64,
}

/// Every connection is looked at again once in this long (µs), for whose turn it is, spread
/// by their cookies; or, with more than 2,000 connections, once in a millisecond per
/// connection, so that these looks stay at 1,000 a second ([`look_again_us`]).
const LOOK_AGAIN_US: u64 = 2_000_000;

/// How long a connection waits for its next look again among `sockets`, µs.
fn look_again_us(sockets: usize) -> u64 {
    LOOK_AGAIN_US.max(sockets as u64 * 1_000)
}

/// How long a socket stays busy after it last had data in flight.
const BUSY_US: u64 = 2_000_000;

/// How long listings stay faster after a followed hold ended with its socket freed.
const SHORT_HOLDS_US: u64 = 10_000_000;

/// Listings run this many times as often while short connections hold writes (measured:
/// `scripts/bench-watch-short`, docs/watch.md).
const SHORT_HOLDS_SPEEDUP: u32 = 4;

/// Listings never run more often than this, on average (each wait is drawn between half and
/// one and a half of the interval: `lister::Waits`).
const SCAN_FLOOR: std::time::Duration = std::time::Duration::from_millis(20);

/// What a batch of rows is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// A listing of every established socket (no `tcp_info`).
    Listing,
    /// Exact lookups of the busy sockets.
    Lookup,
    /// Sockets the kernel freed, with their last `tcp_info`.
    Freed,
}

/// Connections the kernel freed, as the watcher learnt of them (`CAP_NET_ADMIN` only).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FreedCounts {
    /// Told of in every namespace watched.
    pub(crate) told: bool,
    /// Came and went between two listings, data sent, never looked at: their stalls, if any,
    /// are not counted.
    pub(crate) unseen: u64,
    /// Some were lost (the kernel's messages overflowed the socket).
    pub(crate) lost: bool,
}

/// The watcher: call [`sample`](Source::sample) every interval.
pub(crate) struct Watcher {
    /// The namespaces, until the listing thread takes them.
    nets: Option<Namespaces>,
    listings: Option<std::sync::mpsc::Receiver<io::Result<lister::Listing>>>,
    /// A listing taken while idle ([`Source::wait_idle`]), for the next sample.
    waiting: Option<io::Result<lister::Listing>>,
    lookups: Lookups,
    ns_info: (usize, usize, Option<io::ErrorKind>),
    scan_interval: std::time::Duration,
    /// Listening (namespace, port)s, with the listener's inode.
    listening: HashMap<(u64, u16), u32>,
    /// The host's ephemeral ports (see [`role`]).
    ephemeral: role::EphemeralPorts,
    /// The /proc scanner, until the listing thread takes it.
    procs: Option<ProcMap>,
    /// Owners of socket inodes, as the listing thread found them.
    owners: HashMap<u32, Process>,
    denied: usize,
    filter: Filter,
    start: Instant,
    /// When this window began.
    window_start: Instant,
    /// Per socket, by namespace and cookie.
    sockets: HashMap<(u64, u64), Tracked>,
    rows: Vec<SocketRow>,
    last_gc_us: u64,
    /// Tallies of sockets gone, by their group: this window's and the whole watch's.
    gone_window: Board,
    gone_total: Board,
    /// Stalls since the last [`take_stalls`](Source::take_stalls), when kept.
    events: Option<Vec<StallEvent>>,
    /// The processes on this host whose ACKs the stalls waited for.
    peers: crate::peer::Peers,
    /// Connections freed, as told.
    freed: FreedCounts,
    /// The listing thread's interval, µs: the scan interval, or a quarter of it while short
    /// connections hold writes (until then, µs).
    scan_every: std::sync::Arc<std::sync::atomic::AtomicU64>,
    short_holds_until_us: u64,
    /// When the first listing was taken (µs): sockets first seen after it were made while
    /// watching.
    first_listing_us: Option<u64>,
    /// The listings' looks at the listeners' accept queues, judged; every listener's inode
    /// at the last look (their owners are kept: `listening` names one per port).
    accepts: crate::accept::Judge,
    listener_inodes: HashSet<u32>,
}

impl Watcher {
    /// Opens a netlink socket in every network namespace it can enter and scans /proc once.
    pub(crate) fn new(filter: Filter) -> io::Result<Watcher> {
        let mut procs = ProcMap::default();
        procs.rescan();
        let mut nets = Namespaces::new(true)?;
        nets.refresh();
        let mut lookups = Lookups::new(nets.own())?;
        for (ns, d) in nets.take_lookups() {
            lookups.add(ns, d);
        }
        let (n, why) = nets.not_entered();
        Ok(Watcher {
            ns_info: (nets.present().len(), n, why),
            nets: Some(nets),
            listings: None,
            waiting: None,
            lookups,
            scan_interval: std::time::Duration::from_millis(100),
            listening: HashMap::new(),
            ephemeral: role::EphemeralPorts::of_host(),
            denied: procs.denied,
            procs: Some(procs),
            owners: HashMap::new(),
            filter,
            start: Instant::now(),
            window_start: Instant::now(),
            sockets: HashMap::new(),
            rows: Vec::new(),
            last_gc_us: 0,
            gone_window: Board::default(),
            gone_total: Board::default(),
            events: None,
            peers: crate::peer::Peers::default(),
            freed: FreedCounts::default(),
            scan_every: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(100_000)),
            short_holds_until_us: 0,
            first_listing_us: None,
            accepts: crate::accept::Judge::every(std::time::Duration::from_millis(100)),
            listener_inodes: HashSet::new(),
        })
    }

    /// Observes `self.rows`, taken at `at_us`: a listing of every socket, lookups of the busy
    /// ones, or sockets freed since the last sample.
    fn process(&mut self, pass: Pass, at_us: u64, stats: &mut SampleStats) {
        let full = pass == Pass::Listing;
        // (The listing's rows too: at the first, no socket is known yet.)
        let again_us = look_again_us(self.sockets.len().max(self.rows.len()));
        let listening = &self.listening;
        let port_ok = |r: &SocketRow| {
            r.state != nagless::TcpState::Listen
                && self
                    .filter
                    .port
                    .is_none_or(|p| p == r.local.port() || p == r.remote.port())
        };
        for r in &self.rows {
            if !port_ok(r) {
                continue;
            }
            // A socket freed that was never looked at: counted, nothing to judge.
            if pass == Pass::Freed && !self.sockets.contains_key(&(r.netns, r.cookie)) {
                if r.info.is_some_and(|i| i.bytes_sent.is_some_and(|b| b > 0)) {
                    self.freed.unseen += 1;
                }
                continue;
            }
            // New, or not attributed yet while /proc now names its owner (sockets waiting in
            // an accept queue have no inode yet; a scan may also miss a socket made during it).
            let id = (r.netns, r.cookie);
            // A socket accepted a moment ago, not attributed yet: its listener's owner, until
            // its own is known. (A freed socket's row names no inode, nor its owner's uid.)
            let listener = listening.get(&(r.netns, r.local.port())).copied();
            let own = self.owners.get(&r.inode);
            let of_listener = listener.and_then(|l| self.owners.get(&l));
            let resolve = match self.sockets.get(&id) {
                None => true,
                Some(_) if pass == Pass::Freed => false,
                Some(t) => {
                    (t.key.pid.is_none() && own.or(of_listener).is_some())
                        || (t.by_listener && own.is_some())
                }
            };
            if resolve {
                let by_listener = own.is_none() && of_listener.is_some();
                let owner = own.or(of_listener).cloned();
                let (serves, port) = role::role(
                    listener.is_some(),
                    r.local.port(),
                    r.remote.port(),
                    &self.ephemeral,
                );
                let key = GroupKey {
                    pid: owner.as_ref().map(|o| o.pid),
                    uid: r.uid,
                    port,
                    serves,
                    netns: r.netns,
                };
                let t = self.sockets.entry(id).or_insert_with(|| Tracked {
                    tracker: HoldTracker::default(),
                    key: key.clone(),
                    who: Who::default(),
                    id: SocketRow {
                        info: None,
                        ..r.clone()
                    },
                    busy_until_us: 0,
                    by_listener,
                    born_us: at_us,
                    reading: None,
                    turns: Turns::default(),
                    look_once: false,
                    look_again_us: at_us + r.cookie % again_us,
                    observed_us: 0,
                    last_us: at_us,
                    window: Tally::default(),
                    total: Tally::connection(),
                });
                t.key = key;
                t.by_listener = by_listener;
                t.who = owner.map_or_else(Who::default, Who::from);
            }
            let Some(t) = self.sockets.get_mut(&id) else {
                continue;
            };
            if self.filter.pid.is_some_and(|p| t.key.pid != Some(p)) {
                continue;
            }
            if full {
                stats.watched += 1;
            }
            t.last_us = t.last_us.max(at_us);
            t.window.conns = 1;
            // A listing carries no tcp_info: a socket with data in flight in it becomes busy,
            // and is looked up at once (in this same sample) and then every interval.
            let Some(info) = &r.info else {
                if r.send_queue > 0 {
                    t.busy_until_us = t.busy_until_us.max(at_us + BUSY_US);
                } else if t.born_us == at_us && self.first_listing_us.is_some() {
                    // A connection made while watching is looked at once: whose turn it is
                    // says whether it is in use (below).
                    t.look_once = true;
                } else if at_us >= t.look_again_us {
                    // And every connection again every so often: one in use since (a
                    // pooled connection whose answers are acknowledged between two
                    // listings) is followed from then.
                    t.look_once = true;
                }
                continue;
            };
            if pass == Pass::Lookup {
                t.look_once = false;
                t.look_again_us = at_us + again_us;
            }
            // What the kernel counted since it was last read (all it counted, for a
            // socket made after the first listing).
            if let Some(now) = Reading::of(info) {
                // (First seen after the first listing, and busy no longer than the watch has
                // run: a socket of a namespace entered late, or one seen again after it was
                // forgotten, is older, and its first reading is its baseline.)
                let made_since = self
                    .first_listing_us
                    .is_some_and(|f| t.born_us > f && now.busy_us() <= at_us.saturating_sub(f));
                let counting = t.reading.is_some() || made_since;
                let turned = t
                    .turns
                    .look(Look::of(at_us, info), made_since.then_some(t.born_us));
                if counting {
                    let mut w = now.since(t.reading.as_ref());
                    w.own_turn_us += turned.own_us;
                    w.own_turns += turned.own;
                    w.peer_turn_us += turned.peer_us;
                    w.peer_turns += turned.peer;
                    w.own_open_us = turned.own_open_us;
                    w.peer_open_us = turned.peer_open_us;
                    t.window.add_waits(&w);
                    t.total.add_waits(&w);
                }
                t.reading = Some(now);
                // In use (data moving, or a turn open its side waits on): looked at on.
                if pass != Pass::Freed && t.turns.in_use(t.key.serves) {
                    t.busy_until_us = t.busy_until_us.max(at_us + BUSY_US);
                }
            }
            let release = if pass == Pass::Freed {
                t.busy_until_us = 0;
                let r = t.tracker.observe_gone(info);
                if r.is_some() {
                    self.short_holds_until_us = at_us + SHORT_HOLDS_US;
                }
                r
            } else {
                if at_us <= t.observed_us {
                    continue;
                }
                t.observed_us = at_us;
                t.tracker.observe_release(at_us, info)
            };
            let stall = match release {
                Some(Release::Stall(s)) => Some(s),
                Some(Release::Clocked { hold_us }) => {
                    let span = (at_us.saturating_sub(hold_us), at_us);
                    t.window.add_clock(1, hold_us, span);
                    t.total.add_clock(1, hold_us, span);
                    None
                }
                None => None,
            };
            if pass != Pass::Freed
                && (info.unacked > 0
                    || info.notsent_bytes.is_some_and(|n| n > 0)
                    || t.tracker.holding())
            {
                t.busy_until_us = at_us + BUSY_US;
            }
            if t.busy_until_us >= at_us {
                stats.busy += 1;
            }
            if let Some(stall) = stall {
                stats.stalls += 1;
                // A connection's stall in its first second: short connections may hold
                // writes (armed without the kernel's word on freed sockets too).
                if at_us.saturating_sub(t.born_us) < 1_000_000 {
                    self.short_holds_until_us = at_us + SHORT_HOLDS_US;
                }
                // The other end by an exact lookup: /proc/PID/net/tcp walks every socket.
                let lookups = &mut self.lookups;
                let mut other_end = || lookups.other_end(&t.id);
                let acked_by = t.key.pid.and_then(|pid| {
                    self.peers
                        .receiver(
                            pid,
                            t.key.netns,
                            t.id.local,
                            t.id.remote,
                            Some(&mut other_end),
                        )
                        .map(|r| r.pid)
                });
                t.window.add(&stall);
                t.total.add(&stall);
                t.window.acked_by(acked_by);
                t.total.acked_by(acked_by);
                if let Some(ev) = &mut self.events {
                    ev.push(StallEvent {
                        key: t.key.clone(),
                        comm: t.who.comm.clone(),
                        container: t.who.container.clone(),
                        service: t.who.service.clone(),
                        unit: t.who.unit(),
                        pod: t.who.pod.clone(),
                        local: t.id.local,
                        remote: t.id.remote,
                        at: wall_clock_ago(
                            self.start
                                .elapsed()
                                .saturating_sub(std::time::Duration::from_micros(stall.at_us)),
                        ),
                        stall,
                    });
                }
            }
        }
        // Once a second: sockets unseen for a second (or three listings) leave their tallies
        // to their group.
        let gone_us = (3 * self.scan_interval.as_micros() as u64).max(1_000_000);
        if full && self.last_gc_us + 1_000_000 <= at_us {
            self.last_gc_us = at_us;
            let (gw, gt) = (&mut self.gone_window, &mut self.gone_total);
            self.sockets.retain(|_, t| {
                let live = at_us.saturating_sub(t.last_us) <= gone_us;
                if !live {
                    if t.window.conns > 0 {
                        gw.add(&t.key, &t.who, &t.window);
                    }
                    gt.add(&t.key, &t.who, &t.total);
                }
                live
            });
        }
    }
}

impl Source for Watcher {
    fn name(&self) -> &'static str {
        "sampling"
    }

    /// Takes one sample and updates the board: exact lookups of the sockets that had data in
    /// flight in the last two seconds (none at all when none had), and the listing of every
    /// established socket that a thread of its own takes every [scan
    /// interval](Source::set_scan_interval), when one is ready (the first sample waits for it).
    fn sample(&mut self) -> io::Result<SampleStats> {
        let mut stats = SampleStats::default();
        let listing = match (&self.listings, self.nets.take(), self.procs.take()) {
            (None, Some(nets), Some(procs)) => {
                self.scan_every.store(
                    self.scan_interval.as_micros() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
                let rx = lister::spawn(nets, procs, self.scan_every.clone())?;
                let first = rx.recv();
                self.listings = Some(rx);
                Some(first.map_err(|_| io::Error::other("the listing thread stopped"))?)
            }
            (Some(_), _, _) if self.waiting.is_some() => self.waiting.take(),
            (Some(rx), _, _) => match rx.try_recv() {
                Ok(l) => Some(l),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
                Err(_) => return Err(io::Error::other("the listing thread stopped")),
            },
            _ => None,
        };
        if let Some(l) = listing {
            let l = l?;
            for (ns, d) in l.lookups {
                self.lookups.add(ns, d);
            }
            self.lookups.retain(|ns| l.present.contains(&ns));
            self.ns_info = (l.present.len(), l.not_entered.0, l.not_entered.1);
            self.denied = l.denied;
            self.owners.extend(l.owners);
            if let Some(set) = l.listening {
                self.listening = set;
            }
            let at_us = l.at.saturating_duration_since(self.start).as_micros() as u64;
            if let Some(look) = &l.accept {
                self.listener_inodes = look.listeners.iter().map(|l| l.inode).collect();
                let judged = self.accepts.judge(look, at_us);
                Board::add_accepts(
                    [&mut self.gone_window, &mut self.gone_total],
                    &judged,
                    &self.filter,
                    |inode| self.owners.get(&inode).cloned(),
                );
            }
            let live: HashSet<u32> = l
                .rows
                .iter()
                .map(|r| r.inode)
                .chain(self.listening.values().copied())
                .chain(self.listener_inodes.iter().copied())
                .collect();
            self.owners.retain(|i, _| live.contains(i));
            self.rows = l.rows;
            self.process(Pass::Listing, at_us, &mut stats);
            self.first_listing_us.get_or_insert(at_us);
            stats.sockets = l.in_use;
            stats.full = true;
        }
        let now_us = self.start.elapsed().as_micros() as u64;
        let busy: Vec<&SocketRow> = self
            .sockets
            .values()
            .filter(|t| t.busy_until_us >= now_us || t.look_once)
            .map(|t| &t.id)
            .collect();
        if !busy.is_empty() {
            let mut rows = std::mem::take(&mut self.rows);
            rows.clear();
            self.lookups.lookup(&busy, &mut rows)?;
            self.rows = rows;
            let at_us = self.start.elapsed().as_micros() as u64;
            self.process(Pass::Lookup, at_us, &mut stats);
        }
        // The sockets freed since: a followed hold ends with them (short connections close
        // within a sample of their release).
        let mut rows = std::mem::take(&mut self.rows);
        rows.clear();
        self.freed.lost |= self.lookups.freed(&mut rows);
        self.freed.told = self.lookups.tells_freed();
        self.rows = rows;
        if !self.rows.is_empty() {
            let at_us = self.start.elapsed().as_micros() as u64;
            self.process(Pass::Freed, at_us, &mut stats);
        }
        // Listings run faster while short connections hold writes.
        let now_us = self.start.elapsed().as_micros() as u64;
        let every = if now_us < self.short_holds_until_us {
            (self.scan_interval / SHORT_HOLDS_SPEEDUP).max(SCAN_FLOOR.min(self.scan_interval))
        } else {
            self.scan_interval
        };
        self.scan_every.store(
            every.as_micros() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(stats)
    }

    /// The rows of the window since the last call (stalling groups first); starts a new one.
    fn take_window(&mut self) -> Vec<Row> {
        let mut g = std::mem::take(&mut self.gone_window);
        for t in self.sockets.values_mut() {
            if t.window.conns > 0 {
                g.add(&t.key, &t.who, &t.window);
            }
            t.window = Tally::default();
        }
        let watched = std::mem::replace(&mut self.window_start, Instant::now()).elapsed();
        g.rows(watched.as_micros() as u64)
    }

    /// The rows of the whole watch, stalling groups first.
    fn totals(&self) -> Vec<Row> {
        let mut g = self.gone_total.clone();
        for t in self.sockets.values() {
            g.add(&t.key, &t.who, &t.total);
        }
        g.rows(self.start.elapsed().as_micros() as u64)
    }

    /// Keeps every stall from now on, for [`take_stalls`](Source::take_stalls) (which must then be
    /// called often: they pile up until it is).
    fn keep_stalls(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// The stalls that ended since the last call (none unless [`keep_stalls`](Source::keep_stalls)).
    fn take_stalls(&mut self) -> Vec<StallEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The network namespaces: how many are listed, how many could not be entered and why.
    fn namespaces(&self) -> (usize, usize, Option<io::ErrorKind>) {
        self.ns_info
    }

    /// Processes whose sockets could not be attributed (not root).
    fn denied_processes(&self) -> usize {
        self.denied
    }

    /// How often to list every established socket (default 100 ms); between listings,
    /// [`sample`](Source::sample) looks up only the sockets busy lately.
    fn set_scan_interval(&mut self, every: std::time::Duration) {
        self.scan_interval = every;
        // (Its listings look at the listeners: at most every `accept::LOOK_EVERY`.)
        self.accepts.set_every(every);
    }

    fn not_entered_means(&self) -> &'static str {
        "their sockets are not watched"
    }

    fn idle(&self, s: &SampleStats) -> bool {
        s.busy == 0
    }

    fn sockets_unseen(&self) -> Option<u64> {
        self.freed.told.then_some(self.freed.unseen)
    }

    fn wait_idle(&mut self, max: std::time::Duration) {
        match &self.listings {
            Some(rx) if self.waiting.is_none() => {
                // (A stopped thread is reported by the next sample.)
                if let Ok(l) = rx.recv_timeout(max) {
                    self.waiting = Some(l);
                }
            }
            _ => std::thread::sleep(max),
        }
    }

    fn status(&self, run: &Run) -> String {
        format!(
            "{} sockets, sampled every {:?} ({} samples)",
            run.sockets_max, run.interval, run.samples
        )
    }

    fn cost(&self, run: &Run) -> String {
        let (listed, _, _) = self.namespaces();
        let f = self.freed;
        let unseen = if f.told {
            format!(
                "; {} socket(s) came and went between listings, never looked at (stalls in them are not counted: the eBPF backend sees them){}",
                f.unseen,
                if f.lost { ", some not told (the kernel's messages overflowed)" } else { "" }
            )
        } else {
            String::new()
        };
        format!(
            "{} samples of up to {} sockets ({} full listings, the rest lookups of busy sockets) in {listed} network namespace(s) in {:.1} s: {:.2} ms per sample, {} late; watcher CPU {:.1}% of one core{unseen}; a sender's own holds (a cork the kernel's ceiling released) are not seen here: the eBPF backend sees them",
            run.samples,
            run.sockets_max,
            run.full_samples,
            run.elapsed_s,
            run.sample_ms_mean(),
            run.late,
            run.cpu_percent
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn looks_again_stay_at_a_thousand_a_second() {
        // 300 connections: each every 2 s (150 a second); 20,000: each every 20 s.
        assert_eq!(super::look_again_us(300), 2_000_000);
        assert_eq!(super::look_again_us(20_000), 20_000_000);
    }
}
