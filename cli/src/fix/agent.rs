//! `nagless fix --policy FILE`: the node agent that keeps a fleet's policy true on this host.
//!
//! Every [`PASS`] it reads the policy file again (a ConfigMap's update, an edit under `/etc`),
//! names every process as `nagless watch` does, and sets each rule's action on the
//! established connections the rule takes ([`Decision::rule_for`]: the first rule that
//! selects a connection takes it, alone), through copies of the processes' descriptors
//! (`existing::fix_chosen`). So a new connection of a selected workload is changed within a
//! pass of being established, and nothing the policy does not select is looked at twice or
//! touched. What it changed is noted by rule ([`Ledger`]) and kept on disk (the journal under
//! `--state`): a rule removed or changed in the file is undone at the next pass; the agent's
//! stop (SIGINT, SIGTERM, SIGHUP, `--duration`) undoes everything; and an agent killed
//! outright leaves its journal, which the next agent reads first and undoes.
//!
//! Overlaps with a hand-made `nagless fix` (written in docs/fix.md): a fix typed by hand wins.
//! The agent leaves alone every process a hand-made fix in force covers, and says so once;
//! a hand-made fix refuses a process whose connections the agent has changed.

use std::collections::BTreeSet;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use nagless_fix::ledger::Ledger;
use nagless_fix::policy::{Decision, Policy, Rule};
use nagless_fix::{attach, existing, target};
use nagless_host::Proc;

/// How often the agent looks: a new connection is changed within one pass (and the time to
/// name the host's processes).
pub(crate) const PASS: Duration = Duration::from_millis(250);

/// Where an agent keeps its journal unless told (`--state`).
pub(crate) const STATE_DIR: &str = "/run/nagless";

/// The journal's file under the state directory.
pub(crate) fn journal_in(state: &Path) -> PathBuf {
    state.join("fix-policy.journal")
}

/// A line of the agent's log (its audit: every change and every undo), on stdout.
fn log(line: impl std::fmt::Display) {
    outln!("nagless fix: {line}");
}

/// The journal of an agent that still runs, if one does: its pid and ledger.
pub(crate) fn running_agent(state: &Path) -> Option<(u32, Ledger)> {
    let text = fs::read_to_string(journal_in(state)).ok()?;
    let (pid, ledger) = Ledger::from_journal(&text).ok()?;
    agent_alive(pid).then_some((pid, ledger))
}

/// Whether `pid` is a nagless process (an agent), not this one.
fn agent_alive(pid: u32) -> bool {
    pid != std::process::id()
        && Proc::host()
            .comm(pid)
            .is_ok_and(|c| c.trim_end().starts_with("nagless"))
}

/// Before this agent begins: what a stopped or killed agent left changed is put back, or,
/// if that agent still runs, this one refuses (one agent per host and state directory).
fn clean_after_another(journal: &Path) -> anyhow::Result<()> {
    let text = match fs::read_to_string(journal) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        r => r.with_context(|| format!("reading the journal {}", journal.display()))?,
    };
    let (pid, mut ledger) = Ledger::from_journal(&text).map_err(|e| {
        crate::refused(format!(
            "the journal {}: {e}; it is not an agent's: move it away",
            journal.display()
        ))
    })?;
    if agent_alive(pid) {
        return Err(crate::refused(format!(
            "another policy agent (pid {pid}) keeps {}: one agent per host",
            journal.display()
        )));
    }
    let left = ledger.retire(|_| false);
    let back = existing::undo(&left, |_, _| false);
    log(format_args!(
        "a stopped agent (pid {pid}) left {} connection(s) changed: {back} put back (the others had closed)",
        left.len()
    ));
    fs::remove_file(journal).with_context(|| format!("removing {}", journal.display()))
}

/// Writes the journal whole (a crash mid-write leaves the previous one).
fn write_journal(journal: &Path, ledger: &Ledger) -> anyhow::Result<()> {
    let tmp = journal.with_extension("journal.new");
    fs::write(&tmp, ledger.to_journal(std::process::id()))
        .and_then(|()| fs::rename(&tmp, journal))
        .with_context(|| format!("writing the journal {}", journal.display()))
}

/// The processes hand-made fixes in force cover: whole cgroups (relative to the cgroup2
/// root, as `watch` names them) and processes fixed by pid (with their children).
#[derive(Default)]
struct HandMade {
    cgroups: Vec<String>,
    pids: BTreeSet<u32>,
}

