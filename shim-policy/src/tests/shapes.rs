//! Learned shapes: bursts of a learned number of writes held by `MSG_MORE` and sent by
//! their last write, and the races of those writes with the burst's other ends.

use super::*;

/// Bursts of `writes` writes on fd 3, each ended by its writer's wait.
fn bursts(s: &Shim, k: &Fake, t: &mut ThreadBursts, writes: usize, times: usize) {
    for _ in 0..times {
        for _ in 0..writes {
            write(s, k, 3, t);
        }
        s.release_thread(k, t);
    }
}

#[test]
fn a_learned_shape_sends_its_last_write_at_once() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    bursts(&s, &k, &mut t, 2, LEARN_AFTER as usize);
    let cycles = (k.cork_calls.get(), k.uncork_calls.get());
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3), "the first write of two is held");
    write(&s, &k, 3, &mut t);
    assert!(
        !s.is_corked(3),
        "the second leaves with it, before any wait"
    );
    assert_eq!(s.held(), 0);
    assert_eq!(
        (k.cork_calls.get(), k.uncork_calls.get()),
        cycles,
        "held by MSG_MORE on its first write and sent by its plain last one: no setsockopt"
    );
    assert_eq!(k.unsent(3), 0);
    assert_eq!(s.stats.shaped.load(Relaxed), 1);
    // The wait that follows keeps the shape learned.
    s.release_thread(&k, &mut t);
    write(&s, &k, 3, &mut t);
    write(&s, &k, 3, &mut t);
    assert!(!s.is_corked(3));
}

#[test]
fn bursts_that_alternate_between_two_lengths_are_learned() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    // An MQTT broker: a two-write answer, then a one-write message, again and again.
    for _ in 0..3 {
        bursts(&s, &k, &mut t, 2, 1);
        bursts(&s, &k, &mut t, 1, 1);
    }
    let calls = k.uncork_calls.get();
    for _ in 0..5 {
        write(&s, &k, 3, &mut t);
        assert!(s.is_corked(3), "the first write of two is held");
        write(&s, &k, 3, &mut t);
        assert!(!s.is_corked(3), "the second sends it, before any wait");
        s.release_thread(&k, &mut t);
        write(&s, &k, 3, &mut t);
        assert!(!s.is_corked(3), "a one-write burst is never held");
        s.release_thread(&k, &mut t);
    }
    assert_eq!(k.uncork_calls.get(), calls, "no push at any wait");
    assert_eq!(k.unsent(3), 0);
    // The pattern breaks: a wrong guess costs a segment, never time (the wait sends it).
    bursts(&s, &k, &mut t, 2, 1);
    write(&s, &k, 3, &mut t);
    write(&s, &k, 3, &mut t);
    write(&s, &k, 3, &mut t);
    s.release_thread(&k, &mut t);
    assert_eq!(k.unsent(3), 0);
    assert_eq!(s.held(), 0);
}

#[test]
fn a_one_write_shape_is_never_corked() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    bursts(&s, &k, &mut t, 1, LEARN_AFTER as usize);
    let cycles = (k.cork_calls.get(), k.uncork_calls.get());
    bursts(&s, &k, &mut t, 1, 10);
    assert_eq!((k.cork_calls.get(), k.uncork_calls.get()), cycles);
    // A read of the socket is a wait too: it teaches as the writer's wait does.
    let (s, k) = shim();
    for _ in 0..LEARN_AFTER {
        write(&s, &k, 3, &mut t);
        s.release_socket(&k, 3);
    }
    write(&s, &k, 3, &mut t);
    assert!(!s.is_corked(3));
}

#[test]
fn a_longer_burst_holds_its_rest_to_the_wait_and_unlearns_the_shape() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    bursts(&s, &k, &mut t, 2, LEARN_AFTER as usize);
    for _ in 0..2 {
        write(&s, &k, 3, &mut t);
    }
    assert!(!s.is_corked(3), "sent at the learned shape");
    write(&s, &k, 3, &mut t);
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3), "the writes beyond the shape are held");
    s.release_thread(&k, &mut t);
    assert_eq!(s.held(), 0);
    // Four writes taught nothing yet: two writes are held to the wait again.
    write(&s, &k, 3, &mut t);
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3), "the shape was unlearned");
}

