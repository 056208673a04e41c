//! Whose turn it was on a connection, from the sampling backend's looks (issue 51): the time
//! its program took to write after the peer's data arrived (a server answering a request),
//! and the time it waited, after writing, for the peer's data (a client waiting for an
//! answer, the round trip included), from `tcp_info`'s times since data last arrived and last
//! left (`tcpi_last_data_recv`, `tcpi_last_data_sent`: milliseconds, counted in the kernel's
//! ticks) and its counts of data segments each way.
//!
//! A look sees only the last arrival and the last departure. So a turn counts from the
//! arrival (or departure) that opened it to the last departure (or arrival) before the look
//! that found it over; of several turns that end between two looks only the last is known,
//! and where the end of an earlier one is not, it is taken at the earlier look (never later:
//! the peer's time between is not counted as the program's). Looks come every `--interval`
//! (2 ms) while a connection is in use ([`Turns::in_use`]), so a turn as long as a few ticks
//! or longer is counted whole, within a tick. The eBPF backend counts every turn at the
//! program's own reads and writes instead (`turn_read` and `send_done` in
//! watch/bpf/holds.bpf.c).

use nagless::TcpInfo;

use crate::waits::Turned;

/// One look at a socket: when, when its peer's data last arrived and its own last left (µs,
/// on one clock), and the data segments it had received and sent (none before Linux 4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Look {
    pub(crate) at_us: u64,
    pub(crate) recv_us: u64,
    pub(crate) sent_us: u64,
    pub(crate) segs: Option<(u32, u32)>,
    /// Its arrival and departure fell in one tick and were put in order by a guess
    /// ([`settled`](Look::settled)): the turn it shows open has no age worth telling.
    pub(crate) guessed: bool,
}

/// Which side held the turn at a look, and since when (µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// The program: data arrived after its last departure.
    Own(u64),
    /// The peer: its data left after the last arrival.
    Peer(u64),
    /// Neither known: nothing moved yet, or an arrival and a departure in one tick with
    /// nothing to order them.
    Unknown,
}

impl Look {
    /// `info` read at `at_us`.
    pub(crate) fn of(at_us: u64, info: &TcpInfo) -> Look {
        let ago = |ms: u32| at_us.saturating_sub(u64::from(ms) * 1000);
        Look {
            at_us,
            recv_us: ago(info.last_data_recv_ms),
            sent_us: ago(info.last_data_sent_ms),
            segs: info.data_segs_in.zip(info.data_segs_out),
            guessed: false,
        }
    }

    /// Whether it ever sent data (as far as it tells) and ever received some.
    fn moved_each_way(&self) -> (bool, bool) {
        match self.segs {
            Some((came, went)) => (went > 0, came > 0),
            None => (self.sent_us > 0, self.recv_us > 0),
        }
    }

    fn holder(&self) -> Holder {
        match self.recv_us.cmp(&self.sent_us) {
            std::cmp::Ordering::Greater => Holder::Own(self.recv_us),
            std::cmp::Ordering::Less => Holder::Peer(self.sent_us),
            std::cmp::Ordering::Equal => Holder::Unknown,
        }
    }

    /// Its times, settled against the look `before`: the kernel counts them in ticks (4 ms at
    /// HZ=250), so one arrival read at two looks can come out a tick apart, one read a tick
    /// early can seem to come before `before`, and an arrival and a departure in one tick
    /// come out equal. Where no data segment came (or went) since `before`, the arrival (or
    /// departure) is `before`'s; where one did, it is after `before`: so each moves only when
    /// data did, and one that moved since is after one that did not. Where both moved in one
    /// tick, the side that held the turn at `before` is taken to hold it again (a server's
    /// answer, then the next request: its turn again), as on a connection whose turns are
    /// longer than a tick; where neither did, the side whose data came more since.
    fn settled(mut self, before: &Look) -> Look {
        let (Some((came, went)), Some((came_before, went_before))) = (self.segs, before.segs)
        else {
            return self;
        };
        // (Within the two looks: after `before`, and never after this one.)
        let since = |t: u64| t.clamp((before.at_us + 1).min(self.at_us), self.at_us);
        self.recv_us = if came == came_before {
            before.recv_us
        } else {
            since(self.recv_us)
        };
        self.sent_us = if went == went_before {
            before.sent_us
        } else {
            since(self.sent_us)
        };
        if came == came_before && went == went_before {
            // (Nothing moved: an order guessed then stands as a guess.)
            self.guessed = before.guessed;
        }
        if came != came_before && went != went_before && self.recv_us == self.sent_us {
            // (Else by the segments each way since: more in than out ends with an arrival,
            // as a request after its answer does.)
            let (ins, outs) = (
                came.wrapping_sub(came_before),
                went.wrapping_sub(went_before),
            );
            let arrival_last = match before.holder() {
                Holder::Own(_) => Some(true),
                Holder::Peer(_) => Some(false),
                Holder::Unknown if ins > outs => Some(true),
                Holder::Unknown if outs > ins => Some(false),
                Holder::Unknown => None,
            };
            if let Some(arrival_last) = arrival_last {
                self.order(before.at_us, arrival_last);
            }
        }
        self
    }

