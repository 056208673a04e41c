//! Network namespaces: which one a process is in (the inode its `/proc/PID/ns/net` link
//! names, `net:[4026531840]`: the namespace's identity), and doing something inside one.
//!
//! Entering one takes `CAP_SYS_ADMIN` (and `CAP_SYS_PTRACE` to open another user's
//! `/proc/PID/ns/net`); `setns(2)` moves only the calling thread, so [`Proc::in_net_ns`] does
//! it on a short-lived thread of its own. What that thread opens there (a socket) keeps the
//! namespace it was opened in for life.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use crate::{sys, text, Pid, Proc};

impl Proc {
    /// The network namespace of process `pid` (the inode of its `/proc/PID/ns/net`); `None`
    /// if it cannot be read (the process gone, another user's without the privilege).
    pub fn net_ns(&self, pid: impl Into<Pid>) -> Option<u64> {
        let link = fs::read_link(self.file(pid, "ns/net")).ok()?;
        text::link_inode(link.as_os_str().as_bytes(), "net")
    }

    /// Runs `f` on a thread of its own (named `netns`) inside the network namespace of
    /// process `pid`, and returns what it returned. `NotFound` if the process is gone; the
    /// error of `setns(2)` if the namespace cannot be entered (`PermissionDenied` without
    /// `CAP_SYS_ADMIN`).
    pub fn in_net_ns<T: Send + 'static>(
        &self,
        pid: impl Into<Pid>,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let ns = File::open(self.file(pid, "ns/net"))?;
        std::thread::Builder::new()
            .name("netns".into())
            .spawn(move || {
                sys::enter_net_ns(ns.as_fd())?;
                f()
            })?
            .join()
            .map_err(|_| io::Error::other("the namespace helper thread panicked"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeProc;

    #[test]
    fn a_process_namespace_is_its_links_inode() {
        let f = FakeProc::new("ns");
        f.link(7, "ns/net", "net:[4026531840]");
        f.link(8, "ns/net", "mnt:[4026531841]");
        f.own(7);
        let p = f.proc();
        assert_eq!(p.net_ns(7), Some(4026531840));
        assert_eq!(p.net_ns(Pid::Own), Some(4026531840));
        assert_eq!(p.net_ns(8), None);
        assert_eq!(p.net_ns(9), None);
        let gone = p.in_net_ns(9, || Ok(())).unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn entering_our_own_namespace_runs_there() {
        let p = Proc::host();
        let own = p.net_ns(Pid::Own).unwrap();
        let me = std::process::id();
        let there = move || {
            let link = fs::read_link("/proc/thread-self/ns/net")?;
            Ok(text::link_inode(link.as_os_str().as_bytes(), "net"))
        };
        match p.in_net_ns(me, there) {
            Ok(there) => assert_eq!(there, Some(own)),
            // Without CAP_SYS_ADMIN, setns refuses even our own namespace.
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}"),
        }
    }
}
