//! Writes clocked as Nagle clocks them: another thread waits in a read of the socket (a
//! client's reader thread), so no wait of the writers ends their bursts; a write with nothing
//! in flight leaves at once, one with data in flight is held by `MSG_MORE` until the ACK.

use super::*;

#[test]
fn behind_a_waiting_reader_a_write_with_nothing_in_flight_leaves_at_once() {
    let (s, k) = shim();
    let mut writer = ThreadBursts::new();
    s.read_begins(&k, 3); // the reader thread, blocked in recv
    write(&s, &k, 3, &mut writer);
    assert!(!s.is_corked(3), "nothing to clock it: it goes now");
    assert_eq!(k.unsent(3), 0);
    assert_eq!(s.stats.clocked.load(Relaxed), 1);
    // Now one is in flight: the next writes are held for its ACK, as Nagle holds them.
    write(&s, &k, 3, &mut writer);
    write(&s, &k, 3, &mut writer);
    assert!(s.is_corked(3));
    assert_eq!(k.unsent(3), 2);
    // The ACK comes: the kernel sends what MSG_MORE held (TCP_NODELAY is on).
    k.ack(3);
    assert_eq!(k.unsent(3), 0);
    // Both acknowledged too: a write then leaves at once again, and sends nothing held late.
    k.ack(3);
    write(&s, &k, 3, &mut writer);
    assert_eq!(k.unsent(3), 0, "plain, in the burst still open");
    assert_eq!(s.stats.clocked.load(Relaxed), 2);
    s.read_ends(&k, 3, true);
    // The reader is back: no more clocking, bursts are held to the writer's wait again.
    s.release_thread(&k, &mut writer);
    k.ack(3);
    write(&s, &k, 3, &mut writer);
    assert!(s.is_corked(3));
    assert_eq!(k.unsent(3), 1);
    s.release_thread(&k, &mut writer);
    assert_eq!(s.held(), 0);
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
    s.read_begins(&k, 3);
    s.read_ends(&k, 3, true);
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3));
    s.release_thread(&k, &mut t);
}

#[test]
fn a_read_that_ends_unannounced_never_takes_the_count_below_zero() {
    let (s, k) = shim();
    let mut t = ThreadBursts::new();
    s.read_ends(&k, 3, true);
    s.read_ends(&k, 3, true);
    s.read_begins(&k, 3);
    write(&s, &k, 3, &mut t);
    assert!(!s.is_corked(3), "one reader counted");
    s.read_ends(&k, 3, true);
    k.ack(3);
    write(&s, &k, 3, &mut t);
    assert!(s.is_corked(3), "none now");
    s.release_thread(&k, &mut t);
}
