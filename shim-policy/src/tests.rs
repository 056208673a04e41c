//! The policy's unit tests: a scripted fake kernel, one thread or hooks run inside a
//! kernel call to stand for another thread (the loom models check real interleavings).
use super::*;
use std::cell::{Cell, RefCell};

/// A fake kernel: every descriptor below 100 is a TCP socket; records cork calls.
#[derive(Default)]
struct Fake {
    corked: RefCell<Vec<i32>>,
    cork_calls: Cell<u32>,
    uncork_calls: Cell<u32>,
    now: Cell<u64>,
    refuse_cork: Cell<bool>,
    nodelay_calls: Cell<u32>,
    /// Writes queued and not yet sent (held by TCP_CORK or MSG_MORE), by descriptor.
    unsent: RefCell<std::collections::HashMap<i32, u32>>,
    /// Run once, inside the next `set_cork(_, true)`: another party acting in the middle
    /// of a corked start.
    on_cork: RefCell<Option<CorkHook>>,
    /// Socket identities that differ from the descriptor number (descriptors of one socket).
    ids: RefCell<std::collections::HashMap<i32, u64>>,
}

type CorkHook = Box<dyn FnOnce(&Fake)>;

impl Fake {
    /// The kernel's side of one write: queued, then sent unless TCP_CORK or MSG_MORE
    /// holds it (a plain write pushes what MSG_MORE held before it).
    fn send(&self, fd: i32, more: bool) {
        let mut u = self.unsent.borrow_mut();
        let n = u.entry(fd).or_default();
        if more || self.corked.borrow().contains(&fd) {
            *n += 1;
        } else {
            *n = 0;
        }
    }

    fn unsent(&self, fd: i32) -> u32 {
        self.unsent.borrow().get(&fd).copied().unwrap_or(0)
    }
}

impl Kernel for Fake {
    fn is_tcp_stream(&self, fd: i32) -> bool {
        fd < 100
    }
    fn set_nodelay(&self, _: i32) -> bool {
        self.nodelay_calls.set(self.nodelay_calls.get() + 1);
        true
    }
    fn set_cork(&self, fd: i32, on: bool) -> bool {
        if self.refuse_cork.get() {
            return false;
        }
        let mut c = self.corked.borrow_mut();
        if on {
            self.cork_calls.set(self.cork_calls.get() + 1);
            c.push(fd);
            drop(c);
            let hook = self.on_cork.borrow_mut().take();
            if let Some(hook) = hook {
                hook(self);
            }
        } else {
            self.uncork_calls.set(self.uncork_calls.get() + 1);
            c.retain(|&x| x != fd);
            // Clearing TCP_CORK pushes whatever is queued, held by MSG_MORE too.
            self.unsent.borrow_mut().remove(&fd);
        }
        true
    }
    fn now_us(&self) -> u64 {
        self.now.get()
    }
    fn socket_id(&self, fd: i32) -> Option<u64> {
        Some(self.ids.borrow().get(&fd).copied().unwrap_or(fd as u64))
    }
}

/// One write of the program, with the policy's steps around it; true if it asked for
/// the flusher.
fn write(s: &Shim, k: &Fake, fd: i32, t: &mut ThreadBursts) -> bool {
    let step = s.before_write(k, fd, t, true);
    k.send(fd, step.more);
    s.after_write(k, fd, step, false);
    let programs = s
        .slot(fd)
        .is_some_and(|sl| sl.flags.peek().owner() == state::Owner::Program);
    assert!(
        s.is_corked(fd) || programs || k.unsent(fd) == 0,
        "fd {fd}: bytes left unsent by a burst that is not held"
    );
    step.wake_flusher
}

fn shim() -> (Shim, Fake) {
    let s = Shim::new(Config::default(), 256);
    let k = Fake::default();
    for fd in [3, 4, 5, 6, 150] {
        s.adopt(&k, fd);
    }
    (s, k)
}

/// [`shim`], shareable with a hook the fake kernel runs inside a call.
fn shared_shim() -> (std::sync::Arc<Shim>, Fake) {
    let (s, k) = shim();
    (std::sync::Arc::new(s), k)
}

