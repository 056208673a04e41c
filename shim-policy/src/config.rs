//! Settings read from the environment, and the counters the shim reports.
use std::sync::atomic::AtomicU64 as StatCounter;
use std::time::Duration;

/// How the shim treats managed sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Set TCP_NODELAY only (what NODELAY-forcing preloads do).
    Nodelay,
    /// Cork each burst, release only when the program reads this socket or polls
    /// (libautocork's rule; the kernel's ~200 ms cork limit bounds the rest).
    Cork,
    /// Hold each burst (`MSG_MORE` on its writes); release when a writing thread waits, and
    /// within the linger bound.
    Nagless,
}

impl Mode {
    /// Parses `NAGLESS_MODE`.
    pub(crate) fn parse(s: &str) -> Option<Mode> {
        match s {
            "nagless" => Some(Mode::Nagless),
            "cork" => Some(Mode::Cork),
            "nodelay" => Some(Mode::Nodelay),
            _ => None,
        }
    }

    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nodelay => "nodelay",
            Mode::Cork => "cork",
            Mode::Nagless => "nagless",
        }
    }
}

/// What the shim does to the program's own delayed ACKs (the receiver's half of every
/// stall: a peer whose Nagle holds its next write until this side ACKs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Acks {
    /// Left to the kernel.
    #[default]
    Native,
    /// `TCP_QUICKACK` set again after every read that returned data (the kernel clears it
    /// as it goes back to delaying): each partial message is acknowledged at once.
    Quickack,
    /// `TCP_DELACK_MAX_US` set on every TCP socket (Linux 6.15): no ACK waits longer than
    /// this many µs.
    DelackMaxUs(u32),
}

impl Acks {
    /// Parses `NAGLESS_ACKS`: `quickack`, or `delack-max-us:N`.
    pub(crate) fn parse(s: &str) -> Option<Acks> {
        match s.split_once(':') {
            None if s == "quickack" => Some(Acks::Quickack),
            Some(("delack-max-us", n)) => n.parse().ok().filter(|&n| n > 0).map(Acks::DelackMaxUs),
            _ => None,
        }
    }
}

/// Settings read from the environment at start-up.
#[derive(Debug, Clone)]
pub struct Config {
    /// The mode.
    pub mode: Mode,
    /// The program's delayed ACKs.
    pub(crate) acks: Acks,
    /// Longest time a burst stays corked without the program waiting.
    pub(crate) linger: Duration,
    /// Print statistics at exit.
    pub stats: bool,
    /// Count every write, even a clocked socket's, whose hook otherwise touches no counter
    /// shared between threads (see `Shim::clocked_write`): statistics are asked for
    /// (`NAGLESS_STATS`, or a stats file, `NAGLESS_STATS_FILE`).
    pub counts_writes: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Nagless,
            acks: Acks::Native,
            linger: DEFAULT_LINGER,
            stats: false,
            counts_writes: false,
        }
    }
}

/// Linger bound when `NAGLESS_LINGER_US` is not set.
pub(crate) const DEFAULT_LINGER: Duration = Duration::from_micros(1000);

/// The accepted range of `NAGLESS_LINGER_US`, µs.
pub(crate) const LINGER_RANGE_US: std::ops::RangeInclusive<u64> = 50..=100_000;

impl Config {
    /// Reads `NAGLESS_MODE`, `NAGLESS_ACKS`, `NAGLESS_LINGER_US`, `NAGLESS_STATS` and whether
    /// `NAGLESS_STATS_FILE` is set, through
    /// `var`. A value
    /// that does not parse keeps the default and is named in the returned complaints (the
    /// shim cannot refuse to run; `nagless run` checks the same values and exits 2).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
        let mut c = Config::default();
        let mut bad = Vec::new();
        if let Some(m) = var("NAGLESS_MODE") {
            match Mode::parse(&m) {
                Some(mode) => c.mode = mode,
                None => bad.push(format!(
                    "NAGLESS_MODE={m:?} is not nagless, cork or nodelay"
                )),
            }
        }
        if let Some(a) = var("NAGLESS_ACKS") {
            match Acks::parse(&a) {
                Some(acks) => c.acks = acks,
                None => bad.push(format!(
                    "NAGLESS_ACKS={a:?} is not quickack or delack-max-us:N"
                )),
            }
        }
        if let Some(v) = var("NAGLESS_LINGER_US") {
            match v.parse::<u64>() {
                Ok(us) if LINGER_RANGE_US.contains(&us) => c.linger = Duration::from_micros(us),
                _ => bad.push(format!(
                    "NAGLESS_LINGER_US={v:?} is not a number of µs in {}..={}",
                    LINGER_RANGE_US.start(),
                    LINGER_RANGE_US.end()
                )),
            }
        }
        c.stats = var("NAGLESS_STATS").is_some_and(|v| !v.is_empty() && v != "0");
        c.counts_writes = c.stats || var("NAGLESS_STATS_FILE").is_some_and(|v| !v.is_empty());
        (c, bad)
    }
}

/// Counters reported by `--stats`.
#[derive(Default)]
pub struct Stats {
    /// TCP sockets the shim managed.
    pub sockets: StatCounter,
    /// Bursts (cork .. uncork cycles).
    pub bursts: StatCounter,
    /// Writes on managed sockets the shim holds bursts of.
    pub writes: StatCounter,
    /// Writes that joined a burst already held (coalesced with what came before).
    pub joined: StatCounter,
    /// Bursts released by the flusher's linger bound.
    pub linger_releases: StatCounter,
    /// Writes that completed a burst's learned shape and left at once.
    pub shaped: StatCounter,
    /// Sockets left to the program's own TCP_CORK / MSG_MORE / Nagle choice.
    pub self_managed: StatCounter,
    /// Data segments sent by managed sockets, summed at close (TCP_INFO).
    pub data_segs: StatCounter,
    /// Payload bytes sent by managed sockets, summed at close (TCP_INFO).
    pub bytes: StatCounter,
    /// `setsockopt(TCP_CORK)` calls the shim made (to hold a burst, or to send one); the one
    /// `TCP_NODELAY` per adopted socket is not counted.
    pub cork_calls: StatCounter,
    /// `TCP_NODELAY` set off by a program that already saw it off (its default, copied from
    /// its listener): the shim kept its own and went on holding the socket.
    pub kept_defaults: StatCounter,
    /// Waits of the poll, select or epoll families that would not have blocked (events were
    /// ready, or the timeout was zero): the bursts of the thread went on.
    pub ready_waits: StatCounter,
    /// Writes left to the kernel's Nagle on sockets another thread reads (see the
    /// ACK-clocked socket in [`Shim::before_write`](crate::Shim::before_write)).
    pub clocked: StatCounter,
    /// Sockets handed to the kernel's Nagle so.
    pub clocked_sockets: StatCounter,
    /// Marks of clocked sockets for the flusher's look (each counts as a burst in the
    /// flusher's rate: it ticks, rather than parks and is woken, while they come often).
    pub clock_marks: StatCounter,
    /// `TCP_QUICKACK`s set again after a read, or `TCP_DELACK_MAX_US`s set (`NAGLESS_ACKS`).
    pub ack_calls: StatCounter,
}
