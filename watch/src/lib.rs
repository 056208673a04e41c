//! # nagless-watch
//!
//! Finds processes whose TCP connections stall on Nagle and delayed ACK, live, on a running
//! host: no capture, no restart. Every interval it reads every TCP socket's `tcp_info`
//! through netlink `sock_diag` ([`diag`]), follows each socket's held writes ([`detect`],
//! judged by [`nagless_stall_rule`], the rule `nagless doctor` uses), and adds the stalls up per
//! process and port, attributing sockets to processes through /proc ([`procs`]). It lists
//! every network namespace it can enter ([`netns`]: containers, pods) and names the container
//! of each row; [`metrics`] exposes the board to Prometheus.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod detect;
pub mod diag;
pub mod metrics;
pub mod netns;
pub mod procs;

use std::collections::{HashMap, HashSet};
use std::io;
use std::time::Instant;

use nagless_stall_rule::{AckTimer, SENDER_FIX};
use netlink_packet_sock_diag::inet::StateFlags;

use crate::detect::HoldTracker;
use crate::diag::{state, SocketRow};
use crate::netns::Namespaces;
use crate::procs::ProcMap;

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
    /// TCP sockets the kernel listed.
    pub sockets: usize,
    /// Sockets that passed the filter.
    pub watched: usize,
    /// Stalls that ended in this sample.
    pub stalls: usize,
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
    /// The stall.
    pub stall: detect::Stall,
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
    /// /proc scans made while it was unattributed.
    rescans: u8,
}

/// The watcher: call [`sample`](Self::sample) every interval.
pub struct Watcher {
    nets: Namespaces,
    last_nets: Instant,
    procs: ProcMap,
    filter: Filter,
    start: Instant,
    /// Per socket, by namespace and cookie.
    sockets: HashMap<(u64, u64), Tracked>,
    rows: Vec<SocketRow>,
    last_rescan: Option<Instant>,
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
        Ok(Watcher {
            nets,
            last_nets: Instant::now(),
            procs,
            filter,
            start: Instant::now(),
            sockets: HashMap::new(),
            rows: Vec::new(),
            last_rescan: None,
            last_gc_us: 0,
            gone_window: Groups::new(),
            gone_total: Groups::new(),
            events: None,
        })
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
        self.procs.denied
    }

    /// The network namespaces: how many are listed, how many could not be entered and why.
    pub fn namespaces(&self) -> (usize, usize, Option<io::ErrorKind>) {
        let (n, why) = self.nets.not_entered();
        (self.nets.listed(), n, why)
    }

    /// Takes one sample of every TCP socket and updates the board.
    pub fn sample(&mut self) -> io::Result<SampleStats> {
        self.rows.clear();
        let states = StateFlags::ESTABLISHED | StateFlags::CLOSE_WAIT | StateFlags::LISTEN;
        // New namespaces (containers started) every two seconds; gone ones are dropped.
        if self.last_nets.elapsed().as_secs() >= 2 {
            self.nets.refresh();
            self.last_nets = Instant::now();
        }
        self.nets.dump(states, &mut self.rows)?;
        let at_us = self.start.elapsed().as_micros() as u64;
        let listening: HashSet<(u64, u16)> = self
            .rows
            .iter()
            .filter(|r| r.state == state::LISTEN)
            .map(|r| (r.netns, r.local.port()))
            .collect();
        let mut stats = SampleStats {
            sockets: self.rows.len(),
            ..SampleStats::default()
        };
        let port_ok = |r: &SocketRow| {
            r.state != state::LISTEN
                && self
                    .filter
                    .port
                    .is_none_or(|p| p == r.local.port() || p == r.remote.port())
        };
        // Sockets not yet attributed get a fresh /proc scan (at most five a second, and a few
        // per socket: some can never be attributed, such as other users' without root).
        let wanting = self.rows.iter().any(|r| {
            port_ok(r)
                && r.inode != 0
                && !self.procs.knows(r.inode)
                && self
                    .sockets
                    .get(&(r.netns, r.cookie))
                    .is_none_or(|t| t.rescans < 3)
        });
        let mut rescanned = false;
        if wanting
            && self
                .last_rescan
                .is_none_or(|t| t.elapsed().as_millis() >= 200)
        {
            self.procs.rescan();
            self.last_rescan = Some(Instant::now());
            rescanned = true;
        }
        for r in &self.rows {
            if !port_ok(r) {
                continue;
            }
            let Some(info) = &r.info else { continue };
            // New, or not attributed yet while /proc now names its owner (sockets waiting in
            // an accept queue have no inode yet; a scan may also miss a socket made during it).
            let id = (r.netns, r.cookie);
            let resolve = match self.sockets.get(&id) {
                None => true,
                Some(t) => t.key.pid.is_none() && r.inode != 0 && self.procs.knows(r.inode),
            };
            if resolve {
                let owner = self.procs.owner(r.inode);
                let serves = listening.contains(&(r.netns, r.local.port()));
                let key = GroupKey {
                    pid: owner.as_ref().map(|o| o.pid),
                    uid: r.uid,
                    port: if serves {
                        r.local.port()
                    } else {
                        r.remote.port()
                    },
                    serves,
                    netns: r.netns,
                };
                let t = self.sockets.entry(id).or_insert_with(|| Tracked {
                    tracker: HoldTracker::default(),
                    key: key.clone(),
                    who: Who::default(),
                    last_us: at_us,
                    window: Tally::default(),
                    total: Tally {
                        conns: 1,
                        ..Tally::default()
                    },
                    rescans: 0,
                });
                t.key = key;
                t.who = owner.map_or_else(Who::default, |o| Who {
                    cmd: Some(o.cmd),
                    comm: Some(o.comm),
                    cgroup: Some(o.cgroup),
                    container: o.container,
                });
            }
            if rescanned && r.inode != 0 && !self.procs.knows(r.inode) {
                if let Some(t) = self.sockets.get_mut(&id) {
                    t.rescans = t.rescans.saturating_add(1);
                }
            }
            let Some(t) = self.sockets.get_mut(&id) else {
                continue;
            };
            if self.filter.pid.is_some_and(|p| t.key.pid != Some(p)) {
                continue;
            }
            stats.watched += 1;
            t.last_us = at_us;
            t.window.conns = 1;
            if let Some(stall) = t.tracker.observe(at_us, info) {
                stats.stalls += 1;
                t.window.add(&stall);
                t.total.add(&stall);
                if let Some(ev) = &mut self.events {
                    ev.push(StallEvent {
                        key: t.key.clone(),
                        comm: t.who.comm.clone(),
                        container: t.who.container.clone(),
                        stall,
                    });
                }
            }
        }
        // Once a second: sockets gone for a second leave their tallies to their group.
        if self.last_gc_us + 1_000_000 <= at_us {
            self.last_gc_us = at_us;
            let (gw, gt) = (&mut self.gone_window, &mut self.gone_total);
            self.sockets.retain(|_, t| {
                let live = at_us.saturating_sub(t.last_us) <= 1_000_000;
                if !live {
                    if t.window.conns > 0 {
                        add_to(gw, &t.key, &t.who, &t.window);
                    }
                    add_to(gt, &t.key, &t.who, &t.total);
                }
                live
            });
        }
        Ok(stats)
    }
}
