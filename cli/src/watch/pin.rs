//! What to tell of a stalling row: the `nagless fix` already covering it on this host
//! ([`Pin`]), or the command that would repair it live ([`fix_command`]).

use nagless_watch::Row;

/// A `nagless fix` on this host (pinned with `--persist`, or running): which cgroup
/// (relative to the cgroup v2 mount, as rows name theirs), which ports, and what it sets.
pub(super) struct Pin {
    pub(super) cgroup: String,
    pub(super) ports: Vec<u16>,
    pub(super) what: String,
}

impl Pin {
    /// Every fix on this host that sets TCP_NODELAY: pinned ones, then running ones (a
    /// `nagless fix` attached to a cgroup), each with its ports, read from its own map.
    /// None when there is no cgroup v2.
    pub(super) fn all() -> Vec<Pin> {
        let Ok(root) = nagless_fix::target::cgroup2_root() else {
            return Vec::new();
        };
        let relative =
            |dir: &std::path::Path| Some(format!("/{}", dir.strip_prefix(&root).ok()?.display()));
        let pinned = nagless_fix::attach::pinned(&root);
        let mut pins: Vec<Pin> = pinned
            .iter()
            .filter_map(|p| {
                let (action, ports) = p.config?.action();
                let cgroup = relative(p.cgroup.as_ref()?)?;
                (action.nodelay).then(|| Pin {
                    cgroup,
                    ports: ports.as_slice().to_vec(),
                    what: format!("pinned: {} on {}", action.describe(), p.dir.display()),
                })
            })
            .collect();
        for run in nagless_fix::attach::running_unpinned(&pinned) {
            if !run.whole {
                continue;
            }
            // A fix whose options cannot be read, or that sets no TCP_NODELAY (a delayed-ACK
            // bound), covers no held write: its row is told the command as usual.
            let Some((action, ports)) = run.config.map(|c| c.action()) else {
                continue;
            };
            let Some(dir) = nagless_fix::attach::find_cgroup(&root, run.cgroup) else {
                continue;
            };
            if let (true, Some(cgroup)) = (action.nodelay, relative(&dir)) {
                pins.push(Pin {
                    what: format!("running: {} on {}", action.describe(), dir.display()),
                    cgroup,
                    ports: ports.as_slice().to_vec(),
                });
            }
        }
        pins
    }

    /// Whether the pin sets TCP_NODELAY on the row's new connections: the row's cgroup is
    /// the pin's or under it, and the pin takes every port or the row's.
    pub(super) fn covers(&self, r: &Row) -> bool {
        let under = r.cgroup.as_deref().is_some_and(|c| {
            c == self.cgroup
                || self.cgroup == "/"
                || c.strip_prefix(self.cgroup.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        });
        under && (self.ports.is_empty() || self.ports.contains(&r.port))
    }
}

/// The `nagless fix` command that repairs a stalling row's process live (its held writes:
/// TCP_NODELAY): by container, systemd unit or pid, narrowed to the row's port.
pub(super) fn fix_command(r: &Row) -> Option<String> {
    let who = if let Some(c) = &r.container {
        format!("--container {}", &c[..c.len().min(12)])
    } else if let Some(u) = r.cgroup.as_deref().and_then(nagless_watch::procs::unit) {
        format!("--unit {u}")
    } else {
        format!("--pid {}", r.pid?)
    };
    Some(format!("nagless fix {who} --port {} --nodelay", r.port))
}
