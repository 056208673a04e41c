//! The ACK-clocked socket: another thread waits in a read of it (a client's reader thread),
//! so no wait of the writers ends their bursts. It is handed to the kernel's Nagle once, its
//! writes go plainly, and the flusher pushes what no ACK clocks out within a few bounds.

use super::*;
use crate::clock::{CLOCK_BACKOFF_MAX, CLOCK_LOOKS_PER_BOUND, CLOCK_UNPUSHED_LONGEST_US};

/// The time between the flusher's looks at a clocked socket under `shim()`'s configuration
/// (half its linger bound), in µs.
fn look() -> u64 {
    Config::default().linger.as_micros() as u64 / CLOCK_LOOKS_PER_BOUND
}

/// `shim()`, counting every write (statistics asked for).
fn counting_shim() -> (Shim, Fake) {
    shim_with(Config {
        counts_writes: true,
        ..Config::default()
    })
}

/// `shim()` with a reader waiting on fd 3 and a first write made there: the socket is
/// clocked, that write in flight; with a writer's list and the flusher's memory.
fn clocked() -> (Shim, Fake, ThreadBursts, FlusherState) {
    let (s, k) = shim();
    let mut w = ThreadBursts::new();
    let _ = s.read_begins(&k, 3);
    write(&s, &k, 3, &mut w);
    (s, k, w, FlusherState::default())
}

#[test]
fn behind_a_waiting_reader_the_socket_is_left_to_nagle_once() {
    let (s, k) = counting_shim();
    let mut writer = ThreadBursts::new();
    let reader = s.read_begins(&k, 3); // the reader thread, blocked in recv
    write(&s, &k, 3, &mut writer);
    assert!(!s.is_corked(3), "no burst of the shim's");
    assert_eq!(k.nodelay_clears.get(), 1, "its TCP_NODELAY came off");
    assert_eq!(k.unsent(3), 0, "nothing in flight: it went at once");
    // One in flight now: the kernel's Nagle holds the next ones for its ACK...
    write(&s, &k, 3, &mut writer);
    write(&s, &k, 3, &mut writer);
    assert_eq!(k.unsent(3), 2);
    // ...and sends them when it comes, as natively.
    k.ack(3);
    assert_eq!(k.unsent(3), 0);
    assert_eq!(k.segments(3), 2, "two writes held, one segment");
    // The reader turns to its answers: the socket stays clocked (no more setsockopt).
    s.read_ends(&k, 3, reader, true);
    write(&s, &k, 3, &mut writer);
    assert!(!s.is_corked(3));
    assert_eq!(k.nodelay_clears.get(), 1);
    assert_eq!(s.stats.clocked.load(Relaxed), 4);
    assert_eq!(s.stats.clocked_sockets.load(Relaxed), 1);
    s.release_thread(&k, &mut writer);
}

#[test]
fn without_a_reader_waiting_the_burst_is_held_as_before() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3), "held to the writer's wait");
    assert_eq!(s.stats.clocked.load(Relaxed), 0);
    s.release_thread(&k, &mut t);
    // A read that began and ended counts no more.
    let r = s.read_begins(&k, 3);
    s.read_ends(&k, 3, r, true);
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3));
    assert_eq!(k.nodelay_clears.get(), 0);
    s.release_thread(&k, &mut t);
}

#[test]
fn a_clocked_sockets_reads_count_nothing_and_a_counted_read_counts_down_once() {
    let (s, k) = shim();
    let mut w = ThreadBursts::new();
    let slot = s.slot(3).unwrap();
    let reader = s.read_begins(&k, 3);
    assert_eq!(
        slot.readers.load(Relaxed),
        1,
        "a reader of a socket not clocked"
    );
    // The socket turns; the read that began before is counted down when it ends, once...
    write(&s, &k, 3, &mut w);
    s.read_ends(&k, 3, reader, true);
    assert_eq!(slot.readers.load(Relaxed), 0);
    // ...and the reader's later reads, on the clocked socket, write no count at all.
    for _ in 0..3 {
        let r = s.read_begins(&k, 3);
        assert_eq!(slot.readers.load(Relaxed), 0);
        s.read_ends(&k, 3, r, true);
        assert_eq!(slot.readers.load(Relaxed), 0, "never below zero");
    }
    // Their common case takes loads only, and nothing is left for the read's end.
    let r = s.clocked_read(3).expect("clocked, nothing held");
    assert_eq!(r, s.read_begins(&k, 3), "the same as the full step");
    assert!(!s.read_ends_needed(r));
    assert!(s.clocked_read(4).is_none(), "not clocked");
    let step = s.clocked_write(3);
    assert!(
        step.is_some(),
        "still clocked: the count decides only the turn"
    );
    // A socket unclocked (a duplicate) counts its readers again.
    s.duplicate(&k, 3, 7);
    assert!(s.clocked_read(3).is_none());
    let r = s.read_begins(&k, 3);
    assert_eq!(slot.readers.load(Relaxed), 1);
    s.read_ends(&k, 3, r, false);
    assert_eq!(slot.readers.load(Relaxed), 0);
}

