//! Per-descriptor state and the release policy of the shim, in safe code.
//!
//! Each descriptor has one atomic byte: `MANAGED` (a TCP stream socket we act on) and
//! `CORKED` (we set `TCP_CORK` for the burst in progress). A burst starts at the first write
//! on an uncorked managed socket (cork) and ends when the program turns to wait: read,
//! poll/select/epoll, close, shutdown, fork, exec (uncork), or when the flusher thread finds
//! it corked for longer than the linger bound. The table is allocated once at start-up;
//! interposed calls only load, store and compare-and-swap atomics.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::interpose as sys;

const MANAGED: u8 = 1;
const CORKED: u8 = 2;

/// How the shim treats managed sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Set TCP_NODELAY only (what NODELAY-forcing preloads do).
    Nodelay,
    /// Cork each burst, release only when the program reads this socket or polls
    /// (libautocork's rule; the kernel's ~200 ms cork limit bounds the rest).
    Cork,
    /// Cork each burst; release before any wait, and within the linger bound by the flusher.
    Nagless,
}

/// Settings read from the environment at start-up.
#[derive(Debug)]
pub struct Config {
    /// The mode.
    pub mode: Mode,
    /// Longest time a burst stays corked without the program waiting.
    pub linger: Duration,
    /// Print statistics at exit.
    pub stats: bool,
    /// Debug trace file descriptor, if `NAGLESS_LOG` named one.
    pub log_fd: Option<i32>,
}

/// Counters reported by `--stats`.
#[derive(Default)]
pub struct Stats {
    /// TCP sockets the shim managed.
    pub sockets: AtomicU64,
    /// Bursts (cork .. uncork cycles).
    pub bursts: AtomicU64,
    /// Writes on managed sockets while corked.
    pub writes: AtomicU64,
    /// Bursts released by the flusher's linger bound.
    pub linger_releases: AtomicU64,
    /// Data segments sent by managed sockets, summed at close (TCP_INFO).
    pub data_segs: AtomicU64,
    /// Payload bytes sent by managed sockets, summed at close (TCP_INFO).
    pub bytes: AtomicU64,
}

/// The shim's global state.
pub struct Shim {
    /// Settings.
    pub config: Config,
    fds: Box<[AtomicU8]>,
    corked_at_us: Box<[AtomicU64]>,
    /// Highest descriptor ever managed, plus one: the range scans cover.
    high: AtomicUsize,
    corked: AtomicUsize,
    /// Counters.
    pub stats: Stats,
    epoch: Instant,
    flusher: OnceLock<std::thread::Thread>,
    flusher_started: AtomicBool,
}

static SHIM: OnceLock<Shim> = OnceLock::new();

/// The shim, once initialised.
pub fn shim() -> Option<&'static Shim> {
    SHIM.get()
}

fn env_mode() -> Mode {
    match std::env::var("NAGLESS_MODE").as_deref() {
        Ok("nodelay") => Mode::Nodelay,
        Ok("cork") => Mode::Cork,
        _ => Mode::Nagless,
    }
}

/// Most descriptors the table covers; higher ones are left alone.
const MAX_FDS: usize = 1 << 20;

