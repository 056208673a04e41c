//! The models' world: a fake kernel for one socket (its lock the socket lock), a shim set up
//! on it, one write of the program, the safety properties every model checks at its end, and
//! the runner that explores the interleavings.

use loom::sync::{Arc, Mutex};

use crate::slot::LEARN_AFTER;
use crate::{Config, Kernel, Shim, ThreadBursts, WriteStep};

/// The socket all models write to.
pub(super) const FD: i32 = 3;

/// One socket's kernel side.
#[derive(Default)]
pub(super) struct Sock {
    /// `TCP_CORK` is on.
    pub(super) cork: bool,
    /// The program set that `TCP_CORK` itself.
    pub(super) programs_cork: bool,
    /// Writes queued and not yet sent (held by `TCP_CORK`, `MSG_MORE` or Nagle).
    pub(super) unsent: u32,
    /// `TCP_NODELAY` is off: a plain write waits while anything is in flight.
    pub(super) nagle: bool,
    /// Something sent is not acknowledged yet (the models' peer never acknowledges).
    pub(super) in_flight: bool,
    /// Data segments sent.
    pub(super) segments: u32,
    /// The program set `TCP_NODELAY` on itself.
    pub(super) programs_nodelay: bool,
}

/// A fake kernel for one socket; its lock stands for the socket lock. The clock (µs) is
/// set between a model's steps, never raced on.
#[derive(Default)]
pub(super) struct Kern(Mutex<Sock>, std::sync::atomic::AtomicU64);

impl Kern {
    /// The kernel's side of one write: queued, then sent unless `TCP_CORK` or `MSG_MORE`
    /// holds it (a plain write pushes what `MSG_MORE` held before it).
    pub(super) fn send(&self, more: bool) {
        let mut s = self.0.lock().unwrap();
        if more || s.cork || (s.nagle && s.in_flight) {
            s.unsent += 1;
        } else {
            s.unsent = 0;
            s.segments += 1;
            s.in_flight = true;
        }
    }

    /// The program's own `setsockopt(TCP_NODELAY, on)` (on pushes what Nagle held).
    pub(super) fn program_nodelay(&self, on: bool) {
        let mut s = self.0.lock().unwrap();
        s.nagle = !on;
        s.programs_nodelay = on;
        if on && !s.cork && s.unsent > 0 {
            s.unsent = 0;
            s.segments += 1;
        }
    }

    pub(super) fn set_now(&self, us: u64) {
        self.1.store(us, std::sync::atomic::Ordering::Relaxed);
    }

    /// The program's own `setsockopt(TCP_CORK, on)`.
    pub(super) fn program_cork(&self, on: bool) {
        let mut s = self.0.lock().unwrap();
        s.cork = on;
        s.programs_cork = on;
        if !on {
            s.unsent = 0;
        }
    }

    pub(super) fn sock<R>(&self, f: impl FnOnce(&Sock) -> R) -> R {
        f(&self.0.lock().unwrap())
    }
}

impl Kernel for Kern {
    fn is_tcp_stream(&self, fd: i32) -> bool {
        fd == FD
    }
    fn set_nodelay(&self, _: i32) -> bool {
        // Setting it pushes what Nagle held (not what TCP_CORK holds).
        let mut s = self.0.lock().unwrap();
        s.nagle = false;
        if !s.cork && s.unsent > 0 {
            s.unsent = 0;
            s.segments += 1;
        }
        true
    }
    fn set_cork(&self, _: i32, on: bool) -> bool {
        let mut s = self.0.lock().unwrap();
        assert!(
            on || !s.programs_cork,
            "the shim cleared the program's TCP_CORK"
        );
        s.cork = on;
        if !on {
            // Clearing TCP_CORK pushes whatever is queued, held by MSG_MORE too.
            s.unsent = 0;
        }
        true
    }
    fn socket_id(&self, _: i32) -> Option<u64> {
        // One socket: every descriptor of the models names it.
        Some(1)
    }
    fn clear_nodelay(&self, _: i32) -> bool {
        let mut s = self.0.lock().unwrap();
        assert!(
            !s.programs_nodelay,
            "the shim cleared the program's TCP_NODELAY"
        );
        s.nagle = true;
        true
    }
    fn sending(&self, _: i32) -> Option<crate::Sending> {
        let s = self.0.lock().unwrap();
        Some(crate::Sending {
            unsent: s.unsent,
            data_segments: s.segments,
        })
    }
    fn set_quickack(&self, _: i32) -> bool {
        true
    }
    fn set_delack_max_us(&self, _: i32, _: u32) -> bool {
        true
    }
    fn now_us(&self) -> u64 {
        self.1.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A shim with `FD` adopted and, if `shape` > 0, that many writes per burst learned.
pub(super) fn setup(shape: usize) -> (Arc<Shim>, Arc<Kern>) {
    let s = Shim::new(Config::default(), crate::shim::CHUNK);
    let k = Kern::default();
    s.adopt(&k, FD);
    let mut t = ThreadBursts::new();
    if shape > 0 {
        for _ in 0..LEARN_AFTER {
            for _ in 0..shape {
                write(&s, &k, &mut t, true);
            }
            s.release_thread(&k, &mut t);
        }
        assert_eq!(s.held(), 0);
    }
    (Arc::new(s), Arc::new(k))
}

/// One write of the program with the policy's steps around it (`carries_more`: a write or
/// send, not a sendfile); whether it was sent with `MSG_MORE`.
pub(super) fn write(s: &Shim, k: &Kern, t: &mut ThreadBursts, carries_more: bool) -> bool {
    let step: WriteStep = s.before_write(k, FD, t, carries_more);
    k.send(step.more);
    s.after_write(k, FD, step, false);
    step.more
}

/// The safety properties, once the model's threads are done (see the module docs).
pub(super) fn check(s: &Shim, k: &Kern) {
    let held = s.is_corked(FD);
    assert_eq!(s.held(), u32::from(held), "corked leaked");
    k.sock(|sock| {
        if !held && !sock.programs_cork {
            assert_eq!(
                sock.unsent, 0,
                "bytes left held by a burst no longer counted"
            );
            assert!(!sock.cork, "the shim's TCP_CORK left on after its burst");
        }
    });
    s.release_socket(k, FD);
    assert_eq!(s.held(), 0);
    k.sock(|sock| assert!(sock.programs_cork || (sock.unsent == 0 && !sock.cork)));
}

/// Runs `f` under every interleaving loom explores; prints how many (`--nocapture`).
pub(super) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    b.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    let name = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!(
        "{name}: {} interleavings",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}
