//! Task limits: the flusher thread is a task, and counts against `RLIMIT_NPROC` (per user) and
//! a cgroup's `pids.max` (systemd's `TasksMax=`) as any thread does. Under a tight limit a
//! fork-per-connection server would get fewer children than natively (each counts twice), so
//! there the shim starts no flusher, and so holds nothing in that process: its sockets get
//! `TCP_NODELAY` only. Looked at once, before the process's first flusher would start.
//!
//! Tight: a limit of [`TIGHT`] tasks or fewer, on this process's real user (`RLIMIT_NPROC`,
//! which does not apply to root) or on its cgroup or one above it (v2, or v1's `pids`
//! hierarchy), as `/proc/self/cgroup` and `/proc/self/mountinfo` name them. A limit that
//! cannot be read counts as none.

use nagless_host::text::{cgroup_lines, cgroup_v2_path, mounts};

/// Limits at or below this many tasks are tight.
#[cfg_attr(test, allow(dead_code))]
pub const TIGHT: u64 = 1024;

/// Where the `pids` controller of this process's cgroup lives: the directory of its cgroup
/// (a mount point joined with the cgroup's path), from the texts of `/proc/self/cgroup` and
/// `/proc/self/mountinfo`; `None` if no mounted hierarchy carries it.
pub fn pids_dir(cgroup: &str, mountinfo: &str) -> Option<(String, String)> {
    // v1's pids hierarchy first (where both exist, the controller is v1's), then v2.
    let v1 = cgroup_lines(cgroup).find_map(|l| l.has("pids").then_some(l.path));
    let v2 = cgroup_v2_path(cgroup);
    for m in mounts(mountinfo) {
        let path = match m.fstype {
            "cgroup" if m.has_option("pids") => v1,
            "cgroup2" if v1.is_none() => v2,
            _ => None,
        };
        if let Some(path) = path {
            // The cgroup's path is relative to the namespace's root; the mount shows `root`.
            let rel = path
                .strip_prefix(m.root.trim_end_matches('/'))
                .unwrap_or(path);
            return Some((m.point.to_string(), rel.trim_start_matches('/').to_string()));
        }
    }
    None
}

/// The tightest `pids.max` of a cgroup and the ones above it, given a reader of
/// `DIR/pids.max` texts (`mnt` the hierarchy's mount point, `rel` the cgroup below it).
pub fn tightest(mnt: &str, rel: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let mut dir = rel.to_string();
    let mut tightest: Option<u64> = None;
    loop {
        let file = if dir.is_empty() {
            format!("{mnt}/pids.max")
        } else {
            format!("{mnt}/{dir}/pids.max")
        };
        if let Some(n) = read(&file).and_then(|t| t.trim().parse::<u64>().ok()) {
            tightest = Some(tightest.map_or(n, |t| t.min(n)));
        }
        if dir.is_empty() {
            return tightest;
        }
        dir = dir
            .rsplit_once('/')
            .map_or(String::new(), |(up, _)| up.to_string());
    }
}

/// Whether this process's task limits are tight (see the module's docs).
#[cfg(not(test))]
pub fn tight() -> bool {
    let read = |path: &str| {
        let c = std::ffi::CString::new(path).ok()?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = crate::sys::read_file(&c, &mut buf)?;
        buf.truncate(n);
        String::from_utf8(buf).ok()
    };
    if crate::sys::nproc_limit().is_some_and(|n| n <= TIGHT) {
        return true;
    }
    let (Some(cgroup), Some(mountinfo)) = (read("/proc/self/cgroup"), read("/proc/self/mountinfo"))
    else {
        return false;
    };
    pids_dir(&cgroup, &mountinfo)
        .and_then(|(mnt, rel)| tightest(&mnt, &rel, read))
        .is_some_and(|n| n <= TIGHT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS_V1: &str = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const MOUNTS_V2: &str = "\
30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn the_pids_hierarchy_is_found_in_v1_and_v2() {
        let hybrid = "9:name=systemd:/\n8:pids:/svc/a\n0::/\n";
        assert_eq!(
            pids_dir(hybrid, MOUNTS_V1),
            Some(("/sys/fs/cgroup/pids".into(), "svc/a".into()))
        );
        let unified = "0::/system.slice/x.service\n";
        assert_eq!(
            pids_dir(unified, MOUNTS_V2),
            Some(("/sys/fs/cgroup".into(), "system.slice/x.service".into()))
        );
        assert_eq!(pids_dir("0::/\n", ""), None);
    }

    #[test]
    fn the_tightest_limit_above_a_cgroup_counts() {
        let files = |p: &str| match p {
            "/m/a/b/pids.max" => Some("max\n".to_string()),
            "/m/a/pids.max" => Some("16\n".to_string()),
            "/m/pids.max" => None,
            _ => panic!("{p}"),
        };
        assert_eq!(tightest("/m", "a/b", files), Some(16));
        assert_eq!(tightest("/m", "", |_| Some("max".into())), None);
    }
}