/// Reads the configuration and allocates the table (start-up only).
pub fn init() {
    let linger_us = std::env::var("NAGLESS_LINGER_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1000)
        .clamp(50, 100_000);
    let log_fd = std::env::var("NAGLESS_LOG")
        .ok()
        .and_then(|p| sys::open_log(&p));
    let size = sys::fd_limit().clamp(1024, MAX_FDS);
    let config = Config {
        mode: env_mode(),
        linger: Duration::from_micros(linger_us),
        stats: std::env::var_os("NAGLESS_STATS").is_some(),
        log_fd,
    };
    let state = Shim {
        config,
        fds: (0..size).map(|_| AtomicU8::new(0)).collect(),
        corked_at_us: (0..size).map(|_| AtomicU64::new(0)).collect(),
        high: AtomicUsize::new(0),
        corked: AtomicUsize::new(0),
        stats: Stats::default(),
        epoch: Instant::now(),
        flusher: OnceLock::new(),
        flusher_started: AtomicBool::new(false),
    };
    if SHIM.set(state).is_ok() {
        if let Some(s) = shim() {
            s.start_flusher();
        }
    }
}

impl Shim {
    fn slot(&self, fd: i32) -> Option<&AtomicU8> {
        usize::try_from(fd).ok().and_then(|i| self.fds.get(i))
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Writes a debug line if `NAGLESS_LOG` is set.
    pub fn log(&self, args: std::fmt::Arguments<'_>) {
        if let Some(fd) = self.config.log_fd {
            let pid = std::process::id();
            let now = self.now_us();
            write_formatted(fd, format_args!("nagless[{pid}] {now:>10} us {args}\n"));
        }
    }

    /// Whether `fd` is a socket we manage.
    pub fn is_managed(&self, fd: i32) -> bool {
        self.slot(fd)
            .is_some_and(|s| s.load(Relaxed) & MANAGED != 0)
    }

    /// A new descriptor exists: manage it if it is a TCP stream socket.
    pub fn adopt(&self, fd: i32) {
        let Some(slot) = self.slot(fd) else { return };
        if !sys::is_tcp_stream(fd) {
            slot.store(0, Relaxed);
            return;
        }
        slot.store(MANAGED, Relaxed);
        self.high.fetch_max(fd as usize + 1, Relaxed);
        self.stats.sockets.fetch_add(1, Relaxed);
        // Setting NODELAY makes every release immediate; errors leave the socket as it was.
        let _ = sys::set_nodelay(fd);
        self.log(format_args!("adopt fd {fd}"));
    }

    /// The program writes to `fd`: start a burst if none is in progress.
    pub fn before_write(&self, fd: i32) {
        if self.config.mode == Mode::Nodelay {
            return;
        }
        let Some(slot) = self.slot(fd) else { return };
        let state = slot.load(Relaxed);
        if state & MANAGED == 0 {
            return;
        }
        if state & CORKED != 0 {
            self.stats.writes.fetch_add(1, Relaxed);
            return;
        }
        // Cork first, then publish: the flusher never uncorks a socket before it is corked.
        if sys::set_cork(fd, true).is_err() {
            return;
        }
        self.corked_at_us[fd as usize].store(self.now_us(), Relaxed);
        if slot.fetch_or(CORKED, AcqRel) & CORKED == 0 {
            self.stats.bursts.fetch_add(1, Relaxed);
            self.stats.writes.fetch_add(1, Relaxed);
            if self.corked.fetch_add(1, AcqRel) == 0 {
                if let Some(t) = self.flusher.get() {
                    t.unpark();
                }
            }
        }
    }

    /// Ends the burst on `fd`, if one is in progress.
    pub fn release(&self, fd: i32) {
        let Some(slot) = self.slot(fd) else { return };
        if slot.load(Relaxed) & CORKED == 0 {
            return;
        }
        if slot.fetch_and(!CORKED, AcqRel) & CORKED != 0 {
            self.corked.fetch_sub(1, AcqRel);
            // With NODELAY on, uncorking sends the held tail at once.
            let _ = sys::set_cork(fd, false);
        }
    }

    /// The program is about to wait (poll, select, epoll, fork, exec): end every burst.
    pub fn release_all(&self) {
        if self.corked.load(Acquire) == 0 {
            return;
        }
        let high = self.high.load(Relaxed).min(self.fds.len());
        for fd in 0..high {
            self.release(fd as i32);
        }
    }

    /// Ends bursts older than the linger bound (the flusher's pass).
    fn release_old(&self) {
        let high = self.high.load(Relaxed).min(self.fds.len());
        let limit = self.config.linger.as_micros() as u64;
        let now = self.now_us();
        for fd in 0..high {
            if self.fds[fd].load(Relaxed) & CORKED != 0
                && now.saturating_sub(self.corked_at_us[fd].load(Relaxed)) >= limit
            {
                self.release(fd as i32);
                self.stats.linger_releases.fetch_add(1, Relaxed);
            }
        }
    }

    /// `fd` is being closed: end its burst and count what it sent.
    pub fn forget(&self, fd: i32) {
        let Some(slot) = self.slot(fd) else { return };
        if slot.load(Relaxed) & MANAGED == 0 {
            return;
        }
        self.release(fd);
        self.account(fd);
        slot.store(0, Relaxed);
    }

    fn account(&self, fd: i32) {
        if let Some((segs, bytes)) = sys::sent_counters(fd) {
            self.stats.data_segs.fetch_add(segs, Relaxed);
            self.stats.bytes.fetch_add(bytes, Relaxed);
        }
    }

    /// `new` now refers to what `old` refers to (dup2/dup3).
    pub fn duplicate(&self, old: i32, new: i32) {
        if old == new {
            return;
        }
        self.forget(new);
        if self.is_managed(old) {
            if let Some(slot) = self.slot(new) {
                // The duplicate shares the socket; the burst stays tracked on `old`.
                slot.store(MANAGED, Relaxed);
                self.high.fetch_max(new as usize + 1, Relaxed);
            }
        }
    }

    /// In a child after fork: the flusher thread does not exist there; start a new one.
    pub fn after_fork_child(&'static self) {
        self.flusher_started.store(false, Relaxed);
        self.start_flusher();
    }

    fn start_flusher(&'static self) {
        if self.config.mode != Mode::Nagless || self.flusher_started.swap(true, AcqRel) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("nagless-flusher".into())
            .stack_size(64 * 1024)
            .spawn(move || self.flusher_loop());
        if let Ok(handle) = spawned {
            let _ = self.flusher.set(handle.thread().clone());
        }
    }

    fn flusher_loop(&self) {
        loop {
            if self.corked.load(Acquire) == 0 {
                std::thread::park_timeout(Duration::from_millis(100));
                continue;
            }
            std::thread::sleep(self.config.linger / 2);
            self.release_old();
        }
    }

    /// Prints the counters to stderr (at exit, with `--stats`).
    pub fn print_stats(&self) {
        // Processes that never touched a TCP socket (shells, helpers) stay quiet.
        if !self.config.stats || self.stats.sockets.load(Relaxed) == 0 {
            return;
        }
        let high = self.high.load(Relaxed).min(self.fds.len());
        for fd in 0..high {
            if self.fds[fd].load(Relaxed) & MANAGED != 0 {
                self.account(fd as i32);
            }
        }
        let s = &self.stats;
        let bursts = s.bursts.load(Relaxed);
        let writes = s.writes.load(Relaxed);
        let mode = match self.config.mode {
            Mode::Nodelay => "nodelay",
            Mode::Cork => "cork",
            Mode::Nagless => "nagless",
        };
        write_formatted(
            2,
            format_args!(
                "nagless stats: pid {} mode {mode}: {} sockets, {bursts} bursts, {writes} writes ({} coalesced), {} released by linger, {} data segments, {} bytes sent\n",
                std::process::id(),
                s.sockets.load(Relaxed),
                writes.saturating_sub(bursts),
                s.linger_releases.load(Relaxed),
                s.data_segs.load(Relaxed),
                s.bytes.load(Relaxed),
            ),
        );
    }
}

/// Formats into a stack buffer (no allocation: this runs inside interposed calls) and writes
/// the result to `fd`; anything beyond 512 bytes is cut.
fn write_formatted(fd: i32, args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut buf = [0u8; 512];
    let mut c = std::io::Cursor::new(&mut buf[..]);
    let _ = c.write_fmt(args);
    let n = c.position() as usize;
    sys::write_all_raw(fd, &buf[..n]);
}
