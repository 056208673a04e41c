//! # nagless-watch
//!
//! Finds processes whose TCP connections stall on Nagle and delayed ACK, live, on a running
//! host: no capture, no restart. It reads TCP sockets' `tcp_info` through netlink `sock_diag`
//! ([`diag`]): a thread lists every established socket every scan interval (100 ms), and the
//! sockets with data in flight lately are looked up one by one every interval (2 ms), so the
//! cost follows the busy sockets. It follows each socket's held writes ([`detect`],
//! judged by [`nagless_stall_rule`], the rule `nagless doctor` uses), and adds the stalls up per
//! process and port, attributing sockets to processes through /proc ([`procs`]). It lists
//! every network namespace it can enter ([`netns`]: containers, pods) and names the container
//! of each row; [`metrics`] exposes the board to Prometheus. Where BPF loads, [`ebpf`] gets
//! the same stalls as events from the kernel instead, at a cost that follows held writes
//! rather than sockets, in every namespace at once; [`backend`] picks one.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod detect;
pub mod diag;
pub mod ebpf;
mod lister;
pub mod metrics;
pub mod netns;
pub mod own_process;
pub mod procs;
pub mod role;
pub mod serve;
pub mod web_config;

use std::collections::{HashMap, HashSet};
use std::io;
use std::time::Instant;

use nagless_stall_rule::{AckTimer, SENDER_FIX};

use crate::detect::HoldTracker;
use crate::diag::{state, SocketRow};
use crate::netns::{Lookups, Namespaces};
use crate::procs::{ProcMap, Process};

/// Which sockets to watch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter {
    /// Only sockets with this local or remote port.
    pub port: Option<u16>,
    /// Only sockets of this process.
    pub pid: Option<u32>,
}

/// What a row of the table is about: a process (if known) and a port: the local port when
/// the process listens on it (a server), else the remote one (a client).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Owning process id (`None`: not readable, see [`procs`]).
    pub pid: Option<u32>,
    /// Owner's uid (shown when the pid is unknown).
    pub uid: u32,
    /// The port.
    pub port: u16,
    /// The port is the local one (the process serves it).
    pub serves: bool,
    /// The network namespace of its sockets (inode of `/proc/PID/ns/net`).
    pub netns: u64,
}

/// Counters of one group.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Row {
    /// Process id, if known.
    pub pid: Option<u32>,
    /// Owner uid.
    pub uid: u32,
    /// Command line, if known.
    pub cmd: Option<String>,
    /// Which program it runs (the script, module or main class: [`procs::program_name`]), if
    /// known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Command name (`/proc/PID/comm`), if known.
    pub comm: Option<String>,
    /// Port (local if `serves`, else remote).
    pub port: u16,
    /// The process listens on `port`.
    pub serves: bool,
    /// The network namespace (inode of `/proc/PID/ns/net`).
    pub netns: u64,
    /// The owner's cgroup path, if known.
    pub cgroup: Option<String>,
    /// The owner's container id (64 hex digits), if its cgroup names one.
    pub container: Option<String>,
    /// Connections seen.
    pub connections: usize,
    /// Stalls.
    pub stalls: u64,
    /// Time lost to stalls, ms.
    pub lost_ms: f64,
    /// Longest stall, ms.
    pub worst_ms: f64,
    /// The peers' delayed-ACK timer, judged from the stalls.
    pub ack_timer: Option<AckTimer>,
    /// What to do (empty without stalls).
    pub advice: String,
}

/// Stall counters of a socket, or of a group of them.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    conns: u64,
    stalls: u64,
    lost_us: u64,
    worst_us: u64,
    timers: [u64; 2],
}

impl Tally {
    fn add(&mut self, s: &detect::Stall) {
        self.stalls += 1;
        self.lost_us += s.lost_us;
        self.worst_us = self.worst_us.max(s.lost_us);
        if let Some(t) = s.timer {
            self.timers[t as usize] += 1;
        }
    }

    fn merge(&mut self, o: &Tally) {
        self.conns += o.conns;
        self.stalls += o.stalls;
        self.lost_us += o.lost_us;
        self.worst_us = self.worst_us.max(o.worst_us);
        for (t, o) in self.timers.iter_mut().zip(o.timers) {
            *t += o;
        }
    }

