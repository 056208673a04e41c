//! The fixes in force on this host (`nagless fix --list`, `--remove`, and what `nagless watch
//! --serve` exports): running fixes and pinned ones, and the fleet agent's rules.

use anyhow::Context;
use nagless_fix::{attach, target, Ports, Selector};

use super::agent::{self, policy_status};

/// A fix in force on this host: who holds it, what it changes, on what.
pub(crate) struct InForce {
    /// `nagless fix pid N` (running), or `pinned at DIR`.
    pub by: String,
    /// `cgroup DIR`, or `process N and its children (in DIR)`.
    pub on: String,
    /// What it sets (`TCP_NODELAY`, a delayed-ACK bound).
    pub action: String,
    /// `every port`, or the ports.
    pub ports: String,
    /// New connections it selected so far (pinned fixes: their counter).
    pub selected: Option<u64>,
}

impl InForce {
    /// Its labels in `nagless watch --serve`'s `nagless_fix_info`.
    pub(crate) fn labels(self) -> nagless_watch::metrics::FixLabels {
        nagless_watch::metrics::FixLabels {
            by: self.by,
            on: self.on,
            action: self.action,
            ports: self.ports,
        }
    }
}

/// Every fix in force on this host, running first, then pinned: what `--list` shows and
/// `nagless watch --serve` exports. An error if this process may not list BPF programs.
pub(crate) fn in_force() -> anyhow::Result<Vec<InForce>> {
    let root = target::cgroup2_root().context("cgroup v2")?;
    let all = attach::pinned(&root);
    let mut out = Vec::new();
    // Fixes running now (a `nagless fix` process), by their programs: a fix of a whole
    // cgroup has a sock_ops program, every fix a note_choice one.
    for r in attach::running_unpinned(&all) {
        if !r.whole && r.config.is_some_and(|c| c.target_pid == 0) {
            continue;
        }
        let Some(c) = r.config else { continue };
        let (action, ports) = c.action();
        let dir = attach::find_cgroup(&root, r.cgroup)
            .map_or("a cgroup that is gone".into(), |d| d.display().to_string());
        out.push(InForce {
            by: format!("nagless fix pid {}", c.fixer_tgid),
            on: if r.whole {
                format!("cgroup {dir}")
            } else {
                format!("process {} and its children (in {dir})", c.target_pid)
            },
            action: action.describe(),
            ports: ports_text(&ports),
            selected: None,
        });
    }
    if all.is_empty() && out.is_empty() && !nagless_fix::attach::can_list() {
        anyhow::bail!(
            "cannot list the BPF programs of this host: it takes root (or CAP_SYS_ADMIN)"
        );
    }
    for p in all {
        let (what, ports) = p
            .config
            .map(|c| c.action())
            .map(|(a, p)| (a.describe(), p))
            .unwrap_or_default();
        out.push(InForce {
            by: format!("pinned at {}", p.dir.display()),
            on: p.cgroup.map_or("a cgroup that is gone".into(), |c| {
                format!("cgroup {}", c.display())
            }),
            action: what,
            ports: ports_text(&ports),
            selected: Some(p.counters.selected),
        });
    }
    Ok(out)
}

pub(super) fn list(state: &std::path::Path) -> anyhow::Result<()> {
    let fixes = in_force()?;
    let agent = agent::running_agent(state);
    if let Some((pid, ledger)) = &agent {
        outln!(
            "policy agent (pid {pid}, journal {}): {} connection(s) changed now",
            agent::journal_in(state).display(),
            ledger.len()
        );
        for r in policy_status(state) {
            let rates = match (r.before, r.after) {
                (Some(b), Some(a)) => format!("; stalls {b:.2}/s before, {a:.2}/s while it acted"),
                (Some(b), None) => format!("; stalls {b:.2}/s before"),
                _ => String::new(),
            };
            outln!(
                "  rule {:?}: {} ({}): {} connection(s) of {} process(es) now, {} changed since the agent started{rates}",
                r.rule,
                r.action,
                r.state,
                r.connections,
                r.workloads,
                r.changes
            );
        }
    }
    if fixes.is_empty() && agent.is_none() {
        outln!("no fix in force");
    }
    for f in fixes {
        match f.selected {
            None => outln!("running ({}): {} on {} ({})", f.by, f.action, f.on, f.ports),
            Some(n) => outln!(
                "{}: {} on {} ({}): {n} new connection(s) selected",
                f.by,
                f.action,
                f.on,
                f.ports
            ),
        }
    }
    Ok(())
}

pub(super) fn remove(sel: Option<&Selector>) -> anyhow::Result<()> {
    let root = target::cgroup2_root().context("cgroup v2")?;
    let want = match sel {
        Some(s) => Some(
            target::resolve(s)
                .map_err(|e| crate::usage(e.to_string()))?
                .cgroup
                .ok_or_else(|| {
                    crate::usage(
                        "that process has no cgroup of its own, so nothing of it is pinned",
                    )
                })?,
        ),
        None => None,
    };
    let mut removed = 0;
    for p in attach::pinned(&root) {
        if want.is_some() && p.cgroup != want {
            continue;
        }
        attach::remove(&p).with_context(|| format!("removing {}", p.dir.display()))?;
        outln!("removed {}", p.dir.display());
        removed += 1;
    }
    if removed == 0 {
        return Err(crate::refused("no pinned fix to remove"));
    }
    Ok(())
}

/// The ports a fix keeps to, for people.
fn ports_text(ports: &Ports) -> String {
    if ports.as_slice().is_empty() {
        "every port".to_string()
    } else {
        format!("ports {:?}", ports.as_slice())
    }
}
