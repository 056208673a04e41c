//! The listing thread: every scan interval it lists every established socket of every
//! network namespace (a dump: the kernel walks its whole socket hash, which takes long on a
//! host with many sockets) and hands the listing to the watcher, whose own thread meanwhile
//! keeps looking up the busy sockets every interval. It owns the [`Namespaces`]: it finds new
//! namespaces and hands over the lookup socket opened in each. It also attributes sockets to
//! processes: a walk of every process's fds in /proc, long on a host with many sockets, is
//! made here when listed sockets are not attributed yet (at most five times a second, three
//! times for a socket), and each socket's owner is handed over once.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::{Duration, Instant};

use netlink_packet_sock_diag::inet::StateFlags;

use crate::diag::SocketRow;
use crate::netns::Namespaces;
use crate::procs::{ProcMap, Process, Walked};

/// One listing.
pub(crate) struct Listing {
    /// When the dump was taken.
    pub(crate) at: Instant,
    /// Every ESTABLISHED and CLOSE_WAIT socket, without `tcp_info` (`send_queue` says which
    /// have data in flight: the watcher looks those up at once).
    pub(crate) rows: Vec<SocketRow>,
    /// The listening (namespace, port)s with each listener's inode, when listed again (new
    /// connections appeared, see [`spawn`]; or the accept queues were looked at).
    pub(crate) listening: Option<HashMap<(u64, u16), u32>>,
    /// Lookup sockets of namespaces entered since the last listing.
    pub(crate) lookups: Vec<(u64, crate::netns::NsLookup)>,
    /// The namespaces listed now.
    pub(crate) present: HashSet<u64>,
    /// The kernel's count of TCP sockets in use in them ([`Namespaces::tcp_in_use`]).
    pub(crate) in_use: usize,
    /// Namespaces that could not be entered, and why.
    pub(crate) not_entered: (usize, Option<io::ErrorKind>),
    /// Owners of socket inodes found since the last listing.
    pub(crate) owners: Vec<(u32, Process)>,
    /// Processes whose fds could not be read at the last /proc walk.
    pub(crate) denied: usize,
    /// A look at every listener's accept queue, every [`crate::accept::LOOK_EVERY`].
    pub(crate) accept: Option<crate::accept::Look>,
}

/// Attribution of socket inodes, on the listing thread: each owner handed over once.
struct Owners {
    walked: Walked,
    /// Inodes whose owner was handed over.
    done: HashSet<u32>,
}

impl Owners {
    /// The owners of `rows`' sockets not handed over yet, walking /proc (at most every
    /// 200 ms) if some are unknown.
    fn of(&mut self, rows: &[SocketRow]) -> Vec<(u32, Process)> {
        let present: HashSet<u32> = rows.iter().map(|r| r.inode).collect();
        self.done.retain(|i| present.contains(i));
        self.walked.keep_only(&present);
        let fresh: Vec<u32> = rows
            .iter()
            .map(|r| r.inode)
            .filter(|i| *i != 0 && !self.done.contains(i))
            .collect();
        self.walked.look_for(&fresh);
        let mut found = Vec::new();
        for i in fresh {
            if let Some(p) = self.walked.owner(i) {
                if self.done.insert(i) {
                    found.push((i, p));
                }
            }
        }
        found
    }
}

