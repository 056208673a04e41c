//! The host's processes named as `nagless watch` names them, kept between passes, and the
//! count of connections a network namespace opened.

use std::collections::HashMap;
use std::fs;

use nagless_fix::policy::Workload;
use nagless_host::Proc;

/// The TCP connections the network namespace of process `pid` has opened, actively and
/// passively (`/proc/PID/net/snmp`: a few lines, where the connection tables are thousands):
/// a count that moves with every new connection.
pub(super) fn opens(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/net/snmp")).ok()?;
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next()?, tcp.next()?);
    let mut n = 0;
    for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
        if name == "ActiveOpens" || name == "PassiveOpens" {
            n += value.parse::<u64>().ok()?;
        }
    }
    Some(n)
}

/// The workloads of the host's processes, as `nagless watch` names them, and their network
/// namespaces, kept between passes: named again when a pid's start time or command name
/// changes (a new process, an exec), and every [`NAMES_FRESH`] passes.
#[derive(Default)]
pub(super) struct Names(HashMap<u32, Named>);

/// A process as named at a pass: its start key, the pass, its workload and network
/// namespace.
pub(super) type Named = (String, u64, Option<Workload>, Option<u64>);

/// Passes a process's names are kept before they are read again (10 s).
pub(super) const NAMES_FRESH: u64 = 40;

impl Names {
    pub(super) fn retain(&mut self, keep: impl Fn(&u32, &mut Named) -> bool) {
        self.0.retain(|p, v| keep(p, v));
    }

    /// Process `pid`'s network namespace, as named with its workload.
    pub(super) fn net_ns(&self, pid: u32) -> Option<u64> {
        self.0.get(&pid).and_then(|n| n.3)
    }

    /// Process `pid`'s workload at pass `pass` (`None` if it is gone or a kernel thread),
    /// and whether it is another process, or another program, than the pid's last.
    pub(super) fn workload(&mut self, pid: u32, node: &str, pass: u64) -> (Option<Workload>, bool) {
        // Its start time and command name: a pid reused, or an exec, is named again.
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return (None, false);
        };
        let Some(stat) = nagless_host::text::Stat::parse(&text) else {
            return (None, false);
        };
        let comm = &text[..text.rfind(')').unwrap_or(0)];
        let key = format!("{comm}) {}", stat.field(22).unwrap_or(""));
        let mut renamed = false;
        if let Some((k, at, w, _)) = self.0.get(&pid) {
            if *k == key && pass.saturating_sub(*at) < NAMES_FRESH {
                return (w.clone(), false);
            }
            renamed = *k != key;
        }
        let w = super::super::policy::workload(pid, node);
        let ns = w.as_ref().and_then(|_| Proc::host().net_ns(pid));
        // A pod's container before the kubelet's link names it: named again next pass.
        let unnamed_pod = w.as_ref().is_some_and(|w| {
            w.container.is_some() && w.k8s_pod.is_none() && w.cgroup.contains("kubepods")
        });
        let at = if unnamed_pod {
            pass.saturating_sub(NAMES_FRESH)
        } else {
            pass
        };
        self.0.insert(pid, (key, at, w.clone(), ns));
        (w, renamed)
    }
}
