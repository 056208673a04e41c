//! The listing thread: every scan interval it lists every established socket of every
//! network namespace (a dump: the kernel walks its whole socket hash, which takes long on a
//! host with many sockets) and hands the listing to the watcher, whose own thread meanwhile
//! keeps looking up the busy sockets every interval. It owns the [`Namespaces`]: it finds new
//! namespaces and hands over the lookup socket opened in each.

use std::collections::HashSet;
use std::io;
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::{Duration, Instant};

use netlink_packet_sock_diag::inet::StateFlags;

use crate::diag::{Diag, SocketRow};
use crate::netns::Namespaces;

/// One listing.
pub(crate) struct Listing {
    /// When the dump was taken.
    pub at: Instant,
    /// Every ESTABLISHED and CLOSE_WAIT socket.
    pub rows: Vec<SocketRow>,
    /// The listening (namespace, port)s, when listed again (a connection not seen before
    /// appeared).
    pub listening: Option<HashSet<(u64, u16)>>,
    /// Lookup sockets of namespaces entered since the last listing.
    pub lookups: Vec<(u64, Diag)>,
    /// The namespaces listed now.
    pub present: HashSet<u64>,
    /// Namespaces that could not be entered, and why.
    pub not_entered: (usize, Option<io::ErrorKind>),
}

/// Starts the thread; it stops when the receiver is dropped, or after sending an error.
pub(crate) fn spawn(
    mut nets: Namespaces,
    every: Duration,
) -> io::Result<Receiver<io::Result<Listing>>> {
    // One listing ahead at most: the thread waits while the watcher sleeps.
    let (tx, rx) = sync_channel(1);
    std::thread::Builder::new()
        .name("nagless-lister".into())
        .spawn(move || {
            let mut last_refresh = Instant::now();
            let mut known: HashSet<(u64, u64)> = HashSet::new();
            loop {
                let at = Instant::now();
                // New namespaces (containers started) every two seconds; gone ones dropped.
                if last_refresh.elapsed() >= Duration::from_secs(2) {
                    nets.refresh();
                    last_refresh = at;
                }
                let mut rows = Vec::new();
                let states = StateFlags::ESTABLISHED | StateFlags::CLOSE_WAIT;
                if let Err(e) = nets.dump(states, &mut rows) {
                    let _ = tx.send(Err(e));
                    return;
                }
                let now: HashSet<(u64, u64)> = rows.iter().map(|r| (r.netns, r.cookie)).collect();
                let new = now.iter().any(|k| !known.contains(k));
                known = now;
                let listening = if new {
                    let mut l = Vec::new();
                    if let Err(e) = nets.dump(StateFlags::LISTEN, &mut l) {
                        let _ = tx.send(Err(e));
                        return;
                    }
                    Some(l.iter().map(|r| (r.netns, r.local.port())).collect())
                } else {
                    None
                };
                let listing = Listing {
                    at,
                    rows,
                    listening,
                    lookups: nets.take_lookups(),
                    present: nets.present(),
                    not_entered: nets.not_entered(),
                };
                if tx.send(Ok(listing)).is_err() {
                    return; // the watcher is gone
                }
                if let Some(rest) = every.checked_sub(at.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
        })?;
    Ok(rx)
}
