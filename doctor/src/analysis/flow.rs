//! One flow ([`Flow`]): takes its segments in capture order, hands each to sequence tracking
//! (`sequence`), candidate collection (`candidates`) and now and then judging (`judge`), keeps
//! the per-side counters, and when the flow ends builds its [`FlowReport`].

use super::answer::Answers;
use super::budget::{self, Budget, Named, Paths, Wait};
use super::candidates::Collector;
use super::clock::Clock;
use super::copies::Copies;
use super::direction::Direction;
use super::endpoint::{self, Endpoint};
use super::hold::SenderHolds;
use super::ip_ids::{IpIds, Unseen};
use super::judge::{self, Findings};
use super::ledger::{Kind, Label, Stretch};
use super::opening::Opening;
use super::output::{At, Cause, FlowReport, Side, TimelinePoint, TIMELINE_MAX};
use super::sequence::{self, Sequence, Window};
use super::verdict;
use super::waits::Waits;
use crate::packet::{flags, Segment};
use crate::rule::AckTimer;

/// Candidates held before they are judged with the round trips known so far.
const PENDING_MAX: usize = 4096;

/// The least retransmission timeout Linux takes (`TCP_RTO_MIN`) beyond the round trip, µs.
const RTO_LEAST_US: u64 = 200_000;

/// One TCP connection (or what the capture holds of it).
pub(super) struct Flow {
    /// 1-based, in capture order.
    pub(super) index: usize,
    /// Client and server.
    pub(super) key: (Endpoint, Endpoint),
    /// Sequence tracking, per sending direction.
    pub(super) seq: [Sequence; 2],
    /// Counters, per sending direction.
    pub(super) sides: [Side; 2],
    collected: Collector,
    found: Findings,
    clock: Clock,
    /// Made at the first data segment (a flow of SYNs alone, as in a flood, costs nothing).
    holds: Option<Box<SenderHolds>>,
    /// The answering side's times to answer; made at its first answer.
    answers: Option<Box<Answers>>,
    /// Retransmission timeouts and zero windows; made at the first.
    waits: Option<Box<Waits>>,
    /// Where the time went; made at the first data segment.
    budget: Option<Box<Budget>>,
    /// Per sending direction: the IPv4 numbers, and the packets they say did not pass the
    /// capture point since its last data (the first such gap).
    ip_ids: [IpIds; 2],
    unseen: [Unseen; 2],
    /// Per sending direction: its last packets, to tell the capture's copies of them.
    pub(super) copies: [Copies; 2],
    /// Per sending direction: its last retransmission sooner than a timeout (a probe, or a
    /// fast retransmission): the bytes, and the span the budget gave loss recovery for it,
    /// µs. A D-SACK of those bytes says none were lost: the peer's ACK was late.
    probed: [Option<(u32, u32, u64, u64)>; 2],
    /// The last frame's number.
    last_frame: u64,
    /// Each side's last data segment, µs (0: none yet), and its last one not sent again.
    last_data_us: [u64; 2],
    last_new_data_us: [u64; 2],
    packets: u64,
    exchanges: u64,
    /// Who sent data last, and who first.
    last_sender: Option<Direction>,
    first_sender: Option<Direction>,
    start: At,
    first_us: u64,
    pub(super) last_us: u64,
    syn: bool,
    synack: bool,
    opening: Opening,
    fin: [bool; 2],
    rst: bool,
    timeline: Option<Vec<TimelinePoint>>,
}

impl Flow {
    /// A flow between `key.0` (the client) and `key.1` (the server) that starts at `frame`;
    /// it keeps its segments for a timeline if `timeline`, and all its stalls (not only the
    /// worst) if `every_stall`.
    pub(super) fn new(
        index: usize,
        key: (Endpoint, Endpoint),
        us: u64,
        frame: u64,
        timeline: bool,
        every_stall: bool,
    ) -> Flow {
        let side = |a| Side {
            addr: endpoint::addr(a),
            ..Side::default()
        };
        Flow {
            index,
            key,
            seq: Default::default(),
            sides: [side(key.0), side(key.1)],
            collected: Collector::default(),
            found: Findings {
                every_stall,
                ..Findings::default()
            },
            clock: Clock::default(),
            holds: None,
            answers: None,
            waits: None,
            budget: None,
            ip_ids: Default::default(),
            unseen: Default::default(),
            copies: Default::default(),
            probed: [None; 2],
            last_frame: frame,
            last_data_us: [0; 2],
            last_new_data_us: [0; 2],
            packets: 0,
            exchanges: 0,
            last_sender: None,
            first_sender: None,
            start: At::new(frame, us),
            first_us: us,
            last_us: us,
            syn: false,
            synack: false,
            opening: Opening::default(),
            fin: [false; 2],
            rst: false,
            timeline: timeline.then(Vec::new),
        }
    }

