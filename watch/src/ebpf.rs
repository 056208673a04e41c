//! The event-driven backend: BPF programs in the kernel follow the writes TCP holds back and
//! report each one an ACK released late (watch/bpf/holds.bpf.c says how); this module loads
//! them (with aya: no clang or libbpf needed at run time, the object is built by
//! `scripts/build-bpf` and committed), drains their ring buffer and judges every report with
//! [`nagless_stall_rule::judge`], the rule `nagless doctor` applies to captures. Each report
//! is an [`Event`], read out of the ring buffer through a `#[repr(C)]` mirror of the C
//! `struct event` (ebpf/event.rs, which asserts its layout).
//!
//! The short holds a prompt ACK released (too short to be stalls: the evidence of an
//! ACK-clocked connection) are added up in the kernel per socket, a count and the time held,
//! in the `clocks` map; each refresh this module reads and deletes its entries (one
//! [`Clock`] per socket that had such holds since, through the mirror in ebpf/clock.rs) and
//! adds them to the board, where [`nagless_stall_rule::judge_clock`] judges each group. A
//! hold the kernel reports as long that the rule finds released by a prompt ACK (a path
//! whose round trip is 30 ms or more) is added the same way.
//!
//! Its cost follows held writes, not sockets: the kernel programs run per write and per
//! received segment (a hash lookup that misses unless the socket holds a write, or the
//! sender corked it), and userspace only sees holds long enough to be stalls or a cork's
//! ceiling. The one walk over sockets is the `waits` iterator's ([`WaitsWalk`] in
//! ebpf/walk.rs, with the sockets closed between walks; its records in ebpf/waits.rs): each
//! refresh, what the kernel counted of the busy sockets' time (`tcp_info`'s busy, window-
//! and buffer-limited times, retransmissions, timeouts and backoff), spaced so that it takes
//! at most 1/200 of the watcher's time.
//!
//! What it sees: writes on this host held behind unacknowledged data and released by an ACK
//! (on sockets in every network namespace: the hooks are in TCP itself). The writer's pid,
//! tid, uid and cgroup are those of the task that made the held write; its network namespace,
//! cgroup path and container come from /proc/PID ([`procs`](crate::procs)), and whether it
//! serves the port from the listeners of that namespace ([`netns`](crate::netns)). The
//! connections column counts connections that reported a long hold, not every connection.
//!
//! Rooms: this one is the watcher's one state ([`EbpfWatcher`]: loading, draining, judging,
//! grouping, under 700 lines, kept whole because each part reads the same maps and
//! owners); the records' mirrors are `event`, `clock`, `waits` and `counters`, the waits
//! walk is `walk`, and why the backend could not start is `unavailable`.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

mod clock;
mod counters;
mod event;
mod unavailable;
mod waits;
mod walk;

pub(crate) use clock::{Clock, CLOCK_SIZE};
pub(crate) use counters::Counters;
pub(crate) use event::Event;
pub(crate) use unavailable::Unavailable;
use unavailable::{load_error, may_load_bpf};
pub(crate) use waits::{in_us, SocketWaits, TickRate};
use walk::WaitsWalk;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, ProgramInfo};
use aya::{Btf, Ebpf, EbpfLoader};
use nagless_host::Proc;
use nagless_stall_rule::{
    is_cork_ceiling, release_window_us, CORK_CEILING_US, CORK_EARLY_US, DELAYED_ACK_MIN_US,
};
use netlink_packet_sock_diag::inet::StateFlags;

use crate::backend::{KernelReport, Run, Source};
use crate::board::{Board, GroupKey, Row, Who};
use crate::detect::{Release, Stall};
use crate::diag::SocketRow;
use crate::netns::Namespaces;
use crate::{Filter, SampleStats, StallEvent};

/// The compiled BPF object (built from watch/bpf/holds.bpf.c by `scripts/build-bpf`).
pub(crate) static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/holds.bpf.o");

/// The programs and the tracepoints they attach to (as BTF tracepoints).
const PROGRAMS: [(&str, &str); 4] = [
    ("send_done", "sock_send_length"),
    ("segment_in", "tcp_probe"),
    ("destroyed", "tcp_destroy_sock"),
    ("packet_out", "net_dev_queue"),
];

/// Who writer `pid` is, as `owners` knows it ([`NOBODY`] if not).
fn who_of(owners: &HashMap<u32, (u64, Who)>, pid: u32) -> &Who {
    owners.get(&pid).map_or(&NOBODY, |o| &o.1)
}

