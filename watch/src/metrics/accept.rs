//! The listeners whose accept queue was full (`Row::accept_queue`): connects that waited for
//! a program that accepts too slowly. Not Nagle.
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `nagless_accept_queue_full_seconds_total` | counter | time the group's listener was seen with a full accept queue |
//! | `nagless_accept_queue_drops_total` | counter | handshake packets (SYNs, handshakes' last ACKs) its listener dropped (its own `sk_drops`, else its namespace's `ListenOverflows`, given to the listener that was full) |

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

use super::labels::Labels;
use super::micros::MicrosCounter;
use crate::AcceptQueue;

/// The families.
#[derive(Debug, Clone, Default)]
pub(super) struct AcceptFamilies {
    full: Family<Labels, MicrosCounter>,
    drops: Family<Labels, Counter>,
}

impl AcceptFamilies {
    pub(super) fn register(r: &mut Registry) -> AcceptFamilies {
        let f = AcceptFamilies::default();
        r.register_with_unit(
            "nagless_accept_queue_full",
            "Time the group's listener was seen with its accept queue full (the program accepts too slowly: new connection attempts are dropped and their connects wait 1 s, then 3 s; not Nagle)",
            Unit::Seconds,
            f.full.clone(),
        );
        r.register(
            "nagless_accept_queue_drops",
            "Handshake packets (SYNs, handshakes' last ACKs; each sent again counts again) the group's listeners dropped (their own sk_drops; else their network namespace's ListenOverflows, given to the listener seen full)",
            f.drops.clone(),
        );
        f
    }

    /// Adds a refresh's looks to group `l`'s series (made, at 0, once it has something to
    /// say: a listener never full has none).
    pub(super) fn add(&self, l: &Labels, q: &AcceptQueue) {
        if q.is_quiet() {
            return;
        }
        self.full.get_or_create(l).inc_by(q.full_us);
        self.drops.get_or_create(l).inc_by(q.drops);
    }

    /// Removes group `l`'s series.
    pub(super) fn remove(&self, l: &Labels) {
        self.full.remove(l);
        self.drops.remove(l);
    }
}
