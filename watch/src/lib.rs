//! # nagless-watch
//!
//! Finds processes whose TCP connections stall on Nagle and delayed ACK, live, on a running
//! host: no capture, no restart. It reads TCP sockets' `tcp_info` through netlink `sock_diag`
//! (`diag`): a thread lists every established socket every scan interval (100 ms), and the
//! sockets with data in flight lately are looked up one by one every interval (2 ms), so the
//! cost follows the busy sockets. It follows each socket's held writes (`detect`,
//! judged by [`nagless_stall_rule`], the rule `nagless doctor` uses), and adds the stalls up per
//! process and port, attributing sockets to processes through /proc ([`procs`]). It lists
//! every network namespace it can enter (`netns`: containers, pods) and names the container
//! of each row; [`metrics`] exposes the board to Prometheus. Where BPF loads, `ebpf` gets
//! the same stalls as events from the kernel instead, at a cost that follows held writes
//! rather than sockets, in every namespace at once; [`backend`] picks one.
//!
//! Its rooms: `board` holds the groups, their tallies and rows, which both backends feed;
//! `sampling` is the sock_diag sampler, `ebpf` the kernel's events, [`backend`] the one
//! the command asks (what runs, what it cost, what it cannot see); `accept` judges the
//! listeners' accept queues both backends look at (connects a slow acceptor made wait).
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod accept;
pub mod backend;
mod board;
mod detect;
mod diag;
mod ebpf;
pub mod kube;
mod lister;
pub mod metrics;
mod netns;
pub mod own_process;
pub mod peer;
pub mod procs;
mod role;
mod sampling;
pub mod serve;
mod turns;
pub mod waits;
pub mod web_config;

pub use accept::AcceptQueue;
pub use board::{GroupKey, Row, RowKind};
pub(crate) use sampling::Watcher;

/// Which sockets to watch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter {
    /// Only sockets with this local or remote port.
    pub port: Option<u16>,
    /// Only sockets of this process.
    pub pid: Option<u32>,
}

impl Filter {
    /// Whether it keeps a socket of process `pid` (`None`: not known) with local and remote
    /// ports `ports`.
    pub(crate) fn keeps(&self, pid: Option<u32>, (local, remote): (u16, u16)) -> bool {
        self.port.is_none_or(|p| p == local || p == remote)
            && self.pid.is_none_or(|p| pid == Some(p))
    }
}

/// What one sample cost and saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleStats {
    /// TCP sockets in use on the host, the kernel's count summed over the namespaces watched
    /// (`/proc/net/sockstat`'s `TCP: inuse`: every state but TIME_WAIT, listeners included),
    /// under both backends (when `full`).
    pub sockets: usize,
    /// Sockets that passed the filter.
    pub watched: usize,
    /// Stalls that ended in this sample.
    pub stalls: usize,
    /// It was a full listing of every established socket (else: lookups of the busy ones);
    /// eBPF: the sockets were counted (once a second).
    pub full: bool,
    /// Sockets busy now (data in flight in the last two seconds): looked up every interval.
    pub busy: usize,
}

/// One stall as it ended, for exporters that need each one (a histogram of durations): see
/// [`Source::keep_stalls`](backend::Source::keep_stalls).
#[derive(Debug, Clone)]
pub struct StallEvent {
    /// The group of the socket that stalled.
    pub key: GroupKey,
    /// Its owner's command name (`/proc/PID/comm`), if known.
    pub comm: Option<String>,
    /// Its owner's container id, if any.
    pub container: Option<String>,
    /// Its owner's program as a metric's label names it (`procs::service_name`), if known.
    pub service: Option<String>,
    /// The systemd unit its owner's cgroup names ([`procs::unit`]), outside containers.
    pub unit: Option<String>,
    /// Its owner's pod, on a Kubernetes node ([`kube`]).
    pub pod: Option<kube::Pod>,
    /// The stalled socket's local address and port (the writer's end).
    pub local: std::net::SocketAddr,
    /// Its peer's address and port.
    pub remote: std::net::SocketAddr,
    /// When the hold ended (the wall clock; `stall.at_us` on the watch's clock).
    pub at: std::time::SystemTime,
    /// The stall.
    pub stall: detect::Stall,
}

/// The wall-clock time `ago` before now, read now: a clock stepped (NTP, by hand) during a
/// long watch shifts only what happens after the step.
pub(crate) fn wall_clock_ago(ago: std::time::Duration) -> std::time::SystemTime {
    let now = std::time::SystemTime::now();
    now.checked_sub(ago).unwrap_or(now)
}
