//! Processes, as a /proc tells of them ([`Proc`]): which there are, their parents and
//! states, their cgroups, names and status; and where the cgroup v2 hierarchy is mounted.
//! The descriptors are in [`crate::fd`], the namespaces in [`crate::ns`], the capabilities
//! in [`crate::caps`]: each adds its own methods to [`Proc`].

use std::fs;
use std::io;
use std::path::PathBuf;

use crate::text;

/// A process of a /proc: one by its id, or the reader itself (`/proc/self`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pid {
    /// The process with this id.
    Id(u32),
    /// The process reading (`/proc/self`).
    Own,
}

impl From<u32> for Pid {
    fn from(pid: u32) -> Pid {
        Pid::Id(pid)
    }
}

/// A /proc to read: the host's ([`Proc::host`]), or a tree made to look like one (tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    root: PathBuf,
}

impl Default for Proc {
    fn default() -> Proc {
        Proc::host()
    }
}

impl Proc {
    /// The host's, at `/proc`.
    pub fn host() -> Proc {
        Proc::at("/proc")
    }

    /// One at `root`.
    pub fn at(root: impl Into<PathBuf>) -> Proc {
        Proc { root: root.into() }
    }

    /// The directory of process `pid` (`/proc/PID`, `/proc/self`).
    pub(crate) fn dir(&self, pid: impl Into<Pid>) -> PathBuf {
        match pid.into() {
            Pid::Id(pid) => self.root.join(pid.to_string()),
            Pid::Own => self.root.join("self"),
        }
    }

    /// The file `name` of process `pid` (`status`, `ns/net`, `net/tcp`...).
    pub(crate) fn file(&self, pid: impl Into<Pid>, name: &str) -> PathBuf {
        self.dir(pid).join(name)
    }

    /// A file of the /proc itself (`stat`, `sys/kernel/osrelease`...).
    pub(crate) fn host_file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The text of file `name` of process `pid`.
    pub fn read(&self, pid: impl Into<Pid>, name: &str) -> io::Result<String> {
        fs::read_to_string(self.file(pid, name))
    }

