//! [`SignalSafe`]: the shim as a hook may use it anywhere, inside the program's signal
//! handlers too. It exposes only the policy's steps that allocate nothing, start no thread
//! and take no lock (ending bursts, forgetting descriptors, the program's own options, the
//! counters), so a hook that runs where the shim must not allocate cannot reach the rest:
//! that needs `hooks::shim()`'s `&Shim`, which is `None` inside a handler.

use std::sync::atomic::AtomicU32;

use nagless_shim_policy::{Config, Shim, Stats};

use crate::sys::Libc;

/// The shim's signal-safe steps (see the module docs). Made from the full shim, never the
/// other way round.
#[derive(Clone, Copy)]
pub struct SignalSafe(&'static Shim);

impl From<&'static Shim> for SignalSafe {
    fn from(s: &'static Shim) -> Self {
        SignalSafe(s)
    }
}

impl SignalSafe {
    /// See [`Shim::release_all`].
    pub fn release_all(self) {
        self.0.release_all(&Libc);
    }
    /// See [`Shim::release`].
    pub fn release(self, fd: i32) -> bool {
        self.0.release(&Libc, fd)
    }
    /// See [`Shim::forget`].
    pub fn forget(self, fd: i32) -> bool {
        self.0.forget(&Libc, fd)
    }
    /// See [`Shim::is_managed`].
    pub fn is_managed(self, fd: i32) -> bool {
        self.0.is_managed(fd)
    }
    /// See [`Shim::after_fork_child`].
    pub fn after_fork_child(self) {
        self.0.after_fork_child();
    }
    /// See [`Shim::flusher_cannot_run`].
    pub fn flusher_cannot_run(self) {
        self.0.flusher_cannot_run(&Libc);
    }
    /// See [`Shim::program_cork_begins`].
    pub fn program_cork_begins(self, fd: i32) -> bool {
        self.0.program_cork_begins(fd)
    }
    /// See [`Shim::program_cork_done`].
    pub fn program_cork_done(self, fd: i32, was: bool, on: Option<bool>) {
        self.0.program_cork_done(fd, was, on);
    }
    /// See [`Shim::program_holds`].
    pub fn program_holds(self, fd: i32) {
        self.0.program_holds(&Libc, fd);
    }
    /// See [`Shim::program_nodelay_begins`].
    pub fn program_nodelay_begins(self, fd: i32) {
        self.0.program_nodelay_begins(fd);
    }
    /// See [`Shim::program_nodelay_failed`].
    pub fn program_nodelay_failed(self, fd: i32) {
        self.0.program_nodelay_failed(fd);
    }
    /// See [`Shim::program_nodelay`].
    pub fn program_nodelay(self, fd: i32, on: bool) {
        self.0.program_nodelay(&Libc, fd, on);
    }
    /// The counters.
    pub fn stats(self) -> &'static Stats {
        &self.0.stats
    }
    /// The settings.
    pub fn config(self) -> &'static Config {
        &self.0.config
    }
    /// See [`Shim::managed_fds`].
    pub fn managed_fds(self) -> impl Iterator<Item = i32> {
        self.0.managed_fds()
    }
    /// See [`Shim::park_word`] (a futex wake is signal-safe).
    pub fn park_word(self) -> &'static AtomicU32 {
        self.0.park_word()
    }
}
