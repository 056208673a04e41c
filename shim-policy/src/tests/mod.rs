//! The policy's unit tests: a scripted fake kernel, one thread or hooks run inside a
//! kernel call to stand for another thread (the loom models check real interleavings).
//! Here the fake kernel, its helpers and the configuration's test; the rest by the policy's
//! modules: `bursts`, `shapes` (learned shapes and `MSG_MORE`), `program_options`,
//! `flusher`.
use super::*;
use crate::bursts::THREAD_BURSTS;
use crate::config::{Acks, DEFAULT_LINGER};
use crate::flusher::FLUSHER_IDLE;
use crate::shim::CHUNK;
use crate::slot::{LEARN_AFTER, SHAPE_PATIENCE};
use crate::state::{HoldBy, Start};
use crate::sync::Ordering::*;
use std::cell::{Cell, RefCell};
use std::time::Duration;

mod acks;
mod bursts;
mod clocked;
mod flusher;
mod program_options;
mod shapes;

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
    /// Writes sent and not yet acknowledged, by descriptor.
    unacked: RefCell<std::collections::HashMap<i32, u32>>,
    /// Data segments sent (one per send of whatever was queued), by descriptor.
    segments: RefCell<std::collections::HashMap<i32, u32>>,
    /// Descriptors with `TCP_NODELAY` cleared: the kernel's Nagle holds a plain write while
    /// anything is unacknowledged.
    nagle: RefCell<std::collections::HashSet<i32>>,
    nodelay_clears: Cell<u32>,
    /// `sending` calls (the flusher's looks at clocked sockets).
    sendings: Cell<u32>,
    /// `TCP_QUICKACK`s set, and `TCP_DELACK_MAX_US`s, in order.
    quickacks: RefCell<Vec<i32>>,
    delack_max: RefCell<Vec<(i32, u32)>>,
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
        let in_flight = self.unacked.borrow().get(&fd).copied().unwrap_or(0);
        let nagle = self.nagle.borrow().contains(&fd) && in_flight > 0;
        let mut u = self.unsent.borrow_mut();
        let n = u.entry(fd).or_default();
        if more || nagle || self.corked.borrow().contains(&fd) {
            *n += 1;
        } else {
            *self.unacked.borrow_mut().entry(fd).or_default() += *n + 1;
            *n = 0;
            *self.segments.borrow_mut().entry(fd).or_default() += 1;
        }
    }

    /// Sends what is queued on `fd` (a push).
    fn push(&self, fd: i32) {
        let n = self.unsent.borrow_mut().remove(&fd).unwrap_or(0);
        if n > 0 {
            *self.unacked.borrow_mut().entry(fd).or_default() += n;
            *self.segments.borrow_mut().entry(fd).or_default() += 1;
        }
    }

    fn segments(&self, fd: i32) -> u32 {
        self.segments.borrow().get(&fd).copied().unwrap_or(0)
    }

    /// The peer acknowledges everything sent on `fd`; with `TCP_NODELAY` on, the kernel then
    /// sends what `MSG_MORE` held (not what `TCP_CORK` holds).
    fn ack(&self, fd: i32) {
        let held = if self.corked.borrow().contains(&fd) {
            0
        } else {
            self.unsent.borrow_mut().remove(&fd).unwrap_or(0)
        };
        if held > 0 {
            *self.segments.borrow_mut().entry(fd).or_default() += 1;
        }
        self.unacked.borrow_mut().insert(fd, held);
    }

    fn unsent(&self, fd: i32) -> u32 {
        self.unsent.borrow().get(&fd).copied().unwrap_or(0)
    }
}

impl Kernel for Fake {
    fn is_tcp_stream(&self, fd: i32) -> bool {
        fd < 100
    }
    fn set_nodelay(&self, fd: i32) -> bool {
        self.nodelay_calls.set(self.nodelay_calls.get() + 1);
        // Setting it pushes what Nagle held (not what TCP_CORK holds).
        if self.nagle.borrow_mut().remove(&fd) && !self.corked.borrow().contains(&fd) {
            self.push(fd);
        }
        true
    }
    fn clear_nodelay(&self, fd: i32) -> bool {
        self.nodelay_clears.set(self.nodelay_clears.get() + 1);
        self.nagle.borrow_mut().insert(fd);
        true
    }
    fn sending(&self, fd: i32) -> Option<Sending> {
        self.sendings.set(self.sendings.get() + 1);
        Some(Sending {
            unsent: self.unsent(fd),
            data_segments: self.segments(fd),
        })
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
            let pushed = self.unsent.borrow_mut().remove(&fd).unwrap_or(0);
            *self.unacked.borrow_mut().entry(fd).or_default() += pushed;
        }
        true
    }
    fn set_quickack(&self, fd: i32) -> bool {
        self.quickacks.borrow_mut().push(fd);
        true
    }
    fn set_delack_max_us(&self, fd: i32, us: u32) -> bool {
        self.delack_max.borrow_mut().push((fd, us));
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
    // As the hooks decide: a clocked socket's common case first.
    let step = s
        .clocked_write(fd)
        .unwrap_or_else(|| s.before_write(k, fd, t, true));
    k.send(fd, step.more);
    let wake = s.after_write(k, fd, step, false);
    let programs = s
        .slot(fd)
        .is_some_and(|sl| sl.flags.peek().owner() == state::Owner::Program);
    // (Bytes the kernel's Nagle holds on a clocked socket are the flusher's to watch.)
    let watched = s
        .slot(fd)
        .is_some_and(|sl| sl.clock_mark_us.load(Relaxed) != 0);
    assert!(
        s.is_corked(fd) || programs || watched || k.unsent(fd) == 0,
        "fd {fd}: bytes left unsent by a burst that is not held"
    );
    step.wake_flusher || wake
}

fn shim() -> (Shim, Fake) {
    shim_with(Config::default())
}

/// A shim under `config`, with the same descriptors adopted as `shim()`'s.
fn shim_with(config: Config) -> (Shim, Fake) {
    let s = Shim::new(config, 256);
    let k = Fake::default();
    for fd in [3, 4, 5, 6, 150] {
        s.adopt(&k, fd);
    }
    (s, k)
}

/// A shim in `--mode cork` (libautocork's rule), the one mode that holds by `TCP_CORK`,
/// shareable with a hook the fake kernel runs inside its cork call.
fn shared_cork_shim() -> (std::sync::Arc<Shim>, Fake) {
    let s = Shim::new(
        Config {
            mode: Mode::Cork,
            ..Config::default()
        },
        256,
    );
    let k = Fake::default();
    for fd in [3, 4, 5, 6, 150] {
        s.adopt(&k, fd);
    }
    (std::sync::Arc::new(s), k)
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
