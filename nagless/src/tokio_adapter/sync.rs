//! The locks of a tokio stream's shared state: std's, or loom's under `cfg(loom)`, whose model
//! checker then explores every interleaving of the handles, the flusher and the waker
//! hand-off (the `loom` models). The `Arc`s stay std's: the flusher holds a `Weak`, which
//! loom does not model, and no decision is taken on a reference count.
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
pub(crate) use std::sync::{Arc, Weak};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks `m`. Nothing panics while holding the lock; if something did, the state is still
/// consistent (every mutation is a single call into the driver), so keep going.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
