//! The board both backends feed: stalls, and the short holds a prompt ACK released (the
//! evidence of an ACK-clocked connection), tallied per group (a process and a port, in a
//! network namespace), and the rows made of them, stalling and clocked groups first. The
//! sampler ([`crate::sampling`]) merges each socket's tallies into it; the eBPF backend
//! ([`crate::ebpf`]) adds each stall it is told of and each socket's drained short holds,
//! counting the connections that stalled or were clocked. Each row is judged ACK-clocked or
//! not by [`nagless_stall_rule::judge_clock`] over the time the rows cover.

use std::collections::{HashMap, HashSet};

use nagless_stall_rule::{
    clock_window_us, judge_clock, AckClocked, AckTimer, ClockEvidence, SENDER_FIX,
};

use crate::accept::{AcceptQueue, Listener};
use crate::detect::Stall;
use crate::peer::Receiver;
use crate::waits::Waits;

/// What a row of the table is about: a process (if known) and a port: the local port when
/// the process listens on it (a server), else the remote one (a client).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Owning process id (`None`: not readable, see [`procs`](crate::procs)).
    pub pid: Option<u32>,
    /// Owner's uid (shown when the pid is unknown).
    pub(crate) uid: u32,
    /// The port.
    pub port: u16,
    /// The port is the local one (the process serves it).
    pub serves: bool,
    /// The network namespace of its sockets (inode of `/proc/PID/ns/net`).
    pub(crate) netns: u64,
}

