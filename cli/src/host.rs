//! What this host offers the commands, for `nagless version --verbose`: each kernel feature
//! or file a command needs, asked of the kernel the way the command would ask (the system
//! calls are in [`crate::sys`]), and said as yes or no with the reason and what does without.
//!
//! The probes change nothing: a refused `bpf(2)` request, a copy of one of this process's own
//! descriptors, an option on a socket closed at once, files read.

use std::io;
use std::path::{Path, PathBuf};

use nagless_host::text::kernel_version;
use nagless_host::{Cap, Caps, Pid, Proc};

/// One thing a command needs, and whether this host has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// What is asked for: `watch eBPF backend`, `fix sock_ops`, ...
    pub name: &'static str,
    /// `Ok(what was found)`, or `Err(why not, and what the command does instead)`.
    pub verdict: Result<String, String>,
}

/// What the probes read from the host; [`probe_all`] fills it, tests make their own.
#[derive(Debug)]
pub struct Facts {
    /// The kernel's release (`/proc/sys/kernel/osrelease`).
    pub release: Option<String>,
    /// This process's effective capabilities (`CapEff` of `/proc/self/status`).
    pub caps: Option<Caps>,
    /// What `bpf(2)` answered to a request it must refuse.
    pub bpf: io::Error,
    /// Whether `/sys/kernel/btf/vmlinux` exists.
    pub btf: bool,
    /// Where the cgroup v2 hierarchy is mounted.
    pub cgroup2: Option<PathBuf>,
    /// Whether this process could copy its own descriptor through a pidfd.
    pub pidfd_getfd: io::Result<()>,
    /// The `TCP_DELACK_MAX_US` bound a fresh TCP socket kept, if it took the option.
    pub delack_max: Option<u32>,
    /// The dynamic loader the shim needs, and whether it is there.
    pub loader: Option<(&'static str, bool)>,
}

/// The dynamic loader of the C library the shim is built against (glibc), on this
/// architecture.
fn glibc_loader() -> Option<&'static str> {
    if cfg!(target_arch = "x86_64") {
        Some("/lib64/ld-linux-x86-64.so.2")
    } else if cfg!(target_arch = "aarch64") {
        Some("/lib/ld-linux-aarch64.so.1")
    } else {
        None
    }
}

/// Reads the facts from this host.
pub fn facts() -> Facts {
    let proc = Proc::host();
    Facts {
        release: proc.kernel_release(),
        caps: proc.caps(Pid::Own),
        bpf: crate::sys::bpf_probe(),
        btf: Path::new("/sys/kernel/btf/vmlinux").exists(),
        cgroup2: proc.cgroup2_root().ok().flatten(),
        pidfd_getfd: crate::sys::pidfd_getfd_probe(),
        // 40 ms: a bound every kernel that knows the option accepts.
        delack_max: crate::sys::delack_max_accepted(40_000),
        loader: glibc_loader().map(|l| (l, Path::new(l).exists())),
    }
}