    /// Who sent a segment from `src`.
    pub(super) fn sender(&self, src: Endpoint) -> Direction {
        if self.key.0 == src {
            Direction::Client
        } else {
            Direction::Server
        }
    }

    /// Whether the SYN `s` starts a new connection on this flow's 4-tuple: this one ended, or
    /// `s` is no copy of its SYN (another sequence number, or data has flowed since).
    pub(super) fn starts_anew(&self, s: &Segment) -> bool {
        let d = self.sender(s.src);
        self.closed() || !self.seq[d].starts_after(s) || self.sides[d].data_segments > 0
    }

    /// Reset, or both sides sent FIN.
    pub(super) fn closed(&self) -> bool {
        self.rst || self.fin == [true, true]
    }

    /// The flow's next segment, sent by `d`, `us` after the capture's first frame.
    pub(super) fn on_segment(&mut self, d: Direction, s: &Segment, us: u64, frame: u64) {
        let o = d.peer();
        let us = us.max(self.last_us);
        self.packets += 1;
        self.last_us = us;
        self.last_frame = frame;
        self.seq[d].last_segment_us = Some(us);
        // (A packet larger than a full segment is an offload packet, one number per segment
        // its sender cut it into: not told from here, so the numbering starts again.)
        let full = sequence::sizes(&self.seq, d).full_segment().0;
        if s.len > full.saturating_sub(u32::from(s.opt_len)) {
            self.ip_ids[d].forget();
        } else {
            let unseen = self.ip_ids[d].on_packet(s.ip_id, us);
            if unseen.packets > 0 && self.unseen[d].packets == 0 {
                self.unseen[d] = unseen;
            }
        }
        let control = sequence::is_control(s);
        let pure = s.len == 0 && !control;
        if let Some(t) = &mut self.timeline {
            if t.len() < TIMELINE_MAX {
                t.push(TimelinePoint {
                    us,
                    sender: d,
                    len: s.len,
                    pure_ack: pure,
                });
            }
        }
        self.opening.on_segment(d, s, us, frame);
        if s.flags & flags::RST != 0 {
            self.rst = true;
            if let Some(b) = &mut self.budget {
                b.on_close(d, us, frame);
            }
            return;
        }
        if !control {
            self.seq[d].on_advertised(s.window);
        }
        self.seq[d].on_ttl(s.ttl);
        if let Some(m) = s.mss {
            self.seq[d].on_mss(m);
        }
        if s.flags & flags::SYN != 0 {
            if s.flags & flags::ACK != 0 {
                self.synack = true;
            } else {
                self.syn = true;
            }
            self.seq[d].on_syn(s);
        }
        if !control {
            match self.seq[d].on_window(s.window == 0, us) {
                Window::Closed => {
                    self.sides[d].zero_window_waits += 1;
                    let at = At::new(frame, us);
                    self.waits
                        .get_or_insert_with(Default::default)
                        .on_window_closed(d, at);
                }
                Window::Opened(zero_us) => {
                    self.sides[d].zero_window_ms += zero_us as f64 / 1000.0;
                    if let Some(w) = &mut self.waits {
                        w.on_window_opened(d, At::new(frame, us));
                    }
                    if let Some(b) = &mut self.budget {
                        let label = Label::of(Cause::ZeroWindow, Some(d));
                        b.overlay(us.saturating_sub(zero_us), us, label);
                    }
                }
                Window::Unchanged => {}
            }
        }
        if self.seq[d].is_probe(s, control) {
            if !self.seq[o].zero_window {
                self.sides[d].keepalives += 1;
            }
            return;
        }
        if s.flags & flags::ACK != 0 {
            self.on_ack(d, s, us, frame, pure);
        }
        if pure {
            self.sides[d].pure_acks += 1;
        }
        if s.flags & (flags::SYN | flags::FIN) != 0 && s.len == 0 {
            self.seq[d].on_control(s, us, frame);
        }
        if s.flags & flags::FIN != 0 {
            self.fin[d] = true;
            let rtt = sequence::sides_of_round_trip(&self.seq).iter().sum();
            if let Some(h) = &mut self.holds {
                h.on_fin(d, us, rtt);
            }
            if let Some(b) = &mut self.budget {
                b.on_close(d, us, frame);
            }
            self.budget_holds();
        }
        if s.len > 0 {
            self.on_data(d, s, us, frame);
        }
    }

