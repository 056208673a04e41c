//! The board both backends feed: stalls tallied per group (a process and a port, in a
//! network namespace), and the rows made of them, stalling groups first. The sampler
//! ([`crate::sampling`]) merges each socket's tallies into it; the eBPF backend
//! ([`crate::ebpf`]) adds each stall it is told of, counting the connections that stalled.

use std::collections::{HashMap, HashSet};

use nagless_stall_rule::{AckTimer, SENDER_FIX};

use crate::detect::Stall;

/// What a row of the table is about: a process (if known) and a port: the local port when
/// the process listens on it (a server), else the remote one (a client).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Owning process id (`None`: not readable, see [`procs`](crate::procs)).
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
    /// Which program it runs (the script, module or main class:
    /// [`procs::program_name`](crate::procs::program_name)), if known.
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
    /// The owner's program without arguments
    /// ([`procs::service_name`](crate::procs::service_name)): the metrics' `process` label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The owner's pod, on a Kubernetes node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<crate::kube::Pod>,
    /// Connections seen: every established connection of the group (sampling), or those that
    /// stalled (eBPF, whose kernel programs report only long holds).
    pub connections: usize,
    /// Connections of the group that stalled (the same under both backends).
    pub stalling_connections: usize,
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

impl Row {
    /// The systemd unit the owner's cgroup names, outside containers (a container's id and
    /// pod say more).
    pub fn unit(&self) -> Option<String> {
        crate::procs::service_unit(self.container.as_deref(), self.cgroup.as_deref())
    }
}

/// Stall counters of a socket, or of a group of them.
#[derive(Debug, Clone, Copy, Default)]
///
/// Invariant: `stalling <= conns` for a socket's tally (`conns` at most 1) and for a sum of
/// such tallies or of [`Board::add_stall`]'s.
pub(crate) struct Tally {
    pub(crate) conns: u64,
    /// Connections among `conns` that stalled.
    stalling: u64,
    stalls: u64,
    lost_us: u64,
    worst_us: u64,
    timers: [u64; 2],
}

impl Tally {
    /// One connection, no stall yet.
    pub(crate) fn connection() -> Tally {
        Tally {
            conns: 1,
            ..Tally::default()
        }
    }

    /// Counts one stall: the tally's connection (if it counts one) stalled.
    pub(crate) fn add(&mut self, s: &Stall) {
        self.stalling = self.conns;
        self.stalls += 1;
        self.lost_us += s.lost_us;
        self.worst_us = self.worst_us.max(s.lost_us);
        if let Some(t) = s.timer {
            self.timers[t as usize] += 1;
        }
    }

    fn merge(&mut self, o: &Tally) {
        self.conns += o.conns;
        self.stalling += o.stalling;
        debug_assert!(self.stalling <= self.conns);
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
            service: who.service,
            pod: who.pod,
            connections: self.conns as usize,
            stalling_connections: self.stalling as usize,
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
pub(crate) struct Who {
    pub(crate) cmd: Option<String>,
    pub(crate) program: Option<String>,
    pub(crate) comm: Option<String>,
    pub(crate) cgroup: Option<String>,
    pub(crate) container: Option<String>,
    pub(crate) service: Option<String>,
    pub(crate) pod: Option<crate::kube::Pod>,
}

impl Who {
    /// The systemd unit the owner's cgroup names, outside containers (a container's id and
    /// pod say more).
    pub(crate) fn unit(&self) -> Option<String> {
        crate::procs::service_unit(self.container.as_deref(), self.cgroup.as_deref())
    }
}

/// Tallies by group: sockets are counted under the group they belong to when the rows are
/// made, so a socket attributed to its process late still counts for that process.
#[derive(Debug, Clone, Default)]
pub(crate) struct Board {
    groups: HashMap<GroupKey, (Who, Tally)>,
    /// The connections (by group and socket cookie) [`add_stall`](Self::add_stall) counted.
    stalled: HashSet<(GroupKey, u64)>,
}

impl Board {
    /// Adds a socket's (or a group's) tally to its group; the first owner named names it.
    pub(crate) fn add(&mut self, key: &GroupKey, who: &Who, t: &Tally) {
        let g = match self.groups.get_mut(key) {
            Some(g) => g,
            None => self.groups.entry(key.clone()).or_default(),
        };
        if g.0.cmd.is_none() {
            g.0.clone_from(who);
        }
        g.1.merge(t);
    }

    /// Adds one stall of connection `cookie` to its group, which counts the connection
    /// once, at its first stall.
    pub(crate) fn add_stall(&mut self, key: &GroupKey, who: &Who, cookie: u64, s: &Stall) {
        let mut t = if self.stalled.insert((key.clone(), cookie)) {
            Tally::connection()
        } else {
            Tally::default()
        };
        t.add(s);
        self.add(key, who, &t);
    }

    /// The rows, stalling groups first.
    pub(crate) fn rows(&self) -> Vec<Row> {
        let mut v: Vec<Row> = self
            .groups
            .iter()
            .map(|(k, (who, t))| t.row(k, who.clone()))
            .collect();
        v.sort_by(|a, b| {
            b.lost_ms
                .total_cmp(&a.lost_ms)
                .then(b.connections.cmp(&a.connections))
                .then(a.port.cmp(&b.port))
        });
        v
    }
}