#[test]
fn a_burst_is_one_cork_and_ends_when_its_writer_waits() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    for _ in 0..10 {
        write(&s, &k, 3, &mut t);
    }
    assert_eq!(k.cork_calls.get(), 1);
    assert!(s.is_corked(3));
    s.release_thread(&k, &mut t);
    assert!(!s.is_corked(3));
    assert_eq!(k.uncork_calls.get(), 1);
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
    assert_eq!(k.cork_calls.get(), 1);
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
fn programs_that_hold_bytes_themselves_are_left_alone() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    write(&s, &k, 3, &mut t);
    s.program_cork_begins(3);
    k.set_cork(3, true);
    s.program_cork_done(3, false, Some(true));
    s.program_holds(&k, 3);
    assert!(!s.is_corked(3));
    assert_eq!(s.held(), 0);
    // The program corked the socket itself: the shim's end of its burst must not clear
    // that (its bytes leave with the program's own uncork).
    assert_eq!(
        k.uncork_calls.get(),
        0,
        "the program's TCP_CORK was cleared"
    );
    write(&s, &k, 3, &mut t);
    assert!(!s.is_corked(3));
    assert_eq!(
        k.cork_calls.get(),
        2,
        "the shim's one cork and the program's"
    );
    // A dup of it inherits the choice.
    s.duplicate(&k, 3, 20);
    write(&s, &k, 20, &mut t);
    assert!(!s.is_corked(20));
}

#[test]
fn sockets_accepted_on_a_listener_the_program_chose_for_are_left_alone() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    s.adopt(&k, 5); // the listener
    s.adopt(&k, 6); // another listener, left as it was made
    s.program_holds(&k, 5); // setsockopt(TCP_NODELAY) on it
    s.adopt_accepted(&k, 5, 30);
    write(&s, &k, 30, &mut t);
    assert!(
        !s.is_corked(30),
        "the listener's choice holds for its connections"
    );
    s.adopt_accepted(&k, 6, 31);
    write(&s, &k, 31, &mut t);
    assert!(
        s.is_corked(31),
        "a connection of a plain listener is managed"
    );
}

#[test]
fn the_program_sees_its_own_options_never_the_shims() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    // The shim set TCP_NODELAY at adoption and corks a burst: the program sees neither.
    assert_eq!(k.nodelay_calls.get(), 4);
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3));
    assert_eq!(s.program_view(3, true), Some(false));
    assert_eq!(s.program_view(3, false), Some(false));
    // Not managed: the kernel's value is the program's.
    assert_eq!(s.program_view(150, true), None);
    assert_eq!(s.program_view(7, false), None);
    // The program's own TCP_CORK shows (and its own TCP_NODELAY, below).
    let was = s.program_cork_begins(4);
    s.program_cork_done(4, was, Some(true));
    s.program_holds(&k, 4);
    assert_eq!(s.program_view(4, false), Some(true));
    assert_eq!(s.program_view(4, true), Some(false));
    s.program_nodelay(&k, 5, true);
    assert_eq!(s.program_view(5, true), Some(true));
    // A closed and reused number starts from the kernel's defaults.
    s.forget(&k, 5);
    s.adopt(&k, 5);
    assert_eq!(s.program_view(5, true), Some(false));
}

