//! Judges write-write-read rounds for a Nagle/delayed-ACK stall, robustly on a busy machine.
#![allow(dead_code)] // each test binary that includes this module uses part of it

use std::time::Duration;

/// The shortest stall: a write held by Nagle waits for the peer's delayed ACK, at least
/// 40 ms (Linux's minimum; Windows and the BSDs wait 100-200 ms).
pub const STALL: Duration = Duration::from_millis(40);

/// Asserts that the rounds did not stall. Every round repeats the same exchange, so a stall
/// the library failed to prevent holds most of them; a busy machine (or Wine's slower socket
/// calls) delays a few. The median round must be well below a stall, and at most one round
/// in ten (at least two) may take as long as one.
pub fn assert_no_stall(times: &[Duration]) {
    let mut sorted = times.to_vec();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    let slow = times.iter().filter(|d| **d >= STALL).count();
    assert!(median < STALL / 2, "median round {median:?}: {times:?}");
    assert!(
        slow <= (times.len() / 10).max(2),
        "{slow} of {} rounds took as long as a stall: {times:?}",
        times.len()
    );
}

/// Asserts that the linger flushes were what a busy machine makes, not a coalescer's fault:
/// one round in ten at most, or, where more rounds wrote that slowly, as many as the rounds
/// whose writes (`writing`: from the first write to the read's call) took the linger. A
/// linger flush needs a byte queued `linger` ago and still unsent: a thread descheduled
/// between its writes, or Wine's slower calls, make such rounds. A coalescer whose
/// before-read did not flush leaves a linger flush in every round, its writes quick.
pub fn assert_lingers_fit(lingered: usize, writing: &[Duration], linger: Duration) {
    let slow = writing.iter().filter(|d| **d >= linger).count();
    assert!(
        lingered <= (writing.len() / 10).max(slow),
        "{lingered} linger flushes; {slow} rounds wrote for the linger ({linger:?}) or longer: {writing:?}"
    );
}