#[test]
fn the_flusher_pushes_what_no_ack_clocks_out() {
    let (s, k, mut w, mut st) = clocked(); // in flight; the peer delays its ACK
    k.now.set(100);
    write(&s, &k, 3, &mut w); // held by Nagle
    assert_eq!(k.unsent(3), 1);
    assert_eq!(
        s.held(),
        1,
        "one mark, counted: the flusher does not park on it"
    );
    // A look's time after the mark (made at 1: the clock's 0 is no mark): the flusher looks, and
    // learns how many segments left.
    k.now.set(look() + 1);
    s.flusher_tick(&k, &mut st);
    assert_eq!(k.unsent(3), 1, "a first look only");
    assert_eq!(s.held(), 1, "still watched");
    // (Segments had left before it, as far as it knows: the next look comes twice as late.)
    k.now.set(2 * look() + 1);
    s.flusher_tick(&k, &mut st);
    assert_eq!(k.unsent(3), 1, "not due yet");
    // That look: no segment has left since the last: nothing clocks it, it goes.
    k.now.set(3 * look() + 1);
    s.flusher_tick(&k, &mut st);
    assert_eq!(
        k.unsent(3),
        0,
        "pushed within two bounds, not at the peer's timer"
    );
    assert_eq!(s.held(), 0);
    assert_eq!(s.stats.linger_releases.load(Relaxed), 1);
    assert!(k.nagle.borrow().contains(&3), "and left to Nagle again");
}

#[test]
fn while_acks_clock_the_socket_the_flusher_only_looks() {
    let (s, k, mut w, mut st) = clocked();
    let nodelay_calls = k.nodelay_calls.get();
    for round in 1..=5 {
        write(&s, &k, 3, &mut w); // held behind the one in flight
        k.now.set(round * look());
        s.flusher_tick(&k, &mut st);
        k.ack(3); // the answer comes, and clocks the held write out
    }
    assert_eq!(k.nodelay_calls.get(), nodelay_calls, "never pushed");
    assert_eq!(s.stats.linger_releases.load(Relaxed), 0);
    assert_eq!(k.unsent(3), 0);
}

#[test]
fn the_programs_own_nodelay_wins_over_the_clock() {
    let (s, k, mut w, mut st) = clocked();
    write(&s, &k, 3, &mut w);
    let adopted = k.nodelay_calls.get();
    // Off where it saw off: nothing changes, the socket stays clocked.
    s.program_nodelay_begins(3);
    s.program_nodelay(&k, 3, false);
    assert!(k.nagle.borrow().contains(&3));
    assert_eq!(k.nodelay_calls.get(), adopted);
    // On: the socket is the program's; the flusher's looks never touch it again.
    s.program_nodelay_begins(3);
    k.set_nodelay(3); // the program's own call (it pushes what Nagle held)
    s.program_nodelay(&k, 3, true);
    let calls = k.nodelay_calls.get();
    k.now.set(look() + 1);
    s.flusher_tick(&k, &mut st);
    k.now.set(2 * look() + 1);
    s.flusher_tick(&k, &mut st);
    assert_eq!(k.nodelay_calls.get(), calls);
    assert_eq!(k.nodelay_clears.get(), 1);
    assert_eq!(s.held(), 0, "its mark is gone");
    write(&s, &k, 3, &mut w);
    assert_eq!(k.nodelay_clears.get(), 1, "never clocked again");
}

#[test]
fn a_program_choosing_nodelay_waits_for_a_change_of_the_shims_on_its_way() {
    let (s, k) = shim();
    let slot = s.slot(3).unwrap();
    // A flusher's push or a writer's clear is in progress...
    slot.nodelay_busy.fetch_add(1, SeqCst);
    let s = std::sync::Arc::new(s);
    let s2 = s.clone();
    let program = std::thread::spawn(move || s2.program_nodelay_begins(3));
    // ...the program's call waits (the loom model checks every interleaving; here the
    // wait ends when the change is done).
    s.slot(3).unwrap().nodelay_busy.fetch_sub(1, SeqCst);
    program.join().unwrap();
    // While it chooses, the shim changes nothing.
    assert!(!s.shims_nodelay(&k, 3, s.slot(3).unwrap(), false));
    assert_eq!(k.nodelay_clears.get(), 0);
    s.program_nodelay_failed(3);
    assert!(s.shims_nodelay(&k, 3, s.slot(3).unwrap(), false));
}