    fn row(&self, k: &GroupKey, who: Who) -> Row {
        let ack_timer = AckTimer::most_seen(self.timers);
        Row {
            pid: k.pid,
            uid: k.uid,
            cmd: who.cmd,
            program: who.program,
            comm: who.comm,
            port: k.port,
            serves: k.serves,
            netns: k.netns,
            cgroup: who.cgroup,
            container: who.container,
            connections: self.conns as usize,
            stalls: self.stalls,
            lost_ms: self.lost_us as f64 / 1000.0,
            worst_ms: self.worst_us as f64 / 1000.0,
            ack_timer,
            advice: match ack_timer {
                Some(t) => format!(
                    "{SENDER_FIX}; or make the peer ACK at once: {}",
                    t.receiver_fix()
                ),
                None => String::new(),
            },
        }
    }
}

/// What names a socket's owner in a row: its command line and command name.
#[derive(Debug, Clone, Default)]
struct Who {
    cmd: Option<String>,
    program: Option<String>,
    comm: Option<String>,
    cgroup: Option<String>,
    container: Option<String>,
}

/// Tallies by group: sockets are counted under the group they belong to when the rows are
/// made, so a socket attributed to its process late still counts for that process.
type Groups = HashMap<GroupKey, (Who, Tally)>;

fn add_to(groups: &mut Groups, key: &GroupKey, who: &Who, t: &Tally) {
    let g = match groups.get_mut(key) {
        Some(g) => g,
        None => groups.entry(key.clone()).or_default(),
    };
    if g.0.cmd.is_none() {
        g.0.clone_from(who);
    }
    g.1.merge(t);
}

fn rows(groups: Groups) -> Vec<Row> {
    let mut v: Vec<Row> = groups
        .into_iter()
        .map(|(k, (who, t))| t.row(&k, who))
        .collect();
    v.sort_by(|a, b| {
        b.lost_ms
            .total_cmp(&a.lost_ms)
            .then(b.connections.cmp(&a.connections))
            .then(a.port.cmp(&b.port))
    });
    v
}

/// What one sample cost and saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleStats {
    /// TCP sockets: the established ones the kernel listed (sampling), or the kernel's count
    /// of those in use (eBPF, when `full`).
    pub sockets: usize,
    /// Sockets that passed the filter.
    pub watched: usize,
    /// Stalls that ended in this sample.
    pub stalls: usize,
    /// It was a full listing of every established socket (else: lookups of the busy ones);
    /// eBPF: the sockets were counted (once a second).
    pub full: bool,
    /// Sockets busy now (data in flight in the last two seconds): looked up every interval.
    pub busy: usize,
}

/// One stall as it ended, for exporters that need each one (a histogram of durations): see
/// [`Watcher::keep_stalls`].
#[derive(Debug, Clone)]
pub struct StallEvent {
    /// The group of the socket that stalled.
    pub key: GroupKey,
    /// Its owner's command name (`/proc/PID/comm`), if known.
    pub comm: Option<String>,
    /// Its owner's container id, if any.
    pub container: Option<String>,
    /// The stalled socket's local address and port (the writer's end).
    pub local: std::net::SocketAddr,
    /// Its peer's address and port.
    pub remote: std::net::SocketAddr,
    /// When the hold ended (the wall clock; `stall.at_us` on the watch's clock).
    pub at: std::time::SystemTime,
    /// The stall.
    pub stall: detect::Stall,
}

/// The wall-clock time `ago` before now, read now: a clock stepped (NTP, by hand) during a
/// long watch shifts only what happens after the step.
pub(crate) fn wall_clock_ago(ago: std::time::Duration) -> std::time::SystemTime {
    let now = std::time::SystemTime::now();
    now.checked_sub(ago).unwrap_or(now)
}

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
}

/// How long a socket stays busy after it last had data in flight.
const BUSY_US: u64 = 2_000_000;