/// `CLOCK_MONOTONIC` now, ns: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64
}

/// Who owns a socket whose writer is not known.
static NOBODY: Who = Who {
    cmd: None,
    program: None,
    comm: None,
    cgroup: None,
    container: None,
    service: None,
    pod: None,
};

/// The eBPF watcher: call [`sample`](Source::sample) now and then (every 50 ms or so: the ring
/// buffer holds about 7,700 reports) to drain the kernel's reports.
pub(crate) struct EbpfWatcher {
    // The programs stay attached while this lives.
    bpf: Ebpf,
    ring: RingBuf<MapData>,
    /// Per socket, the short holds a prompt ACK released since the last drain.
    clocks: BpfHashMap<MapData, u64, [u8; CLOCK_SIZE]>,
    /// When the clocks were last drained, and this window began (µs on the watch's clock).
    drained_us: u64,
    window_start_us: u64,
    filter: Filter,
    /// `CLOCK_MONOTONIC` (the kernel's event times) at the start, ns.
    start_mono_ns: u64,
    /// Every network namespace's listeners, by (namespace, port).
    nets: Option<Namespaces>,
    listening: HashSet<(u64, u16)>,
    listening_at: Option<Instant>,
    /// The host's ephemeral ports (see [`crate::role`]).
    ephemeral: crate::role::EphemeralPorts,
    /// When the TCP sockets were last counted, and the namespaces last found.
    counted_at: Option<Instant>,
    namespaces_at: Option<Instant>,
    /// Per writer pid: its network namespace (0 if unknown) and who it is.
    owners: HashMap<u32, (u64, Who)>,
    /// The processes on this host whose ACKs the stalls waited for.
    peers: crate::peer::Peers,
    /// The stalls of this window, and of the whole watch.
    window: Board,
    total: Board,
    /// Stalls since the last [`take_stalls`](Source::take_stalls), when kept.
    stalls: Option<Vec<StallEvent>>,
    /// Keeps the kernel's BPF run-time statistics on while the watch runs.
    _stats: Option<std::os::fd::OwnedFd>,
    events: u64,
    /// The sockets' waits, from the `waits` iterator (`None`: the kernel refused it).
    waits: Option<WaitsWalk>,
    /// The looks at the listeners' accept queues: judged, when last made, and their
    /// owners by socket inode (/proc walked again at most once a second for one unknown).
    accepts: crate::accept::Judge,
    looked_at: Option<Instant>,
    listener_owners: crate::procs::Walked,
}