#[test]
fn a_duplicate_or_a_missing_flusher_ends_the_clock() {
    let (s, k) = shim();
    let mut w = ThreadBursts::new();
    let _ = s.read_begins(&k, 3);
    write(&s, &k, 3, &mut w);
    write(&s, &k, 3, &mut w);
    assert_eq!(k.unsent(3), 1);
    s.duplicate(&k, 3, 7);
    assert!(!k.nagle.borrow().contains(&3), "TCP_NODELAY on again");
    assert_eq!(k.unsent(3), 0, "which sent what Nagle held");
    assert_eq!(s.held(), 0);
    // Descriptors of one socket are not clocked (their bursts are the shim's).
    write(&s, &k, 3, &mut w);
    assert!(s.is_corked(3));
    s.release_thread(&k, &mut w);

    let (s, k) = shim();
    let _ = s.read_begins(&k, 4);
    write(&s, &k, 4, &mut w);
    write(&s, &k, 4, &mut w);
    s.flusher_cannot_run(&k);
    assert!(!k.nagle.borrow().contains(&4));
    assert_eq!(k.unsent(4), 0);
    assert_eq!(s.held(), 0);
}

#[test]
fn a_closed_clocked_socket_leaves_no_mark_counted() {
    let (s, k) = shim();
    let mut w = ThreadBursts::new();
    let reader = s.read_begins(&k, 3);
    write(&s, &k, 3, &mut w);
    write(&s, &k, 3, &mut w);
    assert_eq!(s.held(), 1);
    s.read_ends(&k, 3, reader, false);
    s.forget(&k, 3);
    assert_eq!(s.held(), 0);
    s.adopt(&k, 3);
    write(&s, &k, 3, &mut w);
    assert!(
        s.is_corked(3),
        "a new socket on the number starts unclocked"
    );
    s.release_thread(&k, &mut w);
}

/// Drives the clocked socket fd 3 busy from `t` for `rounds` looks' time (every tenth of a
/// look a write waits behind the one in flight, and an ACK sends it), then stops it (the peer
/// delays its ACK of one last write) and ticks until the flusher pushes. Returns the gaps
/// between the flusher's looks while it moved, and how long the last write was held.
fn busy_then_stalled(
    s: &Shim,
    k: &Fake,
    w: &mut ThreadBursts,
    st: &mut FlusherState,
    t: &mut u64,
    rounds: u64,
) -> (Vec<u64>, u64) {
    let step = look() / 10;
    let mut looks = Vec::new();
    let end = *t + rounds * look();
    while *t < end {
        *t += step;
        k.now.set(*t);
        write(s, k, 3, w);
        k.ack(3);
        let asked = k.sendings.get();
        s.flusher_tick(k, st);
        if k.sendings.get() > asked {
            looks.push(*t);
        }
    }
    let gaps = looks.windows(2).map(|w| w[1] - w[0]).collect();
    write(s, k, 3, w);
    let held_at = *t;
    while k.unsent(3) > 0 {
        *t += step;
        k.now.set(*t);
        s.flusher_tick(k, st);
        assert!(*t - held_at <= 1 << 30, "never pushed");
    }
    (gaps, *t - held_at)
}

