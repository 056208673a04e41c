//! The streaming analysis of a capture ([`Analyzer`]): the table of live flows (a new flow
//! per 4-tuple, or per reuse of one), flows judged when they close or go idle, totals per
//! service, and the flows kept for the report.

use std::collections::HashMap;

use super::flow::Flow;
use super::options::Options;
use super::output::{FlowReport, Outcome, Service};
use super::relay::Arrivals;
use super::table::{FlowKey, FlowTable};
use crate::packet::{flags, Segment};

/// A closed flow is judged once no packet of it came for this long (capture time).
const CLOSED_LINGER_US: u64 = 10_000_000;
/// A flow with no packet for this long is judged (and a later packet starts a new one).
const IDLE_US: u64 = 600_000_000;

/// Flows open at once at most: beyond, the older half (by last packet) is judged, so that no
/// capture (a SYN flood, a scan) can take more memory than this many flows need.
pub const MAX_LIVE_FLOWS: usize = 20_000;

/// The streaming analysis of one capture.
pub struct Analyzer {
    opts: Options,
    /// Live flows by (lower endpoint, higher endpoint).
    live: FlowTable,
    next_index: usize,
    pushed: u64,
    now_us: u64,
    outcome: Outcome,
    services: HashMap<u16, Service>,
    /// The flows kept so far (cut to the best [`Options::top`] when twice that many).
    kept: Vec<FlowReport>,
    /// What reached each host lately, for relays.
    arrivals: Arrivals,
}

impl Analyzer {
    /// A new analysis.
    pub fn new(opts: Options) -> Analyzer {
        Analyzer {
            opts,
            live: FlowTable::default(),
            next_index: 0,
            pushed: 0,
            now_us: 0,
            outcome: Outcome::default(),
            services: HashMap::new(),
            kept: Vec::new(),
            arrivals: Arrivals::default(),
        }
    }

    /// One segment: `us` since the capture's first frame.
    pub fn push(&mut self, frame: u64, us: u64, s: &Segment) {
        self.pushed += 1;
        self.now_us = self.now_us.max(us);
        if self.pushed % 65_536 == 0 {
            self.sweep();
        }
        let key = FlowKey::of(s);
        let is_syn = s.flags & (flags::SYN | flags::ACK) == flags::SYN;
        if let Some(f) = self.live.get_mut(&key) {
            // A new connection on a reused 4-tuple, or an old one seen again after long.
            let new_syn = is_syn && f.starts_anew(s);
            let stale = us.saturating_sub(f.last_us) > IDLE_US;
            if !new_syn && !stale {
                self.outcome.capture_copies += Self::segment(&mut self.arrivals, f, s, us, frame);
                return;
            }
            if let Some(f) = self.live.remove(&key) {
                self.finish_flow(*f);
            }
        }
        if self.live.len() >= MAX_LIVE_FLOWS && !self.live.contains_key(&key) {
            self.judge_oldest_half();
        }
        let flow = match self.live.get_mut(&key) {
            Some(f) => f,
            None => {
                // A SYN-ACK first means its destination is the client; without a handshake,
                // the side with the higher port is.
                let (client, server) = if is_syn {
                    (s.src, s.dst)
                } else if s.flags & (flags::SYN | flags::ACK) == flags::SYN | flags::ACK {
                    (s.dst, s.src)
                } else if s.src.1 > s.dst.1 {
                    (s.src, s.dst)
                } else {
                    (s.dst, s.src)
                };
                if !self.opts.wants(client, server) {
                    return;
                }
                self.next_index += 1;
                let f = Flow::new(
                    self.next_index,
                    (client, server),
                    us,
                    frame,
                    self.opts.timeline,
                    self.opts.every_stall,
                );
                self.live.entry(key).or_insert(Box::new(f))
            }
        };
        self.outcome.capture_copies += Self::segment(&mut self.arrivals, flow, s, us, frame);
    }

    /// Hands `s` to its flow, unless it is a copy of its sender's last packet (1 then, else
    /// 0); a stall candidate it made is matched against the arrivals at its sender's host (a
    /// relay's hop), and a data segment's arrival is kept.
    fn segment(arrivals: &mut Arrivals, flow: &mut Flow, s: &Segment, us: u64, frame: u64) -> u64 {
        let d = flow.sender(s.src);
        if flow.copies[d].is_copy(s, us) {
            return 1;
        }
        flow.copies[d.peer()].peer_sent(s, us);
        let made = flow.candidates_made();
        flow.on_segment(d, s, us, frame);
        if s.len == 0 {
            return 0;
        }
        let index = flow.index;
        if flow.candidates_made() > made {
            if let Some(c) = flow.newest_candidate() {
                c.relayed_from = arrivals.source(s.src.0, index, c);
            }
        }
        arrivals.on_data(s.dst.0, index, us, s.len);
        0
    }