    /// The ids of the processes there now (an unreadable /proc: none).
    pub fn pids(&self) -> Vec<u32> {
        let Ok(dir) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// Whether process `pid` is there (it may be a zombie: see [`exited`](Self::exited)).
    pub fn exists(&self, pid: impl Into<Pid>) -> bool {
        self.dir(pid).exists()
    }

    /// Whether process `pid` is gone or a zombie (exited, not yet reaped by its parent).
    pub fn exited(&self, pid: impl Into<Pid>) -> bool {
        self.read(pid, "stat")
            .map_or(true, |s| text::Stat::parse(&s).is_some_and(|s| s.exited()))
    }

    /// Whether process `pid` is a kernel thread.
    pub fn kernel_thread(&self, pid: impl Into<Pid>) -> bool {
        self.read(pid, "stat")
            .is_ok_and(|s| text::Stat::parse(&s).is_some_and(|s| s.kernel_thread()))
    }

    /// Every process's `(pid, parent)` now.
    pub fn parents(&self) -> Vec<(u32, u32)> {
        self.pids()
            .into_iter()
            .filter_map(|pid| {
                let stat = self.read(pid, "stat").ok()?;
                Some((pid, text::Stat::parse(&stat)?.ppid()?))
            })
            .collect()
    }

    /// The text of `/proc/PID/cgroup` (see [`text::cgroup_lines`], [`text::cgroup_v2_path`]).
    pub fn cgroup(&self, pid: impl Into<Pid>) -> io::Result<String> {
        self.read(pid, "cgroup")
    }

    /// Its command name (`/proc/PID/comm`: at most 15 bytes, as the process set it: to be
    /// shown escaped, never obeyed), without the newlines at its end.
    pub fn comm(&self, pid: impl Into<Pid>) -> io::Result<String> {
        let c = self.read(pid, "comm")?;
        Ok(c.trim_end_matches('\n').to_string())
    }

    /// Its command line's bytes (`/proc/PID/cmdline`: arguments each ended by a NUL; empty
    /// for a kernel thread or a process exiting).
    pub fn cmdline(&self, pid: impl Into<Pid>) -> io::Result<Vec<u8>> {
        fs::read(self.file(pid, "cmdline"))
    }

    /// The text of `/proc/PID/status` (see [`text::seccomp_in_force`], [`Proc::caps`]).
    pub fn status(&self, pid: impl Into<Pid>) -> io::Result<String> {
        self.read(pid, "status")
    }

    /// Its effective user id.
    pub fn euid(&self, pid: impl Into<Pid>) -> Option<u32> {
        text::effective_uid(self.status(pid).ok()?.as_bytes())
    }

    /// Where the cgroup v2 hierarchy is mounted, as this process sees the mounts (`None`:
    /// not mounted, or /proc unreadable).
    pub fn cgroup2_root(&self) -> io::Result<Option<PathBuf>> {
        let mountinfo = self.read(Pid::Own, "mountinfo")?;
        Ok(text::cgroup2_mount(&mountinfo).map(PathBuf::from))
    }

    /// The running kernel's release (`/proc/sys/kernel/osrelease`), trimmed.
    pub fn kernel_release(&self) -> Option<String> {
        fs::read_to_string(self.host_file("sys/kernel/osrelease"))
            .ok()
            .map(|s| s.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeProc;

    #[test]
    fn processes_of_a_fake_proc() {
        let f = FakeProc::new("processes");
        f.write(1, "stat", "1 (init) S 0 1 1 0 -1 4194560 0");
        f.write(2, "stat", "2 (kthreadd) S 0 0 0 0 -1 2129984 0");
        f.write(10, "stat", "10 (a (b) c) S 1 10 10 0 -1 4194560 0");
        f.write(11, "stat", "11 (zombie) Z 10 10 10 0 -1 4194560 0");
        f.write(10, "comm", "a (b) c\n");
        f.write(10, "cgroup", "0::/system.slice/x.service\n");
        f.write(10, "status", "Name:\tx\nUid:\t1000\t1000\t1000\t1000\n");
        f.write(10, "cmdline", "python3\0app.py\0");
        f.mkdir("not-a-pid");
        f.own(10);
        f.write(
            10,
            "mountinfo",
            "30 24 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        let p = f.proc();
        let mut pids = p.pids();
        pids.sort();
        assert_eq!(pids, [1, 2, 10, 11]);
        let mut parents = p.parents();
        parents.sort();
        assert_eq!(parents, [(1, 0), (2, 0), (10, 1), (11, 10)]);
        assert!(p.exists(10) && !p.exists(12));
        assert!(p.exited(11) && p.exited(12) && !p.exited(10));
        assert!(p.kernel_thread(2) && !p.kernel_thread(1) && !p.kernel_thread(12));
        assert_eq!(p.comm(10).unwrap(), "a (b) c");
        assert_eq!(p.euid(Pid::Own), Some(1000));
        assert_eq!(p.cmdline(10).unwrap(), b"python3\0app.py\0");
        assert_eq!(
            text::cgroup_v2_path(&p.cgroup(10).unwrap()),
            Some("/system.slice/x.service")
        );
        assert_eq!(
            p.cgroup2_root().unwrap(),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
    }

    #[test]
    fn this_hosts_proc() {
        let p = Proc::host();
        let me = std::process::id();
        assert!(p.pids().contains(&me));
        assert!(p.exists(me) && !p.exited(me) && !p.kernel_thread(me));
        assert!(p.parents().iter().any(|&(pid, _)| pid == me));
        assert!(p.euid(Pid::Own).is_some());
        assert!(p
            .kernel_release()
            .is_some_and(|r| text::kernel_version(&r).is_some()));
    }
}
