//! The writes each group's senders held themselves: the last piece of a message kept back
//! by a cork (`TCP_CORK`, or a send with `MSG_MORE`) with nothing in flight, until the
//! kernel's 200 ms ceiling sent it (`Row::sender_holds`; eBPF only). Not Nagle.
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `nagless_sender_holds_total` | counter | writes the group's connections held themselves until the kernel's ceiling sent them |
//! | `nagless_sender_hold_seconds_total` | counter | their time held |

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

use super::labels::Labels;
use super::micros::MicrosCounter;

/// The families.
#[derive(Debug, Clone, Default)]
pub(super) struct CorkFamilies {
    holds: Family<Labels, Counter>,
    seconds: Family<Labels, MicrosCounter>,
}

impl CorkFamilies {
    pub(super) fn register(r: &mut Registry) -> CorkFamilies {
        let f = CorkFamilies::default();
        r.register(
            "nagless_sender_holds",
            "Writes the group's connections held themselves: a message's last piece kept back by a cork (TCP_CORK, or a send with MSG_MORE) with nothing in flight, until the kernel's 200 ms ceiling sent it (eBPF backend; not Nagle)",
            f.holds.clone(),
        );
        r.register_with_unit(
            "nagless_sender_hold",
            "Time the group's own corks held its writes (eBPF backend; not Nagle)",
            Unit::Seconds,
            f.seconds.clone(),
        );
        f
    }

    /// Adds a refresh's holds to group `l`'s series (made at 0 if new).
    pub(super) fn add(&self, l: &Labels, holds: u64, held_us: u64) {
        self.holds.get_or_create(l).inc_by(holds);
        self.seconds.get_or_create(l).inc_by(held_us);
    }

    /// Removes group `l`'s series.
    pub(super) fn remove(&self, l: &Labels) {
        self.holds.remove(l);
        self.seconds.remove(l);
    }
}
