//! The program's own options: sockets it holds itself are left alone, and it sees its own
//! `TCP_NODELAY` and `TCP_CORK`, never the shim's.

use super::*;

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