/// What cost a group most.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowKind {
    /// Neither stalls nor an ACK-clocked connection.
    #[default]
    None,
    /// Nagle/delayed-ACK stalls (and they cost more than any ACK-clocked wait).
    Stall,
    /// ACK-clocked: its writes waited behind the peer's prompt ACKs, not a stall (and that
    /// cost more than any stalls it had).
    AckClocked,
    /// Its own writes held by a cork the kernel's 200 ms ceiling released (eBPF only; and
    /// that cost more than its stalls and clocked waits).
    SenderHold,
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
    /// `procs::program_name`), if known.
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
    /// (`procs::service_name`): the metrics' `process` label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The owner's pod, on a Kubernetes node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<crate::kube::Pod>,
    /// Connections seen: every established connection of the group (sampling), or those that
    /// stalled or had writes released by prompt ACKs (eBPF, whose kernel programs tell of no
    /// other).
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
    /// What cost the group most: `stall`, `ack-clocked` or `none`.
    pub kind: RowKind,
    /// Small writes a prompt ACK released (short holds, not stalls).
    pub ack_released: u64,
    /// The time they waited, ms.
    pub ack_held_ms: f64,
    /// Connections with such writes.
    pub ack_released_connections: usize,
    /// The verdict of [`judge_clock`] when the group is ACK-clocked over the row's time
    /// (`null` otherwise): its releases, the share of each connection's time its writes
    /// waited behind the peer's ACKs, and that time per second.
    pub ack_clocked: Option<AckClocked>,
    /// The process on this host whose delayed ACKs its stalls waited for (the last one
    /// seen), when the connections' other ends are held here: its fix is this host's too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acked_by: Option<Receiver>,
    /// What the kernel counted of its connections' time and losses ([`Waits`]): where the
    /// time went when it was not a stall (sampling backend; absent from the JSON when
    /// nothing was counted, as under eBPF).
    #[serde(skip_serializing_if = "Waits::is_empty")]
    pub waits: Waits,
    /// Writes the group's connections held themselves: the last piece of a message kept back
    /// by a cork (`TCP_CORK`, or a send with `MSG_MORE`) with nothing in flight, until the
    /// kernel's 200 ms ceiling sent it. Not Nagle. eBPF only (sampling cannot see them).
    pub sender_holds: u64,
    /// Their time held, ms.
    pub sender_hold_ms: f64,
    /// Connections with such holds.
    pub sender_hold_connections: usize,
    /// Its listener's accept queue, when it was seen full or handshakes to it were dropped
    /// (absent from the JSON otherwise): connects that wait 1 s, then 3 s, on a
    /// program that accepts too slowly. Not Nagle.
    #[serde(skip_serializing_if = "AcceptQueue::is_quiet")]
    pub accept_queue: AcceptQueue,
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
    /// Short holds a prompt ACK released, the time they waited (µs), connections among
    /// `conns` with such holds, and when the first began and the last ended (µs).
    clock_releases: u64,
    clock_held_us: u64,
    clocking: u64,
    clock_span: Option<(u64, u64)>,
    /// The process on this host whose delayed ACKs the last stall waited for, if one did
    /// ([`crate::peer`]).
    acked_by: Option<u32>,
    /// What the kernel counted of the time and losses ([`crate::waits`]).
    waits: Waits,
    /// Writes its sender held itself (a cork the kernel's ceiling released), their time
    /// (µs), and connections among `conns` with such holds.
    corks: u64,
    cork_us: u64,
    corking: u64,
    /// Its listener's accept queue, as looked at ([`crate::accept`]).
    accept: AcceptQueue,
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

    /// Counts `releases` short holds a prompt ACK released, which waited `held_us` in all,
    /// between `from_us` and `to_us`: the tally's connection (if it counts one) had them.
    pub(crate) fn add_clock(&mut self, releases: u64, held_us: u64, (from_us, to_us): (u64, u64)) {
        self.clocking = self.conns;
        self.clock_releases += releases;
        self.clock_held_us += held_us;
        self.clock_span = Some(match self.clock_span {
            Some((a, b)) => (a.min(from_us), b.max(to_us)),
            None => (from_us, to_us),
        });
    }

    /// Counts one write the sender held itself for `held_us`: the tally's connection (if it
    /// counts one) had it.
    pub(crate) fn add_cork(&mut self, held_us: u64) {
        self.corking = self.conns;
        self.corks += 1;
        self.cork_us += held_us;
    }

    /// Counts what the kernel counted of the connection's time and losses since last read.
    pub(crate) fn add_waits(&mut self, w: &Waits) {
        self.waits.add(w);
    }

    /// The last stall waited for the delayed ACKs of process `pid` on this host.
    pub(crate) fn acked_by(&mut self, pid: Option<u32>) {
        self.acked_by = pid.or(self.acked_by);
    }

    fn merge(&mut self, o: &Tally) {
        self.acked_by = o.acked_by.or(self.acked_by);
        self.accept.merge(&o.accept);
        self.waits.add(&o.waits);
        self.conns += o.conns;
        self.stalling += o.stalling;
        self.clocking += o.clocking;
        self.corking += o.corking;
        debug_assert!(
            self.stalling <= self.conns
                && self.clocking <= self.conns
                && self.corking <= self.conns
        );
        self.corks += o.corks;
        self.cork_us += o.cork_us;
        self.clock_releases += o.clock_releases;
        self.clock_held_us += o.clock_held_us;
        self.clock_span = match (self.clock_span, o.clock_span) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (x, None) | (None, x) => x,
        };
        self.stalls += o.stalls;
        self.lost_us += o.lost_us;
        self.worst_us = self.worst_us.max(o.worst_us);
        for (t, o) in self.timers.iter_mut().zip(o.timers) {
            *t += o;
        }
    }

    /// The row of group `k`, whose tallies cover `watched_us`.
    fn row(&self, k: &GroupKey, who: Who, watched_us: u64) -> Row {
        let ack_timer = AckTimer::most_seen(self.timers);
        let span_us = self.clock_span.map_or(0, |(a, b)| b.saturating_sub(a));
        let ack_clocked = judge_clock(&ClockEvidence {
            releases: self.clock_releases,
            held_us: self.clock_held_us,
            window_us: clock_window_us(span_us, watched_us),
            connections: self.clocking.max(1),
            data_segments: None,
        })
        .ok();
        let clocked_us = ack_clocked.map_or(0, |_| self.clock_held_us);
        let kind = match ack_clocked {
            _ if self.corks > 0 && self.cork_us >= self.lost_us.max(clocked_us) => {
                RowKind::SenderHold
            }
            Some(_) if self.clock_held_us >= self.lost_us => RowKind::AckClocked,
            _ if self.stalls > 0 => RowKind::Stall,
            Some(_) => RowKind::AckClocked,
            None => RowKind::None,
        };
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
            kind,
            ack_released: self.clock_releases,
            ack_held_ms: self.clock_held_us as f64 / 1000.0,
            ack_released_connections: self.clocking as usize,
            ack_clocked,
            acked_by: self.acked_by.map(crate::peer::named),
            waits: self.waits,
            sender_holds: self.corks,
            sender_hold_ms: self.cork_us as f64 / 1000.0,
            sender_hold_connections: self.corking as usize,
            accept_queue: self.accept,
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

impl From<crate::procs::Process> for Who {
    fn from(p: crate::procs::Process) -> Who {
        Who {
            cmd: Some(p.cmd),
            program: Some(p.program),
            comm: Some(p.comm),
            cgroup: Some(p.cgroup),
            container: p.container,
            service: Some(p.service),
            pod: p.pod,
        }
    }
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
    /// The connections (by group and socket cookie) [`add_stall`](Self::add_stall) and
    /// [`add_clock`](Self::add_clock) counted; those that stalled; those that were clocked.
    seen: HashSet<(GroupKey, u64)>,
    stalled: HashSet<(GroupKey, u64)>,
    clocked: HashSet<(GroupKey, u64)>,
    corked: HashSet<(GroupKey, u64)>,
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
    pub(crate) fn add_stall(
        &mut self,
        key: &GroupKey,
        who: &Who,
        cookie: u64,
        s: &Stall,
        acked_by: Option<u32>,
    ) {
        let mut t = Tally::default();
        t.add(s);
        t.acked_by(acked_by);
        let id = (key.clone(), cookie);
        t.conns = u64::from(self.seen.insert(id.clone()));
        t.stalling = u64::from(self.stalled.insert(id));
        self.add(key, who, &t);
    }

    /// Adds connection `cookie`'s short holds a prompt ACK released (`releases` of them,
    /// `held_us` in all, between `span`'s ends, µs) to its group, which counts the connection
    /// once.
    pub(crate) fn add_clock(
        &mut self,
        key: &GroupKey,
        who: &Who,
        cookie: u64,
        (releases, held_us): (u64, u64),
        span: (u64, u64),
    ) {
        let mut t = Tally::default();
        t.add_clock(releases, held_us, span);
        let id = (key.clone(), cookie);
        t.conns = u64::from(self.seen.insert(id.clone()));
        t.clocking = u64::from(self.clocked.insert(id));
        self.add(key, who, &t);
    }

    /// Adds one write of connection `cookie` its sender held itself for `held_us` (a cork the
    /// kernel's ceiling released) to its group, which counts the connection once.
    pub(crate) fn add_cork(&mut self, key: &GroupKey, who: &Who, cookie: u64, held_us: u64) {
        let mut t = Tally::default();
        t.add_cork(held_us);
        let id = (key.clone(), cookie);
        t.conns = u64::from(self.seen.insert(id.clone()));
        t.corking = u64::from(self.corked.insert(id));
        self.add(key, who, &t);
    }

    /// Adds what the kernel counted of a socket's time and losses since it was last read
    /// (under eBPF, from the `waits` iterator: sampling adds its own socket's tallies).
    pub(crate) fn add_waits(&mut self, key: &GroupKey, who: &Who, cookie: u64, w: &Waits) {
        let mut t = Tally::default();
        t.add_waits(w);
        t.conns = u64::from(self.seen.insert((key.clone(), cookie)));
        self.add(key, who, &t);
    }

    /// Adds what a look said of each listener ([`crate::accept::Judge`]) to `boards` (a
    /// window's and the whole watch's), under the group of the listener's owner (`owner`, by
    /// socket inode) serving its port, if `filter` keeps it.
    pub(crate) fn add_accepts(
        mut boards: [&mut Board; 2],
        judged: &[(&Listener, AcceptQueue)],
        filter: &crate::Filter,
        mut owner: impl FnMut(u32) -> Option<crate::procs::Process>,
    ) {
        // The listeners of one group (a server's IPv4 and IPv6 sockets on one port) are one
        // queue to its clients: joined first, so that one look counts its time once.
        let mut groups: HashMap<GroupKey, (Who, AcceptQueue)> = HashMap::new();
        for (l, q) in judged {
            let o = owner(l.inode);
            let pid = o.as_ref().map(|o| o.pid);
            if !filter.keeps(pid, (l.port, l.port)) {
                continue;
            }
            let key = GroupKey {
                pid,
                uid: l.uid,
                port: l.port,
                serves: true,
                netns: l.netns,
            };
            match groups.get_mut(&key) {
                Some(g) => g.1 = crate::accept::merge_look(&g.1, q),
                None => {
                    groups.insert(key, (o.map_or_else(Who::default, Who::from), *q));
                }
            }
        }
        for (key, (who, q)) in groups {
            // (A quiet listener of a port another process's listener filled: nothing to say.)
            if q.is_quiet() {
                continue;
            }
            let t = Tally {
                accept: q,
                ..Tally::default()
            };
            for b in boards.iter_mut() {
                b.add(&key, &who, &t);
            }
        }
    }

    /// The rows, over tallies that cover `watched_us` (a window, or the whole watch),
    /// stalling and clocked groups first.
    pub(crate) fn rows(&self, watched_us: u64) -> Vec<Row> {
        let mut v: Vec<Row> = self
            .groups
            .iter()
            .map(|(k, (who, t))| t.row(k, who.clone(), watched_us))
            .collect();
        v.sort_by(|a, b| {
            (b.lost_ms + b.ack_held_ms + b.sender_hold_ms)
                .total_cmp(&(a.lost_ms + a.ack_held_ms + a.sender_hold_ms))
                .then(b.connections.cmp(&a.connections))
                .then(a.port.cmp(&b.port))
        });
        v
    }
}

#[cfg(test)]
mod tests;