    fn on_ack(&mut self, d: Direction, s: &Segment, us: u64, frame: u64, pure: bool) {
        // A D-SACK of the peer's last probe: its bytes had come, and no ACK of them was
        // lost (none passed before the probe, none of the acker's packets is missing since):
        // the acker's ACK was late (its delayed ACK, as the sender waited), nothing was lost.
        if let (Some((l, r)), Some((a, z, from, to)), Some(b)) =
            (s.sack_first, self.probed[d.peer()], &mut self.budget)
        {
            if sequence::seq_le(r, s.ack)
                && sequence::seq_le(l, a)
                && sequence::seq_le(z, r)
                && self.unseen[d].packets == 0
            {
                b.overlay(from, to, Label::of(Cause::DelayedAck, Some(d)));
            }
        }
        if self.probed[d.peer()].is_some_and(|(_, z, ..)| sequence::seq_le(z, s.ack)) {
            self.probed[d.peer()] = None;
        }
        let before = sequence::in_flight(&self.seq, d.peer());
        let Some(acked) = sequence::acknowledge(&mut self.seq, d, s, us, pure) else {
            return;
        };
        if let Some(b) = &mut self.budget {
            let full = u64::from(sequence::sizes(&self.seq, d.peer()).full_segment().0);
            let after = sequence::in_flight(&self.seq, d.peer());
            b.on_ack(
                d,
                us,
                frame,
                after > full,
                before.saturating_sub(after),
                pure,
            );
        }
        self.collected
            .on_ack(d, &acked, &self.seq, s, us, frame, pure);
        if let Some(h) = self
            .holds
            .as_mut()
            .filter(|_| self.seq[d.peer()].all_acked())
        {
            h.on_all_acked(d.peer(), us);
        }
        // The acker's question: the client's new data, opening its turn.
        let question = s.len > 0 && self.last_sender != Some(d) && d == Direction::Client;
        self.clock.on_ack(d.peer(), &self.seq, us, frame, question);
        if self.collected.len() >= PENDING_MAX {
            self.settle();
        }
    }

