//! What hand-made `nagless fix`es cover: the agent leaves those processes alone (a fix typed
//! by hand wins).

use std::collections::BTreeSet;
use std::path::Path;

use nagless_fix::{attach, target};

/// The processes hand-made fixes in force cover: whole cgroups (relative to the cgroup2
/// root, as `watch` names them) and processes fixed by pid (with their children).
#[derive(Default)]
pub(super) struct HandMade {
    cgroups: Vec<String>,
    pids: BTreeSet<u32>,
}

impl HandMade {
    pub(super) fn now() -> HandMade {
        let mut h = HandMade::default();
        if !attach::can_list() {
            return h;
        }
        let Ok(root) = target::cgroup2_root() else {
            return h;
        };
        for r in attach::running() {
            match r.config {
                Some(c) if c.target_pid != 0 => h.pids.extend(target::process_tree(c.target_pid)),
                _ if r.whole => {
                    if let Some(rel) = attach::find_cgroup(&root, r.cgroup)
                        .and_then(|d| d.strip_prefix(&root).ok().map(Path::to_path_buf))
                    {
                        h.cgroups.push(format!("/{}", rel.display()));
                    }
                }
                _ => {}
            }
        }
        h
    }

    pub(super) fn covers(&self, pid: u32, cgroup: &str) -> bool {
        self.pids.contains(&pid)
            || self.cgroups.iter().any(|c| {
                c == "/"
                    || cgroup == c
                    || cgroup
                        .strip_prefix(c.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            })
    }
}