#[test]
fn a_moving_socket_is_looked_at_less_often_and_pushed_once_it_stops() {
    let (s, k, mut w, mut st) = clocked();
    let step = look() / 10;
    let mut t = 0;
    // Never pushed yet: the looks spread out further, to `CLOCK_UNPUSHED_LONGEST_US`...
    let (gaps, held) = busy_then_stalled(&s, &k, &mut w, &mut st, &mut t, 200);
    let widest = CLOCK_UNPUSHED_LONGEST_US;
    assert!(widest > look() << CLOCK_BACKOFF_MAX);
    assert!(
        gaps.windows(2).all(|g| g[1] >= g[0])
            && gaps
                .last()
                .is_some_and(|&g| g >= widest && g <= widest + 2 * step),
        "looks spread out while the socket moves, up to {widest} µs apart: {gaps:?}"
    );
    // ...and the stall after it is pushed before the shortest delayed-ACK timer (Linux's
    // 40 ms) would send it: the flusher, not the peer, ends it, and so learns.
    assert!(held <= 2 * widest + step && held < 40_000, "held {held} µs");
    assert_eq!(s.stats.linger_releases.load(Relaxed), 1, "pushed once");
    // The next stall is pushed within a bound and a half again.
    k.ack(3);
    write(&s, &k, 3, &mut w);
    write(&s, &k, 3, &mut w);
    let held_at = t;
    while k.unsent(3) > 0 {
        t += step;
        k.now.set(t);
        s.flusher_tick(&k, &mut st);
        assert!(t - held_at <= 3 * look() + step, "held {} µs", t - held_at);
    }
    k.ack(3);
    // Pushed before: the looks of its next busy stretch spread out to `CLOCK_BACKOFF_MAX`'s
    // interval only, and its next stall waits two of those at most.
    let (gaps, held) = busy_then_stalled(&s, &k, &mut w, &mut st, &mut t, 40);
    let widest = look() << CLOCK_BACKOFF_MAX;
    assert!(
        gaps.iter().all(|&g| g <= widest + 2 * step) && gaps.last().is_some_and(|&g| g >= widest),
        "looks at most {widest} µs apart: {gaps:?}"
    );
    assert!(held <= 2 * widest + step, "held {held} µs");
}

#[test]
fn a_clocked_write_touches_no_shared_counter_unless_counts_are_asked_for() {
    for counts in [false, true] {
        let (s, k) = if counts { counting_shim() } else { shim() };
        let mut w = ThreadBursts::new();
        assert!(s.clocked_write(3).is_none(), "not clocked yet");
        let _ = s.read_begins(&k, 3);
        write(&s, &k, 3, &mut w); // the full decision: the socket turns
        let step = s.clocked_write(3).expect("clocked: the common case");
        assert!(step.needs_after(), "its mark comes after the write");
        assert!(!step.more && !step.wake_flusher);
        let (writes, clocked) = (s.stats.writes.load(Relaxed), s.stats.clocked.load(Relaxed));
        for _ in 0..3 {
            write(&s, &k, 3, &mut w);
        }
        let counted = u64::from(counts) * 3;
        assert_eq!(s.stats.writes.load(Relaxed), writes + counted);
        assert_eq!(s.stats.clocked.load(Relaxed), clocked + counted);
    }
    // Not for a socket the program holds itself, nor in another mode.
    let (s, k) = shim();
    let _ = s.read_begins(&k, 3);
    write(&s, &k, 3, &mut ThreadBursts::new());
    s.program_holds(&k, 3);
    assert!(s.clocked_write(3).is_none());
    let (s, k) = shim_with(Config {
        mode: Mode::Nodelay,
        ..Config::default()
    });
    let _ = s.read_begins(&k, 4);
    assert!(s.clocked_write(4).is_none());
}

#[test]
fn a_busy_clocked_socket_keeps_its_mark_and_the_flusher_sleeps_to_its_next_look() {
    let (s, k, mut w, mut st) = clocked();
    let marks = s.stats.clock_marks.load(Relaxed);
    // Each look finds segments sent since the last, and (the ACK having just sent the held
    // write) nothing waiting: the socket moves, and stays watched.
    let mut t = 0;
    let mut sleep = Duration::ZERO;
    for _ in 0..=CLOCK_BACKOFF_MAX + 1 {
        write(&s, &k, 3, &mut w);
        k.ack(3);
        t += sleep.as_micros() as u64;
        k.now.set(t.max(look() + 1));
        match s.flusher_tick(&k, &mut st) {
            FlusherStep::Sleep(d) => sleep = d,
            FlusherStep::Park => panic!("parked with a socket watched"),
        }
        assert_eq!(s.held(), 1, "the mark stays while the socket moves");
    }
    assert_eq!(
        s.stats.clock_marks.load(Relaxed),
        marks,
        "its writes found the mark set and made none"
    );
    let widest = Duration::from_micros(look() << CLOCK_BACKOFF_MAX);
    assert!(
        sleep >= widest && sleep > Config::default().linger,
        "the flusher sleeps to the next look, {sleep:?}, not one bound: {widest:?}"
    );
    // Idle (no segment since, nothing waiting): the mark goes, and the next write marks.
    k.now.set(t + sleep.as_micros() as u64 + 1);
    s.flusher_tick(&k, &mut st);
    assert_eq!(s.held(), 0, "idle: no longer watched");
    write(&s, &k, 3, &mut w);
    assert_eq!(s.stats.clock_marks.load(Relaxed), marks + 1);
}
