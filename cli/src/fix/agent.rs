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
//! A rule with `revert_after` is tried first ([`Trial`]): the stalls of the connections it
//! would take are counted (by `nagless watch`'s backend, on a thread of its own, only while a
//! trial counts) before it acts and while it acts; a rule whose stall rate does not fall is
//! taken back, and stays taken back (a file beside the journal) until it is edited.
//!
//! Overlaps with a hand-made `nagless fix` (written in docs/fix.md): a fix typed by hand wins.
//! The agent leaves alone every process a hand-made fix in force covers, and says so once;
//! a hand-made fix refuses a process whose connections the agent has changed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use nagless_fix::existing;
use nagless_fix::existing::Changed;
use nagless_fix::ledger::Ledger;
use nagless_fix::policy::{Decision, Policy, Rule, Workload};
use nagless_fix::trial::{Rate, Step, Trial};
use nagless_host::Proc;
use nagless_watch::metrics::PolicyRule;

mod hand_made;
mod names;
mod stall_watch;
mod state;

use hand_made::HandMade;
use names::{opens, Names};
use stall_watch::StallWatch;
use state::{
    clean_after_another, form, lock_in, put_back, read_taken_back, status_in, taken_back_in,
    write_journal,
};
pub(crate) use state::{journal_in, policy_status, running_agent, STATE_DIR};

/// How often the agent looks: a new connection is changed within one pass (and the time to
/// name the host's processes).
pub(crate) const PASS: Duration = Duration::from_millis(250);

/// A line of the agent's log (its audit: every change and every undo), on stdout.
fn log(line: impl std::fmt::Display) {
    outln!("nagless fix: {line}");
}

/// The agent's state between passes.
struct Agent {
    policy: Policy,
    node: String,
    ledger: Ledger,
    /// Where the ledger is kept on disk: written as soon as a process's connections are
    /// changed, so that an agent killed outright leaves every change but the last few
    /// microseconds' in it.
    journal: PathBuf,
    /// Sockets (by inode) looked at under the policy in force: changed, or not selected.
    seen: BTreeSet<u64>,
    /// Processes left to a hand-made fix, and notes, each logged once.
    said: BTreeSet<String>,
    /// Each rule's trial, by name.
    trials: BTreeMap<String, Trial>,
    /// The workloads some rule selected at the last pass, by pid (to tell whose a stall is).
    workloads: HashMap<u32, Workload>,
    /// Counts stalls while a trial counts; when to try to start it again after a failure.
    watch: Option<StallWatch>,
    watch_retry: Option<Instant>,
    /// Where the rules taken back are kept, and those read from it (by form).
    taken_back_file: PathBuf,
    taken_back: HashMap<String, (Rate, Rate)>,
    /// Connections each rule changed, and times each was taken back, since the start.
    changes: BTreeMap<String, u64>,
    reverts: BTreeMap<String, u64>,
    /// The host's processes' names, kept between passes.
    names: Names,
    /// The connections each network namespace had opened at the last pass.
    known: HashMap<u64, u64>,
    /// The processes looked at since the rules last changed, and those that had a
    /// connection opening then.
    scanned: HashSet<u32>,
    connecting: HashSet<u32>,
    /// Passes made.
    passes: u64,
    /// Sockets the agent changed whose descriptor closed, another process perhaps still
    /// holding them (a forked child): when found again, their values before the agent's
    /// change are these, not what they hold now. Forgotten after [`ORPHANS_KEPT`].
    orphans: HashMap<u64, (Changed, Instant)>,
}

/// How long a socket whose first holder closed it is remembered (its other holders are
/// looked at within a roll of passes).
const ORPHANS_KEPT: Duration = Duration::from_secs(120);

/// Every process is looked at again (its descriptors listed) once in this many passes, one
/// share of them each pass (5 s): what the count of connections opened does not show (a
/// socket passed from another process, a namespace per thread) is found within that.
const ROLL: u64 = 20;

impl Agent {
    /// A new policy: the rules it removed or changed are undone now.
    fn take(&mut self, policy: Policy) {
        // A rule is kept only where it and every rule above it are as they were: the first
        // rule that selects a connection takes it, so a rule added, moved or edited above
        // may take connections from those below.
        let unchanged = self
            .policy
            .rules
            .iter()
            .zip(&policy.rules)
            .take_while(|(o, n)| form(o) == form(n))
            .count();
        let kept = |name: &str| policy.rules[..unchanged].iter().any(|r| r.name == name);
        let undone = self.ledger.retire(kept);
        if !undone.is_empty() {
            let account = put_back(&undone, &mut self.ledger);
            log(format_args!(
                "policy changed: connections of rules removed, changed or below a change: {account}"
            ));
        }
        let now = Instant::now();
        let mut trials = BTreeMap::new();
        for r in &policy.rules {
            let trial = match self.trials.get(&r.name) {
                Some(t) if kept(&r.name) => *t,
                _ => self.new_trial(r, now),
            };
            trials.insert(r.name.clone(), trial);
        }
        self.trials = trials;
        self.policy = policy;
        // Every socket is looked at again under the new rules, but those still changed.
        self.look_again();
    }