impl EbpfWatcher {
    /// Loads the programs and attaches them; the error names what is missing.
    pub(crate) fn new(filter: Filter) -> Result<EbpfWatcher, Unavailable> {
        let btf_path = Path::new("/sys/kernel/btf/vmlinux");
        if let Err(e) = std::fs::metadata(btf_path) {
            return Err(Unavailable::NoBtf(e));
        }
        if !may_load_bpf() {
            return Err(Unavailable::NoPermission(
                "this process has neither CAP_SYS_ADMIN nor CAP_BPF with CAP_PERFMON".into(),
            ));
        }
        let btf = Btf::from_sys_fs().map_err(|e| Unavailable::NoBtf(io::Error::other(e)))?;
        let min_hold_ns: u64 = DELAYED_ACK_MIN_US * 1000;
        // At the sender: the latest a write may leave after the ACK that released it.
        let clock_gap_ns: u64 = release_window_us(0, 0).1 * 1000;
        // The shortest cork the kernel's ceiling ends.
        let cork_min_ns: u64 = (CORK_CEILING_US - CORK_EARLY_US) * 1000;
        let mut bpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("min_hold_ns", &min_hold_ns, true)
            .override_global("clock_gap_ns", &clock_gap_ns, true)
            .override_global("cork_min_ns", &cork_min_ns, true)
            // 1 MiB: about 7,700 reports between two drains (every 50 ms: 150,000 a second).
            .map_max_entries("events", 1 << 20)
            .load(OBJECT)
            .map_err(|e| load_error(&e))?;
        for (prog, tracepoint) in PROGRAMS {
            let p: &mut BtfTracePoint = bpf
                .program_mut(prog)
                .ok_or_else(|| Unavailable::Missing(format!("program {prog}")))?
                .try_into()
                .map_err(|e| load_error(&e))?;
            let on_tracepoint = |e: aya::programs::ProgramError| match load_error(&e) {
                Unavailable::Load(error) => Unavailable::Attach { tracepoint, error },
                other => other,
            };
            p.load(tracepoint, &btf).map_err(on_tracepoint)?;
            p.attach().map_err(on_tracepoint)?;
        }
        let ring = bpf
            .take_map("events")
            .ok_or_else(|| Unavailable::Missing("map events".into()))?;
        let ring = RingBuf::try_from(ring).map_err(|e| load_error(&e))?;
        let clocks = bpf
            .take_map("clocks")
            .ok_or_else(|| Unavailable::Missing("map clocks".into()))?;
        let clocks = BpfHashMap::try_from(clocks).map_err(|e| load_error(&e))?;
        let mut waits = WaitsWalk::new(&mut bpf, &btf);
        if let Some(w) = &mut waits {
            w.walk(&mut bpf); // the baselines
            w.closed_as_baselines();
        }
        Ok(EbpfWatcher {
            bpf,
            ring,
            clocks,
            drained_us: 0,
            window_start_us: 0,
            filter,
            start_mono_ns: monotonic_ns(),
            nets: Namespaces::new(true).ok(),
            listening: HashSet::new(),
            listening_at: None,
            ephemeral: crate::role::EphemeralPorts::of_host(),
            counted_at: None,
            namespaces_at: None,
            owners: HashMap::new(),
            peers: crate::peer::Peers::default(),
            window: Board::default(),
            total: Board::default(),
            stalls: None,
            _stats: aya::sys::enable_stats(aya::sys::Stats::RunTime).ok(),
            events: 0,
            waits,
            accepts: crate::accept::Judge::default(),
            looked_at: None,
            listener_owners: crate::procs::Walked::new(
                crate::procs::ProcMap::default(),
                Duration::from_secs(1),
            ),
        })
    }

