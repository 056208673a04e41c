//! Bursts: held by `MSG_MORE`, one push each, ended by their writer's wait, a read or close, whoever wrote
//! them; the thread's list; the table; descriptors of one socket.

use super::*;

#[test]
fn a_burst_is_held_by_msg_more_and_ends_with_one_push_when_its_writer_waits() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    for _ in 0..10 {
        write(&s, &k, 3, &mut t);
    }
    assert_eq!(
        k.cork_calls.get(),
        0,
        "no TCP_CORK: nothing sticks to the socket"
    );
    assert!(s.is_corked(3));
    assert_eq!(k.unsent(3), 10);
    s.release_thread(&k, &mut t);
    assert!(!s.is_corked(3));
    assert_eq!(k.uncork_calls.get(), 1);
    assert_eq!(k.unsent(3), 0);
    assert_eq!(s.held(), 0);
    assert!(t.is_empty());
}

#[test]
fn another_threads_wait_leaves_the_burst_alone() {
    let (s, k) = shim();
    let (mut writer, mut poller) = (ThreadBursts::new(), ThreadBursts::new());
    write(&s, &k, 3, &mut writer);
    s.release_thread(&k, &mut poller);
    assert!(s.is_corked(3), "a wait in another thread split the burst");
    write(&s, &k, 3, &mut writer);
    s.release_thread(&k, &mut writer);
    assert!(!s.is_corked(3));
    assert_eq!(k.uncork_calls.get(), 1);
}

#[test]
fn every_thread_that_wrote_to_a_burst_can_end_it() {
    let (s, k) = shim();
    let (mut a, mut b) = (ThreadBursts::new(), ThreadBursts::new());
    write(&s, &k, 4, &mut a);
    write(&s, &k, 4, &mut b);
    s.release_thread(&k, &mut b);
    assert!(!s.is_corked(4));
    // A's stale entry must not end the next burst, started by someone else.
    let mut c = ThreadBursts::new();
    write(&s, &k, 4, &mut c);
    s.release_thread(&k, &mut a);
    assert!(s.is_corked(4), "a stale entry released a newer burst");
}

#[test]
fn reading_the_socket_ends_its_burst_whoever_wrote_it() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    write(&s, &k, 5, &mut t);
    assert!(s.release(&k, 5));
    assert!(!s.release(&k, 5));
    assert_eq!(s.held(), 0);
}

#[test]
fn a_closed_and_reused_descriptor_is_not_released_by_an_old_entry() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    write(&s, &k, 6, &mut t);
    // Closed behind libc's back (raw syscall), then the number is reused by accept.
    s.adopt(&k, 6);
    assert_eq!(s.held(), 0, "the lost burst's count was given back");
    let mut other = ThreadBursts::new();
    write(&s, &k, 6, &mut other);
    s.release_thread(&k, &mut t);
    assert!(s.is_corked(6));
}

#[test]
fn a_thread_with_too_many_bursts_releases_its_oldest() {
    let s = Shim::new(Config::default(), 256);
    let k = Fake::default();
    let mut t = ThreadBursts::new();
    for fd in 10..10 + THREAD_BURSTS as i32 + 1 {
        s.adopt(&k, fd);
        write(&s, &k, fd, &mut t);
    }
    assert!(!s.is_corked(10));
    assert!(s.is_corked(11));
    assert_eq!(t.len(), THREAD_BURSTS);
    s.release_thread(&k, &mut t);
    assert_eq!(s.held(), 0);
}

#[test]
fn unmanaged_descriptors_and_nodelay_mode_are_never_corked() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    write(&s, &k, 150, &mut t); // not a TCP socket in the fake
    write(&s, &k, 7, &mut t); // never adopted
    write(&s, &k, 9999, &mut t); // beyond the table
    assert_eq!(k.cork_calls.get(), 0);
    let n = Shim::new(
        Config {
            mode: Mode::Nodelay,
            ..Config::default()
        },
        16,
    );
    n.adopt(&k, 3);
    write(&n, &k, 3, &mut t);
    assert_eq!(k.cork_calls.get(), 0);
}

#[test]
fn a_write_that_cannot_carry_msg_more_holds_nothing() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    // A file body by sendfile starts no burst: it goes out as it would natively.
    let step = s.before_write(&k, 3, &mut t, false);
    assert_eq!(step, WriteStep::default());
    assert!(!s.is_corked(3));
    // Inside a burst, it joins and goes out plainly, which sends what was held.
    write(&s, &k, 3, &mut t);
    let step = s.before_write(&k, 3, &mut t, false);
    assert!(!step.more);
    k.send(3, step.more);
    s.after_write(&k, 3, step, false);
    assert_eq!(k.unsent(3), 0);
    s.release_thread(&k, &mut t);
    assert_eq!((k.cork_calls.get(), s.held()), (0, 0));
}

