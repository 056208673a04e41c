//! # nagless-netpath
//!
//! An emulated network path for the lab, the doctor's tests and your own experiments: two
//! network namespaces, a client and a server, joined by a link with a round-trip time, a rate
//! with a drop-tail queue, an MTU and seeded random loss. This kernel has no `netem` qdisc, so
//! the link is a user-space forwarder between a TUN device in each namespace: one thread per
//! direction reads the packets one side sends, lets the `link` model decide when (or
//! whether) they arrive, and writes them into the other side.
//!
//! ```no_run
//! use std::time::Duration;
//! use nagless_netpath::{EmulatedPath, PathSpec};
//! let path = EmulatedPath::new(&PathSpec { rtt: Duration::from_millis(20), ..PathSpec::default() })?;
//! let server = path.server_addr();
//! let listener = path.run_in_server(|| std::net::TcpListener::bind((server, 7000)))?;
//! let client = path.run_in_client(|| std::net::TcpStream::connect((server, 7000)))?;
//! // ... each side's sockets now talk across a 20 ms path; dropping `path` removes it all.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Needs root or `CAP_NET_ADMIN` (and `ip` from iproute2): without them [`EmulatedPath::new`]
//! says so ([`PathError::NotPermitted`]). Namespaces are named `nagless-<pid>-<n>-c/s`; they
//! are removed when the path is dropped (also while a panic unwinds), and leftovers of a
//! process that no longer exists are removed by the next path made.
//!
//! Accuracy on this 2-vCPU VM is measured by `tests/path.rs` (handshake RTT within 5 % + 0.1 ms
//! from 1 to 100 ms, bulk rate within 5 % from 1 to 1000 Mbit/s, when idle; the test holds
//! them to their order, which a loaded machine keeps; loss, MTU). Each packet costs
//! the forwarder a read and a write: 1000 Mbit/s takes most of a core. A sleeping forwarder
//! reads a packet one wake-up after it came, so packets read after a sleep are dated back by
//! the typical wake-up, measured when the path is made.
//!
//! Public is what the lab, the tests and the examples use; the link and delayed-ACK models
//! are the crate's own (`unreachable_pub` holds it).
#![warn(unreachable_pub)]

mod ack_timer;
mod link;
mod sys;

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::ack_timer::{AckTimer, Decision, Segment};
use crate::link::{Link, LinkSpec, Verdict};

/// How close to a packet's delivery time the forwarder stops sleeping and polls instead.
const SPIN: Duration = Duration::from_micros(250);

/// A wake-up's usual lateness (timer slack and a VM's wake-up), not counted as running late.
const OVERSLEEP: Duration = Duration::from_micros(200);

/// The client's address on the path.
pub(crate) const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 1);
/// The server's address on the path.
pub(crate) const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 2);

/// What the path looks like.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// Round-trip time: half of it is added in each direction.
    pub rtt: Duration,
    /// Rate of each direction, bits per second; `None`: as fast as the forwarder goes.
    pub rate_bps: Option<u64>,
    /// MTU of both ends (bytes of IP packet).
    pub mtu: u32,
    /// Probability that a packet is lost, each direction, 0.0 ..= 1.0.
    pub loss: f64,
    /// Drop-tail queue of each direction, bytes; `None`: one bandwidth-delay product (at
    /// least 16 packets of MTU size).
    pub queue_bytes: Option<usize>,
    /// Seed of the loss generators.
    pub seed: u64,
    /// The server end's delayed-ACK timer, when it is to act as a host whose timer is longer
    /// than Linux's (Windows: 200 ms, macOS: 100 ms): the path holds the server's pure ACKs
    /// to it (the `ack_timer` model). `None`: the server's own kernel (Linux, 40 ms).
    pub server_ack_delay: Option<Duration>,
    /// The same for the client end.
    pub client_ack_delay: Option<Duration>,
}

