//! Every network namespace of the host: containers and Kubernetes pods each have their own,
//! and a `sock_diag` dump lists only the sockets of the namespace its netlink socket was
//! opened in.
//!
//! [`Namespaces::refresh`] finds the distinct namespaces named by `/proc/PID/ns/net` and, for
//! each new one, opens a netlink socket inside it: a short-lived helper thread enters the
//! namespace ([`Proc::in_net_ns`](nagless_host::Proc::in_net_ns): `setns(2)`, which moves only
//! the calling thread), opens two sockets and returns them (one for the listings, taken by a
//! thread of their own, one for the watcher's exact lookups, [`Lookups`]); a socket keeps the
//! namespace it was opened in for life. A namespace whose processes are all gone is dropped at
//! the next refresh (its sockets leave the board like any closed socket). Entering another
//! namespace takes CAP_SYS_ADMIN (and CAP_SYS_PTRACE to open other users' `/proc/PID/ns/net`);
//! without them only the watcher's own namespace is listed and [`Namespaces::not_entered`]
//! counts the others.

use std::collections::HashMap;
use std::io;

use nagless_host::{Pid, Proc};
use netlink_packet_sock_diag::inet::StateFlags;

use crate::diag::{Destroyed, Diag, SocketRow};

/// `TCP: inuse N` from the text of `/proc/net/sockstat`.
fn sockstat_tcp_in_use(sockstat: &str) -> Option<usize> {
    let line = sockstat.lines().find_map(|l| l.strip_prefix("TCP: "))?;
    let mut w = line.split_whitespace();
    while let Some(k) = w.next() {
        let v = w.next()?;
        if k == "inuse" {
            return v.parse().ok();
        }
    }
    None
}

/// One namespace being listed.
struct Net {
    diag: Diag,
    /// A process found in it at the last refresh.
    pid: u32,
}

/// The netlink sockets, one per network namespace, for dumps; and a second one in each, for
/// exact lookups from another thread ([`take_lookups`](Self::take_lookups)).
pub(crate) struct Namespaces {
    own: u64,
    own_diag: Diag,
    others: HashMap<u64, Net>,
    /// Lookup sockets of namespaces entered, not yet taken.
    new_lookups: Vec<(u64, NsLookup)>,
    /// Whether to enter other namespaces at all.
    all: bool,
    not_entered: HashMap<u64, io::ErrorKind>,
}

/// What the watcher's thread reads in one namespace: exact lookups, and the sockets freed
/// there (`None` without `CAP_NET_ADMIN` in it).
pub(crate) struct NsLookup {
    pub(crate) diag: Diag,
    pub(crate) destroyed: Option<Destroyed>,
}

impl NsLookup {
    fn open() -> io::Result<NsLookup> {
        Ok(NsLookup {
            diag: Diag::open()?,
            destroyed: Destroyed::open().ok(),
        })
    }
}

/// Opens the netlink sockets inside the namespace of `/proc/PID/ns/net`: one for dumps, and
/// the watcher's.
fn open_in(pid: u32) -> io::Result<(Diag, NsLookup)> {
    Proc::host().in_net_ns(pid, || Ok((Diag::open()?, NsLookup::open()?)))
}

impl Namespaces {
    /// The watcher's own namespace; others too after [`refresh`](Self::refresh) if `all`.
    pub(crate) fn new(all: bool) -> io::Result<Namespaces> {
        Ok(Namespaces {
            own: Proc::host().net_ns(Pid::Own).unwrap_or(0),
            own_diag: Diag::open()?,
            others: HashMap::new(),
            new_lookups: Vec::new(),
            all,
            not_entered: HashMap::new(),
        })
    }

    /// The watcher's own namespace.
    pub(crate) fn own(&self) -> u64 {
        self.own
    }

    /// Namespaces seen but not entered at the last refresh, and why (the first reason).
    pub(crate) fn not_entered(&self) -> (usize, Option<io::ErrorKind>) {
        (
            self.not_entered.len(),
            self.not_entered.values().next().copied(),
        )
    }

