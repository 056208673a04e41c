//! The agent's files under its state directory (`--state`): its journal of what it changed,
//! its status, the lock it holds for its life, and the rules taken back; what a stopped or
//! killed agent left is put back from them.

use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::Context;
use nagless_fix::existing::{self, Changed};
use nagless_fix::ledger::Ledger;
use nagless_fix::policy::Rule;
use nagless_fix::trial::Rate;
use nagless_watch::metrics::PolicyRule;

use super::log;

/// Where an agent keeps its journal unless told (`--state`).
pub(crate) const STATE_DIR: &str = "/run/nagless";

/// The journal's file under the state directory.
pub(crate) fn journal_in(state: &Path) -> PathBuf {
    state.join("fix-policy.journal")
}

/// The agent's status beside its journal: its rules, what each changed, its trial (JSON;
/// what `nagless watch` publishes and `nagless fix --list` shows).
pub(crate) fn status_in(state: &Path) -> PathBuf {
    state.join("fix-policy.status.json")
}

/// The rules of the agent that runs with the state directory `state`, as its last status
/// says; none when no agent runs.
pub(crate) fn policy_status(state: &Path) -> Vec<PolicyRule> {
    if running_agent(state).is_none() {
        return Vec::new();
    }
    fs::read(status_in(state))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The lock an agent holds on its state directory for its life (`flock`: released however
/// it ends, a kill included).
pub(super) fn lock_in(state: &Path) -> PathBuf {
    state.join("fix-policy.lock")
}

/// The journal of an agent that still runs, if one does: its pid and ledger.
pub(crate) fn running_agent(state: &Path) -> Option<(u32, Ledger)> {
    let lock = fs::File::open(lock_in(state)).ok()?;
    // Free (taken here, and released as `lock` closes): no agent holds it.
    if crate::sys::try_lock(&lock).unwrap_or(true) {
        return None;
    }
    let text = fs::read_to_string(journal_in(state)).ok()?;
    Ledger::from_journal(&text).ok()
}

/// Before this agent begins: what a stopped or killed agent left changed is put back, or,
/// if that agent still runs, this one refuses (one agent per host and state directory).
pub(super) fn clean_after_another(journal: &Path) -> anyhow::Result<()> {
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
    let left = ledger.retire(|_| false);
    let account = put_back(&left, &mut ledger);
    log(format_args!(
        "a stopped agent (pid {pid}) left {} connection(s) changed: {account}",
        left.len()
    ));
    if !ledger.is_empty() {
        write_journal(journal, &ledger)?;
        return Err(crate::refused(format!(
            "{} connection(s) a stopped agent changed cannot be put back; {} keeps them (give the agent CAP_SYS_PTRACE over their processes, or remove it once they have ended)",
            ledger.len(),
            journal.display()
        )));
    }
    fs::remove_file(journal).with_context(|| format!("removing {}", journal.display()))
}

/// The rule the sockets an undo could not reach are kept under (the journal lists them; the
/// agent's stop, and the next agent, try again).
pub(super) const UNREACHED: &str = "(not put back yet)";

/// Puts `changed` back; what could not be reached goes back into `ledger`. The log's account.
pub(super) fn put_back(changed: &[Changed], ledger: &mut Ledger) -> String {
    let done = existing::undo_all(changed, |_, _| false);
    let mut t = format!("{} of {} put back", done.restored, changed.len());
    if let Some((_, why)) = done.unreached.first() {
        t += &format!(
            ", {} could not be reached ({why}) and stay in the journal",
            done.unreached.len()
        );
    }
    for (c, _) in done.unreached {
        ledger.record(UNREACHED, c);
    }
    t + " (the others had closed, or their programs set the option since)"
}

/// Writes the journal whole (a crash mid-write leaves the previous one).
pub(super) fn write_journal(journal: &Path, ledger: &Ledger) -> anyhow::Result<()> {
    let tmp = journal.with_extension("journal.new");
    fs::write(&tmp, ledger.to_journal(std::process::id()))
        .and_then(|()| fs::rename(&tmp, journal))
        .with_context(|| format!("writing the journal {}", journal.display()))
}

/// The file of the rules taken back, beside the journal: one per line, its name, rates and
/// form (a rule edited since is tried again).
pub(super) fn taken_back_in(state: &Path) -> PathBuf {
    state.join("fix-policy.taken-back")
}

/// A rule's form, whatever its line: what a rule is known by across edits of the file (kept,
/// or taken back).
pub(super) fn form(r: &Rule) -> String {
    let mut r = r.clone();
    r.line = 0;
    format!("{r:?}")
}

/// The rules taken back: form -> (before, after).
pub(super) fn read_taken_back(file: &Path) -> HashMap<String, (Rate, Rate)> {
    let text = fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, '\t');
            let (_name, b, a, form) = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some((
                form.to_owned(),
                (Rate(b.parse().ok()?), Rate(a.parse().ok()?)),
            ))
        })
        .collect()
}