impl Default for PathSpec {
    fn default() -> Self {
        PathSpec {
            rtt: Duration::from_millis(10),
            rate_bps: None,
            mtu: 1500,
            loss: 0.0,
            queue_bytes: None,
            seed: 1,
            server_ack_delay: None,
            client_ack_delay: None,
        }
    }
}

impl PathSpec {
    /// The queue limit in force.
    pub(crate) fn queue_limit(&self) -> usize {
        self.queue_bytes.unwrap_or_else(|| {
            let bdp = self.rate_bps.map_or(usize::MAX, |r| {
                (r as u128 * self.rtt.as_nanos() / 8_000_000_000) as usize
            });
            bdp.max(16 * self.mtu as usize)
        })
    }

    fn link(&self, seed: u64) -> LinkSpec {
        LinkSpec {
            one_way: self.rtt / 2,
            rate_bps: self.rate_bps,
            queue_bytes: self.queue_limit(),
            loss: self.loss,
            seed,
        }
    }

    fn check(&self) -> Result<(), PathError> {
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(PathError::Invalid(format!(
                "loss {} is not in 0..=1",
                self.loss
            )));
        }
        if !(576..=65535).contains(&self.mtu) {
            return Err(PathError::Invalid(format!(
                "MTU {} is not in 576..=65535",
                self.mtu
            )));
        }
        if self.rate_bps == Some(0) {
            return Err(PathError::Invalid("rate 0".into()));
        }
        for d in [self.server_ack_delay, self.client_ack_delay]
            .into_iter()
            .flatten()
        {
            if d.is_zero() || d > Duration::from_secs(1) {
                return Err(PathError::Invalid(format!(
                    "delayed-ACK timer {d:?} is not in (0, 1 s]"
                )));
            }
        }
        Ok(())
    }
}

/// Why a path could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// Not root and no `CAP_NET_ADMIN`, or no `ip` (iproute2) to run.
    #[error(
        "an emulated path needs root or CAP_NET_ADMIN (network namespaces and TUN devices) \
         and `ip` (iproute2): {0}"
    )]
    NotPermitted(String),
    /// A setting out of range.
    #[error("invalid path: {0}")]
    Invalid(String),
    /// Setting the path up failed.
    #[error("cannot set up the emulated path: {0}")]
    Setup(String),
}

/// Counters of both directions together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PathStats {
    /// Packets delivered.
    pub delivered: u64,
    /// Packets lost at random.
    pub lost: u64,
    /// Packets dropped by a full queue.
    pub queue_drops: u64,
    /// Pure ACKs held to an emulated delayed-ACK timer (released or superseded).
    pub acks_held: u64,
    /// The longest a forwarder ran behind its schedule: a packet written that long after its
    /// delivery time, or a wait with a packet due or come that ended that long after its
    /// timeout. A busy host that deschedules a forwarder stretches the path by that much, a
    /// delay no part of the path's spec made. A lower bound: a forwarder descheduled while it
    /// waited, woken by a packet before its timeout, reads that packet late unseen here, and
    /// so does the host's kernel handling a packet late.
    pub late_most: Duration,
}

#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    lost: AtomicU64,
    queue_drops: AtomicU64,
    acks_held: AtomicU64,
    /// [`PathStats::late_most`], µs.
    late_most_us: AtomicU64,
}

impl Counters {
    /// Counts a packet the link lost or dropped; gives the delivery time of one it takes.
    fn admitted(&self, v: Verdict) -> Option<Duration> {
        match v {
            Verdict::Deliver(at) => return Some(at),
            Verdict::Lost => self.lost.fetch_add(1, Ordering::Relaxed),
            Verdict::QueueFull => self.queue_drops.fetch_add(1, Ordering::Relaxed),
        };
        None
    }

    /// Notes that a forwarder acted `late` after it was due.
    fn ran_late(&self, late: Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        self.late_most_us.fetch_max(us, Ordering::Relaxed);
    }
}

