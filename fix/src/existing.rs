//! Connections that exist already: each selected process's TCP sockets, reached through a
//! copy of its descriptor (`pidfd_getfd`: the option set on the copy is the socket's), changed
//! and, at the end, put back as they were. No descriptor is kept between the two: holding one
//! would keep a socket open after its program closed it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nagless_host::text::{TcpRow, TCP_ESTABLISHED};
use nagless_host::Proc;

use crate::attach::Attached;
pub use crate::plan::TcpOption;
use crate::plan::{Action, Ports, TCP_DELACK_MAX_US};
use crate::sys;

/// One socket changed, and what it had before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// A process that holds it, and the descriptor there.
    pub(crate) pid: u32,
    /// The descriptor in that process.
    pub(crate) fd: i32,
    /// The socket's inode (to tell it from a later socket on the same descriptor).
    pub(crate) inode: u64,
    /// Local and remote address.
    pub(crate) addresses: (SocketAddr, SocketAddr),
    /// TCP_NODELAY before, if the fix set it.
    pub(crate) nodelay_was: Option<i32>,
    /// TCP_DELACK_MAX_US before, if the fix set it.
    pub(crate) delack_was: Option<i32>,
    /// The TCP_DELACK_MAX_US the fix set (the kernel's rounding of what was asked).
    pub(crate) delack_set: Option<i32>,
}

impl Changed {
    /// The connection's local and remote address.
    pub fn addresses(&self) -> (SocketAddr, SocketAddr) {
        self.addresses
    }

    /// The socket's inode.
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// This change, with the values the socket had before `earlier`, a change of the same
    /// socket through another descriptor (the socket's values before anything was set).
    pub fn after(mut self, earlier: &Changed) -> Changed {
        debug_assert_eq!(self.inode, earlier.inode);
        self.nodelay_was = earlier.nodelay_was.or(self.nodelay_was);
        self.delack_was = earlier.delack_was.or(self.delack_was);
        self
    }
}

/// What a pass over the selected processes did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Sockets changed.
    pub changed: Vec<Changed>,
    /// Why something could not be done (a process gone, a kernel without an option): each
    /// reason once.
    pub notes: BTreeSet<String>,
    /// Why some selected process's sockets could not be reached at all (no privilege, a
    /// kernel without pidfd): each reason once. The fix is then refused, not half done.
    pub blocked: BTreeSet<String>,
    /// Sockets found connecting (SYN sent or received, or a listener with connections
    /// waiting to be accepted): connections soon, to look at again.
    pub connecting: usize,
    /// Listeners found.
    pub listening: usize,
}

/// What an error of `pidfd_open` or `pidfd_getfd` means for the fix.
#[derive(Debug, PartialEq, Eq)]
pub enum Reach {
    /// The process exited, or the descriptor was closed, since /proc was read: nothing to do.
    Gone,
    /// The sockets cannot be reached, for this reason.
    Blocked(String),
}

/// Classifies an error of `call` (`pidfd_open` or `pidfd_getfd`) on process `pid`.
pub(crate) fn reach(call: &str, pid: u32, e: &std::io::Error) -> Reach {
    match e.raw_os_error() {
        Some(libc::ESRCH) | Some(libc::EBADF) => Reach::Gone,
        Some(libc::EPERM) | Some(libc::EACCES) => Reach::Blocked(format!(
            "cannot reach process {pid}'s sockets ({}: {e}): it takes root, or CAP_SYS_PTRACE",
            call.replace("PID", &pid.to_string())
        )),
        Some(libc::ENOSYS) => Reach::Blocked(format!(
            "this kernel has no {call} (it came in Linux {}): existing connections cannot be reached",
            if call == "pidfd_open" { "5.3" } else { "5.6" }
        )),
        _ => Reach::Blocked(format!("cannot reach process {pid}'s sockets ({call}: {e})")),
    }
}

/// The TCP connections of `pids` selected by `ports`, changed as `action` says; sockets
/// in `seen` (by inode) are left alone, and every socket looked at is added to it. `noting`:
/// the fix's programs, which must not count its own calls as the program's choices, and
/// which mark each selected socket (connected, connecting or listening) as the selection's.
pub fn fix(
    pids: &[u32],
    action: &Action,
    ports: &Ports,
    seen: &mut BTreeSet<u64>,
    noting: Option<&Attached>,
) -> Pass {
    let choose = |_: u32, local: SocketAddr, remote: SocketAddr| {
        ports
            .selects(local.port(), remote.port())
            .then_some(*action)
    };
    fix_chosen(pids, choose, seen, noting)
}

