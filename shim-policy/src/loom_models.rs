//! Loom models of the lock-free protocol: each race a review found, run under every
//! interleaving (up to the preemption bound) of the policy's atomics and a fake kernel whose
//! socket lock is a loom mutex, as the real kernel's socket lock orders socket calls.
//!
//! Run with `RUSTFLAGS="--cfg loom -C debug-assertions" cargo test -p nagless-shim-policy
//! --release --lib loom` (debug assertions on: the invariants of [`crate::state`] and the
//! `corked` count are `debug_assert!`s), as `scripts/test` does with its own target
//! directory. `LOOM_MAX_PREEMPTIONS` bounds the search (2 unless set; `scripts/test` uses 3;
//! at 6 the five models take about 5 s). `--nocapture` prints how many interleavings each
//! model ran.
//!
//! Each model fails on an older form of the protocol (checked by hand): (a) with
//! `LAST_SENDING` marked after the last write instead of before it; (b) with a start
//! counted in `corked` after it publishes its burst instead of before (the underflow
//! assertion; the program-cork model fails the same way); (c) with a corked start joining a
//! `MSG_MORE` burst without marking `CORK_ON`; (d) with an adoption that does not end the
//! burst left on the number (`corked` leaks). The model of a reader ending a burst while the
//! program corks fails without the program's wait for an uncork in flight, and without the
//! `SeqCst` fence in `Shim::set_cork` (a weakened ordering). (e) failed as first written: the
//! flusher could park on a burst whose start did not see it parked (acquire/release on both
//! sides of the handshake; now a `SeqCst` fence on each). (g) fails with `share` linking the
//! original before the duplicate (a reader sees the original linked, finds no duplicate
//! linked yet, and clears the link); (h) fails with a reader that clears the link
//! unconditionally when it finds no other descriptor (a link made meanwhile is lost).
//! (i) fails with the flusher's look at the kernel's queue made before it clears the clock
//! mark; (j) fails without the program's wait for a `TCP_NODELAY` change of the shim's on
//! its way.
//!
//! What every model asserts, after its threads are done:
//! - no byte is left held by a burst that is no longer counted as held: a socket whose slot
//!   says "no burst" has nothing queued unsent and no `TCP_CORK` of the shim's on;
//! - `corked` equals the number of bursts held (never leaks), and never went below zero
//!   (the `debug_assert!` in `count_down`);
//! - the program's `TCP_CORK` is never cleared by the shim (the fake kernel panics);
//! - the burst left, if any, ends at the next read with everything sent and nothing counted.
//!
//! The clocked socket's models ((i), (j)) assert instead that bytes the kernel's Nagle holds
//! are watched by a mark counted once in `corked`, and that the program's own `TCP_NODELAY`
//! is never cleared by the shim (the fake kernel panics).
use loom::sync::Arc;
use loom::thread;

use crate::{FlusherState, FlusherStep, Shim, ThreadBursts};

mod world;

use world::{check, model, setup, write, Kern, FD};