#[test]
fn a_program_copying_its_listeners_default_keeps_its_sockets_held() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    // Erlang's inets: the listener's TCP_NODELAY is read (off, as the program sees it)
    // and set on each accepted connection.
    s.adopt(&k, 5);
    let seen = s.program_view(5, true).unwrap();
    s.adopt_accepted(&k, 5, 30);
    let calls = k.nodelay_calls.get();
    s.program_nodelay(&k, 30, seen);
    assert_eq!(
        k.nodelay_calls.get(),
        calls + 1,
        "the shim's TCP_NODELAY is set again (the kernel's was just cleared)"
    );
    write(&s, &k, 30, &mut t);
    assert!(s.is_corked(30), "still the shim's to hold");
    assert_eq!(s.stats.kept_defaults.load(Relaxed), 1);
    // A real choice is the program's: on, or off after on.
    s.program_nodelay(&k, 30, true);
    assert!(!s.is_corked(30));
    write(&s, &k, 30, &mut t);
    assert!(!s.is_corked(30));
    s.adopt_accepted(&k, 5, 31);
    s.program_nodelay(&k, 5, true); // the listener now chooses NODELAY
    s.adopt_accepted(&k, 5, 32);
    assert_eq!(s.program_view(31, true), Some(false));
    assert_eq!(s.program_view(32, true), Some(true), "inherited");
    write(&s, &k, 32, &mut t);
    assert!(!s.is_corked(32), "the listener's choice holds for it");
    // A dup shows the same.
    s.duplicate(&k, 32, 33);
    assert_eq!(s.program_view(33, true), Some(true));
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
fn a_refused_cork_holds_nothing() {
    let (s, k) = shim();
    k.refuse_cork.set(true);
    let mut t = ThreadBursts::new();
    write(&s, &k, 3, &mut t);
    assert!(!s.is_corked(3));
    assert_eq!(s.held(), 0);
}

#[test]
fn the_flusher_releases_old_bursts_and_parks_when_idle() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    let mut idle = FlusherState::default();
    // The first burst asks for a flusher (none runs yet).
    assert!(write(&s, &k, 3, &mut t));
    assert!(s.claim_flusher_start());
    assert!(!s.claim_flusher_start());
    k.now.set(400);
    assert_eq!(
        s.flusher_tick(&k, &mut idle),
        FlusherStep::Sleep(Duration::from_micros(600)),
        "sleeps until the held burst reaches the bound"
    );
    assert!(s.is_corked(3), "younger than the linger bound");
    k.now.set(1000);
    s.flusher_tick(&k, &mut idle);
    assert!(!s.is_corked(3));
    assert_eq!(s.stats.linger_releases.load(Relaxed), 1);
    // Idle after a lone burst: bursts are rare, so it parks at once; the next burst
    // (only the first one after parking) asks for a wake-up.
    k.now.set(2000);
    assert_eq!(s.flusher_tick(&k, &mut idle), FlusherStep::Park);
    assert!(write(&s, &k, 4, &mut t), "a parked flusher must be woken");
    assert!(!write(&s, &k, 5, &mut t), "no wake-up per burst");
    s.flusher_unparked();
    s.release_thread(&k, &mut t);
    assert!(
        !write(&s, &k, 4, &mut t),
        "a ticking flusher needs no wake-up"
    );
}

#[test]
fn the_flusher_ticks_while_bursts_are_frequent_and_parks_when_they_stop() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    let mut st = FlusherState::default();
    let mut now = 1_000;
    let mut looks = 0;
    // Two bursts per linger bound, each ended by its writer before the flusher looks:
    // it keeps looking once per bound (a wake-up per burst would cost more).
    for _ in 0..50 {
        for _ in 0..2 {
            // Two writes each (a one-write shape is learned and then never held).
            write(&s, &k, 3, &mut t);
            write(&s, &k, 3, &mut t);
            s.release_thread(&k, &mut t);
        }
        now += 1_000;
        k.now.set(now);
        looks += 1;
        let step = s.flusher_tick(&k, &mut st);
        if looks > 5 {
            assert_eq!(step, FlusherStep::Sleep(DEFAULT_LINGER), "look {looks}");
        }
    }
    // The bursts stop: it parks within FLUSHER_IDLE.
    let mut idle_looks = 0;
    loop {
        now += 1_000;
        k.now.set(now);
        idle_looks += 1;
        if s.flusher_tick(&k, &mut st) == FlusherStep::Park {
            break;
        }
        assert!(idle_looks < 1000);
    }
    assert!(
        idle_looks as u128 <= FLUSHER_IDLE.as_micros() / DEFAULT_LINGER.as_micros(),
        "{idle_looks} looks"
    );
    // One burst every ten bounds: rare, parked after each.
    for _ in 0..5 {
        now += 10_000;
        k.now.set(now);
        write(&s, &k, 3, &mut t);
        write(&s, &k, 3, &mut t);
        s.release_thread(&k, &mut t);
        s.flusher_unparked();
        assert_eq!(s.flusher_tick(&k, &mut st), FlusherStep::Park);
    }
}

