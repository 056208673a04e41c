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
    /// Its cgroup (the cgroup v2 path of `/proc/PID/cgroup`, else the first hierarchy's).
    pub cgroup: String,
    /// The id of its container, if its cgroup names one ([`container_id`]).
    pub container: Option<String>,
}

/// Socket inode to owning process, rebuilt by scanning /proc.
#[derive(Debug, Default)]
pub struct ProcMap {
    owners: HashMap<u32, u32>,
    cmds: HashMap<u32, Process>,
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
        Some(self.cmds.entry(pid).or_insert_with(|| process(pid)).clone())
    }
}

/// What /proc says of process `pid`, `None` if it is gone.
pub fn process_of(pid: u32) -> Option<Process> {
    std::path::Path::new(&format!("/proc/{pid}"))
        .exists()
        .then(|| process(pid))
}

/// What /proc says of a process.
pub fn process(pid: u32) -> Process {
    let (cgroup, container) = cgroup(pid);
    Process {
        pid,
        cmd: cmdline(pid),
        comm: comm(pid),
        cgroup,
        container,
    }
}

/// The cgroup path of a process and its container's id (see [`container_id`]).
fn cgroup(pid: u32) -> (String, Option<String>) {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    // Lines are `ID:CONTROLLERS:PATH`; cgroup v2's is `0::PATH`.
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .or(paths.first().copied())
        .unwrap_or_default();
    let id = container_id(path).or_else(|| paths.iter().find_map(|p| container_id(p)));
    (path.to_owned(), id)
}

/// The container id a cgroup path names: the last component holding a run of 64 hex digits
/// as a word of its own, as Docker (`docker-ID.scope`, `/docker/ID`), containerd and
/// Kubernetes (`cri-containerd-ID.scope`, `/kubepods/.../podUID/ID`), CRI-O (`crio-ID.scope`)
/// and Podman (`libpod-ID.scope`, `.../libpod-ID.scope/container`) name them.
pub fn container_id(cgroup: &str) -> Option<String> {
    cgroup.rsplit('/').find_map(|c| {
        c.split(['-', '.', '_', ':'])
            .find(|w| w.len() == 64 && w.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_owned)
    })
}

/// `text` with every control character (C0, DEL, C1, and the Unicode direction overrides)
/// written as an escape (`\x1b`, `\u{202e}`): what any local user puts in a process name or a
/// command line (`prctl(PR_SET_NAME)`, argv) is shown, never acted on by the terminal of the
/// watcher, which runs as root. Every name and command line the watcher reports goes through
/// here when it is read.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            let code = c as u32;
            if code < 0x100 {
                out.push_str(&format!("\\x{code:02x}"));
            } else {
                out.push_str(&format!("\\u{{{code:x}}}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| printable(c.trim_end_matches('\n')))
        .unwrap_or_default()
}

fn cmdline(pid: u32) -> String {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut s: String = printable(
        &String::from_utf8_lossy(&raw)
            .split('\0')
            .filter(|a| !a.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    );
    if s.is_empty() {
        s = format!("[{}]", comm(pid));
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
        assert!(p.cgroup.starts_with('/'), "{p:?}");
        assert!(euid().is_some());
    }

    #[test]
    fn container_ids_of_the_usual_runtimes() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/docker/{id}"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c4d.slice/cri-containerd-{id}.scope"),
            format!("/kubepods/besteffort/pod1a2b3c4d-0000-1111-2222-333344445555/{id}"),
            format!("/kubepods.slice/kubepods-pod1a2b.slice/crio-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{id}.scope"),
        ] {
            assert_eq!(container_id(&path).as_deref(), Some(id), "{path}");
        }
        for path in [
            "/",
            "/user.slice/user-1000.slice/session-2.scope",
            "/system.slice/nginx.service",
            // 63 and 65 hex digits: not an id.
            "/docker/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
            "/docker/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
        ] {
            assert_eq!(container_id(path), None, "{path}");
        }
    }
}

#[cfg(test)]
mod printable_tests {
    use super::printable;

    #[test]
    fn control_characters_and_direction_overrides_are_shown_escaped() {
        assert_eq!(printable("python3 app.py"), "python3 app.py");
        assert_eq!(
            printable("x\u{1b}]0;pwned\u{7}\u{1b}[2J"),
            "x\\x1b]0;pwned\\x07\\x1b[2J"
        );
        assert_eq!(printable("a\u{9b}31m\u{7f}"), "a\\x9b31m\\x7f");
        assert_eq!(printable("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(printable("naïve 日本"), "naïve 日本");
    }
}
