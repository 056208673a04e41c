//! Who delays the ACKs a stall waited for, when that program runs on this host: the process
//! that holds the stalling connection's other end. A connection whose remote address is a
//! loopback one, or the local address itself, ends in the same network namespace: its other
//! end is the socket there whose ports are the stalling one's, swapped
//! (`/proc/PID/net/tcp{,6}` of a process of that namespace), and its owner is the process
//! whose descriptors name that socket's inode (a scan of /proc, at most once a second). Both
//! backends ask here, and the answer is kept per connection (a few thousand at most), so that
//! a connection that stalls often costs one look.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nagless_host::Proc;

use crate::procs::ProcMap;

/// The process on this host whose delayed ACKs a stall waited for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Receiver {
    /// Its process id.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
}

/// Whether a connection from `local` to `remote` ends on this host, in the same namespace.
pub(crate) fn on_this_host(local: SocketAddr, remote: SocketAddr) -> bool {
    remote.ip().is_loopback() || remote.ip() == local.ip()
}

/// Most connections (and receivers' names) remembered.
const KNOWN_MAX: usize = 4096;

/// The names of the receivers found, by pid: a row names its receiver when it is made,
/// which may be after the receiver exited.
static NAMES: Mutex<Option<HashMap<u32, String>>> = Mutex::new(None);

/// Notes the name of receiver `r`.
fn remember(r: &Receiver) {
    let mut names = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let names = names.get_or_insert_with(HashMap::new);
    if names.len() >= KNOWN_MAX {
        names.clear();
    }
    names.insert(r.pid, r.comm.clone());
}

/// Receiver `pid`, named as it was found (or as /proc names it now).
pub(crate) fn named(pid: u32) -> Receiver {
    let known = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .and_then(|n| n.get(&pid).cloned());
    let comm = known.unwrap_or_else(|| {
        Proc::host()
            .comm(pid)
            .map(|c| c.trim().to_string())
            .unwrap_or_default()
    });
    Receiver { pid, comm }
}

/// Receivers found so far, and the /proc scan that names them.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    /// By (namespace, local port, remote port): the receiver, or none on this host.
    known: HashMap<(u64, u16, u16), Option<Receiver>>,
    procs: ProcMap,
    scanned: Option<Instant>,
}

impl Peers {
    /// The receiver of the connection from `local` to `remote` that process `pid` (of
    /// namespace `netns`) writes to, if its other end is held by a process on this host.
    /// The other end's socket is found in `/proc/PID/net/tcp` (a walk of the namespace's
    /// sockets) unless `other_end` finds its inode (a `sock_diag` lookup: at once).
    pub(crate) fn receiver(
        &mut self,
        pid: u32,
        netns: u64,
        local: SocketAddr,
        remote: SocketAddr,
        other_end: Option<&mut dyn FnMut() -> Option<u32>>,
    ) -> Option<Receiver> {
        if !on_this_host(local, remote) {
            return None;
        }
        let id = (netns, local.port(), remote.port());
        if let Some(r) = self.known.get(&id) {
            return r.clone();
        }
        // The other end: ports swapped, established (a time-wait socket has no inode).
        let inode = match other_end {
            Some(find) => find(),
            None => Proc::host()
                .tcp_sockets(pid)
                .into_iter()
                .find(|r| {
                    r.local_port == remote.port()
                        && r.remote_port == local.port()
                        && r.established()
                })
                .map(|r| r.inode)
                .and_then(|i| u32::try_from(i).ok()),
        }
        .filter(|&i| i != 0);
        let found = match inode {
            None => None,
            Some(inode) => {
                if !self.procs.knows(inode)
                    && self
                        .scanned
                        .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
                {
                    self.scanned = Some(Instant::now());
                    self.procs.rescan();
                }
                match self.procs.owner(inode) {
                    Some(p) => Some(Receiver {
                        pid: p.pid,
                        comm: p.comm,
                    }),
                    // Made since the last scan: asked again at its next stall.
                    None => return None,
                }
            }
        };
        if self.known.len() >= KNOWN_MAX {
            self.known.clear(); // ports are reused: a cache, not a record
        }
        if let Some(r) = &found {
            remember(r);
        }
        self.known.insert(id, found.clone());
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_or_the_same_address_ends_on_this_host() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(on_this_host(a("127.0.0.1:5000"), a("127.0.0.1:80")));
        assert!(on_this_host(a("10.0.0.2:5000"), a("127.0.0.9:80")));
        assert!(on_this_host(a("[::1]:5000"), a("[::1]:80")));
        assert!(on_this_host(a("10.0.0.2:5000"), a("10.0.0.2:80")));
        assert!(!on_this_host(a("10.0.0.2:5000"), a("10.0.0.3:80")));
    }

    #[test]
    fn the_other_end_of_a_loopback_connection_is_found_with_its_owner() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        let me = std::process::id();
        let mut p = Peers::default();
        let r = p
            .receiver(me, 0, c.local_addr().unwrap(), c.peer_addr().unwrap(), None)
            .expect("the accepted socket's owner: this process");
        assert_eq!(r.pid, me);
        // A remote end is no one's here.
        let far = "192.0.2.1:80".parse().unwrap();
        assert_eq!(p.receiver(me, 0, c.local_addr().unwrap(), far, None), None);
    }
}