#[test]
fn a_socket_whose_writer_pauses_inside_its_bursts_gets_patience() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    let mut idle = FlusherState::default();
    let linger = DEFAULT_LINGER.as_micros() as u64;
    let mut now = 1_000_000;
    let mut at = |us: u64| {
        now += us;
        k.now.set(now);
    };
    bursts(&s, &k, &mut t, 2, LEARN_AFTER as usize);
    // The first burst short of its shape gets the plain bound: it is split...
    at(0);
    write(&s, &k, 3, &mut t);
    at(linger);
    s.flusher_tick(&k, &mut idle);
    assert!(!s.is_corked(3), "no patience before a pause was seen");
    // ...and then completed: the writer pauses inside its bursts.
    write(&s, &k, 3, &mut t);
    s.release_thread(&k, &mut t);
    at(0);
    write(&s, &k, 3, &mut t);
    at(linger);
    s.flusher_tick(&k, &mut idle);
    assert!(
        s.is_corked(3),
        "short of its shape: held past the plain bound"
    );
    at(linger * (SHAPE_PATIENCE - 1));
    s.flusher_tick(&k, &mut idle);
    assert!(!s.is_corked(3), "released at the longer bound");
    // A burst that ends short of the shape at a wait unlearns it, and the patience.
    s.release_thread(&k, &mut t);
    write(&s, &k, 3, &mut t);
    at(linger);
    s.flusher_tick(&k, &mut idle);
    assert!(!s.is_corked(3), "plain bound again");
    // A socket with no shape gets the plain bound.
    write(&s, &k, 4, &mut t);
    at(linger);
    s.flusher_tick(&k, &mut idle);
    assert!(!s.is_corked(4));
}

#[test]
fn a_write_held_by_msg_more_into_a_burst_that_ended_meanwhile_pushes_itself() {
    let (s, k) = shim();
    let mut a = ThreadBursts::new();
    bursts(&s, &k, &mut a, 3, LEARN_AFTER as usize);
    write(&s, &k, 3, &mut a);
    // A's second write is to go with MSG_MORE; before it reaches the kernel, B reads
    // the socket (the burst ends and its bytes are pushed).
    let step = s.before_write(&k, 3, &mut a, true);
    assert!(step.more);
    s.release_socket(&k, 3);
    k.send(3, step.more);
    assert_eq!(k.unsent(3), 1, "queued behind MSG_MORE after the push");
    s.after_write(&k, 3, step, false);
    assert_eq!(k.unsent(3), 0, "the write pushed its own bytes");
}

#[test]
fn a_msg_more_write_counted_before_the_last_but_sent_after_it_pushes_itself() {
    let (s, k) = shim();
    let (mut a, mut b) = (ThreadBursts::new(), ThreadBursts::new());
    bursts(&s, &k, &mut a, 3, LEARN_AFTER as usize);
    write(&s, &k, 3, &mut a);
    // B's write (the second) and A's (the third, completing the shape) are both under
    // way; A's plain write reaches the kernel first, B's MSG_MORE one after it.
    let joined = s.before_write(&k, 3, &mut b, true);
    let last = s.before_write(&k, 3, &mut a, true);
    assert!(joined.more && last.release_after);
    k.send(3, false);
    k.send(3, true);
    s.after_write(&k, 3, joined, false);
    s.after_write(&k, 3, last, false);
    assert_eq!(k.unsent(3), 0, "B's bytes were left behind MSG_MORE");
    assert_eq!(s.held(), 0);
}

#[test]
fn the_last_write_of_a_msg_more_burst_pushes_what_another_thread_added() {
    let (s, k) = shim();
    let (mut a, mut b) = (ThreadBursts::new(), ThreadBursts::new());
    bursts(&s, &k, &mut a, 2, LEARN_AFTER as usize);
    write(&s, &k, 3, &mut a);
    // A's second write completes the shape and goes out plainly; B's write joins the
    // burst with MSG_MORE and reaches the kernel after A's.
    let last = s.before_write(&k, 3, &mut a, true);
    assert!(last.release_after && !last.more);
    let joined = s.before_write(&k, 3, &mut b, true);
    assert!(joined.more);
    k.send(3, false);
    k.send(3, true);
    s.after_write(&k, 3, last, false);
    s.after_write(&k, 3, joined, false);
    assert_eq!(k.unsent(3), 0, "B's bytes were left behind MSG_MORE");
    assert_eq!(s.held(), 0);
    // A last write that failed queued nothing and so pushed nothing: the release does.
    s.release_thread(&k, &mut a);
    s.release_thread(&k, &mut b);
    let (s, k) = shim();
    bursts(&s, &k, &mut a, 2, LEARN_AFTER as usize);
    write(&s, &k, 3, &mut a);
    let last = s.before_write(&k, 3, &mut a, true);
    s.after_write(&k, 3, last, true);
    assert_eq!(
        k.unsent(3),
        0,
        "a failed last write left the first one held"
    );
    assert!(!s.is_corked(3));
}