/// [`fix`] with the action chosen per connection: `choose(pid, local, remote)` says what to
/// set on an established connection of process `pid` (`None`: leave it alone).
pub fn fix_chosen(
    pids: &[u32],
    mut choose: impl FnMut(u32, SocketAddr, SocketAddr) -> Option<Action>,
    seen: &mut BTreeSet<u64>,
    noting: Option<&Attached>,
) -> Pass {
    let mut pass = Pass::default();
    for &pid in pids {
        let pidfd = match sys::pidfd_open(pid) {
            Ok(p) => p,
            Err(e) => {
                if let Reach::Blocked(why) = reach("pidfd_open", pid, &e) {
                    pass.blocked.insert(why);
                }
                continue;
            }
        };
        let found = match sockets(pid) {
            Ok(found) => found,
            Err(Reach::Gone) => continue,
            Err(Reach::Blocked(why)) => {
                pass.blocked.insert(why);
                continue;
            }
        };
        for (fd, inode) in found {
            if seen.contains(&inode) {
                continue;
            }
            let copy = match sys::pidfd_getfd(pidfd.as_fd(), fd) {
                Ok(c) => c,
                Err(e) => {
                    if let Reach::Blocked(why) = reach("pidfd_getfd", pid, &e) {
                        pass.blocked.insert(why);
                    }
                    continue;
                }
            };
            // The descriptor may have been closed and reused since /proc was read.
            if inode_of(&copy) != Some(inode) {
                continue;
            }
            match change(&copy, pid, fd, inode, &mut choose, &mut pass.notes) {
                Settled::Changed(c) => {
                    if let Some(at) = noting {
                        at.forget_choices(copy.as_fd());
                        at.mark(copy.as_fd());
                    }
                    seen.insert(inode);
                    pass.changed.push(c);
                }
                Settled::Never => {
                    seen.insert(inode);
                }
                // Not established yet (a listener, a connect under way): marked, so that its
                // connections get the options as they are made, wherever they are charged; a
                // later pass looks again.
                Settled::NotYet {
                    connecting,
                    listening,
                } => {
                    pass.connecting += usize::from(connecting);
                    pass.listening += usize::from(listening);
                    if let Some(at) = noting {
                        at.mark(copy.as_fd());
                    }
                }
            }
        }
    }
    pass
}

/// The established TCP connections of process `pid` (local and remote port), from its
/// network namespace's tables matched to its sockets; `Gone` or `Blocked` as for its socket
/// descriptors when they cannot be read.
pub fn connections(pid: u32) -> Result<Vec<(u16, u16)>, Reach> {
    Ok(connections_between(pid)?
        .into_iter()
        .map(|(l, r)| (l.port(), r.port()))
        .collect())
}

/// The established TCP connections of process `pid` with their addresses (local, remote),
/// as [`connections`].
pub fn connections_between(
    pid: u32,
) -> Result<Vec<(std::net::SocketAddr, std::net::SocketAddr)>, Reach> {
    Ok(tcp_sockets(pid)?
        .into_iter()
        .filter(TcpRow::established)
        .map(|r| {
            (
                (r.local_addr, r.local_port).into(),
                (r.remote_addr, r.remote_port).into(),
            )
        })
        .collect())
}

/// The TCP sockets process `pid` holds (its network namespace's rows whose inode is one of
/// its socket descriptors'); `Gone` or `Blocked` as for its socket descriptors.
pub(crate) fn tcp_sockets(pid: u32) -> Result<Vec<TcpRow>, Reach> {
    let inodes: BTreeSet<u64> = sockets(pid)?.into_values().collect();
    Ok(owned(Proc::host().tcp_sockets(pid), &inodes))
}

/// The rows of `rows` whose inode is in `inodes`.
fn owned(rows: Vec<TcpRow>, inodes: &BTreeSet<u64>) -> Vec<TcpRow> {
    rows.into_iter()
        .filter(|r| inodes.contains(&r.inode))
        .collect()
}