/// (a) A `MSG_MORE` write racing the burst's last write: if the last write reaches the
/// kernel first, it does not send the other, which must push itself (`LAST_SENDING`).
#[test]
fn loom_msg_more_write_racing_the_last_write() {
    model(|| {
        let (s, k) = setup(3);
        let mut main = ThreadBursts::new();
        assert!(write(&s, &k, &mut main, true), "held by MSG_MORE");
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (s, k) = (s.clone(), k.clone());
                thread::spawn(move || {
                    let mut t = ThreadBursts::new();
                    write(&s, &k, &mut t, true);
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        check(&s, &k);
    });
}

/// (b) A reader ends a burst while another thread starts one (and the reader reads again,
/// ending the new one), or ends the burst a write is starting: a start must be counted
/// before anyone can count it down.
#[test]
fn loom_reader_ending_a_burst_while_another_starts_one() {
    for (shape, earlier_burst) in [(0, true), (2, true), (0, false), (2, false)] {
        model(move || {
            let (s, k) = setup(shape);
            let mut main = ThreadBursts::new();
            if earlier_burst {
                write(&s, &k, &mut main, true);
            }
            let reader = {
                let (s, k) = (s.clone(), k.clone());
                thread::spawn(move || {
                    s.release_socket(&*k, FD);
                    s.release_socket(&*k, FD);
                })
            };
            let mut t = ThreadBursts::new();
            write(&s, &k, &mut t, true);
            reader.join().unwrap();
            check(&s, &k);
        });
    }
}

/// (c) A corked start (a file body: no `MSG_MORE`) racing a `MSG_MORE` start: whichever
/// publishes first, the burst's end clears the cork (`CORK_ON`), here when the last write
/// of the learned shape sends it.
#[test]
fn loom_corked_start_racing_a_msg_more_start() {
    model(|| {
        let (s, k) = setup(3);
        let file = {
            let (s, k) = (s.clone(), k.clone());
            thread::spawn(move || {
                let mut t = ThreadBursts::new();
                write(&s, &k, &mut t, false);
            })
        };
        let mut a = ThreadBursts::new();
        write(&s, &k, &mut a, true);
        file.join().unwrap();
        write(&s, &k, &mut a, true);
        check(&s, &k);
    });
}

/// (d) The descriptor is closed (or closed unseen and its number adopted again) while a
/// write starts or joins a burst on it: no burst stays counted on a forgotten slot, no
/// count is given back twice.
#[test]
fn loom_adopt_or_forget_during_a_burst() {
    for close in [true, false] {
        model(move || {
            let (s, k) = setup(0);
            let mut main = ThreadBursts::new();
            write(&s, &k, &mut main, true);
            let closer = {
                let (s, k) = (s.clone(), k.clone());
                thread::spawn(move || {
                    if close {
                        s.forget(&*k, FD);
                    }
                    s.adopt(&*k, FD);
                })
            };
            let mut t = ThreadBursts::new();
            write(&s, &k, &mut t, true);
            closer.join().unwrap();
            s.release_thread(&*k, &mut main);
            check(&s, &k);
        });
    }
}

/// The program corks the socket while a corked start of the shim's is under way: the
/// start, losing the socket to the program, undoes its own cork, never the program's.
#[test]
fn loom_program_corking_during_a_corked_start() {
    model(|| {
        let (s, k) = setup(0);
        let program = {
            let (s, k) = (s.clone(), k.clone());
            thread::spawn(move || {
                let was = s.program_cork_begins(FD);
                k.program_cork(true);
                s.program_cork_done(FD, was, Some(true));
                s.program_holds(&*k, FD);
            })
        };
        let mut t = ThreadBursts::new();
        write(&s, &k, &mut t, true);
        program.join().unwrap();
        assert!(
            k.sock(|sock| sock.cork),
            "the program's TCP_CORK was cleared"
        );
        check(&s, &k);
    });
}

/// A reader ends a burst while the program corks the socket: the shim's uncork looks for
/// `PROGRAM_CORKED` and then makes its `setsockopt`; the program's mark and its own
/// `setsockopt(TCP_CORK, 1)` must not both fall between the two (the program's call waits
/// for an uncork announced before its mark). Fails without that wait.
#[test]
fn loom_reader_ending_a_burst_while_the_program_corks() {
    model(|| {
        let (s, k) = setup(0);
        let mut main = ThreadBursts::new();
        write(&s, &k, &mut main, true);
        let program = {
            let (s, k) = (s.clone(), k.clone());
            thread::spawn(move || {
                let was = s.program_cork_begins(FD);
                k.program_cork(true);
                s.program_cork_done(FD, was, Some(true));
                s.program_holds(&*k, FD);
            })
        };
        s.release_socket(&*k, FD);
        program.join().unwrap();
        assert!(
            k.sock(|sock| sock.cork),
            "the program's TCP_CORK was cleared"
        );
        check(&s, &k);
    });
}

/// (e) The flusher's park and a burst's start: the flusher finds nothing held and parks (a
/// futex wait on `corked`, which sleeps only while the word reads 0) while a writer starts a
/// burst. Either the flusher's futex finds the burst counted, or the start wakes it: it never
/// sleeps on a held burst with no wake-up on its way (the burst would then wait for its
/// writer, which may never wait: the linger bound lost).
#[test]
fn loom_the_flusher_never_sleeps_on_a_held_burst() {
    model(|| {
        let (s, k) = setup(0);
        assert!(s.claim_flusher_start(), "the flusher runs");
        let flusher = {
            let (s, k) = (s.clone(), k.clone());
            thread::spawn(move || {
                // A first look with nothing held and no bursts yet: it parks.
                let mut st = FlusherState::default();
                match s.flusher_tick(&*k, &mut st) {
                    // The kernel's futex reads the word under its lock: asleep iff 0.
                    FlusherStep::Park => {
                        s.park_word().load(loom::sync::atomic::Ordering::SeqCst) == 0
                    }
                    FlusherStep::Sleep(_) => false,
                }
            })
        };
        let mut t = ThreadBursts::new();
        let step = s.before_write(&*k, FD, &mut t, true);
        k.send(step.more);
        s.after_write(&*k, FD, step, false);
        let asleep = flusher.join().unwrap();
        if asleep && s.held() > 0 {
            assert!(
                step.wake_flusher,
                "the flusher sleeps on a held burst, unwoken"
            );
        }
        s.release_thread(&*k, &mut t);
        check(&s, &k);
    });
}

/// (f) `fork` and `exec` end every burst (`release_all`) while another thread starts or joins
/// one: whatever the order, nothing is left held without being counted, and `corked` never
/// leaks. Then, in the child, `after_fork_child`: a write that holds asks for a flusher.
#[test]
fn loom_release_all_racing_a_start() {
    for shape in [0, 2] {
        model(move || {
            let (s, k) = setup(shape);
            let writer = {
                let (s, k) = (s.clone(), k.clone());
                thread::spawn(move || {
                    let mut t = ThreadBursts::new();
                    write(&s, &k, &mut t, true);
                    write(&s, &k, &mut t, true);
                })
            };
            s.release_all(&*k);
            writer.join().unwrap();
            check(&s, &k);
            s.after_fork_child();
            // In the child: a write that holds its burst asked for a flusher first; one that
            // asks for none (a burst's first write) leaves plainly.
            let needs = s.needs_flusher(FD);
            let mut t = ThreadBursts::new();
            write(&s, &k, &mut t, true);
            assert!(
                needs || !s.is_corked(FD),
                "a forked child holds a burst with no flusher"
            );
            s.release_thread(&*k, &mut t);
            check(&s, &k);
        });
    }
}

/// (g) A duplicate and a read racing: one thread duplicates the socket and writes on the
/// duplicate (a burst starts there) while another reads the original. Whatever the order,
/// the duplicate is linked to the original, the burst is counted, and a read of the original
/// ends it (one socket, one `TCP_CORK`): nothing is left held.
#[test]
fn loom_a_read_of_the_original_racing_a_write_on_a_duplicate() {
    const DUP: i32 = FD + 1;
    for earlier_burst in [false, true] {
        model(move || {
            let (s, k) = setup(0);
            let mut main = ThreadBursts::new();
            if earlier_burst {
                write(&s, &k, &mut main, true);
            }
            let reader = {
                let (s, k) = (s.clone(), k.clone());
                thread::spawn(move || s.release_socket(&*k, FD))
            };
            s.duplicate(&*k, FD, DUP);
            let mut t = ThreadBursts::new();
            let step = s.before_write(&*k, DUP, &mut t, true);
            k.send(step.more);
            s.after_write(&*k, DUP, step, false);
            reader.join().unwrap();
            assert!(s.is_managed(DUP));
            s.release_socket(&*k, FD);
            assert_eq!(
                s.held(),
                0,
                "a read of the original ends the duplicate's burst"
            );
            k.sock(|sock| assert!(sock.unsent == 0 && !sock.cork, "bytes left held"));
            s.release_thread(&*k, &mut main);
            check(&s, &k);
        });
    }
}

/// (h) A descriptor whose duplicate was closed is read (the reader finds no other descriptor
/// and clears its link) while another thread makes a new duplicate and writes on it: the new
/// link must survive, so that the next read of the original ends the new duplicate's burst.
#[test]
fn loom_a_new_duplicate_racing_the_clearing_of_an_old_link() {
    const OLD: i32 = FD + 1;
    const NEW: i32 = FD + 2;
    model(|| {
        let (s, k) = setup(0);
        s.duplicate(&*k, FD, OLD);
        s.forget(&*k, OLD);
        let reader = {
            let (s, k) = (s.clone(), k.clone());
            thread::spawn(move || s.release_socket(&*k, FD))
        };
        s.duplicate(&*k, FD, NEW);
        let mut t = ThreadBursts::new();
        let step = s.before_write(&*k, NEW, &mut t, true);
        k.send(step.more);
        s.after_write(&*k, NEW, step, false);
        reader.join().unwrap();
        s.release_socket(&*k, FD);
        assert_eq!(s.held(), 0, "the new duplicate's link was lost");
        check(&s, &k);
    });
}

/// A socket another thread reads, clocked by Nagle, with one write in flight and the
/// flusher's mark made a while ago; `due_push`: the flusher's last look saw as many segments
/// as now, so its next look pushes what waits.
fn clocked(due_push: bool) -> (Arc<Shim>, Arc<Kern>) {
    let (s, k) = setup(0);
    let _ = s.read_begins(&*k, FD);
    let mut t = ThreadBursts::new();
    write(&s, &k, &mut t, true);
    assert!(k.sock(|sock| sock.nagle && sock.in_flight));
    if due_push {
        let segments = k.sock(|sock| sock.segments);
        let slot = s.slot(FD).unwrap();
        slot.clock_segments.store(
            u64::from(segments) + 1,
            loom::sync::atomic::Ordering::Relaxed,
        );
    }
    k.set_now(1_000_000);
    (s, k)
}

/// (i) A clocked write racing the flusher's look at the socket's mark (which clears it, then
/// asks the kernel what waits): whatever the order, bytes Nagle holds are watched by a mark
/// counted in `corked`, or were pushed. Fails with the look made before the clear, or with
/// the mark set before the write.
#[test]
fn loom_a_clocked_write_racing_the_flushers_look() {
    for due_push in [false, true] {
        model(move || {
            let (s, k) = clocked(due_push);
            let flusher = {
                let (s, k) = (s.clone(), k.clone());
                thread::spawn(move || {
                    let mut st = FlusherState::default();
                    s.flusher_tick(&*k, &mut st);
                })
            };
            let mut t = ThreadBursts::new();
            write(&s, &k, &mut t, true);
            flusher.join().unwrap();
            let marked = s
                .slot(FD)
                .unwrap()
                .clock_mark_us
                .load(loom::sync::atomic::Ordering::SeqCst)
                != 0;
            assert_eq!(s.held(), u32::from(marked), "corked counts the mark once");
            k.sock(|sock| {
                assert!(
                    sock.unsent == 0 || marked,
                    "bytes held by Nagle with no mark to bound them"
                )
            });
        });
    }
}

/// (j) The program sets `TCP_NODELAY` on while the flusher pushes a clocked socket (on, then
/// off again): the program's choice lands last. Fails without the program's wait for a
/// change of the shim's on its way.
#[test]
fn loom_the_programs_nodelay_racing_the_flushers_push() {
    model(|| {
        let (s, k) = clocked(true);
        let mut t = ThreadBursts::new();
        write(&s, &k, &mut t, true);
        let flusher = {
            let (s, k) = (s.clone(), k.clone());
            thread::spawn(move || {
                let mut st = FlusherState::default();
                s.flusher_tick(&*k, &mut st);
            })
        };
        s.program_nodelay_begins(FD);
        k.program_nodelay(true);
        s.program_nodelay(&*k, FD, true);
        flusher.join().unwrap();
        k.sock(|sock| assert!(!sock.nagle, "the shim cleared the program's TCP_NODELAY"));
    });
}
