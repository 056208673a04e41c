//! Which backend finds the stalls: the kernel's events ([`crate::ebpf`]) where BPF loads,
//! else sampling every socket's `tcp_info` ([`crate::sampling`]). Both give the same rows.

use std::io;

use crate::ebpf::{EbpfWatcher, Unavailable};
use crate::{Filter, Row, SampleStats, StallEvent, Watcher};

/// The backend asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Choice {
    /// eBPF where it loads, else sampling.
    #[default]
    Auto,
    /// eBPF only (an error where it cannot load).
    Ebpf,
    /// Sampling only.
    Sampling,
}

/// A running backend.
pub enum Backend {
    /// Events from BPF programs in the kernel.
    Ebpf(Box<EbpfWatcher>),
    /// Sampling every socket through sock_diag.
    Sampling(Box<Watcher>),
}

/// Why no backend could start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `--backend ebpf` and BPF could not load.
    #[error("the eBPF backend cannot start: {0}")]
    Ebpf(#[from] Unavailable),
    /// The sampling backend could not open netlink sock_diag.
    #[error("cannot open netlink sock_diag: {0}")]
    Sampling(io::Error),
}

impl Backend {
    /// Starts the backend `choice` asks for; with it, a sentence saying which one runs and,
    /// for `Auto`, why.
    pub fn open(choice: Choice, filter: Filter) -> Result<(Backend, String), OpenError> {
        let sampling = |why: String| {
            Watcher::new(filter)
                .map(|w| (Backend::Sampling(Box::new(w)), why))
                .map_err(OpenError::Sampling)
        };
        match choice {
            Choice::Sampling => sampling("backend sampling (asked for)".into()),
            Choice::Ebpf => Ok((
                Backend::Ebpf(Box::new(EbpfWatcher::new(filter)?)),
                "backend ebpf (asked for)".into(),
            )),
            Choice::Auto => match EbpfWatcher::new(filter) {
                Ok(w) => Ok((
                    Backend::Ebpf(Box::new(w)),
                    "backend ebpf: BPF programs on the send path (sock:sock_send_length) and the ACK path (tcp:tcp_probe, net:net_dev_queue)"
                        .into(),
                )),
                Err(e) => sampling(format!(
                    "backend sampling, because eBPF is unavailable: {e}"
                )),
            },
        }
    }

    /// `ebpf` or `sampling`.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Ebpf(_) => "ebpf",
            Backend::Sampling(_) => "sampling",
        }
    }

    /// Samples every socket (sampling) or drains the kernel's reports (eBPF).
    pub fn sample(&mut self) -> io::Result<SampleStats> {
        match self {
            Backend::Ebpf(w) => w.sample(),
            Backend::Sampling(w) => w.sample(),
        }
    }

    /// The rows of the window since the last call (stalling groups first); starts a new one.
    pub fn take_window(&mut self) -> Vec<Row> {
        match self {
            Backend::Ebpf(w) => w.take_window(),
            Backend::Sampling(w) => w.take_window(),
        }
    }

    /// The rows of the whole watch, stalling groups first.
    pub fn totals(&self) -> Vec<Row> {
        match self {
            Backend::Ebpf(w) => w.totals(),
            Backend::Sampling(w) => w.totals(),
        }
    }

    /// How often the sampler lists every established socket (no effect on eBPF, which is told
    /// of every hold).
    pub fn set_scan_interval(&mut self, every: std::time::Duration) {
        if let Backend::Sampling(w) = self {
            w.set_scan_interval(every);
        }
    }

    /// Keeps every stall from now on, for [`take_stalls`](Self::take_stalls).
    pub fn keep_stalls(&mut self) {
        match self {
            Backend::Ebpf(w) => w.keep_stalls(),
            Backend::Sampling(w) => w.keep_stalls(),
        }
    }

    /// The stalls that ended since the last call (none unless [`keep_stalls`](Self::keep_stalls)).
    pub fn take_stalls(&mut self) -> Vec<StallEvent> {
        match self {
            Backend::Ebpf(w) => w.take_stalls(),
            Backend::Sampling(w) => w.take_stalls(),
        }
    }

    /// The network namespaces: how many are listed, how many could not be entered and why
    /// (eBPF sees the stalls of every namespace; it lists them only for their listeners).
    pub fn namespaces(&self) -> (usize, usize, Option<io::ErrorKind>) {
        match self {
            Backend::Ebpf(w) => w.namespaces(),
            Backend::Sampling(w) => w.namespaces(),
        }
    }

    /// Processes whose sockets could not be attributed (sampling without root; 0 for eBPF,
    /// which sees the writer itself).
    pub fn denied_processes(&self) -> usize {
        match self {
            Backend::Ebpf(_) => 0,
            Backend::Sampling(w) => w.denied_processes(),
        }
    }
}
