//! `nagless fix --policy FILE --dry-run`: a fleet's policy (nagless-fix's `policy`) checked,
//! and what it would select on this host now: per rule, the workloads it selects, whether its
//! canary takes each, and their connections now that it would change (the first rule that
//! selects a connection takes it, alone).

use std::fmt::Write as _;
use std::path::Path;

use nagless_fix::existing;
use nagless_fix::policy::{CanaryBy, Policy, Rule, Workload};
use nagless_host::Proc;

/// The workload process `pid` is, as `nagless watch` names it; `None` if it is gone or a
/// kernel thread (which holds no connection).
pub(super) fn workload(pid: u32, node: &str) -> Option<Workload> {
    if Proc::host().cmdline(pid).is_ok_and(|c| c.is_empty()) {
        return None; // a kernel thread
    }
    let n = nagless_watch::procs::names_of(pid)?;
    let pod = n.pod.unwrap_or_default();
    let some = |s: String| Some(s).filter(|s| !s.is_empty());
    Some(Workload {
        pid,
        program: n.program,
        unit: n.unit,
        container: n.container,
        k8s_namespace: some(pod.namespace),
        k8s_pod: some(pod.name),
        k8s_container: some(pod.container),
        cgroup: n.cgroup,
        node: node.to_owned(),
    })
}

/// This host's identity for the canary: its machine id, else its name.
pub(super) fn node() -> String {
    ["/etc/machine-id", "/proc/sys/kernel/hostname"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .map(|t| t.trim().to_owned())
        .find(|t| !t.is_empty())
        .unwrap_or_default()
}

/// Reads and checks the policy at `path`.
pub(super) fn read(path: &Path) -> anyhow::Result<Policy> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| crate::usage(format!("cannot read the policy {}: {e}", path.display())))?;
    Policy::parse(&text, nagless_fix::tick())
        .map_err(|e| crate::usage(format!("policy {}: {e}; nothing applied", path.display())))
}

/// What a rule sets, for people.
fn rule_text(r: &Rule) -> String {
    let mut t = format!(
        "rule {:?} (line {}): {}",
        r.name,
        r.line,
        r.action.describe()
    );
    if r.canary < 100.0 {
        let by = match r.canary_by {
            CanaryBy::Workload => "workloads",
            CanaryBy::Connection => "connections",
        };
        let _ = write!(t, ", canary {}% of its {by}", r.canary);
    }
    if let Some(d) = r.revert_after {
        let _ = write!(
            t,
            ", on trial: its stalls counted for {} before it acts, then taken back unless they fall by half within {}",
            humantime(d / 2),
            humantime(d)
        );
    }
    t
}

fn humantime(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 60.0 && s % 60.0 == 0.0 {
        format!("{} min", s / 60.0)
    } else {
        format!("{s} s")
    }
}

/// Where a workload runs, for people: its pod, else its container, else its unit, else its
/// cgroup.
pub(super) fn place(w: &Workload) -> String {
    [
        w.k8s_namespace
            .as_ref()
            .zip(w.k8s_pod.as_ref())
            .map(|(ns, p)| format!("pod {ns}/{p}")),
        w.container
            .as_ref()
            .filter(|_| w.k8s_pod.is_none())
            .map(|c| format!("container {}", &c[..c.len().min(12)])),
        w.unit.as_ref().map(|u| format!("unit {u}")),
    ]
    .into_iter()
    .flatten()
    .next()
    .unwrap_or_else(|| format!("cgroup {}", w.cgroup))
}

/// The dry run's text: per rule, what it would select on this host now.
pub(super) fn dry_run(policy: &Policy, path: &Path) -> String {
    let node = node();
    let mut per_rule: Vec<Vec<String>> = vec![Vec::new(); policy.rules.len()];
    for pid in Proc::host().pids() {
        let Some(w) = workload(pid, &node) else {
            continue;
        };
        let Some(d) = policy.decide(&w) else { continue };
        let where_ = place(&w);
        let conns = existing::connections_between(pid);
        for (i, rule) in policy.rules.iter().enumerate() {
            let Some(&(_, applies)) = d.rules.iter().find(|(r, _)| std::ptr::eq(*r, rule)) else {
                continue;
            };
            let mut line = format!("  {pid} {} ({where_}): ", w.program);
            if !applies {
                line += "left out of the canary";
            } else {
                match &conns {
                    Ok(c) => {
                        let mine: Vec<String> = c
                            .iter()
                            .filter(|(l, rm)| {
                                d.rule_for((l.ip(), l.port()), (rm.ip(), rm.port()))
                                    .is_some_and(|(r, takes)| std::ptr::eq(r, rule) && takes)
                            })
                            .map(|(l, rm)| format!("{l}->{rm}"))
                            .collect();
                        let _ = write!(
                            line,
                            "{} connection(s) to change now{}{}; its new ones as they are made",
                            mine.len(),
                            if mine.is_empty() { "" } else { " " },
                            mine.join(" ")
                        );
                    }
                    Err(existing::Reach::Gone) => line += "exited",
                    Err(existing::Reach::Blocked(why)) => line += why,
                }
            }
            per_rule[i].push(line);
        }
    }
    let mut out = format!(
        "nagless fix --policy {} --dry-run: {} rule(s); nothing changed (the first rule that selects a connection takes it)\n",
        path.display(),
        policy.rules.len()
    );
    for (r, lines) in policy.rules.iter().zip(&per_rule) {
        let _ = writeln!(out, "{}", rule_text(r));
        if lines.is_empty() {
            out += "  selects no process on this host now\n";
        }
        for l in lines {
            let _ = writeln!(out, "{}", l.trim_end());
        }
    }
    out
}