#[test]
fn a_file_body_inside_a_msg_more_burst_goes_out_plainly() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    bursts(&s, &k, &mut t, 3, LEARN_AFTER as usize);
    let calls = (k.cork_calls.get(), k.uncork_calls.get());
    write(&s, &k, 3, &mut t);
    // sendfile cannot carry MSG_MORE: it pushes the header with the body (a segment
    // early at worst), and corks nothing.
    let step = s.before_write(&k, 3, &mut t, false);
    assert!(!step.more);
    k.send(3, false);
    s.after_write(&k, 3, step, false);
    assert_eq!(k.unsent(3), 0);
    write(&s, &k, 3, &mut t);
    assert!(!s.is_corked(3), "sent at its shape");
    assert_eq!((k.cork_calls.get(), k.uncork_calls.get()), calls);
}

#[test]
fn a_last_write_whose_burst_ended_meanwhile_leaves_a_newer_one_alone() {
    let (s, k) = shim();
    let (mut a, mut x) = (ThreadBursts::new(), ThreadBursts::new());
    bursts(&s, &k, &mut a, 2, LEARN_AFTER as usize);
    write(&s, &k, 3, &mut a);
    // A's last write goes out plainly; a reader then ends A's burst, and X starts a new
    // MSG_MORE burst, caught between its publish and its generation bump (what
    // `start_burst` does in that order, after counting it), its first write queued
    // behind the flag.
    let last = s.before_write(&k, 3, &mut a, true);
    k.send(3, false);
    s.release_socket(&k, 3);
    let slot = s.slot(3).unwrap();
    s.corked.fetch_add(1, AcqRel);
    assert_eq!(slot.flags.start(HoldBy::More, || {}), Start::Started);
    k.send(3, true);
    // A's step still names the live generation: it must not end X's burst silently.
    s.after_write(&k, 3, last, false);
    assert!(s.is_corked(3), "X's burst was ended without a push");
    slot.generation.fetch_add(1, AcqRel);
    s.release_thread(&k, &mut x);
    s.release_socket(&k, 3);
    assert_eq!(k.unsent(3), 0);
    assert_eq!(s.held(), 0);
}

#[test]
fn a_corked_start_that_loses_its_socket_to_the_program_undoes_only_itself() {
    let (s, k) = shared_cork_shim();
    // While the shim corks for a new burst, the program chooses TCP_NODELAY itself.
    let s2 = s.clone();
    *k.on_cork.borrow_mut() = Some(Box::new(move |k: &Fake| s2.program_holds(k, 3)));
    let mut t = ThreadBursts::new();
    write(&s, &k, 3, &mut t);
    assert_eq!(s.held(), 0, "a burst counted on a socket the program took");
    assert!(!s.is_corked(3));
    assert!(!k.corked.borrow().contains(&3), "the shim's cork stayed on");
    // While the shim corks, the program corks the socket itself: the shim's undo must not
    // clear the program's cork.
    let (s, k) = shared_cork_shim();
    let s2 = s.clone();
    *k.on_cork.borrow_mut() = Some(Box::new(move |k: &Fake| {
        let was = s2.program_cork_begins(3);
        k.set_cork(3, true);
        s2.program_cork_done(3, was, Some(true));
        s2.program_holds(k, 3);
    }));
    write(&s, &k, 3, &mut t);
    assert_eq!(s.held(), 0);
    assert!(
        k.corked.borrow().contains(&3),
        "the program's TCP_CORK was cleared by the shim"
    );
}

#[test]
fn an_empty_last_write_still_sends_the_burst() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    bursts(&s, &k, &mut t, 2, LEARN_AFTER as usize);
    write(&s, &k, 3, &mut t);
    // A 0-byte body (a 204 answer): the kernel queues nothing and pushes nothing.
    let last = s.before_write(&k, 3, &mut t, true);
    s.after_write(&k, 3, last, true);
    assert_eq!(k.unsent(3), 0, "the header was left behind MSG_MORE");
}