    /// Finds the namespaces of the processes now in /proc: enters new ones, drops gone ones.
    pub(crate) fn refresh(&mut self) {
        if !self.all {
            return;
        }
        let mut found: HashMap<u64, u32> = HashMap::new();
        let proc = Proc::host();
        for pid in proc.pids() {
            if let Some(ns) = proc.net_ns(pid) {
                if ns != self.own {
                    found.entry(ns).or_insert(pid);
                }
            }
        }
        self.others.retain(|ns, _| found.contains_key(ns));
        self.not_entered.retain(|ns, _| found.contains_key(ns));
        for (ns, pid) in found {
            if let Some(n) = self.others.get_mut(&ns) {
                n.pid = pid;
                continue;
            }
            if self.not_entered.contains_key(&ns) {
                continue; // no retry: the privilege it lacked will not come
            }
            match open_in(pid) {
                Ok((diag, lookup)) => {
                    self.others.insert(ns, Net { diag, pid });
                    self.new_lookups.push((ns, lookup));
                }
                // The process left meanwhile: the namespace may be found again next time.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.not_entered.insert(ns, e.kind());
                }
            }
        }
    }

    /// Every TCP socket in `states` of every namespace listed, without `tcp_info` (see
    /// [`Diag::list`]), appended to `out` with its namespace. A failure in the own namespace
    /// is an error; in another, that namespace is dropped (it may be found again at the next
    /// refresh).
    pub(crate) fn list(&mut self, states: StateFlags, out: &mut Vec<SocketRow>) -> io::Result<()> {
        self.list_by(out, |d, out| d.list(states.clone(), out))
    }

    /// [`list`](Self::list), each namespace's dump made by `dump`.
    fn list_by(
        &mut self,
        out: &mut Vec<SocketRow>,
        mut dump: impl FnMut(&mut Diag, &mut Vec<SocketRow>) -> io::Result<()>,
    ) -> io::Result<()> {
        let from = out.len();
        dump(&mut self.own_diag, out)?;
        for r in &mut out[from..] {
            r.netns = self.own;
        }
        let mut failed = Vec::new();
        for (ns, n) in &mut self.others {
            let from = out.len();
            match dump(&mut n.diag, out) {
                Ok(()) => {
                    for r in &mut out[from..] {
                        r.netns = *ns;
                    }
                }
                Err(_) => {
                    out.truncate(from);
                    failed.push(*ns);
                }
            }
        }
        for ns in failed {
            self.others.remove(&ns);
        }
        Ok(())
    }

    /// The namespaces listed (the own one included).
    pub(crate) fn present(&self) -> std::collections::HashSet<u64> {
        self.others.keys().copied().chain([self.own]).collect()
    }

    /// The kernel's count of TCP sockets in use (`/proc/net/sockstat`'s `TCP: inuse`: every
    /// state but TIME_WAIT) summed over the namespaces listed: one small read per namespace,
    /// however many sockets there are.
    pub(crate) fn tcp_in_use(&self) -> usize {
        let proc = Proc::host();
        std::iter::once(Pid::Own)
            .chain(self.others.values().map(|n| Pid::Id(n.pid)))
            .filter_map(|pid| proc.read(pid, "net/sockstat").ok())
            .filter_map(|s| sockstat_tcp_in_use(&s))
            .sum()
    }

    /// Every namespace's listeners, with their accept queues, and each namespace's count of
    /// handshake packets its full accept queues dropped ([`crate::accept`]); the listeners'
    /// rows are left in `rows` (emptied first).
    pub(crate) fn look_at_listeners(
        &mut self,
        rows: &mut Vec<SocketRow>,
    ) -> io::Result<crate::accept::Look> {
        rows.clear();
        self.list_by(rows, |d, out| d.list_listeners(out))?;
        let listeners = rows
            .iter()
            .map(|r| crate::accept::Listener {
                netns: r.netns,
                port: r.local.port(),
                inode: r.inode,
                uid: r.uid,
                queued: r.recv_queue,
                backlog: r.send_queue,
                drops: r.drops,
            })
            .collect();
        let proc = Proc::host();
        let overflows = std::iter::once((self.own, Pid::Own))
            .chain(self.others.iter().map(|(ns, n)| (*ns, Pid::Id(n.pid))))
            .filter_map(|(ns, pid)| {
                let text = proc.read(pid, "net/netstat").ok()?;
                Some((ns, crate::accept::listen_overflows(&text)?))
            })
            .collect();
        Ok(crate::accept::Look {
            listeners,
            overflows,
        })
    }

    /// The lookup sockets of the namespaces entered since the last call.
    pub(crate) fn take_lookups(&mut self) -> Vec<(u64, NsLookup)> {
        std::mem::take(&mut self.new_lookups)
    }
}

