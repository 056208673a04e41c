//! Capabilities: what this process may do, from its effective set (`CapEff` of
//! `/proc/self/status`), and what each of the tools' kernel features needs.

use crate::{text, Pid, Proc};

/// A Linux capability (its bit in a capability set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// `CAP_NET_ADMIN` (12).
    NetAdmin = 12,
    /// `CAP_SYS_PTRACE` (19).
    SysPtrace = 19,
    /// `CAP_SYS_ADMIN` (21).
    SysAdmin = 21,
    /// `CAP_PERFMON` (38).
    Perfmon = 38,
    /// `CAP_BPF` (39).
    Bpf = 39,
}

/// A set of capabilities (a process's effective ones: [`Proc::caps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caps(pub u64);

impl Caps {
    /// Whether `cap` is in the set.
    pub fn has(self, cap: Cap) -> bool {
        self.0 & (1 << cap as u32) != 0
    }

    /// Whether they allow loading and attaching BPF tracing programs (`nagless watch`'s
    /// eBPF backend): `CAP_SYS_ADMIN`, or `CAP_BPF` and `CAP_PERFMON`.
    pub fn may_trace(self) -> bool {
        self.has(Cap::SysAdmin) || (self.has(Cap::Bpf) && self.has(Cap::Perfmon))
    }

    /// Whether they allow loading cgroup BPF programs and linking them to a cgroup
    /// (`nagless fix`'s sock_ops program): `CAP_SYS_ADMIN`, or `CAP_BPF` and
    /// `CAP_NET_ADMIN`.
    pub fn may_attach_to_cgroups(self) -> bool {
        self.has(Cap::SysAdmin) || (self.has(Cap::Bpf) && self.has(Cap::NetAdmin))
    }
}

impl Proc {
    /// The effective capabilities of process `pid` (`None` if its status cannot be read).
    pub fn caps(&self, pid: impl Into<Pid>) -> Option<Caps> {
        text::cap_eff(self.status(pid).ok()?.as_bytes()).map(Caps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_feature_needs() {
        let set = |caps: &[Cap]| Caps(caps.iter().fold(0, |m, &c| m | 1 << c as u32));
        assert!(Caps(0x1ff_ffff_ffff).may_trace());
        assert!(set(&[Cap::SysAdmin]).may_trace());
        assert!(set(&[Cap::Bpf, Cap::Perfmon]).may_trace());
        assert!(!set(&[Cap::Bpf, Cap::NetAdmin]).may_trace());
        assert!(set(&[Cap::Bpf, Cap::NetAdmin]).may_attach_to_cgroups());
        assert!(!set(&[Cap::Bpf, Cap::Perfmon]).may_attach_to_cgroups());
        assert!(!Caps(0).may_trace() && !Caps(0).may_attach_to_cgroups());
        assert!(set(&[Cap::SysPtrace]).has(Cap::SysPtrace));
        assert_eq!(Caps(1 << 21), set(&[Cap::SysAdmin]));
    }

    #[test]
    fn our_own_are_read() {
        let caps = Proc::host()
            .caps(Pid::Own)
            .expect("/proc/self/status has CapEff");
        // Root has every capability; anyone else, whatever was given.
        if Proc::host().euid(Pid::Own) == Some(0) && caps.has(Cap::SysAdmin) {
            assert!(caps.may_trace());
        }
    }
}