    /// Puts its arrival and departure, equal, in order (`arrival_last`: the arrival after),
    /// a µs apart, both still after `before_at` and no later than the look.
    fn order(&mut self, before_at: u64, arrival_last: bool) {
        let v = self.recv_us;
        let (last, first) = if arrival_last {
            (&mut self.recv_us, &mut self.sent_us)
        } else {
            (&mut self.sent_us, &mut self.recv_us)
        };
        if v < self.at_us {
            *last = v + 1;
        } else if v > before_at + 1 {
            *first = v - 1;
        } else {
            return;
        }
        self.guessed = true;
    }
}

/// A socket's turns, look by look.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Turns {
    last: Option<Look>,
    /// Turns ended between the last two looks.
    ended: bool,
}

/// How long a turn open keeps a connection in use ([`Turns::in_use`]), µs: a server thinking
/// is followed this long, then found again by the look that sees its answer leave.
const OPEN_IN_USE_US: u64 = 2_000_000;

impl Turns {
    /// The turns that ended since the last look (time and counts), and those open at `now`
    /// (their ages: states, not counts). A first look counts from `from_us` (a socket made
    /// while watching: from its birth, with no data moved then), or is the baseline (`None`).
    pub(crate) fn look(&mut self, now: Look, from_us: Option<u64>) -> Turned {
        // (No time after the look itself: a kernel's reading never says so, but it is not
        // trusted to.)
        let now = Look {
            recv_us: now.recv_us.min(now.at_us),
            sent_us: now.sent_us.min(now.at_us),
            ..now
        };
        let before = self.last.or(from_us.map(|t| Look {
            at_us: t,
            recv_us: 0,
            sent_us: 0,
            segs: Some((0, 0)),
            guessed: false,
        }));
        let Some(p) = before else {
            self.last = Some(now);
            self.ended = false;
            return Turned::default();
        };
        if now.at_us <= p.at_us {
            // No time since the last look (a socket looked up and freed in one sample): it
            // says nothing new.
            return Turned::default();
        }
        let now = now.settled(&p);
        self.last = Some(now);
        // The program's turns begin with the peer's data and end with its write; the peer's,
        // the other way round.
        let (own_us, own) = ended((p.at_us, p.recv_us, p.sent_us), (now.recv_us, now.sent_us));
        let (peer_us, peer) = ended((p.at_us, p.sent_us, p.recv_us), (now.sent_us, now.recv_us));
        self.ended = own + peer > 0;
        // The age of the turn open: not of a turn whose order was a guess, nor on a stream
        // one way (a sink that never answers holds no request; a client that never had an
        // answer waits for none).
        let (sent_ever, received_ever) = now.moved_each_way();
        let (own_open_us, peer_open_us) = match now.holder() {
            _ if now.guessed => (0, 0),
            Holder::Own(t) if sent_ever => (now.at_us.saturating_sub(t), 0),
            Holder::Peer(t) if received_ever => (0, now.at_us.saturating_sub(t)),
            _ => (0, 0),
        };
        Turned {
            own_us,
            own,
            peer_us,
            peer,
            own_open_us,
            peer_open_us,
        }
    }

    /// Whether the last look found the connection in use, so that the sampling backend goes
    /// on looking at it: a turn ended since the look before, or the turn its side waits on
    /// opened within [`OPEN_IN_USE_US`] (a server with a request it has not answered, a
    /// client waiting for an answer), or data arrived and left in one tick that recently
    /// (an answer and the next request, at a first look). Idle connections are not (a server
    /// waiting for requests, a client that has its answers), nor streams one way (no turn
    /// ends) once their turn is old.
    pub(crate) fn in_use(&self, serves: bool) -> bool {
        let Some(l) = self.last else {
            return false;
        };
        // (A recent arrival and departure in one tick that nothing ordered: in use too.)
        let waiting_since = match (l.holder(), serves) {
            (Holder::Own(t), true) | (Holder::Peer(t), false) => Some(t),
            (Holder::Unknown, _) if l.recv_us > 0 => Some(l.recv_us),
            _ => None,
        };
        self.ended || waiting_since.is_some_and(|t| l.at_us.saturating_sub(t) < OPEN_IN_USE_US)
    }
}

/// One side's turns that ended between a look `(at, began, ended)` and the next `(began,
/// ended)`, where `began` is the last event that opens its turn and `ended` the last that ends
/// one: their time (µs) and count.
///
/// Invariant: the time is no more than the span from the earliest open turn's start known
/// to the last end, and a turn is counted only if its end came after the earlier look.
fn ended((p_at, p_began, p_ended): (u64, u64, u64), (began, ended): (u64, u64)) -> (u64, u64) {
    if ended <= p_at {
        return (0, 0);
    }
    let was_open = p_began > p_ended;
    // (A turn began since only if its opening event moved: one put a µs after the last look
    // by `Look::order` has not.)
    let began_since = began > p_at && began != p_began;
    let (us, turns) = if was_open && began_since && began <= ended {
        // The turn open then ended before another began and ended: the first end is not
        // known, so the first counts up to the earlier look; the last counts whole.
        (p_at.saturating_sub(p_began) + (ended - began), 2)
    } else if was_open {
        // The turn open then ended (at the last end: one end since, or an answer in pieces).
        (ended.saturating_sub(p_began), 1)
    } else if began_since && began < ended {
        // A turn began and ended since.
        (ended - began, 1)
    } else {
        (0, 0)
    };
    debug_assert!(
        us <= ended - p_began.min(began).min(ended),
        "{us} µs counted"
    );
    (us, turns)
}

#[cfg(test)]
mod tests;