    /// A rule's trial from `now`: taken back already if a rule of its form was.
    fn new_trial(&self, r: &Rule, now: Instant) -> Trial {
        if let Some(&(before, after)) = self.taken_back.get(&form(r)) {
            log(format_args!(
                "rule {:?}: stays taken back ({before} before, {after} while it acted; edit it to try it again)",
                r.name
            ));
            return Trial::TakenBack { before, after };
        }
        let t = Trial::new(r.revert_after, now);
        if t.counting() {
            log(format_args!(
                "rule {:?}: on trial; its connections' stalls are counted for {} s before it acts, then for {} s while it acts",
                r.name,
                r.revert_after.unwrap_or_default().as_secs() / 2,
                r.revert_after.unwrap_or_default().as_secs()
            ));
        }
        t
    }

    /// Counts the stalls seen since the last pass, moves the trials on, and starts or stops
    /// the watch that counts: whether the ledger changed (a rule taken back).
    fn try_rules(&mut self) -> bool {
        let now = Instant::now();
        // The watch first: a trial moves on only while its stalls are counted.
        if !self.trials.values().any(Trial::counting) {
            self.watch = None;
        } else {
            if self.watch.as_ref().is_some_and(StallWatch::ended) {
                self.watch = None;
                log("the watch that counts stalls for the rules on trial ended");
            }
            if self.watch.is_none() && self.watch_retry.is_none_or(|t| t <= now) {
                match StallWatch::start() {
                    Ok(w) => {
                        self.watch = Some(w);
                        // Nothing was counted without it: every trial counts from now.
                        for t in self.trials.values_mut() {
                            t.restart(now);
                        }
                    }
                    Err(e) => {
                        self.once(format!(
                            "cannot count stalls for the rules on trial ({e}): they stay as they are (a rule that counts before it acts does not act) until it can, tried every 10 s"
                        ));
                        self.watch_retry = Some(now + Duration::from_secs(10));
                    }
                }
            }
        }
        if self.watch.is_none() {
            return false;
        }
        if let Some(w) = &self.watch {
            for (pid, l, r) in w.rx.try_iter() {
                let Some(d) = self.workloads.get(&pid).and_then(|w| self.policy.decide(w)) else {
                    continue;
                };
                if let Some(rule) = takes(&d, l, r) {
                    if let Some(t) = self.trials.get_mut(&rule.name) {
                        t.stall();
                    }
                }
            }
        }
        let (mut changed, mut again) = (false, false);
        for r in &self.policy.rules {
            let Some(t) = self.trials.get_mut(&r.name) else {
                continue;
            };
            match t.tick(now, r.revert_after) {
                None => {}
                Some(Step::Acts(before)) => {
                    log(format_args!(
                        "rule {:?}: acts now ({before} before)",
                        r.name
                    ));
                    // Its connections, passed over while it counted, are looked at again.
                    again = true;
                }
                Some(Step::Kept(before, after)) => log(format_args!(
                    "rule {:?}: kept: its stalls fell ({before} before, {after} while it acted)",
                    r.name
                )),
                Some(Step::TakenBack(before, after)) => {
                    let name = r.name.clone();
                    let undone = self.ledger.retire(|rule| rule != name);
                    let account = put_back(&undone, &mut self.ledger);
                    log(format_args!(
                        "rule {name:?}: taken back: its stalls did not fall ({before} before, {after} while it acted); its connections: {account}"
                    ));
                    self.taken_back.insert(form(r), (before, after));
                    *self.reverts.entry(name.clone()).or_default() += 1;
                    let line = format!("{name}\t{}\t{}\t{}\n", before.0, after.0, form(r));
                    let _ = fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&self.taken_back_file)
                        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
                    changed = true;
                }
            }
        }
        if again {
            self.look_again();
        }
        changed
    }

    /// Its status: each rule, what it changed, its trial.
    fn status(&self) -> Vec<PolicyRule> {
        let per_rule = self.ledger.per_rule();
        self.policy
            .rules
            .iter()
            .map(|r| {
                let trial = self.trials.get(&r.name);
                let (state, rates) = match trial {
                    Some(Trial::Before { .. }) => ("counting before it acts", None),
                    Some(Trial::Trying { before, .. }) => ("on trial", Some((*before, None))),
                    Some(Trial::Kept { rates: None }) | None => ("in force", None),
                    Some(Trial::Kept {
                        rates: Some((b, a)),
                    }) => ("kept after its trial", Some((*b, Some(*a)))),
                    Some(Trial::TakenBack { before, after }) => {
                        ("taken back", Some((*before, Some(*after))))
                    }
                };
                PolicyRule {
                    rule: r.name.clone(),
                    action: r.action.describe(),
                    state: state.to_owned(),
                    connections: per_rule.get(r.name.as_str()).copied().unwrap_or(0) as u64,
                    workloads: self.ledger.pids_of(&r.name).len() as u64,
                    changes: self.changes.get(&r.name).copied().unwrap_or(0),
                    reverts: self.reverts.get(&r.name).copied().unwrap_or(0),
                    before: rates.map(|(b, _)| b.0),
                    after: rates.and_then(|(_, a)| a.map(|a| a.0)),
                }
            })
            .collect()
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
        self.workloads.clear();
        let pids = Proc::host().pids();
        let live: HashSet<u32> = pids.iter().copied().collect();
        self.names.retain(|p, _| live.contains(p));
        self.scanned.retain(|p| live.contains(p));
        self.connecting.retain(|p| live.contains(p));
        // This pass's count of connections opened, per network namespace, read at the first
        // selected process there, and whether it moved since the last pass.
        let mut opened: HashMap<u64, (u64, bool)> = HashMap::new();
        for pid in pids {
            if pid == me {
                continue;
            }
            let (w, renamed) = self.names.workload(pid, &self.node, self.passes);
            if renamed {
                // A new process on a reused pid, or an exec: looked at as new.
                self.scanned.remove(&pid);
                self.connecting.remove(&pid);
            }
            let Some(w) = w else {
                continue;
            };
            let Some(d) = self.policy.decide(&w) else {
                continue;
            };
            if !d.rules.iter().any(|&(_, applies)| applies) {
                continue;
            }
            let trials = &self.trials;
            let acts = |rule: &Rule| trials.get(&rule.name).is_some_and(Trial::acts);
            if !d.rules.iter().any(|&(r, _)| acts(r)) {
                self.workloads.insert(pid, w.clone());
                continue;
            }
            if hand.covers(pid, &w.cgroup) {
                self.once(format!(
                    "process {pid} ({}) is left to the hand-made fix in force on it",
                    w.program
                ));
                // Looked at again once the hand-made fix ends.
                self.scanned.remove(&pid);
                continue;
            }
            // A process already looked at is looked at again only when its namespace opened
            // a connection since the last pass, or it had one opening then.
            let fresh = match self.names.net_ns(pid) {
                Some(ns) => match opened.get(&ns) {
                    Some(&(_, fresh)) => fresh,
                    None => opens(pid).is_none_or(|count| {
                        let fresh = self.known.get(&ns) != Some(&count);
                        opened.insert(ns, (count, fresh));
                        fresh
                    }),
                },
                None => true,
            };
            let rolled = u64::from(pid) % ROLL == self.passes % ROLL;
            if !fresh && !rolled && self.scanned.contains(&pid) && !self.connecting.contains(&pid) {
                self.workloads.insert(pid, w);
                continue;
            }
            let pass = existing::fix_chosen(
                &[pid],
                |_, l, r| takes(&d, l, r).filter(|r| acts(r)).map(|rule| rule.action),
                &mut self.seen,
                None,
            );
            self.scanned.insert(pid);
            // Once more at the next pass if a connection is coming, or, after a connection
            // opened, if it listens (one accepted while its descriptors were listed).
            if pass.connecting > 0 || (fresh && pass.listening > 0) {
                self.connecting.insert(pid);
            } else {
                self.connecting.remove(&pid);
            }
            let mut recorded = false;
            for mut c in pass.changed {
                if let Some((earlier, _)) = self.orphans.remove(&c.inode()) {
                    c = c.after(&earlier);
                }
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
                recorded = true;
                *self.changes.entry(rule.name.clone()).or_default() += 1;
            }
            // On disk before the next process is looked at (the pass's end may be far on a
            // busy host); the pass's own write, at its end, reports a failure.
            if recorded {
                if let Err(e) = write_journal(&self.journal, &self.ledger) {
                    self.once(format!("{e:#}"));
                }
            }
            for n in pass.notes.into_iter().chain(pass.blocked) {
                self.once(n);
            }
            self.workloads.insert(pid, w);
        }
        // What this pass counted is known: the next looks for what is new.
        self.known = opened.into_iter().map(|(ns, (n, _))| (ns, n)).collect();
        self.passes += 1;
        self.ledger.len() != before
    }

    /// Every process is looked at again at the next pass (new rules, a rule that begins to
    /// act, or once a minute): its sockets but those the agent changed.
    fn look_again(&mut self) {
        self.seen = self.ledger.inodes().collect();
        self.known.clear();
        self.scanned.clear();
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
    let text = fs::read(path).unwrap_or_default();
    fs::create_dir_all(state).with_context(|| format!("creating {}", state.display()))?;
    let journal = journal_in(state);
    // One agent per state directory, for its whole life.
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_in(state))
        .with_context(|| format!("opening {}", lock_in(state).display()))?;
    if !crate::sys::try_lock(&lock)
        .with_context(|| format!("locking {}", lock_in(state).display()))?
    {
        let who = fs::read_to_string(&journal)
            .ok()
            .and_then(|t| Ledger::from_journal(&t).ok())
            .map_or_else(String::new, |(pid, _)| format!(" (pid {pid})"));
        return Err(crate::refused(format!(
            "another policy agent{who} keeps {}: one agent per state directory",
            state.display()
        )));
    }
    clean_after_another(&journal)?;
    log(format_args!(
        "policy {}: {} rule(s) in force; the agent looks every {} ms (journal {})",
        path.display(),
        policy.rules.len(),
        PASS.as_millis(),
        journal.display()
    ));
    let taken_back_file = taken_back_in(state);
    let mut agent = Agent {
        policy: Policy::default(),
        node: super::policy::node(),
        ledger: Ledger::default(),
        journal: journal.clone(),
        seen: BTreeSet::new(),
        said: BTreeSet::new(),
        trials: BTreeMap::new(),
        workloads: HashMap::new(),
        watch: None,
        watch_retry: None,
        taken_back: read_taken_back(&taken_back_file),
        taken_back_file,
        changes: BTreeMap::new(),
        reverts: BTreeMap::new(),
        names: Names::default(),
        known: HashMap::new(),
        scanned: HashSet::new(),
        connecting: HashSet::new(),
        passes: 0,
        orphans: HashMap::new(),
    };
    agent.take(policy);
    // Written at once: a second agent refuses from the start.
    write_journal(&journal, &agent.ledger)?;
    let status_file = status_in(state);
    let kept = keep(&mut agent, path, text, &journal, &status_file, duration);
    // Whatever ended it (a signal, its duration, a journal it could not write): undone.
    let all = agent.ledger.retire(|_| false);
    let account = put_back(&all, &mut agent.ledger);
    if agent.ledger.is_empty() {
        let _ = fs::remove_file(&journal);
    } else {
        // What could not be put back is left for the next agent.
        let _ = write_journal(&journal, &agent.ledger);
    }
    let _ = fs::remove_file(&status_file);
    log(format_args!(
        "agent stopped: {} changed connection(s): {account}",
        all.len()
    ));
    kept
}

