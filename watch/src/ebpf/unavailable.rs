//! Why the eBPF backend could not start ([`Unavailable`]): which capability or kernel feature
//! is missing, told from what the kernel said.

use std::io;

use nagless_host::{BpfError, Caps, Pid, Proc};

/// Why the eBPF backend could not start: which capability or kernel feature is missing.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// No kernel BTF, which CO-RE relocation and BTF tracepoints need.
    #[error("the kernel has no BTF (/sys/kernel/btf/vmlinux: {0}; needs CONFIG_DEBUG_INFO_BTF=y)")]
    NoBtf(io::Error),
    /// Not allowed to load BPF programs.
    #[error("loading BPF tracing programs needs root, or CAP_BPF and CAP_PERFMON ({0})")]
    NoPermission(String),
    /// The kernel refused the object or a program (verifier, missing map type, ...).
    #[error("the kernel refused the BPF programs: {0}")]
    Load(BpfError),
    /// The object lacks a program or a map this module asks for.
    #[error("the kernel refused the BPF programs: the object has no {0}")]
    Missing(String),
    /// A program could not load for, or attach to, its tracepoint (a kernel without it:
    /// sock:sock_send_length came in Linux 6.2), or the verifier refused it there.
    #[error("cannot attach a BTF tracepoint program to {tracepoint} (needs Linux 6.2 or later, with BTF tracepoints): {error}")]
    Attach {
        /// The tracepoint.
        tracepoint: &'static str,
        /// What the kernel said.
        error: BpfError,
    },
}

/// Whether this process may load tracing programs (unknown: try).
pub(super) fn may_load_bpf() -> bool {
    Proc::host().caps(Pid::Own).is_none_or(Caps::may_trace)
}

/// What a failed load, attach or map call means: no permission if the kernel said `EPERM`.
pub(super) fn load_error(e: &(dyn std::error::Error + 'static)) -> Unavailable {
    let e = BpfError::of(e);
    if e.not_permitted() {
        Unavailable::NoPermission(e.to_string())
    } else {
        Unavailable::Load(e)
    }
}