#[test]
fn a_forked_child_starts_its_own_flusher() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    write(&s, &k, 3, &mut t);
    assert!(s.claim_flusher_start());
    s.release_thread(&k, &mut t);
    s.after_fork_child();
    assert!(write(&s, &k, 3, &mut t));
    assert!(s.claim_flusher_start());
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
    let cycles = k.cork_calls.get();
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
        (cycles, cycles),
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
fn a_corked_burst_started_beside_a_msg_more_one_is_uncorked_at_its_end() {
    let (s, k) = shared_shim();
    let mut a = ThreadBursts::new();
    bursts(&s, &k, &mut a, 3, LEARN_AFTER as usize);
    // B starts a corked burst (a file body first: no MSG_MORE); while its cork goes on,
    // A starts a MSG_MORE one and queues its first write.
    let (s2, a_first) = (s.clone(), std::rc::Rc::new(Cell::new(None)));
    let a_step = a_first.clone();
    *k.on_cork.borrow_mut() = Some(Box::new(move |k: &Fake| {
        let mut a = ThreadBursts::new();
        let step = s2.before_write(k, 3, &mut a, true);
        k.send(3, step.more);
        a_step.set(Some(step));
    }));
    let mut b = ThreadBursts::new();
    let sendfile = s.before_write(&k, 3, &mut b, false);
    k.send(3, false);
    s.after_write(&k, 3, sendfile, false);
    let first = a_first.get().unwrap();
    assert!(first.more, "A's burst is held by MSG_MORE");
    s.after_write(&k, 3, first, false);
    assert_eq!(s.held(), 1, "B joined A's burst");
    // A's third write completes the shape (B's was the second).
    write(&s, &k, 3, &mut a);
    assert!(!s.is_corked(3), "sent at its shape");
    assert!(
        !k.corked.borrow().contains(&3),
        "B's TCP_CORK left on after the burst ended"
    );
    assert_eq!(k.unsent(3), 0);
    assert_eq!(s.held(), 0);
}

#[test]
fn a_corked_start_that_loses_its_socket_to_the_program_undoes_only_itself() {
    let (s, k) = shared_shim();
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
    let (s, k) = shared_shim();
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
    // Forgotten (closed) while a write starts a corked burst on it: the start undoes
    // itself, counting nothing.
    let (s, k) = shared_shim();
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

#[test]
fn environment_values_are_checked() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let (c, bad) = Config::from_env(env(&[
        ("NAGLESS_MODE", "cork"),
        ("NAGLESS_LINGER_US", "200"),
    ]));
    assert_eq!(
        (c.mode, c.linger, bad.len()),
        (Mode::Cork, Duration::from_micros(200), 0)
    );
    let (c, bad) = Config::from_env(env(&[
        ("NAGLESS_MODE", "fast"),
        ("NAGLESS_LINGER_US", "1ms"),
    ]));
    assert_eq!((c.mode, c.linger), (Mode::Nagless, DEFAULT_LINGER));
    assert_eq!(bad.len(), 2, "{bad:?}");
    let (_, bad) = Config::from_env(env(&[("NAGLESS_LINGER_US", "5")]));
    assert_eq!(bad.len(), 1);
}

#[test]
fn a_flusher_that_cannot_run_leaves_nothing_held() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    assert!(
        !s.needs_flusher(200),
        "a descriptor that is no socket of ours needs no thread"
    );
    assert!(s.needs_flusher(3));
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3));
    s.flusher_cannot_run(&k);
    assert!(
        !s.is_corked(3),
        "the burst held when the flusher failed ends"
    );
    assert_eq!(k.unsent(3), 0);
    assert!(!s.needs_flusher(3));
    for fd in [3, 4] {
        write(&s, &k, fd, &mut t);
        assert!(
            !s.is_corked(fd),
            "fd {fd}: held with no flusher to release it"
        );
        assert_eq!(k.unsent(fd), 0);
    }
    // A forked child tries again.
    s.after_fork_child();
    assert!(s.needs_flusher(4));
    write(&s, &k, 4, &mut t);
    assert!(s.is_corked(4));
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