    /// Judges flows that closed or went idle a while ago (in capture time).
    fn sweep(&mut self) {
        let now = self.now_us;
        let done: Vec<_> = self
            .live
            .iter()
            .filter(|(_, f)| {
                let quiet = now.saturating_sub(f.last_us);
                (f.closed() && quiet >= CLOSED_LINGER_US) || quiet >= IDLE_US
            })
            .map(|(k, _)| *k)
            .collect();
        for k in done {
            if let Some(f) = self.live.remove(&k) {
                self.finish_flow(*f);
            }
        }
    }

    /// Judges the half of the live flows whose last packet is oldest (amortized: half the
    /// table is freed each time).
    fn judge_oldest_half(&mut self) {
        let mut ages: Vec<(u64, usize, FlowKey)> = self
            .live
            .iter()
            .map(|(k, f)| (f.last_us, f.index, *k))
            .collect();
        let half = ages.len() / 2;
        ages.select_nth_unstable_by_key(half, |a| (a.0, a.1));
        ages.truncate(half);
        // In capture order, as flows are judged otherwise.
        ages.sort_unstable_by_key(|a| (a.0, a.1));
        for (_, _, k) in ages {
            if let Some(f) = self.live.remove(&k) {
                self.outcome.flows_judged_early += 1;
                self.finish_flow(*f);
            }
        }
    }

    fn finish_flow(&mut self, f: Flow) {
        self.outcome.flows_matching += 1;
        if self.opts.flow.is_some_and(|n| n != f.index) {
            return;
        }
        let port = f.key.1 .1;
        let r = f.report();
        let o = &mut self.outcome;
        o.flows_total += 1;
        o.stalls_total += r.stall_count;
        o.stalled_s_total += r.stalled_s;
        let svc = self.services.entry(port).or_default();
        svc.port = port;
        svc.flows += 1;
        if r.stall_count > 0 {
            o.flows_with_stalls += 1;
            svc.flows_with_stalls += 1;
        }
        if !r.ack_clocked.is_empty() {
            o.flows_ack_clocked += 1;
            svc.flows_ack_clocked += 1;
        }
        if !r.sender_holds.is_empty() {
            o.flows_sender_held += 1;
        }
        svc.stalls += r.stall_count;
        svc.stalled_s += r.stalled_s;
        svc.worst_stall_ms = svc.worst_stall_ms.max(r.worst_stall_ms);
        svc.delayed_acks += r.delayed_ack_count;
        for s in &r.sides {
            svc.retransmission_timeouts += s.retransmission_timeouts;
            svc.zero_window_waits += s.zero_window_waits;
        }
        self.kept.push(r);
        if self.opts.top > 0 && self.kept.len() >= 2 * self.opts.top {
            self.keep_top();
        }
    }

    /// Sorts the kept flows, most stalled time first (then most time queued behind an ACK
    /// clock, then capture order), and keeps the top.
    fn keep_top(&mut self) {
        let queued = |f: &FlowReport| {
            f.ack_clocked.iter().map(|c| c.queued_s).sum::<f64>()
                + f.sender_holds
                    .iter()
                    .map(|h| h.held_ms / 1000.0)
                    .sum::<f64>()
        };
        self.kept.sort_by(|a, b| {
            b.stalled_s
                .total_cmp(&a.stalled_s)
                .then(queued(b).total_cmp(&queued(a)))
                .then(a.index.cmp(&b.index))
        });
        if self.opts.top > 0 {
            self.kept.truncate(self.opts.top);
        }
    }

    /// Judges every flow still open and returns the whole analysis.
    pub fn finish(mut self) -> Outcome {
        // (Boxed still: moved out of their boxes at once, 20,000 flows would take their size
        // again, about 35 MB.)
        let mut rest: Vec<Box<Flow>> = self.live.drain().map(|(_, f)| f).collect();
        rest.sort_by_key(|f| f.index);
        for f in rest {
            self.finish_flow(*f);
        }
        self.keep_top();
        self.outcome.flows = std::mem::take(&mut self.kept);
        let mut services: Vec<Service> = self.services.into_values().collect();
        services.sort_by(|a, b| {
            b.stalled_s
                .total_cmp(&a.stalled_s)
                .then(b.flows.cmp(&a.flows))
                .then(a.port.cmp(&b.port))
        });
        self.outcome.services = services;
        self.outcome
    }
}

/// Analyses segments held in memory: (frame, ns since the Unix epoch, segment), in capture
/// order; times are reported from the first segment's.
#[cfg(test)]
pub(crate) fn analyse(segments: &[(u64, u64, Segment)]) -> Vec<FlowReport> {
    let mut flows = analyse_all(segments).flows;
    flows.sort_by_key(|f| f.index);
    flows
}

/// [`analyse`]'s whole outcome, the capture's own counts too (its copies).
#[cfg(test)]
pub(crate) fn analyse_all(segments: &[(u64, u64, Segment)]) -> Outcome {
    let origin = segments.first().map_or(0, |s| s.1);
    let mut a = Analyzer::new(Options::default());
    for (frame, ns, s) in segments {
        a.push(*frame, ns.saturating_sub(origin) / 1000, s);
    }
    a.finish()
}