#[test]
fn a_burst_started_while_a_socket_is_forgotten_is_counted_out() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    write(&s, &k, 3, &mut t);
    assert_eq!(s.held(), 1);
    // A stale descriptor forgotten with a burst on it: nothing stays counted as held
    // (the flusher would never park again).
    s.forget(&k, 3);
    assert_eq!(s.held(), 0);
    assert!(!k.corked.borrow().contains(&3));
    // Forgotten (closed) while a write starts a corked burst on it (`--mode cork`): the
    // start undoes itself, counting nothing.
    let (s, k) = shared_cork_shim();
    let s2 = s.clone();
    *k.on_cork.borrow_mut() = Some(Box::new(move |k: &Fake| {
        s2.forget(k, 4);
    }));
    write(&s, &k, 4, &mut t);
    assert_eq!(s.held(), 0);
    assert!(!k.corked.borrow().contains(&4));
    assert!(!s.is_corked(4));
}

#[test]
fn a_write_that_completes_the_shape_never_sends_a_newer_burst() {
    let (s, k) = shim();
    let (mut a, mut b) = (ThreadBursts::new(), ThreadBursts::new());
    bursts(&s, &k, &mut a, 2, LEARN_AFTER as usize);
    write(&s, &k, 3, &mut a);
    // A's second write completes the shape; while it is inside write(2), B ends that
    // burst with a wait and starts a new one.
    let step = s.before_write(&k, 3, &mut a, true);
    assert!(step.release_after);
    write(&s, &k, 3, &mut b);
    s.release_thread(&k, &mut b);
    write(&s, &k, 3, &mut b);
    assert!(s.is_corked(3));
    s.after_write(&k, 3, step, false);
    assert!(s.is_corked(3), "A's step uncorked B's newer burst");
}

#[test]
fn a_descriptor_closed_and_reused_by_dup2_starts_unlearned() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    bursts(&s, &k, &mut t, 1, LEARN_AFTER as usize);
    s.duplicate(&k, 4, 3); // dup2(4, 3): fd 3 now refers to another socket
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3), "fd 3's old shape was kept");
}

#[test]
fn an_event_loop_answering_many_sockets_learns_their_shapes() {
    // One thread answers 40 connections with two writes each between its waits: its
    // list overflows, and the bursts that leave it end there, teaching as a wait does.
    let s = Shim::new(Config::default(), 256);
    let k = Fake::default();
    let mut t = ThreadBursts::new();
    let conns = 10..50;
    for fd in conns.clone() {
        s.adopt(&k, fd);
    }
    let round = |t: &mut ThreadBursts| {
        for fd in conns.clone() {
            write(&s, &k, fd, t);
            write(&s, &k, fd, t);
        }
        s.release_thread(&k, t);
    };
    for _ in 0..LEARN_AFTER {
        round(&mut t);
    }
    let before = s.stats.shaped.load(Relaxed);
    round(&mut t);
    assert_eq!(s.stats.shaped.load(Relaxed) - before, 40);
    assert_eq!(s.held(), 0);
}

#[test]
fn only_waits_teach_and_a_new_socket_starts_unlearned() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    let mut idle = FlusherState::default();
    // Bursts the flusher ends (nobody waited) teach nothing.
    for i in 0..5 {
        write(&s, &k, 3, &mut t);
        k.now.set(10_000 * (i + 1));
        s.flusher_tick(&k, &mut idle);
        assert!(!s.is_corked(3));
    }
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3));
    s.release_thread(&k, &mut t);
    // Learned on one socket, forgotten when its number is reused.
    bursts(&s, &k, &mut t, 1, LEARN_AFTER as usize);
    s.forget(&k, 3);
    s.adopt(&k, 3);
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3), "a new socket has no shape");
    // Cork mode (libautocork's rule) holds to the wait whatever the shape.
    let c = Shim::new(
        Config {
            mode: Mode::Cork,
            ..Config::default()
        },
        16,
    );
    c.adopt(&k, 3);
    bursts(&c, &k, &mut t, 1, 5);
    write(&c, &k, 3, &mut t);
    assert!(c.is_corked(3));
}