/// How many passes between two looks at every socket of the selected workloads again (a
/// minute): the sockets looked at are forgotten, but those changed, so that the set stays
/// the size of what is open (and a workload named again since is judged again).
const FORGET_SEEN: u64 = 240;

/// The agent's passes, until a signal, `duration` or an error.
fn keep(
    agent: &mut Agent,
    path: &Path,
    mut text: Vec<u8>,
    journal: &Path,
    status_file: &Path,
    duration: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut passes = 0u64;
    let mut status = Vec::new();
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
                        write_journal(journal, &agent.ledger)?;
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
        let mut changed = agent.try_rules();
        changed |= agent.pass(&HandMade::now());
        passes += 1;
        if passes % 20 == 0 {
            let now = Instant::now();
            for c in agent.ledger.forget_closed(existing::still_held) {
                // Looked at again where another process holds it.
                agent.seen.remove(&c.inode());
                agent.orphans.insert(c.inode(), (c, now));
                changed = true;
            }
            agent
                .orphans
                .retain(|_, (_, at)| now.duration_since(*at) < ORPHANS_KEPT);
        }
        if passes % FORGET_SEEN == 0 {
            agent.look_again();
        }
        if changed {
            write_journal(journal, &agent.ledger)?;
        }
        let now = agent.status();
        if now != status {
            let tmp = status_file.with_extension("json.new");
            let text = serde_json::to_vec_pretty(&now).unwrap_or_default();
            if fs::write(&tmp, text)
                .and_then(|()| fs::rename(&tmp, status_file))
                .is_ok()
            {
                status = now;
            }
        }
        std::thread::sleep(PASS);
    }
    Ok(())
}
