//! Which backend finds the stalls: the kernel's events (`ebpf`) where BPF loads, else
//! sampling every socket's `tcp_info` (`sampling`). Both feed the same `board` and give the
//! same rows; each says for itself, through [`Source`], how it runs, what the watch cost and
//! what it cannot see, so the command asks rather than telling them apart.

use std::io;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use crate::ebpf::{Counters, EbpfWatcher, Unavailable};
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

/// What the command counted of a watch so far, for a backend to put in words
/// ([`Source::status`], [`Source::cost`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    /// How often it samples (sampling) or drains the kernel's reports (eBPF).
    pub interval: Duration,
    /// Samples taken.
    pub samples: u64,
    /// Of those, full ones ([`SampleStats::full`]).
    pub full_samples: u64,
    /// Most sockets a full sample found.
    pub sockets_max: usize,
    /// Samples that started late (the one before overran the interval).
    pub late: u64,
    /// Time spent in the samples.
    pub sampling: Duration,
    /// How long it has watched, s.
    pub elapsed_s: f64,
    /// The watcher's CPU use, % of one core (NaN if unknown).
    pub cpu_percent: f64,
}

impl Run {
    /// The mean time a sample took, ms.
    pub fn sample_ms_mean(&self) -> f64 {
        self.sampling.as_secs_f64() * 1000.0 / self.samples.max(1) as f64
    }
}

/// What the kernel programs did and cost (eBPF), for the JSON summary.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct KernelReport {
    /// The programs' counters.
    pub counters: Counters,
    /// Times the programs ran, if the kernel's BPF run-time statistics are on.
    pub(crate) program_runs: Option<u64>,
    /// Time the kernel spent in them, ms (same).
    pub(crate) program_ms: Option<f64>,
    /// The walks of the sockets' waits (`None`: the kernel refused the iterator).
    pub(crate) waits: Option<WalksReport>,
}

/// The eBPF backend's walks of the sockets' waits, for the JSON summary.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct WalksReport {
    /// Walks made.
    pub walks: u64,
    /// The watcher's time in them, ms (in the kernel mostly).
    pub ms: f64,
    /// The sockets they read.
    pub sockets: u64,
}

/// A backend: where the stalls come from, and what it says of itself.
pub trait Source {
    /// `ebpf` or `sampling`.
    fn name(&self) -> &'static str;

    /// Samples every busy socket (sampling) or drains the kernel's reports (eBPF).
    fn sample(&mut self) -> io::Result<SampleStats>;

    /// The rows of the window since the last call (stalling groups first); starts a new one.
    fn take_window(&mut self) -> Vec<Row>;

    /// The rows of the whole watch, stalling groups first.
    fn totals(&self) -> Vec<Row>;

    /// Keeps every stall from now on, for [`take_stalls`](Self::take_stalls) (which must then
    /// be called often: they pile up until it is).
    fn keep_stalls(&mut self);

    /// The stalls that ended since the last call (none unless [`keep_stalls`](Self::keep_stalls)).
    fn take_stalls(&mut self) -> Vec<StallEvent>;

    /// The network namespaces: how many are listed, how many could not be entered and why.
    fn namespaces(&self) -> (usize, usize, Option<io::ErrorKind>);

    /// What a namespace not entered hides from this backend.
    fn not_entered_means(&self) -> &'static str;

    /// Processes whose sockets could not be attributed (sampling without root; 0 for eBPF,
    /// which sees the writer itself).
    fn denied_processes(&self) -> usize {
        0
    }

    /// How often to list every established socket (sampling; no effect on eBPF, which is
    /// told of every hold).
    fn set_scan_interval(&mut self, _every: Duration) {}

    /// The interval to sample at, `asked` for.
    fn interval(&self, asked: Duration) -> Duration {
        asked
    }

    /// Whether, after sample `s`, nothing is to be looked at before the next listing (so the
    /// command may wait for it, [`wait_idle`](Source::wait_idle), rather than an interval).
    fn idle(&self, _s: &SampleStats) -> bool {
        false
    }

    /// Idle: waits at most `max` for something to look at (sampling: the next listing, taken
    /// as soon as the listing thread has it, so a short connection it found busy is looked up
    /// while it lives).
    fn wait_idle(&mut self, max: Duration) {
        std::thread::sleep(max);
    }

    /// What the watch has seen so far, for the live table's title.
    fn status(&self, run: &Run) -> String;

    /// What the watch cost, for the summary.
    fn cost(&self, run: &Run) -> String;

    /// What the kernel programs did and cost (eBPF only).
    fn kernel(&self) -> Option<KernelReport> {
        None
    }

    /// TCP sockets that came and went between two listings, data sent, never looked at:
    /// stalls in them are not counted (sampling, where the kernel tells of freed sockets:
    /// `None` elsewhere).
    fn sockets_unseen(&self) -> Option<u64> {
        None
    }
}

/// A running backend: a [`Source`], and what it cannot see ([`caveats`](Self::caveats)).
pub struct Backend(Box<dyn Source>);

impl Deref for Backend {
    type Target = dyn Source;

    fn deref(&self) -> &(dyn Source + 'static) {
        &*self.0
    }
}

impl DerefMut for Backend {
    fn deref_mut(&mut self) -> &mut (dyn Source + 'static) {
        &mut *self.0
    }
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
                .map(|w| (Backend(Box::new(w)), why))
                .map_err(OpenError::Sampling)
        };
        match choice {
            Choice::Sampling => sampling("backend sampling (asked for)".into()),
            Choice::Ebpf => Ok((
                Backend(Box::new(EbpfWatcher::new(filter)?)),
                "backend ebpf (asked for)".into(),
            )),
            Choice::Auto => match EbpfWatcher::new(filter) {
                Ok(w) => Ok((
                    Backend(Box::new(w)),
                    "backend ebpf: BPF programs on the send path (sock:sock_send_length) and the ACK path (tcp:tcp_probe, net:net_dev_queue)"
                        .into(),
                )),
                Err(e) => sampling(format!(
                    "backend sampling, because eBPF is unavailable: {e}"
                )),
            },
        }
    }

    /// What this watch cannot see, a sentence each: sockets not attributed (not root),
    /// network namespaces not entered.
    pub fn caveats(&self) -> Vec<String> {
        let mut v = Vec::new();
        if crate::procs::euid() != Some(0) && self.denied_processes() > 0 {
            v.push(format!(
                "not root: {} processes' sockets cannot be attributed (shown as `uid N`), and other network namespaces (containers) cannot be entered; run as root, or with CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_SYS_ADMIN, to see them",
                self.denied_processes()
            ));
        }
        let (_, not_entered, why) = self.namespaces();
        if not_entered > 0 {
            v.push(format!(
                "{not_entered} network namespaces (containers) not entered ({}): {}; run as root, or with CAP_SYS_ADMIN and CAP_SYS_PTRACE",
                why.map_or_else(|| "unknown".to_owned(), |k| io::Error::from(k).to_string()),
                self.not_entered_means()
            ));
        }
        v
    }
}