    /// Whether something listens on `port` in namespace `netns`, from sock_diag dumps of
    /// listeners only in every namespace, refreshed (with the namespaces themselves) at most
    /// once a second when an unknown port shows up.
    fn serves(&mut self, netns: u64, port: u16) -> bool {
        if self.listening.contains(&(netns, port)) {
            return true;
        }
        if self
            .listening_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            self.listening_at = Some(Instant::now());
            if let Some(n) = &mut self.nets {
                n.refresh();
                // Lookups are the sampler's; this backend only dumps listeners.
                drop(n.take_lookups());
                let mut rows: Vec<SocketRow> = Vec::new();
                if n.list(StateFlags::LISTEN, &mut rows).is_ok() {
                    self.listening = rows.iter().map(|r| (r.netns, r.local.port())).collect();
                }
            }
        }
        self.listening.contains(&(netns, port))
    }

    /// The writer's network namespace (0 if unknown); who it is goes to `owners`, read from
    /// /proc/PID while it lives, else the task name the kernel gave.
    fn owner(&mut self, pid: u32, comm: &str) -> u64 {
        if self.owners.len() >= 4096 {
            self.owners.clear(); // pids are reused: a cache, not a record
        }
        self.owners
            .entry(pid)
            .or_insert_with(|| {
                let task = (!comm.is_empty()).then(|| comm.to_owned());
                match crate::procs::process_of(pid) {
                    Some(p) => (
                        Proc::host().net_ns(pid).unwrap_or(0),
                        Who {
                            cmd: Some(p.cmd)
                                .filter(|c| !c.is_empty())
                                .or_else(|| task.as_ref().map(|c| format!("[{c}]"))),
                            program: Some(p.program).filter(|c| !c.is_empty()),
                            comm: Some(p.comm).filter(|c| !c.is_empty()).or(task),
                            cgroup: Some(p.cgroup).filter(|c| !c.is_empty()),
                            container: p.container,
                            service: Some(p.service).filter(|c| !c.is_empty()),
                            pod: p.pod,
                        },
                    ),
                    None => (
                        0,
                        Who {
                            cmd: task.as_ref().map(|c| format!("[{c}]")),
                            comm: task,
                            ..Who::default()
                        },
                    ),
                }
            })
            .0
    }

    /// Whether the watch's filter (`--port`, `--pid`) keeps a socket of process `pid` with
    /// local and remote ports `ports`.
    fn keeps(&self, pid: u32, ports: (u16, u16)) -> bool {
        self.filter.keeps(Some(pid), ports)
    }

    /// Takes one report into the tallies; returns the stall if it was one.
    fn take(&mut self, e: &Event, now_mono_ns: u64) -> Option<Stall> {
        let (lport, rport) = (e.local.1, e.remote.1);
        if !self.keeps(e.pid, (lport, rport)) {
            return None;
        }
        // On the watch's clock: when the kernel saw the release.
        let at_us = e.released_ns.saturating_sub(self.start_mono_ns) / 1000;
        if e.cork {
            // The sender's own hold: the kernel's ceiling on a cork released it.
            let held_us = e.hold_ns / 1000;
            if is_cork_ceiling(held_us) {
                let key = self.group(e.pid, &e.comm, e.uid, (lport, rport));
                let who = who_of(&self.owners, e.pid);
                self.window.add_cork(&key, who, e.cookie, held_us);
                self.total.add_cork(&key, who, e.cookie, held_us);
            }
            return None;
        }
        let release = e.release(at_us)?;
        let key = self.group(e.pid, &e.comm, e.uid, (lport, rport));
        // (Borrowed, not cloned: this runs for every stall on the host.)
        let who = who_of(&self.owners, e.pid);
        let stall = match release {
            Release::Stall(s) => s,
            // A long hold on a long path, released by a prompt ACK: clocked.
            Release::Clocked { hold_us } => {
                let span = (at_us.saturating_sub(hold_us), at_us);
                self.window
                    .add_clock(&key, who, e.cookie, (1, hold_us), span);
                self.total
                    .add_clock(&key, who, e.cookie, (1, hold_us), span);
                return None;
            }
        };
        let acked_by = self
            .peers
            .receiver(e.pid, key.netns, e.local_addr(), e.remote_addr(), None)
            .map(|r| r.pid);
        let who = who_of(&self.owners, e.pid);
        self.window.add_stall(&key, who, e.cookie, &stall, acked_by);
        self.total.add_stall(&key, who, e.cookie, &stall, acked_by);
        if let Some(v) = &mut self.stalls {
            v.push(StallEvent {
                key,
                comm: who.comm.clone(),
                container: who.container.clone(),
                service: who.service.clone(),
                unit: who.unit(),
                pod: who.pod.clone(),
                local: e.local_addr(),
                remote: e.remote_addr(),
                at: crate::wall_clock_ago(Duration::from_nanos(
                    now_mono_ns.saturating_sub(e.released_ns),
                )),
                stall,
            });
        }
        Some(stall)
    }

    /// The group of a socket written by `pid` (task `comm`, user `uid`) with local and remote
    /// ports `ports`.
    fn group(&mut self, pid: u32, comm: &str, uid: u32, (lport, rport): (u16, u16)) -> GroupKey {
        let netns = self.owner(pid, comm);
        let listening = self.serves(netns, lport);
        let (serves, port) = crate::role::role(listening, lport, rport, &self.ephemeral);
        GroupKey {
            pid: Some(pid),
            uid,
            port,
            serves,
            netns,
        }
    }

    /// The watch's clock now, µs.
    fn now_us(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_mono_ns) / 1000
    }

    /// Reads and deletes every socket's short ACK-released holds since the last drain, and
    /// adds them to the board (as held between the last drain and now). A hold the kernel adds
    /// between the read and the delete is lost (the window is a few microseconds).
    fn drain_clocks(&mut self) {
        let now_us = self.now_us();
        let span = (self.drained_us, now_us);
        self.drained_us = now_us;
        let keys: Vec<u64> = self.clocks.keys().filter_map(Result::ok).collect();
        for cookie in keys {
            let got = self.clocks.get(&cookie, 0);
            let _ = self.clocks.remove(&cookie);
            let Some(c) = got.ok().and_then(|b| Clock::parse(cookie, &b)) else {
                continue;
            };
            let (lport, rport) = (c.local.1, c.remote.1);
            if !self.keeps(c.pid, (lport, rport)) {
                continue;
            }
            let key = self.group(c.pid, &c.comm, c.uid, (lport, rport));
            let who = who_of(&self.owners, c.pid);
            let held = (c.count, c.held_ns / 1000);
            self.window.add_clock(&key, who, cookie, held, span);
            self.total.add_clock(&key, who, cookie, held, span);
        }
    }

    /// Walks the sockets' waits (at most one walk in `WALK_SPACING` times the last one's
    /// time) and reads the sockets closed since the last call; adds what each counted since
    /// to its group.
    fn walk_waits(&mut self, walk_too: bool) {
        let Some(walk) = &mut self.waits else { return };
        let mut counted = walk.closed();
        if walk_too {
            counted.extend(walk.walk(&mut self.bpf));
        }
        for (w, counted) in counted {
            let (lport, rport) = (w.local.1, w.remote.1);
            if !self.keeps(w.pid, (lport, rport)) {
                continue;
            }
            let key = self.group(w.pid, &w.comm, w.uid, (lport, rport));
            let who = who_of(&self.owners, w.pid);
            self.window.add_waits(&key, who, w.cookie, &counted);
            self.total.add_waits(&key, who, w.cookie, &counted);
        }
    }

    /// Once a second: the TCP sockets in use in every namespace (the kernel's own count, read
    /// per namespace, not per socket), as a full sample's `sockets`; the namespaces are found
    /// again every ten seconds.
    fn count_sockets(&mut self, stats: &mut SampleStats) {
        if self
            .counted_at
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.counted_at = Some(Instant::now());
        let Some(n) = &mut self.nets else { return };
        if self
            .namespaces_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            self.namespaces_at = Some(Instant::now());
            n.refresh();
            drop(n.take_lookups());
        }
        stats.sockets = n.tcp_in_use();
        stats.full = true;
    }

    /// Every [`LOOK_EVERY`](crate::accept::LOOK_EVERY): the listeners' accept queues (the
    /// kernel's programs see no connect that waits for one).
    fn look_at_listeners(&mut self) {
        if self
            .looked_at
            .is_some_and(|t| t.elapsed() < crate::accept::LOOK_EVERY)
        {
            return;
        }
        self.looked_at = Some(Instant::now());
        let mut rows = Vec::new();
        let Some(look) = (self.nets.as_mut()).and_then(|n| n.look_at_listeners(&mut rows).ok())
        else {
            return;
        };
        let judged = self.accepts.judge(&look, self.now_us());
        let owners = &mut self.listener_owners;
        owners.keep_only(&look.listeners.iter().map(|l| l.inode).collect());
        Board::add_accepts(
            [&mut self.window, &mut self.total],
            &judged,
            &self.filter,
            |inode| {
                owners.look_for(&[inode]);
                owners.owner(inode)
            },
        );
    }

    /// The kernel programs' counters so far.
    pub(crate) fn counters(&self) -> Counters {
        let map = self
            .bpf
            .map("counters")
            .and_then(|m| PerCpuArray::<_, u64>::try_from(m).ok());
        Counters::read(|i| {
            map.as_ref()
                .and_then(|a| a.get(&i, 0).ok())
                .map_or(0, |per_cpu| per_cpu.iter().sum())
        })
    }

    /// Time the kernel spent in the programs so far, and how many times they ran (needs the
    /// kernel's BPF run-time statistics, turned on while this watcher lives; `None` if not).
    pub(crate) fn kernel_cost(&self) -> Option<(Duration, u64)> {
        self._stats.as_ref()?;
        let mut time = Duration::ZERO;
        let mut runs = 0;
        for (name, _) in PROGRAMS {
            let info: ProgramInfo = self.bpf.program(name)?.info().ok()?;
            time += info.run_time();
            runs += info.run_count();
        }
        // (The waits walk's closing program, where the kernel took it.)
        if let Some(info) = self.bpf.program("closing").and_then(|p| p.info().ok()) {
            time += info.run_time();
            runs += info.run_count();
        }
        Some((time, runs))
    }

    /// Reports received.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }
}