/// Starts the thread; it stops when the receiver is dropped, or after sending an error.
pub(crate) fn spawn(
    mut nets: Namespaces,
    procs: ProcMap,
    every: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> io::Result<Receiver<io::Result<Listing>>> {
    // One listing ahead at most: the thread waits while the watcher sleeps.
    let (tx, rx) = sync_channel(1);
    std::thread::Builder::new()
        .name("nagless-lister".into())
        .spawn(move || {
            let mut last_refresh = Instant::now();
            let mut known: HashSet<(u64, u64)> = HashSet::new();
            let mut last_listeners = None;
            let mut last_look = None;
            let mut due = false;
            let mut listeners: Vec<SocketRow> = Vec::new();
            let mut listener_ports: HashMap<(u64, u16), u32> = HashMap::new();
            let ephemeral = crate::role::EphemeralPorts::of_host();
            let mut waits = Waits::seeded(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64),
            );
            let mut owners = Owners {
                walked: Walked::new(procs, Duration::from_millis(200)),
                done: HashSet::new(),
            };
            loop {
                let at = Instant::now();
                // New namespaces (containers started) every two seconds; gone ones dropped.
                if last_refresh.elapsed() >= Duration::from_secs(2) {
                    nets.refresh();
                    last_refresh = at;
                }
                let mut rows = Vec::new();
                let states = StateFlags::ESTABLISHED | StateFlags::CLOSE_WAIT;
                if let Err(e) = nets.list(states, &mut rows) {
                    let _ = tx.send(Err(e));
                    return;
                }
                let now: HashSet<(u64, u64)> = rows.iter().map(|r| (r.netns, r.cookie)).collect();
                // New connections: listeners are listed again, at once if one of them has a
                // local port that is neither a known listener's nor ephemeral (a listener new
                // since), else at most once a second (short connections make every listing
                // find new ones), and never forgotten until then.
                let fresh: Vec<&SocketRow> = rows
                    .iter()
                    .filter(|r| !known.contains(&(r.netns, r.cookie)))
                    .collect();
                due |= !fresh.is_empty();
                let unknown_server = fresh.iter().any(|r| {
                    !listener_ports.contains_key(&(r.netns, r.local.port()))
                        && !ephemeral.contains(r.local.port())
                });
                known = now;
                // The listeners' accept queues are looked at every `LOOK_EVERY` (the same
                // dump lists the listeners again).
                let look_due =
                    last_look.is_none_or(|t: Instant| t.elapsed() >= crate::accept::LOOK_EVERY);
                let listing_due = due
                    && (unknown_server
                        || last_listeners
                            .is_none_or(|t: Instant| t.elapsed() >= Duration::from_secs(1)));
                let mut accept = None;
                let listening = if listing_due || look_due {
                    if listing_due {
                        due = false;
                        last_listeners = Some(at);
                    }
                    let mut l = Vec::new();
                    let listed = if look_due {
                        last_look = Some(at);
                        nets.look_at_listeners(&mut l)
                            .map(|look| accept = Some(look))
                    } else {
                        nets.list(StateFlags::LISTEN, &mut l)
                    };
                    if let Err(e) = listed {
                        let _ = tx.send(Err(e));
                        return;
                    }
                    listener_ports = l
                        .iter()
                        .map(|r| ((r.netns, r.local.port()), r.inode))
                        .collect();
                    listeners = l;
                    Some(listener_ports.clone())
                } else {
                    None
                };
                // (A socket accepted a moment ago may not be in its owner's fds yet, but its
                // listener is: its owner is the accepting process's. One call with both: it
                // forgets the inodes it is not given.)
                let n = rows.len();
                rows.extend(listeners.iter().cloned());
                let found = owners.of(&rows);
                rows.truncate(n);
                let listing = Listing {
                    accept,
                    owners: found,
                    denied: owners.walked.denied(),
                    at,
                    rows,
                    listening,
                    lookups: nets.take_lookups(),
                    present: nets.present(),
                    in_use: nets.tcp_in_use(),
                    not_entered: nets.not_entered(),
                };
                if tx.send(Ok(listing)).is_err() {
                    return; // the watcher is gone
                }
                // The watcher may shorten it while short connections hold writes.
                let every = waits.next(every.load(std::sync::atomic::Ordering::Relaxed));
                if let Some(rest) = every.checked_sub(at.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
        })?;
    Ok(rx)
}

/// The waits between listings: each drawn between half and one and a half of the interval
/// (its mean), so that a workload as periodic as the listings cannot fall between them
/// every time. (Drawn within 10 % of it, a listing's phase against such a workload walked
/// too slowly: 40 connections of 45 ms, made every 100 ms, went unseen all 40 under the
/// 100 ms default, in a CI run on 2026-11-30.)
struct Waits(u64);

impl Waits {
    fn seeded(seed: u64) -> Waits {
        Waits(seed | 1)
    }

    /// The next wait, for an interval of `us` µs.
    fn next(&mut self, us: u64) -> Duration {
        // xorshift64
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_micros(us / 2 + self.0 % (us + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::Waits;

    /// Listings at the drawn waits, against connections made every interval that each live
    /// 45 % of it (a TLS server's first answer, `watch_sampling`'s short connections): from
    /// every phase, one is listed within a few listings, and over all about 45 % are.
    #[test]
    fn a_periodic_workload_cannot_fall_between_the_listings() {
        const T: u64 = 100_000;
        const LIVES: u64 = 45_000;
        let mut waits = Waits::seeded(0x9e37_79b9_7f4a_7c15);
        let (mut seen, mut listed, mut longest_miss) = (0u64, 0u64, 0u64);
        for phase in (0..T).step_by(1_000) {
            let mut at = 0u64;
            let mut misses = 0;
            for _ in 0..40 {
                at += waits.next(T).as_micros() as u64;
                let into = (at + T - phase) % T;
                listed += 1;
                if into < LIVES {
                    seen += 1;
                    misses = 0;
                } else {
                    misses += 1;
                    longest_miss = longest_miss.max(misses);
                }
            }
        }
        let share = seen as f64 / listed as f64;
        assert!(
            (0.35..=0.55).contains(&share),
            "{share:.3} of listings saw one"
        );
        assert!(
            longest_miss <= 16,
            "{longest_miss} listings in a row saw none"
        );
    }

    /// The mean wait is the interval (the watcher's cost is the interval's), and no wait
    /// passes one and a half of it.
    #[test]
    fn the_waits_keep_the_interval_on_average() {
        let mut waits = Waits::seeded(7);
        let n = 10_000u64;
        let mut sum = 0u64;
        for _ in 0..n {
            let w = waits.next(25_000).as_micros() as u64;
            assert!((12_500..=37_500).contains(&w), "{w}");
            sum += w;
        }
        let mean = sum / n;
        assert!((24_000..=26_000).contains(&mean), "{mean}");
    }
}
