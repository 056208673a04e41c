//! Whose turn it was on a connection, from the sampling backend's looks (issue 51): the time
//! its program took to write after reading the peer's data (a server answering a request),
//! and the time it waited, after writing, for the peer's data (a client waiting for an
//! answer, the round trip included), from `tcp_info`'s times since data last arrived and last
//! left (`tcpi_last_data_recv`, `tcpi_last_data_sent`: milliseconds, at the kernel's tick).
//!
//! A look sees only the last arrival and the last departure, so of the turns that ended
//! between two looks it counts the last one; and a turn's end is the last write (or
//! arrival) before the look, not the first. The sampling backend looks at a busy socket
//! every refresh, so a turn as long as a refresh or longer is counted whole (within a tick);
//! of shorter ones, one a look: their mean is a sample's, their total a part. The eBPF
//! backend counts every turn at the program's own reads and writes instead
//! (`turn_read`, `turn_sent` in watch/bpf/holds.bpf.c).

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
        }
    }

    /// Its times, settled against the look `before`: the kernel counts them in ticks (4 ms at
    /// HZ=250), so one arrival read at two looks can come out a tick apart, one read a tick
    /// early can seem to come before `before`, and an arrival and a departure in one tick
    /// come out equal. Where no data segment came (or went) since `before`, the arrival (or
    /// departure) is `before`'s; where one did, it is after `before`: so each moves only when
    /// data did, and one that moved since is after one that did not. Where both moved in one
    /// tick, the turn open at `before` is taken to have ended and another of the same side to
    /// have begun (a server's answer, then the next request: its turn again), as on a
    /// connection whose turns are longer than a tick.
    fn settled(mut self, before: &Look) -> Look {
        if let (Some((came, went)), Some((came_before, went_before))) = (self.segs, before.segs) {
            // (A time read in ticks can come out up to a tick early: one that moved since
            // `before` was after it.)
            let since = |t: u64| t.clamp(before.at_us + 1, self.at_us.max(before.at_us + 1));
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
            if came != came_before && went != went_before && self.recv_us == self.sent_us {
                if before.recv_us > before.sent_us {
                    self.recv_us += 1;
                } else if before.sent_us > before.recv_us {
                    self.sent_us += 1;
                }
            }
        }
        self
    }
}

/// A socket's turns, look by look.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Turns {
    last: Option<Look>,
    /// Data arrived or left between the last two looks.
    moved: bool,
}

impl Turns {
    /// What `now` adds: each side's time in turns since the last look (the open turn's part
    /// included, as far as the look) and its turns ended. A first look counts from
    /// `from_us` (a socket made while watching: from its birth, with no turn open then), or
    /// is the baseline (`None`).
    pub(crate) fn look(&mut self, now: Look, from_us: Option<u64>) -> Turned {
        // (A socket made while watching had sent and received no data at its birth.)
        let before = self.last.or(from_us.map(|t| Look {
            at_us: t,
            recv_us: 0,
            sent_us: 0,
            segs: Some((0, 0)),
        }));
        let Some(p) = before else {
            self.last = Some(now);
            self.moved = false;
            return Turned::default();
        };
        let now = now.settled(&p);
        self.last = Some(now);
        self.moved = now.recv_us > p.at_us || now.sent_us > p.at_us;
        // The program's turns begin with the peer's data and end with its write; the peer's,
        // the other way round.
        let (own_us, own) = side(
            (p.at_us, p.recv_us, p.sent_us),
            (now.at_us, now.recv_us, now.sent_us),
        );
        let (peer_us, peer) = side(
            (p.at_us, p.sent_us, p.recv_us),
            (now.at_us, now.sent_us, now.recv_us),
        );
        Turned {
            own_us,
            own,
            peer_us,
            peer,
        }
    }
}

impl Turns {
    /// Whether the last look found the connection in use, so that the sampling backend goes
    /// on looking at it: data moved since the look before, or the turn its side waits on is
    /// open (a server's own: it has a request and has not answered; a client's peer's: it
    /// waits for an answer). Idle connections are not (a server waiting for requests, a
    /// client that has its answers).
    pub(crate) fn in_use(&self, serves: bool) -> bool {
        let Some(l) = self.last else {
            return false;
        };
        let waiting_on = if serves {
            l.recv_us > l.sent_us
        } else {
            l.sent_us > l.recv_us
        };
        self.moved || waiting_on
    }
}

