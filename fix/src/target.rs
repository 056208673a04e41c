//! Which connections a fix reaches ([`Target`]): the cgroup the kernel program attaches to,
//! when the selection is a whole cgroup, and the processes whose existing connections are
//! changed, resolved from `--pid`, `--cgroup`, `--unit` or `--container` ([`Selector`]).

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nagless_host::{text, Proc};

/// What the operator selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// A process and its children.
    Pid(u32),
    /// A cgroup (v2), by path: absolute, or under the cgroup v2 mount.
    Cgroup(PathBuf),
    /// A systemd unit (`nginx` or `nginx.service`).
    Unit(String),
    /// A container, by id or its first 12 or more hex digits (Docker, containerd, CRI-O,
    /// Podman).
    Container(String),
}

/// What a selection resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The cgroup the kernel program attaches to (every new connection of its processes and
    /// its descendants'), when the selection is a whole cgroup; `None` when the selected
    /// process shares its cgroup with others (then only its own connections are changed).
    pub cgroup: Option<PathBuf>,
    /// The cgroup the selection lives in (the whole cgroup, or the one the selected process
    /// shares): where the program's own choices of options are noted.
    pub home: PathBuf,
    /// Processes whose existing connections are changed.
    pub pids: Vec<u32>,
}

/// Why a selection resolved to nothing.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// No cgroup v2 mount.
    #[error("no cgroup v2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup): nagless fix attaches to cgroups v2")]
    NoCgroup2,
    /// No such process.
    #[error("no process {0}")]
    NoProcess(u32),
    /// No such cgroup.
    #[error("{0}: not a cgroup v2 directory")]
    NoCgroup(PathBuf),
    /// No such unit.
    #[error("no cgroup for systemd unit {0} (is it running?)")]
    NoUnit(String),
    /// No container, or more than one, matches.
    #[error("{0}")]
    Container(String),
    /// Reading /proc or the cgroup tree failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A kernel thread: it has no connections.
    #[error("process {0} is a kernel thread: it has no connections of its own")]
    KernelThread(u32),
    /// The selection is every process of the host, not asked for by name.
    #[error("{0} selects every process on this host ({1} processes): give --all to mean that, or --dry-run to see them")]
    Everything(String, usize),
}

/// The cgroup v2 mount point of this host.
pub fn cgroup2_root() -> Result<PathBuf, TargetError> {
    Proc::host().cgroup2_root()?.ok_or(TargetError::NoCgroup2)
}

/// The cgroup v2 path of process `pid` (relative to the mount: `/system.slice/x.service`).
fn cgroup_of(pid: u32) -> Result<String, TargetError> {
    let text = Proc::host()
        .cgroup(pid)
        .map_err(|_| TargetError::NoProcess(pid))?;
    Ok(text::cgroup_v2_path(&text).unwrap_or("/").to_string())
}

/// Refuses a selection that means more than a user names by it: a kernel thread (no
/// connections), or every process of the host (`--pid 1`, the cgroup tree's root), unless
/// `all` says so.
pub fn check_scope(sel: &Selector, t: &Target, all: bool) -> Result<(), TargetError> {
    if let Selector::Pid(pid) = sel {
        if Proc::host().kernel_thread(*pid) {
            return Err(TargetError::KernelThread(*pid));
        }
    }
    if all {
        return Ok(());
    }
    let root = cgroup2_root()?;
    let everything = match sel {
        Selector::Pid(1) => Some("--pid 1 (init, and so every process under it)".to_string()),
        _ if t.cgroup.as_deref() == Some(root.as_path()) => {
            Some(format!("the root cgroup ({})", root.display()))
        }
        _ => None,
    };
    match everything {
        Some(what) => Err(TargetError::Everything(what, t.pids.len())),
        None => Ok(()),
    }
}

