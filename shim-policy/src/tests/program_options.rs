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
        1,
        "the program's cork, and none of the shim's"
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
    s.adopt_accepted(&k, 5, 30, || unreachable!("a known listener"));
    write(&s, &k, 30, &mut t);
    assert!(
        !s.is_corked(30),
        "the listener's choice holds for its connections"
    );
    s.adopt_accepted(&k, 6, 31, || unreachable!("a known listener"));
    write(&s, &k, 31, &mut t);
    assert!(
        s.is_corked(31),
        "a connection of a plain listener is managed"
    );
}

#[test]
fn a_listener_the_shim_never_saw_passes_on_what_the_kernel_gave() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    // Listener 40 was inherited (a service manager's): never adopted.
    let nodelay_calls = k.nodelay_calls.get();
    // systemd's `NoDelay=yes`: the connection is left as the program got it, and so reads
    // the kernel's TCP_NODELAY (1), as natively.
    s.adopt_accepted(&k, 40, 41, || (true, false));
    assert_eq!(s.program_view(41, true), Some(true), "as natively");
    s.adopt_accepted(&k, 40, 43, || (false, true));
    assert_eq!(s.program_view(43, false), Some(true), "as natively");
    assert_eq!(s.program_view(43, true), Some(false));
    write(&s, &k, 41, &mut t);
    assert!(!s.is_corked(41));
    assert_eq!(
        k.nodelay_calls.get(),
        nodelay_calls,
        "no option of the shim's on it"
    );
    // A plain inherited listener: managed as any connection.
    s.adopt_accepted(&k, 40, 42, || (false, false));
    assert_eq!(s.program_view(42, true), Some(false));
    write(&s, &k, 42, &mut t);
    assert!(s.is_corked(42));
}

#[test]
fn a_close_range_looks_only_as_far_as_the_highest_socket() {
    let s = Shim::new(Config::default(), 1 << 24);
    let k = Fake::default();
    for fd in [3, 7, 50] {
        s.adopt(&k, fd);
    }
    assert_eq!(s.managed_in(0, u32::MAX).collect::<Vec<_>>(), [3, 7, 50]);
    assert_eq!(s.managed_in(4, 49).collect::<Vec<_>>(), [7]);
    // Past the highest socket: nothing to look at, whatever the range.
    assert_eq!(s.managed_in(1000, u32::MAX).size_hint().1, Some(0));
    assert_eq!(s.managed_in(u32::MAX, u32::MAX).count(), 0);
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
    s.adopt_accepted(&k, 5, 30, || unreachable!("a known listener"));
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
    s.adopt_accepted(&k, 5, 31, || unreachable!("a known listener"));
    s.program_nodelay(&k, 5, true); // the listener now chooses NODELAY
    s.adopt_accepted(&k, 5, 32, || unreachable!("a known listener"));
    assert_eq!(s.program_view(31, true), Some(false));
    assert_eq!(s.program_view(32, true), Some(true), "inherited");
    write(&s, &k, 32, &mut t);
    assert!(!s.is_corked(32), "the listener's choice holds for it");
    // A dup shows the same.
    s.duplicate(&k, 32, 33);
    assert_eq!(s.program_view(33, true), Some(true));
}
