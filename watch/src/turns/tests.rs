//! Whose turn the time was, from looks at `TCP_INFO` built by hand: answers, turns between
//! looks, sockets born while watching, idle ones, one tick's order.

use super::*;

fn look(at_ms: u64, recv_ms: u64, sent_ms: u64) -> Look {
    Look {
        at_us: at_ms * 1000,
        recv_us: recv_ms * 1000,
        sent_us: sent_ms * 1000,
        segs: None,
        guessed: false,
    }
}

fn with_segs(l: Look, came: u32, went: u32) -> Look {
    Look {
        segs: Some((came, went)),
        ..l
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
    assert_eq!(
        (a.own_us, a.own, a.own_open_us),
        (0, 0, 50_000),
        "open: its age"
    );
    // (The peer's turn, the idle before the request, ended: from 500 ms.)
    assert_eq!((a.peer_us, a.peer), (500_000, 1));
    let b = t.look(look(1150, 1000, 1150), None);
    assert_eq!(
        (b.own_us, b.own, b.own_open_us),
        (150_000, 1, 0),
        "ended whole"
    );
    assert_eq!(b.peer_open_us, 0, "answered in the tick of the look");
    let c = t.look(look(1250, 1000, 1150), None);
    assert_eq!((c.own_us, c.own), (0, 0));
    assert_eq!((c.peer_us, c.peer, c.peer_open_us), (0, 0, 100_000));

    // The client's socket: its last answer came at 600 ms; its request leaves at 1,000,
    // the answer at 1,150.
    let mut t = Turns::default();
    t.look(look(950, 600, 500), None);
    let w = t.look(look(1160, 1150, 1000), None);
    assert_eq!((w.peer_us, w.peer), (150_000, 1));
    // Its own turn from 600 ended at its request; another began at the answer.
    assert_eq!((w.own_us, w.own, w.own_open_us), (400_000, 1, 10_000));
}

#[test]
fn turns_between_two_looks_count_their_last_and_never_the_peer_s_time() {
    let mut t = Turns::default();
    t.look(look(1000, 900, 950), None);
    // Exchanges between the looks: the last one (1,180 to 1,190) counts.
    let n = t.look(look(1200, 1180, 1190), None);
    assert_eq!((n.own_us, n.own), (10_000, 1));
    // A turn open at the look (from 1,300), an answer at 1,310, the peer's 10 ms, the
    // next request at 1,320 and its answer at 1,330: two turns; the first's end is not
    // known, so it counts to the look (5 ms), never the peer's 10 ms.
    let mut t = Turns::default();
    t.look(look(1305, 1300, 1200), None);
    let two = t.look(look(1335, 1320, 1330), None);
    assert_eq!((two.own_us, two.own), (15_000, 2));
    // A socket only receiving (an upload): no turn of its own ends.
    let mut t = Turns::default();
    t.look(look(1000, 999, 10), None);
    let u = t.look(look(1100, 1098, 10), None);
    assert_eq!((u.own_us, u.own, u.peer_us, u.peer), (0, 0, 0, 0));
    assert_eq!(u.own_open_us, 2_000, "its turn reopens at each arrival");
    // A socket only sending: the same, on the peer's side.
    let mut t = Turns::default();
    t.look(look(1000, 10, 999), None);
    let s = t.look(look(1100, 10, 1099), None);
    assert_eq!(
        (s.own_us, s.own, s.peer_us, s.peer, s.peer_open_us),
        (0, 0, 0, 0, 1_000)
    );
}

#[test]
fn a_socket_made_while_watching_counts_from_its_birth() {
    let mut t = Turns::default();
    // Born at 1,000 ms; it sent a request at 1,001 and got the answer at 1,201.
    let first = t.look(look(1250, 1201, 1001), Some(1_000_000));
    assert_eq!((first.peer_us, first.peer), (200_000, 1));
    assert_eq!((first.own_us, first.own, first.own_open_us), (0, 0, 49_000));
    // Once looked at, the birth is no longer used.
    let next = t.look(look(1300, 1201, 1001), Some(1_000_000));
    assert_eq!((next.peer, next.own, next.own_open_us), (0, 0, 99_000));
}

#[test]
fn connections_in_use_are_looked_at_and_idle_ones_not() {
    let mut t = Turns::default();
    assert!(!t.in_use(true), "never looked at");
    t.look(look(1000, 900, 950), None);
    assert!(!t.in_use(true), "a baseline: a server that answered, idle");
    // A request came: the server's turn is open (and the peer's ended).
    t.look(look(1100, 1050, 950), None);
    assert!(t.in_use(true));
    // Still thinking: nothing ended, but its turn is open, and young.
    t.look(look(1200, 1050, 950), None);
    assert!(t.in_use(true), "a server answering");
    assert!(!t.in_use(false), "a client that has its answer");
    // Thinking for over 2 s: no longer followed.
    t.look(look(3100, 1050, 950), None);
    assert!(!t.in_use(true));
    // Answered, then idle.
    t.look(look(3200, 1050, 3150), None);
    assert!(t.in_use(true), "a turn ended");
    t.look(look(3300, 1050, 3150), None);
    assert!(!t.in_use(true), "a server waiting for requests");
    assert!(t.in_use(false), "a client waiting for an answer");
    // A stream in: its own turn reopens at each arrival, and no turn ends.
    let mut t = Turns::default();
    t.look(with_segs(look(1000, 999, 10), 100, 1), None);
    t.look(with_segs(look(1002, 1001, 10), 101, 1), None);
    assert!(t.in_use(true), "its turn is young");
    assert!(!t.in_use(false), "as a client, its wait is not open");
    // A first look at a pooled connection between an answer and the next request, both
    // in one tick: in use; the same two seconds later, idle.
    let mut t = Turns::default();
    t.look(with_segs(look(5000, 4990, 4990), 30, 30), None);
    assert!(t.in_use(true) && t.in_use(false));
    t.look(with_segs(look(7000, 4992, 4992), 30, 30), None);
    assert!(!t.in_use(true) && !t.in_use(false));
}

#[test]
fn times_move_only_with_data_and_one_tick_is_ordered_by_it() {
    // A server's first look: its request came in the tick its handshake ended, and it
    // has sent no data: its turn is open (since its birth, as far as the watch knows).
    let mut t = Turns::default();
    let first = t.look(with_segs(look(400, 300, 300), 1, 0), Some(380_000));
    // (No age told: it has sent no data yet, as a sink that never answers has not.)
    assert_eq!((first.own, first.own_open_us, first.peer), (0, 0, 0));
    assert!(t.in_use(true));
    // It answered, and the next request came, in one tick: the open turn ended, and
    // another began.
    let next = t.look(with_segs(look(500, 450, 450), 2, 1), None);
    assert_eq!((next.own_us, next.own), (69_999, 1), "from 380.001 to 450");
    assert_eq!(next.own_open_us, 0, "an order guessed: no age told");
    assert!(t.in_use(true), "a turn ended");
    let answered = t.look(with_segs(look(600, 450, 590), 2, 2), None);
    assert_eq!((answered.own_us, answered.own), (139_999, 1));
    // A request and its answer in one tick, after an idle time: a turn of a µs (the one
    // that orders them); then idle, though the kernel's ticks read its times 2 ms later.
    let mut t = Turns::default();
    t.look(with_segs(look(400, 300, 350), 1, 1), None);
    let quick = t.look(with_segs(look(500, 450, 450), 2, 2), None);
    assert_eq!((quick.own_us, quick.own), (1, 1));
    let idle = t.look(with_segs(look(600, 452, 452), 2, 2), None);
    assert_eq!((idle.own_us, idle.own, idle.own_open_us), (0, 0, 0));
    assert_eq!(idle.peer_open_us, 0, "its order a guess: no age told");
    assert!(!t.in_use(true), "an idle server once its answer went");
    // Both moved in one tick at a first look with nothing to order them: no turn.
    let mut t = Turns::default();
    let tie = t.look(with_segs(look(400, 300, 300), 1, 1), Some(200_000));
    assert_eq!(
        (tie.own, tie.peer, tie.own_open_us, tie.peer_open_us),
        (0, 0, 0, 0)
    );
    // A pooled connection's first look: nothing known before; thirteen requests in and
    // twelve answers out since, the last two in one tick: a request waits.
    let mut t = Turns::default();
    t.look(with_segs(look(100, 0, 0), 1, 1), None);
    let pooled = t.look(with_segs(look(2109, 2105, 2105), 14, 13), None);
    assert_eq!(pooled.own_open_us, 0, "a guess: no age told");
    let answered = t.look(with_segs(look(2260, 2105, 2257), 14, 14), None);
    assert_eq!((answered.own, answered.own_us), (1, 151_999));
    // A thinking server read a tick late is still thinking since its request.
    let mut t = Turns::default();
    t.look(with_segs(look(400, 390, 300), 2, 1), None);
    let late = t.look(with_segs(look(500, 386, 300), 2, 1), None);
    assert_eq!((late.own, late.own_open_us), (0, 110_000));
    // Its answer and the next request, 1 ms after the last look, read a tick early (as
    // if before it): the turn ended after that look, and another began.
    let next = t.look(with_segs(look(502, 498, 498), 3, 2), None);
    assert_eq!(next.own, 1, "{next:?}");
    assert!(t.in_use(true));
}

#[test]
fn a_guess_in_the_tick_of_a_look_makes_no_second_turn() {
    // A look at 1,000 ms with an answer and the next request in its own tick (both read
    // as 1,000), then the next answer before the look at 1,002: one turn, not two.
    let mut t = Turns::default();
    t.look(with_segs(look(990, 985, 980), 5, 4), None);
    let tied = t.look(with_segs(look(1000, 1000, 1000), 6, 5), None);
    assert_eq!(tied.own, 1, "the turn open at 990 ended");
    let next = t.look(with_segs(look(1002, 1000, 1002), 6, 6), None);
    assert_eq!((next.own, next.own_us), (1, 2_000), "{next:?}");
    // Nothing moved after a guess: the turn shown open has no age, however long.
    let mut t = Turns::default();
    t.look(with_segs(look(990, 985, 980), 5, 4), None);
    t.look(with_segs(look(1000, 1000, 1000), 6, 5), None);
    let idle = t.look(with_segs(look(9000, 1000, 1000), 6, 5), None);
    assert_eq!((idle.own_open_us, idle.peer_open_us), (0, 0));
}

#[test]
fn a_stream_one_way_holds_no_request() {
    // A sink that never answers: its own turn is always open, but it holds no request.
    let mut t = Turns::default();
    t.look(with_segs(look(1000, 999, 0), 100, 0), None);
    let sink = t.look(with_segs(look(3000, 2999, 0), 300, 0), None);
    assert_eq!((sink.own_open_us, sink.own), (0, 0));
    // The client pushing to it waits for no answer.
    let mut t = Turns::default();
    t.look(with_segs(look(1000, 0, 999), 0, 100), None);
    let pusher = t.look(with_segs(look(3000, 0, 2999), 0, 300), None);
    assert_eq!((pusher.peer_open_us, pusher.peer), (0, 0));
    // A server that has answered before and holds a request: its age is told.
    let mut t = Turns::default();
    t.look(with_segs(look(1000, 999, 900), 10, 9), None);
    let held = t.look(with_segs(look(3000, 999, 900), 10, 9), None);
    assert_eq!(held.own_open_us, 2_001_000);
}

#[test]
fn a_second_look_in_the_same_microsecond_says_nothing() {
    let mut t = Turns::default();
    t.look(with_segs(look(100, 50, 60), 1, 1), None);
    let same = t.look(with_segs(look(100, 100, 90), 2, 2), None);
    assert_eq!(same, Turned::default());
    let next = t.look(with_segs(look(101, 100, 90), 2, 2), None);
    assert!(next.own_open_us <= 1_000, "{next:?}");
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
        with_segs(look(1000, 850, 980), 4, 3)
    );
    // Times from before the watch's clock began are its start.
    info.last_data_recv_ms = 5_000;
    assert_eq!(Look::of(1_000_000, &info).recv_us, 0);
}