/// The watcher: call [`sample`](Self::sample) every interval.
pub struct Watcher {
    /// The namespaces, until the listing thread takes them.
    nets: Option<Namespaces>,
    listings: Option<std::sync::mpsc::Receiver<io::Result<lister::Listing>>>,
    lookups: Lookups,
    ns_info: (usize, usize, Option<io::ErrorKind>),
    scan_interval: std::time::Duration,
    listening: HashSet<(u64, u16)>,
    /// The host's ephemeral ports (see [`role`]).
    ephemeral: role::EphemeralPorts,
    /// The /proc scanner, until the listing thread takes it.
    procs: Option<ProcMap>,
    /// Owners of socket inodes, as the listing thread found them.
    owners: HashMap<u32, Process>,
    denied: usize,
    filter: Filter,
    start: Instant,
    /// Per socket, by namespace and cookie.
    sockets: HashMap<(u64, u64), Tracked>,
    rows: Vec<SocketRow>,
    last_gc_us: u64,
    /// Tallies of sockets gone, by their group: this window's and the whole watch's.
    gone_window: Groups,
    gone_total: Groups,
    /// Stalls since the last [`Watcher::take_stalls`], when kept.
    events: Option<Vec<StallEvent>>,
}

impl Watcher {
    /// Opens a netlink socket in every network namespace it can enter and scans /proc once.
    pub fn new(filter: Filter) -> io::Result<Watcher> {
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
            lookups,
            scan_interval: std::time::Duration::from_millis(100),
            listening: HashSet::new(),
            ephemeral: role::EphemeralPorts::of_host(),
            denied: procs.denied,
            procs: Some(procs),
            owners: HashMap::new(),
            filter,
            start: Instant::now(),
            sockets: HashMap::new(),
            rows: Vec::new(),
            last_gc_us: 0,
            gone_window: Groups::new(),
            gone_total: Groups::new(),
            events: None,
        })
    }

    /// How often to list every established socket (default 100 ms); between listings,
    /// [`sample`](Self::sample) looks up only the sockets busy lately.
    pub fn set_scan_interval(&mut self, every: std::time::Duration) {
        self.scan_interval = every;
    }

    /// Keeps every stall from now on, for [`take_stalls`](Self::take_stalls) (which must then be
    /// called often: they pile up until it is).
    pub fn keep_stalls(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// The stalls that ended since the last call (none unless [`keep_stalls`](Self::keep_stalls)).
    pub fn take_stalls(&mut self) -> Vec<StallEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The rows of the window since the last call (stalling groups first); starts a new one.
    pub fn take_window(&mut self) -> Vec<Row> {
        let mut g = std::mem::take(&mut self.gone_window);
        for t in self.sockets.values_mut() {
            if t.window.conns > 0 {
                add_to(&mut g, &t.key, &t.who, &t.window);
            }
            t.window = Tally::default();
        }
        rows(g)
    }

    /// The rows of the whole watch, stalling groups first.
    pub fn totals(&self) -> Vec<Row> {
        let mut g = self.gone_total.clone();
        for t in self.sockets.values() {
            add_to(&mut g, &t.key, &t.who, &t.total);
        }
        rows(g)
    }

    /// Processes whose sockets could not be attributed (not root).
    pub fn denied_processes(&self) -> usize {
        self.denied
    }

    /// The network namespaces: how many are listed, how many could not be entered and why.
    pub fn namespaces(&self) -> (usize, usize, Option<io::ErrorKind>) {
        self.ns_info
    }

    /// Takes one sample and updates the board: exact lookups of the sockets that had data in
    /// flight in the last two seconds (none at all when none had), and the listing of every
    /// established socket that a thread of its own takes every [scan
    /// interval](Self::set_scan_interval), when one is ready (the first sample waits for it).
    pub fn sample(&mut self) -> io::Result<SampleStats> {
        let mut stats = SampleStats::default();
        let listing = match (&self.listings, self.nets.take(), self.procs.take()) {
            (None, Some(nets), Some(procs)) => {
                let rx = lister::spawn(nets, procs, self.scan_interval)?;
                let first = rx.recv();
                self.listings = Some(rx);
                Some(first.map_err(|_| io::Error::other("the listing thread stopped"))?)
            }
            (Some(rx), _, _) => match rx.try_recv() {
                Ok(l) => Some(l),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
                Err(_) => return Err(io::Error::other("the listing thread stopped")),
            },
            _ => None,
        };
        if let Some(l) = listing {
            let l = l?;
            if let Some(set) = l.listening {
                self.listening = set;
            }
            for (ns, d) in l.lookups {
                self.lookups.add(ns, d);
            }
            self.lookups.retain(|ns| l.present.contains(&ns));
            self.ns_info = (l.present.len(), l.not_entered.0, l.not_entered.1);
            self.denied = l.denied;
            self.owners.extend(l.owners);
            let live: HashSet<u32> = l.rows.iter().map(|r| r.inode).collect();
            self.owners.retain(|i, _| live.contains(i));
            self.rows = l.rows;
            let at_us = l.at.saturating_duration_since(self.start).as_micros() as u64;
            self.process(true, at_us, &mut stats);
            stats.sockets = self.rows.len();
            stats.full = true;
        }
        let now_us = self.start.elapsed().as_micros() as u64;
        let busy: Vec<&SocketRow> = self
            .sockets
            .values()
            .filter(|t| t.busy_until_us >= now_us)
            .map(|t| &t.id)
            .collect();
        if !busy.is_empty() {
            let mut rows = std::mem::take(&mut self.rows);
            rows.clear();
            self.lookups.lookup(&busy, &mut rows)?;
            self.rows = rows;
            let at_us = self.start.elapsed().as_micros() as u64;
            self.process(false, at_us, &mut stats);
        }
        Ok(stats)
    }

    /// Observes `self.rows`, taken at `at_us`: a listing of every socket if `full`, else
    /// lookups of the busy ones.
    fn process(&mut self, full: bool, at_us: u64, stats: &mut SampleStats) {
        let listening = &self.listening;
        let port_ok = |r: &SocketRow| {
            r.state != state::LISTEN
                && self
                    .filter
                    .port
                    .is_none_or(|p| p == r.local.port() || p == r.remote.port())
        };
        for r in &self.rows {
            if !port_ok(r) {
                continue;
            }
            // New, or not attributed yet while /proc now names its owner (sockets waiting in
            // an accept queue have no inode yet; a scan may also miss a socket made during it).
            let id = (r.netns, r.cookie);
            let resolve = match self.sockets.get(&id) {
                None => true,
                Some(t) => {
                    t.key.pid.is_none() && r.inode != 0 && self.owners.contains_key(&r.inode)
                }
            };
            if resolve {
                let owner = self.owners.get(&r.inode).cloned();
                let (serves, port) = role::role(
                    listening.contains(&(r.netns, r.local.port())),
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
                    observed_us: 0,
                    last_us: at_us,
                    window: Tally::default(),
                    total: Tally {
                        conns: 1,
                        ..Tally::default()
                    },
                });
                t.key = key;
                t.who = owner.map_or_else(Who::default, |o| Who {
                    cmd: Some(o.cmd),
                    program: Some(o.program),
                    comm: Some(o.comm),
                    cgroup: Some(o.cgroup),
                    container: o.container,
                });
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
                }
                continue;
            };
            if at_us <= t.observed_us {
                continue;
            }
            t.observed_us = at_us;
            let stall = t.tracker.observe(at_us, info);
            if info.unacked > 0 || info.notsent_bytes.is_some_and(|n| n > 0) || t.tracker.holding()
            {
                t.busy_until_us = at_us + BUSY_US;
            }
            if t.busy_until_us >= at_us {
                stats.busy += 1;
            }
            if let Some(stall) = stall {
                stats.stalls += 1;
                t.window.add(&stall);
                t.total.add(&stall);
                if let Some(ev) = &mut self.events {
                    ev.push(StallEvent {
                        key: t.key.clone(),
                        comm: t.who.comm.clone(),
                        container: t.who.container.clone(),
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
                        add_to(gw, &t.key, &t.who, &t.window);
                    }
                    add_to(gt, &t.key, &t.who, &t.total);
                }
                live
            });
        }
    }
}
