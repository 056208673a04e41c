//! `nagless fix`: repairs a running program's stalls from outside (the nagless-fix crate).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use nagless_fix::attach::{self, Attached};
use nagless_fix::{existing, observe, plan, target, Action, Ports, Selector};

use crate::parse_duration;

pub const FIX_HELP: &str = "\
WHAT IT DOES
  Sets TCP options on a running program's connections, from outside, with no restart: the
  program may be static, setuid, in a container. The connections open now are reached through
  copies of the program's descriptors (pidfd_getfd, Linux 5.6); every new one by a BPF sock_ops
  program attached to the selection's cgroup (v2), which sets the options as each connection
  is established. It stays while the command runs (--duration, or until Ctrl-C, SIGTERM or
  SIGHUP), then it is undone: the program detaches, and the connections that were open at the
  start get their options back (those made meanwhile keep them). --persist pins the program in
  bpffs instead, to stay until `nagless fix --remove`.

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
                     otherwise only their own connections (new ones found every 200 ms)
  --cgroup PATH      a cgroup v2 (absolute, or under the cgroup2 mount) and every cgroup below
  --unit NAME        a systemd unit's cgroup (nginx or nginx.service)
  --container ID     a container's cgroup (Docker, containerd, CRI-O, Podman; 12+ hex digits)
  --port P           only connections with this local or remote port (repeat: up to 16)

EXAMPLES
  nagless fix --pid 4242 --nodelay                # until Ctrl-C
  nagless fix --unit api --port 8080 --nodelay --persist
  nagless fix --container 0123456789ab --ack-delay-max 8ms --duration 10m
  nagless fix --list;  nagless fix --remove --unit api;  nagless fix --remove

NEEDS
  Root (or CAP_BPF, CAP_NET_ADMIN and CAP_SYS_PTRACE), cgroup v2; Linux 5.7 (BPF links),
  6.1 for --nodelay and 5.10 for --ack-delay-max on new connections (checked first).

EXIT STATUS
  0 done (and undone); 2 bad arguments, or nothing to select (no such process, cgroup, unit
  or container); 1 the kernel refused (not root, no BPF, an old kernel: the message names
  what is missing). Nothing is left half-attached when it fails.";

#[derive(clap::Args)]
pub struct FixArgs {
    /// The process to fix, and its children.
    #[arg(long, group = "sel")]
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
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    duration: Duration,
    /// Pin the fix in bpffs so it outlives this command (new connections only; see --list).
    #[arg(long, conflicts_with = "duration")]
    persist: bool,
    /// List the pinned fixes.
    #[arg(long, conflicts_with_all = ["nodelay", "ack_delay_max", "persist", "remove"])]
    list: bool,
    /// Remove the pinned fix of the selection (all pinned fixes without one).
    #[arg(long, conflicts_with_all = ["nodelay", "ack_delay_max", "persist"])]
    remove: bool,
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
        Err(e) => {
            errln!("nagless fix: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: FixArgs) -> anyhow::Result<()> {
    let sel = selector(&a);
    if a.list {
        return list();
    }
    if a.remove {
        return remove(sel.as_ref());
    }
    let sel =
        sel.ok_or_else(|| crate::usage("say what to fix: --pid, --cgroup, --unit or --container"))?;
    let ports = Ports::new(&a.port).map_err(|e| crate::usage(e.to_string()))?;
    let t = target::resolve(&sel).map_err(|e| match e {
        target::TargetError::Io(e) => anyhow!(e),
        e => crate::usage(e.to_string()),
    })?;
    let mut action = Action {
        nodelay: a.nodelay,
        ack_delay_max: a.ack_delay_max,
    };
    if !action.nodelay && action.ack_delay_max.is_none() {
        crate::sys::catch_interrupts();
        let seen = observe::observe(&t, &ports, a.observe, crate::sys::interrupted)
            .map_err(|e| anyhow!("watching the target to choose the fix: {e}"))?;
        action = seen.action(nagless_fix::tick()).ok_or_else(|| {
            crate::usage(format!(
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
    if t.cgroup.is_some() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        if let Some(have) = plan::parse_release(&release) {
            plan::check_kernel(&action, have).map_err(|e| anyhow!(e))?;
        }
    }
    if a.persist && t.cgroup.is_none() {
        return Err(crate::usage(
            "--persist needs a whole cgroup: this process shares its cgroup with others (give --cgroup, --unit or --container)",
        ));
    }
    // The kernel half first: if it cannot attach (or pin), nothing has been changed.
    let mut attached = match &t.cgroup {
        Some(cg) => Some(attach::attach(cg, &plan::Config::new(&action, &ports))?),
        None => None,
    };
    crate::sys::catch_interrupts();
    let mut seen = BTreeSet::new();
    let first = existing::fix(&t.pids, &action, &ports, &mut seen);
    for n in &first.notes {
        errln!("nagless fix: {n}");
    }
    if !first.blocked.is_empty() {
        // Not half done: what was changed is put back and the program detached.
        finish(attached, &first.changed);
        let why: Vec<&str> = first.blocked.iter().map(String::as_str).collect();
        anyhow::bail!("{}", why.join("; "));
    }
    let pinned = match (a.persist, attached.take()) {
        (true, Some(at)) => Some(at.persist()?),
        (_, at) => {
            attached = at;
            None
        }
    };
    let what = action.describe();
    let scope = match &t.cgroup {
        Some(cg) => format!("cgroup {} ({} processes)", cg.display(), t.pids.len()),
        None => format!(
            "process {} and its children ({} processes; their cgroup holds others, so new connections are found every 200 ms)",
            a.pid.unwrap_or(t.pids[0]),
            t.pids.len()
        ),
    };
    outln!(
        "nagless fix: {what} on {scope}: {} existing connection(s) changed{}",
        first.changed.len(),
        if t.cgroup.is_some() {
            "; every new one from now on"
        } else {
            ""
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
        if attached.is_none() {
            // The process's own connections: look again for new ones, until it exits.
            let Ok(now) = target::resolve(&sel) else {
                outln!("nagless fix: process {} exited", a.pid.unwrap_or(0));
                break;
            };
            changed.extend(existing::fix(&now.pids, &action, &ports, &mut seen).changed);
        }
    }
    finish(attached, &changed);
    Ok(())
}

fn finish(attached: Option<Attached>, changed: &[existing::Changed]) {
    let restored = existing::undo(changed);
    let new = match attached {
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
        "nagless fix: undone: {restored} of {} changed connection(s) put back (the others had closed){new}",
        changed.len()
    );
}

fn list() -> anyhow::Result<()> {
    let root = target::cgroup2_root().context("cgroup v2")?;
    let all = attach::pinned(&root);
    if all.is_empty() {
        outln!("no pinned fix");
    }
    for p in all {
        let (what, ports) = p
            .config
            .map(|c| c.action())
            .map(|(a, p)| (a.describe(), p))
            .unwrap_or_default();
        let ports = if ports.as_slice().is_empty() {
            "every port".to_string()
        } else {
            format!("ports {:?}", ports.as_slice())
        };
        outln!(
            "{}: {} on {} ({ports}): {} new connection(s) selected",
            p.dir.display(),
            what,
            p.cgroup
                .map_or("a cgroup that is gone".into(), |c| c.display().to_string()),
            p.counters.selected
        );
    }
    Ok(())
}

fn remove(sel: Option<&Selector>) -> anyhow::Result<()> {
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
        return Err(crate::usage("no pinned fix to remove"));
    }
    Ok(())
}