impl HandMade {
    fn now() -> HandMade {
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

    fn covers(&self, pid: u32, cgroup: &str) -> bool {
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

/// A rule as it selects and acts, whatever its line: a rule edited in the file is undone and
/// applied afresh; one only moved is kept.
fn same_rule(a: &Rule, b: &Rule) -> bool {
    let mut b = b.clone();
    b.line = a.line;
    *a == b
}

/// The agent's state between passes.
struct Agent {
    policy: Policy,
    node: String,
    ledger: Ledger,
    /// Sockets (by inode) looked at under the policy in force: changed, or not selected.
    seen: BTreeSet<u64>,
    /// Processes left to a hand-made fix, and notes, each logged once.
    said: BTreeSet<String>,
}

impl Agent {
    /// A new policy: the rules it removed or changed are undone now.
    fn take(&mut self, policy: Policy) {
        let kept = |name: &str| {
            let old = self.policy.rules.iter().find(|r| r.name == name);
            let new = policy.rules.iter().find(|r| r.name == name);
            old.zip(new).is_some_and(|(o, n)| same_rule(o, n))
        };
        let undone = self.ledger.retire(kept);
        if !undone.is_empty() {
            let back = existing::undo(&undone, |_, _| false);
            log(format_args!(
                "policy changed: {back} of {} connection(s) of rules removed or changed put back",
                undone.len()
            ));
        }
        self.policy = policy;
        // Every socket is looked at again under the new rules, but those still changed.
        self.seen = self.ledger.inodes().collect();
    }

    /// Says `line` once in the agent's life.
    fn once(&mut self, line: String) {
        if self.said.insert(line.clone()) {
            log(line);
        }
    }

    /// One pass over the host's processes: each rule's action on the connections it takes
    /// that are not changed yet. Whether the ledger changed.
    fn pass(&mut self, hand: &HandMade) -> bool {
        let me = std::process::id();
        let before = self.ledger.len();
        for pid in Proc::host().pids() {
            if pid == me {
                continue;
            }
            let Some(w) = super::policy::workload(pid, &self.node) else {
                continue;
            };
            let Some(d) = self.policy.decide(&w) else {
                continue;
            };
            if !d.rules.iter().any(|&(_, applies)| applies) {
                continue;
            }
            if hand.covers(pid, &w.cgroup) {
                self.once(format!(
                    "process {pid} ({}) is left to the hand-made fix in force on it",
                    w.program
                ));
                continue;
            }
            let pass = existing::fix_chosen(
                &[pid],
                |_, l, r| takes(&d, l, r).map(|rule| rule.action),
                &mut self.seen,
                None,
            );
            for c in pass.changed {
                let (l, r) = c.addresses();
                let Some(rule) = takes(&d, l, r) else {
                    continue;
                };
                log(format_args!(
                    "rule {:?}: {} on {l}->{r} of process {pid} ({}, {})",
                    rule.name,
                    rule.action.describe(),
                    w.program,
                    super::policy::place(&w)
                ));
                self.ledger.record(&rule.name, c);
            }
            for n in pass.notes.into_iter().chain(pass.blocked) {
                self.once(n);
            }
        }
        self.ledger.len() != before
    }
}

/// The rule that takes the connection `local`->`remote` of a workload decided `d`, if one
/// does (the first that selects it, if its canary takes it).
fn takes<'d>(
    d: &'d Decision<'_>,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
) -> Option<&'d Rule> {
    d.rule_for((local.ip(), local.port()), (remote.ip(), remote.port()))
        .filter(|&(_, takes)| takes)
        .map(|(rule, _)| rule)
}

/// Runs the agent on the policy at `path` until a signal or `duration` (zero: no limit).
pub(super) fn run(path: &Path, state: &Path, duration: Duration) -> anyhow::Result<()> {
    // First: a signal that comes while a stopped agent's changes are put back ends this one
    // cleanly after them.
    crate::sys::catch_interrupts();
    let policy = super::policy::read(path)?;
    let mut text = fs::read(path).unwrap_or_default();
    fs::create_dir_all(state).with_context(|| format!("creating {}", state.display()))?;
    let journal = journal_in(state);
    clean_after_another(&journal)?;
    log(format_args!(
        "policy {}: {} rule(s) in force; the agent looks every {} ms (journal {})",
        path.display(),
        policy.rules.len(),
        PASS.as_millis(),
        journal.display()
    ));
    let mut agent = Agent {
        policy,
        node: super::policy::node(),
        ledger: Ledger::default(),
        seen: BTreeSet::new(),
        said: BTreeSet::new(),
    };
    // Written at once: a second agent refuses from the start.
    write_journal(&journal, &agent.ledger)?;
    let start = Instant::now();
    let mut passes = 0u64;
    while !crate::sys::interrupted() && (duration.is_zero() || start.elapsed() < duration) {
        match fs::read(path) {
            Ok(now) if now != text => {
                text = now;
                match super::policy::read(path) {
                    Ok(p) => {
                        log(format_args!(
                            "policy {} changed: {} rule(s) in force",
                            path.display(),
                            p.rules.len()
                        ));
                        agent.take(p);
                        write_journal(&journal, &agent.ledger)?;
                    }
                    Err(e) => log(format_args!("{e:#}; the rules in force stay")),
                }
            }
            Ok(_) => {}
            Err(e) => agent.once(format!(
                "cannot read the policy {} ({e}); the rules in force stay",
                path.display()
            )),
        }
        let mut changed = agent.pass(&HandMade::now());
        passes += 1;
        if passes % 20 == 0 {
            let n = agent.ledger.len();
            agent.ledger.forget_closed(existing::still_held);
            changed |= agent.ledger.len() != n;
        }
        if changed {
            write_journal(&journal, &agent.ledger)?;
        }
        std::thread::sleep(PASS);
    }
    let all = agent.ledger.retire(|_| false);
    let back = existing::undo(&all, |_, _| false);
    let _ = fs::remove_file(&journal);
    log(format_args!(
        "agent stopped: {back} of {} changed connection(s) put back (the others had closed)",
        all.len()
    ));
    Ok(())
}