/// The verdicts, in the order `nagless version --verbose` prints them.
pub fn probe_all(f: &Facts) -> Vec<Probe> {
    let caps = f.caps.unwrap_or_default();
    let kernel = f.release.as_deref().and_then(kernel_version);
    let at_least = |want: (u32, u32)| kernel.is_none_or(|k| k >= want);
    let sampling = "watch samples sock_diag instead";
    let ebpf = match f.bpf.raw_os_error() {
        Some(libc::ENOSYS) => Err(format!("no bpf(2) on this kernel, or a seccomp filter hides it; {sampling}")),
        _ if !f.btf => Err(format!("no kernel BTF (/sys/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF=y); {sampling}")),
        _ if !at_least((6, 2)) => Err(format!(
            "Linux {} has no BTF tracepoints for its programs (6.2 or later); {sampling}",
            f.release.as_deref().unwrap_or("?")
        )),
        _ if !caps.may_trace() => Err(format!(
            "bpf(2) and BTF are here, but this process lacks root (CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON); {sampling}"
        )),
        _ => Ok("bpf(2), kernel BTF, Linux 6.2 or later, and the privileges to load".into()),
    };
    let sock_ops = match &f.cgroup2 {
        None => Err("no cgroup v2 hierarchy is mounted: fix changes only the connections open now".into()),
        Some(root) if !caps.may_attach_to_cgroups() => Err(format!(
            "cgroup v2 at {}, but attaching needs root (CAP_SYS_ADMIN, or CAP_BPF and CAP_NET_ADMIN)",
            root.display()
        )),
        Some(root) => Ok(format!("cgroup v2 at {}: fix reaches new connections", root.display())),
    };
    let pidfd = match &f.pidfd_getfd {
        Ok(()) if caps.has(Cap::SysPtrace) => Ok("fix reaches the connections open now".into()),
        Ok(()) => Err(
            "the kernel has it, but another process's descriptors need root (CAP_SYS_PTRACE)"
                .into(),
        ),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Err(format!(
            "{e}: needs Linux 5.6; fix changes only new connections"
        )),
        Err(e) => Err(format!("{e}; fix changes only new connections")),
    };
    let delack = match f.delack_max {
        Some(_) => Ok("fix --ack-delay-max bounds the connections open now too".into()),
        None => Err(
            "a TCP socket refuses it (Linux 6.15 or later): fix --ack-delay-max bounds new connections only"
                .into(),
        ),
    };
    let loader = match f.loader {
        Some((path, true)) => Ok(format!("{path}: run starts dynamically linked programs")),
        Some((path, false)) => Err(format!(
            "no {path} (a static-only host or container): no program here can load the shim"
        )),
        None => Err("the shim is not built for this architecture".into()),
    };
    vec![
        Probe {
            name: "watch eBPF backend",
            verdict: ebpf,
        },
        Probe {
            name: "fix sock_ops (cgroup)",
            verdict: sock_ops,
        },
        Probe {
            name: "fix pidfd_getfd",
            verdict: pidfd,
        },
        Probe {
            name: "TCP_DELACK_MAX_US",
            verdict: delack,
        },
        Probe {
            name: "run's dynamic loader",
            verdict: loader,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_there() -> Facts {
        Facts {
            release: Some("6.18.44-fc-v657".into()),
            caps: Some(Caps(0x1ff_ffff_ffff)),
            bpf: io::Error::from_raw_os_error(libc::EINVAL),
            btf: true,
            cgroup2: Some("/sys/fs/cgroup".into()),
            pidfd_getfd: Ok(()),
            delack_max: Some(40_000),
            loader: Some(("/lib64/ld-linux-x86-64.so.2", true)),
        }
    }

    #[test]
    fn a_host_with_everything_offers_everything() {
        let p = probe_all(&all_there());
        assert_eq!(p.len(), 5);
        assert!(p.iter().all(|p| p.verdict.is_ok()), "{p:?}");
    }

    #[test]
    fn each_missing_piece_is_named_with_what_does_without() {
        let verdict = |f: Facts, name: &str| {
            probe_all(&f)
                .into_iter()
                .find(|p| p.name == name)
                .unwrap()
                .verdict
                .unwrap_err()
        };
        let f = Facts {
            bpf: io::Error::from_raw_os_error(libc::ENOSYS),
            ..all_there()
        };
        assert!(verdict(f, "watch eBPF backend").contains("no bpf(2)"));
        let f = Facts {
            btf: false,
            ..all_there()
        };
        assert!(verdict(f, "watch eBPF backend").contains("BTF"));
        let f = Facts {
            release: Some("5.15.0".into()),
            ..all_there()
        };
        assert!(verdict(f, "watch eBPF backend").contains("6.2"));
        // An unprivileged user: CapEff 0.
        let unprivileged = || Facts {
            caps: Some(Caps(0)),
            ..all_there()
        };
        assert!(verdict(unprivileged(), "watch eBPF backend").contains("lacks root"));
        assert!(verdict(unprivileged(), "fix sock_ops (cgroup)").contains("needs root"));
        assert!(verdict(unprivileged(), "fix pidfd_getfd").contains("CAP_SYS_PTRACE"));
        let f = Facts {
            cgroup2: None,
            ..all_there()
        };
        assert!(verdict(f, "fix sock_ops (cgroup)").contains("no cgroup v2"));
        let f = Facts {
            pidfd_getfd: Err(io::Error::from_raw_os_error(libc::ENOSYS)),
            ..all_there()
        };
        assert!(verdict(f, "fix pidfd_getfd").contains("5.6"));
        let f = Facts {
            delack_max: None,
            ..all_there()
        };
        assert!(verdict(f, "TCP_DELACK_MAX_US").contains("6.15"));
        let f = Facts {
            loader: Some(("/lib64/ld-linux-x86-64.so.2", false)),
            ..all_there()
        };
        assert!(verdict(f, "run's dynamic loader").contains("no /lib64"));
    }

    #[test]
    fn this_hosts_probes_agree_with_what_it_has() {
        let f = facts();
        // A process may always copy its own descriptors where the kernel has pidfds (5.6+).
        if f.release.as_deref().and_then(kernel_version) >= Some((5, 6)) {
            assert!(f.pidfd_getfd.is_ok(), "{:?}", f.pidfd_getfd);
        }
        // The option arrived in 6.15; a kernel before it refuses it.
        if f.release.as_deref().and_then(kernel_version) < Some((6, 15)) {
            assert!(f.delack_max.is_none());
        } else {
            assert!(f.delack_max.is_some(), "{:?}", f.delack_max);
        }
        assert_eq!(f.btf, Path::new("/sys/kernel/btf/vmlinux").exists());
    }
}