/// An end's timer, whoever else held its lock when panicking (the model stays consistent:
/// each call leaves it whole).
fn timer(t: &Mutex<AckTimer>) -> std::sync::MutexGuard<'_, AckTimer> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// The delayed-ACK timers a forwarder consults: the one of the end it delivers to (which
/// learns when data reaches that end) and the one of the end it reads from (which decides
/// whether a pure ACK waits).
#[derive(Clone, Default)]
struct Timers {
    of_receiver: Option<Arc<Mutex<AckTimer>>>,
    of_sender: Option<Arc<Mutex<AckTimer>>>,
}

/// A direction of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toward {
    /// From the client to the server.
    Server,
    /// From the server to the client.
    Client,
}

/// A client namespace and a server namespace joined by an emulated link; removed on drop.
pub struct EmulatedPath {
    client_ns: String,
    server_ns: String,
    stop: Arc<AtomicBool>,
    forwarders: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
    /// Per direction (toward the server, toward the client): data packets still to lose on
    /// purpose ([`EmulatedPath::lose_next_data`]).
    to_lose: [Arc<AtomicU32>; 2],
    spec: PathSpec,
}

fn ip(args: &[&str]) -> Result<(), PathError> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        PathError::NotPermitted(format!("cannot run ip (Debian package iproute2): {e}"))
    })?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if err.contains("Operation not permitted") || err.contains("Permission denied") {
        Err(PathError::NotPermitted(err))
    } else {
        Err(PathError::Setup(format!("ip {}: {err}", args.join(" "))))
    }
}