/// A process's socket descriptors and their inodes; `Gone` if it exited, `Blocked` if its
/// descriptors cannot be listed (another user's process, without root or `CAP_SYS_PTRACE`):
/// never an empty list that would read as "no sockets".
pub(crate) fn sockets(pid: u32) -> Result<BTreeMap<i32, u64>, Reach> {
    Proc::host().sockets(pid).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Reach::Gone,
        _ => reach("/proc/PID/fd", pid, &e),
    })
}

/// The inode of the socket a descriptor refers to.
fn inode_of(fd: &OwnedFd) -> Option<u64> {
    nagless_host::fd::inode_of(fd.as_fd())
}

/// What a look at one socket came to.
enum Settled {
    /// Changed.
    Changed(Changed),
    /// Not TCP, not selected, or closing: never to be changed.
    Never,
    /// A TCP socket not established yet (connecting, listening): look again later.
    NotYet {
        /// Its SYN is sent or received, or it listens with connections waiting: a
        /// connection soon.
        connecting: bool,
        /// It listens.
        listening: bool,
    },
}

fn change(
    copy: &OwnedFd,
    pid: u32,
    fd: i32,
    inode: u64,
    choose: &mut impl FnMut(u32, SocketAddr, SocketAddr) -> Option<Action>,
    notes: &mut BTreeSet<String>,
) -> Settled {
    let f = copy.as_fd();
    if sys::getsockopt_int(f, libc::SOL_SOCKET, libc::SO_PROTOCOL).ok() != Some(libc::IPPROTO_TCP) {
        return Settled::Never;
    }
    match sys::tcp_state(f) {
        Ok((TCP_ESTABLISHED, _)) => {}
        // SYN_SENT, SYN_RECV, LISTEN, and CLOSE (made, not yet connecting): it may become a
        // connection (marked, so that it is fixed as it does, wherever it is charged). A
        // connection soon: a SYN sent or received, or a listener with some waiting to be
        // accepted.
        Ok((state @ (2 | 3 | 7 | 10), waiting)) => {
            return Settled::NotYet {
                connecting: state <= 3 || (state == 10 && waiting > 0),
                listening: state == 10,
            }
        }
        _ => return Settled::Never,
    }
    let Ok((local, remote)) = sys::addresses(f) else {
        return Settled::Never;
    };
    let Some(action) = choose(pid, local, remote) else {
        return Settled::Never;
    };
    let mut c = Changed {
        pid,
        fd,
        inode,
        addresses: (local, remote),
        nodelay_was: None,
        delack_was: None,
        delack_set: None,
    };
    if action.nodelay {
        if let Ok(was) = sys::getsockopt_int(f, libc::IPPROTO_TCP, libc::TCP_NODELAY) {
            if sys::setsockopt_int(f, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).is_ok() {
                c.nodelay_was = Some(was);
            }
        }
    }
    if let Some(d) = action.ack_delay_max {
        let us = d.as_micros().min(i32::MAX as u128) as i32;
        match sys::getsockopt_int(f, libc::IPPROTO_TCP, TCP_DELACK_MAX_US) {
            Ok(was) if sys::setsockopt_int(f, libc::IPPROTO_TCP, TCP_DELACK_MAX_US, us).is_ok() => {
                c.delack_was = Some(was);
                c.delack_set = sys::getsockopt_int(f, libc::IPPROTO_TCP, TCP_DELACK_MAX_US).ok();
            }
            _ => {
                notes.insert(
                    "existing connections keep their delayed ACKs: TCP_DELACK_MAX_US needs Linux 6.15 (new connections are bounded all the same)"
                        .into(),
                );
            }
        }
    }
    if c.nodelay_was.is_some() || c.delack_was.is_some() {
        Settled::Changed(c)
    } else {
        Settled::Never
    }
}

/// Whether process `pid` still holds the socket `inode` on descriptor `fd`.
pub fn still_held(pid: u32, fd: i32, inode: u64) -> bool {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .is_ok_and(|l| l.to_str() == Some(&format!("socket:[{inode}]")))
}

