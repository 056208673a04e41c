//! The flusher: the linger bound, ticking or parking, a forked child's own flusher, and a
//! process whose flusher cannot run.

use super::*;

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
fn a_forked_child_starts_its_own_flusher_at_a_bursts_second_write() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    write(&s, &k, 3, &mut t);
    assert!(s.claim_flusher_start());
    s.release_thread(&k, &mut t);
    s.after_fork_child();
    // Bursts of one write (a greeting, then a wait): each leaves plainly, no thread.
    for _ in 0..3 {
        assert!(!s.needs_flusher(3), "a burst's first write needs no thread");
        write(&s, &k, 3, &mut t);
        assert!(!s.is_corked(3) && k.unsent(3) == 0, "sent plainly");
        s.release_thread(&k, &mut t);
    }
    // A burst of two: its second write starts the thread and is held.
    write(&s, &k, 3, &mut t);
    assert!(
        s.needs_flusher(3),
        "the second write of a burst needs the thread"
    );
    assert!(write(&s, &k, 3, &mut t));
    assert!(s.is_corked(3));
    assert!(s.claim_flusher_start());
    s.release_thread(&k, &mut t);
    // With the thread, a burst's first write is held again.
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3));
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
    // A forked child tries again, at a burst's second write.
    s.after_fork_child();
    write(&s, &k, 4, &mut t);
    assert!(!s.is_corked(4));
    assert!(s.needs_flusher(4));
    write(&s, &k, 4, &mut t);
    assert!(s.is_corked(4));
}
