//! # nagless-watch
//!
//! Finds processes whose TCP connections stall on Nagle and delayed ACK, live, on a running
//! host: no capture, no restart. Every interval it reads every TCP socket's `tcp_info`
//! through netlink `sock_diag` ([`diag`]), follows each socket's held writes ([`detect`],
//! judged by the doctor's [`rule`](nagless_doctor::rule)), and adds the stalls up per
//! process and port, attributing sockets to processes through /proc ([`procs`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod detect;
pub mod diag;
pub mod procs;

use std::collections::{HashMap, HashSet};
use std::io;
use std::time::Instant;

use nagless_doctor::rule::{AckTimer, SENDER_FIX};
use netlink_packet_sock_diag::inet::StateFlags;

use crate::detect::HoldTracker;
use crate::diag::{state, Diag, SocketRow};
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
    /// Port (local if `serves`, else remote).
    pub port: u16,
    /// The process listens on `port`.
    pub serves: bool,
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

#[derive(Default)]
struct Group {
    cmd: Option<String>,
    conns: HashSet<u64>,
    stalls: u64,
    lost_us: u64,
    worst_us: u64,
    timers: [u64; 2],
}

impl Group {
    fn row(&self, k: &GroupKey) -> Row {
        let ack_timer = if self.stalls == 0 {
            None
        } else if self.timers[1] > self.timers[0] {
            Some(AckTimer::Classic200ms)
        } else {
            Some(AckTimer::Linux40ms)
        };
        Row {
            pid: k.pid,
            uid: k.uid,
            cmd: self.cmd.clone(),
            port: k.port,
            serves: k.serves,
            connections: self.conns.len(),
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

/// Stalls added up per group, over the whole watch and over the current window.
#[derive(Default)]
struct Board {
    total: HashMap<GroupKey, Group>,
    window: HashMap<GroupKey, Group>,
}

impl Board {
    fn note(&mut self, key: &GroupKey, cmd: &Option<String>, stall: Option<&detect::Stall>) {
        for map in [&mut self.total, &mut self.window] {
            let g = match map.get_mut(key) {
                Some(g) => g,
                None => map.entry(key.clone()).or_default(),
            };
            if g.cmd.is_none() {
                g.cmd.clone_from(cmd);
            }
            if let Some(s) = stall {
                g.stalls += 1;
                g.lost_us += s.lost_us;
                g.worst_us = g.worst_us.max(s.lost_us);
                if let Some(t) = s.timer {
                    g.timers[t as usize] += 1;
                }
            }
        }
    }

    fn connection(&mut self, key: &GroupKey, cookie: u64) {
        for map in [&mut self.total, &mut self.window] {
            if let Some(g) = map.get_mut(key) {
                g.conns.insert(cookie);
            }
        }
    }

    fn take_window(&mut self) -> Vec<Row> {
        rows(std::mem::take(&mut self.window))
    }

    fn totals(&self) -> Vec<Row> {
        rows(
            self.total
                .iter()
                .map(|(k, g)| (k.clone(), clone_group(g)))
                .collect(),
        )
    }
}

fn clone_group(g: &Group) -> Group {
    Group {
        cmd: g.cmd.clone(),
        conns: g.conns.clone(),
        stalls: g.stalls,
        lost_us: g.lost_us,
        worst_us: g.worst_us,
        timers: g.timers,
    }
}

fn rows(map: HashMap<GroupKey, Group>) -> Vec<Row> {
    let mut v: Vec<Row> = map.iter().map(|(k, g)| g.row(k)).collect();
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

/// What the watcher keeps per socket.
struct Tracked {
    tracker: HoldTracker,
    key: GroupKey,
    cmd: Option<String>,
    last_us: u64,
    /// Counted among its group's connections in the current window.
    counted: bool,
}

/// The watcher: call [`sample`](Self::sample) every interval.
pub struct Watcher {
    diag: Diag,
    procs: ProcMap,
    filter: Filter,
    start: Instant,
    /// Per socket, by cookie.
    sockets: HashMap<u64, Tracked>,
    rows: Vec<SocketRow>,
    last_rescan: Option<Instant>,
    last_gc_us: u64,
    board: Board,
}

impl Watcher {
    /// Opens the netlink socket and scans /proc once.
    pub fn new(filter: Filter) -> io::Result<Watcher> {
        let mut procs = ProcMap::default();
        procs.rescan();
        Ok(Watcher {
            diag: Diag::open()?,
            procs,
            filter,
            start: Instant::now(),
            sockets: HashMap::new(),
            rows: Vec::new(),
            last_rescan: None,
            last_gc_us: 0,
            board: Board::default(),
        })
    }

    /// The rows of the window since the last call (stalling groups first); starts a new one.
    pub fn take_window(&mut self) -> Vec<Row> {
        for t in self.sockets.values_mut() {
            t.counted = false;
        }
        self.board.take_window()
    }

    /// The rows of the whole watch, stalling groups first.
    pub fn totals(&self) -> Vec<Row> {
        self.board.totals()
    }

    /// Processes whose sockets could not be attributed (not root).
    pub fn denied_processes(&self) -> usize {
        self.procs.denied
    }

    /// Takes one sample of every TCP socket and updates the board.
    pub fn sample(&mut self) -> io::Result<SampleStats> {
        self.rows.clear();
        let states = StateFlags::ESTABLISHED | StateFlags::CLOSE_WAIT | StateFlags::LISTEN;
        self.diag.dump(states, &mut self.rows)?;
        let at_us = self.start.elapsed().as_micros() as u64;
        let listening: HashSet<u16> = self
            .rows
            .iter()
            .filter(|r| r.state == state::LISTEN)
            .map(|r| r.local.port())
            .collect();
        // New sockets are attributed by a fresh /proc scan, at most five times a second.
        let unknown = self
            .rows
            .iter()
            .any(|r| r.state != state::LISTEN && r.inode != 0 && !self.procs.knows(r.inode));
        let mut rescanned = false;
        if unknown
            && self
                .last_rescan
                .is_none_or(|t| t.elapsed().as_millis() >= 200)
        {
            self.procs.rescan();
            self.last_rescan = Some(Instant::now());
            rescanned = true;
        }
        let mut stats = SampleStats {
            sockets: self.rows.len(),
            ..SampleStats::default()
        };
        for r in &self.rows {
            if r.state == state::LISTEN {
                continue;
            }
            if self
                .filter
                .port
                .is_some_and(|p| p != r.local.port() && p != r.remote.port())
            {
                continue;
            }
            let Some(info) = &r.info else { continue };
            let known = self
                .sockets
                .get(&r.cookie)
                .is_some_and(|t| t.key.pid.is_some() || !rescanned);
            if !known {
                // New (or not yet attributed, and /proc was just scanned again).
                let owner = self.procs.owner(r.inode);
                let serves = listening.contains(&r.local.port());
                let key = GroupKey {
                    pid: owner.as_ref().map(|o| o.pid),
                    uid: r.uid,
                    port: if serves {
                        r.local.port()
                    } else {
                        r.remote.port()
                    },
                    serves,
                };
                let cmd = owner.map(|o| o.cmd);
                let t = self.sockets.entry(r.cookie).or_insert_with(|| Tracked {
                    tracker: HoldTracker::default(),
                    key: key.clone(),
                    cmd: None,
                    last_us: at_us,
                    counted: false,
                });
                t.key = key;
                t.cmd = cmd;
                t.counted = false;
            }
            let Some(t) = self.sockets.get_mut(&r.cookie) else {
                continue;
            };
            if self.filter.pid.is_some_and(|p| t.key.pid != Some(p)) {
                continue;
            }
            stats.watched += 1;
            t.last_us = at_us;
            let stall = t.tracker.observe(at_us, info);
            if stall.is_some() || !t.counted {
                stats.stalls += usize::from(stall.is_some());
                self.board.note(&t.key, &t.cmd, stall.as_ref());
                self.board.connection(&t.key, r.cookie);
                t.counted = true;
            }
        }
        // Once a second: forget sockets gone for a second.
        if self.last_gc_us + 1_000_000 <= at_us {
            self.last_gc_us = at_us;
            self.sockets
                .retain(|_, t| at_us.saturating_sub(t.last_us) <= 1_000_000);
        }
        Ok(stats)
    }
}