    fn on_data(&mut self, d: Direction, s: &Segment, us: u64, frame: u64) {
        let in_flight = !self.seq[d].all_acked();
        let small = sequence::sizes(&self.seq, d).is_small(s.len, u32::from(s.opt_len));
        let late = self.ip_ids[d].is_late(s.ip_id);
        let sent = sequence::send_data(&mut self.seq, d, s, us, frame, late);
        let unseen = std::mem::take(&mut self.unseen[d]);
        let side = &mut self.sides[d];
        if sent.retransmit {
            side.retransmissions += 1;
        }
        if sent.timeout {
            side.retransmission_timeouts += 1;
            side.retransmission_timeout_ms += sent.waited_us as f64 / 1000.0;
            let last = At::new(sent.last_frame, us.saturating_sub(sent.waited_us));
            self.waits
                .get_or_insert_with(Default::default)
                .on_timeout(d, last, At::new(frame, us));
        }
        let data = budget::Data {
            retransmit: sent.retransmit,
            opens_exchange: self.last_sender != Some(d)
                && !sent.retransmit
                && self.first_sender.unwrap_or(d) == d,
            asks: self.last_sender != Some(d) && !sent.retransmit && d == Direction::Client,
            full: !small,
            wait: Wait::of(&self.seq, d, !small),
            in_flight: sequence::in_flight(&self.seq, d),
            segment: sequence::sizes(&self.seq, d).full_segment().0,
        };
        if self.last_sender.is_some_and(|l| l != d) && !sent.retransmit {
            sequence::on_answer(&mut self.seq, d, us, self.last_data_us[d.peer()]);
        }
        let (opening, first) = (self.opening, (self.first_us, self.start.frame));
        let b = self.budget.get_or_insert_with(|| opening.budget(first));
        let from_us = b.until_us();
        b.on_data(d, us, frame, data, &Paths::of(&self.seq));
        // A probe of bytes whose ACK already passed here was for an ACK lost after: not late.
        let end = s.seq.wrapping_add(s.len);
        if sent.probe && !sequence::acked_to(&self.seq, d, end) {
            self.probed[d] = Some((s.seq, end, from_us, us));
        }
        if sent.timeout {
            let label = Label::of(Cause::LossRecovery, Some(d));
            b.overlay(us.saturating_sub(sent.waited_us), us, label);
        }
        // New data after packets of its sender's that never passed the capture point, and a
        // silence as long as a retransmission timeout: this is the lost segment sent again,
        // after a timeout (200 ms and the round trip at least).
        // The lost segment left no sooner than the sender's last packet, nor than the peer's
        // last new data could reach it (that data's way from here to the sender and back;
        // data sent again asks nothing new).
        let reached =
            self.last_new_data_us[d.peer()] + sequence::receiver_side_us(&self.seq, d.peer());
        let silent = us.saturating_sub(unseen.after_us.max(reached));
        // Its timeout: the smoothed round trip and its variance stretch it beyond the least,
        // up to half as long again is taken. A silence outside that is no timeout's (a lost
        // pure ACK, then the sender's own time); data after a hole, or bytes acknowledged
        // that the capture never saw, say the capture missed packets, not the path.
        let rtt: u64 = sequence::sides_of_round_trip(&self.seq).iter().sum();
        if unseen.packets > 0
            && !sent.retransmit
            && sent.contiguous
            && (sequence::RTO_MIN_US..=(RTO_LEAST_US + rtt) * 3 / 2).contains(&silent)
            && self.seq[d].may_number_per_connection()
            && !self.seq[d].acked_unseen()
        {
            let label = Label::of(Cause::LossRecovery, Some(d));
            b.overlay(us - silent, us, label);
        }
        side.data_segments += 1;
        side.bytes += u64::from(s.len);
        // (Data sent again is no new turn: a request sent again after the answerer's own
        // timeout sent its last answer again is the same question.)
        let new_turn = self.last_sender != Some(d) && !sent.retransmit;
        // An exchange as a reader counts one: a turn of the side that spoke first (a request
        // and its answer are one, not two).
        let opener = *self.first_sender.get_or_insert(d);
        if new_turn && d == opener {
            self.exchanges += 1;
        }
        // The answerer's turn begins: how long after the question, its side of the round trip
        // taken off.
        let asked = self.last_data_us[d.peer()];
        if new_turn && d != opener && asked > 0 && !sent.retransmit {
            // Between the question and the answer, as captured: the answerer's side of the
            // round trip (all of it at the opener's end, none at the answerer's) and its
            // think time.
            let rtt = sequence::answer_side_us(&self.seq, d.peer());
            self.answers
                .get_or_insert_with(Default::default)
                .on_answer(us.saturating_sub(asked).saturating_sub(rtt));
        }
        self.last_data_us[d] = us;
        if !sent.retransmit {
            self.last_sender = Some(d);
            self.last_new_data_us[d] = us;
        }
        if !sent.retransmit {
            let rtt = sequence::sides_of_round_trip(&self.seq).iter().sum();
            self.holds
                .get_or_insert_with(Default::default)
                .on_data(d, new_turn, in_flight, small, us, frame, rtt);
        }
        self.collected
            .on_data(d, &sent, new_turn, &self.seq, s, us, frame);
        let options = u32::from(s.opt_len);
        if new_turn && d == Direction::Client {
            self.clock.on_question(d.peer());
        }
        self.clock
            .on_data(d, &self.seq, s.len, options, sent.retransmit, us, frame);
        self.budget_holds();
        if self.budget.as_ref().is_some_and(|b| b.full()) {
            // What is pending relabels the runs it covers before the older ones fold.
            self.settle();
            if let Some(b) = &mut self.budget {
                b.fold_older();
            }
        }
    }

    /// The sender holds confirmed since last time go to the budget.
    fn budget_holds(&mut self) {
        let (Some(h), Some(b)) = (&mut self.holds, &mut self.budget) else {
            return;
        };
        for (d, from_us, to_us) in h.confirmed.drain(..) {
            let label = Label {
                kind: Kind::HoldWait,
                side: Some(d),
            };
            b.overlay(from_us, to_us, label);
        }
    }

    /// Stall candidates made so far, and the newest (see [`Collector::newest_mut`]).
    pub(super) fn candidates_made(&self) -> u64 {
        self.collected.made()
    }

    pub(super) fn newest_candidate(&mut self) -> Option<&mut super::candidates::Candidate> {
        self.collected.newest_mut()
    }

    /// Judges the pending candidates with the round trips known now.
    fn settle(&mut self) {
        self.found
            .settle(&mut self.collected, &self.seq, &mut self.sides);
        let spans = self.found.stalled_spans.drain(..);
        if let Some(b) = &mut self.budget {
            for (d, from_us, to_us) in spans {
                b.overlay(from_us, to_us, Label::of(Cause::NagleStall, Some(d)));
            }
        }
    }