/// Netlink sockets for exact lookups, one per namespace (see [`Namespaces::take_lookups`]),
/// and for the sockets freed there.
pub(crate) struct Lookups {
    own: u64,
    diags: HashMap<u64, NsLookup>,
}

impl Lookups {
    /// One socket in the watcher's own namespace, `own`.
    pub(crate) fn new(own: u64) -> io::Result<Lookups> {
        Ok(Lookups {
            own,
            diags: HashMap::from([(own, NsLookup::open()?)]),
        })
    }

    /// Adds the sockets of a namespace.
    pub(crate) fn add(&mut self, ns: u64, d: NsLookup) {
        self.diags.insert(ns, d);
    }

    /// The inode of the other end of `s`'s connection, when it is a socket of `s`'s
    /// namespace (an exact lookup, ports swapped, any cookie).
    pub(crate) fn other_end(&mut self, s: &SocketRow) -> Option<u32> {
        let d = self.diags.get_mut(&s.netns)?;
        let other = SocketRow {
            local: s.remote,
            remote: s.local,
            cookie: crate::diag::NO_COOKIE,
            info: None,
            ..s.clone()
        };
        let mut out = Vec::new();
        d.diag.lookup(&[&other], &mut out).ok()?;
        out.first().map(|r| r.inode)
    }

    /// Whether the sockets freed are told in every namespace looked in.
    pub(crate) fn tells_freed(&self) -> bool {
        self.diags.values().all(|d| d.destroyed.is_some())
    }

    /// The sockets freed since the last call in every namespace, each with its last
    /// `tcp_info` and its namespace, appended to `out`; whether some were lost.
    pub(crate) fn freed(&mut self, out: &mut Vec<SocketRow>) -> bool {
        let mut lost = false;
        for (ns, d) in &mut self.diags {
            let Some(destroyed) = &mut d.destroyed else {
                continue;
            };
            let from = out.len();
            match destroyed.drain(out) {
                Ok(l) => lost |= l,
                Err(_) => {
                    out.truncate(from);
                    d.destroyed = None;
                    continue;
                }
            }
            for r in &mut out[from..] {
                r.netns = *ns;
            }
        }
        lost
    }

    /// Keeps only the namespaces for which `keep` holds (and the own one).
    pub(crate) fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let own = self.own;
        self.diags.retain(|ns, _| *ns == own || keep(*ns));
    }

    /// The sockets `socks` again, each by an exact lookup in its own namespace (see
    /// [`Diag::lookup`]); those gone, or whose namespace is gone, are left out. An error in
    /// the own namespace is returned; in another, that namespace is dropped.
    pub(crate) fn lookup(
        &mut self,
        socks: &[&SocketRow],
        out: &mut Vec<SocketRow>,
    ) -> io::Result<()> {
        let mut by_ns: HashMap<u64, Vec<&SocketRow>> = HashMap::new();
        for s in socks {
            by_ns.entry(s.netns).or_default().push(s);
        }
        for (ns, socks) in by_ns {
            let Some(d) = self.diags.get_mut(&ns) else {
                continue;
            };
            let from = out.len();
            match d.diag.lookup(&socks, out) {
                Ok(()) => {}
                Err(e) if ns == self.own => return Err(e),
                Err(_) => {
                    out.truncate(from);
                    self.diags.remove(&ns);
                    continue;
                }
            }
            for r in &mut out[from..] {
                r.netns = ns;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sockstat_gives_the_tcp_sockets_in_use() {
        let text =
            "sockets: used 220\nTCP: inuse 17 orphan 0 tw 3 alloc 21 mem 2\nUDP: inuse 4 mem 1\n";
        assert_eq!(super::sockstat_tcp_in_use(text), Some(17));
        assert_eq!(super::sockstat_tcp_in_use("UDP: inuse 4\n"), None);
        assert_eq!(super::sockstat_tcp_in_use("TCP: inuse x\n"), None);
        // The real file, where there is one.
        if let Ok(real) = std::fs::read_to_string("/proc/self/net/sockstat") {
            assert!(super::sockstat_tcp_in_use(&real).is_some(), "{real}");
        }
    }
}
