//! Which process owns a socket: /proc/PID/fd links name socket inodes (`socket:[N]`). Other
//! users' /proc/PID/fd can be read only with root (or CAP_SYS_PTRACE and
//! CAP_DAC_READ_SEARCH); their sockets stay unattributed, and [`ProcMap::denied`] counts the
//! processes that could not be read.

use std::collections::HashMap;
use std::fs;

/// A process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Its command line (arguments joined by spaces, at most 80 characters).
    pub cmd: String,
    /// Its command name (`/proc/PID/comm`, at most 15 bytes; empty if unreadable).
    pub comm: String,
}

/// Socket inode to owning process, rebuilt by scanning /proc.
#[derive(Debug, Default)]
pub struct ProcMap {
    owners: HashMap<u32, u32>,
    cmds: HashMap<u32, (String, String)>,
    /// Processes whose fds could not be read in the last scan.
    pub denied: usize,
}

impl ProcMap {
    /// Scans every process's fds.
    pub fn rescan(&mut self) {
        self.owners.clear();
        self.denied = 0;
        let Ok(procs) = fs::read_dir("/proc") else {
            return;
        };
        for p in procs.flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(fds) = fs::read_dir(p.path().join("fd")) else {
                self.denied += 1;
                continue;
            };
            for fd in fds.flatten() {
                let Ok(target) = fs::read_link(fd.path()) else {
                    continue;
                };
                let t = target.to_string_lossy();
                if let Some(inode) = t
                    .strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|n| n.parse().ok())
                {
                    self.owners.insert(inode, pid);
                }
            }
        }
        self.cmds
            .retain(|pid, _| self.owners.values().any(|p| p == pid));
    }

    /// Whether the last scan saw this inode.
    pub fn knows(&self, inode: u32) -> bool {
        self.owners.contains_key(&inode)
    }

    /// The process owning socket `inode`, if known.
    pub fn owner(&mut self, inode: u32) -> Option<Process> {
        let pid = *self.owners.get(&inode)?;
        let (cmd, comm) = self
            .cmds
            .entry(pid)
            .or_insert_with(|| (cmdline(pid), comm(pid)))
            .clone();
        Some(Process { pid, cmd, comm })
    }
}

fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_default()
}

fn cmdline(pid: u32) -> String {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut s: String = String::from_utf8_lossy(&raw)
        .split('\0')
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if s.is_empty() {
        s = fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| format!("[{}]", c.trim()))
            .unwrap_or_default();
    }
    if s.chars().count() > 80 {
        s = s.chars().take(77).collect::<String>() + "...";
    }
    s
}

/// The effective uid of this process (from /proc/self/status).
pub fn euid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_owner_of_our_own_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let link = fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        let inode: u32 = link
            .to_string_lossy()
            .trim_start_matches("socket:[")
            .trim_end_matches(']')
            .parse()
            .unwrap();
        let mut m = ProcMap::default();
        m.rescan();
        let p = m.owner(inode).unwrap();
        assert_eq!(p.pid, std::process::id());
        assert!(!p.cmd.is_empty());
        assert!(euid().is_some());
    }
}