    /// Judges what is left and sums the flow up.
    pub(super) fn report(mut self) -> FlowReport {
        self.settle();
        self.found.keep_worst();
        let mut sides = std::mem::take(&mut self.sides);
        for s in &mut sides {
            s.mean_payload = if s.data_segments > 0 {
                s.bytes as f64 / s.data_segments as f64
            } else {
                0.0
            };
        }
        // A window still closed at the end was closed until then.
        for (d, (side, seq)) in Direction::BOTH
            .into_iter()
            .zip(sides.iter_mut().zip(&self.seq))
        {
            if let Some(zero_us) = seq.zero_for(self.last_us) {
                side.zero_window_ms += zero_us as f64 / 1000.0;
                if let Some(b) = &mut self.budget {
                    let label = Label::of(Cause::ZeroWindow, Some(d));
                    b.overlay(self.last_us - zero_us, self.last_us, label);
                }
            }
        }
        let duration_us = self.last_us.saturating_sub(self.first_us);
        let duration_s = duration_us as f64 / 1e6;
        let [client, server] = self.found.lost;
        let stalled_s = (client.total_us + server.total_us) as f64 / 1e6;
        let (rtt_ms, capture_point) = judge::capture_point(&self.seq);
        let ack_timer = AckTimer::most_seen(self.found.timers);
        let path = verdict::Path {
            rtt_us: sequence::sides_of_round_trip(&self.seq).iter().sum(),
            ttl: [self.seq[0].ttl, self.seq[1].ttl],
            point: capture_point,
        };
        let ack_clocked = self.clock.report(&self.seq, &sides);
        let sender_holds = self.holds.map(|h| h.report(&sides)).unwrap_or_default();
        let named = Named {
            clocked: Direction::BOTH.map(|d| {
                let name = judge::direction_name(d);
                ack_clocked.iter().any(|c| c.direction == name)
            }),
            holds: Direction::BOTH.map(|d| {
                let name = judge::direction_name(d);
                sender_holds.iter().any(|h| h.direction == name)
            }),
            queued: Direction::BOTH.map(|d| {
                let name = judge::direction_name(d);
                let c = ack_clocked.iter().find(|c| c.direction == name)?;
                let first = c.first.first()?;
                let us = |a: &At| (a.time_s * 1e6).round() as u64;
                let evidence = Stretch {
                    from_us: us(&first.ack),
                    to_us: us(&first.segment).max(us(&first.ack)),
                    frames: [first.ack.frame, first.segment.frame],
                };
                Some(((c.queued_s * 1e6).round() as u64, evidence))
            }),
        };
        let budget = self
            .budget
            .unwrap_or_else(|| self.opening.budget((self.first_us, self.start.frame)))
            .close(self.last_us, self.last_frame, &Paths::of(&self.seq), named);
        let answerer = self.first_sender.map(|o| o.peer());
        let slow_answers = answerer.zip(self.answers.as_ref().and_then(|a| a.median_us()));
        let opened = self.opening.opened(self.first_us, self.synack);
        let mut verdict = verdict::verdict(
            &sides,
            &self.found,
            ack_timer,
            &path,
            slow_answers,
            duration_us,
            opened,
        );
        verdict.extend(ack_clocked.iter().map(verdict::clocked));
        verdict.extend(sender_holds.iter().map(verdict::sender_hold));
        let mut findings: Vec<_> = ack_clocked
            .iter()
            .map(verdict::clocked_finding)
            .chain(sender_holds.iter().map(verdict::sender_hold_finding))
            .chain(self.waits.map(|w| w.findings(&sides)).unwrap_or_default())
            .collect();
        findings.extend(verdict::budget_findings(&budget));
        if self.found.stall_count == 0 {
            let handshake = self.syn && self.synack;
            let clauses = [
                verdict::first_wait(&budget, &sides, handshake),
                verdict::most_waited(&budget, &sides, opened),
            ];
            if let Some(line) = verdict.first_mut() {
                for clause in clauses.into_iter().flatten() {
                    *line += &format!("; {clause}");
                }
            }
        }
        FlowReport {
            index: self.index,
            sides,
            packets: self.packets,
            exchanges: self.exchanges,
            start: self.start,
            duration_s,
            handshake: self.syn && self.synack,
            rtt_ms,
            capture_point,
            far_rtt_ms: sequence::far_round_trip_us(&self.seq).map(|us| us as f64 / 1000.0),
            stall_count: self.found.stall_count,
            stalls: self.found.stalls,
            stalled_share: if duration_s > 0.0 {
                (stalled_s / duration_s).min(1.0)
            } else {
                0.0
            },
            stalled_s,
            worst_stall_ms: client.worst_us.max(server.worst_us) as f64 / 1000.0,
            ack_timer,
            delayed_ack_count: self.found.delayed_count,
            delayed_acks: self.found.delayed,
            ack_clocked,
            sender_holds,
            findings,
            budget,
            verdict,
            timeline: self.timeline.unwrap_or_default(),
        }
    }
}