mod generated {
    use super::*;
    use proptest::prelude::*;

    /// The kernel's `tcp_info` at `at` (µs) of a connection whose data arrived at
    /// `arrivals` and left at `departures`: its times since, in ticks of 4 ms
    /// (`jiffies_to_msecs` of a difference of jiffies), and its segment counts.
    fn info_at(at: u64, arrivals: &[u64], departures: &[u64]) -> TcpInfo {
        let tick = |t: u64| t / 4_000;
        let ago = |events: &[u64]| {
            events
                .iter()
                .rev()
                .find(|&&e| e <= at)
                .map_or(at / 1000, |&e| ((tick(at) - tick(e)) * 4) as u32 as u64) as u32
        };
        let mut i = TcpInfo::default();
        i.last_data_recv_ms = ago(arrivals);
        i.last_data_sent_ms = ago(departures);
        i.data_segs_in = Some(arrivals.iter().filter(|&&e| e <= at).count() as u32);
        i.data_segs_out = Some(departures.iter().filter(|&&e| e <= at).count() as u32);
        i
    }

    proptest! {
        /// Any looks at all, in any order, with any times and counts (a kernel's
        /// readings, a clock that stood still, a socket looked up and freed in one
        /// sample): no panic, no turn time longer than the looks' span, and open turns no
        /// older than the clock.
        #[test]
        fn any_looks_are_taken_without_a_fault(
            looks in proptest::collection::vec(
                (0u64..10_000_000, 0u64..10_000_000, 0u64..10_000_000,
                 proptest::option::of((0u32..50, 0u32..50))),
                1..40),
            from in proptest::option::of(0u64..10_000_000),
        ) {
            let mut t = Turns::default();
            let span = looks.iter().map(|l| l.0).max().unwrap_or(0) + 1;
            for (at_us, recv_us, sent_us, segs) in looks {
                let got = t.look(Look { at_us, recv_us, sent_us, segs, guessed: false }, from);
                prop_assert!(got.own_us <= span && got.peer_us <= span, "{:?}", got);
                prop_assert!(got.own_open_us <= at_us && got.peer_open_us <= at_us);
                let _ = t.in_use(true) || t.in_use(false);
            }
        }


        /// A server answering requests, each turn and each pause 10 ms or longer, looked
        /// at every 2 ms or so: every answer is counted once, and the time within a tick
        /// each way of the truth per turn.
        #[test]
        fn every_turn_longer_than_a_few_ticks_is_counted_once(
            turns in proptest::collection::vec((10_000u64..200_000, 10_000u64..200_000), 1..12),
            spacing in 1_500u64..2_500,
        ) {
            let (mut arrivals, mut departures) = (Vec::new(), Vec::new());
            let mut t = 1_000_000u64;
            let mut truth = 0;
            for (think, pause) in &turns {
                arrivals.push(t);
                departures.push(t + think);
                truth += think;
                t += think + pause;
            }
            let born = 999_000;
            let mut s = Turns::default();
            let (mut counted, mut n) = (0, 0);
            let mut at = born + 500;
            while at <= t {
                let got = s.look(Look::of(at, &info_at(at, &arrivals, &departures)), Some(born));
                counted += got.own_us;
                n += got.own;
                at += spacing;
            }
            prop_assert_eq!(n, turns.len() as u64);
            let slack = 2 * 4_000 * turns.len() as u64 + spacing;
            prop_assert!(counted.abs_diff(truth) <= slack, "{} µs counted of {}", counted, truth);
        }
    }
}