/// `pid` and every process descended from it, from `(pid, parent)` pairs.
pub(crate) fn tree(pid: u32, parents: &[(u32, u32)]) -> BTreeSet<u32> {
    let mut set = BTreeSet::from([pid]);
    loop {
        let before = set.len();
        for &(p, pp) in parents {
            if set.contains(&pp) {
                set.insert(p);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

/// Process `pid` and every process descended from it now.
pub fn process_tree(pid: u32) -> BTreeSet<u32> {
    tree(pid, &Proc::host().parents())
}

/// A cgroup directory and every cgroup directory below it.
pub(crate) fn cgroup_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = fs::read_dir(&d) {
            stack.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        out.push(d);
    }
    out
}

/// The processes of a cgroup and of its descendants.
pub(crate) fn procs_under(dir: &Path) -> BTreeSet<u32> {
    cgroup_dirs(dir)
        .iter()
        .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Resolves a selection on this host.
pub fn resolve(sel: &Selector) -> Result<Target, TargetError> {
    let root = cgroup2_root()?;
    let whole = |dir: PathBuf| -> Result<Target, TargetError> {
        if !dir.join("cgroup.procs").exists() {
            return Err(TargetError::NoCgroup(dir));
        }
        let pids = procs_under(&dir).into_iter().collect();
        Ok(Target {
            cgroup: Some(dir.clone()),
            home: dir,
            pids,
        })
    };
    match sel {
        Selector::Pid(pid) => {
            if Proc::host().exited(*pid) {
                return Err(TargetError::NoProcess(*pid));
            }
            let path = cgroup_of(*pid)?;
            let dir = root.join(path.trim_start_matches('/'));
            let mine = process_tree(*pid);
            let there = procs_under(&dir);
            // The cgroup is the process's own when it holds nothing else.
            if !there.is_empty() && there.is_subset(&mine) && path != "/" {
                whole(dir)
            } else {
                Ok(Target {
                    cgroup: None,
                    home: dir,
                    pids: mine.into_iter().collect(),
                })
            }
        }
        Selector::Cgroup(p) => {
            let dir = if p.starts_with(&root) {
                p.clone()
            } else {
                root.join(p.strip_prefix("/").unwrap_or(p))
            };
            whole(dir)
        }
        Selector::Unit(name) => {
            let unit = if name.contains('.') {
                name.clone()
            } else {
                format!("{name}.service")
            };
            find_dir(&root, &unit, 4)
                .ok_or_else(|| TargetError::NoUnit(unit.clone()))
                .and_then(whole)
        }
        Selector::Container(id) => {
            let id = id.to_ascii_lowercase();
            if id.len() < 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(TargetError::Container(format!(
                    "{id}: a container id is 12 to 64 hex digits"
                )));
            }
            let mut found = BTreeSet::new();
            for (pid, _) in Proc::host().parents() {
                let Ok(path) = cgroup_of(pid) else { continue };
                if nagless_watch::procs::container_id(&path).is_some_and(|c| c.starts_with(&id)) {
                    found.insert(path);
                }
            }
            // A container's processes may sit in sub-cgroups of its own: take the shortest.
            let shortest = found.iter().min_by_key(|p| p.len()).cloned();
            match shortest {
                Some(p) if found.iter().all(|f| f.starts_with(&p)) => {
                    whole(root.join(p.trim_start_matches('/')))
                }
                Some(_) => Err(TargetError::Container(format!(
                    "{id} matches more than one container: give more of its id"
                ))),
                None => Err(TargetError::Container(format!(
                    "no running process is in a container {id}"
                ))),
            }
        }
    }
}

/// The first directory named `name` under `dir`, at most `depth` levels down.
fn find_dir(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let entries: Vec<_> = fs::read_dir(dir).ok()?.flatten().collect();
    for e in &entries {
        if e.file_name() == name && e.file_type().is_ok_and(|t| t.is_dir()) {
            return Some(e.path());
        }
    }
    if depth == 0 {
        return None;
    }
    entries
        .iter()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| find_dir(&e.path(), name, depth - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_tree_takes_children_and_grandchildren_only() {
        let parents = [(10, 1), (11, 10), (12, 11), (13, 1), (14, 13)];
        assert_eq!(tree(10, &parents), BTreeSet::from([10, 11, 12]));
        assert_eq!(tree(99, &parents), BTreeSet::from([99]));
    }

    #[test]
    fn a_cgroups_processes_include_its_descendants() {
        let dir = std::env::temp_dir().join(format!("nagless-fix-cg-{}", std::process::id()));
        fs::create_dir_all(dir.join("child")).unwrap();
        fs::write(dir.join("cgroup.procs"), "5\n6\n").unwrap();
        fs::write(dir.join("child/cgroup.procs"), "7\n").unwrap();
        assert_eq!(procs_under(&dir), BTreeSet::from([5, 6, 7]));
        assert_eq!(find_dir(&dir, "child", 1), Some(dir.join("child")));
        fs::remove_dir_all(&dir).unwrap();
    }
}