/// One side's time (µs) and turns ended between two looks `(at, began, ended)`: `began` the
/// last event that opens its turn, `ended` the last that ends one. A turn is open at a look
/// when it began after the last end. Between two looks only the last of each is known, so a
/// turn that ended is taken to end at the last end (a chain of turns shorter than the looks'
/// spacing comes back as one).
fn side(
    (p_at, p_began, p_ended): (u64, u64, u64),
    (at, began, ended): (u64, u64, u64),
) -> (u64, u64) {
    let was_open = p_began > p_ended;
    let open = began > ended;
    let (mut us, mut turns) = (0, 0);
    if ended > p_at {
        if was_open {
            // The turn open at the last look ended (others may have begun since).
            (us, turns) = (ended - p_at, 1);
        } else if !open && began > p_at {
            // Its last turn began and ended since the last look.
            (us, turns) = (ended - began, 1);
        }
    }
    if open {
        // Open now: from its start, or from the last look if it was open then (counted so
        // far), to this look.
        us += at.saturating_sub(began.max(p_at));
    }
    (us, turns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(at_ms: u64, recv_ms: u64, sent_ms: u64) -> Look {
        Look {
            at_us: at_ms * 1000,
            recv_us: recv_ms * 1000,
            sent_us: sent_ms * 1000,
            segs: None,
        }
    }

    #[test]
    fn a_server_s_answer_is_its_turn_and_the_client_s_wait_the_peer_s() {
        // A server's socket: a request at 1,000 ms, its answer 150 ms later; looks every
        // 100 ms.
        let mut t = Turns::default();
        assert_eq!(
            t.look(look(950, 0, 500), None),
            Turned::default(),
            "a baseline"
        );
        let a = t.look(look(1050, 1000, 500), None);
        assert_eq!((a.own_us, a.own), (50_000, 0), "open: its part so far");
        let b = t.look(look(1150, 1000, 1150), None);
        assert_eq!(
            (b.own_us, b.own),
            (100_000, 1),
            "ended: the rest, and one turn"
        );
        let c = t.look(look(1250, 1000, 1150), None);
        assert_eq!((c.own_us, c.own), (0, 0));
        // The peer's side of the same looks: the idle before the request is the peer's turn.
        assert_eq!(
            (a.peer_us, a.peer),
            (50_000, 1),
            "the peer's turn (the idle before the request) ended: its part since the last look"
        );
        assert_eq!((b.peer_us, b.peer), (0, 0));
        assert_eq!((c.peer_us, c.peer), (100_000, 0));

        // The client's socket, the other way round: it waits from its request to the answer.
        // Its last answer came at 600 ms; its request leaves at 1,000, the answer at 1,150.
        let mut t = Turns::default();
        t.look(look(950, 600, 500), None);
        let w = t.look(look(1160, 1150, 1000), None);
        assert_eq!((w.peer_us, w.peer), (150_000, 1));
        // Its own turn from 600 ended at its request (50 ms after the last look), and another
        // began at the answer.
        assert_eq!((w.own_us, w.own), (60_000, 1));
    }

    #[test]
    fn turns_between_two_looks_count_their_last_and_streams_none() {
        let mut t = Turns::default();
        t.look(look(1000, 900, 950), None);
        // Three exchanges between the looks: the last one (1,180 to 1,190) counts.
        let n = t.look(look(1200, 1180, 1190), None);
        assert_eq!((n.own_us, n.own), (10_000, 1));
        // A socket only receiving (an upload): its turn opens at each arrival, so only the
        // time since the last one counts.
        let mut t = Turns::default();
        t.look(look(1000, 999, 10), None);
        let u = t.look(look(1100, 1098, 10), None);
        assert_eq!((u.own_us, u.own, u.peer_us, u.peer), (2_000, 0, 0, 0));
        // A socket only sending: the same, on the peer's side.
        let mut t = Turns::default();
        t.look(look(1000, 10, 999), None);
        let s = t.look(look(1100, 10, 1099), None);
        assert_eq!((s.own_us, s.peer_us, s.peer), (0, 1_000, 0));
    }

    #[test]
    fn a_socket_made_while_watching_counts_from_its_birth() {
        let mut t = Turns::default();
        // Born at 1,000 ms; it sent a request at 1,001 and got the answer at 1,201.
        let first = t.look(look(1250, 1201, 1001), Some(1_000_000));
        assert_eq!((first.peer_us, first.peer), (200_000, 1));
        assert_eq!((first.own_us, first.own), (49_000, 0));
        // Once looked at, the birth is no longer used.
        let next = t.look(look(1300, 1201, 1001), Some(1_000_000));
        assert_eq!((next.own_us, next.peer), (50_000, 0));
    }

    #[test]
    fn connections_in_use_are_looked_at_and_idle_ones_not() {
        let mut t = Turns::default();
        assert!(!t.in_use(true), "never looked at");
        t.look(look(1000, 900, 950), None);
        assert!(!t.in_use(true), "a baseline: a server that answered, idle");
        // A request came: the server's turn is open, and data moved.
        t.look(look(1100, 1050, 950), None);
        assert!(t.in_use(true));
        // Still thinking: nothing moved, but its turn is open.
        t.look(look(1200, 1050, 950), None);
        assert!(t.in_use(true), "a server answering");
        assert!(!t.in_use(false), "a client that has its answer");
        // Answered, then idle.
        t.look(look(1300, 1050, 1250), None);
        assert!(t.in_use(true), "moved");
        t.look(look(1400, 1050, 1250), None);
        assert!(!t.in_use(true), "a server waiting for requests");
        assert!(t.in_use(false), "a client waiting for an answer");
    }

    #[test]
    fn times_move_only_with_data_and_one_tick_is_ordered_by_it() {
        let seg = |l: Look, came, went| Look {
            segs: Some((came, went)),
            ..l
        };
        // A server's first look: its request came in the tick its handshake ended, and it
        // has sent no data: its turn is open.
        let mut t = Turns::default();
        let first = t.look(seg(look(400, 300, 300), 1, 0), Some(380_000));
        // (From its birth: an arrival before it is taken as a µs after it.)
        assert_eq!((first.own_us, first.own), (19_999, 0));
        assert!(t.in_use(true));
        // It answered, and the next request came, in one tick: the open turn ended, and
        // another began.
        let next = t.look(seg(look(500, 450, 450), 2, 1), None);
        // (50 ms, and 50 ms open, less the µs that orders the two.)
        assert_eq!((next.own_us, next.own), (99_999, 1));
        assert!(t.in_use(true), "data moved");
        let answered = t.look(seg(look(600, 450, 590), 2, 2), None);
        assert_eq!((answered.own_us, answered.own), (90_000, 1));
        // A request and its answer in one tick, after an idle time: a turn of no length;
        // then idle, though the kernel's ticks read its times 2 ms later.
        let mut t = Turns::default();
        t.look(seg(look(400, 300, 350), 1, 1), None);
        let quick = t.look(seg(look(500, 450, 450), 2, 2), None);
        assert_eq!((quick.own_us, quick.own), (1, 1), "the µs that orders them");
        let idle = t.look(seg(look(600, 452, 452), 2, 2), None);
        assert_eq!((idle.own_us, idle.own), (0, 0));
        assert_eq!(
            (idle.peer_us, idle.peer),
            (100_000, 0),
            "it waits for a request"
        );
        assert!(!t.in_use(true), "an idle server once its answer went");
        // A thinking server read a tick late is still thinking since its request.
        let mut t = Turns::default();
        t.look(seg(look(400, 390, 300), 1, 0), None);
        let late = t.look(seg(look(500, 386, 300), 1, 0), None);
        assert_eq!((late.own_us, late.own), (100_000, 0));
        // Its answer and the next request, 1 ms after the last look, read a tick early (as
        // if before it): the turn ended after that look, and another began.
        let next = t.look(seg(look(502, 498, 498), 2, 1), None);
        assert_eq!(next.own, 1, "{next:?}");
        assert!(t.in_use(true));
    }

    #[test]
    fn a_look_reads_tcp_info_s_times_since() {
        let mut info = TcpInfo::default();
        info.last_data_recv_ms = 150;
        info.last_data_sent_ms = 20;
        info.data_segs_in = Some(4);
        info.data_segs_out = Some(3);
        assert_eq!(
            Look::of(1_000_000, &info),
            Look {
                segs: Some((4, 3)),
                ..look(1000, 850, 980)
            }
        );
        // Times from before the watch's clock began are its start.
        info.last_data_recv_ms = 5_000;
        assert_eq!(Look::of(1_000_000, &info).recv_us, 0);
    }
}
