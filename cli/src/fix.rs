//! `nagless fix`: repairs a running program's stalls from outside (the nagless-fix crate).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use nagless_fix::attach::{self, Attached};
use nagless_fix::{existing, observe, plan, target, Action, Ports, Selector};
use nagless_host::Proc;

use crate::parse_duration;

mod agent;
mod in_force;
mod policy;

pub(crate) use agent::{policy_status, STATE_DIR};
pub(crate) use in_force::in_force;
use in_force::{list, remove};

pub const FIX_HELP: &str = "\
WHAT IT DOES
  Sets TCP options on a running program's connections, from outside, with no restart: the
  program may be static, setuid, in a container. The connections open now are reached through
  copies of the program's descriptors (pidfd_getfd, Linux 5.6); every new one by a BPF sock_ops
  program attached to the selection's cgroup (v2), which sets the options as each connection
  is established. It stays while the command runs (--duration, or until Ctrl-C, SIGTERM or
  SIGHUP), then it is undone: the program detaches, and the connections that were open at the
  start get their options back (those made meanwhile keep them), each only where it still has
  the value the fix set and the program did not set it itself meanwhile (a second BPF program
  notes the program's own setsockopt calls). --persist pins the program in bpffs instead, to
  stay until `nagless fix --remove`. A fix whose target another fix in force covers is refused,
  naming that fix: the first to end would undo the other's options.

  --nodelay          the sender's stall: TCP_NODELAY (what `nagless watch` or `doctor` names as
                     \"sends each request as two or more writes\"). Costs packets: each small write
                     leaves alone; `nagless run` or the library coalesce them instead.
  --ack-delay-max D  the receiver's side, for a peer you cannot change: delayed ACKs of this
                     process wait at most D (more than one kernel tick: 4 ms at HZ=250). New
                     connections: Linux 5.10; existing ones: TCP_DELACK_MAX_US, Linux 6.15.
  (neither)          it watches the target for --observe (5 s) first and chooses from the
                     stalls it sees: its own writes held (--nodelay), local peers' writes held
                     by its ACKs (--ack-delay-max of two ticks); nothing seen is an error.

SELECTION
  --pid PID          the process and its children: their cgroup when it holds nothing else,
                     otherwise only their own connections (new ones as they are made, wherever
                     they are charged: a listener made in another cgroup included)
  --cgroup PATH      a cgroup v2 (absolute, or under the cgroup2 mount) and every cgroup below
  --unit NAME        a systemd unit's cgroup (nginx or nginx.service)
  --container ID     a container's cgroup (Docker, containerd, CRI-O, Podman; 12+ hex digits)
  --port P           only connections with this local or remote port (repeat: up to 16)
  --all              mean everything: --pid 1 or the root cgroup (every process of the host),
                     or with --remove every pinned fix
  --dry-run          show the processes, cgroup and connections the fix would change; change
                     nothing
  --policy FILE      a fleet's rules, declared once (TOML; docs/fix.md): each selects by
                     program, unit, container, k8s namespace, pod and container, or cgroup,
                     by port and peer range, and sets nodelay and/or ack_delay_max, optionally
                     on a stable canary share. A bad file is refused with its line. With
                     --dry-run: what it would select here now. Without: the node agent, which
                     keeps the rules true until stopped: a connection a rule takes gets its
                     options within a pass (250 ms) of being established, any other it missed
                     within 5 s; an edited file is read again (a bad edit leaves the rules in
                     force); a rule removed, edited or below an edit is undone, and everything
                     when the agent stops. A rule with revert_after counts its connections'
                     stalls for half of it before it acts, then is taken back unless they fall
                     by half while it acts. A hand-made fix wins: the agent leaves the
                     processes one covers alone, and one refuses processes an agent on the
                     default --state changed
  --state DIR        with --policy: the agent's journal and status (default /run/nagless):
                     one agent per directory; the next agent undoes what a killed one left.
                     With --list: the agent whose rules to show beside the fixes

EXAMPLES
  nagless fix --pid 4242 --nodelay                # until Ctrl-C
  nagless fix --unit api --port 8080 --nodelay --persist
  nagless fix --container 0123456789ab --ack-delay-max 8ms --duration 10m
  nagless fix --pid 4242 --nodelay --dry-run      # what it would change
  nagless fix --list;  nagless fix --remove --unit api;  nagless fix --remove --all
  nagless fix --policy /etc/nagless/policy.toml --dry-run   # a fleet's rules, here now
  nagless fix --policy /etc/nagless/policy.toml             # the node agent

NEEDS
  Root (or CAP_BPF, CAP_NET_ADMIN and CAP_SYS_PTRACE), cgroup v2; Linux 5.7 (BPF links),
  6.1 for --nodelay and 5.10 for --ack-delay-max on new connections (checked first).
  --policy: root, or CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (other processes' sockets),
  CAP_SYS_ADMIN (hand-made fixes' links), CAP_BPF and CAP_PERFMON (rules on trial); 5.6.

EXIT STATUS
  0 done (and undone); 2 bad arguments, or nothing to select (no such process, cgroup, unit
  or container; a kernel thread; every process of the host without --all; no stall seen);
  1 it could not act on what it selected (not root, no BPF, an old kernel, another user's
  process, another fix in force: the message names what and why). Nothing is left
  half-attached when it fails, and a fix that changed nothing it could reach never says it
  succeeded.";

#[derive(clap::Args)]
pub struct FixArgs {
    /// The process to fix, and its children.
    #[arg(short, long, group = "sel")]
    pid: Option<u32>,
    /// A cgroup v2 to fix (and every cgroup below it).
    #[arg(long, group = "sel")]
    cgroup: Option<PathBuf>,
    /// A systemd unit to fix.
    #[arg(long, group = "sel")]
    unit: Option<String>,
    /// A container to fix, by id (12 or more hex digits).
    #[arg(long, group = "sel")]
    container: Option<String>,
    /// Only connections with this local or remote port (repeat for several).
    #[arg(long)]
    port: Vec<u16>,
    /// Set TCP_NODELAY (the sender's stall).
    #[arg(long)]
    nodelay: bool,
    /// Bound the delayed ACK to this (the receiver's side), e.g. 8ms.
    #[arg(long, value_parser = parse_duration)]
    ack_delay_max: Option<Duration>,
    /// With neither --nodelay nor --ack-delay-max: how long to watch the target first, to
    /// choose the fix from the stalls seen.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    observe: Duration,
    /// How long to keep the fix (0: until Ctrl-C or SIGTERM).
    #[arg(short, long, default_value = "0", value_parser = parse_duration)]
    duration: Duration,
    /// Pin the fix in bpffs so it outlives this command (new connections only; see --list).
    #[arg(long, conflicts_with = "duration")]
    persist: bool,
    /// List every fix in force on this host: running and pinned.
    #[arg(short, long, conflicts_with_all = ["nodelay", "ack_delay_max", "persist", "remove", "dry_run"])]
    list: bool,
    /// Remove the pinned fix of the selection (with --all: every pinned fix).
    #[arg(long, conflicts_with_all = ["nodelay", "ack_delay_max", "persist", "dry_run"])]
    remove: bool,
    /// Mean everything: a selection that covers every process of the host (--pid 1, the
    /// root cgroup), or with --remove every pinned fix.
    #[arg(long)]
    all: bool,
    /// Show what the selection covers (processes, cgroup, connections) and change nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// A fleet's policy file (rules declared once; docs/fix.md): the node agent keeps it true
    /// on this host; with --dry-run, what it would select here now.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["sel", "port", "nodelay", "ack_delay_max", "persist", "list", "remove", "all", "observe"])]
    policy: Option<PathBuf>,
    /// With --policy: the directory of the agent's journal and status (what it changed, for
    /// its undo after a kill; one agent per directory); with --list: the agent's to show.
    #[arg(long, value_name = "DIR", default_value = agent::STATE_DIR)]
    state: PathBuf,
}

/// "1 process", "3 processes".
fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".into()
    } else {
        format!("{n} processes")
    }
}

fn selector(a: &FixArgs) -> Option<Selector> {
    if let Some(p) = a.pid {
        Some(Selector::Pid(p))
    } else if let Some(c) = &a.cgroup {
        Some(Selector::Cgroup(c.clone()))
    } else if let Some(u) = &a.unit {
        Some(Selector::Unit(u.clone()))
    } else {
        a.container.clone().map(Selector::Container)
    }
}

/// Runs `nagless fix`.
pub fn command(a: FixArgs) -> ExitCode {
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<crate::Usage>() => {
            errln!("nagless fix: {e}\nTry 'nagless fix --help'.");
            ExitCode::from(2)
        }
        Err(e) if e.is::<crate::Refused>() => {
            errln!("nagless fix: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            errln!("nagless fix: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: FixArgs) -> anyhow::Result<()> {
    if let Some(path) = &a.policy {
        if !a.dry_run {
            return agent::run(path, &a.state, a.duration);
        }
        let p = policy::read(path)?;
        outln!("{}", policy::dry_run(&p, path).trim_end());
        return Ok(());
    }
    let sel = selector(&a);
    if a.list {
        return list(&a.state);
    }
    if a.remove {
        if sel.is_none() && !a.all {
            return Err(crate::usage(
                "say which pinned fix to remove (--pid, --cgroup, --unit or --container), or --all for every one",
            ));
        }
        return remove(sel.as_ref());
    }
    let sel =
        sel.ok_or_else(|| crate::usage("say what to fix: --pid, --cgroup, --unit or --container"))?;
    let ports = Ports::new(&a.port).map_err(|e| crate::usage(e.to_string()))?;
    let t = target::resolve(&sel).map_err(|e| match e {
        target::TargetError::Io(e) => anyhow!(e),
        e => crate::refused(e.to_string()),
    })?;
    target::check_scope(&sel, &t, a.all).map_err(|e| crate::refused(e.to_string()))?;
    let mut action = Action {
        nodelay: a.nodelay,
        ack_delay_max: a.ack_delay_max,
    };
    if !action.nodelay && action.ack_delay_max.is_none() {
        outln!(
            "nagless fix: watching {} for {:?} to choose the fix (Ctrl-C stops sooner)",
            processes(t.pids.len()),
            a.observe
        );
        crate::sys::catch_interrupts();
        let seen = observe::observe(&t, &ports, a.observe, crate::sys::interrupted)
            .map_err(|e| anyhow!("watching the target to choose the fix: {e}"))?;
        action = seen.action(nagless_fix::tick()).ok_or_else(|| {
            crate::refused(format!(
                "nothing to do: no stall of the target in {:?} of watching; give --nodelay (its writes wait) or --ack-delay-max DUR (its peers' writes wait for its ACKs)",
                a.observe
            ))
        })?;
        outln!(
            "nagless fix: in {:?}, {} stall(s) of its own writes and {} of local peers waiting for its ACKs: {}",
            a.observe,
            seen.own,
            seen.peers,
            action.describe()
        );
    }
    action
        .check(nagless_fix::tick())
        .map_err(|e| crate::usage(e.to_string()))?;
    let release = Proc::host().kernel_release().unwrap_or_default();
    let have = nagless_host::text::kernel_version(&release);
    if let Some(have) = have {
        plan::check_kernel(&action, have, t.cgroup.is_some()).map_err(|e| anyhow!(e))?;
    }
    // New connections as they are made, wherever they are charged (a process that shares its
    // cgroup; a listener made in another cgroup): the options set from BPF on the marked
    // ones. Without that (an old kernel), a shared process's new ones are looked for.
    let marks = have.is_none_or(|have| plan::check_kernel(&action, have, true).is_ok());
    if a.dry_run {
        dry_run(&t, &action, &ports, a.pid);
        return Ok(());
    }
    if a.persist && t.cgroup.is_none() {
        return Err(crate::usage(
            "--persist needs a whole cgroup: this process shares its cgroup with others (give --cgroup, --unit or --container)",
        ));
    }
    refuse_overlap(&t)?;
    // The kernel half first: if it cannot attach (or pin), nothing has been changed. For a
    // process that shares its cgroup, only the program that notes its own choices.
    let mut config = plan::Config::new(&action, &ports);
    config.fixer_tgid = std::process::id();
    config.target_pid = if t.cgroup.is_some() {
        0
    } else {
        a.pid.unwrap_or(0)
    };
    let root = target::cgroup2_root().context("cgroup v2")?;
    let mut at = attach::attach(
        &t.home,
        &config,
        t.cgroup.is_some(),
        marks.then_some(root.as_path()),
        &t.pids,
    )?;
    at.set_targeted(&t.pids);
    if let Some(e) = at.root_error() {
        errln!(
            "nagless fix: connections charged to another cgroup than {} are not reached ({e})",
            t.home.display()
        );
    }
    let mut attached = Some(at);
    crate::sys::catch_interrupts();
    let mut seen = BTreeSet::new();
    let first = existing::fix(&t.pids, &action, &ports, &mut seen, attached.as_ref());
    for n in &first.notes {
        errln!("nagless fix: {n}");
    }
    if !first.blocked.is_empty() {
        // Not half done: what was changed is put back and the program detached.
        finish(attached, &first.changed);
        let why: Vec<&str> = first.blocked.iter().map(String::as_str).collect();
        anyhow::bail!("{}", why.join("; "));
    }
    let new = attached
        .as_ref()
        .is_some_and(Attached::sets_new_connections);
    let pinned = match (a.persist, attached.take()) {
        (true, Some(at)) => Some(at.persist()?),
        (_, at) => {
            attached = at;
            None
        }
    };
    let what = action.describe();
    let scope = match &t.cgroup {
        Some(cg) => format!("cgroup {} ({})", cg.display(), processes(t.pids.len())),
        None => format!(
            "process {} and its children ({}; their cgroup holds others, so only theirs)",
            a.pid.unwrap_or(t.pids[0]),
            processes(t.pids.len())
        ),
    };
    outln!(
        "nagless fix: {what} on {scope}: {} existing connection(s) changed{}",
        first.changed.len(),
        if new {
            "; every new one from now on, as it is made"
        } else {
            "; new ones are looked for every 200 ms (this kernel cannot set the options from BPF)"
        }
    );
    if let Some(dir) = pinned {
        outln!(
            "nagless fix: pinned at {} (stays after this command; `nagless fix --remove` undoes it; existing connections keep the options)",
            dir.display()
        );
        return Ok(());
    }
    let mut changed = first.changed;
    let start = Instant::now();
    while !crate::sys::interrupted() && (a.duration.is_zero() || start.elapsed() < a.duration) {
        std::thread::sleep(Duration::from_millis(200));
        if t.cgroup.is_none() {
            // The process's own connections: its children as they come and go, and the
            // connections that escaped the marks (a child's, made before it was known), until
            // it exits.
            let Ok(now) = target::resolve(&sel) else {
                outln!("nagless fix: process {} exited", a.pid.unwrap_or(0));
                break;
            };
            if let Some(at) = attached.as_mut() {
                at.set_targeted(&now.pids);
            }
            changed.extend(
                existing::fix(&now.pids, &action, &ports, &mut seen, attached.as_ref()).changed,
            );
        }
    }
    finish(attached, &changed);
    Ok(())
}

fn finish(attached: Option<Attached>, changed: &[existing::Changed]) {
    let restored = existing::undo(changed, |sock, option| {
        attached.as_ref().is_some_and(|at| at.chose(sock, option))
    });
    let new = match attached.filter(|at| at.sets_new_connections()) {
        Some(at) => {
            let c = at.counters();
            drop(at); // the link's last descriptor: the program detaches
            format!(
                "; the program detached after setting options on {} new connection(s) ({} refused)",
                c.selected, c.refused
            )
        }
        None => String::new(),
    };
    outln!(
        "nagless fix: undone: {restored} of {} changed connection(s) put back (the others had closed, or the program set the option itself){new}",
        changed.len()
    );
}

/// Refuses a fix whose selection another fix in force covers too (the first to end would
/// undo the other's options, or both would undo each other's), naming that fix.
fn refuse_overlap(t: &target::Target) -> anyhow::Result<()> {
    if let Some((agent, ledger)) = agent::running_agent(std::path::Path::new(agent::STATE_DIR)) {
        if let Some(p) = ledger.pids().into_iter().find(|p| t.pids.contains(p)) {
            anyhow::bail!(
                "the policy agent (nagless fix --policy, pid {agent}) has changed connections of process {p}: change the policy instead (a hand-made fix would undo its options, or it this one's)"
            );
        }
    }
    let root = target::cgroup2_root().context("cgroup v2")?;
    for r in attach::running() {
        let Some(dir) = attach::find_cgroup(&root, r.cgroup) else {
            continue;
        };
        let related = dir.starts_with(&t.home) || t.home.starts_with(&dir);
        let theirs = r.config.map_or(0, |c| c.target_pid);
        // A fix of a process covers its tree, which may reach into other cgroups.
        let shared_processes = theirs != 0
            && !target::process_tree(theirs).is_disjoint(&t.pids.iter().copied().collect());
        let covers = shared_processes || (related && (r.whole || t.cgroup.is_some()));
        if !covers {
            continue;
        }
        let who = match r.config.map(|c| c.fixer_tgid).filter(|&p| p != 0) {
            Some(p) if Proc::host().exists(p) => {
                format!("nagless fix (pid {p})")
            }
            _ => "a pinned fix (`nagless fix --list`)".to_string(),
        };
        anyhow::bail!(
            "{who} is in force on {} already: end it first (its end would undo this one's options, or this one's its)",
            dir.display()
        );
    }
    Ok(())
}

/// `--dry-run`: what the fix would cover, changing nothing.
fn dry_run(t: &target::Target, action: &Action, ports: &Ports, pid: Option<u32>) {
    let scope = match &t.cgroup {
        Some(cg) => format!(
            "cgroup {} and every cgroup below it: the connections open now, and every new one",
            cg.display()
        ),
        None => format!(
            "process {} and its children (their cgroup {} holds others): their connections",
            pid.unwrap_or(0),
            t.home.display()
        ),
    };
    outln!(
        "nagless fix --dry-run: would set {} on {scope}; {}",
        action.describe(),
        processes(t.pids.len())
    );
    for &p in &t.pids {
        let name = Proc::host().comm(p).unwrap_or_default();
        let line = match existing::connections(p) {
            Ok(c) => {
                let c: Vec<_> = c
                    .into_iter()
                    .filter(|&(l, r)| ports.selects(l, r))
                    .map(|(l, r)| format!("{l}->{r}"))
                    .collect();
                format!("{} connection(s) to change now {}", c.len(), c.join(" "))
            }
            Err(existing::Reach::Gone) => "exited".into(),
            Err(existing::Reach::Blocked(why)) => why,
        };
        outln!("  {p} {}: {}", name.trim(), line.trim_end());
    }
}