/// What an undo did.
#[derive(Debug, Default)]
pub struct Undone {
    /// Sockets put back.
    pub restored: usize,
    /// Sockets that could not be reached (no privilege over their process: `Blocked`), with
    /// why: still changed. (Those closed, or set since by their program, are neither.)
    pub unreached: Vec<(Changed, String)>,
}

/// Puts each changed socket back as it was, if its process still holds it on the same
/// descriptor: each option only where it still has the value the fix set, and the program
/// did not set it itself meanwhile (`chose`: asked of the socket, a copy of the program's
/// descriptor, and the option); returns how many were put back.
pub fn undo(changed: &[Changed], chose: impl Fn(BorrowedFd<'_>, TcpOption) -> bool) -> usize {
    undo_all(changed, chose).restored
}

/// [`undo`], saying which sockets could not be reached.
pub fn undo_all(changed: &[Changed], chose: impl Fn(BorrowedFd<'_>, TcpOption) -> bool) -> Undone {
    let mut done = Undone::default();
    for c in changed {
        let pidfd = match sys::pidfd_open(c.pid) {
            Ok(p) => p,
            Err(e) => {
                if let Reach::Blocked(why) = reach("pidfd_open", c.pid, &e) {
                    done.unreached.push((c.clone(), why));
                }
                continue;
            }
        };
        let copy = match sys::pidfd_getfd(pidfd.as_fd(), c.fd) {
            Ok(copy) => copy,
            Err(e) => {
                if let Reach::Blocked(why) = reach("pidfd_getfd", c.pid, &e) {
                    done.unreached.push((c.clone(), why));
                }
                continue;
            }
        };
        if inode_of(&copy) != Some(c.inode) {
            continue;
        }
        let f = copy.as_fd();
        let (mut ok, mut any) = (true, false);
        let ours = |name, set: i32, which| {
            sys::getsockopt_int(f, libc::IPPROTO_TCP, name).ok() == Some(set) && !chose(f, which)
        };
        if let Some(v) = c
            .nodelay_was
            .filter(|_| ours(libc::TCP_NODELAY, 1, TcpOption::Nodelay))
        {
            ok &= sys::setsockopt_int(f, libc::IPPROTO_TCP, libc::TCP_NODELAY, v).is_ok();
            any = true;
        }
        if let (Some(v), Some(set)) = (c.delack_was, c.delack_set) {
            if ours(TCP_DELACK_MAX_US, set, TcpOption::DelackMax) {
                ok &= sys::setsockopt_int(f, libc::IPPROTO_TCP, TCP_DELACK_MAX_US, v).is_ok();
                any = true;
            }
        }
        done.restored += usize::from(ok && any);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_rows_are_those_of_its_sockets() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0
   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 99 1 0 20 4 30 10 -1
";
        let rows = || nagless_host::text::tcp_rows(text).collect::<Vec<_>>();
        let mine = owned(rows(), &BTreeSet::from([4242]));
        assert_eq!(
            mine.iter().map(|r| r.local_port).collect::<Vec<_>>(),
            [8000]
        );
        assert!(owned(rows(), &BTreeSet::from([7])).is_empty());
    }

    fn err(n: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(n)
    }

    #[test]
    fn a_process_or_descriptor_gone_is_nothing_to_do_and_the_rest_blocks_the_fix() {
        assert_eq!(reach("pidfd_open", 7, &err(libc::ESRCH)), Reach::Gone);
        assert_eq!(reach("pidfd_getfd", 7, &err(libc::EBADF)), Reach::Gone);
        let Reach::Blocked(why) = reach("pidfd_getfd", 7, &err(libc::EPERM)) else {
            panic!("EPERM must block");
        };
        assert!(
            why.contains("process 7") && why.contains("CAP_SYS_PTRACE"),
            "{why}"
        );
        let Reach::Blocked(why) = reach("pidfd_getfd", 7, &err(libc::ENOSYS)) else {
            panic!("ENOSYS must block");
        };
        assert!(why.contains("Linux 5.6"), "{why}");
        let Reach::Blocked(why) = reach("pidfd_open", 7, &err(libc::ENOSYS)) else {
            panic!("ENOSYS must block");
        };
        assert!(why.contains("Linux 5.3"), "{why}");
        assert!(matches!(
            reach("pidfd_open", 7, &err(libc::EMFILE)),
            Reach::Blocked(_)
        ));
    }
}
