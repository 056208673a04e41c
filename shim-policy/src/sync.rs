//! The atomics the lock-free protocol uses: std's, or loom's under `cfg(loom)`, whose model
//! checker then explores every interleaving of them (see the `loom` tests). The counters of
//! [`crate::Stats`] stay std's: they are reported, never decided on.
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};
pub(crate) use std::sync::atomic::Ordering;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

/// One turn of a short wait for another thread's step.
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
