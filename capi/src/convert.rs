//! The conversions between the C structs and the library's types: a `nagless_policy` checked
//! and read into a [`FlushPolicy`] (`clocked` 1: [`FlushPolicy::clocked`], with `linger_us` 0) (and the defaults written back out), and the library's
//! [`Stats`] as a `nagless_stats`.

use std::io;
use std::time::Duration;

use libc::c_int;
use nagless::{FlushPolicy, Stats};

use crate::{einval, NaglessPolicy, NaglessStats};

/// The policy a `nagless_policy` describes, or `EINVAL` for a field out of range.
pub(crate) fn policy_from_c(p: &NaglessPolicy) -> io::Result<FlushPolicy> {
    let flag = |v: c_int| match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => einval(),
    };
    let linger = match p.linger_us {
        -1 => None,
        us if us >= 0 => Some(Duration::from_micros(us as u64)),
        _ => return einval(),
    };
    if p.high_water == 0 {
        return einval();
    }
    let base = if flag(p.clocked)? {
        // Nothing waits in the handle: a linger bound would end the clocking.
        if linger != Some(Duration::ZERO) {
            return einval();
        }
        FlushPolicy::clocked()
    } else {
        FlushPolicy::default().linger(linger)
    };
    Ok(base
        .before_read(flag(p.before_read)?)
        .threshold((p.threshold > 0).then_some(p.threshold))
        .high_water(p.high_water)
        .msg_more(flag(p.msg_more)?)
        .explicit_flush(flag(p.explicit_flush)?))
}

/// `policy` as a `nagless_policy` (`nagless_policy_default` gives the defaults this way).
pub(crate) fn policy_to_c(d: &FlushPolicy) -> NaglessPolicy {
    NaglessPolicy {
        before_read: c_int::from(d.is_before_read()),
        threshold: d.threshold_bytes().unwrap_or(0),
        linger_us: d
            .linger_deadline()
            .map_or(-1, |l| l.as_micros().min(i64::MAX as u128) as i64),
        high_water: d.high_water_bytes(),
        msg_more: 1,
        explicit_flush: c_int::from(d.is_explicit_flush()),
        clocked: c_int::from(d.is_clocked()),
    }
}

/// A handle's counters as a `nagless_stats`, with `pending` the bytes still queued.
pub(crate) fn stats_to_c(s: &Stats, pending: usize) -> NaglessStats {
    NaglessStats {
        writes: s.writes,
        bytes_written: s.bytes_written,
        flushes: s.flushes,
        syscalls: s.syscalls,
        would_block: s.would_block,
        bytes_sent: s.bytes_sent,
        pending: pending as u64,
        clock_checks: s.clock_checks,
        held_for_ack: s.held_for_ack,
        pushes: s.pushes,
    }
}