/// Removes namespaces left by paths of processes that no longer exist.
fn remove_leftovers() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("nagless-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !sys::process_alive(pid) {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// Runs `f` on a new thread that first enters the namespace `ns`.
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            sys::enter_netns(ns)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

impl EmulatedPath {
    /// Makes the namespaces, the TUN devices and the forwarders.
    pub fn new(spec: &PathSpec) -> Result<EmulatedPath, PathError> {
        spec.check()?;
        static SERIAL: AtomicUsize = AtomicUsize::new(0);
        remove_leftovers();
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let client_ns = format!("nagless-{pid}-{n}-c");
        let server_ns = format!("nagless-{pid}-{n}-s");
        let mut path = EmulatedPath {
            client_ns: client_ns.clone(),
            server_ns: server_ns.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            forwarders: Vec::new(),
            counters: Arc::default(),
            to_lose: Default::default(),
            spec: spec.clone(),
        };
        ip(&["netns", "add", &client_ns])?;
        ip(&["netns", "add", &server_ns])?;
        let mtu = spec.mtu.to_string();
        let mut tuns = Vec::new();
        for (ns, me, peer) in [
            (&client_ns, CLIENT_ADDR, SERVER_ADDR),
            (&server_ns, SERVER_ADDR, CLIENT_ADDR),
        ] {
            let fd = in_netns(ns, || sys::open_tun("nl0"))
                .and_then(|r| r)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::PermissionDenied => PathError::NotPermitted(e.to_string()),
                    _ => PathError::Setup(format!("TUN device in {ns}: {e}")),
                })?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", "nl0", "mtu", &mtu, "up"])?;
            let (me, peer) = (me.to_string(), peer.to_string());
            ip(&["-n", ns, "addr", "add", &me, "peer", &peer, "dev", "nl0"])?;
            tuns.push(Arc::new(fd));
        }
        let (c, s) = (Arc::clone(&tuns[0]), Arc::clone(&tuns[1]));
        // A sleeping forwarder reads a packet one wake-up after it came; the packet is dated
        // back by the typical wake-up (at most 100 µs), or every hop would be that much long.
        let late = sys::wake_latency().min(Duration::from_micros(100));
        // Both directions share one clock: an end's timer learns arrivals from one forwarder
        // and judges that end's ACKs in the other.
        #[allow(clippy::disallowed_methods)] // the forwarders run on real time
        let start = Instant::now();
        let mss = spec.mtu as usize - 52;
        let make_timer =
            |d: Option<Duration>| d.map(|d| Arc::new(Mutex::new(AckTimer::new(d, mss))));
        let (client_timer, server_timer) = (
            make_timer(spec.client_ack_delay),
            make_timer(spec.server_ack_delay),
        );
        let to_server = Timers {
            of_receiver: server_timer.clone(),
            of_sender: client_timer.clone(),
        };
        let to_client = Timers {
            of_receiver: client_timer,
            of_sender: server_timer,
        };
        path.forwarders.push(path.forwarder(
            Arc::clone(&c),
            Arc::clone(&s),
            (spec.seed, Arc::clone(&path.to_lose[0])),
            late,
            (start, to_server),
        ));
        path.forwarders.push(path.forwarder(
            s,
            c,
            (spec.seed.wrapping_add(1), Arc::clone(&path.to_lose[1])),
            late,
            (start, to_client),
        ));
        Ok(path)
    }

    /// One direction: packets sent into `from` come out of `to` when the link says so.
    fn forwarder(
        &self,
        from: Arc<OwnedFd>,
        to: Arc<OwnedFd>,
        (seed, to_lose): (u64, Arc<AtomicU32>),
        late: Duration,
        (start, timers): (Instant, Timers),
    ) -> JoinHandle<()> {
        let stop = Arc::clone(&self.stop);
        let counters = Arc::clone(&self.counters);
        let mut link = Link::new(self.spec.link(seed));
        std::thread::Builder::new()
            .name("nagless-link".into())
            .spawn(move || {
                sys::precise_timers();
                let mut queue: std::collections::VecDeque<(Duration, Vec<u8>)> = Default::default();
                // Pure ACKs held to the sending end's timer: flow -> (release time, packet).
                type Ends = ((Ipv4Addr, u16), (Ipv4Addr, u16));
                let mut held: std::collections::HashMap<Ends, (Duration, Vec<u8>)> =
                    Default::default();
                let judge = timers.of_receiver.is_some() || timers.of_sender.is_some();
                let mut buf = vec![0u8; 65536];
                let mut last_arrival = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    let now = start.elapsed();
                    if !held.is_empty() {
                        let due: Vec<Ends> = held
                            .iter()
                            .filter(|(_, (at, _))| *at <= now)
                            .map(|(k, _)| *k)
                            .collect();
                        for k in due {
                            let Some((_, pkt)) = held.remove(&k) else {
                                continue;
                            };
                            if let (Some(t), Some(seg)) = (&timers.of_sender, Segment::parse(&pkt))
                            {
                                timer(t).released(&seg);
                            }
                            if let Some(at) = counters.admitted(link.on_packet(now, pkt.len())) {
                                queue.push_back((at, pkt));
                            }
                        }
                    }
                    while queue.front().is_some_and(|(at, _)| *at <= now) {
                        if let Some((at, pkt)) = queue.pop_front() {
                            counters.ran_late(now.saturating_sub(at));
                            sys::write_packet(to.as_raw_fd(), &pkt);
                            counters.delivered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let wait = queue
                        .front()
                        .map(|(at, _)| *at)
                        .into_iter()
                        .chain(held.values().map(|(at, _)| *at))
                        .min()
                        .map_or(Duration::from_millis(10), |at| at.saturating_sub(now));
                    // Sleeping costs a wake-up latency (50-100 µs on a VM) at both ends of a
                    // hop; while a packet is due soon, poll without sleeping instead.
                    let sleep = if wait <= SPIN {
                        Duration::ZERO
                    } else {
                        wait - SPIN
                    };
                    let waiting_since = start.elapsed();
                    let readable = sys::wait_readable(from.as_raw_fd(), sleep).unwrap_or(false);
                    // A wait never ends later than its timeout unless the host held the thread
                    // back: what it overslept, a packet due or come meanwhile waited too (an
                    // idle wait that overslept delayed nothing).
                    if readable || !queue.is_empty() || !held.is_empty() {
                        counters.ran_late(
                            start
                                .elapsed()
                                .saturating_sub(waiting_since + sleep + OVERSLEEP),
                        );
                    }
                    if !readable {
                        if sleep.is_zero() {
                            std::hint::spin_loop();
                        }
                        continue;
                    }
                    let now = start.elapsed();
                    // After a sleep the first packets came about one wake-up ago, but not before
                    // the wait began (a packet already waiting made the poll return at once).
                    let arrival = if sleep.is_zero() {
                        now
                    } else {
                        now.saturating_sub(late).max(waiting_since)
                    };
                    let arrival = arrival.max(last_arrival);
                    last_arrival = arrival;
                    while let Ok(Some(n)) = sys::read_packet(from.as_raw_fd(), &mut buf) {
                        if to_lose.load(Ordering::Relaxed) > 0
                            && Segment::parse(&buf[..n]).is_some_and(|s| s.payload > 0)
                            && to_lose
                                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                                    k.checked_sub(1)
                                })
                                .is_ok()
                        {
                            counters.lost.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        let seg = if judge {
                            Segment::parse(&buf[..n])
                        } else {
                            None
                        };
                        if let (Some(t), Some(seg)) = (&timers.of_sender, &seg) {
                            let decision = timer(t).host_sent(seg, arrival);
                            match decision {
                                Decision::Hold(at) => {
                                    counters.acks_held.fetch_add(1, Ordering::Relaxed);
                                    let e =
                                        held.entry((seg.src, seg.dst)).or_insert((at, Vec::new()));
                                    e.0 = e.0.min(at);
                                    e.1 = buf[..n].to_vec();
                                    continue;
                                }
                                // A later packet of the flow carries a later ACK.
                                Decision::Pass => {
                                    held.remove(&(seg.src, seg.dst));
                                }
                            }
                        }
                        if let Some(at) = counters.admitted(link.on_packet(arrival, n)) {
                            if let (Some(t), Some(seg)) = (&timers.of_receiver, &seg) {
                                timer(t).reaches_host(seg, at);
                            }
                            queue.push_back((at, buf[..n].to_vec()));
                        }
                    }
                }
            })
            .expect("spawn a forwarder thread")
    }

    /// The server's address.
    pub fn server_addr(&self) -> Ipv4Addr {
        SERVER_ADDR
    }

    /// The settings.
    pub fn spec(&self) -> &PathSpec {
        &self.spec
    }

    /// Runs `f` on a thread inside the client namespace (sockets it makes live there) and
    /// returns its result.
    pub fn run_in_client<T: Send>(&self, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
        in_netns(&self.client_ns, f)
    }

    /// Runs `f` on a thread inside the server namespace and returns its result.
    pub fn run_in_server<T: Send>(&self, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
        in_netns(&self.server_ns, f)
    }

    /// The namespace names (client, server), for `ip netns exec` and tcpdump.
    pub fn namespaces(&self) -> (&str, &str) {
        (&self.client_ns, &self.server_ns)
    }

    /// Loses the next packet that carries TCP data `toward` an end (each call one more): a
    /// loss made on purpose, at a known place, for a test's truth. Counted as lost.
    pub fn lose_next_data(&self, toward: Toward) {
        let i = match toward {
            Toward::Server => 0,
            Toward::Client => 1,
        };
        self.to_lose[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counters so far.
    pub fn stats(&self) -> PathStats {
        PathStats {
            delivered: self.counters.delivered.load(Ordering::Relaxed),
            lost: self.counters.lost.load(Ordering::Relaxed),
            queue_drops: self.counters.queue_drops.load(Ordering::Relaxed),
            acks_held: self.counters.acks_held.load(Ordering::Relaxed),
            late_most: Duration::from_micros(self.counters.late_most_us.load(Ordering::Relaxed)),
        }
    }
}

impl std::fmt::Debug for EmulatedPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedPath")
            .field("namespaces", &(&self.client_ns, &self.server_ns))
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl Drop for EmulatedPath {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.forwarders.drain(..) {
            let _ = t.join();
        }
        for ns in [&self.client_ns, &self.server_ns] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
