//! Relays ([`Arrivals`]): a host that writes onto one connection what reached it on another,
//! piece by piece as it comes (a proxy, a sidecar, a tunnel). Each data segment's arrival at
//! its destination host is kept, a bounded window per host; a stall candidate is matched
//! against what reached its sender's host on the capture's other flows: its previous write
//! mirrors a piece that arrived just before it left, and its held write the pieces that
//! arrived after it, up to the releasing ACK. Both must match, byte for byte.
//!
//! Hosts are told by address: a relay whose two sides use two addresses (a sidecar's pod
//! address in, 127.0.0.6 out) is not found, and on a capture of one address (loopback) two
//! unrelated flows whose pieces happen to match, within 10 ms and to the byte, would be
//! taken for one relay.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use super::candidates::Candidate;

/// Arrivals kept per host: a relay's pieces come within milliseconds of its writes.
const PER_HOST: usize = 64;
/// Hosts kept at most (beyond, the index starts over: a capture of many hosts loses some
/// matches, never memory: 1,024 x 64 arrivals of 24 bytes, 1.5 MB at most).
const HOSTS_MAX: usize = 1024;
/// A relay writes a piece within this long of its arrival, µs.
const LEAD_US: u64 = 10_000;

#[derive(Clone, Copy)]
struct Arrival {
    us: u64,
    len: u32,
    flow: usize,
}

/// What reached each host lately.
#[derive(Default)]
pub(super) struct Arrivals {
    by_host: HashMap<IpAddr, VecDeque<Arrival>>,
}

/// µs since the capture's first frame, from a reported time.
fn us_of(at: super::output::At) -> u64 {
    (at.time_s * 1e6).round() as u64
}

impl Arrivals {
    /// `len` payload bytes of flow `flow` reached `host` at `us`.
    pub(super) fn on_data(&mut self, host: IpAddr, flow: usize, us: u64, len: u32) {
        if self.by_host.len() >= HOSTS_MAX && !self.by_host.contains_key(&host) {
            self.by_host.clear();
        }
        let q = self.by_host.entry(host).or_default();
        if q.len() == PER_HOST {
            q.pop_front();
        }
        q.push_back(Arrival { us, len, flow });
    }

    /// The flow, other than `flow`, whose pieces reaching `host` the candidate's previous and
    /// held writes carry on.
    pub(super) fn source(&self, host: IpAddr, flow: usize, c: &Candidate) -> Option<usize> {
        let q = self.by_host.get(&host)?;
        let (prev, ack) = (us_of(c.previous), us_of(c.ack));
        // A piece of the previous write's size that came just before it left...
        let firsts = q.iter().filter(|a| {
            a.flow != flow && a.len == c.prev_len && a.us <= prev && prev - a.us <= LEAD_US
        });
        for first in firsts {
            // ...and, on the same flow, the held write's bytes after it, by the ACK.
            let after: u64 = q
                .iter()
                .filter(|a| a.flow == first.flow && a.us > first.us && a.us <= ack)
                .map(|a| u64::from(a.len))
                .sum();
            if after == u64::from(c.held_len) {
                return Some(first.flow);
            }
        }
        None
    }
}