#[test]
fn no_sequence_of_calls_leaves_a_cork_of_the_shims_on_a_socket() {
    let (s, k) = shim();
    let (mut a, mut b) = (ThreadBursts::new(), ThreadBursts::new());
    // Writes by two threads on three sockets, ended in every way the policy knows, with
    // shapes learned and unlearned along the way (a fixed pseudo-random walk).
    let mut x = 0x9E37_79B9u32;
    for _ in 0..2_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let fd = 3 + (x % 3) as i32;
        let t = if x & 8 == 0 { &mut a } else { &mut b };
        match (x >> 4) % 8 {
            0..=3 => {
                write(&s, &k, fd, t);
            }
            4 => s.release_thread(&k, t),
            5 => s.release_socket(&k, fd),
            6 => {
                let step = s.before_write(&k, fd, t, false);
                k.send(fd, step.more);
                s.after_write(&k, fd, step, false);
            }
            _ => {
                k.now.set(k.now.get() + 700);
                let _ = s.flusher_tick(&k, &mut FlusherState::default());
            }
        }
        assert!(k.corked.borrow().is_empty(), "a TCP_CORK of the shim's");
    }
    assert_eq!(k.cork_calls.get(), 0);
    s.release_all(&k);
    for fd in 3..6 {
        assert_eq!(k.unsent(fd), 0, "fd {fd}: bytes left behind MSG_MORE");
    }
}

#[test]
fn a_refused_cork_holds_nothing() {
    let (s, k) = shared_cork_shim();
    k.refuse_cork.set(true);
    let mut t = ThreadBursts::new();
    write(&s, &k, 3, &mut t);
    assert!(!s.is_corked(3));
    assert_eq!(s.held(), 0);
}

#[test]
fn the_table_grows_by_chunks_only_where_sockets_are() {
    let s = Shim::new(Config::default(), 1 << 20);
    let k = Fake::default();
    assert_eq!(s.chunks.iter().filter(|c| c.get().is_some()).count(), 0);
    s.adopt(&k, 5); // a TCP socket in the fake: its chunk is made
    s.adopt(&k, 150); // not a socket: no chunk for it
    s.adopt(&k, 3 * CHUNK as i32 + 7); // beyond 100: not TCP in the fake
    assert_eq!(s.chunks.iter().filter(|c| c.get().is_some()).count(), 1);
    assert!(s.is_managed(5));
    assert!(!s.is_managed(3 * CHUNK as i32 + 7));
    assert_eq!(s.managed_fds().collect::<Vec<_>>(), vec![5]);
}

#[test]
fn a_read_on_one_descriptor_of_a_socket_ends_the_burst_held_on_another() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    // dup: 7 is another descriptor of socket 3.
    k.ids.borrow_mut().insert(7, 3);
    s.duplicate(&k, 3, 7);
    write(&s, &k, 7, &mut t);
    assert!(s.is_corked(7));
    s.release_socket(&k, 3);
    assert!(
        !s.is_corked(7),
        "a read of the socket's other descriptor ends its burst"
    );
    assert_eq!(k.unsent(7), 0);
    // A socket that is not shared is not touched by another's read.
    write(&s, &k, 4, &mut t);
    s.release_socket(&k, 3);
    assert!(s.is_corked(4));
}

#[test]
fn inherited_stdin_and_stdout_of_one_socket_are_adopted_as_one() {
    let s = Shim::new(Config::default(), 256);
    let k = Fake::default();
    // inetd: fds 0 and 1 are one socket, 2 is another.
    k.ids.borrow_mut().insert(0, 42);
    k.ids.borrow_mut().insert(1, 42);
    for fd in 0..3 {
        s.adopt_inherited(&k, fd, fd == 1, &[0, 1, 2][..fd as usize]);
    }
    assert!((0..3).all(|fd| s.is_managed(fd)));
    // What the program reads of TCP_NODELAY is what it inherited.
    assert_eq!(s.program_view(1, true), Some(true));
    assert_eq!(s.program_view(0, true), Some(false));
    let mut t = ThreadBursts::new();
    write(&s, &k, 1, &mut t);
    write(&s, &k, 2, &mut t);
    assert!(s.is_corked(1));
    s.release_socket(&k, 0);
    assert!(
        !s.is_corked(1),
        "reading stdin ends the burst held on stdout"
    );
    assert!(s.is_corked(2), "another socket's burst is its own");
    // Closing the read side leaves the write side shared with nothing live; it still works.
    s.forget(&k, 0);
    write(&s, &k, 1, &mut t);
    s.release_socket(&k, 1);
    assert!(!s.is_corked(1));
}

#[test]
fn a_descriptor_whose_duplicates_are_closed_stops_scanning() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    // inetd's way: dup2(s, 7), then close(s).
    k.ids.borrow_mut().insert(7, 3);
    s.duplicate(&k, 3, 7);
    s.forget(&k, 3);
    assert!(s.slot(7).unwrap().shared.load(Relaxed) != 0);
    s.release_socket(&k, 7);
    assert!(
        s.slot(7).unwrap().shared.load(Relaxed) == 0,
        "no other descriptor of the socket is left: no more scans"
    );
    write(&s, &k, 7, &mut t);
    s.release_socket(&k, 7);
    assert!(!s.is_corked(7));
    // A new duplicate links it again.
    k.ids.borrow_mut().insert(8, 3);
    s.duplicate(&k, 7, 8);
    write(&s, &k, 8, &mut t);
    s.release_socket(&k, 7);
    assert!(!s.is_corked(8));
}