impl Source for EbpfWatcher {
    fn name(&self) -> &'static str {
        "ebpf"
    }

    /// Drains the kernel's reports and judges them.
    fn sample(&mut self) -> io::Result<SampleStats> {
        let mut stats = SampleStats::default();
        let mut got = Vec::new();
        while let Some(item) = self.ring.next() {
            got.extend(Event::parse(&item));
        }
        let now_mono_ns = monotonic_ns();
        for e in &got {
            self.events += 1;
            stats.watched += 1;
            if self.take(e, now_mono_ns).is_some() {
                stats.stalls += 1;
            }
        }
        self.count_sockets(&mut stats);
        self.look_at_listeners();
        // The sockets closed meanwhile (their ring buffer holds about 1,900).
        self.walk_waits(false);
        // (Each refresh drains them too; this bounds a long refresh's map.)
        if self.now_us() >= self.drained_us + 1_000_000 {
            self.drain_clocks();
        }
        Ok(stats)
    }

    /// The rows of the window since the last call (stalling and clocked groups first);
    /// starts a new one.
    fn take_window(&mut self) -> Vec<Row> {
        self.drain_clocks();
        self.walk_waits(true);
        let now_us = self.now_us();
        let watched = now_us.saturating_sub(std::mem::replace(&mut self.window_start_us, now_us));
        std::mem::take(&mut self.window).rows(watched)
    }

    /// The rows of the whole watch, stalling and clocked groups first.
    fn totals(&self) -> Vec<Row> {
        self.total.rows(self.now_us())
    }

    /// Keeps every stall from now on, for [`take_stalls`](Source::take_stalls) (which must then be
    /// called often: they pile up until it is).
    fn keep_stalls(&mut self) {
        self.stalls.get_or_insert_with(Vec::new);
    }

    /// The stalls that ended since the last call (none unless [`keep_stalls`](Source::keep_stalls)).
    fn take_stalls(&mut self) -> Vec<StallEvent> {
        self.stalls.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The network namespaces whose listeners are known: how many, how many could not be
    /// entered and why (their stalls are still seen; only whether a row serves its port is
    /// not known there).
    fn namespaces(&self) -> (usize, usize, Option<io::ErrorKind>) {
        self.nets.as_ref().map_or((0, 0, None), |n| {
            let (not, why) = n.not_entered();
            (n.present().len(), not, why)
        })
    }

    fn not_entered_means(&self) -> &'static str {
        "their stalls are seen, but not which ports they serve"
    }

    /// At least 50 ms: each report carries the kernel's time.
    fn interval(&self, asked: Duration) -> Duration {
        asked.max(Duration::from_millis(50))
    }

    fn status(&self, _run: &Run) -> String {
        format!("{} kernel reports (eBPF)", self.events())
    }

    fn cost(&self, run: &Run) -> String {
        let c = self.counters();
        let elapsed = run.elapsed_s;
        let kernel = self.kernel_cost().map_or(String::new(), |(t, runs)| {
            format!(
                "; in the kernel {runs} program runs, {:.1} ms ({:.3}% of one core)",
                t.as_secs_f64() * 1000.0,
                t.as_secs_f64() / elapsed * 100.0
            )
        });
        let waits = self.waits.as_ref().map_or(
            "; no walks of the sockets' waits (the kernel refused the iterator)".to_owned(),
            |w| {
                let closes = if w.closes.is_some() {
                    format!(
                        ", {} closed sockets read ({} lost)",
                        c.closes, c.closes_lost
                    )
                } else {
                    " (the kernel refused the program that reads closed sockets: their counts since the last walk are lost)".to_owned()
                };
                let closes = if w.turns {
                    closes
                } else {
                    closes + "; no turns (the kernel refused the program that follows reads)"
                };
                format!(
                    "; {} walks of the sockets' waits, {:.1} ms, {} sockets read{closes}",
                    w.walks,
                    w.spent.as_secs_f64() * 1000.0,
                    w.records
                )
            },
        );
        format!(
            "eBPF in {elapsed:.1} s, on the whole host: {} held writes followed, {} released by an ACK, {} sent without one, {} long holds reported ({} lost){waits}; watcher CPU {:.1}% of one core{kernel}",
            c.holds, c.released, c.sent_without_ack, c.reported, c.lost, run.cpu_percent
        )
    }

    fn kernel(&self) -> Option<KernelReport> {
        let cost = self.kernel_cost();
        Some(KernelReport {
            counters: self.counters(),
            program_runs: cost.map(|c| c.1),
            program_ms: cost.map(|c| c.0.as_secs_f64() * 1000.0),
            waits: self.waits.as_ref().map(|w| crate::backend::WalksReport {
                walks: w.walks,
                ms: w.spent.as_secs_f64() * 1000.0,
                sockets: w.records,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_globals_the_loader_sets_are_u64s_in_holds_bpf_c() {
        let source = include_str!("../bpf/holds.bpf.c");
        // (`EbpfWatcher::new` sets them from `u64`s: their C type must be as wide.)
        for global in ["min_hold_ns", "clock_gap_ns", "cork_min_ns"] {
            let decl = format!("const volatile __u64 {global} =");
            assert!(source.contains(&decl), "no `{decl}` in holds.bpf.c");
        }
    }
}
